// split: the outputs = X cut along one axis into consecutive pieces (ONNX Split). The outputs'
// shapes give the piece sizes: each equals X except along axis, and their dims along axis sum
// to X's. Any dtype, the same for X and every output; one or more outputs.
// Attributes: axis (default 0; -rank <= axis < rank); split (optional list of ints, one per
// output: when given it must equal the outputs' sizes along axis).
// Cost: pure MTE traffic, no Vector pass: X is read in whole rows, each output written in
// contiguous runs of dim(axis) x inner elements, each run costing whole 32-byte blocks.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
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
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < l.outputs.size(); ++i) {
        const TensorRef& y = l.outputs[i];
        bool ok = y.rank == x.rank;
        for (int d = 0; ok && d < y.rank; ++d) ok = d == axis || y.dim(d) == x.dim(d);
        if (!ok)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "output {} is {}, input 0 is {}: they must agree in every dim but axis {}", i,
                              ops::shape_str(y), ops::shape_str(x), axis);
        sizes.push_back(y.dim(axis));
    }
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
    Args a{axis, 1, 1, x.dtype};
    for (int d = 0; d < axis; ++d) a.outer *= x.dim(d);
    for (int d = axis + 1; d < x.rank; ++d) a.inner *= x.dim(d);
    return a;
}

Result<Args> check(const KernelLaunch& l) {
    if (l.outputs.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "split takes at least one output, got 0");
    LOOM_TRY(ops::check_io(l, "split", 1, 1, l.outputs.size()));
    auto a = check_args(l);
    if (!a.ok()) return a.status().with_context("split");
    return a;
}

Result<CycleBreakdown> split_cost(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef& x = l.inputs[0];
    const double b = static_cast<double>(dtype_size(a.dtype));
    double written = 0;  // bytes written per input row, whole blocks
    for (const TensorRef& y : l.outputs) {
        const double run = static_cast<double>(y.dim(a.axis) * a.inner) * b;
        written += run * move::block_factor(run);
    }
    const double row = static_cast<double>(x.dim(a.axis) * a.inner);
    cost::VectorWork w;
    w.elements = x.elements();
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = b;
    w.out_bytes = row > 0 ? written / row : b;
    w.vector_passes = 0;
    w.flops = 0;
    w.ub_buffers = 1;
    return cost::vector_cost(s, w, l.tiling, "split");
}

Status split_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef& x = l.inputs[0];
    const size_t es = dtype_size(a.dtype);
    const int64_t row = x.dim(a.axis) * a.inner;  // elements of one input row (one outer index)
    const int64_t total = a.outer * row;
    if (total == 0) return {};
    // begin[i]: where output i starts within an input row; begin[n] = row.
    const size_t n = l.outputs.size();
    std::vector<int64_t> begin(n + 1, 0);
    std::vector<unsigned char*> dst(n);
    for (size_t i = 0; i < n; ++i) {
        begin[i + 1] = begin[i] + l.outputs[i].dim(a.axis) * a.inner;
        dst[i] = static_cast<unsigned char*>(l.outputs[i].data);
    }
    const auto* src = static_cast<const unsigned char*>(x.data);
    // Each chunk of input elements is a sequence of runs, each into one output's row.
    pool.parallel_for(static_cast<size_t>(total), move::kGrain, [&](size_t b, size_t e) {
        int64_t pos = static_cast<int64_t>(b);
        const int64_t stop = static_cast<int64_t>(e);
        while (pos < stop) {
            const int64_t o = pos / row, r = pos % row;
            const size_t i = static_cast<size_t>(std::upper_bound(begin.begin(), begin.end(), r) - begin.begin()) - 1;
            const int64_t len_i = begin[i + 1] - begin[i];
            const int64_t count = std::min(begin[i + 1] - r, stop - pos);
            std::memcpy(dst[i] + static_cast<size_t>(o * len_i + r - begin[i]) * es, src + static_cast<size_t>(pos) * es,
                        static_cast<size_t>(count) * es);
            pos += count;
        }
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_split;
const KernelDef kernel_split = {"split", split_cost, split_run};

}  // namespace loom::device
