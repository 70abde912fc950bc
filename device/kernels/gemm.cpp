// gemm: ONNX Gemm with the epilogue the compiler fuses into it:
//   Y[M, N] = act(alpha * A' x B' + beta * C),  A' = transA ? A^T : A,  B' = transB ? B^T : B
// Inputs: A ([M, K], or [K, M] with transA), B ([K, N], or [N, K] with transB), then optional
// (absent or empty): C (unidirectionally broadcast to [M, N]: a scalar, [N], [1, N], [M, 1] or
// [M, N]), S (prelu slopes: 1 or N values), BS (B's scales, with an i8 B). Output: Y.
// Attributes: alpha, beta (floats, default 1), transA, transB (0 or 1, default 0) as in ONNX;
// activation (none, relu, leaky_relu, prelu, clip + min/max, sigmoid, hard_swish) with the
// leaky_relu slope named activation_alpha, since Gemm's own alpha takes that name; x_scale (with
// an i8 B).
// Dtypes: all f32, or all f16 (stored f16, computed with fp32 accumulation, rounded once).
// int8: B may be i8 with BS (f32, 1 value or N, one per output column whatever transB) and
// x_scale > 0. A (f32 or f16, Y's dtype) is quantized once per launch, q = clamp(nearbyint(a /
// x_scale), -127, 127); the sum over K is exact int32 (K at most 132104); then alpha x x_scale x
// BS[j] x sum (alpha multiplies the dequantized product), and beta * C and the activation as for
// float.
//
// Host: cpu::gemm reading the transposed operands through MatView strides (no transposed
// copies); alpha is the epilogue's scale and beta * C its bias addend (C scaled into scratch
// when beta != 1); int8 runs the int8 GEMM (cpu/gemm_i8.hpp: A quantized to int8, B's own int8
// values, exact int32 sums) with the dequantize factors in the epilogue.
// NPU cost: cube_cost with m = M, n = N, k = K; the transposes are free (MTE1 transposes while
// loading L0); Vector passes for alpha, beta * C, the activation and the f16 cast, and a full
// [M, N] C is read from memory once more per output element; int8 as CubeWork::int8 plus a
// dequantize pass.
#include <algorithm>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/gemm_i8.hpp"
#include "device/kernels/cube_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Gemm {
    int64_t m = 0, n = 0, k = 0;
    bool trans_a = false, trans_b = false;
    float alpha = 1, beta = 1;
    DType dtype = DType::F32;
    ops::Activation act;
    const TensorRef *c = nullptr, *slope = nullptr;  // c is null when absent or beta == 0
    int64_t c_rows = 1, c_cols = 1;                  // C's shape as [c_rows, c_cols]
    ops::Quant q;
};

Result<bool> flag(const KernelAttrs& attrs, std::string_view name) {
    LOOM_ASSIGN_OR_RETURN(int64_t v, attrs.get_int(name, 0));
    if (v != 0 && v != 1) return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' is {} (0 or 1)", name, v);
    return v == 1;
}

// The activation attributes under parse_activation's names (activation_alpha -> alpha).
Result<ops::Activation> activation(const KernelAttrs& attrs) {
    KernelAttrs sub;
    for (const auto& [name, value] : attrs.items()) {
        if (name == "activation" || name == "min" || name == "max") sub.set(name, value);
        else if (name == "activation_alpha") sub.set("alpha", value);
    }
    if (attrs.has("activation_alpha")) {
        LOOM_TRY(attrs.get_float("activation_alpha").status());
        LOOM_ASSIGN_OR_RETURN(std::string name, attrs.get_string("activation", "none"));
        if (name != "leaky_relu")
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "attribute 'activation_alpha' only applies to activation 'leaky_relu'");
    }
    return ops::parse_activation(sub);
}

