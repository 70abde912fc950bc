#include "executor/executor.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/thread_pool.hpp"
#include "compiler/model_file.hpp"
#include "compiler/ops.hpp"

namespace loom::executor {

using compiler::CompiledStep;
using compiler::CompiledTensor;
using compiler::Graph;
using compiler::Placement;
using compiler::Storage;

namespace {

std::string dims_str(const std::vector<int64_t>& dims) { return compiler::shape_str(compiler::shape_of(dims)); }

// "x=1x3x8x8, y=..." for messages about one set of input shapes.
std::string shapes_str(const Graph& g, std::span<const HostTensor> inputs) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < inputs.size() && i < g.inputs.size(); ++i)
        parts.push_back(fmt::format("{}={}", g.value(g.inputs[i]).name, dims_str(inputs[i].dims())));
    return fmt::format("{}", fmt::join(parts, ", "));
}

// Checks run-time inputs against a host-mode graph's inputs: count, dtype, rank, the dims the
// model fixes, and one size per symbol across all inputs.
Status check_host_inputs(const CompiledModel& m, std::span<const HostTensor> inputs) {
    const Graph& g = m.graph;
    if (inputs.size() != g.inputs.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} inputs given, the model takes {}", m.source,
                          inputs.size(), g.inputs.size());
    struct Binding {
        int64_t size;
        std::string input;
        size_t axis;
    };
    std::map<std::string, Binding> symbols;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const compiler::Value& v = g.value(g.inputs[i]);
        const std::vector<int64_t>& dims = inputs[i].dims();
        auto refuse = [&](const std::string& why) {
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: input {} ('{}') is {} {}, the model takes {} {}: {}",
                              m.source, i, v.name, device::dtype_name(inputs[i].dtype()), dims_str(dims),
                              device::dtype_name(v.dtype), compiler::shape_str(v.shape), why);
        };
        if (inputs[i].dtype() != v.dtype) return refuse("the dtype differs");
        if (dims.size() != v.shape.size()) return refuse(fmt::format("rank {}, not {}", v.shape.size(), dims.size()));
        for (size_t a = 0; a < dims.size(); ++a) {
            const compiler::Dim& d = v.shape[a];
            if (d.known()) {
                if (dims[a] != d.value) return refuse(fmt::format("axis {} is fixed at {}", a, d.value));
                continue;
            }
            const auto [it, fresh] = symbols.emplace(d.symbol, Binding{dims[a], v.name, a});
            if (!fresh && it->second.size != dims[a])
                return refuse(fmt::format("axis {} is '{}', which input '{}' axis {} gives as {}", a, d.symbol,
                                          it->second.input, it->second.axis, it->second.size));
        }
    }
    return {};
}

bool same_dims(const HostPlan& p, std::span<const HostTensor> inputs) {
    if (p.input_dims.size() != inputs.size()) return false;
    for (size_t i = 0; i < inputs.size(); ++i)
        if (p.input_dims[i] != inputs[i].dims()) return false;
    return true;
}

}  // namespace

Result<std::shared_ptr<LoadedModel>> LoadedModel::load(device::Device& dev,
                                                       std::shared_ptr<const CompiledModel> model) {
    LOOM_TRY(compiler::check_compatible(*model, dev.spec(), model->source));
    // Steps fused in UB are costed each on its own: the pairing is checked here, as lowering does.
    LOOM_TRY(compiler::check_fused_steps(*model, dev.spec()));
    std::shared_ptr<LoadedModel> lm(new LoadedModel());
    lm->dev_ = &dev;
    lm->model_ = model;
    for (const CompiledStep& s : model->steps) {
        const device::KernelDef* k = s.alias ? nullptr : device::find_kernel(s.kernel);
        if (!s.alias && !k)
            return make_error(StatusCode::NOT_FOUND, "{}: step '{}' needs the kernel '{}', which this build lacks",
                              model->source, s.name, s.kernel);
        lm->kernels_.push_back(k);
    }
    for (const compiler::SplitRegion& r : model->splits) {
        LOOM_ASSIGN_OR_RETURN(compiler::SplitPlan p, compiler::plan_split(*model, r.first, r.last, r.rows));
        LOOM_TRY(compiler::check_split_fits(*model, p, dev.spec()));
        if (p.launches.size() != r.tilings.size())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: split region {} has {} tilings for {} band launches",
                              model->source, compiler::split_label(*model, r.first, r.last), r.tilings.size(),
                              p.launches.size());
        lm->splits_.push_back(std::move(p));
    }
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(model->weights.elements(), 64));
    auto buf = dev.malloc(bytes, "weights");
    if (!buf.ok()) return buf.status().with_context(fmt::format("loading the weights of {}", model->source));
    lm->weights_ = std::move(*buf);
    if (model->weights.elements() > 0) {
        device::Stream s = dev.create_stream();
        auto dst = lm->weights_.as<uint8_t>().slice(0, static_cast<size_t>(model->weights.elements()));
        LOOM_TRY(s.copy_h2d(dst, device::HostView<const uint8_t>(model->weights.as<uint8_t>(), dst.size(), false),
                            "weights"));
        LOOM_TRY(s.synchronize().with_context(fmt::format("uploading the weights of {}", model->source)));
    }
    return lm;
}

