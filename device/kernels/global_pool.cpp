// global_pool: Y[n, c] = the average or the maximum of X[n, c, ...] over all spatial positions
// (ONNX GlobalAveragePool / GlobalMaxPool). X is N x C x D1 x ... (rank >= 3) with a non-empty
// spatial extent; Y is N x C x 1 x ... (same rank); f32 or f16, the same for both (f16 computed
// in fp32; the average's sum exact, in any order: cpu/exact_sum.hpp).
// Attribute: op = "avg" or "max" (required).
// Cost: a streaming reduction: every input element is read from GM once and takes one Vector
// pass (plus one to widen f16); the output is 1/(D1 x ...) of the input. The model counts
// input elements, not output elements; the schedule's axis is the spatial extent (reduced).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/cpu/exact_sum.hpp"
#include "device/kernels/cpu/vmath.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Args {
    bool max;
    int64_t planes, spatial;  // N*C planes of `spatial` elements
    DType dtype;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"op"}));
    LOOM_ASSIGN_OR_RETURN(std::string op, l.attrs.get_string("op"));
    if (op != "avg" && op != "max")
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'op' = '{}' (avg or max)", op);
    if (!ops::is_float(x.dtype))
        return make_error(StatusCode::UNSUPPORTED, "dtype {} (f32 and f16 are supported)", dtype_name(x.dtype));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    if (x.rank < 3)
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is {}, needs rank >= 3 (N x C x spatial...)",
                          ops::shape_str(x));
    Args a{op == "max", x.dim(0) * x.dim(1), 1, x.dtype};
    std::vector<int64_t> want(static_cast<size_t>(x.rank), 1);
    want[0] = x.dim(0);
    want[1] = x.dim(1);
    for (int d = 2; d < x.rank; ++d) a.spatial *= x.dim(d);
    if (a.spatial == 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is {}: the spatial extent is empty",
                          ops::shape_str(x));
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return a;
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "global_pool", 1, 1, 1, check_args); }

Result<KernelWork> global_pool_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = static_cast<double>(dtype_size(a.dtype));
    cost::VectorWork w;
    w.elements = a.planes * a.spatial;
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = b;
    w.out_bytes = b / static_cast<double>(a.spatial);
    w.vector_passes = 1.0 + (a.dtype == DType::F16 ? 1 : 0);
    w.flops = 1;
    w.ub_buffers = 2;
    // Planes x spatial positions: the reduction runs along the contiguous spatial axis.
    if (w.elements > 0) {
        w.axis_len = a.spatial;
        w.inner = 1;
    }
    w.axis_role = cost::AxisRole::REDUCE;
    w.reduce_passes = 1;
    w.fusable_in_bytes = b;
    return cost::vector_work(w);
}

Result<CycleBreakdown> global_pool_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(global_pool_work(l, s), l.tiling, s, "global_pool");
}

// f(values, count) over the n values at src as fp32, in runs of up to kRun: fp32 in place, fp16 widened
// into a buffer first (vmath.hpp; F16C from AVX2 up).
template <typename T, typename F>
void for_runs(const T* src, int64_t n, F f) {
    if constexpr (std::is_same_v<T, float>) {
        f(src, n);
    } else {
        constexpr int64_t kRun = 1024;
        float buf[kRun];
        for (int64_t i = 0; i < n; i += kRun) {
            const int64_t m = std::min(kRun, n - i);
            cpu::vec_f16_to_f32(src + i, buf, m);
            f(buf, m);
        }
    }
}

template <typename T>
void global_pool_planes(const Args& a, const T* x, T* y, ThreadPool& pool) {
    const int64_t n = a.spatial;
    pool.parallel_for(static_cast<size_t>(a.planes), move::row_grain(n), [&](size_t first, size_t last) {
        for (size_t p = first; p < last; ++p) {
            const T* src = x + static_cast<int64_t>(p) * n;
            float r;
            if (a.max) {
                float m = -std::numeric_limits<float>::infinity();
                for_runs(src, n, [&](const float* v, int64_t len) {
                    for (int64_t i = 0; i < len; ++i) m = std::max(m, v[i]);
                });
                r = m;
            } else {
                // Exact and order-free (cpu/exact_sum.hpp): windows of a frame give the same mean.
                cpu::ExactSum exact;
                for_runs(src, n, [&](const float* v, int64_t len) { exact.add(v, len); });
                const double sum = exact.value();
                r = static_cast<float>(sum / static_cast<double>(n));
            }
            if constexpr (std::is_same_v<T, f16>) y[p] = f32_to_f16(r);
            else y[p] = r;
        }
    });
}

Status global_pool_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (a.planes == 0) return {};
    if (a.dtype == DType::F16) global_pool_planes<f16>(a, x.as<const f16>(), y.as<f16>(), pool);
    else global_pool_planes<float>(a, x.as<const float>(), y.as<float>(), pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_global_pool;
const KernelDef kernel_global_pool = {"global_pool", global_pool_work, global_pool_cost, global_pool_run};

}  // namespace loom::device
