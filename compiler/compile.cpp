#include "compiler/compile.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/text.hpp"
#include "common/thread_pool.hpp"
#include "common/version.hpp"
#include "compiler/measure.hpp"
#include "compiler/memory_plan.hpp"
#include "compiler/ops.hpp"
#include "compiler/split.hpp"
#include "compiler/tuning.hpp"

namespace loom::compiler {

namespace {

constexpr int64_t kAlign = 64;

int64_t align_up(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

constexpr int64_t kHostElementsMax = 8;

// The names of an enum's values, in the order of their parse error's list.
template <typename E>
struct EnumName {
    E value;
    std::string_view name;
};
constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::FP32, "fp32"}, {Precision::FP16, "fp16"}, {Precision::INT8, "int8"}};
constexpr EnumName<ExecMode> kExecModeNames[] = {{ExecMode::SINK, "sink"}, {ExecMode::HOST, "host"}};

template <typename E, size_t N>
std::string_view enum_name(const EnumName<E> (&names)[N], E value) {
    for (const EnumName<E>& n : names)
        if (n.value == value) return n.name;
    LOOM_ASSERT_MSG(false, "enum value {} has no name", static_cast<int>(value));
    return {};
}

// Parses `text` as one of `names`; the error reads "unknown precision 'fp64' (fp32, fp16 or int8)".
template <typename E, size_t N>
Result<E> enum_parse(const EnumName<E> (&names)[N], std::string_view what, std::string_view text) {
    std::string valid;
    for (size_t i = 0; i < N; ++i) {
        if (text == names[i].name) return names[i].value;
        valid += fmt::format("{}{}", i == 0 ? "" : i + 1 == N ? " or " : ", ", names[i].name);
    }
    return make_error(StatusCode::INVALID_ARGUMENT, "unknown {} '{}' ({})", what, printable(text), valid);
}

}  // namespace

std::string_view precision_name(Precision p) { return enum_name(kPrecisionNames, p); }
Result<Precision> parse_precision(std::string_view text) { return enum_parse(kPrecisionNames, "precision", text); }
std::string_view exec_mode_name(ExecMode m) { return enum_name(kExecModeNames, m); }
Result<ExecMode> parse_exec_mode(std::string_view text) { return enum_parse(kExecModeNames, "mode", text); }

bool reads_dims_only(std::string_view op) { return op_has(op, OpTrait::READS_DIMS_ONLY); }

namespace {

// True when graph input `id` feeds a slot that must be constant (a Reshape's shape, ...).
bool feeds_constant_slot(const Graph& g, int id) {
    for (const Node& n : g.nodes)
        for (size_t s = 0; s < n.inputs.size(); ++s)
            if (n.inputs[s] == id && needs_constant_input(n.op, s)) return true;
    return false;
}

// Turns graph inputs that feed must-be-constant slots into constants of the given values.
Status bind_inputs(Graph& g, const std::vector<std::pair<std::string, HostTensor>>& values) {
    std::vector<int> keep;
    for (int id : g.inputs) {
        Value& v = g.value(id);
        const auto it = std::find_if(values.begin(), values.end(), [&](const auto& p) { return p.first == v.name; });
        if (!feeds_constant_slot(g, id) || it == values.end()) {
            keep.push_back(id);
            continue;
        }
        v.data = std::make_shared<const HostTensor>(it->second);
        v.dtype = it->second.dtype();
        v.shape = shape_of(it->second.dims());
        v.typed = true;
    }
    g.inputs = std::move(keep);
    return {};
}

// Sink for static input shapes, host when one keeps a symbol; options.mode may force host,
// or ask for sink, which a symbolic input refuses.
Result<ExecMode> choose_mode(const Graph& g, const CompileOptions& options) {
    const Value* symbolic = nullptr;
    for (int i : g.inputs)
        if (!symbolic && !shape_static(g.value(i).shape)) symbolic = &g.value(i);
    if (symbolic && options.mode == ExecMode::SINK)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: input '{}' has the symbolic shape {}; sink mode needs static shapes: give --shape "
                          "{}=... or compile for host mode",
                          g.source, symbolic->name, shape_str(symbolic->shape), symbolic->name);
    const ExecMode mode = options.mode.value_or(symbolic ? ExecMode::HOST : ExecMode::SINK);
    if (mode == ExecMode::HOST && options.precision == Precision::INT8)
        return make_error(StatusCode::UNSUPPORTED,
                          "{}: int8 needs static shapes (calibration runs the graph); give --shape{} and sink mode",
                          g.source, symbolic ? fmt::format(" {}=...", symbolic->name) : std::string());
    return mode;
}

