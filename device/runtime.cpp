#include "device/runtime.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/buffer.hpp"
#include "common/thread_pool.hpp"
#include "device/core.hpp"
#include "device/media.hpp"

namespace loom::device {

namespace detail {

namespace {
// Device addresses start here so that a zero or small integer is never a valid address.
constexpr uint64_t kDeviceBase = 0x1'0000'0000ull;
// Trace arrows kept into a stream's next task (StreamState::flow_from).
constexpr size_t kFlowFromMax = 64;

Status root_error(const Task& t) { return t.upstream.ok() ? t.status : t.upstream; }
bool is_marker(const Task& t) { return t.kind == TaskKind::RECORD || t.kind == TaskKind::WAIT; }
}  // namespace

StreamState::~StreamState() {
    if (first_error.ok()) return;
    if (auto c = core_ref.lock()) {
        std::lock_guard graph(c->graph_mutex);
        if (c->dropped_error.ok()) c->dropped_error = std::move(first_error);
    }
}

Core::Core(const DeviceSpec& s, const DeviceOptions& o)
    : spec(s), spec_hash(s.hash()), options(o), pool(o.pool ? o.pool : &ThreadPool::global()),
      arena(static_cast<uint64_t>(s.memory_bytes()), static_cast<uint64_t>(s.memory_alignment_bytes)) {
    engines.reserve(kEngineCount);
    for (size_t e = 0; e < kEngineCount; ++e)
        engines.emplace_back(static_cast<Engine>(e) == Engine::AICORE ? static_cast<size_t>(s.aicore_count) : 1);
}

void Core::note_memory_locked() {
    if (!options.trace) return;
    if (memory_counter.size() < options.trace_tasks_max)
        memory_counter.emplace_back(host_now, arena.used());
    else
        ++trace_memory_dropped;
}

double Core::wall_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - wall_origin).count();
}

Allocation* Core::find_allocation(uint64_t addr, size_t bytes) {
    auto it = allocations.upper_bound(addr);
    if (it == allocations.begin()) return nullptr;
    auto& [base, a] = *std::prev(it);
    return addr >= base && addr - base <= a.bytes && bytes <= a.bytes - (addr - base) ? &a : nullptr;
}

Status Core::check_range(uint64_t addr, size_t bytes, std::string_view kind, std::string_view name) {
    if (find_allocation(addr, bytes)) return {};
    return make_error(StatusCode::INVALID_ARGUMENT,
                      "{} '{}': device range [0x{:x}, +{}) is not inside a live allocation (freed or foreign "
                      "pointer?)",
                      kind, name, addr, bytes);
}

// Called with submit_mutex held: makes `task` the stream's last task, after the stream's previous
// task and `extra_preds` in the functional graph. Returns the task when it is ready to dispatch now.
static std::shared_ptr<Task> chain_locked(Core& c, StreamState& stream, std::shared_ptr<Task> task,
                                          const std::vector<std::shared_ptr<Task>>& extra_preds) {
    task->owner = stream.shared_from_this();
    std::shared_ptr<Task> prev = std::move(stream.last);
    stream.last = task;
    c.inflight.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard graph(c.graph_mutex);
    auto link = [&](const std::shared_ptr<Task>& p) {
        if (!p) return;
        if (!p->linked_done) {
            p->successors.push_back(task);
            ++task->pending;
        } else if (!p->status.ok() && task->upstream.ok()) {
            task->upstream = root_error(*p);
        }
    };
    link(prev);
    for (const auto& p : extra_preds) link(p);
    return task->pending == 0 ? task : nullptr;
}

// Called with submit_mutex held. Returns the task when it is ready to dispatch now.
static std::shared_ptr<Task> submit_locked(Core& c, StreamState& stream, std::shared_ptr<Task> task,
                                           SimTime duration, size_t lanes_needed,
                                           const std::vector<std::shared_ptr<Task>>& extra_preds,
                                           const std::vector<uint64_t>& extra_flows, SimTime extra_ready,
                                           const std::optional<CycleBreakdown>& cycles, uint64_t bytes,
                                           bool sink = false) {
    task->id = c.next_task_id++;
    task->stream = stream.id;
    SimTime ready = std::max({c.host_now, stream.last_end, extra_ready});
    std::vector<uint16_t> lanes;
    if (is_marker(*task)) {
        task->start = task->end = ready;
    } else {
        size_t e = static_cast<size_t>(task->engine);
        uint64_t nth = ++c.engine_tasks[e];
        const FaultPlan& f = c.options.faults;
        if (f.stall && f.stall_engine == task->engine && static_cast<int64_t>(nth) == f.stall_task) {
            // The engine hangs on this task; the watchdog fires after its timeout, frees the
            // engine and fails the task. Nothing waits in wall time.
            duration = sim_from_ns(c.spec.watchdog_ms * 1e6);
            task->injected = make_error(StatusCode::DEVICE_TIMEOUT,
                                        "engine {} stalled on task '{}' (stream {}, task #{} on the engine, injected); "
                                        "the {} ms watchdog fired",
                                        engine_name(task->engine), task->name, stream.id, nth, c.spec.watchdog_ms);
        }
        duration = std::max<SimTime>(duration, 1);
        c.engines[e].prune(c.host_now);
        task->start = c.engines[e].place(ready, duration, lanes_needed, lanes);
        task->end = task->start + duration;
        c.engine_busy[e] += duration * static_cast<SimTime>(lanes_needed);
        c.engine_bytes[e] += bytes;
    }
    c.sim_now = std::max(c.sim_now, task->end);
    stream.last_end = task->end;

    if (!is_marker(*task)) {
        if (c.options.trace) {
            if (c.records.size() < c.options.trace_tasks_max) {
                TaskRecord r{task->id, task->name, task->kind, task->engine, stream.id, std::move(lanes),
                             task->start, task->end, stream.flow_from, cycles, bytes};
                r.sink = sink;
                task->record = c.records.size();
                c.records.push_back(std::move(r));
            } else {
                ++c.trace_dropped;
            }
        }
        if (c.options.trace) stream.flow_from.assign(1, task->id);
    } else if (task->kind == TaskKind::WAIT && c.options.trace) {
        // Only the trace's arrows use these; a stream that waits again and again without real
        // work between keeps the latest few distinct ones.
        for (uint64_t id : extra_flows)
            if (std::find(stream.flow_from.begin(), stream.flow_from.end(), id) == stream.flow_from.end())
                stream.flow_from.push_back(id);
        if (stream.flow_from.size() > kFlowFromMax)
            stream.flow_from.erase(stream.flow_from.begin(),
                                   stream.flow_from.end() - static_cast<std::ptrdiff_t>(kFlowFromMax));
    }

    return chain_locked(c, stream, std::move(task), extra_preds);
}

