// Elementwise ops: the numpy-broadcasting binaries (and the variadic Sum, Max, Min), the
// activations and math functions, Cast, and Loom's fused EltwiseChain.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/ops.hpp"
#include "compiler/ops/util.hpp"

namespace loom::compiler {

namespace {

// Broadcast of every input; all inputs share the first one's dtype.
Status infer_broadcast(InferContext& c) {
    const Value* first = c.in(0);
    Shape s = first->shape;
    for (size_t i = 1; i < c.input_count(); ++i) {
        const Value* v = c.in(i);
        if (!v) return make_error(StatusCode::INVALID_ARGUMENT, "input {} is absent", i);
        if (v->dtype != first->dtype && c.node().op != "PRelu")
            return make_error(StatusCode::INVALID_ARGUMENT, "input {} is {}, input 0 is {}", i,
                              device::dtype_name(v->dtype), device::dtype_name(first->dtype));
        LOOM_ASSIGN_OR_RETURN(s, opu::broadcast(s, v->shape, c.fresh(0, 0)));
    }
    if (c.node().op == "PRelu") s = first->shape;  // the slope broadcasts to X, not both ways
    c.set(0, first->dtype, std::move(s));
    return {};
}

Status infer_same(InferContext& c) {
    c.set(0, c.in(0)->dtype, c.in(0)->shape);
    return {};
}

// The op's token as a kernel attribute (a std::string: a const char* would become a bool).
std::string token_of(const Node& n) { return find_op(n.op)->token; }

Result<Lowered> lower_binary(const Graph& g, const Node& n) {
    LOOM_TRY(n.attrs.check_known({}));
    const std::string op = token_of(n);
    if (n.inputs.size() == 2) {
        Lowered l{"binary", {}, n.inputs, false};
        l.attrs.set("op", op);
        return l;
    }
    // Variadic Sum / Max / Min: one fused pass over every input.
    std::string program = "$0";
    for (size_t i = 1; i < n.inputs.size(); ++i) program += fmt::format(" ${} {}", i, op);
    if (n.inputs.size() == 1) program += " identity";
    Lowered l{"eltwise_chain", {}, n.inputs, false};
    l.attrs.set("program", program);
    (void)g;
    return l;
}

// Unary ops keep their parameters under the kernel's attribute names; an absent Clip bound is
// left to the kernel's default.
Result<Lowered> lower_unary(const Graph& g, const Node& n) {
    const OpDef& op = *find_op(n.op);
    Lowered l{"unary", {}, {n.inputs[0]}, false};
    l.attrs.set("op", std::string(op.token));
    if (!op.params) {
        LOOM_TRY(n.attrs.check_known({}));
        return l;
    }
    LOOM_ASSIGN_OR_RETURN(const std::vector<OpParam> params, op.params(g, n));
    for (const OpParam& p : params)
        if (p.given) l.attrs.set(p.name, p.value);
    return l;
}

// LeakyRelu and Elu: alpha, with its ONNX default (two functions, not a template on the
// default: clang 14 has no floating-point template parameters).
Result<std::vector<OpParam>> alpha_params(const Node& n, double fallback) {
    LOOM_TRY(n.attrs.check_known({"alpha"}));
    LOOM_ASSIGN_OR_RETURN(double alpha, n.attrs.get_float("alpha", fallback));
    return std::vector<OpParam>{{"alpha", alpha}};
}
Result<std::vector<OpParam>> leaky_relu_params(const Graph&, const Node& n) { return alpha_params(n, 0.01); }
Result<std::vector<OpParam>> elu_params(const Graph&, const Node& n) { return alpha_params(n, 1.0); }

Result<std::vector<OpParam>> hard_sigmoid_params(const Graph&, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"alpha", "beta"}));
    LOOM_ASSIGN_OR_RETURN(double alpha, n.attrs.get_float("alpha", 0.2));
    LOOM_ASSIGN_OR_RETURN(double beta, n.attrs.get_float("beta", 0.5));
    return std::vector<OpParam>{{"alpha", alpha}, {"beta", beta}};
}

// Opset 11+: min and max are optional scalar inputs (constants); opset 6: attributes.
Result<std::vector<OpParam>> clip_params(const Graph& g, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"min", "max"}));
    std::vector<OpParam> params{{"min", -INFINITY, false}, {"max", INFINITY, false}};
    for (size_t i = 1; i <= 2; ++i) {
        OpParam& p = params[i - 1];
        if (!g.has_input(n, i)) {  // the attributes are single floats, not lists
            if (!n.attrs.has(p.name)) continue;
            LOOM_ASSIGN_OR_RETURN(p.value, n.attrs.get_float(p.name));
            p.given = true;
            continue;
        }
        LOOM_ASSIGN_OR_RETURN(auto v, opu::floats_from(g, n, i, ""));
        if (!v) continue;
        if (v->size() != 1)
            return make_error(StatusCode::INVALID_ARGUMENT, "Clip {} has {} values, expected a scalar", p.name,
                              v->size());
        p.value = (*v)[0];
        p.given = true;
    }
    return params;
}

