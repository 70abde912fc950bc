#include "compiler/graph.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <queue>
#include <type_traits>
#include <variant>

#include <fmt/format.h>

#include "common/buffer.hpp"
#include "common/hash.hpp"

namespace loom::compiler {

std::string shape_str(const Shape& s) {
    if (s.empty()) return "scalar";
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i) out += 'x';
        out += s[i].known() ? std::to_string(s[i].value) : s[i].symbol;
    }
    return out;
}

bool shape_static(const Shape& s) {
    return std::all_of(s.begin(), s.end(), [](const Dim& d) { return d.known(); });
}

std::vector<int64_t> shape_dims(const Shape& s) {
    LOOM_ASSERT(shape_static(s));
    std::vector<int64_t> d;
    d.reserve(s.size());
    for (const Dim& x : s) d.push_back(x.value);
    return d;
}

Shape shape_of(std::span<const int64_t> dims) { return Shape(dims.begin(), dims.end()); }

std::string_view layout_name(Layout l) { return l == Layout::NC1HWC0 ? "NC1HWC0" : "ND"; }

int64_t layout_bytes(Layout l, DType dtype, std::span<const int64_t> dims) {
    int64_t n = 1;
    for (size_t i = 0; i < dims.size(); ++i) {
        int64_t d = dims[i];
        if (l == Layout::NC1HWC0 && i == 1) d = (d + 15) / 16 * 16;  // C1 x C0
        n *= d;
    }
    return n * static_cast<int64_t>(device::dtype_size(dtype));
}

Result<int64_t> shape_elements(const Shape& s, std::string_view what) {
    int64_t n = 1;
    for (const Dim& d : s) {
        if (!d.known())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: shape {} is not static", what, shape_str(s));
        if (d.value != 0 && n > (int64_t{1} << 62) / d.value)
            return make_error(StatusCode::OUT_OF_RANGE, "{}: shape {} has too many elements", what, shape_str(s));
        n *= d.value;
    }
    return n;
}

namespace {
struct BufferDelete {
    size_t bytes;
    void operator()(std::byte* p) const { free_buffer(p, bytes); }
};
}  // namespace

HostTensor::HostTensor(DType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
    const size_t n = bytes();
    // Never a null pointer, even for 0 elements, so kernels can take the address.
    const size_t bytes = std::max<size_t>(n, 64);
    auto* p = static_cast<std::byte*>(allocate_buffer(bytes));
    std::memset(p, 0, bytes);
    storage_ = std::shared_ptr<std::byte[]>(p, BufferDelete{bytes});
}

int64_t HostTensor::elements() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
}

Result<std::vector<int64_t>> HostTensor::to_ints() const {
    const int64_t n = elements();
    std::vector<int64_t> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        switch (dtype_) {
            case DType::I64: out[static_cast<size_t>(i)] = as<int64_t>()[i]; break;
            case DType::I32: out[static_cast<size_t>(i)] = as<int32_t>()[i]; break;
            case DType::I8: out[static_cast<size_t>(i)] = as<int8_t>()[i]; break;
            case DType::U8: out[static_cast<size_t>(i)] = as<uint8_t>()[i]; break;
            default:
                return make_error(StatusCode::INVALID_ARGUMENT, "expected an integer tensor, got {}",
                                  device::dtype_name(dtype_));
        }
    }
    return out;
}

std::vector<double> HostTensor::to_doubles() const {
    const int64_t n = elements();
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        double v = 0;
        switch (dtype_) {
            case DType::F32: v = as<float>()[i]; break;
            case DType::F16: v = device::f16_to_f32(as<device::f16>()[i]); break;
            case DType::I64: v = static_cast<double>(as<int64_t>()[i]); break;
            case DType::I32: v = as<int32_t>()[i]; break;
            case DType::I8: v = as<int8_t>()[i]; break;
            case DType::U8: v = as<uint8_t>()[i]; break;
        }
        out[static_cast<size_t>(i)] = v;
    }
    return out;
}

HostTensor HostTensor::reshaped(std::vector<int64_t> dims) const {
    HostTensor t = *this;
    t.dims_ = std::move(dims);
    LOOM_ASSERT(t.elements() == elements());
    return t;
}

int Graph::add_value(std::string name) {
    LOOM_ASSERT_MSG(!index_.contains(name), "value '{}' added twice", name);
    const int id = static_cast<int>(values.size());
    index_.emplace(name, id);
    values.push_back(Value{});
    values.back().name = std::move(name);
    return id;
}