// Whether a ready task finishes on the thread that found it ready: markers and skipped tasks
// have nothing to compute. A callback always runs as a pool job.
static bool finishes_inline(const Task& t) {
    return t.kind != TaskKind::CALLBACK && (is_marker(t) || !t.upstream.ok());
}

void Core::dispatch(std::shared_ptr<Task> task) {
    if (finishes_inline(*task)) {
        complete(task, execute(*task));  // no pool hop
        return;
    }
    pool->submit([this, task = std::move(task)] { complete(task, execute(*task)); });
}

Status Core::execute(Task& task) {
    if (task.kind == TaskKind::CALLBACK) {
        // The callback sees the first error of the work before it and passes it on untouched,
        // as a marker does, so the stream's error state is what it would be without it.
        Status upstream = task.upstream;
        try {
            task.callback(upstream);
        } catch (const std::exception& e) {
            LOOM_ASSERT_MSG(false, "stream {} callback threw: {}", task.stream, e.what());
        }
        task.callback = nullptr;  // release what it captured now, not when the task is dropped
        return upstream;
    }
    double wall_start = options.trace ? wall_us() : 0;
    Status st;
    if (!task.upstream.ok()) {
        // Markers pass the error on untouched; a skipped real task says so.
        st = is_marker(task) ? task.upstream
                             : Status(task.upstream.code(), fmt::format("{} [task '{}' on stream {} skipped]",
                                                                        task.upstream.message(), task.name,
                                                                        task.stream));
    } else if (!is_marker(task) && task.owner && task.owner->aborting()) {
        st = Status(StatusCode::CANCELLED,
                    fmt::format("task '{}' on stream {} abandoned: the stream was aborted", task.name, task.stream));
    } else if (!task.injected.ok()) {
        st = task.injected;
    } else if (task.work) {
        try {
            st = task.work();
        } catch (const std::exception& e) {
            st = make_error(StatusCode::INTERNAL, "task '{}' threw: {}", task.name, e.what());
        }
        task.work = nullptr;  // release captured launch arguments early
    }
    if (options.trace && task.record != SIZE_MAX) {
        std::lock_guard lock(submit_mutex);
        TaskRecord& r = records[task.record];
        r.wall_start_us = wall_start;
        r.wall_end_us = wall_us();
        r.failed = !st.ok();
    }
    return st;
}

void Core::complete(std::shared_ptr<Task> first, Status first_status) {
    std::vector<std::pair<std::shared_ptr<Task>, Status>> work{{std::move(first), std::move(first_status)}};
    std::vector<std::shared_ptr<Task>> ready;
    while (!work.empty()) {
        auto [task, st] = std::move(work.back());
        work.pop_back();
        ready.clear();
        // Dropped after the lock: it may be the stream's last reference.
        std::shared_ptr<StreamState> owner = std::move(task->owner);
        {
            std::lock_guard graph(graph_mutex);
            task->status = std::move(st);
            if (!task->status.ok() && owner && owner->first_error.ok()) owner->first_error = task->status;
            // The last holder of a dropped stream hands its unreported error over here, before
            // the stream's weak references expire: Device::synchronize, which locks them under
            // this mutex, then finds either the stream or its error, never neither.
            if (owner && owner.use_count() == 1 && !owner->first_error.ok() && dropped_error.ok())
                dropped_error = std::exchange(owner->first_error, Status());
            for (auto& s : task->successors) {
                if (!task->status.ok() && s->upstream.ok()) s->upstream = root_error(*task);
                if (--s->pending == 0) ready.push_back(std::move(s));
            }
            task->successors.clear();
            task->linked_done = true;
        }
        // A waiter that sees `done` sees the stream released too (its last reference may have
        // been this task's), so a synchronize that returns leaves no stream alive behind it.
        owner.reset();
        task->done.store(true, std::memory_order_release);
        const bool drained = inflight.fetch_sub(1, std::memory_order_acq_rel) == 1;
        // Host threads waiting on this task (wait) or on every task (wait_all) sleep in the
        // pool's wait_until until told; the fence orders the done store above before the read
        // of `awaited` (wait stores `awaited` before it reads `done`).
        std::atomic_thread_fence(std::memory_order_seq_cst);
        if (drained || task->awaited.load(std::memory_order_relaxed)) pool->notify_waiters();
        for (auto& r : ready) {
            // Finished here rather than through dispatch: a long skipped chain after a fault
            // must not recurse once per task.
            if (finishes_inline(*r)) {
                Status rs = execute(*r);
                work.emplace_back(std::move(r), std::move(rs));
            } else {
                dispatch(std::move(r));
            }
        }
    }
}