Result<Gemm> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "gemm", 2, 5, 1));
    const TensorRef &a = l.inputs[0], &b = l.inputs[1], &y = l.outputs[0];
    LOOM_TRY(ops::check_float_operands(l, "gemm"));
    Gemm g;
    g.dtype = a.dtype;
    for (auto [t, name] : {std::pair{&a, "A"}, std::pair{&b, "B"}, std::pair{&y, "Y"}})
        if (t->rank != 2)
            return make_error(StatusCode::INVALID_ARGUMENT, "gemm: {} is {} (must be 2-D)", name, ops::shape_str(*t));
    LOOM_TRY(l.attrs
                 .check_known(
                     {"alpha", "beta", "transA", "transB", "activation", "activation_alpha", "min", "max", "x_scale"})
                 .with_context("gemm"));
    auto ta = flag(l.attrs, "transA"), tb = flag(l.attrs, "transB");
    if (!ta.ok()) return ta.status().with_context("gemm");
    if (!tb.ok()) return tb.status().with_context("gemm");
    g.trans_a = *ta, g.trans_b = *tb;
    auto alpha = l.attrs.get_float("alpha", 1.0), beta = l.attrs.get_float("beta", 1.0);
    if (!alpha.ok()) return alpha.status().with_context("gemm");
    if (!beta.ok()) return beta.status().with_context("gemm");
    g.alpha = static_cast<float>(*alpha), g.beta = static_cast<float>(*beta);
    g.m = a.dim(g.trans_a ? 1 : 0), g.k = a.dim(g.trans_a ? 0 : 1);
    const int64_t kb = b.dim(g.trans_b ? 1 : 0);
    g.n = b.dim(g.trans_b ? 0 : 1);
    if (kb != g.k)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "gemm: A' is {}x{} (A {}, transA {}) but B' is {}x{} (B {}, transB {}): K differs", g.m, g.k,
                          ops::shape_str(a), int(g.trans_a), kb, g.n, ops::shape_str(b), int(g.trans_b));
    if (y.dim(0) != g.m || y.dim(1) != g.n)
        return make_error(StatusCode::INVALID_ARGUMENT, "gemm: Y is {} but A' x B' is {}x{}", ops::shape_str(y), g.m,
                          g.n);
    if (g.m <= 0 || g.n <= 0 || g.k <= 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "gemm: empty shape {}x{}x{}", g.m, g.n, g.k);
    if (const TensorRef* c = ops::optional_input(l, 2)) {
        // Unidirectional broadcast: C's dims right-aligned to [M, N], each equal or 1.
        g.c_cols = c->rank >= 1 ? c->dim(c->rank - 1) : 1;
        g.c_rows = c->rank >= 2 ? c->dim(c->rank - 2) : 1;
        if (c->rank > 2 || (g.c_cols != 1 && g.c_cols != g.n) || (g.c_rows != 1 && g.c_rows != g.m))
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "gemm: C is {}, does not broadcast to Y {}x{} (a scalar, [N], [1, N], [M, 1] or [M, N])",
                              ops::shape_str(*c), g.m, g.n);
        if (c->dtype != g.dtype)
            return make_error(StatusCode::INVALID_ARGUMENT, "gemm: C is {}, must be {} like A", dtype_name(c->dtype),
                              dtype_name(g.dtype));
        if (g.beta != 0) g.c = c;
    }
    auto act = activation(l.attrs);
    if (!act.ok()) return act.status().with_context("gemm");
    g.act = *act;
    g.slope = ops::optional_input(l, 3);
    LOOM_TRY(ops::check_prelu_slope(g.act, g.slope, "gemm", "N", g.n, g.dtype));
    LOOM_ASSIGN_OR_RETURN(g.q, ops::parse_quant(l, "gemm", "B", "BS", 4, "N", g.n));
    if (g.q.on()) LOOM_TRY(ops::check_int8_reduction(g.k, "gemm", "K"));
    return g;
}

Result<KernelWork> gemm_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Gemm g, check(l));
    cost::CubeWork w;
    w.m = g.m, w.n = g.n, w.k = g.k, w.dtype = g.dtype, w.int8 = g.q.on();
    // Vector passes: int8's dequantize, alpha, beta * C (one multiply-add), activation, the
    // fp32 -> f16 cast.
    w.epilogue_passes = ops::epilogue_passes(g.act, g.dtype,
                                             (g.q.on() ? 1 : 0) + (g.alpha != 1 ? 1 : 0) + (g.c ? 1 : 0));
    // A full C streams in next to the output; a row or column of it stays in UB.
    if (g.c && g.c_rows == g.m && g.c_cols == g.n && g.m > 1 && g.n > 1)
        w.epilogue_in_bytes = static_cast<double>(dtype_size(g.dtype));
    return cost::cube_work(w);
}

Result<CycleBreakdown> gemm_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(gemm_work(l, s), l.tiling, s, "gemm");
}

Status gemm_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Gemm g, check(l));
    LOOM_TRY(ops::check_data(l, "gemm"));
    cpu::ScratchScope scope;
    const TensorRef& yt = l.outputs[0];
    float* y = ops::f32_output(yt, scope);
    cpu::Epilogue ep = ops::activation_epilogue(g.act);
    ep.scale = g.alpha;
    if (g.c) {
        const float* c = ops::as_f32(*g.c, scope);
        if (g.beta != 1) {  // the epilogue adds its bias unscaled
            const int64_t count = g.c->elements();
            float* scaled = scope.alloc(static_cast<size_t>(count));
            for (int64_t i = 0; i < count; ++i) scaled[i] = g.beta * c[i];
            c = scaled;
        }
        ep.bias = {c, g.c_rows == 1 ? 0 : g.c_cols, g.c_cols == 1 ? 0 : 1};
    }
    if (g.slope) ep.slope = {ops::as_f32(*g.slope, scope), 0, g.slope->elements() == 1 ? 0 : 1};
    if (g.q.on()) ep.dequant = {ops::dequant_factors(g.q, scope), 0, g.q.w_scale->elements() == 1 ? 0 : 1};
    // Element (i, k) of A' and (k, j) of B', read in place.
    auto run = [&](auto view, const auto* a, const auto* b) {
        using View = decltype(view);
        const View av = g.trans_a ? View{a, 1, g.m} : View{a, g.k, 1};
        const View bv = g.trans_b ? View{b, 1, g.k} : View{b, g.n, 1};
        cpu::gemm(g.m, g.n, g.k, av, bv, y, g.n, ep, pool);
    };
    // int8: A quantized to int8, B's own int8 values; every sum is exact int32.
    if (g.q.on())
        run(cpu::MatViewI8{}, ops::quantize_i8(l.inputs[0], g.q.x_scale, scope, pool), l.inputs[1].as<const int8_t>());
    else run(cpu::MatView{}, ops::as_f32(l.inputs[0], scope, &pool), ops::as_f32(l.inputs[1], scope, &pool));
    ops::store_f32(y, yt, &pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_gemm;
const KernelDef kernel_gemm = {"gemm", gemm_work, gemm_cost, gemm_run};

}  // namespace loom::device
