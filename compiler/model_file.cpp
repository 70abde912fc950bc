#include "compiler/model_file.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "common/file.hpp"
#include "common/hash.hpp"
#include "common/json.hpp"
#include "common/text.hpp"
#include "common/version.hpp"
#include "compiler/memory_plan.hpp"
#include "compiler/ops.hpp"
#include "compiler/passes.hpp"
#include "compiler/split.hpp"

namespace loom::compiler {

namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'M', 'O', 'D', 'L'};
constexpr size_t kHeaderBytes = 40;
constexpr uint64_t kJsonBytesMax = uint64_t{1} << 30;
constexpr int64_t kStepsMax = int64_t{1} << 30;  // a step index read from a file (an int)
constexpr uint64_t kWeightsBytesMax = uint64_t{16} << 30;


size_t pad64(size_t n) { return (64 - n % 64) % 64; }

void put_u32(std::string& s, uint32_t v) {
    for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& s, uint64_t v) {
    for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t get_u64(const unsigned char* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}
uint32_t get_u32(const unsigned char* p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

Result<DType> dtype_from_name(const std::string& s, const std::string& path) {
    for (DType t : {DType::F32, DType::F16, DType::I8, DType::I32, DType::U8, DType::I64})
        if (device::dtype_name(t) == s) return t;
    return make_error(StatusCode::PARSE_ERROR, "{}: unknown dtype '{}'", path, s);
}

Result<Layout> layout_from_name(const std::string& s, const std::string& path, const std::string& tensor) {
    if (s == "ND") return Layout::ND;
    if (s == "NC1HWC0") return Layout::NC1HWC0;
    return make_error(StatusCode::PARSE_ERROR, "{}: tensor '{}' has the unknown layout '{}'", path, tensor, s);
}

nlohmann::json attrs_json(const KernelAttrs& a) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& [name, value] : a.items()) {
        nlohmann::json v;
        std::string kind;
        std::visit(
            [&](const auto& x) {
                using T = std::decay_t<decltype(x)>;
                v = x;
                if constexpr (std::is_same_v<T, int64_t>) kind = "int";
                else if constexpr (std::is_same_v<T, double>) kind = "float";
                else if constexpr (std::is_same_v<T, std::string>) kind = "string";
                else if constexpr (std::is_same_v<T, std::vector<int64_t>>) kind = "ints";
                else kind = "floats";
            },
            value);
        out.push_back({name, kind, v});
    }
    return out;
}

KernelAttrs attrs_from_json(const nlohmann::json& j) {
    KernelAttrs a;
    for (const auto& item : j) {
        const std::string name = item.at(0).get<std::string>(), kind = item.at(1).get<std::string>();
        const auto& v = item.at(2);
        if (kind == "int") a.set(name, json_int(v));
        else if (kind == "float") a.set(name, v.get<double>());
        else if (kind == "string") a.set(name, v.get<std::string>());
        else if (kind == "ints") a.set(name, json_ints(v));
        else if (kind == "floats") a.set(name, v.get<std::vector<double>>());
        else throw std::runtime_error(fmt::format("attribute '{}' has the unknown kind '{}'", name, kind));
    }
    return a;
}

}  // namespace

nlohmann::json tiling_json(const device::Tiling& t) {
    if (const auto* c = std::get_if<device::CubeTiling>(&t))
        return {{"kind", "cube"}, {"m_l1", c->m_l1}, {"n_l1", c->n_l1}, {"k_l1", c->k_l1}, {"m_l0", c->m_l0},
                {"n_l0", c->n_l0}, {"k_l0", c->k_l0}, {"n_outer", c->n_outer}, {"double_buffer", c->double_buffer},
                {"cores", c->cores}};
    if (const auto* v = std::get_if<device::VectorSchedule>(&t))
        return {{"kind", "vector"},
                {"ub_tile", v->ub_tile},
                {"double_buffer", v->double_buffer},
                {"cores", v->cores},
                {"vector_axis", device::vector_axis_name(v->vector_axis)},
                {"vector_tile", v->vector_tile},
                {"fuse_input", v->fuse_input},
                {"fuse_output", v->fuse_output},
                {"fuse_ub_buffers", v->fuse_ub_buffers},
                {"in_place", v->in_place}};
    return nullptr;
}

