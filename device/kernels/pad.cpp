// pad: Y = X padded or cropped along every axis (ONNX Pad). Any dtype, the same for X and Y;
// Y.dim(i) = X.dim(i) + pads[i] + pads[rank + i].
// Attributes: pads (required, 2 x rank ints: all begins, then all ends; a negative pad crops);
// mode = "constant" (default), "reflect", "edge" or "wrap"; value (float, default 0: constant
// mode's fill; for integer dtypes it must be a whole number the dtype holds).
// Negative pads crop first, then the cropped tensor is padded (as onnxruntime does). reflect
// mirrors without repeating the edge and needs each pad < the (cropped) dim; edge and wrap need
// a non-empty dim to pad.
// Cost: the copied interior moves by MTE in runs of X's (cropped) last dim, each costing whole
// 32-byte blocks; the border is made in UB by the Vector unit: one pass per border element for
// constant (a fill), two for reflect/edge/wrap (a gather, then a copy).
#include <algorithm>
#include <array>
#include <cmath>
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

enum Mode : int { CONSTANT = 0, REFLECT, EDGE, WRAP, MODE_COUNT };
constexpr const char* kModeNames[MODE_COUNT] = {"constant", "reflect", "edge", "wrap"};

struct Args {
    Mode mode;
    std::array<int64_t, kMaxRank> begin{}, end{};  // pads as given
    double value;
    DType dtype;
};

// Checks that `v` is a value of the integer type I; returns its bits.
template <typename I>
Result<uint64_t> int_value(double v, DType t) {
    if (!(v == std::trunc(v)) || v < static_cast<double>(std::numeric_limits<I>::min()) ||
        v > static_cast<double>(std::numeric_limits<I>::max()))
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'value' = {} is not a {} value", v, dtype_name(t));
    uint64_t bits = 0;
    const I i = static_cast<I>(v);
    std::memcpy(&bits, &i, sizeof(I));
    return bits;
}

// The fill value as the bits of one element of `t`.
Result<uint64_t> fill_bits(double v, DType t) {
    switch (t) {
    case DType::F32: {
        const float f = static_cast<float>(v);
        uint32_t b;
        std::memcpy(&b, &f, 4);
        return uint64_t{b};
    }
    case DType::F16: return uint64_t{f32_to_f16(static_cast<float>(v)).bits};
    case DType::I8: return int_value<int8_t>(v, t);
    case DType::U8: return int_value<uint8_t>(v, t);
    case DType::I32: return int_value<int32_t>(v, t);
    case DType::I64:
        // Doubles beyond 2^63 are refused; every double below converts exactly.
        if (v >= 9223372036854775808.0)
            return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'value' = {} is not a i64 value", v);
        return int_value<int64_t>(v, t);
    }
    return uint64_t{0};
}

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"pads", "mode", "value"}));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> pads, l.attrs.get_ints("pads"));
    LOOM_ASSIGN_OR_RETURN(std::string mode, l.attrs.get_string("mode", "constant"));
    LOOM_ASSIGN_OR_RETURN(double value, l.attrs.get_float("value", 0.0));
    Args a{};
    a.dtype = x.dtype;
    a.value = value;
    int m = -1;
    for (int i = 0; i < MODE_COUNT; ++i)
        if (mode == kModeNames[i]) m = i;
    if (m < 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'mode' = '{}' (constant, reflect, edge or wrap)",
                          mode);
    a.mode = static_cast<Mode>(m);
    if (a.mode != CONSTANT && l.attrs.has("value"))
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'value' is for mode 'constant', not '{}'", mode);
    if (pads.size() != 2 * static_cast<size_t>(x.rank))
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'pads' has {} values, expected 2 x rank = {}",
                          pads.size(), 2 * x.rank);
    if (a.mode == CONSTANT) LOOM_TRY(fill_bits(value, x.dtype).status());
    std::vector<int64_t> want(static_cast<size_t>(x.rank));
    for (int d = 0; d < x.rank; ++d) {
        const size_t du = static_cast<size_t>(d);
        const int64_t b = pads[du], e = pads[du + static_cast<size_t>(x.rank)], dim = x.dim(d);
        a.begin[du] = b;
        a.end[du] = e;
        const int64_t kept = dim - std::max<int64_t>(0, -b) - std::max<int64_t>(0, -e);
        if (kept < 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "pads {} and {} crop more than dim {} of size {}", b, e, d,
                              dim);
        const int64_t grow = std::max<int64_t>(b, 0) + std::max<int64_t>(e, 0);
        if (grow > 0 && a.mode == REFLECT && std::max(b, e) >= kept)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "mode 'reflect' needs pads < the dim: dim {} is {} (after cropping), pads are {} and {}",
                              d, kept, b, e);
        if (grow > 0 && (a.mode == EDGE || a.mode == WRAP) && kept == 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "mode '{}' cannot pad dim {}: it is empty", mode, d);
        want[du] = kept + grow;
    }
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return a;
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "pad", 1, 1, 1, check_args); }

