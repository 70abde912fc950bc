// gather: Y = X indexed along one axis (ONNX Gather). Inputs: data X (any dtype) and indices
// (i32 or i64, any rank; negative values count from the end of the axis). Y has X's dims before
// axis, then indices' dims, then X's dims after axis, and X's dtype. An index outside
// [-dim, dim) is an error naming its position and value; nothing is written then.
// Attribute: axis (default 0; -rank <= axis < rank).
// Cost: no Vector pass; each index selects a row of `inner` elements (product of X's dims
// after axis) read from GM as one run of whole 32-byte blocks, so gathering single elements
// (inner = 1) reads 32 bytes per element. Each row also reads its index.
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
    int64_t outer, dim, inner, count;  // count = number of indices
    DType dtype;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &idx = l.inputs[1], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"axis"}));
    LOOM_ASSIGN_OR_RETURN(int64_t axis_attr, l.attrs.get_int("axis", 0));
    if (x.rank == 0) return make_error(StatusCode::INVALID_ARGUMENT, "input 0 (data) is a scalar (rank >= 1 needed)");
    LOOM_ASSIGN_OR_RETURN(int axis, move::normalize_axis(axis_attr, x.rank));
    if (idx.dtype != DType::I32 && idx.dtype != DType::I64)
        return make_error(StatusCode::INVALID_ARGUMENT, "input 1 (indices) is {}, must be i32 or i64",
                          dtype_name(idx.dtype));
    if (y.dtype != x.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "output 0 is {}, input 0 (data) is {} (mixed dtypes)",
                          dtype_name(y.dtype), dtype_name(x.dtype));
    std::vector<int64_t> want;
    for (int d = 0; d < axis; ++d) want.push_back(x.dim(d));
    for (int d = 0; d < idx.rank; ++d) want.push_back(idx.dim(d));
    for (int d = axis + 1; d < x.rank; ++d) want.push_back(x.dim(d));
    if (want.size() > static_cast<size_t>(kMaxRank))
        return make_error(StatusCode::INVALID_ARGUMENT, "output rank {} ({} by indices {}) exceeds {}", want.size(),
                          ops::shape_str(x), ops::shape_str(idx), kMaxRank);
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return Args{axis,           ops::dims_product(x, 0, axis),
                x.dim(axis),    ops::dims_product(x, axis + 1, x.rank),
                idx.elements(), x.dtype};
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "gather", 2, 2, 1, check_args); }

Result<KernelWork> gather_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = static_cast<double>(dtype_size(a.dtype));
    const double run = static_cast<double>(a.inner) * b;
    const double index_bytes = static_cast<double>(dtype_size(l.inputs[1].dtype));
    const double in_bytes = b * move::block_factor(run) +
                            index_bytes / static_cast<double>(std::max<int64_t>(a.inner, 1));
    return move::move_work(l.outputs[0].elements(), a.dtype, in_bytes, b, 0, 2);
}

Result<CycleBreakdown> gather_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(gather_work(l, s), l.tiling, s, "gather");
}

template <typename I>
Status read_indices(const TensorRef& t, int64_t dim, std::vector<int64_t>& out) {
    const I* p = t.as<const I>();
    for (size_t k = 0; k < out.size(); ++k) {
        int64_t v = static_cast<int64_t>(p[k]);
        if (v < -dim || v >= dim)
            return make_error(StatusCode::OUT_OF_RANGE,
                              "gather: indices element {} = {} is outside [{}, {}] (axis size {})", k, v, -dim, dim - 1,
                              dim);
        out[k] = v < 0 ? v + dim : v;
    }
    return {};
}

template <typename U>
void gather_rows(const Args& a, const std::vector<int64_t>& index, const U* x, U* y, ThreadPool& pool) {
    const int64_t rows = a.outer * a.count, inner = a.inner;
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(inner), [&](size_t b, size_t e) {
        for (size_t r = b; r < e; ++r) {
            const int64_t o = static_cast<int64_t>(r) / a.count, k = static_cast<int64_t>(r) % a.count;
            const U* src = x + (o * a.dim + index[static_cast<size_t>(k)]) * inner;
            U* dst = y + static_cast<int64_t>(r) * inner;
            if (inner <= 8) {
                for (int64_t i = 0; i < inner; ++i) dst[i] = src[i];
            } else {
                std::memcpy(dst, src, static_cast<size_t>(inner) * sizeof(U));
            }
        }
    });
}

Status gather_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &idx = l.inputs[1], &y = l.outputs[0];
    std::vector<int64_t> index(static_cast<size_t>(a.count));
    LOOM_TRY(idx.dtype == DType::I64 ? read_indices<int64_t>(idx, a.dim, index)
                                     : read_indices<int32_t>(idx, a.dim, index));
    if (y.elements() == 0) return {};
    move::with_bits(a.dtype, [&](auto bits) {
        using U = decltype(bits);
        gather_rows<U>(a, index, x.as<const U>(), y.as<U>(), pool);
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_gather;
const KernelDef kernel_gather = {"gather", gather_work, gather_cost, gather_run};

}  // namespace loom::device