// Host mode: keeps the optimised graph; every constant's bytes also go to the weights blob,
// 64-byte aligned, so the file and the device hold them as they do a sink model's weights.
void store_graph(Graph g, CompiledModel& m) {
    int64_t wbytes = 0;
    m.graph_offsets.assign(g.values.size(), -1);
    for (size_t i = 0; i < g.values.size(); ++i) {
        if (!g.values[i].is_constant()) continue;
        m.graph_offsets[i] = wbytes;
        wbytes += align_up(std::max<int64_t>(static_cast<int64_t>(g.values[i].data->bytes()), 1));
    }
    m.weights = HostTensor(DType::U8, {wbytes});
    for (size_t i = 0; i < g.values.size(); ++i)
        if (g.values[i].is_constant() && g.values[i].data->bytes() > 0)
            std::memcpy(m.weights.as<uint8_t>() + m.graph_offsets[i], g.values[i].data->data(),
                        g.values[i].data->bytes());
    m.graph = std::move(g);
}

// Checks the steps whose VectorSchedule fuses a side (see check_fused_steps); `work_of(i)` gives
// step i's work (asked only for the steps of fused chains).
Status check_fused(const std::string& source, const CompiledModel& m,
                   const std::function<Result<device::KernelWork>(size_t step)>& work_of,
                   const device::DeviceSpec& spec) {
    const size_t n = m.steps.size();
    auto schedule = [&](size_t i) -> const device::VectorSchedule* {
        return m.steps[i].alias ? nullptr : std::get_if<device::VectorSchedule>(&m.steps[i].tiling);
    };
    auto name = [&](size_t i) { return fmt::format("'{}' ({})", m.steps[i].name, m.steps[i].kernel); };
    auto refuse = [&](size_t p, std::string_view why) {
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: fused steps {} -> {}: {}", source, name(p),
                          p + 1 < n ? name(p + 1) : std::string("(none: the last step)"), why);
    };
    for (size_t i = 0; i < n;) {
        const device::VectorSchedule* v = schedule(i);
        if (!v || (!v->fuse_input && !v->fuse_output)) {
            ++i;
            continue;
        }
        if (v->fuse_input)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: step {} fuses its input, but the step before it ({}) does not fuse its output",
                              source, name(i), i > 0 ? name(i - 1) : std::string("none: it is the first step"));
        size_t j = i;  // the chain is steps i .. j
        for (; schedule(j)->fuse_output; ++j) {
            const CompiledStep& p = m.steps[j];
            if (j + 1 >= n) return refuse(j, "the producer fuses its output but no step follows it");
            const device::VectorSchedule* c = schedule(j + 1);
            if (!c || !c->fuse_input)
                return refuse(j, "the producer fuses its output but the next step does not fuse its input");
            if (p.placement != Placement::DEVICE || m.steps[j + 1].placement != Placement::DEVICE)
                return refuse(j, "a step placed on the host cannot share UB");
            if (p.outputs.size() != 1) return refuse(j, "the producer has more than one output");
            const int t = p.outputs[0];
            const std::string& tname = m.tensors[static_cast<size_t>(t)].name;
            if (std::find(m.outputs.begin(), m.outputs.end(), t) != m.outputs.end())
                return refuse(
                    j, fmt::format("the producer's output '{}' is a graph output, which must reach memory", tname));
            const std::vector<int>& cin = m.steps[j + 1].inputs;
            if (std::find(cin.begin(), cin.end(), t) == cin.end())
                return refuse(j, fmt::format("the consumer does not read the producer's output '{}'", tname));
            for (size_t r = 0; r < n; ++r) {
                const std::vector<int>& rin = m.steps[r].inputs;
                if (r != j + 1 && std::find(rin.begin(), rin.end(), t) != rin.end())
                    return refuse(j, fmt::format("the producer's output '{}' is also read by step {}", tname, name(r)));
            }
        }
        std::vector<device::KernelWork> works;
        std::string names;
        for (size_t k = i; k <= j; ++k) {
            LOOM_ASSIGN_OR_RETURN(device::KernelWork w, work_of(k));
            if (w.kind != device::TilingKind::VECTOR)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: step {} fuses a side but is not a Vector op",
                                  source, name(k));
            works.push_back(w);
            names += fmt::format("{}{} {}", k > i ? " -> " : "", k - i, name(k));
        }
        std::vector<device::cost::FusedOp> chain;
        for (size_t k = i; k <= j; ++k) chain.push_back({schedule(k), &works[k - i].vector});
        if (Status st = device::cost::check_fused_chain(chain, spec); !st.ok())
            return st.with_context(fmt::format("{}: fused steps {}", source, names));
        i = j + 1;
    }
    return {};
}

}  // namespace