Result<std::shared_ptr<HostPlan>> LoadedModel::build_host_plan(std::span<const HostTensor> inputs) const {
    const CompiledModel& m = *model_;
    auto plan = std::make_shared<HostPlan>();
    Graph g = m.graph;
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    for (size_t i = 0; i < inputs.size(); ++i) {
        shapes.emplace_back(g.value(g.inputs[i]).name, inputs[i].dims());
        plan->input_dims.push_back(inputs[i].dims());
    }
    // Shapes first, then what they make constant (Shape -> Gather -> Reshape chains), so every
    // node lowers with static shapes and constant shape inputs.
    LOOM_TRY(compiler::set_input_shapes(g, shapes));
    LOOM_TRY(compiler::infer_shapes(g));
    if (m.fold) LOOM_TRY(compiler::fold_constants(g).status());
    LOOM_ASSERT(g.values.size() == m.graph_offsets.size());  // folding adds no values
    CompiledModel& l = plan->lowered;
    l.compiler_version = m.compiler_version;
    l.source = m.source;
    l.name = m.name;
    l.spec_name = m.spec_name;
    l.spec_hash = m.spec_hash;
    l.precision = m.precision;
    l.mode = compiler::ExecMode::HOST;
    plan->resident_bytes = m.weights.elements();
    LOOM_TRY(compiler::lower_graph(g, dev_->spec(), l, m.graph_offsets, plan->resident_bytes, m.host_placement));
    for (const CompiledStep& s : l.steps) {
        const device::KernelDef* k = s.alias ? nullptr : device::find_kernel(s.kernel);
        if (!s.alias && !k)
            return make_error(StatusCode::NOT_FOUND, "step '{}' needs the kernel '{}', which this build lacks", s.name,
                              s.kernel);
        plan->kernels.push_back(k);
    }
    if (l.weights.elements() > 0) {
        auto buf = dev_->malloc(static_cast<size_t>(l.weights.elements()), "host-mode constants");
        if (!buf.ok()) return buf.status();
        plan->constants = std::move(*buf);
        device::Stream s = dev_->create_stream();
        auto dst = plan->constants.as<uint8_t>();
        LOOM_TRY(
            s.copy_h2d(dst, device::HostView<const uint8_t>(l.weights.as<uint8_t>(), dst.size(), false), "constants"));
        LOOM_TRY(s.synchronize());
    }
    return plan;
}

Result<std::shared_ptr<const HostPlan>> LoadedModel::host_plan(std::span<const HostTensor> inputs, bool* cached) {
    LOOM_ASSERT(host_mode());
    LOOM_TRY(check_host_inputs(*model_, inputs));
    std::lock_guard lock(plans_mutex_);
    for (auto it = plans_.begin(); it != plans_.end(); ++it)
        if (same_dims(**it, inputs)) {
            plans_.splice(plans_.begin(), plans_, it);
            if (cached) *cached = true;
            return plans_.front();
        }
    auto plan = build_host_plan(inputs);
    if (!plan.ok())
        return plan.status().with_context(
            fmt::format("{}: input shapes {}", model_->source, shapes_str(model_->graph, inputs)));
    ++plans_built_;
    plans_.push_front(std::move(*plan));
    if (plans_.size() > kHostPlansMax) plans_.pop_back();
    if (cached) *cached = false;
    return plans_.front();
}

size_t LoadedModel::host_plans_built() const {
    std::lock_guard lock(plans_mutex_);
    return plans_built_;
}