int Graph::add_constant(std::string name, HostTensor t) {
    const int id = add_value(std::move(name));
    Value& v = values.back();
    v.dtype = t.dtype();
    v.shape = shape_of(t.dims());
    v.typed = true;
    v.data = std::make_shared<const HostTensor>(std::move(t));
    return id;
}

int Graph::find_value(std::string_view name) const {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? -1 : it->second;
}

std::string Graph::unique_name(std::string_view base) {
    std::string name(base);
    for (int i = 1; index_.contains(name); ++i) name = fmt::format("{}_{}", base, i);
    return name;
}

const Value* Graph::input(const Node& n, size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i] < 0) return nullptr;
    return &value(n.inputs[i]);
}

void Graph::reindex() {
    index_.clear();
    for (size_t i = 0; i < values.size(); ++i) index_.emplace(values[i].name, static_cast<int>(i));
}

std::vector<int> Graph::producers() const {
    std::vector<int> p(values.size(), -1);
    for (size_t i = 0; i < nodes.size(); ++i)
        for (int o : nodes[i].outputs)
            if (o >= 0) p[static_cast<size_t>(o)] = static_cast<int>(i);
    return p;
}

std::vector<int> Graph::use_counts() const {
    std::vector<int> c(values.size(), 0);
    for (const Node& n : nodes)
        for (int i : n.inputs)
            if (i >= 0) ++c[static_cast<size_t>(i)];
    for (int o : outputs) ++c[static_cast<size_t>(o)];
    return c;
}

Status Graph::topo_sort() {
    const size_t nv = values.size();
    std::vector<int> producer(nv, -1);
    std::vector<bool> is_input(nv, false);
    for (int i : inputs) is_input[static_cast<size_t>(i)] = true;
    for (size_t i = 0; i < nodes.size(); ++i) {
        for (int o : nodes[i].outputs) {
            if (o < 0) continue;
            if (producer[static_cast<size_t>(o)] >= 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: value '{}' is produced by both node '{}' and '{}'",
                                  source, values[static_cast<size_t>(o)].name,
                                  nodes[static_cast<size_t>(producer[static_cast<size_t>(o)])].name, nodes[i].name);
            if (values[static_cast<size_t>(o)].is_constant())
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: node '{}' writes the constant '{}'", source,
                                  nodes[i].name, values[static_cast<size_t>(o)].name);
            if (is_input[static_cast<size_t>(o)])
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: node '{}' writes the graph input '{}'", source,
                                  nodes[i].name, values[static_cast<size_t>(o)].name);
            producer[static_cast<size_t>(o)] = static_cast<int>(i);
        }
    }
    // Kahn's algorithm with a min-heap on the original index keeps the order stable.
    std::vector<int> pending(nodes.size(), 0);
    std::vector<std::vector<int>> consumers(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
        for (int in : nodes[i].inputs) {
            if (in < 0) continue;
            const int p = producer[static_cast<size_t>(in)];
            if (p < 0) {
                const Value& v = values[static_cast<size_t>(in)];
                if (!v.is_constant() && !is_input[static_cast<size_t>(in)])
                    return make_error(StatusCode::INVALID_ARGUMENT,
                                      "{}: node '{}' ({}) reads '{}', which no node, input or initializer provides",
                                      source, nodes[i].name, nodes[i].op, v.name);
                continue;
            }
            ++pending[i];
            consumers[static_cast<size_t>(p)].push_back(static_cast<int>(i));
        }
    }
    std::priority_queue<int, std::vector<int>, std::greater<>> ready;
    for (size_t i = 0; i < nodes.size(); ++i)
        if (pending[i] == 0) ready.push(static_cast<int>(i));
    std::vector<int> order;
    order.reserve(nodes.size());
    while (!ready.empty()) {
        const int i = ready.top();
        ready.pop();
        order.push_back(i);
        for (int c : consumers[static_cast<size_t>(i)])
            if (--pending[static_cast<size_t>(c)] == 0) ready.push(c);
    }
    if (order.size() != nodes.size()) {
        for (size_t i = 0; i < nodes.size(); ++i)
            if (pending[i] > 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: node '{}' ({}) is on a cycle", source,
                                  nodes[i].name, nodes[i].op);
    }
    std::vector<Node> sorted;
    sorted.reserve(nodes.size());
    for (int i : order) sorted.push_back(std::move(nodes[static_cast<size_t>(i)]));
    nodes = std::move(sorted);
    for (int o : outputs)
        if (producer[static_cast<size_t>(o)] < 0 && !is_input[static_cast<size_t>(o)] &&
            !values[static_cast<size_t>(o)].is_constant())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: graph output '{}' is never produced", source,
                              values[static_cast<size_t>(o)].name);
    return {};
}

