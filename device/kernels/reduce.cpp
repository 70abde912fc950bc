// reduce: ONNX ReduceMean, ReduceSum, ReduceMax and ReduceMin over a set of axes.
// Input X; output Y of X's shape with the reduced dims set to 1 (keepdims = 1) or removed.
// Attributes: op (required) = mean|sum|max|min; axes (list of ints in -rank .. rank-1, no
// repeats; empty or absent = every axis, unless noop_with_empty_axes = 1, which makes the op an
// identity copy); keepdims (1 default, or 0); noop_with_empty_axes (0 default, or 1).
// Dtypes: f32, f16 (sums accumulate in float64; results rounded once). Reducing an empty set
// gives 0 (sum), NaN (mean), -inf (max) or +inf (min). NaN inputs to max/min are not
// guaranteed to propagate.
// Results do not depend on the thread count: each output is accumulated in a fixed order, and
// when there are few outputs their reductions are split into fixed parts combined in order.
// Tiling: VectorSchedule (default: vector_cost's heuristic; the axes are described at reduce_work).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

using ops::shape_str;

enum class ROp : uint8_t { MEAN, SUM, MAX, MIN };
constexpr const char* kOpNames[] = {"mean", "sum", "max", "min"};

constexpr int64_t kTile = 256;         // contiguous outputs accumulated at once (inner dim kept)
constexpr int64_t kPartMin = 1 << 15;  // input elements per part when one reduction is split

// X with its size-1 dims dropped and neighbouring dims of the same kind merged, split into
// the kept dims (which index Y, in order) and the reduced dims. The innermost collapsed dim is
// either kept (`inner_kept`: runs of `inner` contiguous outputs, each a sum of rows) or reduced
// (each output sums segments of `inner` contiguous inputs).
struct Layout {
    int nk = 0, nr = 0;
    std::array<int64_t, kMaxRank> kdims{}, kstrides{}, rdims{}, rstrides{};
    bool inner_kept = true;
    int64_t inner = 1;
    int64_t rows = 1;    // product of kdims
    int64_t combos = 1;  // product of rdims
};

struct Args {
    ROp op;
    DType dtype;
    bool noop;
    int64_t in_elems, out_elems, count;  // count: elements reduced into each output
    Layout lay;
};

Layout make_layout(const TensorRef& x, const std::array<bool, kMaxRank>& red) {
    struct Dim {
        int64_t size;
        bool reduced;
    };
    std::vector<Dim> dims;
    for (int d = 0; d < x.rank; ++d) {
        const int64_t s = x.dim(d);
        const bool r = red[static_cast<size_t>(d)];
        if (s == 1) continue;
        if (!dims.empty() && dims.back().reduced == r) dims.back().size *= s;
        else dims.push_back({s, r});
    }
    if (dims.empty()) dims.push_back({1, false});
    Layout L;
    L.inner_kept = !dims.back().reduced;
    L.inner = dims.back().size;
    int64_t stride = L.inner;
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
        const Dim& d = dims[static_cast<size_t>(i)];
        if (d.reduced) {
            L.rdims[static_cast<size_t>(L.nr)] = d.size;
            L.rstrides[static_cast<size_t>(L.nr++)] = stride;
        } else {
            L.kdims[static_cast<size_t>(L.nk)] = d.size;
            L.kstrides[static_cast<size_t>(L.nk++)] = stride;
        }
        stride *= d.size;
    }
    // Collected innermost first; flip to outermost first.
    std::reverse(L.kdims.begin(), L.kdims.begin() + L.nk);
    std::reverse(L.kstrides.begin(), L.kstrides.begin() + L.nk);
    std::reverse(L.rdims.begin(), L.rdims.begin() + L.nr);
    std::reverse(L.rstrides.begin(), L.rstrides.begin() + L.nr);
    for (int i = 0; i < L.nk; ++i) L.rows *= L.kdims[static_cast<size_t>(i)];
    for (int i = 0; i < L.nr; ++i) L.combos *= L.rdims[static_cast<size_t>(i)];
    return L;
}

