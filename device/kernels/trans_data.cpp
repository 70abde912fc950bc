// trans_data: Ascend's TransData between the host-facing NCHW layout and NC1HWC0 ("5HD"), the
// layout the Cube ops read and write on the device: channels in blocks of C0 = 16 (the Cube's
// fractal depth), the last block zero-padded, each pixel's C0 channels contiguous.
// Input X, output Y: the same logical [N, C, H, W] tensor, any dtype, the same for both.
// Attributes: src and dst, "NCHW" or "NC1HWC0", different from each other.
// Functional data: Loom's functional execution keeps every tensor in logical NCHW order (as it
// keeps Cube operands out of fractal order), so the host work is the values' copy; the layout is
// the simulated device's, and so is the cost below. The compiler's memory plan sizes 5HD tensors
// with their padded channels.
// Cost: the 5HD side holds N x C1 x H x W x C0 elements (C1 = ceil(C / 16)); the NCHW side moves
// in runs of W elements, the 5HD side in runs of C0 elements; two Vector passes over the padded
// size transpose 16 x 16 blocks in UB (as transpose does), and the padding is written (to 5HD) or
// skipped (from 5HD).
#include <string>

#include "common/buffer.hpp"
#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

constexpr int64_t kC0 = 16;

struct Args {
    int64_t n, c, h, w;
    bool to_5hd;
    DType dtype;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"src", "dst"}));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    LOOM_ASSIGN_OR_RETURN(std::string src, l.attrs.get_string("src"));
    LOOM_ASSIGN_OR_RETURN(std::string dst, l.attrs.get_string("dst"));
    const bool known = (src == "NCHW" || src == "NC1HWC0") && (dst == "NCHW" || dst == "NC1HWC0");
    if (!known || src == dst)
        return make_error(StatusCode::INVALID_ARGUMENT, "src '{}' and dst '{}' must be NCHW and NC1HWC0, one each", src,
                          dst);
    if (x.rank != 4)
        return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is {}, must be 4-D (N x C x H x W)",
                          ops::shape_str(x));
    LOOM_TRY(move::check_shape(y, std::span<const int64_t>(x.dims.data(), 4), "output 0"));
    return Args{x.dim(0), x.dim(1), x.dim(2), x.dim(3), dst == "NC1HWC0", x.dtype};
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "trans_data", 1, 1, 1, check_args); }

Result<KernelWork> trans_data_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = static_cast<double>(dtype_size(a.dtype));
    const int64_t c_pad = (a.c + kC0 - 1) / kC0 * kC0;
    const int64_t padded = a.n * c_pad * a.h * a.w;
    // Per padded element: the NCHW side moves the real fraction of it in rows of W, the 5HD
    // side all of it in runs of C0.
    const double real = a.c ? static_cast<double>(a.c) / static_cast<double>(c_pad) : 0.0;
    const double nchw = b * real * move::block_factor(static_cast<double>(a.w) * b);
    const double hd = b * move::block_factor(static_cast<double>(kC0) * b);
    return move::move_work(padded, a.dtype, a.to_5hd ? nchw : hd, a.to_5hd ? hd : nchw, 2, 2);
}

Result<CycleBreakdown> trans_data_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(trans_data_work(l, s), l.tiling, s, "trans_data");
}

Status trans_data_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_TRY(check(l).status());
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    const size_t bytes = x.bytes();
    if (bytes == 0 || x.data == y.data) return {};
    copy_buffer(y.data, x.data, bytes, pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_trans_data;
const KernelDef kernel_trans_data = {"trans_data", trans_data_work, trans_data_cost, trans_data_run};

}  // namespace loom::device