size_t LoadedModel::host_plans_cached() const {
    std::lock_guard lock(plans_mutex_);
    return plans_.size();
}

Result<std::unique_ptr<Session>> Session::create(std::shared_ptr<LoadedModel> model,
                                                 std::shared_ptr<device::DeviceBuffer> arena) {
    std::unique_ptr<Session> s(new Session());
    s->model_ = std::move(model);
    if (arena) {
        const CompiledModel& m = s->model_->model();
        if (s->model_->host_mode() || !arena->valid() || arena->bytes() < static_cast<size_t>(m.arena_bytes))
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: a shared arena of {} bytes for a {} model whose arena takes {}", m.source,
                              arena->valid() ? arena->bytes() : 0, s->model_->host_mode() ? "host-mode" : "sink-mode",
                              m.arena_bytes);
        s->arena_ = std::move(arena);
        s->shared_arena_ = true;
    }
    if (!s->model_->host_mode()) LOOM_TRY(s->ensure_arena(s->model_->model().arena_bytes));
    device::Device& dev = s->model_->device();
    s->stream_ = dev.create_stream();
    s->start_ = dev.create_event();
    s->end_ = dev.create_event();
    return s;
}

Status Session::ensure_arena(int64_t bytes) {
    if (arena_ && arena_->valid() && arena_->bytes() >= static_cast<size_t>(bytes)) return {};
    if (shared_arena_)  // create() checked it: sink mode, large enough
        return make_error(StatusCode::INTERNAL, "{}: the shared arena holds {} bytes, {} needed",
                          model_->model().source, arena_->bytes(), bytes);
    prepared_.reset();  // it points into the old arena
    arena_.reset();     // the old one first: both need not fit at once
    auto arena = model_->device().malloc(static_cast<size_t>(bytes), "arena");
    if (!arena.ok()) return arena.status().with_context(fmt::format("activation arena of {}", model_->model().source));
    arena_ = std::make_shared<device::DeviceBuffer>(std::move(*arena));
    return {};
}

Program Program::of_sink(const LoadedModel& model) {
    Program p;
    p.m = &model.model();
    p.kernels = model.kernels();
    p.weights = &model.weights();
    p.sink = true;
    p.splits = model.splits();
    return p;
}

Program Program::of_host_plan(const LoadedModel& model, const HostPlan& plan) {
    Program p;
    p.m = &plan.lowered;
    p.kernels = plan.kernels;
    p.weights = &model.weights();
    p.constants = &plan.constants;
    p.resident_bytes = plan.resident_bytes;
    return p;
}

namespace {

// Where tensor `id` of `p` lives: the arena, the model's weights, or the plan's constants (with
// the offset made relative to that buffer).
std::pair<const device::DeviceBuffer*, CompiledTensor> place_tensor(const Program& p, int id,
                                                                    const device::DeviceBuffer& arena) {
    CompiledTensor t = p.m->tensors[static_cast<size_t>(id)];
    if (t.storage == Storage::ARENA) {
        for (const BoundTensor& b : p.bound)
            if (b.tensor == id) {
                t.offset = b.offset;
                return {b.buffer, t};
            }
        return {&arena, t};
    }
    if (p.constants && t.offset >= p.resident_bytes) {
        t.offset -= p.resident_bytes;
        return {p.constants, t};
    }
    return {p.weights, t};
}

}  // namespace

device::DevicePtr<uint8_t> Program::tensor_bytes(int id, const device::DeviceBuffer& arena) const {
    const auto [buf, t] = place_tensor(*this, id, arena);
    return buf->as<uint8_t>().slice(static_cast<size_t>(t.offset), static_cast<size_t>(t.bytes));
}

device::KernelLaunch Program::step_launch(size_t si, const device::DeviceBuffer& arena) const {
    const CompiledStep& s = m->steps[si];
    auto ref = [&](int id) -> device::TensorRef {
        if (id < 0) {
            device::TensorRef empty;
            empty.rank = 1;
            empty.data = arena.as<uint8_t>().host_data();
            empty.device_addr = arena.addr();
            return empty;
        }
        const auto [buf, t] = place_tensor(*this, id, arena);
        return compiler::tensor_ref_of(t, buf->as<uint8_t>().host_data(), buf->addr());
    };
    device::KernelLaunch launch;
    launch.attrs = s.attrs;
    launch.tiling = s.tiling;
    for (int id : s.inputs) {
        // Weights and constants never change between runs: the kernel may prepare from them.
        if (id >= 0 && m->tensors[static_cast<size_t>(id)].storage == Storage::WEIGHTS && launch.inputs.size() < 32)
            launch.constant_inputs |= 1u << launch.inputs.size();
        launch.inputs.push_back(ref(id));
    }
    for (int id : s.outputs) launch.outputs.push_back(ref(id));
    return launch;
}

