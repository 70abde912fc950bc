#include "compiler/ops.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/text.hpp"
#include "compiler/ops/op_list.hpp"

namespace loom::compiler {

#define LOOM_X(name) extern const OpDef op_##name;
LOOM_OP_LIST(LOOM_X)
#undef LOOM_X

namespace {
constexpr const OpDef* kOps[] = {
#define LOOM_X(name) &op_##name,
    LOOM_OP_LIST(LOOM_X)
#undef LOOM_X
};
}  // namespace

const OpDef* find_op(std::string_view op_type) {
    for (const OpDef* op : kOps)
        if (op_type == op->name) return op;
    return nullptr;
}

std::span<const OpDef* const> all_ops() { return kOps; }

std::string supported_ops_list() {
    std::vector<std::string> names;
    for (const OpDef* op : kOps) names.emplace_back(op->name);
    std::sort(names.begin(), names.end());
    return fmt::format("{}", fmt::join(names, ", "));
}

bool op_has(std::string_view op_type, OpTrait t) {
    const OpDef* op = find_op(op_type);
    return op && op->has(t);
}

bool needs_constant_input(std::string_view op_type, size_t slot) {
    const OpDef* op = find_op(op_type);
    return op && slot < 32 && ((op->constant_inputs >> slot) & 1u);
}

std::string node_label(const Node& n) { return fmt::format("node '{}' ({})", n.name, n.op); }

Dim InferContext::fresh(size_t output, size_t axis) const {
    const std::string& out = output < n_.outputs.size() && n_.outputs[output] >= 0 ? g_.value(n_.outputs[output]).name
                                                                                   : n_.name;
    return Dim::sym(fmt::format("{}.d{}", out, axis));
}

namespace {

Status check_arity(const Graph& g, const Node& n, const OpDef& op) {
    const int ni = static_cast<int>(n.inputs.size()), no = static_cast<int>(n.outputs.size());
    if (ni < op.inputs_min || ni > op.inputs_max)
        return make_error(StatusCode::INVALID_ARGUMENT, "has {} inputs, {} takes {} to {}", ni, n.op, op.inputs_min,
                          op.inputs_max);
    if (no < op.outputs_min || no > op.outputs_max)
        return make_error(StatusCode::UNSUPPORTED, "has {} outputs, Loom's {} produces {} to {}", no, n.op,
                          op.outputs_min, op.outputs_max);
    for (int i = 0; i < op.inputs_min; ++i)
        if (!g.has_input(n, static_cast<size_t>(i)))
            return make_error(StatusCode::INVALID_ARGUMENT, "required input {} is absent", i);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
        const Value* v = g.input(n, i);
        if (v && !v->typed)
            return make_error(StatusCode::INTERNAL, "input {} ('{}') has no type yet", i, v->name);
    }
    return {};
}

// A static shape must hold at most kTensorElementsMax elements (dims may come straight from a
// model file, so the product is checked).
Status check_tensor_size(const Shape& s, std::string_view what) {
    if (!shape_static(s)) return {};
    LOOM_ASSIGN_OR_RETURN(const int64_t n, shape_elements(s, what));
    if (n > kTensorElementsMax)
        return make_error(StatusCode::OUT_OF_RANGE, "{} is {}: {} elements, more than the 2^40 a tensor may hold", what,
                          shape_str(s), n);
    return {};
}

Status merge_type(Value& v, const ValueType& t) {
    if (!v.typed) {
        v.dtype = t.dtype;
        v.shape = t.shape;
        v.typed = true;
        return {};
    }
    if (v.dtype != t.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "output '{}' is declared {} but computes {}", v.name,
                          device::dtype_name(v.dtype), device::dtype_name(t.dtype));
    if (v.shape.size() != t.shape.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "output '{}' is declared {} but computes {}", v.name,
                          shape_str(v.shape), shape_str(t.shape));
    for (size_t i = 0; i < t.shape.size(); ++i) {
        const Dim &declared = v.shape[i], &inferred = t.shape[i];
        if (inferred.known()) {
            if (declared.known() && declared.value != inferred.value)
                return make_error(StatusCode::INVALID_ARGUMENT, "output '{}' is declared {} but computes {}", v.name,
                                  shape_str(v.shape), shape_str(t.shape));
            v.shape[i] = inferred;
        } else if (!declared.known()) {
            v.shape[i] = inferred;  // a name the inference can track beats the model's label
        }
    }
    return {};
}

}  // namespace

Status infer_node(Graph& g, const Node& n) {
    const OpDef* op = find_op(n.op);
    if (!op)
        return make_error(StatusCode::UNSUPPORTED, "{}: operator not supported (supported: {})", node_label(n),
                          supported_ops_list());
    LOOM_TRY(check_arity(g, n, *op).with_context(node_label(n)));
    std::vector<ValueType> out(n.outputs.size());
    InferContext c(g, n, out);
    LOOM_TRY(op->infer(c).with_context(node_label(n)));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
        if (n.outputs[i] < 0) continue;
        // A negative size is not known() and has no symbol: shape_str cannot show it.
        for (size_t axis = 0; axis < out[i].shape.size(); ++axis)
            if (const Dim& d = out[i].shape[axis]; !d.known() && d.symbol.empty())
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: output {} has the negative size {} at axis {}",
                                  node_label(n), i, d.value, axis);
        LOOM_TRY(check_tensor_size(out[i].shape, fmt::format("{}: output {}", node_label(n), i)));
        LOOM_TRY(merge_type(g.value(n.outputs[i]), out[i]).with_context(node_label(n)));
    }
    return {};
}

Status infer_shapes(Graph& g) {
    for (int i : g.inputs)
        if (!g.value(i).typed)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: graph input '{}' has no type", g.source, g.value(i).name);
    for (int i : g.inputs)
        LOOM_TRY(check_tensor_size(g.value(i).shape, fmt::format("{}: graph input '{}'", g.source, g.value(i).name)));
    for (const Node& n : g.nodes) {
        const Status st = infer_node(g, n);
        if (!st.ok()) return g.source.empty() ? st : st.with_context(g.source);  // messages name the model file
    }
    return {};
}

Result<Lowered> lower_node(const Graph& g, const Node& n) {
    const OpDef* op = find_op(n.op);
    if (!op) return make_error(StatusCode::UNSUPPORTED, "{}: operator not supported", node_label(n));
    auto l = op->lower(g, n);
    if (!l.ok()) return l.status().with_context(node_label(n));
    return l;
}

Status check_graph_utf8(const Graph& g) {
    auto check = [&](std::string_view text, std::string_view part) -> Status {
        const size_t at = utf8_invalid_at(text);
        if (at == std::string_view::npos) return {};
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} '{}' is not valid UTF-8 (byte {})", g.source, part,
                          printable(text), at);
    };
    LOOM_TRY(check(g.name, "graph name"));
    for (const Value& v : g.values) {
        LOOM_TRY(check(v.name, "value name"));
        for (const Dim& d : v.shape) LOOM_TRY(check(d.symbol, fmt::format("dim of value '{}'", v.name)));
    }
    for (const Node& n : g.nodes) {
        LOOM_TRY(check(n.name, "node name"));
        LOOM_TRY(check(n.op, fmt::format("op type of node '{}'", n.name)));
        for (const auto& [name, value] : n.attrs.items()) {
            LOOM_TRY(check(name, fmt::format("attribute name of node '{}'", n.name)));
            if (const auto* text = std::get_if<std::string>(&value))
                LOOM_TRY(check(*text, fmt::format("attribute '{}' of node '{}'", name, n.name)));
        }
    }
    return {};
}

}  // namespace loom::compiler
