// resize: ONNX Resize (opset 13 to 19 semantics, without antialias) on any axes of X, f32 or f16
// (the same for Y; interpolation in fp32, rounded once). Y's shape gives the output sizes.
// Attributes:
//   mode = "nearest" (default), "linear" or "cubic" (N-linear / N-cubic over the resized axes);
//   coordinate_transformation_mode = "half_pixel" (default), "half_pixel_symmetric",
//     "pytorch_half_pixel", "align_corners", "asymmetric" or "tf_crop_and_resize";
//   nearest_mode = "round_prefer_floor" (default), "round_prefer_ceil", "floor" or "ceil";
//   cubic_coeff_a (default -0.75); exclude_outside (0/1: zero the weights of taps outside the
//   input and renormalise); extrapolation_value (default 0: tf_crop_and_resize samples outside
//   the input); scales (optional, one float per axis: then Y.dim(i) must be floor(X.dim(i) *
//   scales[i]); when absent, scale = Y.dim(i) / X.dim(i)); roi (tf_crop_and_resize only: starts
//   then ends per axis, normalised; default 0s and 1s).
// As in the ONNX reference, with scale s the resized length is s * in (a float) where the modes
// use it; without scales it is Y's dim exactly. A linear or cubic sample at an integer
// coordinate x uses the taps of x - 1 with ratio 1 (the reference's neighbour choice), taps
// outside the input read the edge value. pytorch_half_pixel maps a length-1 output to 0.
// Run: per-axis index and weight tables are built once per call. When every axis but the last
// two is unchanged, rows are computed with a 2-D kernel: nearest copies bits (repeated source
// rows are copied whole, integer upscale factors replicate elements), linear and cubic
// interpolate each needed source row horizontally once into a small row cache, then combine
// cached rows vertically. Other resizes use a general N-D kernel.
// Cost: every input byte is read about once (at most `taps` inputs per output when shrinking);
// nearest takes one Vector pass, linear/cubic one pass per tap per resized axis (the separable
// scheme above), f16 two more to widen and narrow.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

enum Mode : int { NEAREST = 0, LINEAR, CUBIC, MODE_COUNT };
constexpr const char* kModeNames[MODE_COUNT] = {"nearest", "linear", "cubic"};
enum Coord : int {
    HALF_PIXEL = 0,
    HALF_PIXEL_SYMMETRIC,
    PYTORCH_HALF_PIXEL,
    ALIGN_CORNERS,
    ASYMMETRIC,
    TF_CROP_AND_RESIZE,
    COORD_COUNT
};
constexpr const char* kCoordNames[COORD_COUNT] = {"half_pixel",    "half_pixel_symmetric", "pytorch_half_pixel",
                                                  "align_corners", "asymmetric",           "tf_crop_and_resize"};
enum Round : int { ROUND_PREFER_FLOOR = 0, ROUND_PREFER_CEIL, FLOOR, CEIL, ROUND_COUNT };
constexpr const char* kRoundNames[ROUND_COUNT] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

struct Args {
    Mode mode = NEAREST;
    Coord coord = HALF_PIXEL;
    Round round = ROUND_PREFER_FLOOR;
    double cubic_a = -0.75;
    bool exclude_outside = false;
    double extrapolation = 0;
    bool has_scales = false;
    std::array<double, kMaxRank> scale{}, roi0{}, roi1{};
    DType dtype = DType::F32;
};

