// shape: Y = the dimensions of X as a 1-D i64 tensor (ONNX Shape, opset 15). X may have any dtype
// and rank; its data is not read.
// Attributes: start (default 0) and end (default rank): Y holds dims [start, end). Negative
// values count from the end; both are clamped to [0, rank]; start >= end gives an empty Y.
// Cost: no input traffic, 8 bytes written per output element, no Vector pass: in practice the
// kernel's scalar set-up.
#include <algorithm>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Args {
    int64_t start, len;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"start", "end"}));
    const int64_t r = x.rank;
    LOOM_ASSIGN_OR_RETURN(int64_t start, l.attrs.get_int("start", 0));
    LOOM_ASSIGN_OR_RETURN(int64_t end, l.attrs.get_int("end", r));
    auto clamp = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
    start = clamp(start);
    end = clamp(end);
    const int64_t len = std::max<int64_t>(0, end - start);
    if (y.dtype != DType::I64)
        return make_error(StatusCode::INVALID_ARGUMENT, "output 0 is {}, must be i64", dtype_name(y.dtype));
    const int64_t want[1] = {len};
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return Args{start, len};
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "shape", 1, 1, 1, check_args); }

Result<KernelWork> shape_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    return move::move_work(a.len, DType::I64, 0, 8, 0, 1);
}

Result<CycleBreakdown> shape_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(shape_work(l, s), l.tiling, s, "shape");
}

Status shape_run(const KernelLaunch& l, ThreadPool&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    auto* out = y.as<int64_t>();
    for (int64_t i = 0; i < a.len; ++i) out[i] = x.dim(static_cast<int>(a.start + i));
    return {};
}

}  // namespace

extern const KernelDef kernel_shape;
const KernelDef kernel_shape = {"shape", shape_work, shape_cost, shape_run};

}  // namespace loom::device