namespace {

// Reads member `name` of object `j` as T; false (and `error` set) when it is missing or of
// another JSON type.
template <typename T>
bool tiling_field(const nlohmann::json& j, const char* name, T& out, std::string& error) {
    const auto it = j.find(name);
    if (it == j.end()) {
        error = fmt::format("tiling: missing '{}'", name);
        return false;
    }
    if constexpr (std::is_same_v<T, bool>) {
        if (!it->is_boolean()) {
            error = fmt::format("tiling: '{}' is not a boolean", name);
            return false;
        }
        out = it->get<bool>();
    } else if constexpr (std::is_same_v<T, int64_t>) {
        if (!json_fits_int64(*it)) {
            error = fmt::format("tiling: '{}' is not an integer", name);
            return false;
        }
        out = it->get<int64_t>();
    } else {
        if (!it->is_string()) {
            error = fmt::format("tiling: '{}' is not a string", name);
            return false;
        }
        out = it->get<std::string>();
    }
    return true;
}

}  // namespace

Result<device::Tiling> tiling_from_json(const nlohmann::json& j) {
    if (j.is_null()) return device::Tiling(std::monostate{});
    if (!j.is_object()) return make_error(StatusCode::PARSE_ERROR, "tiling: not an object or null");
    std::string kind, error;
    if (!tiling_field(j, "kind", kind, error)) return Status(StatusCode::PARSE_ERROR, error);
    if (kind == "cube") {
        device::CubeTiling c;
        if (!tiling_field(j, "m_l1", c.m_l1, error) || !tiling_field(j, "n_l1", c.n_l1, error) ||
            !tiling_field(j, "k_l1", c.k_l1, error) || !tiling_field(j, "m_l0", c.m_l0, error) ||
            !tiling_field(j, "n_l0", c.n_l0, error) || !tiling_field(j, "k_l0", c.k_l0, error) ||
            !tiling_field(j, "n_outer", c.n_outer, error) ||
            !tiling_field(j, "double_buffer", c.double_buffer, error) || !tiling_field(j, "cores", c.cores, error))
            return Status(StatusCode::PARSE_ERROR, error);
        return device::Tiling(c);
    }
    if (kind == "vector") {
        device::VectorSchedule v;
        std::string axis;
        if (!tiling_field(j, "ub_tile", v.ub_tile, error) ||
            !tiling_field(j, "double_buffer", v.double_buffer, error) || !tiling_field(j, "cores", v.cores, error) ||
            !tiling_field(j, "vector_axis", axis, error) || !tiling_field(j, "vector_tile", v.vector_tile, error) ||
            !tiling_field(j, "fuse_input", v.fuse_input, error) ||
            !tiling_field(j, "fuse_output", v.fuse_output, error) ||
            !tiling_field(j, "fuse_ub_buffers", v.fuse_ub_buffers, error) ||
            !tiling_field(j, "in_place", v.in_place, error))
            return Status(StatusCode::PARSE_ERROR, error);
        if (!device::vector_axis_from_name(axis, v.vector_axis))
            return make_error(StatusCode::PARSE_ERROR, "tiling: unknown vector_axis '{}' (inner, axis or outer)",
                              printable(axis));
        return device::Tiling(v);
    }
    return make_error(StatusCode::PARSE_ERROR, "tiling: unknown kind '{}' (cube or vector)", printable(kind));
}