Placement placement_of(const CompiledStep& s, std::span<const CompiledTensor> tensors) {
    // Ops that compute shapes and indices (HOST_WHEN_TINY) go to the host when their data is
    // tiny, as the Ascend graph engine places them, so a chain of them never round-trips
    // through the device.
    bool tiny = op_has(s.op, OpTrait::HOST_WHEN_TINY);
    // Shape reads its input's dims, never its data: placed by its output alone.
    for (int id : s.inputs)
        if (id >= 0 && !reads_dims_only(s.op) && tensors[static_cast<size_t>(id)].bytes > kHostElementsMax * 8)
            tiny = false;
    for (int id : s.outputs) {
        const CompiledTensor& t = tensors[static_cast<size_t>(id)];
        if (t.bytes / static_cast<int64_t>(device::dtype_size(t.dtype)) >= kHostElementsMax) tiny = false;
    }
    return tiny ? Placement::HOST : Placement::DEVICE;
}

device::TensorRef tensor_ref_of(const CompiledTensor& t, void* base, uint64_t base_addr) {
    device::TensorRef r;
    r.dtype = t.dtype;
    r.rank = static_cast<int>(t.dims.size());
    for (size_t i = 0; i < t.dims.size(); ++i) r.dims[i] = t.dims[i];
    r.data = base ? static_cast<std::byte*>(base) + t.offset : nullptr;  // cost-only launches have no base
    r.device_addr = base_addr + static_cast<uint64_t>(t.offset);
    return r;
}

Result<std::pair<std::string, std::vector<int64_t>>> parse_shape_option(const std::string& text) {
    const size_t eq = text.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "--shape '{}': expected NAME=1x3x240x320", text);
    std::vector<int64_t> dims;
    const std::string s = text.substr(eq + 1);
    size_t pos = 0;
    while (pos <= s.size()) {
        size_t x = s.find('x', pos);
        if (x == std::string::npos) x = s.size();
        int64_t v = -1;
        const char* b = s.data() + pos;
        const char* e = s.data() + x;
        if (b == e || std::from_chars(b, e, v).ptr != e || v < 0 || v > (int64_t{1} << 31))
            return make_error(StatusCode::INVALID_ARGUMENT, "--shape '{}': '{}' is not a dimension", text,
                              std::string(b, e));
        dims.push_back(v);
        pos = x + 1;
    }
    return std::make_pair(text.substr(0, eq), std::move(dims));
}