Result<Args> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "reduce", 1, 1, 1));
    LOOM_TRY(l.attrs.check_known({"op", "axes", "keepdims", "noop_with_empty_axes"}).with_context("reduce"));
    auto name = l.attrs.get_string("op");
    if (!name.ok()) return name.status().with_context("reduce");
    auto axes = l.attrs.get_ints("axes", {});
    if (!axes.ok()) return axes.status().with_context("reduce");
    auto keep = l.attrs.get_int("keepdims", 1);
    if (!keep.ok()) return keep.status().with_context("reduce");
    auto noop = l.attrs.get_int("noop_with_empty_axes", 0);
    if (!noop.ok()) return noop.status().with_context("reduce");
    Args a{};
    int op = -1;
    for (int i = 0; i < 4; ++i)
        if (*name == kOpNames[i]) op = i;
    if (op < 0) return make_error(StatusCode::INVALID_ARGUMENT, "reduce: op '{}' (mean, sum, max or min)", *name);
    a.op = static_cast<ROp>(op);
    if (*keep != 0 && *keep != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "reduce: keepdims = {} (0 or 1)", *keep);
    if (*noop != 0 && *noop != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "reduce: noop_with_empty_axes = {} (0 or 1)", *noop);
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (!ops::is_float(x.dtype))
        return make_error(StatusCode::UNSUPPORTED, "reduce: dtype {} (f32 and f16 are supported)", dtype_name(x.dtype));
    if (y.dtype != x.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "reduce: mixed dtypes (X {}, Y {})", dtype_name(x.dtype),
                          dtype_name(y.dtype));
    std::array<bool, kMaxRank> red{};
    for (int64_t ax : *axes) {
        if (ax < -x.rank || ax >= x.rank)
            return make_error(StatusCode::INVALID_ARGUMENT, "reduce: axis {} outside [{}, {}] for X {}", ax, -x.rank,
                              x.rank - 1, shape_str(x));
        const auto d = static_cast<size_t>(ax < 0 ? ax + x.rank : ax);
        if (red[d])
            return make_error(StatusCode::INVALID_ARGUMENT, "reduce: axes [{}] name axis {} twice",
                              fmt::join(*axes, ", "), d);
        red[d] = true;
    }
    a.noop = axes->empty() && *noop == 1;
    if (axes->empty() && !a.noop) red.fill(true);
    TensorRef want;
    want.dtype = x.dtype;
    a.count = 1;
    for (int d = 0; d < x.rank; ++d) {
        if (!red[static_cast<size_t>(d)]) want.dims[static_cast<size_t>(want.rank++)] = x.dim(d);
        else {
            a.count *= x.dim(d);
            if (*keep) want.dims[static_cast<size_t>(want.rank++)] = 1;
        }
    }
    if (!ops::same_shape(y, want))
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "reduce: output Y is {}, want {} (X {}, axes [{}], keepdims {})", shape_str(y),
                          shape_str(want), shape_str(x), fmt::join(*axes, ", "), *keep);
    a.dtype = x.dtype;
    a.in_elems = x.elements();
    a.out_elems = y.elements();
    if (a.in_elems > 0) a.lay = make_layout(x, red);
    return a;
}

// The input streams through the Vector unit once: one pass per element (add or max/min), +2
// for f16 (widen; the narrowing of the few outputs is not counted). The outputs are written in
// an epilogue at the chip's memory bandwidth (all cores writing their own), so a longer
// reduction into the same outputs never costs less. The identity (noop) is a plain copy.
// Schedule axes: the innermost run of reduced dims is the axis, the kept dims after it inner
// (1 when the innermost dim is reduced), everything before outer (reduced dims further out are
// accumulated like separate lines).
Result<KernelWork> reduce_work(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double size = static_cast<double>(dtype_size(a.dtype));
    cost::VectorWork w;
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = size;
    if (a.noop) {
        w.elements = a.in_elems;
        w.out_bytes = size;
        w.vector_passes = 0;
        w.flops = 0;
        w.ub_buffers = 2;
        return cost::vector_work(w);
    }
    w.elements = a.in_elems;
    w.out_bytes = 0;
    w.vector_passes = 1 + (a.dtype == DType::F16 ? 2 : 0);
    w.flops = 1;
    w.ub_buffers = 2;  // input tiles and the accumulators
    w.fusable_in_bytes = size;
    const Layout& L = a.lay;
    if (a.in_elems > 0 && (!L.inner_kept || L.nr > 0)) {
        w.axis_role = cost::AxisRole::REDUCE;
        w.reduce_passes = 1;
        w.axis_len = L.inner_kept ? L.rdims[static_cast<size_t>(L.nr - 1)] : L.inner;
        w.inner = L.inner_kept ? L.inner : 1;
    }
    KernelWork work = cost::vector_work(w);
    const double out_bytes = size * static_cast<double>(a.out_elems);
    const double t_out = out_bytes / cost::memory_share_per_cycle(s, 1);
    work.fixed.mte_out = t_out;
    work.fixed.total = t_out;
    work.fixed.l2_miss_bytes = out_bytes;
    return work;
}