template <size_t N>
Result<int> pick(const std::string& value, const char* const (&names)[N], const char* attr) {
    for (size_t i = 0; i < N; ++i)
        if (value == names[i]) return static_cast<int>(i);
    return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' = '{}' ({})", attr, value, fmt::join(names, ", "));
}

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known({"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                                  "exclude_outside", "extrapolation_value", "scales", "roi"}));
    if (!ops::is_float(x.dtype))
        return make_error(StatusCode::UNSUPPORTED, "dtype {} (f32 and f16 are supported)", dtype_name(x.dtype));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    Args a;
    a.dtype = x.dtype;
    LOOM_ASSIGN_OR_RETURN(std::string mode, l.attrs.get_string("mode", "nearest"));
    LOOM_ASSIGN_OR_RETURN(std::string coord, l.attrs.get_string("coordinate_transformation_mode", "half_pixel"));
    LOOM_ASSIGN_OR_RETURN(std::string round, l.attrs.get_string("nearest_mode", "round_prefer_floor"));
    LOOM_ASSIGN_OR_RETURN(int m, pick(mode, kModeNames, "mode"));
    LOOM_ASSIGN_OR_RETURN(int c, pick(coord, kCoordNames, "coordinate_transformation_mode"));
    LOOM_ASSIGN_OR_RETURN(int r, pick(round, kRoundNames, "nearest_mode"));
    a.mode = static_cast<Mode>(m);
    a.coord = static_cast<Coord>(c);
    a.round = static_cast<Round>(r);
    LOOM_ASSIGN_OR_RETURN(a.cubic_a, l.attrs.get_float("cubic_coeff_a", -0.75));
    LOOM_ASSIGN_OR_RETURN(int64_t exclude, l.attrs.get_int("exclude_outside", 0));
    if (exclude != 0 && exclude != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'exclude_outside' = {} (0 or 1)", exclude);
    a.exclude_outside = exclude == 1;
    LOOM_ASSIGN_OR_RETURN(a.extrapolation, l.attrs.get_float("extrapolation_value", 0.0));
    if (x.rank < 1) return make_error(StatusCode::INVALID_ARGUMENT, "input 0 is a scalar (rank >= 1 needed)");
    const size_t rank = static_cast<size_t>(x.rank);
    LOOM_ASSIGN_OR_RETURN(std::vector<double> roi, l.attrs.get_floats("roi", {}));
    if (!roi.empty() && roi.size() != 2 * rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'roi' has {} values, expected 2 x rank = {}",
                          roi.size(), 2 * rank);
    a.has_scales = l.attrs.has("scales");
    LOOM_ASSIGN_OR_RETURN(std::vector<double> scales, l.attrs.get_floats("scales", {}));
    if (a.has_scales && scales.size() != rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'scales' has {} values, expected rank = {}",
                          scales.size(), rank);
    std::vector<int64_t> want(rank);
    for (size_t i = 0; i < rank; ++i) {
        const int64_t in = x.dim(static_cast<int>(i));
        a.roi0[i] = roi.empty() ? 0.0 : roi[i];
        a.roi1[i] = roi.empty() ? 1.0 : roi[i + rank];
        if (a.has_scales) {
            const double s = scales[i];
            if (!(s > 0) || !std::isfinite(s) || static_cast<double>(in) * s > 9.0e15)
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "attribute 'scales' = [{}]: scale {} of axis {} is not usable",
                                  fmt::join(scales, ", "), s, i);
            a.scale[i] = s;
            want[i] = static_cast<int64_t>(std::floor(static_cast<double>(in) * s));
        } else {
            want[i] = y.rank == x.rank ? y.dim(static_cast<int>(i)) : in;
            if (in == 0 && want[i] != 0)
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "axis {} of input 0 ({}) is empty and cannot grow to {}", i, ops::shape_str(x),
                                  want[i]);
            a.scale[i] = in > 0 ? static_cast<double>(want[i]) / static_cast<double>(in) : 1.0;
        }
    }
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return a;
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "resize", 1, 1, 1, check_args); }

int taps_of(Mode m) { return m == NEAREST ? 1 : m == LINEAR ? 2 : 4; }

Result<KernelWork> resize_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    const double b = static_cast<double>(dtype_size(a.dtype));
    double taps = 1, passes = 0;
    for (int d = 0; d < x.rank; ++d)
        if (x.dim(d) != y.dim(d) || a.coord == TF_CROP_AND_RESIZE) {
            taps *= taps_of(a.mode);
            passes += a.mode == NEAREST ? 0 : taps_of(a.mode);
        }
    if (a.mode == NEAREST) passes = 1;
    const double n_out = static_cast<double>(y.elements()), n_in = static_cast<double>(x.elements());
    cost::VectorWork w;
    w.elements = y.elements();
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = b * (n_out > 0 ? std::min(n_in / n_out, taps) : 1.0);
    w.out_bytes = b;
    w.vector_passes = passes + (a.dtype == DType::F16 && a.mode != NEAREST ? 2 : 0);
    w.flops = a.mode == NEAREST ? 0 : 2 * passes;
    w.ub_buffers = 3;
    return cost::vector_work(w);
}

Result<CycleBreakdown> resize_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(resize_work(l, s), l.tiling, s, "resize");
}

