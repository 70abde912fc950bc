#include "executor/frame_scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/thread_pool.hpp"
#include "compiler/ops.hpp"
#include "compiler/passes.hpp"

namespace loom::executor {

using compiler::CompiledStep;
using compiler::CompiledTensor;
using compiler::Placement;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kInFlightMax = 64;
constexpr int64_t kBatchMax = 4096;
constexpr size_t kStagingAlign = 64;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// CPU time of the calling thread: the executor's own work without the time it was preempted
// (the pool's workers run kernels on the same cores).
double thread_cpu_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

std::string dims_str(const std::vector<int64_t>& dims) { return compiler::shape_str(compiler::shape_of(dims)); }

size_t align_up(size_t n) { return (n + kStagingAlign - 1) / kStagingAlign * kStagingAlign; }

// One model input or output as the pipeline stages it: the tensor in the program, and where
// its rows sit in the slot's pinned staging buffer.
struct StagedTensor {
    int tensor = -1;
    std::string name;
    device::DType dtype = device::DType::F32;
    std::vector<int64_t> frame_dims;  // one frame's dims (dim 0 = 1 when batched)
    size_t frame_bytes = 0;           // one row
    size_t offset = 0;                // into the staging buffer; rows follow each other
};

}  // namespace

namespace detail {

struct FrameState {
    uint64_t frame = 0;
    std::vector<HostTensor> outputs;  // the caller's buffers to copy the outputs into, or empty
    bool device_io = false;           // submit_device: nothing to copy out
    std::atomic<bool> done{false};
    // Written under the core's mutex before `done` is set; read under it.
    Result<std::vector<HostTensor>> result{Status(StatusCode::INTERNAL, "frame not completed")};
    FrameStats stats;
};

struct Slot {
    enum class State : uint8_t { FREE, GATHERING, IN_FLIGHT };
    size_t index = 0;
    device::Stream stream;
    device::DeviceBuffer arena;
    device::PinnedBuffer<uint8_t> staging_in, staging_out;
    device::Event start, input_done, compute_done, end;
    // Prebuilt against this slot's arena and staging buffers.
    struct Copy {
        device::DevicePtr<uint8_t> device;
        size_t offset = 0;  // into the staging buffer
    };
    std::vector<Copy> copies_in, copies_out;
    PreparedProgram work;
    // The model's inputs and outputs in this slot's arena, for submit_device's SlotIo.
    std::vector<device::DevicePtr<uint8_t>> io_in, io_out;
    // submit_device: the caller's work around the model, set for the launch that runs it.
    const SlotWork* before = nullptr;
    const SlotWork* after = nullptr;
    // The inference in the slot; touched under the core's mutex, or by the one completing
    // thread once the slot is IN_FLIGHT and at the front of the queue.
    State state = State::FREE;
    std::vector<std::shared_ptr<FrameState>> frames;
    uint64_t inference = 0;
    Status submit_error;
    double wall_submit_ms = 0;
};

struct PipelineCore {
    // Set by create(), then read-only (close() clears the device objects after the last frame).
    FrameSchedulerOptions options;
    std::shared_ptr<LoadedModel> model;
    std::shared_ptr<const HostPlan> plan;  // host mode: the plan the slots were built from
    Program program;
    std::string source;
    std::string sink_name;
    std::vector<StagedTensor> inputs, outputs;
    // Per step of the program: the kernel state the first slot prepared, shared by every slot.
    std::vector<std::shared_ptr<const device::KernelState>> step_states;  // per launch (Program::launches)
    std::vector<std::vector<int64_t>> frame_dims, output_dims;
    Clock::time_point created = Clock::now();

    // Guarded by `mutex` (a slot being completed: see Slot).
    mutable std::mutex mutex;
    std::condition_variable cv;  // a completion finished
    std::vector<Slot> slots;
    std::deque<size_t> in_flight;  // slots in launch order
    size_t next_slot = 0;          // round robin: the oldest slot in flight when all are busy
    int gathering = -1;            // the slot gathering frames of the next inference
    bool completing = false;       // a thread is completing in_flight.front() without the lock
    uint64_t next_frame = 0;
    FrameSchedulerStats stats;