std::vector<ProgramLaunch> Program::launches(const device::DeviceBuffer& arena) const {
    std::vector<ProgramLaunch> out;
    size_t next = 0;  // the next split region
    for (size_t si = 0; si < m->steps.size(); ++si) {
        if (next < splits.size() && static_cast<size_t>(splits[next].first) == si) {
            const compiler::SplitPlan& p = splits[next];
            const compiler::SplitRegion& r = m->splits[next];
            for (size_t i = 0; i < p.launches.size(); ++i) {
                const compiler::BandLaunch& b = p.launches[i];
                const size_t step = static_cast<size_t>(b.step);
                ProgramLaunch pl{step, step_launch(step, arena),
                                 fmt::format("{} [band {}/{}]", m->steps[step].name, b.band + 1, p.bands)};
                compiler::apply_band(b, pl.launch);
                pl.launch.tiling = r.tilings[i];
                out.push_back(std::move(pl));
            }
            si = static_cast<size_t>(p.last);
            ++next;
            continue;
        }
        if (m->steps[si].alias) continue;
        out.push_back({si, step_launch(si, arena), m->steps[si].name});
    }
    return out;
}

double host_step_bytes(const CompiledStep& s, const device::KernelLaunch& l) {
    double bytes = 0;
    if (!compiler::reads_dims_only(s.op))
        for (const device::TensorRef& t : l.inputs) bytes += static_cast<double>(t.bytes());
    for (const device::TensorRef& t : l.outputs) bytes += static_cast<double>(t.bytes());
    return bytes;
}

std::vector<std::shared_ptr<const device::KernelState>> LoadedModel::sink_kernel_states() const {
    std::lock_guard lock(states_mutex_);
    return sink_states_;
}

void LoadedModel::keep_sink_kernel_states(const std::vector<std::shared_ptr<const device::KernelState>>& states) const {
    std::lock_guard lock(states_mutex_);
    if (sink_states_.empty()) sink_states_ = states;
}

std::string host_steps_name(std::span<const device::SinkTask> steps) {
    LOOM_ASSERT(!steps.empty());
    return steps.size() == 1 ? steps[0].name
                             : fmt::format("{} .. {} ({} host steps)", steps[0].name, steps.back().name, steps.size());
}

Status launch_host_steps(device::Stream& stream, std::string_view name,
                         std::shared_ptr<const std::vector<device::SinkTask>> steps, double flops, double bytes) {
    LOOM_ASSERT(steps && !steps->empty());
    ThreadPool* pool = &stream.pool();
    return stream.launch_host(name, flops, bytes, [pool, steps = std::move(steps)]() -> Status {
        for (const device::SinkTask& t : *steps)
            LOOM_TRY(device::run_kernel_launch(*t.kernel, t.launch, *pool).with_context(t.name));
        return {};
    });
}

