// depth_to_space: moves channel blocks into spatial blocks (ONNX DepthToSpace; with mode CRD it
// is PyTorch's PixelShuffle). X is N x C x H x W with C divisible by b^2 (b = blocksize); Y is
// N x C/b^2 x H*b x W*b, any dtype, the same for both. With C' = C / b^2,
//   DCR: Y[n, c, h*b+i, w*b+j] = X[n, (i*b + j)*C' + c, h, w]
//   CRD: Y[n, c, h*b+i, w*b+j] = X[n, c*b^2 + i*b + j, h, w]
// Attributes: blocksize (required, >= 1); mode = "DCR" (default) or "CRD".
// Cost: X is read in rows of W elements and Y written in rows of W*b, each run costing whole
// 32-byte blocks; one Vector pass interleaves b input rows into each output row in UB.
#include <algorithm>
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
    DType dtype;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"blocksize", "mode"}));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    LOOM_ASSIGN_OR_RETURN(int64_t b, l.attrs.get_int("blocksize"));
    LOOM_ASSIGN_OR_RETURN(std::string mode, l.attrs.get_string("mode", "DCR"));
    if (b < 1) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'blocksize' = {} must be >= 1", b);
    if (mode != "DCR" && mode != "CRD")
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'mode' = '{}' (DCR or CRD)", mode);
    if (x.rank != 4)
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is {}, must be 4-D (N x C x H x W)", ops::shape_str(x));
    if (b > 46340 || x.dim(1) % (b * b) != 0)  // 46340^2 < 2^31: b*b stays far from overflow
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 has {} channels, not a multiple of blocksize^2 = {}^2",
                          x.dim(1), b);
    const int64_t want[4] = {x.dim(0), x.dim(1) / (b * b), x.dim(2) * b, x.dim(3) * b};
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return Args{x.dim(0), x.dim(1), x.dim(2), x.dim(3), b, mode == "CRD", x.dtype};
}

Result<Args> check(const KernelLaunch& l) {
    return ops::check_launch(l, "depth_to_space", 1, 1, 1, check_args);
}

Result<CycleBreakdown> depth_to_space_cost(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = static_cast<double>(dtype_size(a.dtype));
    return move::move_cost(s, l.tiling, "depth_to_space", l.outputs[0].elements(), a.dtype,
                           b * move::block_factor(static_cast<double>(a.w) * b),
                           b * move::block_factor(static_cast<double>(a.w * a.b) * b), 1, 2);
}

template <typename U>
void depth_to_space_rows(const Args& a, const U* x, U* y, ThreadPool& pool) {
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
        }
    });
}

Status depth_to_space_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (y.elements() == 0) return {};
    move::with_bits(a.dtype, [&](auto bits) {
        using U = decltype(bits);
        depth_to_space_rows<U>(a, x.as<const U>(), y.as<U>(), pool);
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_depth_to_space;
const KernelDef kernel_depth_to_space = {"depth_to_space", depth_to_space_cost, depth_to_space_run};

}  // namespace loom::device
