// pool: max or average pooling over sliding windows (ONNX MaxPool / AveragePool). X is
// N x C x D1 [x D2 [x D3]] (1-D, 2-D or 3-D spatial), f32 or f16, the same for Y (f16 computed
// in fp32, rounded once). Per spatial axis, with extent e = (kernel - 1) * dilation + 1:
//   out = floor((in + pad_begin + pad_end - e) / stride) + 1        (ceil with ceil_mode = 1,
//   and then one less if the last window would start past the input and the begin padding)
// Window o of an axis covers in-positions o * stride - pad_begin + t * dilation, t < kernel.
// Attributes: op = "max" or "avg" (required); kernel_shape (required); strides (default 1s);
// pads ([begins..., ends...], default 0s, >= 0); dilations (default 1s); ceil_mode (0/1);
// count_include_pad (avg only, 0/1: divide by the taps inside input + padding, as onnxruntime
// and PyTorch do, instead of the taps inside the input); auto_pad = NOTSET (default), VALID,
// SAME_UPPER or SAME_LOWER (instead of pads, without ceil_mode). A window that holds no input
// position (pads or dilations too large) is refused.
// Cost: every input byte is read from GM about once (overlapping windows are served from UB),
// at most `taps` inputs per output when stride > kernel; the Vector unit makes one pass per
// window tap (a max or an add) plus a divide for avg, plus two passes to widen and narrow f16.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/move_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

// One spatial axis. Pooling is done as 3-D; the leading axes of 1-D and 2-D pooling are size-1
// identities (kernel 1, stride 1, no padding).
struct Axis {
    int64_t in = 1, out = 1, k = 1, s = 1, d = 1, pb = 0, pe = 0;
};

struct Args {
    bool avg = false, count_include_pad = false;
    int sp = 0;
    std::array<Axis, 3> ax{};
    int64_t planes = 0;
    DType dtype = DType::F32;
};

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Taps t < k of window o whose position lies in [lo, hi): first tap and count.
std::pair<int64_t, int64_t> taps_in(const Axis& x, int64_t o, int64_t lo, int64_t hi) {
    const int64_t start = o * x.s - x.pb;
    const int64_t t0 = start >= lo ? 0 : (lo - start + x.d - 1) / x.d;
    const int64_t t1 = hi - 1 - start >= 0 ? std::min(x.k, floor_div(hi - 1 - start, x.d) + 1) : 0;
    return {t0, std::max<int64_t>(0, t1 - t0)};
}

Result<std::vector<int64_t>> ints_of(const KernelAttrs& attrs, const char* name, size_t n, int64_t fallback,
                                     int64_t min) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> v, attrs.get_ints(name, std::vector<int64_t>(n, fallback)));
    if (v.size() != n)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' has {} values, expected {}", name, v.size(), n);
    for (int64_t e : v)
        if (e < min)
            return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' = [{}] has a value below {}", name,
                              fmt::join(v, ", "), min);
    return v;
}