Result<PreparedProgram> PreparedProgram::build(const Program& p, const device::DeviceBuffer& arena,
                                               const device::DeviceSpec& spec,
                                               std::vector<std::shared_ptr<const device::KernelState>>* states) {
    const CompiledModel& m = *p.m;
    PreparedProgram out;
    std::vector<ProgramLaunch> launches = p.launches(arena);
    const bool reuse = states && !states->empty();
    LOOM_ASSERT(!reuse || states->size() == launches.size());
    if (states && !reuse) states->assign(launches.size(), nullptr);
    std::vector<std::vector<device::SinkTask>> tasks;  // per segment, while building
    for (size_t li = 0; li < launches.size(); ++li) {
        ProgramLaunch& pl = launches[li];
        const CompiledStep& step = m.steps[pl.step];
        device::SinkTask task{p.kernels[pl.step], std::move(pl.launch), std::move(pl.name)};
        if (reuse) {  // nullptr too: that kernel had nothing to keep
            task.launch.state = (*states)[li];
        } else {
            LOOM_TRY(device::prepare_kernel_state(*task.kernel, task.launch, task.name));
            if (states) (*states)[li] = task.launch.state;
        }
        using Kind = ProgramSegment::Kind;
        const Kind kind = step.placement == Placement::HOST ? Kind::HOST_STEP : p.sink ? Kind::SINK : Kind::LAUNCH;
        // A run of host steps is one host task; a run of device steps one sink submission.
        if (out.segments.empty() || out.segments.back().kind != kind || kind == Kind::LAUNCH) {
            out.segments.emplace_back().kind = kind;
            tasks.emplace_back();
        }
        ProgramSegment& seg = out.segments.back();
        if (kind == Kind::HOST_STEP) {
            seg.flops += step.flops;
            seg.bytes += host_step_bytes(step, task.launch);
            ++out.host_steps;
        } else {
            ++out.launches;
        }
        tasks.back().push_back(std::move(task));
    }
    for (size_t i = 0; i < out.segments.size(); ++i) {
        ProgramSegment& seg = out.segments[i];
        if (seg.kind == ProgramSegment::Kind::HOST_STEP) {
            seg.name = host_steps_name(tasks[i]);
            seg.host = std::make_shared<const std::vector<device::SinkTask>>(std::move(tasks[i]));
            continue;
        }
        ++out.submissions;
        for (device::SinkTask& t : tasks[i]) {
            LOOM_ASSIGN_OR_RETURN(device::PreparedLaunch pl,
                                  device::prepare_launch(*t.kernel, std::move(t.launch), t.name, spec));
            seg.prepared.push_back(std::move(pl));
        }
    }
    return out;
}

Status PreparedProgram::submit(device::Stream& stream, std::string_view sink_name) const {
    for (const ProgramSegment& seg : segments) {
        switch (seg.kind) {
        case ProgramSegment::Kind::SINK:
            LOOM_TRY(stream.launch_sink(std::span<const device::PreparedLaunch>(seg.prepared), sink_name));
            break;
        case ProgramSegment::Kind::HOST_STEP:
            LOOM_TRY(launch_host_steps(stream, seg.name, seg.host, seg.flops, seg.bytes));
            break;
        case ProgramSegment::Kind::LAUNCH:
            LOOM_TRY(stream.launch(seg.prepared.front()));
            break;
        }
    }
    return {};
}

Status Session::submit(const Program& p, const PreparedProgram& prepared, std::span<const HostTensor> inputs,
                       std::vector<HostTensor>& outputs, const BoundLaunches* bound) {
    const CompiledModel& m = *p.m;
    auto bytes_of = [&](int id) { return p.tensor_bytes(id, *arena_); };
    LOOM_TRY(stream_.record(start_));
    for (size_t i = 0; i < inputs.size(); ++i) {
        const int id = m.inputs[i];
        if (m.tensors[static_cast<size_t>(id)].bytes == 0 || (bound && bound->inputs_[i].buffer)) continue;
        LOOM_TRY(stream_.copy_h2d(
            bytes_of(id), device::HostView<const uint8_t>(inputs[i].as<uint8_t>(), inputs[i].bytes(), false), "input"));
    }
    LOOM_TRY(prepared.submit(stream_, m.name.empty() ? m.source : m.name));
    outputs.resize(m.outputs.size());
    for (size_t i = 0; i < m.outputs.size(); ++i) {
        const int id = m.outputs[i];
        const CompiledTensor& t = m.tensors[static_cast<size_t>(id)];
        if (bound && bound->outputs_[i].buffer && !bound->outputs_[i].to_host) continue;
        HostTensor& out = outputs[i];
        if (out.dtype() != t.dtype || out.dims() != t.dims || out.shared() || !out.data())
            out = HostTensor(t.dtype, t.dims);
        if (t.bytes == 0) continue;
        LOOM_TRY(stream_.copy_d2h(device::HostView<uint8_t>(out.as<uint8_t>(), out.bytes(), false),
                                  device::DevicePtr<const uint8_t>(bytes_of(id)), "output"));
    }
    LOOM_TRY(stream_.record(end_));
    return {};
}