Status infer_cast(InferContext& c) {
    LOOM_ASSIGN_OR_RETURN(int64_t to, c.attrs().get_int("to"));
    DType t;
    switch (to) {
        case 1: t = DType::F32; break;
        case 2: t = DType::U8; break;
        case 3: t = DType::I8; break;
        case 6: t = DType::I32; break;
        case 7: t = DType::I64; break;
        case 10: t = DType::F16; break;
        default:
            return make_error(StatusCode::UNSUPPORTED,
                              "Cast to ONNX data type {} (float, float16, uint8, int8, int32 and int64 are supported)",
                              to);
    }
    c.set(0, t, c.in(0)->shape);
    return {};
}

Result<Lowered> lower_cast(const Graph&, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"to", "saturate"}));
    return Lowered{"cast", {}, {n.inputs[0]}, false};
}

Result<Lowered> lower_chain(const Graph&, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"program"}));
    Lowered l{"eltwise_chain", {}, n.inputs, false};
    LOOM_ASSIGN_OR_RETURN(std::string program, n.attrs.get_string("program"));
    l.attrs.set("program", program);
    return l;
}

}  // namespace

// The elementwise families: per element, so any layout, any tile, and fusable into a chain.
constexpr OpTrait kUnary = OpTrait::POINTWISE | OpTrait::LAYOUT_AGNOSTIC | OpTrait::CHAIN;
constexpr OpTrait kBinary = kUnary | OpTrait::BINARY;
constexpr OpTrait kHost = OpTrait::HOST_WHEN_TINY;
constexpr OpTrait kEpilogue = OpTrait::EPILOGUE;

LOOM_DEFINE_OP(Add, 2, 2, 1, infer_broadcast, lower_binary, .traits = kBinary | kHost, .token = "add")
LOOM_DEFINE_OP(Sub, 2, 2, 1, infer_broadcast, lower_binary, .traits = kBinary | kHost, .token = "sub")
LOOM_DEFINE_OP(Mul, 2, 2, 1, infer_broadcast, lower_binary, .traits = kBinary | kHost, .token = "mul")
LOOM_DEFINE_OP(Div, 2, 2, 1, infer_broadcast, lower_binary, .traits = kBinary | kHost, .token = "div")
LOOM_DEFINE_OP(Pow, 2, 2, 1, infer_broadcast, lower_binary, .traits = kBinary, .token = "pow")
LOOM_DEFINE_OP(PRelu, 2, 2, 1, infer_broadcast, lower_binary, .traits = kBinary | kEpilogue, .token = "prelu")
LOOM_DEFINE_OP(Max, 1, 16, 1, infer_broadcast, lower_binary, .traits = kBinary, .token = "max")
LOOM_DEFINE_OP(Min, 1, 16, 1, infer_broadcast, lower_binary, .traits = kBinary, .token = "min")
// Sum is not chained (fuse_elementwise_chains never took it); Add's kernel computes it.
LOOM_DEFINE_OP(Sum, 1, 16, 1, infer_broadcast, lower_binary,
               .traits = OpTrait::POINTWISE | OpTrait::LAYOUT_AGNOSTIC | OpTrait::BINARY, .token = "add")
LOOM_DEFINE_OP(Relu, 1, 1, 1, infer_same, lower_unary, .traits = kUnary | kEpilogue, .token = "relu")
LOOM_DEFINE_OP(LeakyRelu, 1, 1, 1, infer_same, lower_unary, .traits = kUnary | kEpilogue, .token = "leaky_relu",
               .params = leaky_relu_params)
LOOM_DEFINE_OP(Sigmoid, 1, 1, 1, infer_same, lower_unary, .traits = kUnary | kEpilogue, .token = "sigmoid")
LOOM_DEFINE_OP(Tanh, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "tanh")
LOOM_DEFINE_OP(Clip, 1, 3, 1, infer_same, lower_unary, .traits = kUnary | kEpilogue | OpTrait::PARAMETER_INPUTS,
               .constant_inputs = 0b110, .token = "clip", .params = clip_params)
LOOM_DEFINE_OP(HardSigmoid, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "hard_sigmoid",
               .params = hard_sigmoid_params)
LOOM_DEFINE_OP(HardSwish, 1, 1, 1, infer_same, lower_unary, .traits = kUnary | kEpilogue, .token = "hard_swish")
LOOM_DEFINE_OP(Sqrt, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "sqrt")
LOOM_DEFINE_OP(Exp, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "exp")
LOOM_DEFINE_OP(Log, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "log")
LOOM_DEFINE_OP(Neg, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "neg")
LOOM_DEFINE_OP(Abs, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "abs")
LOOM_DEFINE_OP(Erf, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "erf")
LOOM_DEFINE_OP(Softplus, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "softplus")
LOOM_DEFINE_OP(Elu, 1, 1, 1, infer_same, lower_unary, .traits = kUnary, .token = "elu", .params = elu_params)
LOOM_DEFINE_OP(Cast, 1, 1, 1, infer_cast, lower_cast,
               .traits = OpTrait::POINTWISE | OpTrait::LAYOUT_AGNOSTIC | OpTrait::HOST_WHEN_TINY)
// Already a chain: a second fusion run leaves it as it is.
LOOM_DEFINE_OP(EltwiseChain, 1, 16, 1, infer_broadcast, lower_chain,
               .traits = OpTrait::POINTWISE | OpTrait::LAYOUT_AGNOSTIC)

}  // namespace loom::compiler