Result<Args> check_args(const KernelLaunch& l) {
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    LOOM_TRY(l.attrs.check_known(
        {"op", "kernel_shape", "strides", "pads", "dilations", "ceil_mode", "count_include_pad", "auto_pad"}));
    LOOM_ASSIGN_OR_RETURN(std::string op, l.attrs.get_string("op"));
    if (op != "max" && op != "avg")
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'op' = '{}' (max or avg)", op);
    if (!ops::is_float(x.dtype))
        return make_error(StatusCode::UNSUPPORTED, "dtype {} (f32 and f16 are supported)", dtype_name(x.dtype));
    LOOM_TRY(move::check_dtypes(l, x.dtype));
    if (x.rank < 3 || x.rank > 5)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "input 0 is {}, needs rank 3, 4 or 5 (N x C x 1 to 3 spatial dims)", ops::shape_str(x));
    Args a;
    a.avg = op == "avg";
    a.sp = x.rank - 2;
    a.dtype = x.dtype;
    a.planes = x.dim(0) * x.dim(1);
    const size_t sp = static_cast<size_t>(a.sp);
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, l.attrs.get_ints("kernel_shape"));
    if (kernel.size() != sp)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "attribute 'kernel_shape' has {} values, input 0 ({}) has {} spatial dims", kernel.size(),
                          ops::shape_str(x), sp);
    LOOM_TRY(ints_of(l.attrs, "kernel_shape", sp, 1, 1).status());
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> strides, ints_of(l.attrs, "strides", sp, 1, 1));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dilations, ints_of(l.attrs, "dilations", sp, 1, 1));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> pads, ints_of(l.attrs, "pads", 2 * sp, 0, 0));
    LOOM_ASSIGN_OR_RETURN(int64_t ceil_mode, l.attrs.get_int("ceil_mode", 0));
    LOOM_ASSIGN_OR_RETURN(int64_t cip, l.attrs.get_int("count_include_pad", 0));
    LOOM_ASSIGN_OR_RETURN(std::string auto_pad, l.attrs.get_string("auto_pad", "NOTSET"));
    if (ceil_mode != 0 && ceil_mode != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'ceil_mode' = {} (0 or 1)", ceil_mode);
    if (cip != 0 && cip != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'count_include_pad' = {} (0 or 1)", cip);
    if (!a.avg && l.attrs.has("count_include_pad"))
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'count_include_pad' is for op 'avg', not 'max'");
    a.count_include_pad = cip == 1;
    if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "attribute 'auto_pad' = '{}' (NOTSET, VALID, SAME_UPPER or SAME_LOWER)", auto_pad);
    if (auto_pad != "NOTSET" && (l.attrs.has("pads") || ceil_mode))
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'auto_pad' = '{}' excludes 'pads' and 'ceil_mode'",
                          auto_pad);
    std::vector<int64_t> want = {x.dim(0), x.dim(1)};
    for (size_t i = 0; i < sp; ++i) {
        Axis& ax = a.ax[3 - sp + i];
        ax.in = x.dim(static_cast<int>(i) + 2);
        ax.k = kernel[i];
        ax.s = strides[i];
        ax.d = dilations[i];
        ax.pb = pads[i];
        ax.pe = pads[i + sp];
        // Strides and pads past 2^31 describe no real pooling and would overflow the extent
        // arithmetic below (padded size, ceil-mode rounding).
        if (ax.s > (int64_t{1} << 31) || ax.pb > (int64_t{1} << 31) || ax.pe > (int64_t{1} << 31))
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "strides {} or pads {} and {} of spatial axis {} are too large (at most 2^31)", ax.s,
                              ax.pb, ax.pe, i);
        if (ax.k > (int64_t{1} << 31) / ax.d)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "kernel_shape {} x dilation {} of spatial axis {} is too large", ax.k, ax.d, i);
        const int64_t extent = (ax.k - 1) * ax.d + 1;
        if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
            const int64_t out = (ax.in + ax.s - 1) / ax.s;
            const int64_t total = std::max<int64_t>(0, (out - 1) * ax.s + extent - ax.in);
            ax.pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
            ax.pe = total - ax.pb;
        }
        const int64_t padded = ax.in + ax.pb + ax.pe;
        if (padded < extent)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "spatial axis {}: the padded input ({}) is smaller than the window extent ({})", i,
                              padded, extent);
        const int64_t span = padded - extent;
        ax.out = (ceil_mode ? (span + ax.s - 1) / ax.s : span / ax.s) + 1;
        if (ceil_mode && (ax.out - 1) * ax.s >= ax.in + ax.pb) --ax.out;
        for (int64_t o = 0; o < ax.out; ++o)
            if (taps_in(ax, o, 0, ax.in).second == 0)
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "spatial axis {}: window {} covers no input position (pads {} and {}, kernel {}, "
                                  "dilation {}, input {})",
                                  i, o, ax.pb, ax.pe, ax.k, ax.d, ax.in);
        want.push_back(ax.out);
    }
    LOOM_TRY(move::check_shape(y, want, "output 0"));
    return a;
}

Result<Args> check(const KernelLaunch& l) { return ops::check_launch(l, "pool", 1, 1, 1, check_args); }

Result<KernelWork> pool_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    const double b = static_cast<double>(dtype_size(a.dtype));
    double taps = 1;
    for (const Axis& ax : a.ax) taps *= static_cast<double>(ax.k);
    const double n_out = static_cast<double>(y.elements()), n_in = static_cast<double>(x.elements());
    const double reads = n_out > 0 ? std::min(n_in / n_out, taps) : 1.0;  // inputs per output from GM
    cost::VectorWork w;
    w.elements = y.elements();
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = b * reads;
    w.out_bytes = b;
    w.vector_passes = taps + (a.avg ? 1 : 0) + (a.dtype == DType::F16 ? 2 : 0);
    w.flops = taps + (a.avg ? 1 : 0);
    // The input tile is `reads` times the output tile; past 8 the window rows stream through.
    w.ub_buffers = 1 + std::min<int64_t>(8, static_cast<int64_t>(std::ceil(reads)));
    return cost::vector_work(w);
}