void Core::wait(const std::shared_ptr<Task>& task) {
    if (task->done.load(std::memory_order_acquire)) return;
    task->awaited.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // see complete()
    pool->wait_until([&] { return task->done.load(std::memory_order_acquire); });
}

void Core::wait_all() {
    if (inflight.load(std::memory_order_acquire) == 0) return;
    pool->wait_until([&] { return inflight.load(std::memory_order_acquire) == 0; });
}

void Core::note_use_locked(std::vector<std::shared_ptr<Task>>& users, const std::shared_ptr<Task>& task) {
    // A stream's tasks finish in stream order, so its latest one stands for all of them.
    std::erase_if(users, [&](const std::shared_ptr<Task>& u) {
        return u->stream == task->stream || u->done.load(std::memory_order_acquire);
    });
    users.push_back(task);
}

void Core::free(uint64_t addr) {
    // Like cudaFree, no task may still use the memory; but only the tasks that named this
    // allocation (and host tasks that did not say what they touch) can, not every job's work.
    std::vector<std::shared_ptr<Task>> users;
    {
        std::lock_guard lock(submit_mutex);
        auto it = allocations.find(addr);
        LOOM_ASSERT_MSG(it != allocations.end(), "free of unknown device address 0x{:x}", addr);
        users = std::move(it->second.users);
        users.insert(users.end(), host_any.begin(), host_any.end());
    }
    for (const auto& t : users) wait(t);
    std::lock_guard lock(submit_mutex);
    auto it = allocations.find(addr);
    LOOM_ASSERT_MSG(it != allocations.end(), "free of unknown device address 0x{:x}", addr);
    // The host has waited for every task that named it (and every undeclared host task), so its
    // clock reaches the latest end among them.
    host_now = std::max({host_now, it->second.users_end, host_any_end});
    arena.release(it->second.offset);
    free_buffer(it->second.host, it->second.bytes);
    allocations.erase(it);
    note_memory_locked();
}

}  // namespace detail

using detail::Core;
using detail::Task;
using detail::TaskKind;

// ---- DeviceBuffer ----

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : core_(std::move(o.core_)), host_(o.host_), addr_(o.addr_), bytes_(o.bytes_) {
    o.host_ = nullptr;
    o.addr_ = 0;
    o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        reset();
        core_ = std::move(o.core_);
        host_ = o.host_;
        addr_ = o.addr_;
        bytes_ = o.bytes_;
        o.host_ = nullptr;
        o.addr_ = 0;
        o.bytes_ = 0;
    }
    return *this;
}

void DeviceBuffer::reset() {
    if (core_ && host_) core_->free(addr_);
    core_.reset();
    host_ = nullptr;
    addr_ = 0;
    bytes_ = 0;
}

// ---- Event ----

Status Event::synchronize() {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "event: not created by a device");
    Core& c = *state_->core;
    std::shared_ptr<Task> task;
    SimTime time;
    {
        std::lock_guard lock(c.submit_mutex);
        if (!state_->recorded) return make_error(StatusCode::FAILED_PRECONDITION, "event: synchronize before record");
        task = state_->task;
        time = state_->time;
    }
    c.wait(task);
    std::lock_guard lock(c.submit_mutex);
    c.host_now = std::max(c.host_now, time);
    return task->status;
}

bool Event::query() const {
    if (!state_) return false;
    std::lock_guard lock(state_->core->submit_mutex);
    return state_->recorded && state_->task->done.load(std::memory_order_acquire);
}

Result<SimTime> Event::sim_time() const {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "event: not created by a device");
    std::lock_guard lock(state_->core->submit_mutex);
    if (!state_->recorded) return make_error(StatusCode::FAILED_PRECONDITION, "event: never recorded");
    return state_->time;
}

Result<double> Event::elapsed_ms(const Event& start, const Event& end) {
    LOOM_ASSIGN_OR_RETURN(SimTime a, start.sim_time());
    LOOM_ASSIGN_OR_RETURN(SimTime b, end.sim_time());
    return sim_to_ms(b - a);
}

// ---- Stream ----

uint32_t Stream::id() const { return state_ ? state_->id : UINT32_MAX; }

Status Stream::size_mismatch(const char* op, size_t a, size_t b) {
    return make_error(StatusCode::INVALID_ARGUMENT, "{}: source has {} elements, destination {}", op, a, b);
}