Result<CycleBreakdown> reduce_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(reduce_work(l, s), l.tiling, s, "reduce");
}

template <ROp OP>
inline double init() {
    if constexpr (OP == ROp::MAX) return -std::numeric_limits<double>::infinity();
    if constexpr (OP == ROp::MIN) return std::numeric_limits<double>::infinity();
    return 0.0;
}

template <ROp OP>
inline double combine(double acc, double v) {
    if constexpr (OP == ROp::MAX) return v > acc ? v : acc;
    if constexpr (OP == ROp::MIN) return v < acc ? v : acc;
    return acc + v;
}

// Reduces n contiguous elements with eight independent accumulators (a fixed order, and
// lanes the compiler turns into vector max/min or adds): sums in float64, max/min in fp32.
template <ROp OP, typename T>
double reduce_contiguous(const T* x, int64_t n) {
    constexpr int kLanes = 8;
    if constexpr (OP == ROp::MAX || OP == ROp::MIN) {
        float m[kLanes];
        std::fill(m, m + kLanes, static_cast<float>(init<OP>()));
        auto step = [](float acc, float v) {
            if constexpr (OP == ROp::MAX) return v > acc ? v : acc;
            else return v < acc ? v : acc;
        };
        int64_t i = 0;
        for (; i + kLanes <= n; i += kLanes)
            for (int k = 0; k < kLanes; ++k) m[k] = step(m[k], load_as_f32(x, i + k));
        for (; i < n; ++i) m[0] = step(m[0], load_as_f32(x, i));
        float r = m[0];
        for (int k = 1; k < kLanes; ++k) r = step(r, m[k]);
        return r;
    } else {
        double s[kLanes] = {};
        int64_t i = 0;
        for (; i + kLanes <= n; i += kLanes)
            for (int k = 0; k < kLanes; ++k) s[k] += load_as_f32(x, i + k);
        for (; i < n; ++i) s[0] += load_as_f32(x, i);
        return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    }
}

// Offset of reduced combination `c` (row-major over rdims).
inline int64_t combo_offset(const Layout& L, int64_t c, std::array<int64_t, kMaxRank>& idx) {
    int64_t off = 0;
    for (int d = L.nr - 1; d >= 0; --d) {
        const auto u = static_cast<size_t>(d);
        idx[u] = c % L.rdims[u];
        c /= L.rdims[u];
        off += idx[u] * L.rstrides[u];
    }
    return off;
}

// Steps idx to the next reduced combination; returns the change of offset.
inline int64_t next_combo(const Layout& L, std::array<int64_t, kMaxRank>& idx) {
    int64_t delta = 0;
    for (int d = L.nr - 1; d >= 0; --d) {
        const auto u = static_cast<size_t>(d);
        delta += L.rstrides[u];
        if (++idx[u] < L.rdims[u]) return delta;
        delta -= L.rstrides[u] * L.rdims[u];
        idx[u] = 0;
    }
    return delta;
}

// Accumulates into acc[0 .. t) the part [r0, r1) of the reduction of output row `row`, tile
// starting at j0. The reduced space is the combos (inner kept) or combos x inner elements.
template <ROp OP, typename T>
void reduce_item(const Layout& L, const T* x, int64_t row, int64_t j0, int64_t t, int64_t r0, int64_t r1, double* acc) {
    int64_t base = 0;
    for (int d = L.nk - 1; d >= 0; --d) {
        const auto u = static_cast<size_t>(d);
        base += (row % L.kdims[u]) * L.kstrides[u];
        row /= L.kdims[u];
    }
    std::array<int64_t, kMaxRank> idx{};
    std::fill(acc, acc + t, init<OP>());
    if (r0 >= r1) return;  // the last of several parts can be empty
    if (L.inner_kept) {
        const T* p = x + base + j0 + combo_offset(L, r0, idx);
        for (int64_t c = r0; c < r1; ++c) {
            if constexpr (OP == ROp::MAX || OP == ROp::MIN) {
                for (int64_t j = 0; j < t; ++j) acc[j] = combine<OP>(acc[j], load_as_f32(p, j));
            } else {
                for (int64_t j = 0; j < t; ++j) acc[j] += load_as_f32(p, j);
            }
            if (c + 1 < r1) p += next_combo(L, idx);
        }
        return;
    }
    int64_t c = r0 / L.inner, col = r0 % L.inner;
    const T* p = x + base + combo_offset(L, c, idx);
    for (int64_t pos = r0; pos < r1;) {
        const int64_t len = std::min(L.inner - col, r1 - pos);
        acc[0] = combine<OP>(acc[0], reduce_contiguous<OP>(p + col, len));
        pos += len;
        col = 0;
        if (pos < r1) p += next_combo(L, idx);
    }
}