Result<CycleBreakdown> pool_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(pool_work(l, s), l.tiling, s, "pool");
}

// Per axis and output index: input position of the first tap inside the input, the number of
// such taps, and the divisor share (taps inside the input, or inside input + padding).
struct Table {
    std::vector<int64_t> first, taps, count;
};

Table make_table(const Axis& ax, bool count_include_pad) {
    Table t;
    const size_t n = static_cast<size_t>(ax.out);
    t.first.resize(n);
    t.taps.resize(n);
    t.count.resize(n);
    for (int64_t o = 0; o < ax.out; ++o) {
        auto [t0, taps] = taps_in(ax, o, 0, ax.in);
        const size_t ou = static_cast<size_t>(o);
        t.first[ou] = o * ax.s - ax.pb + t0 * ax.d;
        t.taps[ou] = taps;
        t.count[ou] = count_include_pad ? taps_in(ax, o, -ax.pb, ax.in + ax.pe).second : taps;
    }
    return t;
}

void pool_rows(const Args& a, const float* x, float* y, ThreadPool& pool) {
    const Axis &ad = a.ax[0], &ah = a.ax[1], &aw = a.ax[2];
    const Table td = make_table(ad, a.count_include_pad), th = make_table(ah, a.count_include_pad),
                tw = make_table(aw, a.count_include_pad);
    const int64_t plane_in = ad.in * ah.in * aw.in, ow = aw.out;
    const int64_t rows = a.planes * ad.out * ah.out;
    const bool avg = a.avg;
    pool.parallel_for(static_cast<size_t>(rows), move::row_grain(ow), [&](size_t first, size_t last) {
        for (size_t row = first; row < last; ++row) {
            const int64_t r = static_cast<int64_t>(row);
            const size_t oh = static_cast<size_t>(r % ah.out), od = static_cast<size_t>((r / ah.out) % ad.out);
            const float* plane = x + (r / (ah.out * ad.out)) * plane_in;
            float* dst = y + r * ow;
            const int64_t d0 = td.first[od], nd = td.taps[od], h0 = th.first[oh], nh = th.taps[oh];
            const int64_t count_dh = td.count[od] * th.count[oh];
            for (size_t o = 0; o < static_cast<size_t>(ow); ++o) {
                const int64_t w0 = tw.first[o], nw = tw.taps[o], dw = aw.d;
                float acc = avg ? 0.0f : -std::numeric_limits<float>::infinity();
                for (int64_t i = 0; i < nd; ++i)
                    for (int64_t j = 0; j < nh; ++j) {
                        const float* src = plane + ((d0 + i * ad.d) * ah.in + h0 + j * ah.d) * aw.in + w0;
                        if (avg)
                            for (int64_t k = 0; k < nw; ++k) acc += src[k * dw];
                        else
                            for (int64_t k = 0; k < nw; ++k) acc = std::max(acc, src[k * dw]);
                    }
                dst[o] = avg ? acc / static_cast<float>(count_dh * tw.count[o]) : acc;
            }
        }
    });
}

Status pool_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (y.elements() == 0) return {};
    if (a.dtype == DType::F32) {
        pool_rows(a, x.as<const float>(), y.as<float>(), pool);
        return {};
    }
    // f16: widen the input once, pool in fp32, narrow once.
    std::vector<float> xf(static_cast<size_t>(x.elements())), yf(static_cast<size_t>(y.elements()));
    const f16* xh = x.as<const f16>();
    f16* yh = y.as<f16>();
    pool.parallel_for(xf.size(), move::kGrain, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) xf[i] = f16_to_f32(xh[i]);
    });
    pool_rows(a, xf.data(), yf.data(), pool);
    pool.parallel_for(yf.size(), move::kGrain, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) yh[i] = f32_to_f16(yf[i]);
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_pool;
const KernelDef kernel_pool = {"pool", pool_work, pool_cost, pool_run};

}  // namespace loom::device
