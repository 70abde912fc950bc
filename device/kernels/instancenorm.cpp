// instancenorm: InstanceNormalization, Y = (X - mean) / sqrt(var + epsilon) * scale[c] + B[c]
// with mean and (population) variance over the spatial dims of each (n, c) plane.
// Inputs X [N, C, D1, ...] (rank >= 3), scale [C], B [C]. Output Y of X's shape and dtype; may
// be X itself.
// Attribute: epsilon (default 1e-5).
// Dtypes: X and Y f32 or f16 (statistics in float64; Y = ((X - mean) * a + B) in fp32 with the
// mean split into two floats, rounded once); scale and B f32 or f16 each.
// Statistics: one pass in float64 over X shifted by the plane's first element (so a large mean
// costs no precision); planes longer than kPart are split into fixed parts whose sums are
// added in order, so results do not depend on the thread count.
// Tiling: VectorSchedule (default: vector_cost's heuristic).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/elementwise.hpp"  // kBlock, load_block, store_block
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

using ops::shape_str;

constexpr int64_t kPart = 1 << 15;  // elements of a plane summed by one work item

struct Args {
    int64_t n, c, plane;
    double epsilon;
    DType dtype;
};

Result<Args> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "instancenorm", 3, 3, 1));
    LOOM_TRY(l.attrs.check_known({"epsilon"}).with_context("instancenorm"));
    auto eps = l.attrs.get_float("epsilon", 1e-5);
    if (!eps.ok()) return eps.status().with_context("instancenorm");
    if (!std::isfinite(*eps))
        return make_error(StatusCode::INVALID_ARGUMENT, "instancenorm: epsilon = {} must be finite", *eps);
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (!ops::is_float(x.dtype))
        return make_error(StatusCode::UNSUPPORTED, "instancenorm: X dtype {} (f32 and f16 are supported)",
                          dtype_name(x.dtype));
    if (y.dtype != x.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "instancenorm: mixed dtypes (X {}, Y {})", dtype_name(x.dtype),
                          dtype_name(y.dtype));
    if (x.rank < 3)
        return make_error(StatusCode::INVALID_ARGUMENT, "instancenorm: X is {} (N x C x D1 ... needs rank >= 3)",
                          shape_str(x));
    if (!ops::same_shape(x, y))
        return make_error(StatusCode::INVALID_ARGUMENT, "instancenorm: output Y is {}, want X's shape {}", shape_str(y),
                          shape_str(x));
    Args a{x.dim(0), x.dim(1), ops::dims_product(x, 2, x.rank), *eps, x.dtype};
    LOOM_TRY(ops::check_channel_vectors(l, "instancenorm", {"scale", "B"}, a.c));
    return a;
}

// A statistics pass and a normalising pass. X is read once when a plane fits a third of UB
// (it stays there between the passes), else twice; Y is written once. Vector passes: sum and
// sum of squares 2 (reductions along the plane, the schedule's axis), normalise (two
// subtractions, multiply, add) 4, +2 for f16 (widen, narrow).
Result<KernelWork> instancenorm_work(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    return ops::two_pass_work(s, a.n * a.c * a.plane, a.plane, 1, a.dtype, 6, 2);
}

Result<CycleBreakdown> instancenorm_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(instancenorm_work(l, s), l.tiling, s, "instancenorm");
}

// Per-plane constants of Y = ((X - mean_hi) - mean_lo) * factor + bias; mean_hi + mean_lo is
// the float64 mean to about 48 bits.
struct Plane {
    float mean_hi, mean_lo, factor, bias;
};

struct Moments {
    double s1 = 0, s2 = 0;  // sum of (x - shift) and of its square
};

// Sums x[0 .. n) - shift and its square in float64, four accumulators each (fixed order).
template <typename T>
Moments moments(const T* x, int64_t n, double shift) {
    double a1[4] = {}, a2[4] = {};
    auto at = [&](int64_t i) {
        if constexpr (std::is_same_v<T, f16>) return static_cast<double>(f16_to_f32(x[i])) - shift;
        else return static_cast<double>(x[i]) - shift;
    };
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; ++k) {
            const double d = at(i + k);
            a1[k] += d;
            a2[k] += d * d;
        }
    for (; i < n; ++i) {
        const double d = at(i);
        a1[0] += d;
        a2[0] += d * d;
    }
    return {(a1[0] + a1[1]) + (a1[2] + a1[3]), (a2[0] + a2[1]) + (a2[2] + a2[3])};
}

