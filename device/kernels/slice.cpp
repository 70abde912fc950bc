// slice: Y = X[starts:ends:steps] along the given axes (ONNX Slice). Any dtype, the same for X
// and Y; Y's shape must be the sliced shape.
// Attributes: starts, ends (required, lists of ints of one length); axes (optional; default
// 0, 1, ...; negative values count from the end; no repeats); steps (optional; default 1s; never
// 0; negative walks backwards). ONNX clamping: a negative start or end has dim added; then for a
// positive step start and end are clamped to [0, dim], for a negative step start to [0, dim-1]
// and end to [-1, dim-1] (so INT64_MAX and INT64_MIN mean "to the end").
// Cost: no Vector pass for step 1 along the last axis: contiguous runs of Y's last dim, each
// costing whole 32-byte blocks. Any other last-axis step reads a span |step| times as long (at
// most one 32-byte block per element) and takes one Vector pass to pick the elements in UB.
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Args {
    int rank;
    std::array<int64_t, kMaxRank> start{}, step{}, out{}, in_stride{};
    DType dtype;
};

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"starts", "ends", "axes", "steps"}));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> starts, l.attrs.get_ints("starts"));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> ends, l.attrs.get_ints("ends"));
    std::vector<int64_t> default_axes(starts.size()), default_steps(starts.size(), 1);
    for (size_t i = 0; i < default_axes.size(); ++i) default_axes[i] = static_cast<int64_t>(i);
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, l.attrs.get_ints("axes", default_axes));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> steps, l.attrs.get_ints("steps", default_steps));
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "attributes 'starts', 'ends', 'axes' and 'steps' must have one length, got {}, {}, {}, {}",
                          starts.size(), ends.size(), axes.size(), steps.size());
    Args a;
    a.rank = x.rank;
    a.dtype = x.dtype;
    for (int d = 0; d < x.rank; ++d) {
        a.start[static_cast<size_t>(d)] = 0;
        a.step[static_cast<size_t>(d)] = 1;
        a.out[static_cast<size_t>(d)] = x.dim(d);
    }
    std::array<bool, kMaxRank> seen{};
    for (size_t i = 0; i < starts.size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(int axis, move::normalize_axis(axes[i], x.rank, "axes"));
        const size_t ax = static_cast<size_t>(axis);
        if (seen[ax]) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'axes' names axis {} twice", axis);
        seen[ax] = true;
        const int64_t dim = x.dim(axis), step = steps[i];
        if (step == 0) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'steps' has 0 for axis {}", axis);
        int64_t s = starts[i], e = ends[i];
        if (s < 0) s += dim;  // INT64_MIN + dim does not overflow: dim >= 0
        if (e < 0) e += dim;
        int64_t len = 0;
        if (dim == 0) {
            s = 0;
        } else if (step > 0) {
            s = std::clamp<int64_t>(s, 0, dim);
            e = std::clamp<int64_t>(e, 0, dim);
            if (e > s) len = 1 + (e - s - 1) / step;
        } else {
            s = std::clamp<int64_t>(s, 0, dim - 1);
            e = std::clamp<int64_t>(e, -1, dim - 1);
            if (s > e) len = step == std::numeric_limits<int64_t>::min() ? 1 : 1 + (s - e - 1) / -step;
        }
        a.start[ax] = s;
        a.step[ax] = len > 1 ? step : 1;  // |step| <= dim when two or more elements are taken: no overflow
        a.out[ax] = len;
    }
    LOOM_TRY(move::check_shape(y, std::span<const int64_t>(a.out.data(), static_cast<size_t>(a.rank)), "output 0"));
    int64_t stride = 1;
    for (int d = x.rank - 1; d >= 0; --d) {
        a.in_stride[static_cast<size_t>(d)] = stride;
        stride *= x.dim(d);
    }
    return a;
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "slice", 1, 1, 1, check_args); }

Result<KernelWork> slice_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = static_cast<double>(dtype_size(a.dtype));
    const int64_t n = l.outputs[0].elements();
    const int64_t last_step = a.rank ? a.step[static_cast<size_t>(a.rank - 1)] : 1;
    const double last_len = a.rank ? static_cast<double>(a.out[static_cast<size_t>(a.rank - 1)]) : 1.0;
    if (last_step == 1) return move::move_work(n, a.dtype, b * move::block_factor(last_len * b), b, 0, 2);
    const double span = static_cast<double>(last_step < 0 ? -last_step : last_step);
    return move::move_work(n, a.dtype, std::min(span * b, 32.0) * move::block_factor(last_len * span * b), b, 1, 2);
}

Result<CycleBreakdown> slice_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(slice_work(l, s), l.tiling, s, "slice");
}

template <typename U>
void slice_rows(const Args& a, const U* x, U* y, ThreadPool& pool) {
    const int r = a.rank;
    const int64_t last = r ? a.out[static_cast<size_t>(r - 1)] : 1;
    const int64_t step = r ? a.step[static_cast<size_t>(r - 1)] : 1;
    int64_t rows = 1;
    for (int d = 0; d + 1 < r; ++d) rows *= a.out[static_cast<size_t>(d)];
    int64_t base0 = 0;  // input offset of output element 0
    for (int d = 0; d < r; ++d) base0 += a.start[static_cast<size_t>(d)] * a.in_stride[static_cast<size_t>(d)];
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(last), [&](size_t b, size_t e) {
        // Multi-index of row b over the leading r-1 output dims, then odometer steps.
        std::array<int64_t, kMaxRank> idx{};
        int64_t rest = static_cast<int64_t>(b), off = base0;
        for (int d = r - 2; d >= 0; --d) {
            const size_t du = static_cast<size_t>(d);
            idx[du] = rest % a.out[du];
            rest /= a.out[du];
            off += idx[du] * a.step[du] * a.in_stride[du];
        }
        for (size_t row = b; row < e; ++row) {
            U* dst = y + static_cast<int64_t>(row) * last;
            const U* src = x + off;
            if (step == 1) std::memcpy(dst, src, static_cast<size_t>(last) * sizeof(U));
            else
                for (int64_t j = 0; j < last; ++j) dst[j] = src[j * step];
            for (int d = r - 2; d >= 0; --d) {
                const size_t du = static_cast<size_t>(d);
                off += a.step[du] * a.in_stride[du];
                if (++idx[du] < a.out[du]) break;
                off -= a.out[du] * a.step[du] * a.in_stride[du];
                idx[du] = 0;
            }
        }
    });
}

Status slice_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (y.elements() == 0) return {};
    move::with_bits(a.dtype, [&](auto bits) {
        using U = decltype(bits);
        slice_rows<U>(a, x.as<const U>(), y.as<U>(), pool);
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_slice;
const KernelDef kernel_slice = {"slice", slice_work, slice_cost, slice_run};

}  // namespace loom::device
