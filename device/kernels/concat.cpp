// concat: Y = the inputs joined along one axis (ONNX Concat). One or more inputs of one dtype
// (any) and rank, equal in every dimension but `axis`; Y's dim `axis` is their sum.
// Attribute: axis (required; -rank <= axis < rank).
// Cost: pure MTE traffic, no Vector pass. Y is written in whole rows; each input is read in
// contiguous runs of dim(axis) x inner elements (inner = product of the dims after axis), and a
// run costs whole 32-byte blocks, so concatenating along an inner axis with short runs reads
// more bytes than it keeps.
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
    const TensorRef &x0 = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"axis"}));
    LOOM_ASSIGN_OR_RETURN(int64_t axis_attr, l.attrs.get_int("axis"));
    if (x0.rank == 0) return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is a scalar (rank >= 1 needed)");
    LOOM_ASSIGN_OR_RETURN(int axis, move::normalize_axis(axis_attr, x0.rank));
    LOOM_TRY(move::check_dtypes(l, x0.dtype));
    std::vector<int64_t> want = ops::shape_of(x0);
    want[static_cast<size_t>(axis)] = 0;
    for (size_t i = 0; i < l.inputs.size(); ++i) {
        const TensorRef& x = l.inputs[i];
        bool ok = x.rank == x0.rank;
        for (int d = 0; ok && d < x.rank; ++d) ok = d == axis || x.dim(d) == x0.dim(d);
        if (!ok)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "input {} is {}, input 0 is {}: they must agree in every dim but axis {}", i,
                              ops::shape_str(x), ops::shape_str(x0), axis);
        want[static_cast<size_t>(axis)] += x.dim(axis);
    }
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    Args a{axis, 1, 1, x0.dtype};
    for (int d = 0; d < axis; ++d) a.outer *= x0.dim(d);
    for (int d = axis + 1; d < x0.rank; ++d) a.inner *= x0.dim(d);
    return a;
}

Result<Args> check(const KernelLaunch& l) {
    if (l.inputs.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "concat takes at least one input, got 0");
    LOOM_TRY(ops::check_io(l, "concat", 1, l.inputs.size(), 1));
    auto a = check_args(l);
    if (!a.ok()) return a.status().with_context("concat");
    return a;
}

Result<CycleBreakdown> concat_cost(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef& y = l.outputs[0];
    const double b = static_cast<double>(dtype_size(a.dtype));
    double read = 0;  // bytes read per output row, whole blocks
    for (const TensorRef& x : l.inputs) {
        const double run = static_cast<double>(x.dim(a.axis) * a.inner) * b;
        read += run * move::block_factor(run);
    }
    const double row = static_cast<double>(y.dim(a.axis) * a.inner);
    cost::VectorWork w;
    w.elements = y.elements();
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = row > 0 ? read / row : b;
    w.out_bytes = b;
    w.vector_passes = 0;
    w.flops = 0;
    w.ub_buffers = 1;
    return cost::vector_cost(s, w, l.tiling, "concat");
}

Status concat_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef& y = l.outputs[0];
    const size_t es = dtype_size(a.dtype);
    const int64_t row = y.dim(a.axis) * a.inner;  // elements of one output row (one outer index)
    const int64_t total = a.outer * row;
    if (total == 0) return {};
    // begin[i]: where input i starts within an output row; begin[n] = row.
    const size_t n = l.inputs.size();
    std::vector<int64_t> begin(n + 1, 0);
    std::vector<const unsigned char*> src(n);
    for (size_t i = 0; i < n; ++i) {
        begin[i + 1] = begin[i] + l.inputs[i].dim(a.axis) * a.inner;
        src[i] = static_cast<const unsigned char*>(l.inputs[i].data);
    }
    auto* dst = static_cast<unsigned char*>(y.data);
    // Each chunk of output elements is a sequence of runs, each from one input's row.
    pool.parallel_for(static_cast<size_t>(total), move::kGrain, [&](size_t b, size_t e) {
        int64_t pos = static_cast<int64_t>(b);
        const int64_t stop = static_cast<int64_t>(e);
        while (pos < stop) {
            const int64_t o = pos / row, r = pos % row;
            // The last input starting at or before r; empty inputs share their begin with the next.
            const size_t i = static_cast<size_t>(std::upper_bound(begin.begin(), begin.end(), r) - begin.begin()) - 1;
            const int64_t len_i = begin[i + 1] - begin[i];
            const int64_t count = std::min(begin[i + 1] - r, stop - pos);
            std::memcpy(dst + static_cast<size_t>(pos) * es, src[i] + static_cast<size_t>(o * len_i + r - begin[i]) * es,
                        static_cast<size_t>(count) * es);
            pos += count;
        }
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_concat;
const KernelDef kernel_concat = {"concat", concat_cost, concat_run};

}  // namespace loom::device