template <typename T>
void run_typed(const KernelLaunch& l, const Args& a, ThreadPool& pool) {
    const T* x = l.inputs[0].as<const T>();
    T* y = l.outputs[0].as<T>();
    const TensorRef &scale = l.inputs[1], &bias = l.inputs[2];
    const int64_t planes = a.n * a.c, parts = cost::ceil_div(a.plane, kPart);
    std::vector<Moments> part(static_cast<size_t>(planes * parts));
    const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (1 << 14) / std::min(a.plane, kPart)));
    pool.parallel_for(part.size(), grain, [&](size_t b, size_t e) {
        for (size_t u = b; u < e; ++u) {
            const int64_t p = static_cast<int64_t>(u) / parts, k = static_cast<int64_t>(u) % parts;
            const T* base = x + p * a.plane;
            const double shift = ops::load_f(base, a.dtype, 0);
            const int64_t lo = k * kPart, hi = std::min(a.plane, lo + kPart);
            part[u] = moments(base + lo, hi - lo, shift);
        }
    });
    std::vector<Plane> coef(static_cast<size_t>(planes));
    for (int64_t p = 0; p < planes; ++p) {
        double s1 = 0, s2 = 0;
        for (int64_t k = 0; k < parts; ++k) {
            s1 += part[static_cast<size_t>(p * parts + k)].s1;
            s2 += part[static_cast<size_t>(p * parts + k)].s2;
        }
        const double cnt = static_cast<double>(a.plane);
        const double mean_shifted = s1 / cnt;
        const double var = std::max(0.0, s2 / cnt - mean_shifted * mean_shifted);
        const double mean = ops::load_f(x + p * a.plane, a.dtype, 0) + mean_shifted;
        const int64_t c = p % a.c;
        Plane& q = coef[static_cast<size_t>(p)];
        q.mean_hi = static_cast<float>(mean);
        q.mean_lo = static_cast<float>(mean - q.mean_hi);
        q.factor = static_cast<float>(ops::load_f(scale.data, scale.dtype, c) / std::sqrt(var + a.epsilon));
        q.bias = ops::load_f(bias.data, bias.dtype, c);
    }
    pool.parallel_for(static_cast<size_t>(planes * a.plane), ops::kElementGrain, [&](size_t b, size_t e) {
        float buf[ops::kBlock];
        for (int64_t pos = static_cast<int64_t>(b), end = static_cast<int64_t>(e); pos < end;) {
            const Plane q = coef[static_cast<size_t>(pos / a.plane)];
            const int64_t n = std::min(a.plane - pos % a.plane, end - pos);
            // x - mean_hi is exact near the mean (Sterbenz), so a large mean costs no precision.
            auto norm = [&q](float v) { return ((v - q.mean_hi) - q.mean_lo) * q.factor + q.bias; };
            if constexpr (std::is_same_v<T, f16>) {
                for (int64_t j0 = 0; j0 < n; j0 += ops::kBlock) {
                    const int64_t k = std::min(ops::kBlock, n - j0);
                    ops::load_block(x + pos + j0, 1, buf, k);
                    for (int64_t j = 0; j < k; ++j) buf[j] = norm(buf[j]);
                    ops::store_block(buf, y + pos + j0, k);
                }
            } else {
                for (int64_t j = 0; j < n; ++j) y[pos + j] = norm(x[pos + j]);
            }
            pos += n;
        }
    });
}

Status instancenorm_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    if (l.inputs[0].elements() == 0) return {};
    if (a.dtype == DType::F16) run_typed<f16>(l, a, pool);
    else run_typed<float>(l, a, pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_instancenorm;
const KernelDef kernel_instancenorm = {"instancenorm", instancenorm_work, instancenorm_cost, instancenorm_run};

}  // namespace loom::device