namespace {

nlohmann::json shape_json(const Shape& shape) {
    nlohmann::json out = nlohmann::json::array();
    for (const Dim& d : shape) {
        if (d.known()) out.push_back(d.value);
        else out.push_back(d.symbol);
    }
    return out;
}

Shape shape_from_json(const nlohmann::json& j) {
    Shape s;
    for (const auto& d : j) {
        if (d.is_string() && !d.get<std::string>().empty()) s.push_back(Dim::sym(d.get<std::string>()));
        else if (d.is_number_integer() && d.get<int64_t>() >= 0) s.push_back(Dim(d.get<int64_t>()));
        else throw std::runtime_error(fmt::format("bad dim {} in a shape", d.dump()));
    }
    return s;
}

// Host mode's graph section: values (dtype, shape with symbols, a constant's offset in the
// weights blob), nodes (op, attributes, value ids, fused names), inputs and outputs.
nlohmann::json graph_json(const CompiledModel& m) {
    const Graph& g = m.graph;
    nlohmann::json values = nlohmann::json::array();
    for (size_t i = 0; i < g.values.size(); ++i) {
        const Value& v = g.values[i];
        nlohmann::json jv{{"name", v.name}, {"dtype", std::string(device::dtype_name(v.dtype))},
                          {"shape", shape_json(v.shape)}, {"typed", v.typed},
                          {"layout", std::string(layout_name(v.layout))}};
        if (v.is_constant()) jv["offset"] = m.graph_offsets[i];
        values.push_back(std::move(jv));
    }
    nlohmann::json nodes = nlohmann::json::array();
    for (const Node& n : g.nodes)
        nodes.push_back({{"name", n.name}, {"op", n.op}, {"attrs", attrs_json(n.attrs)}, {"inputs", n.inputs},
                         {"outputs", n.outputs}, {"fused", n.fused}});
    return {{"opset", g.opset}, {"values", std::move(values)}, {"nodes", std::move(nodes)},
            {"inputs", g.inputs}, {"outputs", g.outputs}};
}

// Reads the graph section; constants get their bytes from the weights blob (offsets and sizes
// checked here, before anything is copied).
Status graph_from_json(const nlohmann::json& j, CompiledModel& m, const std::string& path) {
    Graph& g = m.graph;
    g.name = m.name;
    g.source = m.source;
    g.descriptor = m.descriptor;
    g.opset = json_int(j.at("opset"));
    const int64_t wbytes = m.weights.elements();
    for (const auto& jv : j.at("values")) {
        const std::string name = jv.at("name").get<std::string>();
        if (g.find_value(name) >= 0)
            return make_error(StatusCode::PARSE_ERROR, "{}: graph: value '{}' is defined twice", path, name);
        const int id = g.add_value(name);
        Value& v = g.value(id);
        LOOM_ASSIGN_OR_RETURN(v.dtype, dtype_from_name(jv.at("dtype").get<std::string>(), path));
        v.shape = shape_from_json(jv.at("shape"));
        v.typed = jv.at("typed").get<bool>();
        LOOM_ASSIGN_OR_RETURN(v.layout, layout_from_name(jv.at("layout").get<std::string>(), path, name));
        int64_t offset = -1;
        if (jv.contains("offset")) {
            offset = json_int(jv.at("offset"));
            if (!v.typed || !shape_static(v.shape))
                return make_error(StatusCode::PARSE_ERROR, "{}: graph: constant '{}' has the shape {}", path, name,
                                  shape_str(v.shape));
            int64_t n = 1;
            for (const Dim& d : v.shape) {
                if (d.value != 0 && n > (int64_t{1} << 50) / d.value)
                    return make_error(StatusCode::PARSE_ERROR, "{}: graph: constant '{}' has bad dims", path, name);
                n *= d.value;
            }
            const int64_t bytes = n * static_cast<int64_t>(device::dtype_size(v.dtype));
            if (offset < 0 || offset % 64 != 0 || offset > wbytes || bytes > wbytes - offset)
                return make_error(StatusCode::PARSE_ERROR,
                                  "{}: graph: constant '{}' at offset {} + {} bytes leaves its weights of {} bytes", path,
                                  name, offset, bytes, wbytes);
            HostTensor t(v.dtype, shape_dims(v.shape));
            if (bytes > 0) std::memcpy(t.data(), m.weights.as<uint8_t>() + offset, static_cast<size_t>(bytes));
            v.data = std::make_shared<const HostTensor>(std::move(t));
        }
        m.graph_offsets.push_back(offset);
    }
    for (const auto& jn : j.at("nodes")) {
        Node n;
        n.name = jn.at("name").get<std::string>();
        n.op = jn.at("op").get<std::string>();
        n.attrs = attrs_from_json(jn.at("attrs"));
        n.inputs = json_ints_as<int>(jn.at("inputs"));
        n.outputs = json_ints_as<int>(jn.at("outputs"));
        n.fused = jn.at("fused").get<std::vector<std::string>>();
        g.nodes.push_back(std::move(n));
    }
    g.inputs = json_ints_as<int>(j.at("inputs"));
    g.outputs = json_ints_as<int>(j.at("outputs"));
    return {};
}

// A host-mode graph must hold together as the compiler left it: ids in range, every value read
// after it is produced and produced once, inputs typed and not constants, every op in the op
// table, and shape inference over the symbolic inputs must succeed again.
Status validate_graph(const Graph& g, const std::string& path) {
    const int nv = static_cast<int>(g.values.size());
    std::vector<bool> seen(g.values.size(), false);
    for (int id : g.inputs) {
        if (id < 0 || id >= nv)
            return make_error(StatusCode::PARSE_ERROR, "{}: graph: an input refers to value {} of {}", path, id, nv);
        const Value& v = g.value(id);
        if (v.is_constant() || !v.typed || seen[static_cast<size_t>(id)])
            return make_error(StatusCode::PARSE_ERROR, "{}: graph: input '{}' is a constant, untyped or listed twice",
                              path, v.name);
        seen[static_cast<size_t>(id)] = true;
    }
    for (const Node& n : g.nodes) {
        if (!find_op(n.op))
            return make_error(StatusCode::PARSE_ERROR, "{}: graph: {} uses an op this loomc does not know", path,
                              node_label(n));
        if (n.outputs.empty())
            return make_error(StatusCode::PARSE_ERROR, "{}: graph: {} has no outputs", path, node_label(n));
        for (int id : n.inputs)
            if (id < -1)
                return make_error(StatusCode::PARSE_ERROR, "{}: graph: {} refers to value {}", path, node_label(n), id);
    }
    if (Status st = g.validate(); !st.ok())
        return Status(StatusCode::PARSE_ERROR, fmt::format("{}: graph: {}", path, st.message()));
    Graph typed = g;
    typed.source.clear();  // messages name this .loom file, not the model it was compiled from
    reset_types(typed);
    if (Status st = infer_shapes(typed); !st.ok())
        return Status(StatusCode::PARSE_ERROR, fmt::format("{}: graph: {}", path, st.message()));
    return {};
}

// A value read from the file by parse_precision or parse_exec_mode; the error names the file.
template <typename E>
Result<E> from_file(Result<E> parsed, const std::string& path) {
    if (parsed.ok()) return parsed;
    return Status(StatusCode::PARSE_ERROR, fmt::format("{}: {}", path, parsed.status().message()));
}

// Split regions: in step order and disjoint, each one plan_split accepts (steps that can run band
// by band, rows that line up), with one tiling per band launch, none fusing in UB.
Status validate_splits(const CompiledModel& m, const std::string& path) {
    int after = 0;
    for (size_t i = 0; i < m.splits.size(); ++i) {
        const SplitRegion& r = m.splits[i];
        if (r.first < after || r.last < r.first || static_cast<size_t>(r.last) >= m.steps.size())
            return make_error(StatusCode::PARSE_ERROR, "{}: split region {} (steps {} to {}) is out of order or range",
                              path, i, r.first, r.last);
        after = r.last + 1;
        auto plan = plan_split(m, r.first, r.last, r.rows);
        if (!plan.ok()) return Status(StatusCode::PARSE_ERROR, fmt::format("{}: {}", path, plan.status().message()));
        if (r.tilings.size() != plan->launches.size())
            return make_error(StatusCode::PARSE_ERROR, "{}: split region {} has {} tilings for {} band launches", path,
                              i, r.tilings.size(), plan->launches.size());
        for (const device::Tiling& t : r.tilings)
            if (const auto* v = std::get_if<device::VectorSchedule>(&t); v && (v->fuse_input || v->fuse_output))
                return make_error(StatusCode::PARSE_ERROR, "{}: split region {}: a band launch fuses in UB", path, i);
    }
    return {};
}

Status validate(const CompiledModel& m, const std::string& path) {
    if (m.mode == ExecMode::HOST) {
        if (!m.tensors.empty() || !m.steps.empty() || !m.inputs.empty() || !m.outputs.empty() || m.arena_bytes != 0)
            return make_error(StatusCode::PARSE_ERROR, "{}: a host-mode model with tensors, steps or a plan", path);
        return validate_graph(m.graph, path);
    }
    const int64_t nt = static_cast<int64_t>(m.tensors.size());
    const int64_t wbytes = m.weights.elements();
    // Tensors the steps and outputs use (ids checked below); weights nothing uses are not stored.
    std::vector<bool> used(m.tensors.size(), false);
    auto mark = [&](int id) {
        if (id >= 0 && id < nt) used[static_cast<size_t>(id)] = true;
    };
    for (const CompiledStep& s : m.steps) {
        for (int id : s.inputs) mark(id);
        for (int id : s.outputs) mark(id);
    }
    for (int id : m.inputs) mark(id);
    for (int id : m.outputs) mark(id);
    for (size_t i = 0; i < m.tensors.size(); ++i) {
        const CompiledTensor& t = m.tensors[i];
        int64_t n = 1;
        for (int64_t d : t.dims) {
            if (d < 0 || (d != 0 && n > (int64_t{1} << 50) / d))
                return make_error(StatusCode::PARSE_ERROR, "{}: tensor {} ('{}') has bad dims", path, i, t.name);
            n *= d;
        }
        if (t.dims.size() > static_cast<size_t>(device::kMaxRank) ||
            t.bytes != n * static_cast<int64_t>(device::dtype_size(t.dtype)))
            return make_error(StatusCode::PARSE_ERROR, "{}: tensor {} ('{}') has {} bytes for its shape", path, i, t.name,
                              t.bytes);
        if (t.storage == Storage::WEIGHTS && t.offset == -1) {
            if (used[i])
                return make_error(StatusCode::PARSE_ERROR, "{}: tensor {} ('{}') is used but not stored", path, i, t.name);
            continue;
        }
        const int64_t limit = t.storage == Storage::WEIGHTS ? wbytes : m.arena_bytes;
        if ((t.layout == Layout::NC1HWC0 && (t.dims.size() != 4 || t.storage != Storage::ARENA)))
            return make_error(StatusCode::PARSE_ERROR, "{}: tensor {} ('{}') in NC1HWC0 must be a 4-D arena tensor", path,
                              i, t.name);
        const int64_t held = t.device_bytes();
        if (t.offset < 0 || t.offset % 64 != 0 || t.offset > limit || held > limit - t.offset)
            return make_error(StatusCode::PARSE_ERROR, "{}: tensor {} ('{}') at offset {} + {} bytes leaves its {} of {} bytes",
                              path, i, t.name, t.offset, held, t.storage == Storage::WEIGHTS ? "weights" : "arena",
                              limit);
    }
    auto check_id = [&](int id, bool optional, std::string_view what) -> Status {
        if ((optional && id == -1) || (id >= 0 && id < nt)) return {};
        return make_error(StatusCode::PARSE_ERROR, "{}: {} refers to tensor {} of {}", path, what, id, nt);
    };
    for (int id : m.inputs) LOOM_TRY(check_id(id, false, "a graph input"));
    for (int id : m.outputs) LOOM_TRY(check_id(id, false, "a graph output"));
    for (size_t i = 0; i < m.steps.size(); ++i) {
        const CompiledStep& s = m.steps[i];
        const std::string what = fmt::format("step {} ('{}')", i, s.name);
        if (!device::find_kernel(s.kernel))
            return make_error(StatusCode::PARSE_ERROR, "{}: {} uses the unknown kernel '{}'", path, what, s.kernel);
        if (s.outputs.empty()) return make_error(StatusCode::PARSE_ERROR, "{}: {} has no outputs", path, what);
        for (int id : s.inputs) LOOM_TRY(check_id(id, true, what));
        for (int id : s.outputs) LOOM_TRY(check_id(id, false, what));
        if (s.alias && (s.inputs.empty() || s.inputs[0] < 0 ||
                        m.tensors[static_cast<size_t>(s.inputs[0])].bytes < m.tensors[static_cast<size_t>(s.outputs[0])].bytes))
            return make_error(StatusCode::PARSE_ERROR, "{}: {} aliases an input it does not fit", path, what);
    }
    std::vector<int> tensor_of;
    // A file whose steps or plan do not hold together is corrupt, whatever the check says.
    auto requests = plan_requests(m, tensor_of);
    if (!requests.ok()) return Status(StatusCode::PARSE_ERROR, fmt::format("{}: {}", path, requests.status().message()));
    MemoryPlan plan;
    plan.peak = m.arena_bytes;
    for (int id : tensor_of) plan.offsets.push_back(m.tensors[static_cast<size_t>(id)].offset);
    if (Status s = check_memory_plan(*requests, plan, 64); !s.ok())
        return Status(StatusCode::PARSE_ERROR, fmt::format("{}: memory plan: {}", path, s.message()));
    return validate_splits(m, path);
}

}  // namespace