    Status build_slot(Slot& s, size_t index);
    Status check_inputs(std::span<const HostTensor> in, std::span<const HostTensor> out) const;
    void launch(std::unique_lock<std::mutex>& lock, Slot& s);
    Status submit_inference(Slot& s);
    void complete_oldest(std::unique_lock<std::mutex>& lock);
    Slot& take_slot(std::unique_lock<std::mutex>& lock, Clock::time_point& t0, double& cpu0);
    // With the lock held: waits for the thread completing the oldest inference, or completes
    // it. Returns false when nothing is in flight.
    bool progress(std::unique_lock<std::mutex>& lock);
    void wait_for(std::unique_lock<std::mutex>& lock, const FrameState& f);
    void flush(std::unique_lock<std::mutex>& lock);
    void close();
};

Status PipelineCore::build_slot(Slot& s, size_t index) {
    device::Device& dev = model->device();
    const CompiledModel& m = *program.m;
    s.index = index;
    s.stream = dev.create_stream();
    s.start = dev.create_event();
    s.input_done = dev.create_event();
    s.compute_done = dev.create_event();
    s.end = dev.create_event();
    const size_t arena_bytes = static_cast<size_t>(std::max<int64_t>(m.arena_bytes, 64));
    auto arena = dev.malloc(arena_bytes, "pipeline arena");
    if (!arena.ok())
        return arena.status().with_context(fmt::format("frame pipeline of {}: arena of slot {} of {} ({} bytes)",
                                                       source, index + 1, options.in_flight, arena_bytes));
    s.arena = std::move(*arena);
    const size_t rows = static_cast<size_t>(options.batch);
    size_t in_bytes = 0, out_bytes = 0;
    for (const StagedTensor& t : inputs) in_bytes = std::max(in_bytes, t.offset + rows * t.frame_bytes);
    for (const StagedTensor& t : outputs) out_bytes = std::max(out_bytes, t.offset + rows * t.frame_bytes);
    s.staging_in = device::PinnedBuffer<uint8_t>(in_bytes);
    s.staging_out = device::PinnedBuffer<uint8_t>(out_bytes);
    if (in_bytes) std::memset(s.staging_in.data(), 0, in_bytes);
    for (const StagedTensor& t : inputs)
        if (t.frame_bytes) s.copies_in.push_back({program.tensor_bytes(t.tensor, s.arena), t.offset});
    for (const StagedTensor& t : outputs)
        if (t.frame_bytes) s.copies_out.push_back({program.tensor_bytes(t.tensor, s.arena), t.offset});
    for (const StagedTensor& t : inputs) s.io_in.push_back(program.tensor_bytes(t.tensor, s.arena));
    for (const StagedTensor& t : outputs) s.io_out.push_back(program.tensor_bytes(t.tensor, s.arena));
    // The steps as Session runs them, built once (checks, costs, kernel states such as packed
    // weights), so a frame only places and queues the prepared work. A kernel's state depends on
    // its shapes, attributes and constant inputs only, which the slots share: the first slot
    // prepares it and the others take it (one copy of a conv's packed weights, not one per slot).
    LOOM_ASSIGN_OR_RETURN(s.work, PreparedProgram::build(program, s.arena, dev.spec(), &step_states));
    return {};
}

Status PipelineCore::check_inputs(std::span<const HostTensor> in, std::span<const HostTensor> out) const {
    auto check = [&](std::span<const HostTensor> given, const std::vector<StagedTensor>& want, const char* what) {
        if (given.size() != want.size())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} {}s given, the model has {}", source, given.size(),
                              what, want.size());
        for (size_t i = 0; i < given.size(); ++i) {
            const StagedTensor& t = want[i];
            if (given[i].dtype() != t.dtype || given[i].dims() != t.frame_dims)
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "{}: {} {} ('{}') is {} {}, a frame of the pipeline is {} {}", source, what, i,
                                  t.name, device::dtype_name(given[i].dtype()), dims_str(given[i].dims()),
                                  device::dtype_name(t.dtype), dims_str(t.frame_dims));
        }
        return Status();
    };
    LOOM_TRY(check(in, inputs, "input"));
    if (!out.empty()) LOOM_TRY(check(out, outputs, "output"));
    return {};
}