template <typename T>
inline void store(T* y, int64_t i, double v) {
    if constexpr (std::is_same_v<T, f16>) y[i] = f32_to_f16(static_cast<float>(v));
    else y[i] = static_cast<float>(v);
}

template <ROp OP, typename T>
void run_op(const Args& a, const T* x, T* y, ThreadPool& pool) {
    const Layout& L = a.lay;
    const int64_t t_full = L.inner_kept ? L.inner : 1;
    const int64_t tiles = cost::ceil_div(t_full, kTile);
    const int64_t items = L.rows * tiles;
    const int64_t space = L.inner_kept ? L.combos : L.combos * L.inner;  // reduced steps per output
    const int64_t per_item = a.in_elems / items;
    // Split each reduction only when there are few outputs; the split depends on shapes alone.
    int64_t parts = 1;
    if (items < 64 && per_item >= 2 * kPartMin) parts = std::min<int64_t>({64, per_item / kPartMin, space});
    const int64_t step = cost::ceil_div(space, parts);
    const double scale = OP == ROp::MEAN ? 1.0 / static_cast<double>(a.count) : 1.0;
    constexpr ROp ACC = OP == ROp::MEAN ? ROp::SUM : OP;
    std::vector<double> partial(parts > 1 ? static_cast<size_t>(a.out_elems * parts) : 0);
    const size_t grain = static_cast<size_t>(std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(1, per_item / parts)));
    pool.parallel_for(static_cast<size_t>(items * parts), grain, [&](size_t b, size_t e) {
        double acc[kTile];
        for (size_t u = b; u < e; ++u) {
            const int64_t item = static_cast<int64_t>(u) / parts, part = static_cast<int64_t>(u) % parts;
            const int64_t row = item / tiles, j0 = item % tiles * kTile, t = std::min(kTile, t_full - j0);
            const int64_t r0 = part * step, r1 = std::min(space, r0 + step);
            reduce_item<ACC>(L, x, row, j0, t, r0, r1, acc);
            const int64_t o = row * t_full + j0;
            if (parts == 1)
                for (int64_t j = 0; j < t; ++j) store(y, o + j, acc[j] * scale);
            else
                for (int64_t j = 0; j < t; ++j) partial[static_cast<size_t>((o + j) * parts + part)] = acc[j];
        }
    });
    if (parts == 1) return;
    for (int64_t o = 0; o < a.out_elems; ++o) {
        double v = init<ACC>();
        for (int64_t k = 0; k < parts; ++k) v = combine<ACC>(v, partial[static_cast<size_t>(o * parts + k)]);
        store(y, o, v * scale);
    }
}

template <typename T>
void run_typed(const Args& a, const T* x, T* y, ThreadPool& pool) {
    if (a.in_elems == 0) {  // reductions over an empty set
        double v = a.op == ROp::MAX    ? init<ROp::MAX>()
                   : a.op == ROp::MIN  ? init<ROp::MIN>()
                   : a.op == ROp::MEAN ? std::numeric_limits<double>::quiet_NaN()
                                       : 0.0;
        for (int64_t i = 0; i < a.out_elems; ++i) store(y, i, v);
        return;
    }
    switch (a.op) {
    case ROp::MEAN: run_op<ROp::MEAN>(a, x, y, pool); break;
    case ROp::SUM: run_op<ROp::SUM>(a, x, y, pool); break;
    case ROp::MAX: run_op<ROp::MAX>(a, x, y, pool); break;
    case ROp::MIN: run_op<ROp::MIN>(a, x, y, pool); break;
    }
}

Status reduce_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (a.out_elems == 0) return {};
    if (a.noop) {
        if (x.data != y.data) std::memmove(y.data, x.data, x.bytes());
        return {};
    }
    if (a.dtype == DType::F16) run_typed(a, x.as<const f16>(), y.as<f16>(), pool);
    else run_typed(a, x.as<const float>(), y.as<float>(), pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_reduce;
const KernelDef kernel_reduce = {"reduce", reduce_work, reduce_cost, reduce_run};

}  // namespace loom::device
