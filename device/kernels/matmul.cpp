// matmul: C[M,N] = act(A[M,K] x B[K,N] + bias[N]) on the Cube unit.
// Inputs: A, B, optional bias (length N). Output: C. All f32, or all f16 (fp32 accumulation,
// rounded to f16 once at the end, as the Cube's L0C -> UB path does).
// Attribute: activation = "none" (default) or "relu". Tiling: CubeTiling (default heuristic below).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"

namespace loom::device {

namespace {

using cost::ceil_div;
using cost::round_up;

struct Dims {
    int64_t m, n, k;
    bool bias;
    int activation;
    DType dtype;
};

Result<Dims> check(const KernelLaunch& l) {
    if (l.inputs.size() < 2 || l.inputs.size() > 3 || l.outputs.size() != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul takes A, B[, bias] and one output, got {} and {}",
                          l.inputs.size(), l.outputs.size());
    const TensorRef &a = l.inputs[0], &b = l.inputs[1], &c = l.outputs[0];
    if (a.rank != 2 || b.rank != 2 || c.rank != 2)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: A, B and C must be 2-D (ranks {}, {}, {})", a.rank,
                          b.rank, c.rank);
    Dims d{a.dim(0), b.dim(1), a.dim(1), l.inputs.size() == 3, 0, a.dtype};
    if (b.dim(0) != d.k || c.dim(0) != d.m || c.dim(1) != d.n)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: shapes A {}x{}, B {}x{}, C {}x{} do not agree", d.m,
                          d.k, b.dim(0), d.n, c.dim(0), c.dim(1));
    if (d.m <= 0 || d.n <= 0 || d.k <= 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: empty shape {}x{}x{}", d.m, d.n, d.k);
    if (d.dtype != DType::F32 && d.dtype != DType::F16)
        return make_error(StatusCode::UNSUPPORTED, "matmul: dtype {} (f32 and f16 are supported)", dtype_name(d.dtype));
    for (const auto* t : {&b, &c})
        if (t->dtype != d.dtype) return make_error(StatusCode::INVALID_ARGUMENT, "matmul: mixed dtypes");
    if (d.bias) {
        const TensorRef& bias = l.inputs[2];
        if (bias.dtype != d.dtype || bias.elements() != d.n)
            return make_error(StatusCode::INVALID_ARGUMENT, "matmul: bias must hold N = {} {} values", d.n,
                              dtype_name(d.dtype));
    }
    LOOM_TRY(l.attrs.check_known({"activation"}).with_context("matmul"));
    auto act = l.attrs.get_string("activation", "none");
    if (!act.ok()) return act.status().with_context("matmul");
    if (*act != "none" && *act != "relu")
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: activation '{}' (none or relu)", *act);
    d.activation = *act == "relu" ? 1 : 0;
    return d;
}

Result<CycleBreakdown> matmul_cost(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Dims d, check(l));
    cost::CubeWork w;
    w.m = d.m, w.n = d.n, w.k = d.k, w.dtype = d.dtype;
    // Vector passes: bias add, activation, and the fp32 -> f16 cast when storing f16.
    w.epilogue_passes = (d.bias ? 1 : 0) + (d.activation ? 1 : 0) + (d.dtype == DType::F16 ? 1 : 0);
    return cost::cube_cost(s, w, l.tiling, "matmul");
}

template <typename T>
float load(const T* p, int64_t i) {
    if constexpr (std::is_same_v<T, f16>) return f16_to_f32(p[i]);
    else return p[i];
}

template <typename T>
void store(T* p, int64_t i, float v) {
    if constexpr (std::is_same_v<T, f16>) p[i] = f32_to_f16(v);
    else p[i] = v;
}

// Row panels of C computed in parallel; each row accumulates A[i,k] * B[k,:] in fp32 (the
// inner loop over N is contiguous and vectorises).
template <typename T>
Status matmul_run_typed(const KernelLaunch& l, const Dims& d, ThreadPool& pool) {
    const T* a = l.inputs[0].as<const T>();
    const T* b = l.inputs[1].as<const T>();
    const T* bias = d.bias ? l.inputs[2].as<const T>() : nullptr;
    T* c = l.outputs[0].as<T>();
    std::vector<float> bf;  // B widened once when stored as f16
    const float* bw;
    if constexpr (std::is_same_v<T, f16>) {
        bf.resize(static_cast<size_t>(d.k * d.n));
        for (int64_t i = 0; i < d.k * d.n; ++i) bf[static_cast<size_t>(i)] = f16_to_f32(b[i]);
        bw = bf.data();
    } else {
        bw = b;
    }
    size_t grain = static_cast<size_t>(std::max<int64_t>(1, 65536 / std::max<int64_t>(1, d.n * d.k / 64)));
    pool.parallel_for(static_cast<size_t>(d.m), grain, [&](size_t r0, size_t r1) {
        std::vector<float> acc(static_cast<size_t>(d.n));
        for (size_t r = r0; r < r1; ++r) {
            int64_t i = static_cast<int64_t>(r);
            for (int64_t j = 0; j < d.n; ++j) acc[static_cast<size_t>(j)] = bias ? load(bias, j) : 0.0f;
            for (int64_t kk = 0; kk < d.k; ++kk) {
                float av = load(a, i * d.k + kk);
                const float* brow = bw + kk * d.n;
                float* ac = acc.data();
                for (int64_t j = 0; j < d.n; ++j) ac[j] += av * brow[j];
            }
            for (int64_t j = 0; j < d.n; ++j) {
                float v = acc[static_cast<size_t>(j)];
                if (d.activation == 1) v = std::max(v, 0.0f);
                store(c, i * d.n + j, v);
            }
        }
    });
    return {};
}

Status matmul_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Dims d, check(l));
    return d.dtype == DType::F16 ? matmul_run_typed<f16>(l, d, pool) : matmul_run_typed<float>(l, d, pool);
}

}  // namespace

extern const KernelDef kernel_matmul;
const KernelDef kernel_matmul = {"matmul", matmul_cost, matmul_run};

}  // namespace loom::device