Result<KernelWork> pad_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    const double b = static_cast<double>(dtype_size(a.dtype));
    double interior = 1, run = 1;  // elements copied from X; X's (cropped) last dim
    for (int d = 0; d < x.rank; ++d) {
        const size_t du = static_cast<size_t>(d);
        const int64_t kept = x.dim(d) - std::max<int64_t>(0, -a.begin[du]) - std::max<int64_t>(0, -a.end[du]);
        interior *= static_cast<double>(kept);
        if (d == x.rank - 1) run = static_cast<double>(kept);
    }
    const double n = static_cast<double>(y.elements());
    const double border = n > 0 ? (n - interior) / n : 0;
    const double in_bytes = n > 0 ? b * interior / n * move::block_factor(run * b) : 0;
    return move::move_work(y.elements(), a.dtype, in_bytes, b, border * (a.mode == CONSTANT ? 1 : 2), 2);
}

Result<CycleBreakdown> pad_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(pad_work(l, s), l.tiling, s, "pad");
}

// For each axis and output index: the source index in X, or -1 for the constant fill.
std::vector<int64_t> source_table(const Args& a, const TensorRef& x, const TensorRef& y,
                                  std::array<const int64_t*, kMaxRank>& table) {
    size_t total = 0;
    for (int d = 0; d < y.rank; ++d) total += static_cast<size_t>(y.dim(d));
    std::vector<int64_t> v(total);
    size_t at = 0;
    for (int d = 0; d < y.rank; ++d) {
        const size_t du = static_cast<size_t>(d);
        const int64_t c0 = std::max<int64_t>(0, -a.begin[du]);
        const int64_t kept = x.dim(d) - c0 - std::max<int64_t>(0, -a.end[du]);
        const int64_t lead = std::max<int64_t>(0, a.begin[du]);
        table[du] = v.data() + at;
        for (int64_t o = 0; o < y.dim(d); ++o) {
            int64_t i = o - lead;  // index into the cropped axis
            if (i < 0 || i >= kept) {
                switch (a.mode) {
                case CONSTANT: i = -1; break;
                case REFLECT: i = i < 0 ? -i : 2 * (kept - 1) - i; break;
                case EDGE: i = i < 0 ? 0 : kept - 1; break;
                case WRAP: i = ((i % kept) + kept) % kept; break;
                case MODE_COUNT: break;
                }
            }
            v[at++] = i < 0 ? -1 : c0 + i;
        }
    }
    return v;
}

template <typename U>
void pad_rows(const Args& a, const TensorRef& x, const TensorRef& y, U fill, ThreadPool& pool) {
    std::array<const int64_t*, kMaxRank> src_of{};
    const std::vector<int64_t> storage = source_table(a, x, y, src_of);
    const int r = y.rank;
    const size_t last = static_cast<size_t>(r - 1);
    const int64_t len = y.dim(r - 1);
    const std::array<int64_t, kMaxRank> xstride = ops::strides_of(x);
    // The contiguous middle of each row: output [o0, o1) reads X from src_of[last][o0] on.
    const int64_t lead = std::max<int64_t>(0, a.begin[last]);
    const int64_t kept = x.dim(r - 1) - std::max<int64_t>(0, -a.begin[last]) - std::max<int64_t>(0, -a.end[last]);
    const int64_t o0 = lead, o1 = lead + kept;
    const int64_t* col = src_of[last];
    const U* xs = x.as<const U>();
    U* ys = y.as<U>();
    const int64_t rows = ops::dims_product(y, 0, r - 1);
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(len), [&](size_t b, size_t e) {
        for (size_t row = b; row < e; ++row) {
            U* dst = ys + static_cast<int64_t>(row) * len;
            int64_t rest = static_cast<int64_t>(row), off = 0;
            bool fill_row = false;
            for (int d = r - 2; d >= 0; --d) {
                const size_t du = static_cast<size_t>(d);
                const int64_t src = src_of[du][rest % y.dim(d)];
                rest /= y.dim(d);
                fill_row = fill_row || src < 0;
                off += src * xstride[du];
            }
            if (fill_row) {
                std::fill(dst, dst + len, fill);
                continue;
            }
            const U* xrow = xs + off;
            for (int64_t o = 0; o < o0; ++o) dst[o] = col[o] < 0 ? fill : xrow[col[o]];
            if (o1 > o0) std::memcpy(dst + o0, xrow + col[o0], static_cast<size_t>(o1 - o0) * sizeof(U));
            for (int64_t o = o1; o < len; ++o) dst[o] = col[o] < 0 ? fill : xrow[col[o]];
        }
    });
}

Status pad_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (y.elements() == 0) return {};
    if (y.rank == 0) {
        std::memcpy(y.data, x.data, dtype_size(a.dtype));
        return {};
    }
    uint64_t bits = 0;
    if (a.mode == CONSTANT) {
        LOOM_ASSIGN_OR_RETURN(bits, fill_bits(a.value, a.dtype));
    }
    move::with_bits(a.dtype, [&](auto zero) {
        using U = decltype(zero);
        U fill;
        std::memcpy(&fill, &bits, sizeof(U));  // little-endian: the low bytes hold the element
        pad_rows<U>(a, x, y, fill, pool);
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_pad;
const KernelDef kernel_pad = {"pad", pad_work, pad_cost, pad_run};

}  // namespace loom::device
