// eltwise_chain: the fused elementwise kernel the compiler emits for a chain of elementwise
// ops. Inputs X0 .. X(N-1) (1 to 16) broadcast by numpy rules to the output Y's shape; Y is
// the value of a postfix (RPN) program evaluated per element.
// Attribute: program (required), whitespace-separated tokens:
//   $i      pushes input i
//   NUMBER  pushes a constant (anything std::from_chars reads: 0.5, -3, 1e-3, inf)
//   add sub mul div pow max min prelu   pop b, pop a, push a op b (prelu: a < 0 ? b * a : a)
//   relu sigmoid tanh hard_swish sqrt exp log neg abs identity erf softplus   apply to the top
//   leaky_relu elu (alpha), hard_sigmoid (alpha beta), clip (min max): the op's parameters are
//     the constants written immediately before it, e.g. "$0 0.1 leaky_relu", "$0 0 6 clip".
// The program must leave exactly one value. "$0 $1 add relu $2 mul 0.5 max" is
// max(relu(X0 + X1) * X2, 0.5). Errors name the token, its number and its column.
// Dtypes: all inputs and Y f32, or all f16 (every step in fp32, Y rounded once).
// Evaluation: the program is parsed once per call into an instruction array (a constant right
// operand is folded into its binary op), then run over blocks of 256 output elements (a block
// may span several short rows of the broadcast): each instruction processes the whole block,
// so nothing is interpreted per element.
// Tiling: VectorSchedule (default: vector_cost's heuristic).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/elementwise.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

using ops::BinaryOp;
using ops::shape_str;
using ops::UnaryOp;

constexpr int kMaxStack = 16;  // values live at once (fp32 blocks on the stack: 16 KiB)

enum class Kind : uint8_t {
    INPUT,         // push input `index`
    CONST,         // push `value`
    UNARY,         // top = unary(top)
    BINARY,        // pop b; top = top op b
    BINARY_CONST,  // top = top op value
};

struct Instr {
    Kind kind;
    BinaryOp binary = BinaryOp::ADD;
    UnaryOp unary = UnaryOp::IDENTITY;
    int index = 0;
    float value = 0;
    ops::UnaryParams params;
};

struct Args {
    std::vector<Instr> prog;
    int depth = 0;  // largest stack depth the program reaches
    DType dtype = DType::F32;
};

std::string all_op_names() {
    std::string s;
    for (const auto& o : ops::kBinaryOps) s += std::string(s.empty() ? "" : ", ") + o.name;
    for (const auto& o : ops::kUnaryOps) s += std::string(", ") + o.name;
    return s;
}