Status Session::check_sink_inputs(std::span<const HostTensor> inputs, const BoundLaunches* bound) const {
    const CompiledModel& m = model_->model();
    if (inputs.size() != m.inputs.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} inputs given, the model takes {}", m.source,
                          inputs.size(), m.inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        if (bound && bound->inputs_[i].buffer) continue;
        const CompiledTensor& t = m.tensors[static_cast<size_t>(m.inputs[i])];
        if (inputs[i].dtype() != t.dtype || inputs[i].dims() != t.dims)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: input {} ('{}') is {} {}, the model was compiled for {} {}", m.source, i, t.name,
                              device::dtype_name(inputs[i].dtype()), dims_str(inputs[i].dims()),
                              device::dtype_name(t.dtype), dims_str(t.dims));
    }
    return {};
}

Result<std::vector<HostTensor>> Session::run(std::span<const HostTensor> inputs, RunStats* stats) {
    std::vector<HostTensor> outputs;
    LOOM_TRY(run(inputs, outputs, stats));
    return outputs;
}

Status Session::run(std::span<const HostTensor> inputs, std::vector<HostTensor>& outputs, RunStats* stats) {
    const auto t0 = std::chrono::steady_clock::now();
    const CompiledModel& m = model_->model();
    RunStats local;
    local.mode = m.mode;
    Program p;
    std::shared_ptr<const HostPlan> plan;  // held until the inference is done
    if (model_->host_mode()) {
        LOOM_ASSIGN_OR_RETURN(plan, model_->host_plan(inputs, &local.plan_cached));
        LOOM_TRY(ensure_arena(plan->lowered.arena_bytes)
                     .with_context(fmt::format("input shapes {}", shapes_str(m.graph, inputs))));
        p = Program::of_host_plan(*model_, *plan);
    } else {
        LOOM_TRY(check_sink_inputs(inputs));
        p = Program::of_sink(*model_);
    }
    // The launches are built on the first inference (and again after the arena or the host plan
    // changed), then reused: every later one only queues them.
    local.launches_cached = prepared_ && plan == plan_;
    if (!local.launches_cached) {
        prepared_.reset();
        plan_ = plan;
        auto built = PreparedProgram::build(p, *arena_, model_->device().spec());
        if (!built.ok()) return built.status().with_context(m.source);
        prepared_ = std::move(*built);
    }
    local.launches = prepared_->launches;
    local.host_steps = prepared_->host_steps;
    local.submissions = prepared_->submissions;
    return finish(submit(p, *prepared_, inputs, outputs), t0, local, stats);
}

Status Session::finish(Status submitted, const std::chrono::steady_clock::time_point& t0, RunStats& local,
                       RunStats* stats) {
    const std::string& source = model_->model().source;
    // Always drain the stream, so a failed inference leaves nothing running and clears the
    // stream's error for the next one.
    Status done = stream_.synchronize();
    if (!submitted.ok()) return submitted.with_context(source);
    if (!done.ok()) return done.with_context(source);
    auto sim = device::Event::elapsed_ms(start_, end_);
    if (sim.ok()) local.sim_ms = *sim;
    local.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (stats) *stats = local;
    return {};
}

