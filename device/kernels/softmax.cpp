// softmax: Y = exp(X - max) / sum(exp(X - max)) along one axis (ONNX opset-13 Softmax), or
// LogSoftmax Y = X - max - log(sum(exp(X - max))) with log = 1. Y has X's shape and dtype and
// may be X itself.
// Attributes: axis (default -1; -rank .. rank-1), log (0 default, or 1).
// Dtypes: f32, f16 (computed in fp32 with the sum in float64, rounded once); exp is the
// vectorised one of cpu/vmath.hpp (within 2 ulp).
// Tiling: VectorSchedule (default: vector_cost's heuristic; the softmax axis is the schedule's
// axis, a reduction).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/cpu/vmath.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

using ops::shape_str;

constexpr int64_t kTile = 256;  // inner positions (or row elements) handled per stack buffer

struct Args {
    int64_t outer, len, inner;  // X viewed as [outer, len, inner] with the axis in the middle
    bool log;
    DType dtype;
};

Result<Args> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "softmax", 1, 1, 1));
    LOOM_TRY(l.attrs.check_known({"axis", "log"}).with_context("softmax"));
    auto axis = l.attrs.get_int("axis", -1);
    if (!axis.ok()) return axis.status().with_context("softmax");
    auto log = l.attrs.get_int("log", 0);
    if (!log.ok()) return log.status().with_context("softmax");
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (*log != 0 && *log != 1) return make_error(StatusCode::INVALID_ARGUMENT, "softmax: log = {} (0 or 1)", *log);
    if (x.rank == 0) return make_error(StatusCode::INVALID_ARGUMENT, "softmax: X is a scalar (rank >= 1 needed)");
    if (*axis < -x.rank || *axis >= x.rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "softmax: axis = {} outside [{}, {}] for X {}", *axis, -x.rank,
                          x.rank - 1, shape_str(x));
    if (!ops::is_float(x.dtype))
        return make_error(StatusCode::UNSUPPORTED, "softmax: dtype {} (f32 and f16 are supported)",
                          dtype_name(x.dtype));
    if (y.dtype != x.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "softmax: mixed dtypes (X {}, Y {})", dtype_name(x.dtype),
                          dtype_name(y.dtype));
    if (!ops::same_shape(x, y))
        return make_error(StatusCode::INVALID_ARGUMENT, "softmax: output Y is {}, want X's shape {}", shape_str(y),
                          shape_str(x));
    const int ax = static_cast<int>(*axis < 0 ? *axis + x.rank : *axis);
    return Args{ops::dims_product(x, 0, ax), x.dim(ax), ops::dims_product(x, ax + 1, x.rank), *log == 1, x.dtype};
}

// Reads X once and writes Y once while a slice along the axis fits a third of UB; beyond that
// the statistics pass and the normalising pass each read X (twice the input bytes). Vector
// passes: max 1, subtract + exp 4, sum 1, scale (or subtract log-sum) 1; +2 for f16. The
// iteration space is outer x axis x inner; max and sum reduce along the axis.
Result<KernelWork> softmax_work(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    return ops::two_pass_work(s, a.outer * a.len * a.inner, a.len, a.inner, a.dtype, 7, 2);
}

Result<CycleBreakdown> softmax_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(softmax_work(l, s), l.tiling, s, "softmax");
}

// Calls fn(v, m) with n fp32 values starting at p, in pieces of at most kTile: f32 in place,
// f16 converted into a stack buffer.
template <typename T, typename Fn>
inline void for_blocks(const T* p, int64_t n, Fn&& fn) {
    if constexpr (std::is_same_v<T, float>) {
        fn(p, n);
    } else {
        float buf[kTile];
        for (int64_t j = 0; j < n; j += kTile) {
            const int64_t m = std::min(kTile, n - j);
            for (int64_t i = 0; i < m; ++i) buf[i] = f16_to_f32(p[j + i]);
            fn(static_cast<const float*>(buf), m);
        }
    }
}

// One contiguous row of `len` elements (the axis is innermost).
template <typename T>
void softmax_row(const T* x, T* y, int64_t len, bool log) {
    float mx = -std::numeric_limits<float>::infinity();
    for_blocks(x, len, [&](const float* v, int64_t m) {
        for (int64_t i = 0; i < m; ++i) mx = std::max(mx, v[i]);
    });
    if constexpr (std::is_same_v<T, float>) {
        if (!log) {  // keep exp(x - max) in Y and scale it afterwards
            const float inv = static_cast<float>(1.0 / cpu::vec_exp_sum(x, y, len, mx));
            for (int64_t i = 0; i < len; ++i) y[i] *= inv;
            return;
        }
    }
    double sum = 0;
    float e[kTile];
    for_blocks(x, len, [&](const float* v, int64_t m) {
        for (int64_t j = 0; j < m; j += kTile) sum += cpu::vec_exp_sum(v + j, e, std::min(kTile, m - j), mx);
    });
    const float inv = static_cast<float>(1.0 / sum), lse = static_cast<float>(std::log(sum));
    int64_t at = 0;
    for_blocks(x, len, [&](const float* v, int64_t m) {
        for (int64_t j = 0; j < m; j += kTile) {
            const int64_t c = std::min(kTile, m - j);
            if (log) {
                for (int64_t i = 0; i < c; ++i) e[i] = (v[j + i] - mx) - lse;
            } else {
                cpu::vec_exp(v + j, e, c, mx);
                for (int64_t i = 0; i < c; ++i) e[i] *= inv;
            }
            for (int64_t i = 0; i < c; ++i) {
                if constexpr (std::is_same_v<T, f16>) y[at + j + i] = f32_to_f16(e[i]);
                else y[at + j + i] = e[i];
            }
        }
        at += m;
    });
}

