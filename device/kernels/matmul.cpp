// matmul: ONNX MatMul with the epilogue the compiler fuses into it:
//   Y[..., M, N] = act(A[..., M, K] x B[..., K, N] + bias[N])
// The batch dims (all but the last two) broadcast numpy-style; a 1-D A is [1, K] with M dropped
// from Y, a 1-D B is [K, 1] with N dropped. Inputs: A, B, then optional (absent or empty): bias
// (N values), S (prelu slopes: 1 or N values), BS (B's scales, with an i8 B). Output: Y.
// Attributes: activation (none, relu, leaky_relu + alpha, prelu, clip + min/max, sigmoid,
// hard_swish), x_scale (with an i8 B). Tiling: CubeTiling (cube_default_tiling when absent).
// Dtypes: all f32, or all f16 (stored f16, computed with fp32 accumulation, rounded once, as the
// Cube's L0C -> UB path does).
// int8: B may be i8 with BS (f32, 1 value or N, one per column of B) and x_scale > 0. A (f32 or
// f16, Y's dtype) is quantized once per launch, q = clamp(nearbyint(a / x_scale), -127, 127);
// the sum over K is exact int32 (K at most 132104); then x_scale x BS[j] x sum, and the epilogue
// as for float.
//
// Host: cpu::gemm per batch entry, batch entries in parallel; when B has no batch of its own
// (its batch dims are all 1) the batch folds into M as one GEMM, and when A has none it is
// packed once for every entry. int8 runs the same paths on the int8 GEMM (cpu/gemm_i8.hpp: A
// quantized to int8, B's own int8 values, exact int32 sums) with the dequantize factors in the
// epilogue.
// NPU cost: cube_cost with m = M, n = N, k = K and batch = the product of the broadcast batch
// dims; Vector passes for the bias, the activation and the f16 cast (int8: CubeWork::int8 and a
// dequantize pass).
#include <algorithm>
#include <array>
#include <span>
#include <string>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/gemm_i8.hpp"
#include "device/kernels/cube_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Matmul {
    int64_t m = 0, n = 0, k = 0;
    int64_t batch = 1;  // product of the broadcast batch dims
    int brank = 0;      // rank of the broadcast batch
    // Batch dims right-aligned to brank (1 where an operand has fewer), and the broadcast result.
    std::array<int64_t, kMaxRank> a_dims{}, b_dims{}, y_dims{};
    int64_t a_batch = 1, b_batch = 1;  // batch entries each operand really holds
    DType dtype = DType::F32;
    ops::Activation act;
    const TensorRef *bias = nullptr, *slope = nullptr;
    ops::Quant q;

    // Offsets (in matrices) of batch entry t's A and B.
    void offsets(int64_t t, int64_t& a, int64_t& b) const {
        a = b = 0;
        int64_t as = 1, bs = 1;
        for (int d = brank - 1; d >= 0; --d) {
            const size_t i = static_cast<size_t>(d);
            const int64_t idx = t % y_dims[i];
            t /= y_dims[i];
            if (a_dims[i] != 1) a += idx * as;
            if (b_dims[i] != 1) b += idx * bs;
            as *= a_dims[i], bs *= b_dims[i];
        }
    }
};