// Called with the lock held, for a slot that holds the frames of its inference: zeroes the rows
// no frame filled, then hands the prebuilt work to the runtime.
void PipelineCore::launch(std::unique_lock<std::mutex>& lock, Slot& s) {
    LOOM_ASSERT(lock.owns_lock() && s.state == Slot::State::GATHERING && !s.frames.empty());
    const auto t0 = Clock::now();
    const double cpu0 = thread_cpu_ms();
    const size_t filled = s.frames.size();
    if (filled < static_cast<size_t>(options.batch))
        for (const StagedTensor& t : inputs)
            std::memset(s.staging_in.data() + t.offset + filled * t.frame_bytes, 0,
                        (static_cast<size_t>(options.batch) - filled) * t.frame_bytes);
    s.state = Slot::State::IN_FLIGHT;
    s.inference = stats.inferences++;
    gathering = -1;
    in_flight.push_back(s.index);
    stats.in_flight_max = std::max(stats.in_flight_max, in_flight.size());
    s.submit_error = submit_inference(s);
    const double wall = ms_between(t0, Clock::now());
    s.wall_submit_ms += wall;
    stats.wall_submit_ms += wall;
    stats.cpu_submit_ms += thread_cpu_ms() - cpu0;
}

// The hot path: events around the stages, copies from and to the pinned staging buffers, and
// the prepared segments; nothing is looked up, costed or copied here.
Status PipelineCore::submit_inference(Slot& s) {
    device::Stream& st = s.stream;
    const uint64_t first = s.frames.front()->frame, last = s.frames.back()->frame;
    // Copies are named by their frames in a trace; without one no name is kept, so none is made.
    std::string in_name = "frames in", out_name = "frames out";
    if (model->device().tracing()) {
        const std::string tag = first == last ? fmt::format("frame {}", first) : fmt::format("frames {}-{}", first, last);
        in_name = tag + " in";
        out_name = tag + " out";
    }
    LOOM_TRY(st.record(s.start));
    const SlotIo io{s.index, first, &st, s.io_in, s.io_out};
    if (s.before) {
        LOOM_TRY((*s.before)(io));
    } else {
        for (const Slot::Copy& c : s.copies_in) {
            const device::HostView<const uint8_t> src(s.staging_in.data() + c.offset, c.device.size(), true);
            LOOM_TRY(st.copy_h2d(c.device, src, in_name));
        }
    }
    LOOM_TRY(st.record(s.input_done));
    LOOM_TRY(s.work.submit(st, sink_name));
    LOOM_TRY(st.record(s.compute_done));
    if (s.after) {
        LOOM_TRY((*s.after)(io));
    } else {
        for (const Slot::Copy& c : s.copies_out)
            LOOM_TRY(st.copy_d2h(device::HostView<uint8_t>(s.staging_out.data() + c.offset, c.device.size(), true),
                                 device::DevicePtr<const uint8_t>(c.device), out_name));
    }
    LOOM_TRY(st.record(s.end));
    return {};
}

