// Elementwise ops: the numpy-broadcasting binaries (and the variadic Sum, Max, Min), the
// activations and math functions, Cast, and Loom's fused EltwiseChain.
#include <string>

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

std::string lower_name(std::string_view onnx) {
    std::string s;
    for (size_t i = 0; i < onnx.size(); ++i) {
        const char ch = onnx[i];
        if (ch >= 'A' && ch <= 'Z') {
            // "LeakyRelu" -> "leaky_relu", "PRelu" -> "prelu", "HardSwish" -> "hard_swish".
            const bool boundary = i > 0 && onnx[i - 1] >= 'a' && onnx[i - 1] <= 'z';
            if (boundary) s += '_';
            s += static_cast<char>(ch - 'A' + 'a');
        } else {
            s += ch;
        }
    }
    return s;
}

Result<Lowered> lower_binary(const Graph& g, const Node& n) {
    LOOM_TRY(n.attrs.check_known({}));
    if (n.inputs.size() == 2) {
        Lowered l{"binary", {}, n.inputs, false};
        l.attrs.set("op", n.op == "Sum" ? std::string("add") : lower_name(n.op));
        return l;
    }
    // Variadic Sum / Max / Min: one fused pass over every input.
    std::string program = "$0";
    const std::string op = n.op == "Sum" ? "add" : lower_name(n.op);
    for (size_t i = 1; i < n.inputs.size(); ++i) program += fmt::format(" ${} {}", i, op);
    if (n.inputs.size() == 1) program += " identity";
    Lowered l{"eltwise_chain", {}, n.inputs, false};
    l.attrs.set("program", program);
    (void)g;
    return l;
}

// Unary ops keep their ONNX attributes under the kernel's names.
Result<Lowered> lower_unary(const Graph& g, const Node& n) {
    Lowered l{"unary", {}, {n.inputs[0]}, false};
    const std::string op = lower_name(n.op);
    l.attrs.set("op", op);
    if (n.op == "LeakyRelu" || n.op == "Elu") {
        LOOM_TRY(n.attrs.check_known({"alpha"}));
        LOOM_ASSIGN_OR_RETURN(double alpha, n.attrs.get_float("alpha", n.op == "Elu" ? 1.0 : 0.01));
        l.attrs.set("alpha", alpha);
    } else if (n.op == "HardSigmoid") {
        LOOM_TRY(n.attrs.check_known({"alpha", "beta"}));
        LOOM_ASSIGN_OR_RETURN(double alpha, n.attrs.get_float("alpha", 0.2));
        LOOM_ASSIGN_OR_RETURN(double beta, n.attrs.get_float("beta", 0.5));
        l.attrs.set("alpha", alpha).set("beta", beta);
    } else if (n.op == "Clip") {
        LOOM_TRY(n.attrs.check_known({"min", "max"}));
        // Opset 11+: min and max are optional scalar inputs; opset 6: attributes.
        for (size_t i = 1; i <= 2; ++i) {
            const char* name = i == 1 ? "min" : "max";
            if (!g.has_input(n, i)) {  // the attributes are single floats, not lists
                if (!n.attrs.has(name)) continue;
                LOOM_ASSIGN_OR_RETURN(double bound, n.attrs.get_float(name));
                l.attrs.set(name, bound);
                continue;
            }
            LOOM_ASSIGN_OR_RETURN(auto v, opu::floats_from(g, n, i, ""));
            if (!v) continue;
            if (v->size() != 1)
                return make_error(StatusCode::INVALID_ARGUMENT, "Clip {} has {} values, expected a scalar", name, v->size());
            l.attrs.set(name, (*v)[0]);
        }
    } else {
        LOOM_TRY(n.attrs.check_known({}));
    }
    return l;
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

LOOM_DEFINE_OP(Add, 2, 2, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(Sub, 2, 2, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(Mul, 2, 2, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(Div, 2, 2, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(Pow, 2, 2, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(PRelu, 2, 2, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(Max, 1, 16, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(Min, 1, 16, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(Sum, 1, 16, 1, infer_broadcast, lower_binary)
LOOM_DEFINE_OP(Relu, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(LeakyRelu, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Sigmoid, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Tanh, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Clip, 1, 3, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(HardSigmoid, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(HardSwish, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Sqrt, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Exp, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Log, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Neg, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Abs, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Erf, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Softplus, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Elu, 1, 1, 1, infer_same, lower_unary)
LOOM_DEFINE_OP(Cast, 1, 1, 1, infer_cast, lower_cast)
LOOM_DEFINE_OP(EltwiseChain, 1, 16, 1, infer_broadcast, lower_chain)

}  // namespace loom::compiler
