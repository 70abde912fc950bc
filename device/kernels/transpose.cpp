// transpose: Y = X with its axes permuted, Y.dim(i) = X.dim(perm[i]) (ONNX Transpose). Any
// dtype, the same for X and Y.
// Attribute: perm (default: the axes reversed), a permutation of 0 .. rank-1.
// Run: size-1 axes are dropped and axes that stay adjacent are merged first, so NCHW <-> NHWC
// become batched 2-D transposes. When Y's last axis is contiguous in X, rows are copied whole;
// otherwise 32 x 32 tiles between X's contiguous axis and Y's are transposed in cache.
// Cost: a row copy is pure MTE traffic with no Vector pass, runs costing whole 32-byte blocks.
// A true transpose is a Vector schedule over Y as outer x axis x inner, where the axis is X's
// contiguous one and inner the Y dims after it (contiguous in Y, strided in X): the tile's runs
// along X's contiguous axis are read and its runs along Y's written in whole 32-byte blocks, and
// the side whose contiguous axis is not the vectorised one takes two Vector passes (the
// transposing copy on 16 x 16 blocks in UB) into a second tile (docs/device-model.md 5).
#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

// The permutation after dropping size-1 axes and merging axes that stay adjacent: Y is dense
// over dims, and Y's axis i reads X with stride in_stride[i].
struct Plan {
    int rank = 0;
    std::array<int64_t, kMaxRank> dims{}, in_stride{};
};

struct Args {
    std::array<int, kMaxRank> perm{};
    DType dtype;
    Plan plan;
};

Plan make_plan(const TensorRef& x, const std::array<int, kMaxRank>& perm) {
    std::array<int64_t, kMaxRank> stride{};
    int64_t s = 1;
    for (int d = x.rank - 1; d >= 0; --d) {
        stride[static_cast<size_t>(d)] = s;
        s *= x.dim(d);
    }
    Plan p;
    for (int i = 0; i < x.rank; ++i) {
        const int a = perm[static_cast<size_t>(i)];
        const int64_t dim = x.dim(a), st = stride[static_cast<size_t>(a)];
        if (dim == 1) continue;
        if (p.rank > 0) {
            const size_t last = static_cast<size_t>(p.rank - 1);
            if (p.in_stride[last] == st * dim) {  // adjacent in X as in Y: one axis
                p.dims[last] *= dim;
                p.in_stride[last] = st;
                continue;
            }
        }
        p.dims[static_cast<size_t>(p.rank)] = dim;
        p.in_stride[static_cast<size_t>(p.rank)] = st;
        ++p.rank;
    }
    return p;
}

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"perm"}));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    std::vector<int64_t> reversed(static_cast<size_t>(x.rank));
    for (int i = 0; i < x.rank; ++i) reversed[static_cast<size_t>(i)] = x.rank - 1 - i;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, l.attrs.get_ints("perm", reversed));
    std::array<bool, kMaxRank> seen{};
    bool ok = perm.size() == static_cast<size_t>(x.rank);
    for (size_t i = 0; ok && i < perm.size(); ++i) {
        ok = perm[i] >= 0 && perm[i] < x.rank && !seen[static_cast<size_t>(perm[i])];
        if (ok) seen[static_cast<size_t>(perm[i])] = true;
    }
    if (!ok)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'perm' = [{}] is not a permutation of 0..{}",
                          fmt::join(perm, ", "), x.rank - 1);
    Args a;
    a.dtype = x.dtype;
    std::vector<int64_t> want(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) {
        a.perm[i] = static_cast<int>(perm[i]);
        want[i] = x.dim(a.perm[i]);
    }
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    a.plan = make_plan(x, a.perm);
    return a;
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "transpose", 1, 1, 1, check_args); }

Result<KernelWork> transpose_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const Plan& p = a.plan;
    const double b = static_cast<double>(dtype_size(a.dtype));
    const int64_t n = l.outputs[0].elements();
    const size_t last = static_cast<size_t>(std::max(p.rank - 1, 0));
    if (p.rank <= 1 || p.in_stride[last] == 1) {
        const double run = (p.rank ? static_cast<double>(p.dims[last]) : 1.0) * b;
        return move::move_work(n, a.dtype, b * move::block_factor(run), b * move::block_factor(run), 0, 2);
    }
    int in_axis = 0;  // X's contiguous axis in the plan
    for (int i = 0; i < p.rank; ++i)
        if (p.in_stride[static_cast<size_t>(i)] == 1) in_axis = i;
    cost::VectorWork w;
    w.elements = n;
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = b;
    w.out_bytes = b;
    w.vector_passes = 0;  // the transposing copy is the schedule's (kTransposePasses)
    w.flops = 0;
    w.ub_buffers = 1;  // X's tile; the transposition's tile is the schedule's
    if (n > 0) {
        w.axis_len = p.dims[static_cast<size_t>(in_axis)];
        w.inner = 1;
        for (int i = in_axis + 1; i < p.rank; ++i) w.inner *= p.dims[static_cast<size_t>(i)];
        w.in_axis_contiguous = true;
    }
    return cost::vector_work(w);
}