namespace {

struct WorkTask {
    WorkTask(Engine e, TaskKind k, std::string_view n, SimTime d) : engine(e), kind(k), name(n), duration(d) {}
    Engine engine;
    TaskKind kind;
    std::string_view name;
    SimTime duration;
    size_t lanes = 1;
    std::function<Status()> work;
    Status injected;
    std::optional<CycleBreakdown> cycles;
    uint64_t bytes = 0;
    SimTime host_cost = 0;  // advances the host clock before the task becomes ready
    bool sink = false;      // dispatched by the on-chip scheduler (launch_sink)
    bool touches_any = false;  // a host task that did not declare its device ranges
};

using Ranges = std::vector<DeviceRange>;

// Called with submit_mutex held: fails naming the task when a range is not inside a live
// allocation.
Status check_ranges_locked(Core& c, const WorkTask& w, std::span<const DeviceRange> ranges) {
    for (auto [addr, bytes] : ranges)
        if (addr) LOOM_TRY(c.check_range(addr, bytes, w.kind == TaskKind::KERNEL ? "kernel" : "task", w.name));
    return {};
}

// Called with submit_mutex held, after the range check: counts the task for fault injection,
// advances the host clock by its host cost, places it (ready no earlier than `extra_ready`) and
// queues it; notes it as a user of the allocations `ranges` lie in. Returns the task when it is
// ready to dispatch now.
std::shared_ptr<Task> place_locked(Core& c, detail::StreamState& s, WorkTask w, std::span<const DeviceRange> ranges,
                                   int64_t Core::*fault_counter, SimTime extra_ready) {
    auto task = std::make_shared<Task>();
    task->kind = w.kind;
    task->engine = w.engine;
    task->name = std::string(w.name);
    task->work = std::move(w.work);
    if (fault_counter) {
        int64_t n = ++(c.*fault_counter);
        const FaultPlan& f = c.options.faults;
        if (fault_counter == &Core::launches && n == f.fail_launch)
            task->injected = make_error(StatusCode::DEVICE_FAULT,
                                        "AI core exception in kernel '{}' (launch #{} on stream {}, injected)", w.name,
                                        n, s.id);
        if (fault_counter == &Core::copies && n == f.fail_copy)
            task->injected = make_error(StatusCode::DEVICE_FAULT,
                                        "DMA error in {} copy '{}' of {} bytes (copy #{} on stream {}, injected)",
                                        engine_name(w.engine), w.name, w.bytes, n, s.id);
    }
    c.host_now += w.host_cost;
    auto ready = detail::submit_locked(c, s, task, w.duration, w.lanes, {}, {}, extra_ready, w.cycles, w.bytes,
                                       w.sink);
    // After placement: the users' latest end (what a free advances the host clock to) must come
    // from submission order alone, not from which users had finished in wall time.
    if (w.touches_any) {
        c.note_use_locked(c.host_any, task);
        c.host_any_end = std::max(c.host_any_end, task->end);
    }
    for (auto [addr, bytes] : ranges)
        if (addr)
            if (detail::Allocation* a = c.find_allocation(addr, bytes)) {
                c.note_use_locked(a->users, task);
                a->users_end = std::max(a->users_end, task->end);
            }
    return ready;
}

// Checks the device ranges, then places and queues the task; all under one lock so the
// fault counters and the timeline follow submission order exactly.
Status submit_work(detail::StreamState* s, WorkTask w, const Ranges& ranges, int64_t Core::*fault_counter) {
    if (!s) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    Core& c = *s->core;
    std::shared_ptr<Task> ready;
    {
        std::lock_guard lock(c.submit_mutex);
        LOOM_TRY(check_ranges_locked(c, w, ranges));
        ready = place_locked(c, *s, std::move(w), ranges, fault_counter, 0);
    }
    if (ready) c.dispatch(std::move(ready));
    return {};
}

// A prepared kernel launch as a task (its work is set by the caller): timed from its cycles,
// charged the host launch overhead unless it is part of a sink submission.
WorkTask kernel_work(const Core& c, const PreparedLaunch& p, bool sink) {
    WorkTask w{Engine::AICORE, TaskKind::KERNEL, p.name, p.duration};
    w.lanes = static_cast<size_t>(p.cycles.cores_used);
    w.cycles = p.cycles;
    w.bytes = p.bytes;
    w.sink = sink;
    if (!sink) w.host_cost = sim_from_ns(c.spec.launch_overhead_us * 1e3);
    return w;
}

// Places a sink submission of `tasks` on `s`: one launch overhead on the host clock, each task
// dispatched by the on-chip scheduler after its predecessor. `works[i]` is task i's work; empty
// `works`: each task runs its prepared launch in place (the caller keeps `tasks` alive).
Status place_sink(Core& c, detail::StreamState& s, std::span<const PreparedLaunch> tasks,
                  std::vector<std::function<Status()>> works, std::string_view name) {
    const SimTime dispatch = sim_from_ns(c.spec.launch_sink_task_ns);
    ThreadPool* pool = c.pool;
    std::vector<std::shared_ptr<Task>> ready;
    {
        std::lock_guard lock(c.submit_mutex);
        for (size_t i = 0; i < tasks.size(); ++i)
            if (Status st = check_ranges_locked(c, kernel_work(c, tasks[i], true), tasks[i].ranges); !st.ok())
                return st.with_context(fmt::format("sink '{}' task {}", name, i));
        c.host_now += sim_from_ns(c.spec.launch_overhead_us * 1e3);
        for (size_t i = 0; i < tasks.size(); ++i) {
            const PreparedLaunch& p = tasks[i];
            WorkTask w = kernel_work(c, p, true);
            if (works.empty())
                w.work = [&p, pool] { return run_kernel_launch(*p.kernel, p.launch, *pool); };
            else
                w.work = std::move(works[i]);
            // The on-chip scheduler dispatches a task once its predecessor has finished.
            const SimTime at = std::max(c.host_now, s.last_end) + dispatch;
            if (auto r = place_locked(c, s, std::move(w), p.ranges, &Core::launches, at)) ready.push_back(std::move(r));
        }
    }
    for (auto& r : ready) c.dispatch(std::move(r));
    return {};
}

}  // namespace

Status prepare_kernel_state(const KernelDef& kernel, KernelLaunch& launch, std::string_view name) {
    if (!kernel.prepare || launch.state) return {};
    auto state = kernel.prepare(launch);
    if (!state.ok())
        return state.status().with_context(fmt::format("kernel '{}'", name.empty() ? std::string_view(kernel.name) : name));
    launch.state = std::move(*state);
    return {};
}