Result<std::vector<BufferRequest>> plan_requests(const CompiledModel& m, std::vector<int>& tensor_of) {
    const int steps = static_cast<int>(m.steps.size());
    // A split region's steps run band by band: every tensor one of them reads or writes is live
    // from the region's first step to its last (at least).
    std::vector<std::pair<int, int>> span(static_cast<size_t>(steps));
    for (int si = 0; si < steps; ++si) span[static_cast<size_t>(si)] = {si, si};
    for (const SplitRegion& r : m.splits)
        if (r.first >= 0 && r.first <= r.last && r.last < steps)
            for (int si = r.first; si <= r.last; ++si) span[static_cast<size_t>(si)] = {r.first, r.last};
    std::vector<int> request_of(m.tensors.size(), -1);
    std::vector<BufferRequest> requests;
    tensor_of.clear();
    auto request = [&](int id, int first) {
        request_of[static_cast<size_t>(id)] = static_cast<int>(requests.size());
        requests.push_back({std::max<int64_t>(m.tensors[static_cast<size_t>(id)].device_bytes(), 1), first, first, -1});
        tensor_of.push_back(id);
    };
    auto arena = [&](int id) { return id >= 0 && m.tensors[static_cast<size_t>(id)].storage == Storage::ARENA; };
    for (int id : m.inputs)
        if (arena(id) && request_of[static_cast<size_t>(id)] < 0) request(id, -1);
    for (int si = 0; si < steps; ++si) {
        const CompiledStep& s = m.steps[static_cast<size_t>(si)];
        for (int id : s.inputs) {
            if (!arena(id)) continue;
            const int r = request_of[static_cast<size_t>(id)];
            if (r < 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "step {} ('{}') reads tensor '{}' before it is written",
                                  si, s.name, m.tensors[static_cast<size_t>(id)].name);
            requests[static_cast<size_t>(r)].last = std::max(requests[static_cast<size_t>(r)].last,
                                                             span[static_cast<size_t>(si)].second);
        }
        for (size_t k = 0; k < s.outputs.size(); ++k) {
            const int id = s.outputs[k];
            if (!arena(id))
                return make_error(StatusCode::INVALID_ARGUMENT, "step {} ('{}') writes a tensor outside the arena", si,
                                  s.name);
            if (request_of[static_cast<size_t>(id)] >= 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "step {} ('{}') writes tensor '{}' a second time", si,
                                  s.name, m.tensors[static_cast<size_t>(id)].name);
            request(id, span[static_cast<size_t>(si)].first);
            if (s.alias && k == 0 && arena(s.inputs.empty() ? -1 : s.inputs[0]))
                requests.back().alias_of = request_of[static_cast<size_t>(s.inputs[0])];
        }
    }
    for (int id : m.outputs) {
        if (!arena(id)) continue;
        const int r = request_of[static_cast<size_t>(id)];
        if (r < 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "graph output '{}' is never written",
                              m.tensors[static_cast<size_t>(id)].name);
        requests[static_cast<size_t>(r)].last = steps;
    }
    return requests;
}

Status plan_arena(CompiledModel& m) {
    std::vector<int> tensor_of;
    LOOM_ASSIGN_OR_RETURN(std::vector<BufferRequest> requests, plan_requests(m, tensor_of));
    LOOM_ASSIGN_OR_RETURN(MemoryPlan plan, plan_memory(requests, kAlign));
    for (size_t r = 0; r < requests.size(); ++r) m.tensors[static_cast<size_t>(tensor_of[r])].offset = plan.offsets[r];
    m.arena_bytes = std::max<int64_t>(plan.peak, kAlign);
    m.plan_lower_bound = plan.lower_bound;
    m.plan_naive = plan.naive;
    return {};
}

std::vector<std::string> specialised_inputs(const Graph& g, const CompileOptions& options) {
    std::vector<std::string> names;
    for (int id : g.inputs) {
        const std::string& name = g.value(id).name;
        const bool given = std::any_of(options.input_values.begin(), options.input_values.end(),
                                       [&](const auto& p) { return p.first == name; });
        if (given && feeds_constant_slot(g, id)) names.push_back(name);
    }
    return names;
}

Result<CompiledModel> compile_graph(Graph g, const CompileOptions& options, const device::DeviceSpec& spec) {
    CompiledModel m;
    m.compiler_version = kVersion;
    m.compiler_build = build_id();
    m.source = g.source;
    m.name = g.name;
    m.descriptor = g.descriptor;
    m.spec_name = spec.name;
    m.spec_hash = spec.hash();
    m.precision = options.precision;
    m.fold = options.fold;
    m.host_placement = options.host_placement;
    m.nodes_imported = g.nodes.size();
    LOOM_TRY(bind_inputs(g, options.input_values));
    auto shapes = options.shapes;
    std::erase_if(shapes, [&](const auto& s) {
        const int id = g.find_value(s.first);
        return id >= 0 && g.value(id).is_constant();  // specialised to its value above
    });
    LOOM_TRY(set_input_shapes(g, shapes));
    LOOM_ASSIGN_OR_RETURN(m.mode, choose_mode(g, options));
    LOOM_TRY(infer_shapes(g));
    OptimizeOptions oo;
    oo.fuse = options.optimize;
    oo.fold = options.fold;
    oo.f16 = options.precision == Precision::FP16;
    LOOM_ASSIGN_OR_RETURN(m.passes, optimize(g, oo));
    if (options.precision == Precision::INT8) {
        const size_t before = g.nodes.size();
        LOOM_ASSIGN_OR_RETURN(m.int8, quantize_int8(g, options.calibration));
        m.passes.push_back({"quantize_int8", before, g.nodes.size(), m.int8.nodes_quantized});
        compact(g);
    }
    {
        const size_t before = g.nodes.size();
        int cancelled = 0;
        const int inserted = assign_layouts(g, &cancelled);
        m.passes.push_back({"assign_layouts", before, g.nodes.size(), inserted + cancelled});
        compact(g);
    }

    if (m.mode == ExecMode::HOST) {
        if (!options.splits.empty())
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: split regions need a sink model; host mode lowers per input shape at run time",
                              m.source);
        store_graph(std::move(g), m);
        return m;
    }
    if (options.measure_host) {
        LOOM_ASSIGN_OR_RETURN(MeasureReport r, measure_conv_algorithms(g, options.pool ? *options.pool : ThreadPool::global()));
        m.passes.push_back({"measure_host", g.nodes.size(), g.nodes.size(), static_cast<int>(r.convs.size())});
        m.measured = std::move(r);
    }
    LOOM_TRY(lower_graph(g, spec, m, {}, 0, options.host_placement, options.tiling_source.get()));
    LOOM_TRY(apply_splits(m, options.splits, spec, options.tiling_source.get()));
    return m;
}