// Called with the lock held and nothing being completed: completes the oldest inference, with
// the lock released while it waits for the device and copies outputs out.
void PipelineCore::complete_oldest(std::unique_lock<std::mutex>& lock) {
    LOOM_ASSERT(!completing && !in_flight.empty());
    completing = true;
    Slot& s = slots[in_flight.front()];
    lock.unlock();

    const auto t0 = Clock::now();
    // Waits for the slot's work, moves the host clock to its end, and reports and clears a
    // device error so the slot's next inference runs.
    Status st = s.stream.synchronize();
    const auto t1 = Clock::now();
    const double cpu1 = thread_cpu_ms();
    if (!s.submit_error.ok()) st = s.submit_error;
    auto sim_ms = [](const device::Event& e) {
        auto t = e.sim_time();
        return t.ok() ? device::sim_to_ms(*t) : 0.0;
    };
    FrameStats base;
    base.inference = s.inference;
    base.slot = s.index;
    base.batch_frames = s.frames.size();
    base.sim_start_ms = sim_ms(s.start);
    base.sim_input_done_ms = sim_ms(s.input_done);
    base.sim_compute_done_ms = sim_ms(s.compute_done);
    base.sim_end_ms = sim_ms(s.end);
    base.wall_submit_ms = s.wall_submit_ms;
    std::vector<Result<std::vector<HostTensor>>> results;
    results.reserve(s.frames.size());
    for (size_t row = 0; row < s.frames.size(); ++row) {
        if (!st.ok()) {
            results.emplace_back(st.with_context(fmt::format("{}: frame {}", source, s.frames[row]->frame)));
            continue;
        }
        if (s.frames[row]->device_io) {
            results.emplace_back(std::vector<HostTensor>{});
            continue;
        }
        std::vector<HostTensor> out = std::move(s.frames[row]->outputs);
        if (out.empty())
            for (const StagedTensor& t : outputs) out.emplace_back(t.dtype, t.frame_dims);
        for (size_t i = 0; i < outputs.size(); ++i) {
            const StagedTensor& t = outputs[i];
            if (t.frame_bytes)
                std::memcpy(out[i].data(), s.staging_out.data() + t.offset + row * t.frame_bytes, t.frame_bytes);
        }
        results.emplace_back(std::move(out));
    }
    const auto t2 = Clock::now();
    const double cpu2 = thread_cpu_ms();

    lock.lock();
    base.wall_complete_ms = ms_between(t1, t2);
    base.wall_done_ms = ms_between(created, t2);
    for (size_t row = 0; row < s.frames.size(); ++row) {
        FrameState& f = *s.frames[row];
        f.stats = base;
        f.stats.frame = f.frame;
        f.stats.batch_row = row;
        f.result = std::move(results[row]);
        stats.frames_failed += !f.result.ok();
        f.done.store(true, std::memory_order_release);
    }
    stats.frames_completed += s.frames.size();
    stats.wall_device_wait_ms += ms_between(t0, t1);
    stats.wall_complete_ms += ms_between(t1, t2);
    stats.cpu_complete_ms += cpu2 - cpu1;
    s.frames.clear();
    s.before = s.after = nullptr;
    s.submit_error = Status();
    s.wall_submit_ms = 0;
    s.state = Slot::State::FREE;
    in_flight.pop_front();
    completing = false;
    cv.notify_all();
}

// Joins the inference being gathered, or takes the next slot round robin. Back-pressure: when
// that slot is in flight (then it is the oldest), completes it first. Re-checked after every
// wait, since another thread may have taken the slot meanwhile. A wait is counted, and t0 and
// cpu0 restart after it so that submit times leave it out.
Slot& PipelineCore::take_slot(std::unique_lock<std::mutex>& lock, Clock::time_point& t0, double& cpu0) {
    bool blocked = false;
    while (gathering < 0) {
        Slot& next = slots[next_slot];
        if (next.state == Slot::State::FREE) {
            next.state = Slot::State::GATHERING;
            gathering = static_cast<int>(next_slot);
            next_slot = (next_slot + 1) % slots.size();
            break;
        }
        blocked = true;
        const bool moved = progress(lock);
        LOOM_ASSERT(moved);
    }
    if (blocked) {
        ++stats.submits_blocked;
        const auto t1 = Clock::now();
        stats.wall_blocked_ms += ms_between(t0, t1);
        t0 = t1;
        cpu0 = thread_cpu_ms();
    }
    return slots[static_cast<size_t>(gathering)];
}

bool PipelineCore::progress(std::unique_lock<std::mutex>& lock) {
    if (completing) {
        cv.wait(lock);
        return true;
    }
    if (in_flight.empty()) return false;
    complete_oldest(lock);
    return true;
}

void PipelineCore::wait_for(std::unique_lock<std::mutex>& lock, const FrameState& f) {
    while (!f.done.load(std::memory_order_acquire)) {
        if (gathering >= 0) {
            Slot& g = slots[static_cast<size_t>(gathering)];
            if (std::any_of(g.frames.begin(), g.frames.end(), [&](const auto& p) { return p.get() == &f; })) {
                launch(lock, g);  // a partial batch: the caller wants one of its frames now
                continue;
            }
        }
        const bool moved = progress(lock);
        LOOM_ASSERT_MSG(moved, "frame {} is neither gathered, in flight nor done", f.frame);
    }
}

void PipelineCore::flush(std::unique_lock<std::mutex>& lock) {
    if (gathering >= 0) launch(lock, slots[static_cast<size_t>(gathering)]);
    while (progress(lock)) {
    }
}

void PipelineCore::close() {
    std::unique_lock lock(mutex);
    flush(lock);
    // Frees the device memory now; futures keep this object (and their results) alive.
    slots.clear();
    plan.reset();
    program = Program();
    model.reset();
}

}  // namespace detail

uint64_t FrameFuture::frame() const { return state_ ? state_->frame : 0; }

bool FrameFuture::done() const { return state_ && state_->done.load(std::memory_order_acquire); }