Result<Args> parse(std::string_view src, int inputs) {
    Args a;
    int depth = 0, number = 0;
    size_t i = 0;
    auto fail = [&](size_t at, std::string_view tok, std::string_view why) {
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise_chain: program token {} '{}' at column {}: {}", number,
                          tok, at + 1, why);
    };
    while (true) {
        while (i < src.size() && std::isspace(static_cast<unsigned char>(src[i]))) ++i;
        if (i == src.size()) break;
        const size_t at = i;
        while (i < src.size() && !std::isspace(static_cast<unsigned char>(src[i]))) ++i;
        const std::string_view tok = src.substr(at, i - at);
        ++number;
        Instr in{};
        BinaryOp bop;
        UnaryOp uop;
        if (tok[0] == '$') {
            int idx = -1;
            auto [end, ec] = std::from_chars(tok.data() + 1, tok.data() + tok.size(), idx);
            if (ec != std::errc() || end != tok.data() + tok.size() || tok.size() == 1)
                return fail(at, tok, "an input is $ and its index, e.g. $0");
            if (idx < 0 || idx >= inputs)
                return fail(at, tok, fmt::format("the launch has {} input(s), $0 to ${}", inputs, inputs - 1));
            in.kind = Kind::INPUT;
            in.index = idx;
            a.prog.push_back(in);
            ++depth;
        } else if (ops::binary_op_from_name(tok, bop)) {
            if (depth < 2) return fail(at, tok, fmt::format("needs 2 operands, the stack holds {}", depth));
            in.binary = bop;
            if (a.prog.back().kind == Kind::CONST) {  // the right operand is the constant just pushed
                in.kind = Kind::BINARY_CONST;
                in.value = a.prog.back().value;
                a.prog.pop_back();
            } else {
                in.kind = Kind::BINARY;
            }
            a.prog.push_back(in);
            --depth;
        } else if (ops::unary_op_from_name(tok, uop)) {
            const int k = ops::info(uop).params;
            float* dst[2] = {&in.params.p0, &in.params.p1};
            for (int p = k - 1; p >= 0; --p) {
                if (a.prog.empty() || a.prog.back().kind != Kind::CONST)
                    return fail(at, tok,
                                fmt::format("takes {} constant parameter(s) written just before it (see the kernel "
                                            "header), e.g. {}",
                                            k, k == 1 ? "\"$0 0.1 leaky_relu\"" : "\"$0 0 6 clip\""));
                *dst[p] = a.prog.back().value;
                a.prog.pop_back();
                --depth;
            }
            if (depth < 1) return fail(at, tok, "needs an operand, the stack is empty");
            in.kind = Kind::UNARY;
            in.unary = uop;
            a.prog.push_back(in);
        } else {
            double v = 0;
            auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
            if (ec != std::errc() || end != tok.data() + tok.size())
                return fail(at, tok, fmt::format("not an input ($i), a number or an op ({})", all_op_names()));
            in.kind = Kind::CONST;
            in.value = static_cast<float>(v);
            a.prog.push_back(in);
            ++depth;
        }
    }
    if (a.prog.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "eltwise_chain: program is empty");
    if (depth != 1)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "eltwise_chain: program leaves {} values on the stack at its end (want 1)", depth);
    // The registers the folded program needs.
    int d = 0;
    for (const Instr& in : a.prog) {
        d += in.kind == Kind::INPUT || in.kind == Kind::CONST ? 1 : in.kind == Kind::BINARY ? -1 : 0;
        a.depth = std::max(a.depth, d);
    }
    if (a.depth > kMaxStack)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "eltwise_chain: program needs a stack of {} values (at most {})", a.depth, kMaxStack);
    return a;
}

Result<Args> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "eltwise_chain", 1, ops::kMaxBroadcastInputs, 1));
    LOOM_TRY(l.attrs.check_known({"program"}).with_context("eltwise_chain"));
    auto program = l.attrs.get_string("program");
    if (!program.ok()) return program.status().with_context("eltwise_chain");
    const TensorRef& y = l.outputs[0];
    for (size_t i = 0; i < l.inputs.size(); ++i)
        if (l.inputs[i].dtype != y.dtype)
            return make_error(StatusCode::INVALID_ARGUMENT, "eltwise_chain: mixed dtypes (input {} is {}, Y {})", i,
                              dtype_name(l.inputs[i].dtype), dtype_name(y.dtype));
    if (!ops::is_float(y.dtype))
        return make_error(StatusCode::UNSUPPORTED, "eltwise_chain: dtype {} (f32 and f16 are supported)",
                          dtype_name(y.dtype));
    std::vector<std::string> names;
    for (size_t i = 0; i < l.inputs.size(); ++i) names.push_back("input " + std::to_string(i));
    auto bcast = ops::broadcast_shape(l.inputs, names);
    if (!bcast.ok()) return bcast.status().with_context("eltwise_chain");
    const TensorRef& want = *bcast;
    if (!ops::same_shape(y, want))
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise_chain: output Y is {}, want the inputs' broadcast {}",
                          shape_str(y), shape_str(want));
    LOOM_ASSIGN_OR_RETURN(Args a, parse(*program, static_cast<int>(l.inputs.size())));
    a.dtype = y.dtype;
    return a;
}