Status lower_graph(const Graph& g, const device::DeviceSpec& spec, CompiledModel& m, std::span<const int64_t> resident,
                   int64_t resident_bytes, bool host_placement, const TilingSource* tiling_source) {
    LOOM_ASSERT(resident.empty() || resident.size() == g.values.size());
    LOOM_ASSERT(resident_bytes % kAlign == 0);
    // Tensors: one per value, same ids.
    m.tensors.assign(g.values.size(), CompiledTensor{});
    m.steps.clear();
    for (size_t i = 0; i < g.values.size(); ++i) {
        const Value& v = g.values[i];
        CompiledTensor& t = m.tensors[i];
        t.name = v.name;
        t.dtype = v.dtype;
        if (!v.typed || !shape_static(v.shape))
            return make_error(StatusCode::UNSUPPORTED,
                              "{}: value '{}' has the shape {}, which depends on run-time data; Loom compiles static "
                              "shapes (make the inputs that decide it constants)",
                              g.source, v.name, v.typed ? shape_str(v.shape) : std::string("(unknown)"));
        t.dims = shape_dims(v.shape);
        if (t.dims.size() > static_cast<size_t>(device::kMaxRank))
            return make_error(StatusCode::UNSUPPORTED, "{}: value '{}' has rank {} (at most {})", g.source, v.name,
                              t.dims.size(), device::kMaxRank);
        LOOM_ASSIGN_OR_RETURN(int64_t n, shape_elements(v.shape, v.name));
        t.bytes = n * static_cast<int64_t>(device::dtype_size(v.dtype));
        t.storage = v.is_constant() ? Storage::WEIGHTS : Storage::ARENA;
        t.layout = v.layout;
    }
    m.inputs = g.inputs;
    m.outputs = g.outputs;

    // Steps.
    for (const Node& n : g.nodes) {
        LOOM_ASSIGN_OR_RETURN(Lowered l, lower_node(g, n));
        CompiledStep s;
        s.name = n.name;
        s.op = n.op;
        s.kernel = l.kernel;
        s.attrs = std::move(l.attrs);
        s.inputs = std::move(l.inputs);
        s.outputs = n.outputs;
        s.alias = l.alias;
        s.fused = n.fused;
        s.placement = host_placement ? placement_of(s, m.tensors) : Placement::DEVICE;
        m.steps.push_back(std::move(s));
    }

    // Weights: every constant a step or a graph output reads, 64-byte aligned; those already
    // resident keep their place, the others follow the resident blob.
    int64_t wbytes = 0;
    std::vector<bool> needed(m.tensors.size(), false);
    for (const CompiledStep& s : m.steps)
        for (int id : s.inputs)
            if (id >= 0) needed[static_cast<size_t>(id)] = true;
    for (int id : m.outputs) needed[static_cast<size_t>(id)] = true;
    auto is_resident = [&](size_t i) { return !resident.empty() && resident[i] >= 0; };
    for (size_t i = 0; i < m.tensors.size(); ++i) {
        CompiledTensor& t = m.tensors[i];
        if (t.storage != Storage::WEIGHTS) continue;
        if (is_resident(i)) {
            t.offset = resident[i];
            continue;
        }
        if (!needed[i]) {
            t.offset = -1;  // nothing reads it (a Reshape's shape, say): not stored
            continue;
        }
        t.offset = resident_bytes + wbytes;
        wbytes += align_up(std::max<int64_t>(t.bytes, 1));
    }
    m.weights = HostTensor(DType::U8, {wbytes});
    for (size_t i = 0; i < m.tensors.size(); ++i) {
        const CompiledTensor& t = m.tensors[i];
        if (t.storage != Storage::WEIGHTS || !needed[i] || is_resident(i) || t.bytes == 0) continue;
        std::memcpy(m.weights.as<uint8_t>() + (t.offset - resident_bytes), g.values[i].data->data(),
                    static_cast<size_t>(t.bytes));
    }

    // An alias step whose input is a weight copies instead (nothing to share in the arena).
    for (CompiledStep& s : m.steps)
        if (s.alias && (s.inputs[0] < 0 || m.tensors[static_cast<size_t>(s.inputs[0])].storage != Storage::ARENA))
            s.alias = false;
    LOOM_TRY(plan_arena(m));

    // Check every launch with its kernel's cost function, as the device will. Constants show
    // the kernel their values (from the graph), activations only their shapes.
    auto constant_data = [&](int id) -> const void* {
        const Value& v = g.values[static_cast<size_t>(id)];
        return v.is_constant() ? v.data->data() : nullptr;
    };
    std::vector<device::KernelWork> works(m.steps.size());
    for (size_t si = 0; si < m.steps.size(); ++si) {
        CompiledStep& s = m.steps[si];
        if (s.alias) continue;
        const device::KernelDef* k = device::find_kernel(s.kernel);
        if (!k) return make_error(StatusCode::INTERNAL, "step '{}': kernel '{}' is not registered", s.name, s.kernel);
        device::KernelLaunch launch = step_cost_launch(m.tensors, s, constant_data);
        auto context = [&] { return fmt::format("{}: node '{}' ({}) -> kernel {}", g.source, s.name, s.op, s.kernel); };
        Result<device::CycleBreakdown> cost = Status();
        bool from_source = false;
        if (k->work) {
            auto work = k->work(launch, spec);
            if (!work.ok()) return work.status().with_context(context());
            if (tiling_source && work->kind != device::TilingKind::NONE && s.placement == Placement::DEVICE) {
                std::optional<device::Tiling> t = tiling_source->tiling_for(step_key(k->name, launch, spec));
                if (t && !std::holds_alternative<std::monostate>(*t)) launch.tiling = *t, from_source = true;
            }
            cost = device::cost::cost_of_work(spec, *work, launch.tiling, k->name);
            works[si] = std::move(*work);
        } else {
            cost = k->cost(launch, spec);
        }
        if (!cost.ok() && from_source)
            return cost.status().with_context(
                fmt::format("{}: the tiling from the tiling source is refused", context()));
        if (!cost.ok()) return cost.status().with_context(context());
        s.cost_ns = cost->total / spec.aicore_clock_ghz;
        s.tiling = cost->tiling;  // the tiling the cost model chose: recorded, and run as compiled
        s.flops = cost->flops;
    }
    return check_fused(
        g.source, m, [&](size_t i) -> Result<device::KernelWork> { return works[i]; }, spec);
}