// One axis: for each output index, `taps` input indices (clamped into the input) and weights,
// and whether the sample lies outside the input (tf_crop_and_resize: extrapolation_value).
struct AxisTable {
    int taps = 1;
    std::vector<int64_t> idx;
    std::vector<float> w;
    std::vector<uint8_t> outside;
    bool identity = false;  // output o is input o, weight 1
};

double source_coord(const Args& a, size_t axis, int64_t o, int64_t in, int64_t out) {
    const double x = static_cast<double>(o), s = a.scale[axis], n = static_cast<double>(in);
    const double len = a.has_scales ? s * n : static_cast<double>(out);  // resized length
    switch (a.coord) {
    case HALF_PIXEL: return (x + 0.5) / s - 0.5;
    case HALF_PIXEL_SYMMETRIC: {
        const double adjustment = static_cast<double>(out) / len;
        return n / 2 * (1 - adjustment) + (x + 0.5) / s - 0.5;
    }
    case PYTORCH_HALF_PIXEL: return len > 1 ? (x + 0.5) / s - 0.5 : 0.0;
    case ALIGN_CORNERS: return len == 1 ? 0.0 : x * (n - 1) / (len - 1);
    case ASYMMETRIC: return x / s;
    case TF_CROP_AND_RESIZE: {
        const double r0 = a.roi0[axis], r1 = a.roi1[axis];
        if (len == 1) return 0.5 * (r0 + r1) * (n - 1);
        return r0 * (n - 1) + x * (r1 - r0) * (n - 1) / (len - 1);
    }
    case COORD_COUNT: break;
    }
    return 0;
}

AxisTable make_axis(const Args& a, size_t axis, int64_t in, int64_t out) {
    AxisTable t;
    t.taps = taps_of(a.mode);
    const size_t taps = static_cast<size_t>(t.taps);
    t.idx.assign(static_cast<size_t>(out) * taps, 0);
    t.w.assign(static_cast<size_t>(out) * taps, 0.0f);
    t.outside.assign(static_cast<size_t>(out), 0);
    bool identity = in == out;
    for (int64_t o = 0; o < out; ++o) {
        const size_t at = static_cast<size_t>(o) * taps;
        const double x = source_coord(a, axis, o, in, out);
        if (a.coord == TF_CROP_AND_RESIZE && (x < 0 || x > static_cast<double>(in - 1))) {
            t.outside[static_cast<size_t>(o)] = 1;
            identity = false;
            continue;
        }
        const double fl = std::floor(x), frac = x - fl;
        const int64_t base = static_cast<int64_t>(fl);
        if (a.mode == NEAREST) {
            int64_t i = base;
            if (frac != 0) {
                switch (a.round) {
                case ROUND_PREFER_FLOOR: i = frac <= 0.5 ? base : base + 1; break;
                case ROUND_PREFER_CEIL: i = frac < 0.5 ? base : base + 1; break;
                case FLOOR: i = base; break;
                case CEIL: i = base + 1; break;
                case ROUND_COUNT: break;
                }
            }
            i = std::clamp<int64_t>(i, 0, in - 1);
            t.idx[at] = i;
            t.w[at] = 1.0f;
            identity = identity && i == o;
            continue;
        }
        // The reference takes the taps of x - 1 with ratio 1 at an integer x.
        const int64_t lo = frac == 0 ? base - 1 : base;
        const double ratio = frac == 0 ? 1.0 : frac;
        std::array<double, 4> c{};
        std::array<int64_t, 4> n{};
        if (a.mode == LINEAR) {
            n = {lo, lo + 1, 0, 0};
            c = {1 - ratio, ratio, 0, 0};
        } else {
            const double A = a.cubic_a, p = ratio + 1, q = 1 - ratio, r = 2 - ratio;
            n = {lo - 1, lo, lo + 1, lo + 2};
            c = {((A * p - 5 * A) * p + 8 * A) * p - 4 * A, ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
                 ((A + 2) * q - (A + 3)) * q * q + 1, ((A * r - 5 * A) * r + 8 * A) * r - 4 * A};
        }
        if (a.exclude_outside) {
            double sum = 0;
            for (size_t k = 0; k < taps; ++k) {
                if (n[k] < 0 || n[k] >= in) c[k] = 0;
                sum += c[k];
            }
            if (sum != 0)
                for (size_t k = 0; k < taps; ++k) c[k] /= sum;
        }
        double on_o = 0;
        for (size_t k = 0; k < taps; ++k) {
            const int64_t i = std::clamp<int64_t>(n[k], 0, in - 1);
            t.idx[at + k] = i;
            t.w[at + k] = static_cast<float>(c[k]);
            if (c[k] != 0 && i != o) identity = false;
            if (i == o) on_o += c[k];
        }
        identity = identity && on_o == 1.0;
    }
    t.identity = identity;
    return t;
}