// Every input byte is read once (a broadcast input stays in UB) and Y written once. Vector
// passes: the sum over the instructions of the op table's passes (a folded constant costs
// nothing; a pushed constant or a broadcast input 1, to fill a tile), +2 for f16 (widen,
// narrow). UB holds a tile per input and per stack value.
Result<KernelWork> eltwise_chain_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef& y = l.outputs[0];
    const int64_t n = y.elements();
    const double size = static_cast<double>(dtype_size(a.dtype));
    double in_elems = 0, passes = 0, flops = 0;
    for (const TensorRef& t : l.inputs) in_elems += static_cast<double>(t.elements());
    for (const Instr& in : a.prog) {
        switch (in.kind) {
        case Kind::INPUT: passes += ops::same_shape(l.inputs[static_cast<size_t>(in.index)], y) ? 0 : 1; break;
        case Kind::CONST: passes += 1; break;
        case Kind::UNARY: passes += ops::info(in.unary).passes, flops += 1; break;
        case Kind::BINARY:
        case Kind::BINARY_CONST: passes += ops::info(in.binary).passes, flops += 1; break;
        }
    }
    cost::VectorWork w;
    w.elements = n;
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = n > 0 ? size * in_elems / static_cast<double>(n) : size * static_cast<double>(l.inputs.size());
    w.out_bytes = size;
    w.vector_passes = passes + (a.dtype == DType::F16 ? 2 : 0);
    w.flops = flops;
    w.ub_buffers = static_cast<int64_t>(l.inputs.size()) + a.depth;
    // A full-size input can come from a neighbour in UB; the output can overwrite its tile.
    bool full_input = false;
    for (const TensorRef& t : l.inputs) full_input = full_input || t.elements() == n;
    w.fusable_in_bytes = full_input ? size : 0;
    w.fusable_out = true;
    w.in_place_ok = full_input;
    return cost::vector_work(w);
}

Result<CycleBreakdown> eltwise_chain_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(eltwise_chain_work(l, s), l.tiling, s, "eltwise_chain");
}

// Reads the output positions [pos, pos + m) of input i into `out` as fp32, row by row of the
// broadcast plan (so a block may span several short rows).
template <typename T>
void load_input(const ops::BroadcastPlan& p, const T* x, int i, int64_t pos, int64_t m, float* out) {
    const int64_t s = p.inner_stride(i);
    ops::for_each_segment(p, pos, pos + m, [&](const int64_t* off, int64_t at, int64_t len) {
        float* dst = out + (at - pos);
        ops::load_block(x + off[i], s, dst, len);
        if (!s) std::fill(dst + 1, dst + len, dst[0]);
    });
}

// Runs the program over the m <= kBlock output positions from pos; returns the result block.
template <typename T>
const float* eval_block(const Args& a, const ops::BroadcastPlan& p, const T* const* in, int64_t pos, int64_t m,
                        float (*reg)[ops::kBlock]) {
    int sp = 0;
    for (const Instr& ins : a.prog) {
        switch (ins.kind) {
        case Kind::INPUT: load_input(p, in[ins.index], ins.index, pos, m, reg[sp++]); break;
        case Kind::CONST: std::fill(reg[sp], reg[sp] + m, ins.value), ++sp; break;
        case Kind::UNARY: ops::unary_apply(ins.unary, ins.params, reg[sp - 1], reg[sp - 1], m); break;
        case Kind::BINARY:
            ops::binary_apply(ins.binary, reg[sp - 2], 1, reg[sp - 1], 1, reg[sp - 2], m);
            --sp;
            break;
        case Kind::BINARY_CONST: ops::binary_apply(ins.binary, reg[sp - 1], 1, &ins.value, 0, reg[sp - 1], m); break;
        }
    }
    return reg[0];
}

template <typename T>
void run_typed(const KernelLaunch& l, const Args& a, ThreadPool& pool) {
    const ops::BroadcastPlan p = ops::make_broadcast_plan(l.outputs[0], l.inputs);
    const T* in[ops::kMaxBroadcastInputs] = {};
    for (size_t i = 0; i < l.inputs.size(); ++i) in[i] = l.inputs[i].as<const T>();
    T* y = l.outputs[0].as<T>();
    pool.parallel_for(static_cast<size_t>(p.total), ops::kElementGrain, [&](size_t b, size_t e) {
        float reg[kMaxStack][ops::kBlock];
        for (int64_t pos = static_cast<int64_t>(b), end = static_cast<int64_t>(e); pos < end; pos += ops::kBlock) {
            const int64_t m = std::min(ops::kBlock, end - pos);
            ops::store_block(eval_block<T>(a, p, in, pos, m, reg), y + pos, m);
        }
    });
}

Status eltwise_chain_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    if (l.outputs[0].elements() == 0) return {};
    if (a.dtype == DType::F16) run_typed<f16>(l, a, pool);
    else run_typed<float>(l, a, pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_eltwise_chain;
const KernelDef kernel_eltwise_chain = {"eltwise_chain", eltwise_chain_work, eltwise_chain_cost, eltwise_chain_run};

}  // namespace loom::device