namespace {
// prepare_launch with the spec's hash already known (hashing a spec per launch is not free).
Result<PreparedLaunch> prepare_launch_hashed(const KernelDef& kernel, KernelLaunch launch, std::string_view name,
                                             const DeviceSpec& spec, uint64_t spec_hash) {
    PreparedLaunch p;
    p.name = name.empty() ? std::string(kernel.name) : std::string(name);
    LOOM_TRY(check_launch_bands(kernel, launch).with_context(fmt::format("kernel '{}'", p.name)));
    auto cost = kernel_launch_cost(kernel, launch, spec);
    if (!cost.ok()) return cost.status().with_context(fmt::format("kernel '{}'", p.name));
    LOOM_ASSERT(cost->cores_used >= 1 && cost->cores_used <= spec.aicore_count);
    for (int side = 0; side < 2; ++side) {
        const auto& list = side == 0 ? launch.inputs : launch.outputs;
        const std::vector<RowBand>* bands =
            launch.bands ? (side == 0 ? &launch.bands->inputs : &launch.bands->outputs) : nullptr;
        for (size_t i = 0; i < list.size(); ++i) {
            const TensorRef& t = list[i];
            if (!t.device_addr)
                return make_error(StatusCode::INVALID_ARGUMENT, "kernel '{}': a tensor has no device address", p.name);
            // A band touches rows all over its tensor: the whole tensor is in range.
            const RowBand* band = bands && i < bands->size() ? &(*bands)[i] : nullptr;
            p.ranges.push_back({t.device_addr, launch_tensor_bytes(t, band)});
            p.bytes += t.bytes();
        }
    }
    LOOM_TRY(prepare_kernel_state(kernel, launch, p.name));
    p.kernel = &kernel;
    p.launch = std::move(launch);
    p.duration = sim_from_ns(cost->total / spec.aicore_clock_ghz);
    p.cycles = std::move(*cost);
    p.spec_hash = spec_hash;
    return p;
}
}  // namespace

Result<PreparedLaunch> prepare_launch(const KernelDef& kernel, KernelLaunch launch, std::string_view name,
                                      const DeviceSpec& spec) {
    return prepare_launch_hashed(kernel, std::move(launch), name, spec, spec.hash());
}

Status Stream::submit_copy(Engine engine, void* dst, uint64_t dst_addr, const void* src, uint64_t src_addr,
                           size_t bytes, bool pinned, std::string_view name) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    const DeviceSpec& sp = state_->core->spec;
    double ns;
    if (engine == Engine::D2D) {
        ns = 2.0 * static_cast<double>(bytes) / sp.memory_bandwidth_gbps + sp.launch_sink_task_ns;
    } else {
        double gbps = pinned ? sp.host_link_bandwidth_gbps : sp.host_link_pageable_bandwidth_gbps;
        ns = sp.host_link_latency_us * 1e3 + static_cast<double>(bytes) / gbps;
    }
    WorkTask w{engine, TaskKind::COPY, name, sim_from_ns(ns)};
    w.bytes = bytes;
    w.work = [dst, src, bytes, pool = state_->core->pool] {
        copy_buffer(dst, src, bytes, *pool);
        return Status();
    };
    return submit_work(state_.get(), std::move(w), {{dst_addr, bytes}, {src_addr, bytes}}, &Core::copies);
}

Status Stream::copy_h2d_2d(DevicePtr<uint8_t> dst, size_t dst_pitch, HostView<const uint8_t> src, size_t src_pitch,
                           size_t width, size_t rows, std::string_view name) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    if (width > dst_pitch || width > src_pitch)
        return make_error(StatusCode::INVALID_ARGUMENT, "copy_h2d_2d '{}': rows of {} bytes, pitches {} (host) and {} (device)",
                          name, width, src_pitch, dst_pitch);
    if (rows == 0 || width == 0) return {};
    const size_t dst_span = (rows - 1) * dst_pitch + width, src_span = (rows - 1) * src_pitch + width;
    if (dst_span > dst.size() || src_span > src.count || !src.data)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "copy_h2d_2d '{}': {} rows of {} bytes span {} bytes of host memory ({} given) and {} of "
                          "device memory ({} given)",
                          name, rows, width, src_span, src.count, dst_span, dst.size());
    const DeviceSpec& sp = state_->core->spec;
    const size_t bytes = width * rows;
    const double gbps = src.pinned ? sp.host_link_bandwidth_gbps : sp.host_link_pageable_bandwidth_gbps;
    WorkTask w{Engine::H2D, TaskKind::COPY, name, sim_from_ns(sp.host_link_latency_us * 1e3 + static_cast<double>(bytes) / gbps)};
    w.bytes = bytes;
    w.work = [d = dst.host_data(), s = src.data, dst_pitch, src_pitch, width, rows] {
        if (dst_pitch == width && src_pitch == width) {
            std::memcpy(d, s, width * rows);
            return Status();
        }
        for (size_t r = 0; r < rows; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, width);
        return Status();
    };
    return submit_work(state_.get(), std::move(w), {{dst.addr(), dst_span}, {0, src_span}}, &Core::copies);
}

Status Stream::launch(const KernelDef& kernel, KernelLaunch launch, std::string_view name) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    Core& c = *state_->core;
    LOOM_ASSIGN_OR_RETURN(PreparedLaunch p,
                          prepare_launch_hashed(kernel, std::move(launch), name, c.spec, c.spec_hash));
    WorkTask w = kernel_work(c, p, false);
    w.work = [&kernel, pool = c.pool, l = std::move(p.launch)] { return run_kernel_launch(kernel, l, *pool); };
    return submit_work(state_.get(), std::move(w), p.ranges, &Core::launches);
}