nlohmann::json compiled_model_json(const CompiledModel& m) {
    nlohmann::json j;
    j["compiler_version"] = m.compiler_version;
    j["compiler_build"] = m.compiler_build;
    j["source"] = m.source;
    j["name"] = m.name;
    j["spec"] = {{"name", m.spec_name}, {"hash", fmt::format("{:016x}", m.spec_hash)}};
    j["precision"] = std::string(precision_name(m.precision));
    j["mode"] = std::string(exec_mode_name(m.mode));
    if (m.descriptor) j["descriptor"] = descriptor_json(*m.descriptor);
    nlohmann::json tensors = nlohmann::json::array();
    for (const CompiledTensor& t : m.tensors)
        tensors.push_back({{"name", t.name},
                           {"dtype", std::string(device::dtype_name(t.dtype))},
                           {"dims", t.dims},
                           {"storage", t.storage == Storage::ARENA ? "arena" : "weights"},
                           {"layout", std::string(layout_name(t.layout))},
                           {"offset", t.offset},
                           {"bytes", t.bytes}});
    j["tensors"] = std::move(tensors);
    j["inputs"] = m.inputs;
    j["outputs"] = m.outputs;
    nlohmann::json steps = nlohmann::json::array();
    for (const CompiledStep& s : m.steps)
        steps.push_back({{"name", s.name},
                         {"op", s.op},
                         {"kernel", s.kernel},
                         {"attrs", attrs_json(s.attrs)},
                         {"inputs", s.inputs},
                         {"outputs", s.outputs},
                         {"alias", s.alias},
                         {"placement", s.placement == Placement::HOST ? "host" : "device"},
                         {"tiling", tiling_json(s.tiling)},
                         {"fused", s.fused},
                         {"cost_ns", s.cost_ns},
                         {"flops", s.flops}});
    j["steps"] = std::move(steps);
    if (!m.splits.empty()) {
        nlohmann::json splits = nlohmann::json::array();
        for (const SplitRegion& r : m.splits) {
            nlohmann::json tilings = nlohmann::json::array();
            for (const device::Tiling& t : r.tilings) tilings.push_back(tiling_json(t));
            splits.push_back({{"first", r.first}, {"last", r.last}, {"rows", r.rows}, {"tilings", std::move(tilings)}});
        }
        j["splits"] = std::move(splits);
    }
    j["plan"] = {{"arena_bytes", m.arena_bytes}, {"lower_bound", m.plan_lower_bound}, {"naive", m.plan_naive}};
    nlohmann::json passes = nlohmann::json::array();
    for (const PassCount& p : m.passes)
        passes.push_back({{"pass", p.pass}, {"nodes_before", p.nodes_before}, {"nodes_after", p.nodes_after},
                          {"changed", p.changed}});
    j["report"] = {{"nodes_imported", m.nodes_imported}, {"passes", std::move(passes)}};
    j["weights_bytes"] = m.weights.elements();
    if (m.mode == ExecMode::HOST) j["graph"] = graph_json(m);
    if (!m.fold || !m.host_placement) j["options"] = {{"fold", m.fold}, {"host_placement", m.host_placement}};
    if (m.source_hash != 0)
        j["cache"] = {{"source_hash", fmt::format("{:016x}", m.source_hash)},
                      {"options_hash", fmt::format("{:016x}", m.options_hash)}};
    if (m.precision == Precision::INT8)
        j["int8"] = {{"nodes_quantized", m.int8.nodes_quantized}, {"nodes_skipped", m.int8.nodes_skipped},
                     {"samples", m.int8.samples}, {"max_rel_error", m.int8.max_rel_error}, {"psnr_db", m.int8.psnr_db}};
    return j;
}