Result<std::vector<HostTensor>> FrameFuture::get(FrameStats* stats) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "FrameFuture::get on an empty future");
    std::unique_lock lock(core_->mutex);
    core_->wait_for(lock, *state_);
    if (stats) *stats = state_->stats;
    return state_->result;
}

Result<std::unique_ptr<FrameScheduler>> FrameScheduler::create(std::shared_ptr<LoadedModel> model,
                                                             FrameSchedulerOptions options) {
    auto core = std::make_shared<detail::PipelineCore>();
    const CompiledModel& src = model->model();
    core->source = src.source;
    core->sink_name = src.name.empty() ? src.source : src.name;
    if (options.in_flight < 1 || options.in_flight > kInFlightMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame pipeline: in_flight {} (1 to {})", src.source,
                          options.in_flight, kInFlightMax);
    if (options.batch < 1 || options.batch > kBatchMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame pipeline: batch {} (1 to {})", src.source,
                          options.batch, kBatchMax);
    if (model->host_mode()) {
        const compiler::Graph& g = src.graph;
        if (options.input_dims.size() != g.inputs.size())
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: a host-mode model runs in a frame pipeline at fixed input shapes: {} input dims "
                              "given, the model has {} inputs",
                              src.source, options.input_dims.size(), g.inputs.size());
        std::vector<HostTensor> probe;
        for (size_t i = 0; i < g.inputs.size(); ++i)
            probe.emplace_back(g.value(g.inputs[i]).dtype, options.input_dims[i]);
        LOOM_ASSIGN_OR_RETURN(core->plan, model->host_plan(probe));
        core->program = Program::of_host_plan(*model, *core->plan);
    } else {
        if (!options.input_dims.empty())
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: input_dims is for host-mode models; this sink-mode model runs at its compiled "
                              "shapes",
                              src.source);
        core->program = Program::of_sink(*model);
    }
    const CompiledModel& m = *core->program.m;
    const int64_t batch = options.batch;
    // Stages the model's inputs and outputs: with batching, dim 0 of each must be the batch.
    auto stage = [&](const std::vector<int>& ids, const char* what,
                     std::vector<StagedTensor>& staged) -> Status {
        size_t offset = 0;
        for (size_t i = 0; i < ids.size(); ++i) {
            const CompiledTensor& t = m.tensors[static_cast<size_t>(ids[i])];
            if (batch > 1 && (t.dims.empty() || t.dims[0] != batch))
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "{}: cannot batch {} frames per inference: {} {} ('{}') is {}, and batching needs "
                                  "dim 0 = {} on every input and output; compile the model at batch {} "
                                  "(compiler::compile_for_batch, `loomc bench --batch`), which needs a symbolic batch dim",
                                  src.source, batch, what, i, t.name, dims_str(t.dims), batch, batch);
            StagedTensor s;
            s.tensor = ids[i];
            s.name = t.name;
            s.dtype = t.dtype;
            s.frame_dims = t.dims;
            if (batch > 1) s.frame_dims[0] = 1;
            s.frame_bytes = static_cast<size_t>(t.bytes) / static_cast<size_t>(batch);
            s.offset = offset;
            offset = align_up(offset + s.frame_bytes * static_cast<size_t>(batch));
            staged.push_back(std::move(s));
        }
        return {};
    };
    LOOM_TRY(stage(m.inputs, "input", core->inputs));
    LOOM_TRY(stage(m.outputs, "output", core->outputs));
    for (const auto& t : core->inputs) core->frame_dims.push_back(t.frame_dims);
    for (const auto& t : core->outputs) core->output_dims.push_back(t.frame_dims);
    core->options = std::move(options);
    core->model = std::move(model);
    core->slots.resize(core->options.in_flight);
    // A sink model's kernel states are the same for every arena: another scheduler of the model
    // (another engine on the device context) prepared them already, or this one keeps them for
    // the next.
    const bool sink = !core->model->host_mode();
    if (sink) core->step_states = core->model->sink_kernel_states();
    for (size_t i = 0; i < core->slots.size(); ++i) LOOM_TRY(core->build_slot(core->slots[i], i));
    if (sink) core->model->keep_sink_kernel_states(core->step_states);
    return std::unique_ptr<FrameScheduler>(new FrameScheduler(std::move(core)));
}

