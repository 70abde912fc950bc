// split: the outputs = X cut along one axis into consecutive pieces (ONNX Split). The outputs'
// shapes give the piece sizes: each equals X except along axis, and their dims along axis sum
// to X's. Any dtype, the same for X and every output; one or more outputs.
// Attributes: axis (default 0; -rank <= axis < rank); split (optional list of ints, one per
// output: when given it must equal the outputs' sizes along axis).
// Cost: pure MTE traffic, no Vector pass: X is read in whole rows, each output written in
// contiguous runs of dim(axis) x inner elements, each run costing whole 32-byte blocks.
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
    const TensorRef& x = l.inputs[0];
    LOOM_TRY(l.attrs.check_known({"axis", "split"}));
    LOOM_ASSIGN_OR_RETURN(int64_t axis_attr, l.attrs.get_int("axis", 0));
    if (x.rank == 0) return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is a scalar (rank >= 1 needed)");
    LOOM_ASSIGN_OR_RETURN(int axis, move::normalize_axis(axis_attr, x.rank));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, move::piece_sizes(l.outputs, x, axis, "output"));
    int64_t sum = 0;
    for (int64_t s : sizes) sum += s;
    if (sum != x.dim(axis))
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "outputs' dims along axis {} sum to {} ({}), input 0 has {} ({})", axis, sum,
                          fmt::join(sizes, " + "), x.dim(axis), ops::shape_str(x));
    if (l.attrs.has("split")) {
        LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> split, l.attrs.get_ints("split"));
        if (split != sizes)
            return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'split' = [{}] disagrees with the outputs' [{}]",
                              fmt::join(split, ", "), fmt::join(sizes, ", "));
    }
    return Args{axis, ops::dims_product(x, 0, axis), ops::dims_product(x, axis + 1, x.rank), x.dtype};
}

Result<Args> check(const KernelLaunch& l) {
    if (l.outputs.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "split takes at least one output, got 0");
    return ops::check_launch(l, "split", 1, 1, l.outputs.size(), check_args);
}

Result<KernelWork> split_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    return move::pieces_work(l.inputs[0], l.outputs, a.axis, a.inner, a.dtype, false);
}

Result<CycleBreakdown> split_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(split_work(l, s), l.tiling, s, "split");
}

Status split_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    move::copy_pieces<false>(pool, l.inputs[0], l.outputs, a.axis, a.outer, a.inner);
    return {};
}

}  // namespace

extern const KernelDef kernel_split;
const KernelDef kernel_split = {"split", split_work, split_cost, split_run};

}  // namespace loom::device