Status save_compiled_model(const std::string& path, const CompiledModel& m) {
    // Names come from the imported model: a byte that is not UTF-8 is refused naming the field
    // (nlohmann-json would throw from dump()).
    const nlohmann::json description = compiled_model_json(m);
    if (const std::string field = json_invalid_utf8_at(description); !field.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: cannot write: the model's field {} is not valid UTF-8",
                          path, field);
    const std::string json = description.dump();
    const uint64_t wbytes = static_cast<uint64_t>(m.weights.elements());
    uint64_t sum = fnv1a(kFnvBasis, json.data(), json.size());
    sum = fnv1a(sum, m.weights.data(), wbytes);
    std::string header(kMagic, sizeof(kMagic));
    // Version 4 only where its one addition is used, so that other files stay as they were.
    put_u32(header, m.splits.empty() ? kModelFormatVersionNoSplits : kModelFormatVersion);
    put_u32(header, 0);
    put_u64(header, json.size());
    put_u64(header, wbytes);
    put_u64(header, sum);
    // A temporary of its own per writer: two processes filling the same cache entry must not
    // write into one file.
    return write_file_atomically(path, [&](std::ostream& f) {
        f.write(header.data(), static_cast<std::streamsize>(header.size()));
        f.write(json.data(), static_cast<std::streamsize>(json.size()));
        const std::string pad(pad64(kHeaderBytes + json.size()), '\0');
        f.write(pad.data(), static_cast<std::streamsize>(pad.size()));
        f.write(static_cast<const char*>(m.weights.data()), static_cast<std::streamsize>(wbytes));
    });
}

