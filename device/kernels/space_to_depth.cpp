// space_to_depth: moves spatial blocks into channels, the inverse of depth_to_space in DCR order
// (ONNX SpaceToDepth). X is N x C x H x W with H and W divisible by b (b = blocksize); Y is
// N x C*b^2 x H/b x W/b, any dtype, the same for both:
//   Y[n, (i*b + j)*C + c, h, w] = X[n, c, h*b + i, w*b + j]
// Attribute: blocksize (required, >= 1).
// Cost: X is read in rows of W elements and Y written in rows of W/b, each run costing whole
// 32-byte blocks; one Vector pass de-interleaves each input row into b output rows in UB.
#include <algorithm>
#include <cstring>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Args {
    int64_t n, c, h, w, b;  // X's dims and the block size
    DType dtype;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"blocksize"}));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    LOOM_ASSIGN_OR_RETURN(int64_t b, l.attrs.get_int("blocksize"));
    if (b < 1) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'blocksize' = {} must be >= 1", b);
    if (x.rank != 4)
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is {}, must be 4-D (N x C x H x W)",
                          ops::shape_str(x));
    if (x.dim(2) % b != 0 || x.dim(3) % b != 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is {}: H and W must be multiples of blocksize {}",
                          ops::shape_str(x), b);
    if (b > 46340) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'blocksize' = {} is too large", b);
    const int64_t want[4] = {x.dim(0), x.dim(1) * b * b, x.dim(2) / b, x.dim(3) / b};
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return Args{x.dim(0), x.dim(1), x.dim(2), x.dim(3), b, x.dtype};
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "space_to_depth", 1, 1, 1, check_args); }

Result<KernelWork> space_to_depth_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = static_cast<double>(dtype_size(a.dtype));
    return move::move_work(l.outputs[0].elements(), a.dtype, b * move::block_factor(static_cast<double>(a.w) * b),
                           b * move::block_factor(static_cast<double>(a.w / a.b) * b), 1, 2);
}

Result<CycleBreakdown> space_to_depth_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(space_to_depth_work(l, s), l.tiling, s, "space_to_depth");
}

template <typename U>
void space_to_depth_rows(const Args& a, const U* x, U* y, ThreadPool& pool) {
    const int64_t b = a.b, oc = a.c * b * b, oh = a.h / b, ow = a.w / b;
    const int64_t rows = a.n * oc * oh;  // output rows (n, (i*b + j)*C + c, h)
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(ow), [&](size_t first, size_t last) {
        for (size_t row = first; row < last; ++row) {
            const int64_t r = static_cast<int64_t>(row);
            const int64_t h = r % oh, k = (r / oh) % oc, n = r / (oh * oc);
            const int64_t blk = k / a.c, c = k % a.c, i = blk / b, j = blk % b;
            const U* src = x + ((n * a.c + c) * a.h + h * b + i) * a.w + j;
            U* dst = y + r * ow;
            for (int64_t w = 0; w < ow; ++w) dst[w] = src[w * b];
        }
    });
}

Status space_to_depth_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (y.elements() == 0) return {};
    move::with_bits(a.dtype, [&](auto bits) {
        using U = decltype(bits);
        space_to_depth_rows<U>(a, x.as<const U>(), y.as<U>(), pool);
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_space_to_depth;
const KernelDef kernel_space_to_depth = {"space_to_depth", space_to_depth_work, space_to_depth_cost,
                                         space_to_depth_run};

}  // namespace loom::device