// Nearest over the last two axes, moving bits. planes x hin x win -> planes x hout x wout.
template <typename U>
void nearest_2d(const AxisTable& th, const AxisTable& tw, int64_t planes, int64_t hin, int64_t win, const U* x, U* y,
                U fill, ThreadPool& pool) {
    const int64_t hout = static_cast<int64_t>(th.outside.size()), wout = static_cast<int64_t>(tw.outside.size());
    // Integer upscale along W: output o reads input o / f.
    int64_t f = 0;
    if (win > 0 && wout % win == 0) {
        f = wout / win;
        for (int64_t o = 0; o < wout && f; ++o)
            if (tw.outside[static_cast<size_t>(o)] || tw.idx[static_cast<size_t>(o)] != o / f) f = 0;
    }
    const int64_t* col = tw.idx.data();
    const uint8_t* col_out = tw.outside.data();
    const bool any_col_out = std::find(tw.outside.begin(), tw.outside.end(), 1) != tw.outside.end();
    const int64_t rows = planes * hout;
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(wout), [&](size_t first, size_t last) {
        for (size_t row = first; row < last; ++row) {
            const int64_t r = static_cast<int64_t>(row), p = r / hout, oh = r % hout;
            U* dst = y + r * wout;
            if (th.outside[static_cast<size_t>(oh)]) {
                std::fill(dst, dst + wout, fill);
                continue;
            }
            const int64_t ih = th.idx[static_cast<size_t>(oh)];
            if (row > first && oh > 0 && !th.outside[static_cast<size_t>(oh - 1)] &&
                th.idx[static_cast<size_t>(oh - 1)] == ih) {
                std::memcpy(dst, dst - wout, static_cast<size_t>(wout) * sizeof(U));  // same source row
                continue;
            }
            const U* src = x + (p * hin + ih) * win;
            switch (f) {
            case 1: std::memcpy(dst, src, static_cast<size_t>(win) * sizeof(U)); break;
            case 2:
                for (int64_t i = 0; i < win; ++i) dst[2 * i] = dst[2 * i + 1] = src[i];
                break;
            case 3:
                for (int64_t i = 0; i < win; ++i) dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = src[i];
                break;
            case 4:
                for (int64_t i = 0; i < win; ++i)
                    dst[4 * i] = dst[4 * i + 1] = dst[4 * i + 2] = dst[4 * i + 3] = src[i];
                break;
            default:
                if (any_col_out)
                    for (int64_t o = 0; o < wout; ++o) dst[o] = col_out[o] ? fill : src[col[o]];
                else
                    for (int64_t o = 0; o < wout; ++o) dst[o] = src[col[o]];
            }
        }
    });
}

// One source row interpolated along W into out[wout].
template <int TAPS, typename T>
void interp_row(const AxisTable& tw, const T* src, float* out, int64_t wout) {
    const int64_t* idx = tw.idx.data();
    const float* w = tw.w.data();
    for (int64_t o = 0; o < wout; ++o) {
        float s = 0;
        for (int k = 0; k < TAPS; ++k) s += w[o * TAPS + k] * load_as_f32(src, idx[o * TAPS + k]);
        out[o] = s;
    }
}