Result<CompiledModel> load_compiled_model(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot open", path);
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}", path, ec.message());
    unsigned char h[kHeaderBytes] = {};
    f.read(reinterpret_cast<char*>(h), static_cast<std::streamsize>(std::min<uint64_t>(size, kHeaderBytes)));
    if (size < sizeof(kMagic) || std::memcmp(h, kMagic, sizeof(kMagic)) != 0)
        return make_error(StatusCode::PARSE_ERROR, "{}: not a Loom compiled model (bad magic)", path);
    if (size < kHeaderBytes)
        return make_error(StatusCode::PARSE_ERROR, "{}: too short for a compiled model header", path);
    const uint32_t version = get_u32(h + 8);
    if (version < kModelFormatVersionMin || version > kModelFormatVersion)
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "{}: compiled-model format version {}, this loomc reads versions {} to {}; recompile the model",
                          path, version, kModelFormatVersionMin, kModelFormatVersion);
    const uint64_t jbytes = get_u64(h + 16), wbytes = get_u64(h + 24), sum = get_u64(h + 32);
    if (jbytes > kJsonBytesMax || wbytes > kWeightsBytesMax ||
        kHeaderBytes + jbytes + pad64(kHeaderBytes + jbytes) + wbytes != size)
        return make_error(StatusCode::PARSE_ERROR, "{}: header sizes (JSON {} + weights {}) disagree with the file size {}",
                          path, jbytes, wbytes, size);
    std::string json(jbytes, '\0');
    if (!f.read(json.data(), static_cast<std::streamsize>(jbytes)) ||
        !f.seekg(static_cast<std::streamoff>(pad64(kHeaderBytes + jbytes)), std::ios::cur))
        return make_error(StatusCode::IO_ERROR, "{}: read failed", path);
    CompiledModel m;
    m.weights = HostTensor(DType::U8, {static_cast<int64_t>(wbytes)});
    if (!f.read(static_cast<char*>(m.weights.data()), static_cast<std::streamsize>(wbytes)))
        return make_error(StatusCode::IO_ERROR, "{}: read failed", path);
    uint64_t actual = fnv1a(kFnvBasis, json.data(), json.size());
    actual = fnv1a(actual, m.weights.data(), wbytes);
    if (actual != sum)
        return make_error(StatusCode::PARSE_ERROR, "{}: checksum mismatch (file {:016x}, contents {:016x}): the file is corrupt",
                          path, sum, actual);
    try {
        LOOM_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json(json, path + ": model description"));
        m.compiler_version = j.at("compiler_version").get<std::string>();
        m.compiler_build = j.value("compiler_build", std::string());
        m.source = j.at("source").get<std::string>();
        m.name = j.at("name").get<std::string>();
        m.spec_name = j.at("spec").at("name").get<std::string>();
        m.spec_hash = std::stoull(j.at("spec").at("hash").get<std::string>(), nullptr, 16);
        LOOM_ASSIGN_OR_RETURN(m.precision, from_file(parse_precision(j.at("precision").get<std::string>()), path));
        LOOM_ASSIGN_OR_RETURN(m.mode, from_file(parse_exec_mode(j.at("mode").get<std::string>()), path));
        if (j.contains("descriptor")) {
            if (version < 3)
                return make_error(StatusCode::PARSE_ERROR, "{}: a version-{} file with a descriptor", path, version);
            LOOM_ASSIGN_OR_RETURN(ModelDescriptor d, descriptor_from_json(j.at("descriptor"), path));
            m.descriptor = std::move(d);
        }
        for (const auto& t : j.at("tensors")) {
            CompiledTensor ct;
            ct.name = t.at("name").get<std::string>();
            LOOM_ASSIGN_OR_RETURN(ct.dtype, dtype_from_name(t.at("dtype").get<std::string>(), path));
            ct.dims = json_ints(t.at("dims"));
            const std::string storage = t.at("storage").get<std::string>();
            if (storage != "arena" && storage != "weights")
                return make_error(StatusCode::PARSE_ERROR, "{}: tensor '{}' has the storage '{}'", path, ct.name, storage);
            ct.storage = storage == "arena" ? Storage::ARENA : Storage::WEIGHTS;
            LOOM_ASSIGN_OR_RETURN(ct.layout, layout_from_name(t.at("layout").get<std::string>(), path, ct.name));
            ct.offset = json_int(t.at("offset"));
            ct.bytes = json_int(t.at("bytes"));
            m.tensors.push_back(std::move(ct));
        }
        m.inputs = json_ints_as<int>(j.at("inputs"));
        m.outputs = json_ints_as<int>(j.at("outputs"));
        for (const auto& s : j.at("steps")) {
            CompiledStep cs;
            cs.name = s.at("name").get<std::string>();
            cs.op = s.at("op").get<std::string>();
            cs.kernel = s.at("kernel").get<std::string>();
            cs.attrs = attrs_from_json(s.at("attrs"));
            cs.inputs = json_ints_as<int>(s.at("inputs"));
            cs.outputs = json_ints_as<int>(s.at("outputs"));
            cs.alias = s.at("alias").get<bool>();
            const std::string placement = s.at("placement").get<std::string>();
            if (placement != "host" && placement != "device")
                return make_error(StatusCode::PARSE_ERROR, "{}: step '{}' has the placement '{}'", path, cs.name, placement);
            cs.placement = placement == "host" ? Placement::HOST : Placement::DEVICE;
            {
                Result<device::Tiling> tiling = tiling_from_json(s.at("tiling"));
                if (!tiling.ok())
                    return make_error(StatusCode::PARSE_ERROR, "{}: step '{}': {}", path, printable(cs.name),
                                      tiling.status().message());
                cs.tiling = std::move(tiling).value();
            }
            cs.fused = s.at("fused").get<std::vector<std::string>>();
            cs.cost_ns = s.at("cost_ns").get<double>();
            cs.flops = s.at("flops").get<double>();
            m.steps.push_back(std::move(cs));
        }
        if (j.contains("splits")) {
            if (version < 4)
                return make_error(StatusCode::PARSE_ERROR, "{}: a version-{} file with split regions", path, version);
            for (const auto& r : j.at("splits")) {
                SplitRegion sr;
                const auto first = json_int(r.at("first")), last = json_int(r.at("last"));
                if (first < 0 || last < 0 || first > kStepsMax || last > kStepsMax)
                    return make_error(StatusCode::PARSE_ERROR, "{}: split region {}: steps {} to {}", path,
                                      m.splits.size(), first, last);
                sr.first = static_cast<int>(first);
                sr.last = static_cast<int>(last);
                sr.rows = json_int(r.at("rows"));
                for (const auto& t : r.at("tilings")) {
                    Result<device::Tiling> tiling = tiling_from_json(t);
                    if (!tiling.ok())
                        return make_error(StatusCode::PARSE_ERROR, "{}: split region {}: {}", path, m.splits.size(),
                                          tiling.status().message());
                    sr.tilings.push_back(std::move(tiling).value());
                }
                m.splits.push_back(std::move(sr));
            }
        }
        m.arena_bytes = json_int(j.at("plan").at("arena_bytes"));
        m.plan_lower_bound = json_int(j.at("plan").at("lower_bound"));
        m.plan_naive = json_int(j.at("plan").at("naive"));
        m.nodes_imported = json_int_as<size_t>(j.at("report").at("nodes_imported"));
        if (j.contains("options")) {
            m.fold = j.at("options").at("fold").get<bool>();
            m.host_placement = j.at("options").at("host_placement").get<bool>();
        }
        if (j.contains("cache")) {
            m.source_hash = std::stoull(j.at("cache").at("source_hash").get<std::string>(), nullptr, 16);
            m.options_hash = std::stoull(j.at("cache").at("options_hash").get<std::string>(), nullptr, 16);
        }
        if (m.precision == Precision::INT8) {
            const auto& q = j.at("int8");
            m.int8.nodes_quantized = json_int_as<int>(q.at("nodes_quantized"));
            m.int8.nodes_skipped = json_int_as<int>(q.at("nodes_skipped"));
            m.int8.samples = json_int_as<int>(q.at("samples"));
            m.int8.max_rel_error = q.at("max_rel_error").get<double>();
            m.int8.psnr_db = q.at("psnr_db").get<double>();
        }
        for (const auto& p : j.at("report").at("passes"))
            m.passes.push_back({p.at("pass").get<std::string>(), json_int_as<size_t>(p.at("nodes_before")),
                                json_int_as<size_t>(p.at("nodes_after")), json_int_as<int>(p.at("changed"))});
        if (m.mode == ExecMode::HOST) LOOM_TRY(graph_from_json(j.at("graph"), m, path));
        else if (j.contains("graph"))
            return make_error(StatusCode::PARSE_ERROR, "{}: a {}-mode model with a graph section", path,
                              exec_mode_name(m.mode));
    } catch (const std::exception& e) {
        return make_error(StatusCode::PARSE_ERROR, "{}: malformed model description: {}", path, e.what());
    }
    LOOM_TRY(validate(m, path));
    return m;
}

Status check_compatible(const CompiledModel& m, const device::DeviceSpec& spec, const std::string& path) {
    if (m.compiler_version != kVersion)
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "{}: compiled by loomc {}, this is {}; recompile the model", path, m.compiler_version, kVersion);
    if (m.spec_hash != spec.hash())
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "{}: compiled for device '{}' (spec hash {:016x}), the device is '{}' ({:016x}); recompile with "
                          "--device",
                          path, m.spec_name, m.spec_hash, spec.name, spec.hash());
    return {};
}

}  // namespace loom::compiler