Result<CycleBreakdown> transpose_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(transpose_work(l, s), l.tiling, s, "transpose");
}

// Y's last axis is contiguous in X: copy rows of dims[last] elements.
template <typename U>
void copy_rows(const Plan& p, const U* x, U* y, ThreadPool& pool) {
    const int r = p.rank;
    const int64_t len = p.dims[static_cast<size_t>(r - 1)];
    int64_t rows = 1;
    for (int d = 0; d + 1 < r; ++d) rows *= p.dims[static_cast<size_t>(d)];
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(len), [&](size_t b, size_t e) {
        std::array<int64_t, kMaxRank> idx{};
        int64_t rest = static_cast<int64_t>(b), off = 0;
        for (int d = r - 2; d >= 0; --d) {
            const size_t du = static_cast<size_t>(d);
            idx[du] = rest % p.dims[du];
            rest /= p.dims[du];
            off += idx[du] * p.in_stride[du];
        }
        for (size_t row = b; row < e; ++row) {
            std::memcpy(y + static_cast<int64_t>(row) * len, x + off, static_cast<size_t>(len) * sizeof(U));
            for (int d = r - 2; d >= 0; --d) {
                const size_t du = static_cast<size_t>(d);
                off += p.in_stride[du];
                if (++idx[du] < p.dims[du]) break;
                off -= p.dims[du] * p.in_stride[du];
                idx[du] = 0;
            }
        }
    });
}

// Y's last axis l is strided in X and X's contiguous axis is Y's axis k < l: for every index of
// the other axes, transpose the dims[k] x dims[l] matrix in square tiles.
template <typename U>
void transpose_tiles(const Plan& p, const U* x, U* y, ThreadPool& pool) {
    constexpr int64_t kTile = 32;
    const int r = p.rank;
    const size_t l = static_cast<size_t>(r - 1);
    size_t k = 0;
    while (p.in_stride[k] != 1) ++k;
    std::array<int64_t, kMaxRank> out_stride{};
    int64_t s = 1;
    for (int d = r - 1; d >= 0; --d) {
        out_stride[static_cast<size_t>(d)] = s;
        s *= p.dims[static_cast<size_t>(d)];
    }
    const int64_t dk = p.dims[k], dl = p.dims[l], xs_l = p.in_stride[l], ys_k = out_stride[k];
    const int64_t k_tiles = (dk + kTile - 1) / kTile;
    int64_t others = 1;
    for (int d = 0; d < r; ++d)
        if (static_cast<size_t>(d) != k && static_cast<size_t>(d) != l) others *= p.dims[static_cast<size_t>(d)];
    // One work item: one index of the other axes and one band of kTile rows along k.
    const size_t items = static_cast<size_t>(others * k_tiles);
    pool.parallel_for(items, move::row_grain(kTile * dl), [&](size_t b, size_t e) {
        for (size_t item = b; item < e; ++item) {
            int64_t rest = static_cast<int64_t>(item) / k_tiles;
            const int64_t k0 = (static_cast<int64_t>(item) % k_tiles) * kTile, k1 = std::min(dk, k0 + kTile);
            int64_t xoff = 0, yoff = 0;
            for (int d = r - 1; d >= 0; --d) {
                const size_t du = static_cast<size_t>(d);
                if (du == k || du == l) continue;
                const int64_t i = rest % p.dims[du];
                rest /= p.dims[du];
                xoff += i * p.in_stride[du];
                yoff += i * out_stride[du];
            }
            const U* xs = x + xoff;
            U* ys = y + yoff;
            for (int64_t l0 = 0; l0 < dl; l0 += kTile) {
                const int64_t l1 = std::min(dl, l0 + kTile);
                for (int64_t i = k0; i < k1; ++i) {
                    U* dst = ys + i * ys_k;
                    const U* src = xs + i;
                    for (int64_t j = l0; j < l1; ++j) dst[j] = src[j * xs_l];
                }
            }
        }
    });
}

Status transpose_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (y.elements() == 0) return {};
    const Plan& p = a.plan;
    if (p.rank == 0) {
        std::memcpy(y.data, x.data, dtype_size(a.dtype));
        return {};
    }
    move::with_bits(a.dtype, [&](auto bits) {
        using U = decltype(bits);
        if (p.in_stride[static_cast<size_t>(p.rank - 1)] == 1) copy_rows<U>(p, x.as<const U>(), y.as<U>(), pool);
        else transpose_tiles<U>(p, x.as<const U>(), y.as<U>(), pool);
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_transpose;
const KernelDef kernel_transpose = {"transpose", transpose_work, transpose_cost, transpose_run};

}  // namespace loom::device
