// batchnorm: inference BatchNormalization, Y = (X - mean) / sqrt(var + epsilon) * scale + B per
// channel. Inputs X [N, C, ...] (rank >= 2, channel axis 1), scale, B, mean, var (each [C]).
// Output Y of X's shape and dtype; may be X itself.
// Attributes: epsilon (default 1e-5); momentum (accepted and ignored: it only matters in
// training); training_mode (0 only).
// Dtypes: X and Y f32 or f16 (computed in fp32, rounded once); each of the four [C] inputs f32
// or f16 on its own. The per-channel factor and offset are folded in float64, then applied as
// Y = X * a + b in fp32. var + epsilon < 0 gives NaN, as in IEEE arithmetic.
// Tiling: VectorSchedule (default: vector_cost's heuristic).
#include <cmath>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/elementwise.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

using ops::shape_str;

struct Args {
    int64_t c, plane;  // channels, elements per (n, c) plane
    double epsilon;
    DType dtype;
};

Result<Args> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "batchnorm", 5, 5, 1));
    LOOM_TRY(l.attrs.check_known({"epsilon", "momentum", "training_mode"}).with_context("batchnorm"));
    auto eps = l.attrs.get_float("epsilon", 1e-5);
    if (!eps.ok()) return eps.status().with_context("batchnorm");
    auto momentum = l.attrs.get_float("momentum", 0.9);
    if (!momentum.ok()) return momentum.status().with_context("batchnorm");
    auto training = l.attrs.get_int("training_mode", 0);
    if (!training.ok()) return training.status().with_context("batchnorm");
    if (*training != 0)
        return make_error(StatusCode::UNSUPPORTED, "batchnorm: training_mode = {} (inference only: 0)", *training);
    if (!std::isfinite(*eps))
        return make_error(StatusCode::INVALID_ARGUMENT, "batchnorm: epsilon = {} must be finite", *eps);
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (!ops::is_float(x.dtype))
        return make_error(StatusCode::UNSUPPORTED, "batchnorm: X dtype {} (f32 and f16 are supported)",
                          dtype_name(x.dtype));
    if (y.dtype != x.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "batchnorm: mixed dtypes (X {}, Y {})", dtype_name(x.dtype),
                          dtype_name(y.dtype));
    if (x.rank < 2)
        return make_error(StatusCode::INVALID_ARGUMENT, "batchnorm: X is {} (rank >= 2 needed, channels on axis 1)",
                          shape_str(x));
    if (!ops::same_shape(x, y))
        return make_error(StatusCode::INVALID_ARGUMENT, "batchnorm: output Y is {}, want X's shape {}", shape_str(y),
                          shape_str(x));
    Args a{x.dim(1), ops::dims_product(x, 2, x.rank), *eps, x.dtype};
    LOOM_TRY(ops::check_channel_vectors(l, "batchnorm", {"scale", "B", "mean", "var"}, a.c));
    return a;
}

// Reads X and writes Y once (the four [C] vectors are folded into a factor and an offset by the
// scalar unit and stay in UB: their bytes are spread over the elements). Vector passes: multiply
// and add with a per-channel scalar, 2; +2 for f16.
Result<KernelWork> batchnorm_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const int64_t n = l.inputs[0].elements();
    const double size = static_cast<double>(dtype_size(a.dtype));
    double params = 0;
    for (size_t i = 1; i < 5; ++i) params += static_cast<double>(l.inputs[i].bytes());
    cost::VectorWork w;
    w.elements = n;
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = size + (n > 0 ? params / static_cast<double>(n) : 0);
    w.out_bytes = size;
    w.vector_passes = 2 + (a.dtype == DType::F16 ? 2 : 0);
    w.flops = 2;
    w.ub_buffers = 2;
    w.fusable_in_bytes = size;
    w.fusable_out = true;
    w.in_place_ok = true;
    return cost::vector_work(w);
}

Result<CycleBreakdown> batchnorm_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(batchnorm_work(l, s), l.tiling, s, "batchnorm");
}

// For the elements [begin, end) of x viewed as planes of `plane` elements: y = x * a[c] + b[c]
// with c = plane index % m (m = C). x and y may be equal.
// Planes of one element (rank 2, or 1x1 spatial) run along the coefficients instead.
template <typename T>
void affine_planes(const T* x, T* y, const float* a, const float* b, int64_t m, int64_t plane, int64_t begin,
                   int64_t end) {
    float buf[ops::kBlock];
    auto run = [&](const T* xs, T* ys, int64_t n, auto&& f) {  // f(v, j) with v fp32, j = 0 .. n-1
        if constexpr (std::is_same_v<T, f16>) {
            for (int64_t j0 = 0; j0 < n; j0 += ops::kBlock) {
                const int64_t k = std::min(ops::kBlock, n - j0);
                ops::load_block(xs + j0, 1, buf, k);
                for (int64_t j = 0; j < k; ++j) buf[j] = f(buf[j], j0 + j);
                ops::store_block(buf, ys + j0, k);
            }
        } else {
            for (int64_t j = 0; j < n; ++j) ys[j] = f(xs[j], j);
        }
    };
    if (plane == 1) {
        for (int64_t pos = begin; pos < end;) {
            const int64_t c0 = pos % m, n = std::min(m - c0, end - pos);
            const float* ac = a + c0;
            const float* bc = b + c0;
            run(x + pos, y + pos, n, [&](float v, int64_t j) { return v * ac[j] + bc[j]; });
            pos += n;
        }
        return;
    }
    for (int64_t pos = begin; pos < end;) {
        const int64_t p = pos / plane, n = std::min(plane - pos % plane, end - pos);
        const float av = a[p % m], bv = b[p % m];
        run(x + pos, y + pos, n, [&](float v, int64_t) { return v * av + bv; });
        pos += n;
    }
}

template <typename T>
void run_typed(const KernelLaunch& l, const Args& a, const std::vector<float>& fa, const std::vector<float>& fb,
               ThreadPool& pool) {
    const T* x = l.inputs[0].as<const T>();
    T* y = l.outputs[0].as<T>();
    pool.parallel_for(static_cast<size_t>(l.inputs[0].elements()), ops::kElementGrain, [&](size_t b, size_t e) {
        affine_planes(x, y, fa.data(), fb.data(), a.c, a.plane, static_cast<int64_t>(b), static_cast<int64_t>(e));
    });
}

Status batchnorm_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    if (l.inputs[0].elements() == 0) return {};
    std::vector<float> fa(static_cast<size_t>(a.c)), fb(fa.size());
    const TensorRef &scale = l.inputs[1], &bias = l.inputs[2], &mean = l.inputs[3], &var = l.inputs[4];
    for (int64_t c = 0; c < a.c; ++c) {
        const double v = ops::load_f(var.data, var.dtype, c);
        const double f = ops::load_f(scale.data, scale.dtype, c) / std::sqrt(v + a.epsilon);
        fa[static_cast<size_t>(c)] = static_cast<float>(f);
        fb[static_cast<size_t>(c)] = static_cast<float>(ops::load_f(bias.data, bias.dtype, c) -
                                                        ops::load_f(mean.data, mean.dtype, c) * f);
    }
    if (a.dtype == DType::F16) run_typed<f16>(l, a, fa, fb, pool);
    else run_typed<float>(l, a, fa, fb, pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_batchnorm;
const KernelDef kernel_batchnorm = {"batchnorm", batchnorm_work, batchnorm_cost, batchnorm_run};

}  // namespace loom::device