Status Stream::launch(const PreparedLaunch& p) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    Core& c = *state_->core;
    LOOM_ASSERT_MSG(p.kernel, "launch '{}': no kernel", p.name);
    if (p.spec_hash != c.spec_hash)
        return make_error(StatusCode::INVALID_ARGUMENT, "kernel '{}' was prepared for another device spec than '{}'",
                          p.name, c.spec.name);
    WorkTask w = kernel_work(c, p, false);
    w.work = [&p, pool = c.pool] { return run_kernel_launch(*p.kernel, p.launch, *pool); };
    return submit_work(state_.get(), std::move(w), p.ranges, &Core::launches);
}

Status Stream::launch_sink(std::vector<SinkTask> tasks, std::string_view name) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    if (tasks.empty()) return {};
    Core& c = *state_->core;
    std::vector<PreparedLaunch> prepared;
    std::vector<std::function<Status()>> works;
    prepared.reserve(tasks.size());
    works.reserve(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
        SinkTask& t = tasks[i];
        LOOM_ASSERT_MSG(t.kernel, "sink '{}': task {} has no kernel", name, i);
        auto p = prepare_launch_hashed(*t.kernel, std::move(t.launch), t.name, c.spec, c.spec_hash);
        if (!p.ok()) return p.status().with_context(fmt::format("sink '{}' task {}", name, i));
        // The task owns its launch: `prepared` is gone once this returns.
        works.push_back(
            [k = t.kernel, pool = c.pool, l = std::move(p->launch)] { return run_kernel_launch(*k, l, *pool); });
        prepared.push_back(std::move(*p));
    }
    return place_sink(c, *state_, prepared, std::move(works), name);
}

Status Stream::launch_sink(std::span<const PreparedLaunch> tasks, std::string_view name) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    if (tasks.empty()) return {};
    Core& c = *state_->core;
    for (size_t i = 0; i < tasks.size(); ++i) {
        LOOM_ASSERT_MSG(tasks[i].kernel, "sink '{}': task {} has no kernel", name, i);
        if (tasks[i].spec_hash != c.spec_hash)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "sink '{}' task {}: kernel '{}' was prepared for another device spec than '{}'", name,
                              i, tasks[i].name, c.spec.name);
    }
    return place_sink(c, *state_, tasks, {}, name);
}

namespace {
WorkTask host_task(const DeviceSpec& sp, std::string_view name, double flops, double bytes,
                   std::function<Status()> fn) {
    double ns = sp.host_cpu_task_overhead_us * 1e3 +
                std::max(flops / sp.host_cpu_gflops, bytes / sp.host_cpu_bandwidth_gbps);
    WorkTask w{Engine::HOST_CPU, TaskKind::HOST, name, sim_from_ns(ns)};
    w.work = std::move(fn);
    w.bytes = static_cast<uint64_t>(bytes);
    return w;
}
}  // namespace

Status Stream::launch_host(std::string_view name, double flops, double bytes, std::function<Status()> fn) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    WorkTask w = host_task(state_->core->spec, name, flops, bytes, std::move(fn));
    w.touches_any = true;
    return submit_work(state_.get(), std::move(w), {}, nullptr);
}

Status Stream::launch_host(std::string_view name, double flops, double bytes, std::function<Status()> fn,
                           std::span<const DeviceRange> touches) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    return submit_work(state_.get(), host_task(state_->core->spec, name, flops, bytes, std::move(fn)),
                       Ranges(touches.begin(), touches.end()), nullptr);
}

namespace {
SimTime media_duration(const DeviceSpec& sp, double pixels) {
    return sim_from_ns(sp.media_task_overhead_us * 1e3 + pixels / (sp.media_throughput_mpix_s * 1e-3));
}
}  // namespace

Status Stream::media_resize(DevicePtr<uint8_t> dst, int64_t dst_w, int64_t dst_h, DevicePtr<const uint8_t> src,
                            int64_t src_w, int64_t src_h, int64_t channels, std::string_view name) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    LOOM_TRY(check_resize_args(dst.size(), dst_w, dst_h, src.size(), src_w, src_h, channels));
    WorkTask w{Engine::MEDIA, TaskKind::MEDIA, name,
               media_duration(state_->core->spec, static_cast<double>(std::max(dst_w * dst_h, src_w * src_h)))};
    w.bytes = dst.bytes() + src.bytes();
    ThreadPool* pool = state_->core->pool;
    uint8_t* d = dst.host_data();
    const uint8_t* s = src.host_data();
    w.work = [=] {
        resize_bilinear_u8(d, dst_w, dst_h, s, src_w, src_h, channels, *pool);
        return Status();
    };
    return submit_work(state_.get(), std::move(w), {{dst.addr(), dst.bytes()}, {src.addr(), src.bytes()}}, nullptr);
}

Status Stream::media_frame_to_tensor(DevicePtr<const uint8_t> frame, const FrameLayout& layout,
                                     const ColorInfo& color, DevicePtr<uint8_t> tensor, const TensorFormat& tf,
                                     std::string_view name) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    if (Status st = check_frame_to_tensor_args(layout, color, frame.bytes(), tf, tensor.bytes()); !st.ok())
        return st.with_context(fmt::format("media_frame_to_tensor '{}'", name));
    const double pixels = static_cast<double>(std::max(layout.width * layout.height, tf.width * tf.height));
    WorkTask w{Engine::MEDIA, TaskKind::MEDIA, name, media_duration(state_->core->spec, pixels)};
    w.bytes = frame.bytes() + tensor.bytes();
    ThreadPool* pool = state_->core->pool;
    w.work = [=, f = frame.host_data(), t = tensor.host_data()] {
        frame_to_tensor(t, tf, f, layout, color, *pool);
        return Status();
    };
    return submit_work(state_.get(), std::move(w), {{frame.addr(), frame.bytes()}, {tensor.addr(), tensor.bytes()}},
                       nullptr);
}