Result<Matmul> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "matmul", 2, 5, 1));
    const TensorRef &a = l.inputs[0], &b = l.inputs[1], &y = l.outputs[0];
    LOOM_TRY(ops::check_float_operands(l, "matmul"));
    Matmul d;
    d.dtype = a.dtype;
    if (a.rank < 1 || b.rank < 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: A is {} and B is {} (both must be at least 1-D)",
                          ops::shape_str(a), ops::shape_str(b));
    const bool a_vec = a.rank == 1, b_vec = b.rank == 1;
    d.m = a_vec ? 1 : a.dim(a.rank - 2);
    d.k = a.dim(a.rank - 1);
    const int64_t kb = b_vec ? b.dim(0) : b.dim(b.rank - 2);
    d.n = b_vec ? 1 : b.dim(b.rank - 1);
    const int ar = a_vec ? 0 : a.rank - 2, br = b_vec ? 0 : b.rank - 2;
    d.brank = std::max(ar, br);
    for (int i = 0; i < d.brank; ++i) {
        const size_t s = static_cast<size_t>(i);
        d.a_dims[s] = i - (d.brank - ar) >= 0 ? a.dim(i - (d.brank - ar)) : 1;
        d.b_dims[s] = i - (d.brank - br) >= 0 ? b.dim(i - (d.brank - br)) : 1;
        if (d.a_dims[s] != d.b_dims[s] && d.a_dims[s] != 1 && d.b_dims[s] != 1)
            return make_error(StatusCode::INVALID_ARGUMENT, "matmul: the batch dims of A {} and B {} do not broadcast",
                              ops::shape_str(a), ops::shape_str(b));
        d.y_dims[s] = d.a_dims[s] == 1 ? d.b_dims[s] : d.a_dims[s];  // 0 and 1 broadcast to 0
        d.batch *= d.y_dims[s], d.a_batch *= d.a_dims[s], d.b_batch *= d.b_dims[s];
    }
    // Y's expected shape: the batch, then M unless A is 1-D, then N unless B is 1-D.
    std::array<int64_t, kMaxRank + 2> want{};
    int wr = 0;
    for (int i = 0; i < d.brank; ++i) want[static_cast<size_t>(wr++)] = d.y_dims[static_cast<size_t>(i)];
    if (!a_vec) want[static_cast<size_t>(wr++)] = d.m;
    if (!b_vec) want[static_cast<size_t>(wr++)] = d.n;
    bool y_ok = kb == d.k && y.rank == wr;
    for (int i = 0; y_ok && i < wr; ++i) y_ok = y.dim(i) == want[static_cast<size_t>(i)];
    if (!y_ok) {
        const std::string ws = ops::dims_str(std::span<const int64_t>(want.data(), static_cast<size_t>(wr)));
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: shapes A {}, B {}, C {} do not agree ({})",
                          ops::shape_str(a), ops::shape_str(b), ops::shape_str(y),
                          kb != d.k ? fmt::format("K is {} in A, {} in B", d.k, kb) : "C must be " + ws);
    }
    if (d.m <= 0 || d.n <= 0 || d.k <= 0 || d.batch <= 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: empty shape {}x{}x{} (batch {})", d.m, d.n, d.k,
                          d.batch);
    LOOM_TRY(l.attrs.check_known({"activation", "alpha", "min", "max", "x_scale"}).with_context("matmul"));
    auto act = ops::parse_activation(l.attrs);
    if (!act.ok()) return act.status().with_context("matmul");
    d.act = *act;
    d.bias = ops::optional_input(l, 2);
    d.slope = ops::optional_input(l, 3);
    if (d.bias && (d.bias->elements() != d.n || d.bias->dtype != d.dtype))
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: bias is {} {}, must hold N = {} {} values",
                          ops::shape_str(*d.bias), dtype_name(d.bias->dtype), d.n, dtype_name(d.dtype));
    LOOM_TRY(ops::check_prelu_slope(d.act, d.slope, "matmul", "N", d.n, d.dtype));
    LOOM_ASSIGN_OR_RETURN(d.q, ops::parse_quant(l, "matmul", "B", "BS", 4, "N", d.n));
    if (d.q.on()) LOOM_TRY(ops::check_int8_reduction(d.k, "matmul", "K"));
    return d;
}

Result<KernelWork> matmul_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Matmul d, check(l));
    cost::CubeWork w;
    w.m = d.m, w.n = d.n, w.k = d.k, w.batch = d.batch, w.dtype = d.dtype, w.int8 = d.q.on();
    // Vector passes: int8's dequantize, bias add, activation, and the fp32 -> f16 cast when
    // storing f16.
    w.epilogue_passes = ops::epilogue_passes(d.act, d.dtype, (d.bias ? 1 : 0) + (d.q.on() ? 1 : 0));
    return cost::cube_work(w);
}

Result<CycleBreakdown> matmul_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(matmul_work(l, s), l.tiling, s, "matmul");
}