FrameScheduler::~FrameScheduler() { core_->close(); }

Result<FrameFuture> FrameScheduler::submit(std::span<const HostTensor> inputs, std::span<HostTensor> outputs) {
    detail::PipelineCore& c = *core_;
    LOOM_TRY(c.check_inputs(inputs, outputs));
    std::unique_lock lock(c.mutex);
    auto t0 = Clock::now();
    double cpu0 = thread_cpu_ms();
    detail::Slot& s = c.take_slot(lock, t0, cpu0);
    const size_t row = s.frames.size();
    for (size_t i = 0; i < inputs.size(); ++i) {
        const StagedTensor& t = c.inputs[i];
        if (t.frame_bytes)
            std::memcpy(s.staging_in.data() + t.offset + row * t.frame_bytes, inputs[i].data(), t.frame_bytes);
    }
    auto state = std::make_shared<detail::FrameState>();
    state->frame = c.next_frame++;
    state->outputs.assign(outputs.begin(), outputs.end());
    s.frames.push_back(state);
    ++c.stats.frames_submitted;
    s.wall_submit_ms += ms_between(t0, Clock::now());
    c.stats.wall_submit_ms += ms_between(t0, Clock::now());
    c.stats.cpu_submit_ms += thread_cpu_ms() - cpu0;
    if (s.frames.size() == static_cast<size_t>(c.options.batch)) c.launch(lock, s);
    FrameFuture f;
    f.core_ = core_;
    f.state_ = std::move(state);
    return f;
}

Result<FrameFuture> FrameScheduler::submit_device(const SlotWork& before, const SlotWork& after) {
    detail::PipelineCore& c = *core_;
    if (c.options.batch != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: submit_device runs one frame per inference (batch {})",
                          c.source, c.options.batch);
    if (!before || !after)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: submit_device needs both `before` and `after`", c.source);
    std::unique_lock lock(c.mutex);
    auto t0 = Clock::now();
    double cpu0 = thread_cpu_ms();
    detail::Slot& s = c.take_slot(lock, t0, cpu0);
    auto state = std::make_shared<detail::FrameState>();
    state->frame = c.next_frame++;
    state->device_io = true;
    s.frames.push_back(state);
    s.before = &before;
    s.after = &after;
    ++c.stats.frames_submitted;
    s.wall_submit_ms += ms_between(t0, Clock::now());
    c.stats.wall_submit_ms += ms_between(t0, Clock::now());
    c.stats.cpu_submit_ms += thread_cpu_ms() - cpu0;
    c.launch(lock, s);  // runs `before` and `after` now: they need not outlive this call
    FrameFuture f;
    f.core_ = core_;
    f.state_ = std::move(state);
    return f;
}

void FrameScheduler::flush() {
    std::unique_lock lock(core_->mutex);
    core_->flush(lock);
}

const std::vector<std::vector<int64_t>>& FrameScheduler::frame_dims() const { return core_->frame_dims; }

const std::vector<std::vector<int64_t>>& FrameScheduler::output_dims() const { return core_->output_dims; }

std::vector<HostTensor> FrameScheduler::make_outputs() const {
    std::vector<HostTensor> out;
    for (const StagedTensor& t : core_->outputs) out.emplace_back(t.dtype, t.frame_dims);
    return out;
}

const FrameSchedulerOptions& FrameScheduler::options() const { return core_->options; }

FrameSchedulerStats FrameScheduler::stats() const {
    std::lock_guard lock(core_->mutex);
    return core_->stats;
}