// Linear or cubic over the last two axes: each needed source row is interpolated along W once
// into a cache of TAPS rows (the rows one output row needs are consecutive, so slot = row %
// TAPS never collides), then TAPS cached rows are combined along H.
template <int TAPS, typename T>
void interp_2d(const AxisTable& th, const AxisTable& tw, int64_t planes, int64_t hin, int64_t win, const T* x, T* y,
               float fill, ThreadPool& pool) {
    const int64_t hout = static_cast<int64_t>(th.outside.size()), wout = static_cast<int64_t>(tw.outside.size());
    const bool any_col_out = std::find(tw.outside.begin(), tw.outside.end(), 1) != tw.outside.end();
    const int64_t rows = planes * hout;
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(wout * TAPS), [&](size_t first, size_t last) {
        std::vector<float> cache(static_cast<size_t>(TAPS * wout));
        std::array<int64_t, TAPS> key;
        key.fill(-1);
        for (size_t row = first; row < last; ++row) {
            const int64_t r = static_cast<int64_t>(row), p = r / hout, oh = r % hout;
            T* dst = y + r * wout;
            if (th.outside[static_cast<size_t>(oh)]) {
                for (int64_t o = 0; o < wout; ++o) store_from_f32(dst, o, fill);
                continue;
            }
            std::array<const float*, TAPS> line{};
            std::array<float, TAPS> wy{};
            int used = 0;
            for (int k = 0; k < TAPS; ++k) {
                const size_t at = static_cast<size_t>(oh * TAPS + k);
                if (th.w[at] == 0.0f) continue;
                const int64_t ih = th.idx[at], slot = ih % TAPS, id = p * hin + ih;
                float* cached = cache.data() + slot * wout;
                if (key[static_cast<size_t>(slot)] != id) {
                    interp_row<TAPS>(tw, x + id * win, cached, wout);
                    key[static_cast<size_t>(slot)] = id;
                }
                line[static_cast<size_t>(used)] = cached;
                wy[static_cast<size_t>(used)] = th.w[at];
                ++used;
            }
            // Fixed tap counts so the vertical combine vectorises.
            const float *l0 = line[0], *l1 = line[std::min(1, TAPS - 1)], *l2 = line[std::min(2, TAPS - 1)],
                        *l3 = line[std::min(3, TAPS - 1)];
            const float w0 = wy[0], w1 = wy[std::min(1, TAPS - 1)], w2 = wy[std::min(2, TAPS - 1)],
                        w3 = wy[std::min(3, TAPS - 1)];
            switch (used) {
            case 0:  // every weight rounded to 0 in fp32
                for (int64_t o = 0; o < wout; ++o) store_from_f32(dst, o, 0.0f);
                break;
            case 1:
                for (int64_t o = 0; o < wout; ++o) store_from_f32(dst, o, w0 * l0[o]);
                break;
            case 2:
                for (int64_t o = 0; o < wout; ++o) store_from_f32(dst, o, w0 * l0[o] + w1 * l1[o]);
                break;
            case 3:
                for (int64_t o = 0; o < wout; ++o) store_from_f32(dst, o, w0 * l0[o] + w1 * l1[o] + w2 * l2[o]);
                break;
            default:
                for (int64_t o = 0; o < wout; ++o)
                    store_from_f32(dst, o, w0 * l0[o] + w1 * l1[o] + w2 * l2[o] + w3 * l3[o]);
            }
            if (any_col_out)
                for (int64_t o = 0; o < wout; ++o)
                    if (tw.outside[static_cast<size_t>(o)]) store_from_f32(dst, o, fill);
        }
    });
}

