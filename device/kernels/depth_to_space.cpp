// depth_to_space: moves channel blocks into spatial blocks (ONNX DepthToSpace; with mode CRD it
// is PyTorch's PixelShuffle). X is N x C x H x W with C divisible by b^2 (b = blocksize); Y is
// N x C/b^2 x H*b x W*b, any dtype, the same for both. With C' = C / b^2,
//   DCR: Y[n, c, h*b+i, w*b+j] = X[n, (i*b + j)*C' + c, h, w]
//   CRD: Y[n, c, h*b+i, w*b+j] = X[n, c*b^2 + i*b + j, h, w]
// Attributes: blocksize (required, >= 1); mode = "DCR" (default) or "CRD".
// Optional input R (the compiler's fusion of an Add after a PixelShuffle, e.g. the upsampled
// skip of an SR network): Y = depth_to_space(X) + R, R of Y's shape; f32 or f16 only (f16
// added in fp32, rounded once).
// Cost: X is read in rows of W elements and Y written in rows of W*b, each run costing whole
// 32-byte blocks; one Vector pass interleaves b input rows into each output row in UB; with R,
// R is read once more and one more Vector pass adds it (two more for f16: widen, narrow).
#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Args {
    int64_t n, c, h, w, b;  // X's dims and the block size
    bool crd;
    bool residual;  // R given
    DType dtype;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"blocksize", "mode"}));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    const bool residual = l.inputs.size() > 1 && l.inputs[1].elements() > 0;
    if (residual && !ops::is_float(x.dtype))
        return make_error(StatusCode::UNSUPPORTED, "residual R with dtype {} (f32 or f16)", dtype_name(x.dtype));
    LOOM_ASSIGN_OR_RETURN(int64_t b, l.attrs.get_int("blocksize"));
    LOOM_ASSIGN_OR_RETURN(std::string mode, l.attrs.get_string("mode", "DCR"));
    if (b < 1) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'blocksize' = {} must be >= 1", b);
    if (mode != "DCR" && mode != "CRD")
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'mode' = '{}' (DCR or CRD)", mode);
    if (x.rank != 4)
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is {}, must be 4-D (N x C x H x W)",
                          ops::shape_str(x));
    if (b > 46340 || x.dim(1) % (b * b) != 0)  // 46340^2 < 2^31: b*b stays far from overflow
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 has {} channels, not a multiple of blocksize^2 = {}^2",
                          x.dim(1), b);
    const int64_t want[4] = {x.dim(0), x.dim(1) / (b * b), x.dim(2) * b, x.dim(3) * b};
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    if (residual) LOOM_TRY(move::check_shape(l.inputs[1], want, "residual R"));
    return Args{x.dim(0), x.dim(1), x.dim(2), x.dim(3), b, mode == "CRD", residual, x.dtype};
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "depth_to_space", 1, 2, 1, check_args); }

Result<KernelWork> depth_to_space_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = static_cast<double>(dtype_size(a.dtype));
    const double out_row = b * move::block_factor(static_cast<double>(a.w * a.b) * b);
    // R streams in output rows, like Y; its add is one pass (f16: widen both, add, narrow).
    const double passes = a.residual ? (a.dtype == DType::F16 ? 4 : 2) : 1;
    return move::move_work(l.outputs[0].elements(), a.dtype,
                           b * move::block_factor(static_cast<double>(a.w) * b) + (a.residual ? out_row : 0), out_row,
                           passes, a.residual ? 3 : 2);
}

Result<CycleBreakdown> depth_to_space_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(depth_to_space_work(l, s), l.tiling, s, "depth_to_space");
}

// Adds the residual row `r` to the assembled output row `dst` (float bits: f32 in uint32_t,
// f16 in uint16_t, as with_bits hands them out), while the row is in cache.
template <typename U>
void add_row(U* dst, const U* r, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        if constexpr (sizeof(U) == 4)
            dst[i] = std::bit_cast<U>(std::bit_cast<float>(dst[i]) + std::bit_cast<float>(r[i]));
        else dst[i] = f32_to_f16(f16_to_f32(f16{dst[i]}) + f16_to_f32(f16{r[i]})).bits;
    }
}

template <typename U>
void depth_to_space_rows(const Args& a, const U* x, U* y, const U* res, ThreadPool& pool) {
    const int64_t b = a.b, cb = a.c / (b * b), ow = a.w * b;
    const int64_t rows = a.n * cb * a.h * b;  // output rows (n, c, h*b + i)
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(ow), [&](size_t first, size_t last) {
        for (size_t row = first; row < last; ++row) {
            const int64_t r = static_cast<int64_t>(row);
            const int64_t i = r % b, h = (r / b) % a.h, c = (r / (b * a.h)) % cb, n = r / (b * a.h * cb);
            U* dst = y + r * ow;
            for (int64_t j = 0; j < b; ++j) {
                const int64_t ch = a.crd ? c * b * b + i * b + j : (i * b + j) * cb + c;
                const U* src = x + ((n * a.c + ch) * a.h + h) * a.w;
                for (int64_t w = 0; w < a.w; ++w) dst[w * b + j] = src[w];
            }
            if constexpr (sizeof(U) == 4 || sizeof(U) == 2) {
                if (res) add_row(dst, res + r * ow, ow);
            }
        }
    });
}

Status depth_to_space_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (y.elements() == 0) return {};
    move::with_bits(a.dtype, [&](auto bits) {
        using U = decltype(bits);
        const U* r = a.residual ? l.inputs[1].as<const U>() : nullptr;
        depth_to_space_rows<U>(a, x.as<const U>(), y.as<U>(), r, pool);
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_depth_to_space;
const KernelDef kernel_depth_to_space = {"depth_to_space", depth_to_space_work, depth_to_space_cost,
                                         depth_to_space_run};

}  // namespace loom::device