// The operand types of one GEMM flavour: fp32, or int8 with int16 packed panels.
template <typename T>
struct Operands;
template <>
struct Operands<float> {
    using View = cpu::MatView;
    using Packed = float;
    static constexpr cpu::PackB pack_b = cpu::gemm_pack_b_strided;
    static size_t packed_a(int64_t m, int64_t k) { return cpu::gemm_packed_a_floats(m, k); }
};
template <>
struct Operands<int8_t> {
    using View = cpu::MatViewI8;
    using Packed = int16_t;
    static constexpr cpu::PackBI8 pack_b = cpu::gemm_pack_b_strided;
    static size_t packed_a(int64_t m, int64_t k) { return cpu::gemm_packed_a_i16(m, k); }
};

// Y = ep(A x B) over the batch, A and B as T (fp32, or int8 for the exact int8 GEMM).
template <typename T>
void batched_gemm(const Matmul& d, const T* a, const T* b, float* y, const cpu::Epilogue& ep, cpu::ScratchScope& scope,
                  ThreadPool& pool) {
    using Op = Operands<T>;
    using View = typename Op::View;
    const int64_t a_mat = d.m * d.k, b_mat = d.k * d.n, y_mat = d.m * d.n;
    if (d.b_batch == 1) {
        // A's rows of every batch entry are consecutive: one GEMM of batch x M rows.
        cpu::gemm(d.batch * d.m, d.n, d.k, View{a, d.k, 1}, View{b, d.n, 1}, y, d.n, ep, pool);
    } else if (d.a_batch == 1) {
        auto* ap = scope.alloc_as<typename Op::Packed>(Op::packed_a(d.m, d.k));
        cpu::gemm_pack_a(d.m, d.k, View{a, d.k, 1}, ap);
        pool.parallel_for(static_cast<size_t>(d.batch), 1, [&](size_t t0, size_t t1) {
            for (size_t t = t0; t < t1; ++t) {
                int64_t ao, bo;
                d.offsets(static_cast<int64_t>(t), ao, bo);
                const View bv{b + bo * b_mat, d.n, 1};
                cpu::gemm_packed(d.m, d.n, d.k, ap, Op::pack_b, &bv, y + static_cast<int64_t>(t) * y_mat, d.n, ep,
                                 pool);
            }
        });
    } else {
        pool.parallel_for(static_cast<size_t>(d.batch), 1, [&](size_t t0, size_t t1) {
            for (size_t t = t0; t < t1; ++t) {
                int64_t ao, bo;
                d.offsets(static_cast<int64_t>(t), ao, bo);
                cpu::gemm(d.m, d.n, d.k, View{a + ao * a_mat, d.k, 1}, View{b + bo * b_mat, d.n, 1},
                          y + static_cast<int64_t>(t) * y_mat, d.n, ep, pool);
            }
        });
    }
}

Status matmul_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Matmul d, check(l));
    LOOM_TRY(ops::check_data(l, "matmul"));
    cpu::ScratchScope scope;
    const TensorRef& yt = l.outputs[0];
    float* y = ops::f32_output(yt, scope);
    cpu::Epilogue ep = ops::activation_epilogue(d.act);
    if (d.bias) ep.bias = {ops::as_f32(*d.bias, scope), 0, 1};
    if (d.slope) ep.slope = {ops::as_f32(*d.slope, scope), 0, d.slope->elements() == 1 ? 0 : 1};
    if (d.q.on()) {
        // int8: A quantized to int8, B's own int8 values; every sum is exact int32.
        ep.dequant = {ops::dequant_factors(d.q, scope), 0, d.q.w_scale->elements() == 1 ? 0 : 1};
        const int8_t* a = ops::quantize_i8(l.inputs[0], d.q.x_scale, scope, pool);
        batched_gemm(d, a, l.inputs[1].as<const int8_t>(), y, ep, scope, pool);
    } else {
        batched_gemm(d, ops::as_f32(l.inputs[0], scope, &pool), ops::as_f32(l.inputs[1], scope, &pool), y, ep, scope,
                     pool);
    }
    ops::store_f32(y, yt, &pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_matmul;
const KernelDef kernel_matmul = {"matmul", matmul_work, matmul_cost, matmul_run};

}  // namespace loom::device