Status Graph::validate() const {
    const int nv = static_cast<int>(values.size());
    std::vector<bool> defined(values.size(), false);
    for (size_t i = 0; i < values.size(); ++i) defined[i] = values[i].is_constant();
    for (int i : inputs) {
        if (i < 0 || i >= nv) return make_error(StatusCode::INTERNAL, "graph input id {} out of range", i);
        defined[static_cast<size_t>(i)] = true;
    }
    for (const Node& n : nodes) {
        for (int i : n.inputs) {
            if (i >= nv) return make_error(StatusCode::INTERNAL, "node '{}': input id {} out of range", n.name, i);
            if (i >= 0 && !defined[static_cast<size_t>(i)])
                return make_error(StatusCode::INTERNAL, "node '{}' reads '{}' before it is produced", n.name,
                                  values[static_cast<size_t>(i)].name);
        }
        for (int o : n.outputs) {
            if (o < 0 || o >= nv) return make_error(StatusCode::INTERNAL, "node '{}': output id {} out of range", n.name, o);
            if (defined[static_cast<size_t>(o)])
                return make_error(StatusCode::INTERNAL, "node '{}' writes '{}', which is already defined", n.name,
                                  values[static_cast<size_t>(o)].name);
            defined[static_cast<size_t>(o)] = true;
        }
    }
    for (int o : outputs)
        if (o < 0 || o >= nv || !defined[static_cast<size_t>(o)])
            return make_error(StatusCode::INTERNAL, "graph output id {} is not produced", o);
    return {};
}

uint64_t graph_hash(const Graph& g) {
    Hasher h;
    h.str(g.name).i64(g.opset).u64(g.values.size());
    // The descriptor changes what a frame's run computes (padding, crop), so it is part of the model.
    // (Not where it was read from: equal models hash equal wherever they lie.)
    if (g.descriptor) {
        ModelDescriptor d = *g.descriptor;
        d.described_by.clear();
        h.str(descriptor_json(d).dump());
    } else {
        h.str("");
    }
    auto shape = [&](const Shape& sh) {
        h.u64(sh.size());
        for (const Dim& d : sh) d.known() ? h.i64(d.value) : h.i64(-1).str(d.symbol);
    };
    for (const Value& v : g.values) {
        h.str(v.name).u64(static_cast<uint64_t>(v.dtype)).u64(static_cast<uint64_t>(v.layout)).u64(v.typed);
        shape(v.shape);
        h.u64(v.is_constant());
        if (!v.is_constant()) continue;
        h.u64(static_cast<uint64_t>(v.data->dtype())).u64(v.data->dims().size());
        for (int64_t d : v.data->dims()) h.i64(d);
        h.bytes(v.data->data(), v.data->bytes());
    }
    h.u64(g.nodes.size());
    for (const Node& n : g.nodes) {
        h.str(n.op).str(n.name).u64(n.inputs.size());
        for (int id : n.inputs) h.i64(id);
        h.u64(n.outputs.size());
        for (int id : n.outputs) h.i64(id);
        h.u64(n.attrs.items().size());
        for (const auto& [name, value] : n.attrs.items()) {
            h.str(name).u64(value.index());
            std::visit(
                [&](const auto& x) {
                    using T = std::decay_t<decltype(x)>;
                    if constexpr (std::is_same_v<T, std::string>) h.str(x);
                    else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double>) h.bytes(&x, sizeof x);
                    else h.bytes(x.data(), x.size() * sizeof(x[0]));
                },
                value);
        }
        h.u64(n.fused.size());
        for (const std::string& f : n.fused) h.str(f);
    }
    h.u64(g.inputs.size());
    for (int id : g.inputs) h.i64(id);
    h.u64(g.outputs.size());
    for (int id : g.outputs) h.i64(id);
    return h.digest();
}

}  // namespace loom::compiler