Result<BoundLaunches> Session::bind(std::span<const DeviceTensor> inputs, std::span<const DeviceTensor> outputs) {
    const CompiledModel& m = model_->model();
    if (model_->host_mode())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: a host-mode model cannot bind its inputs and outputs (it plans per input shape)",
                          m.source);
    if (inputs.size() != m.inputs.size() || outputs.size() != m.outputs.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} inputs and {} outputs bound, the model has {} and {}",
                          m.source, inputs.size(), outputs.size(), m.inputs.size(), m.outputs.size());
    // Alias groups: an alias step's output shares its input's bytes, so a bound tensor takes its
    // whole group along.
    std::vector<int> group(m.tensors.size());
    for (size_t i = 0; i < group.size(); ++i) group[i] = static_cast<int>(i);
    auto root = [&](int id) {
        while (group[static_cast<size_t>(id)] != id) id = group[static_cast<size_t>(id)];
        return id;
    };
    for (const CompiledStep& st : m.steps)
        if (st.alias && !st.inputs.empty() && st.inputs[0] >= 0 && !st.outputs.empty())
            group[static_cast<size_t>(root(st.outputs[0]))] = root(st.inputs[0]);
    // The device bytes a group takes: its largest member's.
    std::vector<int64_t> group_bytes(m.tensors.size(), 0);
    for (size_t id = 0; id < m.tensors.size(); ++id) {
        int64_t& g = group_bytes[static_cast<size_t>(root(static_cast<int>(id)))];
        g = std::max(g, m.tensors[id].device_bytes());
    }
    struct Want {
        int tensor;
        DeviceTensor at;
        std::string what;
        int64_t bytes;  // its group's
    };
    std::vector<Want> wants;
    auto want = [&](std::span<const DeviceTensor> side, const std::vector<int>& ids, const char* kind) -> Status {
        for (size_t i = 0; i < side.size(); ++i) {
            const DeviceTensor& d = side[i];
            if (!d.buffer) continue;
            const CompiledTensor& t = m.tensors[static_cast<size_t>(ids[i])];
            std::string what = fmt::format("{} {} ('{}')", kind, i, t.name);
            if (t.storage != Storage::ARENA)
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "{}: {} is a constant of the model (no step reads or writes it in the arena)",
                                  m.source, what);
            const int64_t bytes = group_bytes[static_cast<size_t>(root(ids[i]))];
            if (!d.buffer->valid() || d.offset < 0 || d.offset % 64 != 0 ||
                static_cast<uint64_t>(d.offset) + static_cast<uint64_t>(bytes) > d.buffer->bytes())
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "{}: {} of {} device bytes (with what shares them) bound at offset {} of a buffer "
                                  "of {} (the offset must be a multiple of 64 and the tensor fit)",
                                  m.source, what, bytes, d.offset, d.buffer->valid() ? d.buffer->bytes() : 0);
            wants.push_back({ids[i], d, std::move(what), bytes});
        }
        return {};
    };
    LOOM_TRY(want(inputs, m.inputs, "input"));
    LOOM_TRY(want(outputs, m.outputs, "output"));
    BoundLaunches b;
    for (size_t i = 0; i < wants.size(); ++i) {
        const Want& w = wants[i];
        for (size_t j = 0; j < i; ++j) {
            const Want& o = wants[j];
            if (root(o.tensor) == root(w.tensor)) {
                if (o.at.buffer != w.at.buffer || o.at.offset != w.at.offset)
                    return make_error(StatusCode::INVALID_ARGUMENT,
                                      "{}: {} and {} are the same bytes in the model, bound apart", m.source, o.what,
                                      w.what);
                continue;
            }
            if (o.at.buffer == w.at.buffer && o.at.offset < w.at.offset + w.bytes &&
                w.at.offset < o.at.offset + o.bytes)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} and {} are bound to overlapping bytes",
                                  m.source, o.what, w.what);
        }
    }
    // Every arena tensor of a bound group, placed (each fits: its group's bytes were checked).
    for (size_t id = 0; id < m.tensors.size(); ++id) {
        if (m.tensors[id].storage != Storage::ARENA) continue;
        for (const Want& w : wants)
            if (root(w.tensor) == root(static_cast<int>(id))) {
                b.bound_.push_back({static_cast<int>(id), w.at.buffer, w.at.offset});
                break;
            }
    }
    b.session_ = this;
    b.inputs_.assign(inputs.begin(), inputs.end());
    b.outputs_.assign(outputs.begin(), outputs.end());
    Program p = Program::of_sink(*model_);
    p.bound = b.bound_;
    // The first binding prepares the kernel states; kept only once every one was prepared.
    std::vector<std::shared_ptr<const device::KernelState>> states = bound_states_;
    auto built = PreparedProgram::build(p, *arena_, model_->device().spec(), &states);
    if (!built.ok()) return built.status().with_context(m.source);
    bound_states_ = std::move(states);
    b.prepared_ = std::move(*built);
    return b;
}

Status Session::run(const BoundLaunches& bound, std::span<const HostTensor> inputs, std::vector<HostTensor>& outputs,
                    RunStats* stats) {
    const auto t0 = std::chrono::steady_clock::now();
    const CompiledModel& m = model_->model();
    if (bound.session_ != this || !bound.prepared_)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: launches bound by another session", m.source);
    LOOM_TRY(check_sink_inputs(inputs, &bound));
    RunStats local;
    local.mode = m.mode;
    local.launches_cached = true;
    local.launches = bound.prepared_->launches;
    local.host_steps = bound.prepared_->host_steps;
    local.submissions = bound.prepared_->submissions;
    Program p = Program::of_sink(*model_);
    p.bound = bound.bound_;
    return finish(submit(p, *bound.prepared_, inputs, outputs, &bound), t0, local, stats);
}

}  // namespace loom::executor