Status check_fused_steps(const CompiledModel& m, const device::DeviceSpec& spec) {
    const bool any = std::any_of(m.steps.begin(), m.steps.end(), [](const CompiledStep& s) {
        const auto* v = std::get_if<device::VectorSchedule>(&s.tiling);
        return v && (v->fuse_input || v->fuse_output);
    });
    if (!any) return {};
    const auto* weights = static_cast<const std::byte*>(m.weights.data());
    auto constant_data = [&](int id) -> const void* {
        const CompiledTensor& t = m.tensors[static_cast<size_t>(id)];
        return t.storage == Storage::WEIGHTS && t.offset >= 0 ? weights + t.offset : nullptr;
    };
    auto work_of = [&](size_t i) -> Result<device::KernelWork> {
        const CompiledStep& s = m.steps[i];
        const device::KernelDef* k = device::find_kernel(s.kernel);
        if (!k || !k->work)
            return make_error(StatusCode::NOT_FOUND, "{}: step '{}' needs the kernel '{}' with a work function",
                              m.source, s.name, s.kernel);
        auto w = k->work(step_cost_launch(m.tensors, s, constant_data), spec);
        if (!w.ok())
            return w.status().with_context(fmt::format("{}: step '{}' -> kernel {}", m.source, s.name, s.kernel));
        return w;
    };
    return check_fused(m.source, m, work_of, spec);
}