namespace {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

Result<PipelineRunReport> run_frames(FrameScheduler& pipeline, std::span<const std::vector<HostTensor>> inputs,
                                     size_t frames, bool reuse_outputs) {
    if (inputs.empty() || frames == 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "run_frames: no inputs or no frames to run");
    const FrameSchedulerStats before = pipeline.stats();
    PipelineRunReport r;
    r.frames = frames;
    std::vector<FrameStats> inf;  // one entry per inference: its first frame's stats
    // As a consumer would: takes each completed frame's outputs as soon as it is done, and
    // (with reuse_outputs) hands its buffers to a later frame.
    struct Pending {
        FrameFuture future;
        std::vector<HostTensor> outputs;
    };
    std::deque<Pending> pending;
    std::vector<std::vector<HostTensor>> free_outputs;
    auto take = [&] {
        FrameStats st;
        r.frames_failed += !pending.front().future.get(&st).ok();
        if (inf.empty() || inf.back().inference != st.inference) inf.push_back(st);
        if (reuse_outputs) free_outputs.push_back(std::move(pending.front().outputs));
        pending.pop_front();
    };
    const auto t0 = Clock::now();
    for (size_t i = 0; i < frames; ++i) {
        Pending p;
        if (reuse_outputs) {
            if (free_outputs.empty()) {
                p.outputs = pipeline.make_outputs();  // zeroed: touched once, here
            } else {
                p.outputs = std::move(free_outputs.back());
                free_outputs.pop_back();
            }
        }
        LOOM_ASSIGN_OR_RETURN(p.future, pipeline.submit(inputs[i % inputs.size()], p.outputs));
        pending.push_back(std::move(p));
        while (!pending.empty() && pending.front().future.done()) take();
    }
    while (!pending.empty()) take();
    r.wall_ms = ms_between(t0, Clock::now());
    r.inferences = inf.size();
    const FrameSchedulerStats after = pipeline.stats();
    r.pipeline = after;
    const double batch = static_cast<double>(pipeline.options().batch);

    // Full inferences only for rates: a padded last batch does a full batch's work.
    size_t full = inf.size();
    while (full > 1 && inf[full - 1].batch_frames < static_cast<size_t>(batch)) --full;
    const size_t k = pipeline.options().in_flight;
    // Completions come in bursts of up to k (the pool runs the frames in flight side by side),
    // so the wall time per inference is taken over k completions at a time.
    std::vector<double> wall_gaps, latencies;
    for (size_t i = k; i < full; ++i)
        wall_gaps.push_back((inf[i].wall_done_ms - inf[i - k].wall_done_ms) / static_cast<double>(k));
    for (const FrameStats& s : inf) latencies.push_back(s.sim_end_ms - s.sim_start_ms);
    r.wall_ms_per_frame = wall_gaps.empty() ? r.wall_ms / static_cast<double>(frames) : median(wall_gaps) / batch;
    r.sim_latency_ms = median(latencies);
    r.sim_makespan_ms = inf.back().sim_end_ms - inf.front().sim_start_ms;
    const size_t skip = full > k + 1 ? k : 0;  // steady state: after the pipeline filled up
    const double period = full > skip + 1 ? (inf[full - 1].sim_end_ms - inf[skip].sim_end_ms) /
                                                static_cast<double>(full - 1 - skip)
                                          : inf[0].sim_end_ms - inf[0].sim_start_ms;
    r.sim_ms_per_frame = period / batch;
    r.sim_fps = r.sim_ms_per_frame > 0 ? 1000.0 / r.sim_ms_per_frame : 0;
    const FrameStats& first = inf.front();
    r.stage_h2d_ms = first.sim_input_done_ms - first.sim_start_ms;
    r.stage_compute_ms = first.sim_compute_done_ms - first.sim_input_done_ms;
    r.stage_d2h_ms = first.sim_end_ms - first.sim_compute_done_ms;
    const double slowest = std::max({r.stage_h2d_ms, r.stage_compute_ms, r.stage_d2h_ms});
    const double stages = r.stage_h2d_ms + r.stage_compute_ms + r.stage_d2h_ms;
    const double copies = r.stage_h2d_ms + r.stage_d2h_ms;
    if (slowest > 0) r.steady_over_slowest = period / slowest;
    if (period > 0) r.overlap = stages / period;
    if (copies > 0) r.copies_hidden = std::clamp((stages - period) / copies, 0.0, 1.0);
    const double executor_ms = (after.wall_submit_ms - before.wall_submit_ms) +
                               (after.wall_complete_ms - before.wall_complete_ms);
    const double executor_cpu_ms = (after.cpu_submit_ms - before.cpu_submit_ms) +
                                   (after.cpu_complete_ms - before.cpu_complete_ms);
    r.executor_ms_per_frame = executor_ms / static_cast<double>(frames);
    r.executor_fraction = r.wall_ms > 0 ? executor_ms / r.wall_ms : 0;
    r.executor_cpu_ms_per_frame = executor_cpu_ms / static_cast<double>(frames);
    r.executor_cpu_fraction = r.wall_ms > 0 ? executor_cpu_ms / r.wall_ms : 0;
    return r;
}

}  // namespace loom::executor