Status Stream::media_tensor_to_frame(DevicePtr<const uint8_t> tensor, const TensorFormat& tf,
                                     DevicePtr<uint8_t> frame, const FrameLayout& layout, const ColorInfo& color,
                                     std::string_view name) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    if (Status st = check_tensor_to_frame_args(tf, tensor.bytes(), layout, color, frame.bytes()); !st.ok())
        return st.with_context(fmt::format("media_tensor_to_frame '{}'", name));
    WorkTask w{Engine::MEDIA, TaskKind::MEDIA, name,
               media_duration(state_->core->spec, static_cast<double>(layout.width * layout.height))};
    w.bytes = frame.bytes() + tensor.bytes();
    ThreadPool* pool = state_->core->pool;
    w.work = [=, f = frame.host_data(), t = tensor.host_data()] {
        tensor_to_frame(f, layout, color, t, tf, *pool);
        return Status();
    };
    return submit_work(state_.get(), std::move(w), {{frame.addr(), frame.bytes()}, {tensor.addr(), tensor.bytes()}},
                       nullptr);
}

namespace {
// One timing-only task of a width x height frame on a codec lane (video_decode, video_encode).
Status submit_codec(detail::StreamState* s, Engine engine, int64_t width, int64_t height, std::string_view name) {
    if (!s) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    const bool dec = engine == Engine::VDEC;
    const char* op = dec ? "video_decode" : "video_encode";
    if (width < 1 || height < 1 || width > kFrameSideMax || height > kFrameSideMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "{} '{}': frame {}x{} must be in [1, {}]", op, name, width,
                          height, kFrameSideMax);
    const DeviceSpec& sp = s->core->spec;
    const double overhead_us = dec ? sp.media_vdec_frame_overhead_us : sp.media_venc_frame_overhead_us;
    const double mpix_s = dec ? sp.media_vdec_throughput_mpix_s : sp.media_venc_throughput_mpix_s;
    const double ns = overhead_us * 1e3 + static_cast<double>(width * height) / (mpix_s * 1e-3);
    return submit_work(s, WorkTask{engine, TaskKind::MEDIA, name, sim_from_ns(ns)}, {}, nullptr);
}
}  // namespace

Status Stream::video_decode(int64_t width, int64_t height, std::string_view name) {
    return submit_codec(state_.get(), Engine::VDEC, width, height, name);
}

Status Stream::video_encode(int64_t width, int64_t height, std::string_view name) {
    return submit_codec(state_.get(), Engine::VENC, width, height, name);
}

Status Stream::record(Event& event) {
    if (!state_ || !event.state_) return make_error(StatusCode::FAILED_PRECONDITION, "record: stream or event not created by a device");
    Core& c = *state_->core;
    if (event.state_->core != &c) return make_error(StatusCode::INVALID_ARGUMENT, "record: event belongs to another device");
    auto task = std::make_shared<Task>();
    task->kind = TaskKind::RECORD;
    task->name = "record";
    std::shared_ptr<Task> ready;
    {
        std::lock_guard lock(c.submit_mutex);
        ready = detail::submit_locked(c, *state_, task, 0, 0, {}, {}, 0, std::nullopt, 0);
        event.state_->task = task;
        event.state_->time = task->end;
        event.state_->flow_from = state_->flow_from;
        event.state_->recorded = true;
    }
    if (ready) c.dispatch(std::move(ready));
    return {};
}

Status Stream::wait(const Event& event) {
    if (!state_ || !event.state_) return make_error(StatusCode::FAILED_PRECONDITION, "wait: stream or event not created by a device");
    Core& c = *state_->core;
    if (event.state_->core != &c) return make_error(StatusCode::INVALID_ARGUMENT, "wait: event belongs to another device");
    auto task = std::make_shared<Task>();
    task->kind = TaskKind::WAIT;
    task->name = "wait";
    std::shared_ptr<Task> ready;
    {
        std::lock_guard lock(c.submit_mutex);
        if (!event.state_->recorded)
            return make_error(StatusCode::FAILED_PRECONDITION, "wait: event was never recorded on any stream");
        ready = detail::submit_locked(c, *state_, task, 0, 0, {event.state_->task}, event.state_->flow_from,
                                      event.state_->time, std::nullopt, 0);
    }
    if (ready) c.dispatch(std::move(ready));
    return {};
}

Status Stream::add_callback(std::function<void(Status)> fn) {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "add_callback: stream not created by a device");
    if (!fn) return make_error(StatusCode::INVALID_ARGUMENT, "add_callback: empty function");
    Core& c = *state_->core;
    auto task = std::make_shared<Task>();
    task->kind = TaskKind::CALLBACK;
    task->name = "callback";
    task->callback = std::move(fn);
    std::shared_ptr<Task> ready;
    {
        // Only the functional graph sees it: no task id, no placement, no clock, no trace
        // record, so the simulated timeline is the same with or without callbacks.
        std::lock_guard lock(c.submit_mutex);
        task->stream = state_->id;
        task->start = task->end = state_->last_end;
        ready = detail::chain_locked(c, *state_, std::move(task), {});
    }
    if (ready) c.dispatch(std::move(ready));
    return {};
}