device::KernelLaunch step_cost_launch(std::span<const CompiledTensor> tensors, const CompiledStep& s,
                                      const std::function<const void*(int id)>& constant_data) {
    device::KernelLaunch launch;
    launch.attrs = s.attrs;
    launch.tiling = s.tiling;
    for (int id : s.inputs) {
        if (id < 0) {
            device::TensorRef empty;
            empty.rank = 1;
            launch.inputs.push_back(empty);
            continue;
        }
        launch.inputs.push_back(tensor_ref_of(tensors[static_cast<size_t>(id)], nullptr, 0));
        launch.inputs.back().data = const_cast<void*>(constant_data(id));
    }
    for (int id : s.outputs) {
        launch.outputs.push_back(tensor_ref_of(tensors[static_cast<size_t>(id)], nullptr, 0));
        launch.outputs.back().data = nullptr;
    }
    return launch;
}

Result<CompiledModel> compile_for_batch(Graph g, int64_t batch, CompileOptions options,
                                        const device::DeviceSpec& spec) {
    if (batch < 1 || batch > kCompileBatchMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: batch {} (1 to {})", g.source, batch, kCompileBatchMax);
    if (g.inputs.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: the model has no inputs to batch", g.source);
    // The batch symbol: dim 0 of every input, the same symbol for all.
    std::string symbol, first_input;
    for (int id : g.inputs) {
        const Value& v = g.value(id);
        if (v.shape.empty())
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: input '{}' is a scalar: there is no batch dim to batch", g.source, v.name);
        const Dim& d = v.shape[0];
        if (d.known())
            return make_error(StatusCode::UNSUPPORTED,
                              "{}: input '{}' fixes its batch dim at {} ({}): batching needs a model whose dim 0 is "
                              "symbolic, such as an ONNX model with dim_param N (ncnn models are imported with N = 1)",
                              g.source, v.name, d.value, shape_str(v.shape));
        if (symbol.empty()) {
            symbol = d.symbol;
            first_input = v.name;
        } else if (d.symbol != symbol) {
            return make_error(StatusCode::UNSUPPORTED,
                              "{}: input '{}' has batch dim '{}' and input '{}' has '{}': one batch symbol is needed",
                              g.source, v.name, d.symbol, first_input, symbol);
        }
    }
    // The symbol must reach dim 0 of every output: checked on a copy with the other dims as
    // compiled (from options.shapes where given) and dim 0 kept symbolic.
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    {
        Graph probe = g;
        for (int id : probe.inputs) {
            Value& v = probe.value(id);
            const auto given = std::find_if(options.shapes.begin(), options.shapes.end(),
                                            [&](const auto& s) { return s.first == v.name; });
            std::vector<int64_t> dims;
            if (given != options.shapes.end()) {
                if (given->second.size() != v.shape.size())
                    return make_error(StatusCode::INVALID_ARGUMENT, "--shape {}={}: the model declares rank {} ({})",
                                      v.name, fmt::join(given->second, "x"), v.shape.size(), shape_str(v.shape));
                dims = given->second;
                for (size_t a = 1; a < dims.size(); ++a) v.shape[a] = dims[a];
            } else {
                for (size_t a = 1; a < v.shape.size(); ++a) {
                    if (!v.shape[a].known())
                        return make_error(StatusCode::INVALID_ARGUMENT,
                                          "{}: input '{}' ({}) needs --shape for its dims other than the batch",
                                          g.source, v.name, shape_str(v.shape));
                    dims.push_back(v.shape[a].value);
                }
                dims.insert(dims.begin(), 0);
            }
            dims[0] = batch;
            shapes.emplace_back(v.name, std::move(dims));
        }
        reset_types(probe);
        LOOM_TRY(infer_shapes(probe).with_context(fmt::format("{}: batch check", g.source)));
        for (int id : probe.outputs) {
            const Value& v = probe.value(id);
            if (v.shape.empty() || v.shape[0].known() || v.shape[0].symbol != symbol)
                return make_error(StatusCode::UNSUPPORTED,
                                  "{}: output '{}' has the shape {}, whose dim 0 is not the batch dim '{}': frames "
                                  "would not map to rows of the output",
                                  g.source, v.name, shape_str(v.shape), symbol);
        }
    }
    options.shapes = std::move(shapes);
    return compile_graph(std::move(g), options, spec);
}

}  // namespace loom::compiler