// Up to kTile neighbouring inner positions j0 .. j0 + t of one outer index: the axis has stride
// `inner`, the t positions are contiguous, so every pass is a contiguous loop over t.
template <typename T>
void softmax_tile(const T* x, T* y, int64_t len, int64_t inner, int64_t t, bool log) {
    float mx[kTile], buf[kTile];
    double sum[kTile];
    auto load = [&](int64_t k) -> const float* {
        const T* p = x + k * inner;
        if constexpr (std::is_same_v<T, float>) {
            return p;
        } else {
            for (int64_t j = 0; j < t; ++j) buf[j] = f16_to_f32(p[j]);
            return buf;
        }
    };
    std::fill(mx, mx + t, -std::numeric_limits<float>::infinity());
    std::fill(sum, sum + t, 0.0);
    for (int64_t k = 0; k < len; ++k) {
        const float* v = load(k);
        for (int64_t j = 0; j < t; ++j) mx[j] = std::max(mx[j], v[j]);
    }
    float e[kTile];
    for (int64_t k = 0; k < len; ++k) {
        const float* v = load(k);
        for (int64_t j = 0; j < t; ++j) e[j] = v[j] - mx[j];
        cpu::vec_exp(e, e, t);
        for (int64_t j = 0; j < t; ++j) sum[j] += e[j];
    }
    float scale[kTile];  // 1 / sum, or log(sum)
    for (int64_t j = 0; j < t; ++j) scale[j] = static_cast<float>(log ? std::log(sum[j]) : 1.0 / sum[j]);
    for (int64_t k = 0; k < len; ++k) {
        const float* v = load(k);
        T* out = y + k * inner;
        for (int64_t j = 0; j < t; ++j) e[j] = v[j] - mx[j];
        if (log) {
            for (int64_t j = 0; j < t; ++j) e[j] -= scale[j];
        } else {
            cpu::vec_exp(e, e, t);
            for (int64_t j = 0; j < t; ++j) e[j] *= scale[j];
        }
        for (int64_t j = 0; j < t; ++j) {
            if constexpr (std::is_same_v<T, f16>) out[j] = f32_to_f16(e[j]);
            else out[j] = e[j];
        }
    }
}

template <typename T>
void run_typed(const Args& a, const T* x, T* y, ThreadPool& pool) {
    const size_t work_grain = static_cast<size_t>(1 << 14);
    if (a.inner == 1) {
        const size_t grain = std::max<size_t>(1, work_grain / static_cast<size_t>(a.len));
        pool.parallel_for(static_cast<size_t>(a.outer), grain, [&](size_t b, size_t e) {
            for (size_t r = b; r < e; ++r) {
                const int64_t off = static_cast<int64_t>(r) * a.len;
                softmax_row(x + off, y + off, a.len, a.log);
            }
        });
        return;
    }
    const int64_t tiles = cost::ceil_div(a.inner, kTile);
    const size_t grain = std::max<size_t>(1, work_grain / static_cast<size_t>(a.len * std::min(a.inner, kTile)));
    pool.parallel_for(static_cast<size_t>(a.outer * tiles), grain, [&](size_t b, size_t e) {
        for (size_t u = b; u < e; ++u) {
            const int64_t o = static_cast<int64_t>(u) / tiles, j0 = static_cast<int64_t>(u) % tiles * kTile;
            const int64_t off = o * a.len * a.inner + j0;
            softmax_tile(x + off, y + off, a.len, a.inner, std::min(kTile, a.inner - j0), a.log);
        }
    });
}

Status softmax_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    if (a.outer * a.len * a.inner == 0) return {};
    if (a.dtype == DType::F16) run_typed(a, l.inputs[0].as<const f16>(), l.outputs[0].as<f16>(), pool);
    else run_typed(a, l.inputs[0].as<const float>(), l.outputs[0].as<float>(), pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_softmax;
const KernelDef kernel_softmax = {"softmax", softmax_work, softmax_cost, softmax_run};

}  // namespace loom::device