Status Stream::synchronize() {
    if (!state_) return make_error(StatusCode::FAILED_PRECONDITION, "stream: not created by a device");
    Core& c = *state_->core;
    std::shared_ptr<Task> last;
    SimTime end;
    // Only the aborts requested before the wait are over once it ends: one that comes while it
    // waits still holds for the work queued after.
    const uint64_t aborts = state_->aborts_requested.load(std::memory_order_acquire);
    {
        std::lock_guard lock(c.submit_mutex);
        last = state_->last;
        end = state_->last_end;
    }
    if (last) c.wait(last);
    uint64_t cleared = state_->aborts_cleared.load(std::memory_order_relaxed);
    while (cleared < aborts && !state_->aborts_cleared.compare_exchange_weak(cleared, aborts)) {
    }
    std::lock_guard lock(c.submit_mutex);
    c.host_now = std::max(c.host_now, end);
    std::lock_guard graph(c.graph_mutex);
    Status err = std::move(state_->first_error);
    state_->first_error = Status();
    // The error is reported: later work must not inherit it through stream order.
    if (!err.ok() && state_->last == last && last && !last->status.ok()) state_->last = nullptr;
    return err;
}

ThreadPool& Stream::pool() const {
    LOOM_ASSERT(state_);
    return *state_->core->pool;
}

void Stream::abort() {
    if (state_) state_->aborts_requested.fetch_add(1, std::memory_order_acq_rel);
}

bool Stream::query() const {
    if (!state_) return false;
    std::lock_guard lock(state_->core->submit_mutex);
    return !state_->last || state_->last->done.load(std::memory_order_acquire);
}

// ---- Device ----

Device::Device(std::shared_ptr<Core> core) : core_(std::move(core)) {}

Device::~Device() {
    if (core_) core_->wait_all();
}

Result<std::unique_ptr<Device>> Device::create(const DeviceSpec& spec, DeviceOptions options) {
    return std::unique_ptr<Device>(new Device(std::make_shared<Core>(spec, options)));
}

const DeviceSpec& Device::spec() const { return core_->spec; }
ThreadPool& Device::pool() const { return *core_->pool; }
bool Device::tracing() const { return core_->options.trace; }

Result<DeviceBuffer> Device::malloc(size_t bytes, std::string_view name) {
    Core& c = *core_;
    std::lock_guard lock(c.submit_mutex);
    int64_t n = ++c.allocs;
    if (n == c.options.faults.fail_alloc)
        return make_error(StatusCode::OUT_OF_DEVICE_MEMORY, "device allocation #{} of {} bytes{}{} failed (injected)", n,
                          bytes, name.empty() ? "" : " for ", name);
    auto offset = c.arena.allocate(bytes);
    if (!offset.ok()) return name.empty() ? offset.status() : offset.status().with_context(name);
    DeviceBuffer b;
    b.core_ = core_;
    b.host_ = allocate_buffer(bytes);
    b.addr_ = detail::kDeviceBase + *offset;
    b.bytes_ = bytes;
    c.allocations[b.addr_] = detail::Allocation{*offset, bytes, b.host_};
    c.note_memory_locked();
    return b;
}

Stream Device::create_stream() {
    auto s = std::make_shared<detail::StreamState>();
    s->core = core_.get();
    s->core_ref = core_;
    std::lock_guard lock(core_->submit_mutex);
    std::lock_guard graph(core_->graph_mutex);
    s->id = core_->next_stream_id++;
    auto& all = core_->streams;
    if (all.size() >= core_->streams_prune_at) {
        std::erase_if(all, [](const auto& w) { return w.expired(); });
        core_->streams_prune_at = std::max<size_t>(64, 2 * all.size());
    }
    all.push_back(s);
    Stream st;
    st.state_ = std::move(s);
    return st;
}

Event Device::create_event() {
    Event e;
    e.state_ = std::make_shared<detail::EventState>();
    e.state_->core = core_.get();
    return e;
}

Status Device::synchronize() {
    // Live streams only: a dropped stream with unfinished work is alive through its tasks, and
    // one that is gone handed its unreported error to dropped_error.
    std::vector<Stream> streams;
    {
        std::lock_guard lock(core_->submit_mutex);
        std::lock_guard graph(core_->graph_mutex);
        for (const auto& w : core_->streams)
            if (auto s = w.lock()) streams.emplace_back().state_ = std::move(s);
    }
    Status first;
    for (auto& s : streams) {
        Status r = s.synchronize();
        if (first.ok() && !r.ok()) first = r;
    }
    streams.clear();  // may drop the last reference to a stream: not under a lock
    std::lock_guard graph(core_->graph_mutex);
    if (first.ok()) first = std::move(core_->dropped_error);
    core_->dropped_error = Status();
    return first;
}

DeviceStats Device::stats() const {
    const Core& c = *core_;
    std::lock_guard lock(c.submit_mutex);
    DeviceStats s;
    s.sim_now = c.sim_now;
    s.host_now = c.host_now;
    s.wall_ms = c.wall_us() / 1e3;
    s.tasks = c.next_task_id - 1;
    for (size_t e = 0; e < kEngineCount; ++e) s.engines[e] = {c.engine_tasks[e], c.engine_busy[e], c.engine_bytes[e]};
    s.memory_used = c.arena.used();
    s.memory_peak = c.arena.peak();
    s.memory_capacity = c.arena.capacity();
    s.trace_dropped = c.trace_dropped;
    for (const auto& w : c.streams) s.streams_live += !w.expired();
    s.streams_tracked = c.streams.size();
    s.trace_records = c.records.size();
    s.trace_memory_samples = c.memory_counter.size();
    for (const LaneSet& l : c.engines) s.lane_intervals += l.intervals();
    return s;
}

}  // namespace loom::device
