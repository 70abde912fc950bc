// reshape: Y = X under a new shape with as many elements; the bytes are copied unchanged. ONNX
// Reshape, Flatten, Squeeze, Unsqueeze and Identity all lower to this kernel (the graph compiler
// resolves the target shape; the kernel only checks that the element counts agree).
// Input X, output Y: any dtype, the same for both. No attributes. When Y is X (same address),
// nothing moves.
// Cost: pure MTE traffic, GM -> UB -> GM: one read and one write per element, no Vector pass,
// one UB buffer per tile. In place, only the kernel's scalar set-up is charged.
#include <cstring>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Args {
    int64_t n;
    DType dtype;
    bool in_place;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({}));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    if (x.elements() != y.elements())
        return make_error(StatusCode::INVALID_ARGUMENT, "output 0 is {} ({} elements), input 0 is {} ({} elements)",
                          ops::shape_str(y), y.elements(), ops::shape_str(x), x.elements());
    const bool same = (x.data && x.data == y.data) || (x.device_addr && x.device_addr == y.device_addr);
    return Args{x.elements(), x.dtype, same};
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "reshape", 1, 1, 1, check_args); }

Result<KernelWork> reshape_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = a.in_place ? 0 : static_cast<double>(dtype_size(a.dtype));
    return move::move_work(a.n, a.dtype, b, b, 0, 1);
}

Result<CycleBreakdown> reshape_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(reshape_work(l, s), l.tiling, s, "reshape");
}

Status reshape_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (a.in_place || a.n == 0) return {};
    const size_t bytes = x.bytes();
    const auto* src = static_cast<const unsigned char*>(x.data);
    auto* dst = static_cast<unsigned char*>(y.data);
    if (src < dst + bytes && dst < src + bytes) {  // overlapping views of one buffer
        std::memmove(dst, src, bytes);
        return {};
    }
    const size_t grain = move::kGrain * dtype_size(a.dtype);
    pool.parallel_for(bytes, grain, [&](size_t b, size_t e) { std::memcpy(dst + b, src + b, e - b); });
    return {};
}

}  // namespace

extern const KernelDef kernel_reshape;
const KernelDef kernel_reshape = {"reshape", reshape_work, reshape_cost, reshape_run};

}  // namespace loom::device