// Any axes: every output element sums the product of its axes' taps.
template <typename T>
void resize_nd(const std::vector<AxisTable>& tab, const TensorRef& xt, const TensorRef& yt, float fill,
               ThreadPool& pool) {
    const int r = xt.rank;
    const size_t last = static_cast<size_t>(r - 1);
    const int64_t wout = yt.dim(r - 1);
    const std::array<int64_t, kMaxRank> xs = ops::strides_of(xt);
    int64_t rows = 1, combos_max = 1;
    for (int d = 0; d + 1 < r; ++d) {
        rows *= yt.dim(d);
        combos_max *= tab[static_cast<size_t>(d)].taps;
    }
    const T* x = xt.as<const T>();
    T* y = yt.as<T>();
    const AxisTable& tl = tab[last];
    const int tl_taps = tl.taps;
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(wout * combos_max), [&](size_t first, size_t end) {
        std::vector<int64_t> coff(static_cast<size_t>(combos_max));
        std::vector<float> cw(static_cast<size_t>(combos_max));
        for (size_t row = first; row < end; ++row) {
            T* dst = y + static_cast<int64_t>(row) * wout;
            int64_t rest = static_cast<int64_t>(row);
            std::array<int64_t, kMaxRank> idx{};
            bool outside = false;
            for (int d = r - 2; d >= 0; --d) {
                idx[static_cast<size_t>(d)] = rest % yt.dim(d);
                rest /= yt.dim(d);
                outside = outside ||
                          tab[static_cast<size_t>(d)].outside[static_cast<size_t>(idx[static_cast<size_t>(d)])];
            }
            if (outside) {
                for (int64_t o = 0; o < wout; ++o) store_from_f32(dst, o, fill);
                continue;
            }
            // Offsets and weights of every combination of the leading axes' taps.
            size_t count = 1;
            coff[0] = 0;
            cw[0] = 1.0f;
            for (int d = 0; d + 1 < r; ++d) {
                const AxisTable& t = tab[static_cast<size_t>(d)];
                const size_t taps = static_cast<size_t>(t.taps),
                             at = static_cast<size_t>(idx[static_cast<size_t>(d)]) * taps;
                for (size_t c = count; c-- > 0;) {
                    const int64_t off = coff[c];
                    const float w = cw[c];
                    for (size_t k = taps; k-- > 0;) {
                        coff[c * taps + k] = off + t.idx[at + k] * xs[static_cast<size_t>(d)];
                        cw[c * taps + k] = w * t.w[at + k];
                    }
                }
                count *= taps;
            }
            for (int64_t o = 0; o < wout; ++o) {
                if (tl.outside[static_cast<size_t>(o)]) {
                    store_from_f32(dst, o, fill);
                    continue;
                }
                float acc = 0;
                for (size_t c = 0; c < count; ++c) {
                    if (cw[c] == 0.0f) continue;
                    const T* src = x + coff[c];
                    float v = 0;
                    for (int k = 0; k < tl_taps; ++k)
                        v += tl.w[static_cast<size_t>(o * tl_taps + k)] *
                             load_as_f32(src, tl.idx[static_cast<size_t>(o * tl_taps + k)]);
                    acc += cw[c] * v;
                }
                store_from_f32(dst, o, acc);
            }
        }
    });
}

template <typename T>
void resize_typed(const Args& a, const TensorRef& x, const TensorRef& y, ThreadPool& pool) {
    const int r = x.rank;
    std::vector<AxisTable> tab;
    for (int d = 0; d < r; ++d) tab.push_back(make_axis(a, static_cast<size_t>(d), x.dim(d), y.dim(d)));
    bool lead_identity = true;
    int64_t planes = 1;
    for (int d = 0; d + 2 < r; ++d) {
        lead_identity = lead_identity && tab[static_cast<size_t>(d)].identity;
        planes *= x.dim(d);
    }
    const float fill = static_cast<float>(a.extrapolation);
    if (!lead_identity) {
        resize_nd<T>(tab, x, y, fill, pool);
        return;
    }
    // The H axis of a 1-D resize is a size-1 identity with the same number of taps.
    Args one = a;
    one.has_scales = false;
    one.coord = ASYMMETRIC;
    one.scale[0] = 1.0;
    const AxisTable th = r >= 2 ? tab[static_cast<size_t>(r - 2)] : make_axis(one, 0, 1, 1);
    const AxisTable& tw = tab[static_cast<size_t>(r - 1)];
    const int64_t hin = r >= 2 ? x.dim(r - 2) : 1, win = x.dim(r - 1);
    const T* xs = x.as<const T>();
    T* ys = y.as<T>();
    if (a.mode == NEAREST) {
        using U = std::conditional_t<std::is_same_v<T, f16>, uint16_t, uint32_t>;
        U bits;
        if constexpr (std::is_same_v<T, f16>) bits = f32_to_f16(fill).bits;
        else std::memcpy(&bits, &fill, sizeof bits);
        nearest_2d<U>(th, tw, planes, hin, win, reinterpret_cast<const U*>(xs), reinterpret_cast<U*>(ys), bits, pool);
    } else if (a.mode == LINEAR) {
        interp_2d<2, T>(th, tw, planes, hin, win, xs, ys, fill, pool);
    } else {
        interp_2d<4, T>(th, tw, planes, hin, win, xs, ys, fill, pool);
    }
}

Status resize_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (y.elements() == 0) return {};
    if (a.dtype == DType::F16) resize_typed<f16>(a, x, y, pool);
    else resize_typed<float>(a, x, y, pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_resize;
const KernelDef kernel_resize = {"resize", resize_work, resize_cost, resize_run};

}  // namespace loom::device
