// concat: Y = the inputs joined along one axis (ONNX Concat). One or more inputs of one dtype
// (any) and rank, equal in every dimension but `axis`; Y's dim `axis` is their sum.
// Attribute: axis (required; -rank <= axis < rank).
// Cost: pure MTE traffic, no Vector pass. Y is written in whole rows; each input is read in
// contiguous runs of dim(axis) x inner elements (inner = product of the dims after axis), and a
// run costs whole 32-byte blocks, so concatenating along an inner axis with short runs reads
// more bytes than it keeps.
#include <vector>

#include "device/kernel.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Args {
    int axis;
    int64_t outer, inner;  // products of the dims before and after axis
    DType dtype;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x0 = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"axis"}));
    LOOM_ASSIGN_OR_RETURN(int64_t axis_attr, l.attrs.get_int("axis"));
    if (x0.rank == 0) return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is a scalar (rank >= 1 needed)");
    LOOM_ASSIGN_OR_RETURN(int axis, move::normalize_axis(axis_attr, x0.rank));
    LOOM_TRY(move::check_dtypes(l, x0.dtype));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, move::piece_sizes(l.inputs, x0, axis, "input"));
    std::vector<int64_t> want = ops::shape_of(x0);
    want[static_cast<size_t>(axis)] = 0;
    for (int64_t n : sizes) want[static_cast<size_t>(axis)] += n;
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return Args{axis, ops::dims_product(x0, 0, axis), ops::dims_product(x0, axis + 1, x0.rank), x0.dtype};
}

Result<Args> check(const KernelLaunch& l) {
    if (l.inputs.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "concat takes at least one input, got 0");
    return ops::check_launch(l, "concat", 1, l.inputs.size(), 1, check_args);
}

Result<KernelWork> concat_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    return move::pieces_work(l.outputs[0], l.inputs, a.axis, a.inner, a.dtype, true);
}

Result<CycleBreakdown> concat_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(concat_work(l, s), l.tiling, s, "concat");
}

Status concat_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    move::copy_pieces<true>(pool, l.outputs[0], l.inputs, a.axis, a.outer, a.inner);
    return {};
}

}  // namespace

extern const KernelDef kernel_concat;
const KernelDef kernel_concat = {"concat", concat_work, concat_cost, concat_run};

}  // namespace loom::device
