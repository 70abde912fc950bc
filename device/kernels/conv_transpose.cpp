// conv_transpose: ONNX ConvTranspose (1-D and 2-D, NCHW) with the epilogue the compiler fuses
// into it, as conv has:
//   Y = act(conv_transpose(X, W) + B [+ R]) [+ R]
// Inputs: X [N, C, (H,) W], W [C, K/group, (kh,) kw], then optional (absent or empty): B [K],
// R (residual, Y's shape), S (prelu slopes: 1 or K values), WS (W's scales, with an i8 W).
// Output: Y [N, K, (Ho,) Wo] with
//   Ho = sh * (H - 1) + output_padding + (kh - 1) * dh + 1 - pad_top - pad_bottom
// Attributes: group, kernel_shape, strides, dilations, pads, auto_pad, output_padding,
// output_shape (ONNX), activation (none, relu, leaky_relu + alpha, prelu, clip + min/max,
// sigmoid, hard_swish), residual_after_activation (0: R is added before the activation, 1: after),
// x_scale (with an i8 W).
// output_shape sets the pads as the ONNX spec says (SAME_UPPER puts the odd one at the end, NOTSET
// and SAME_LOWER at the start); an output_shape beyond the unpadded size extends Y at the end,
// as in the spec's own example, and excludes explicit pads.
// Dtypes: all f32, or all f16 (stored f16, computed with fp32 accumulation, rounded once).
// int8: W may be i8 with WS (f32, 1 value or K, indexed by the output channel k over all groups)
// and x_scale > 0. X (f32 or f16, Y's dtype) is quantized once per launch, q =
// clamp(nearbyint(x / x_scale), -127, 127); each output's sum over the input channels of its
// group and the kernel taps that reach it is exact int32 (C/group x kh x kw at most 132104);
// then x_scale x WS[k] x sum, and the epilogue as for float.
//
// Host: per image and group, cols = W_g^T x X_g by cpu::gemm (M = K/group x kernel area, N = input
// pixels, K = C/group; W_g^T read through MatView strides, packed once per launch), in blocks of
// input rows that bound the scratch; then col2im scatter-adds cols into Y, in parallel over output
// channels, and each channel's epilogue (bias, activation, residual) runs once its last block
// is in. int8 runs the GEMM on the int8 GEMM (cpu/gemm_i8.hpp: X quantized to int8 once per
// launch, W's own int8 values, exact int32 sums); its outputs go to fp32 cols and col2im adds
// them in fp32, exact while an output's sum has at most cpu::kGemmExactK products (C/group x kh
// x kw); longer ones keep the GEMM's int32 sums and col2im into int32 planes, converted per
// channel before the epilogue.
// NPU cost: the Cube runs one GEMM per image and group (m = H x W input pixels, n = K/group x
// kernel area, k = C/group; batch = N x group), and col2im is the epilogue: one Vector pass per
// GEMM output to add it into Y (an atomic accumulate on the way out, whose read of the fp32 partial
// sums costs 4 more bytes per output when the kernel windows overlap, span > stride), plus the bias,
// activation, residual and cast passes over Y, scaled by Y's size over the GEMM output's; int8 as
// CubeWork::int8 (col2im adds int32) plus a dequantize pass over Y.
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/cpu/direct_conv.hpp"
#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/gemm_i8.hpp"
#include "device/kernels/cpu/vmath.hpp"
#include "device/kernels/cpu/winograd.hpp"
#include "device/kernels/cpu/winograd_i8.hpp"
#include "device/kernels/cube_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct ConvT : ops::ConvShape {
    ops::Quant q;

    int64_t taps() const { return g.kh * g.kw; }
    bool overlap() const { return (g.kh - 1) * g.dh + 1 > g.sh || (g.kw - 1) * g.dw + 1 > g.sw; }
    // Every output pixel takes exactly one tap of one input pixel (the U-Nets' 2x2 stride-2
    // upsampling): kernel = stride, no dilation, no pads, output = input x stride.
    bool tiles_exactly() const {
        return g.kh == g.sh && g.kw == g.sw && g.dh == 1 && g.dw == 1 && g.pad_top == 0 && g.pad_left == 0 &&
               Ho == H * g.sh && Wo == W * g.sw;
    }
};

// Reads the geometry; with output_shape, computes the pads from it (see the header) and leaves
// the rest to parse_conv_geometry.
Result<ops::ConvGeometry> geometry(const KernelAttrs& attrs, int spatial, int64_t kh, int64_t kw, int64_t H, int64_t W,
                                   int64_t Ho, int64_t Wo) {
    if (!attrs.has("output_shape")) return ops::parse_conv_geometry(attrs, spatial, kh, kw, H, W, true, Ho, Wo);
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> os, attrs.get_ints("output_shape"));
    LOOM_ASSIGN_OR_RETURN(std::string auto_pad, attrs.get_string("auto_pad", "NOTSET"));
    const size_t n = static_cast<size_t>(spatial);
    if (attrs.has("pads"))
        return make_error(StatusCode::INVALID_ARGUMENT, "attributes 'pads' and 'output_shape' exclude each other");
    if (auto_pad == "VALID")
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "attributes 'output_shape' and auto_pad 'VALID' exclude each other");
    if (os.size() != n && os.size() != n + 2)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'output_shape' needs {} values, got {}", n,
                          os.size());
    const std::vector<int64_t> out = spatial == 1 ? std::vector<int64_t>{Wo} : std::vector<int64_t>{Ho, Wo};
    if (std::vector<int64_t>(os.end() - static_cast<std::ptrdiff_t>(n), os.end()) != out)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "attribute 'output_shape' disagrees with the output tensor's spatial sizes");
    KernelAttrs rest;
    for (const auto& [name, value] : attrs.items())
        if (name != "output_shape" && name != "auto_pad") rest.set(name, value);
    LOOM_ASSIGN_OR_RETURN(ops::ConvGeometry g, ops::parse_conv_geometry(rest, spatial, kh, kw, H, W, true, Ho, Wo));
    auto pads = [&](int64_t in, int64_t k, int64_t s, int64_t d, int64_t op, int64_t o, int64_t& begin, int64_t& end) {
        const int64_t total = s * (in - 1) + op + (k - 1) * d + 1 - o;
        if (total < 0) begin = 0;  // a larger output grows at the end
        else begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        end = total - begin;
    };
    pads(W, g.kw, g.sw, g.dw, g.out_pad_w, Wo, g.pad_left, g.pad_right);
    if (spatial == 2) pads(H, g.kh, g.sh, g.dh, g.out_pad_h, Ho, g.pad_top, g.pad_bottom);
    return g;
}

Result<ConvT> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "conv_transpose", 2, 6, 1));
    const TensorRef &x = l.inputs[0], &w = l.inputs[1], &y = l.outputs[0];
    if (x.rank != 3 && x.rank != 4)
        return make_error(StatusCode::UNSUPPORTED,
                          "conv_transpose: X is {} (1-D [N,C,W] and 2-D [N,C,H,W] are supported)", ops::shape_str(x));
    if (w.rank != x.rank || y.rank != x.rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "conv_transpose: X {}, W {} and Y {} must have the same rank",
                          ops::shape_str(x), ops::shape_str(w), ops::shape_str(y));
    LOOM_TRY(ops::check_float_operands(l, "conv_transpose"));
    ConvT c;
    c.dtype = x.dtype;
    const int spatial = x.rank - 2;
    c.N = x.dim(0), c.C = x.dim(1), c.W = x.dim(x.rank - 1), c.H = spatial == 2 ? x.dim(2) : 1;
    const int64_t kh = spatial == 2 ? w.dim(2) : 1, kw = w.dim(w.rank - 1);
    c.Ho = spatial == 2 ? y.dim(2) : 1, c.Wo = y.dim(y.rank - 1);
    LOOM_TRY(
        l.attrs
            .check_known({"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "output_padding",
                          "output_shape", "activation", "alpha", "min", "max", "residual_after_activation", "x_scale"})
            .with_context("conv_transpose"));
    auto g = geometry(l.attrs, spatial, kh, kw, c.H, c.W, c.Ho, c.Wo);
    if (!g.ok()) return g.status().with_context("conv_transpose");
    c.g = *g;
    c.K = w.dim(1) * c.g.group;
    if (w.dim(0) != c.C || c.C % c.g.group)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "conv_transpose: X has {} channels and W is {} with group {} (W must be [C, K / group, ...] "
                          "and group must divide C)",
                          c.C, ops::shape_str(w), c.g.group);
    if (x.elements() == 0 || w.elements() == 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "conv_transpose: empty X {} or W {}", ops::shape_str(x),
                          ops::shape_str(w));
    const int64_t ho = c.g.sh * (c.H - 1) + c.g.out_pad_h + (kh - 1) * c.g.dh + 1 - c.g.pad_top - c.g.pad_bottom;
    const int64_t wo = c.g.sw * (c.W - 1) + c.g.out_pad_w + (kw - 1) * c.g.dw + 1 - c.g.pad_left - c.g.pad_right;
    if (ho < 1 || wo < 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "conv_transpose: the pads leave an empty output ({}x{})", ho,
                          wo);
    LOOM_TRY(ops::check_conv_output(c, ho, wo, x, w, y, "conv_transpose"));
    LOOM_ASSIGN_OR_RETURN(static_cast<ops::ChannelEpilogue&>(c),
                          ops::parse_channel_epilogue(l, "conv_transpose", c.K, c.dtype, y));
    LOOM_ASSIGN_OR_RETURN(c.q, ops::parse_quant(l, "conv_transpose", "W", "WS", 5, "K", c.K));
    if (c.q.on()) LOOM_TRY(ops::check_int8_reduction(c.cg() * kh * kw, "conv_transpose", "C/group x kh x kw"));
    return c;
}

Result<KernelWork> conv_transpose_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(ConvT c, check(l));
    const double elem = static_cast<double>(dtype_size(c.dtype));
    cost::CubeWork w;
    w.m = c.H * c.W;
    w.n = c.kg() * c.taps();
    w.k = c.cg();
    w.batch = c.N * c.g.group;
    w.dtype = c.dtype;
    w.int8 = c.q.on();
    // Y elements per GEMM output element: the epilogue proper runs over Y, not over cols.
    const double y_per_col = static_cast<double>(c.Ho * c.Wo) / static_cast<double>(w.m * c.taps());
    const double y_passes = ops::epilogue_passes(c.act, c.dtype,
                                                 (c.bias ? 1 : 0) + (c.residual ? 1 : 0) + (c.q.on() ? 1 : 0));
    w.epilogue_passes = 1 + y_per_col * y_passes;
    w.epilogue_in_bytes = (c.overlap() ? 4.0 : 0.0) + (c.residual ? y_per_col * elem : 0.0);
    return cost::cube_work(w);
}

Result<CycleBreakdown> conv_transpose_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(conv_transpose_work(l, s), l.tiling, s, "conv_transpose");
}

// The GEMM rows of output channel k into its plane yk when the kernel tiles the output exactly:
// each output row of input rows iy0..iy0+rows is written whole (0 + the one tap, as the
// accumulating col2im_channel computes it on a zeroed plane) and goes through the epilogue while
// it is in cache, so the plane is neither zeroed first nor read again.
// An fp16 plane (yh) gets each row rounded once from `row` (Wo floats), after the epilogue; with
// `stream`, an fp32 plane gets it copied from `row` with non-temporal stores (the caller fences).
// Input rows r_lo..r_hi-1 of the block only (their output rows belong to no other input row).
void col2im_exact_channel(const ConvT& c, const float* cols, int64_t ncols, int64_t k, int64_t kglob, int64_t iy0,
                          int64_t r_lo, int64_t r_hi, const cpu::Epilogue& ep, float* yk, f16* yh, float* row,
                          bool stream = false) {
    const int64_t sh = c.g.sh, sw = c.g.sw;
    for (int64_t r = r_lo; r < r_hi; ++r)
        for (int64_t ky = 0; ky < sh; ++ky) {
            const int64_t oy = (iy0 + r) * sh + ky;
            float* dst = yh || stream ? row : yk + oy * c.Wo;
            const float* src = cols + (k * sh + ky) * sw * ncols + r * c.W;
            if (sw == 2) {  // both taps of a pixel side by side, the row written once
                const float* s1 = src + ncols;
                for (int64_t ix = 0; ix < c.W; ++ix) dst[2 * ix] = 0.0f + src[ix], dst[2 * ix + 1] = 0.0f + s1[ix];
            } else {
                for (int64_t kx = 0; kx < sw; ++kx)
                    for (int64_t ix = 0; ix < c.W; ++ix) dst[ix * sw + kx] = 0.0f + src[kx * ncols + ix];
            }
            cpu::apply_epilogue(ep, dst, kglob, oy * c.Wo, c.Wo);
            if (yh) cpu::vec_f32_to_f16(row, yh + oy * c.Wo, c.Wo);
            else if (stream) cpu::vec_copy_streamed(row, yk + oy * c.Wo, c.Wo);
        }
}

// Adds the GEMM rows of output channel k (cols rows (k, ky, kx), columns = input pixels of rows
// iy0..iy0+rows) into output rows oy_lo..oy_hi-1 of its plane yk (float, or int32 for int8).
// Every output value takes its taps in (ky, kx) order whichever rows a call covers, so splitting
// the plane into bands of rows changes no bits.
template <typename T>
void col2im_channel(const ConvT& c, const T* cols, int64_t ncols, int64_t k, int64_t iy0, int64_t rows, T* yk,
                    int64_t oy_lo, int64_t oy_hi) {
    const ops::ConvGeometry& g = c.g;
    for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx) {
            const T* cr = cols + ((k * g.kh + ky) * g.kw + kx) * ncols;
            const int64_t off = kx * g.dw - g.pad_left;
            // ix range with 0 <= ix * sw + off < Wo
            const int64_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
            const int64_t hi = c.Wo - off > 0 ? std::min(c.W, (c.Wo - off - 1) / g.sw + 1) : 0;
            for (int64_t r = 0; r < rows; ++r) {
                const int64_t oy = (iy0 + r) * g.sh + ky * g.dh - g.pad_top;
                if (oy < oy_lo || oy >= oy_hi) continue;
                const T* src = cr + r * c.W;
                T* dst = yk + oy * c.Wo;
                if (g.sw == 1)
                    for (int64_t ix = lo; ix < hi; ++ix) dst[ix + off] += src[ix];
                else
                    for (int64_t ix = lo; ix < hi; ++ix) dst[ix * g.sw + off] += src[ix];
            }
        }
}

// ---- the sub-pixel form (host) ------------------------------------------------------------------
// A transposed conv whose kernel spans more than one stride and at most three (s < k <= 3 s on
// both axes), without dilation or groups, is a 3x3 conv over X into K x sh x sw channels, one
// per output phase, followed by a shuffle. Along one axis, with u = o + pad_begin, q = u / s and
// r = u % s, output o takes the taps s j + r of the input pixels q - j:
//   y[o] = sum_{j=0..2} x[q - j] w[s j + r]       (w = 0 past the kernel)
//        = z[r][q - q0],   z[r][n] = sum_{jj=0..2} x[n + q0 - 2 + jj] w[s (2 - jj) + r],
// q0 = floor(pad_begin / s): a 3x3 conv with 2 - q0 rows of padding before. The 3x3 conv runs on
// the Winograd path: its GEMMs cost C x K x sh x sw x 1.8-2.3 multiply-adds per input pixel
// against the im2col GEMM's C x K x kh x kw (Real-CUGAN's and waifu2x's 4x4 stride-2 kernels:
// 7-9 against 16), and nothing is scattered; the shuffle writes Y's rows whole, through the
// epilogue. With at most cpu::kDirectBlockK phase channels (a last layer to RGB: 12) Winograd
// would spend its time transforming X; cpu::direct_conv runs the taps that can be non-zero
// instead, a ceil(k / s) window (2 x 2 for the 4x4 stride-2 kernels: 4 C K s^2 against the
// GEMM's 16 C K; UpConv7's last layer, 256 -> 3 at 242x322: 11.3 ms against Winograd's 16.6 and
// the GEMM's 16.9, BM_UNetResample). Where neither wins (kh x kw <= 2.25 x sh x sw, such as 3x3 at
// stride 2), or the pads put the first output past two strides, the GEMM path stays.
struct SubPixel {
    cpu::WinogradTile tile = cpu::WinogradTile::NONE;  // the 3x3 conv on Winograd
    bool direct = false;                               // or the th x tw window on cpu::direct_conv
    int64_t th = 3, tw = 3;                            // the window
    int64_t q0h = 0, q0w = 0;                          // the first output's q per axis
    cpu::Conv2dShape s;                                // the conv: C x H x W -> K sh sw x Qh x Qw

    bool int8 = false;                                 // the integer F(4,3) (with an int8 W, tile F43)
    cpu::WinogradI8PlaneShape planes{};                // int8: X's phase planes

    bool on() const { return direct || tile != cpu::WinogradTile::NONE; }
    size_t weights_floats(int64_t C) const {
        return direct ? cpu::direct_conv_weights_floats(s.K, C, th, tw) : cpu::winograd_weights_floats(tile, s.K, C);
    }
};

// The direct window runs under AVX-512 only: with AVX2's sixteen registers it keeps one vector
// of eight pixels per pass, a broadcast per multiply-add, and lost to Winograd (UpConv7's last
// layer: 27.6 ms against 17.4; AVX-512 11.3-12.3 against 16.6-17.8, BM_UNetResample).
bool direct_allowed() { return cpu::isa() == cpu::Isa::AVX512; }

// direct_ok: the direct window may run (direct_allowed()).
SubPixel sub_pixel(const ConvT& c, bool direct_ok) {
    SubPixel sp;
    const ops::ConvGeometry& g = c.g;
    auto spans = [](int64_t k, int64_t s) { return s < k && k <= 3 * s; };
    if (g.group != 1 || g.dh != 1 || g.dw != 1 || !spans(g.kh, g.sh) || !spans(g.kw, g.sw) ||
        4 * g.kh * g.kw <= 9 * g.sh * g.sw)
        return sp;
    sp.q0h = g.pad_top / g.sh, sp.q0w = g.pad_left / g.sw;
    if (sp.q0h > 2 || sp.q0w > 2) return sp;
    const int64_t K2 = c.K * g.sh * g.sw;
    // int8: the 3x3 form on the integer F(4,3), whose sums are exact (the GEMM path's bits) where
    // W's phase weights pass cpu::winograd_i8_exact (sub_pixel_i8_weights checks), for more than
    // kDirectBlockK phase channels; the GEMM below otherwise.
    sp.int8 = c.q.on();
    if (sp.int8 && K2 <= cpu::kDirectBlockK) return SubPixel{};
    sp.direct = direct_ok && !sp.int8 && K2 <= cpu::kDirectBlockK;
    if (sp.direct) sp.th = cost::ceil_div(g.kh, g.sh), sp.tw = cost::ceil_div(g.kw, g.sw);
    // Output q (from q0) reads inputs q - th + 1 .. q: the window starts th - 1 - q0 before.
    sp.s = cpu::Conv2dShape{c.C,
                            c.H,
                            c.W,
                            K2,
                            (g.pad_top + c.Ho - 1) / g.sh + 1 - sp.q0h,
                            (g.pad_left + c.Wo - 1) / g.sw + 1 - sp.q0w,
                            sp.th - 1 - sp.q0h,
                            sp.tw - 1 - sp.q0w};
    if (sp.int8) {
        sp.tile = cpu::WinogradTile::F43;
        sp.planes = cpu::winograd_i8_plane_shape(sp.s.Ho, sp.s.Wo);
        if (sp.s.pad_left + c.W > 4 * sp.planes.tq) return SubPixel{};  // X's rows must fit the planes
    } else if (!sp.direct) {
        sp.tile = cpu::winograd_tile_for(c.C, K2);
    }
    return sp;
}

// The phase conv's weights (K sh sw x C x th x tw, output channel (k, ry, rx), tap (ty, tx) =
// W's (sh (th - 1 - ty) + ry, sw (tw - 1 - tx) + rx), 0 past the kernel) from W, laid out for its
// path in `u` (SubPixel::weights_floats).
template <typename T>
void phase_weights(const ConvT& c, const SubPixel& sp, const T* w, T* wc) {
    const ops::ConvGeometry& g = c.g;
    for (int64_t k = 0; k < c.K; ++k)
        for (int64_t ry = 0; ry < g.sh; ++ry)
            for (int64_t rx = 0; rx < g.sw; ++rx) {
                const int64_t kk = (k * g.sh + ry) * g.sw + rx;
                for (int64_t ci = 0; ci < c.C; ++ci)
                    for (int64_t jy = 0; jy < sp.th; ++jy)
                        for (int64_t jx = 0; jx < sp.tw; ++jx) {
                            const int64_t ty = g.sh * (sp.th - 1 - jy) + ry, tx = g.sw * (sp.tw - 1 - jx) + rx;
                            wc[((kk * c.C + ci) * sp.th + jy) * sp.tw + jx] =
                                ty < g.kh && tx < g.kw ? w[((ci * c.K + k) * g.kh + ty) * g.kw + tx] : T{0};
                        }
            }
}

void sub_pixel_weights(const ConvT& c, const SubPixel& sp, const float* w, float* u, cpu::ScratchScope& scope) {
    const int64_t K2 = sp.s.K;
    float* wc = scope.alloc(static_cast<size_t>(K2 * c.C * sp.th * sp.tw));
    phase_weights(c, sp, w, wc);
    if (sp.direct) cpu::direct_conv_pack_weights(wc, K2, c.C, sp.th, sp.tw, u);
    else cpu::winograd_transform_weights(sp.tile, wc, K2, c.C, u);
}

// int8: the phase weights (int8, 3x3) transformed for the integer F(4,3) into `scope`, or nullptr
// when they would not keep its sums exact (then the GEMM path runs).
const int16_t* sub_pixel_i8_weights(const ConvT& c, const SubPixel& sp, const TensorRef& w, cpu::ScratchScope& scope) {
    const int64_t K2 = sp.s.K;
    int8_t* wc = scope.alloc_as<int8_t>(static_cast<size_t>(K2 * c.C * 9));
    phase_weights(c, sp, w.as<const int8_t>(), wc);
    if (!cpu::winograd_i8_exact(wc, K2, c.C)) return nullptr;
    int16_t* u = scope.alloc_as<int16_t>(cpu::winograd_i8_weights_i16(K2, c.C));
    cpu::winograd_i8_transform_weights(wc, K2, c.C, u);
    return u;
}

// Output row oy of channel k from z (K sh sw planes of Qh x Qw): y[ox] = z[(k, ry, rx)][qy - q0h]
// [qx - q0w] with qx, rx from ox + pad_left (see SubPixel).
void sub_pixel_row(const ConvT& c, const SubPixel& sp, const float* z, int64_t k, int64_t oy, float* dst) {
    const ops::ConvGeometry& g = c.g;
    const int64_t plane = sp.s.Ho * sp.s.Wo;
    const int64_t uy = oy + g.pad_top;
    // The row's start: the indices below carry the - q0w (the base shifted by it could point
    // before z).
    const float* zr = z + (k * g.sh + uy % g.sh) * g.sw * plane + (uy / g.sh - sp.q0h) * sp.s.Wo;
    if (g.sw == 2) {  // two phases interleaved
        const float *a = zr, *b = zr + plane;
        int64_t ox = 0, ux = g.pad_left;
        if (ux & 1) dst[ox++] = b[ux++ / 2 - sp.q0w];
        const int64_t pairs = (c.Wo - ox) / 2, q = ux / 2 - sp.q0w;
        for (int64_t i = 0; i < pairs; ++i) dst[ox + 2 * i] = a[q + i], dst[ox + 2 * i + 1] = b[q + i];
        if (ox + 2 * pairs < c.Wo) dst[c.Wo - 1] = a[q + pairs];
        return;
    }
    for (int64_t ox = 0; ox < c.Wo; ++ox) {
        const int64_t ux = ox + g.pad_left;
        dst[ox] = zr[ux % g.sw * plane + ux / g.sw - sp.q0w];
    }
}

// A prepared conv_transpose: the sub-pixel conv's weights, laid out once for a launch whose W is
// constant (a compiled model's weights).
struct ConvTState final : KernelState {
    struct Free {
        void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
    };
    std::unique_ptr<void, Free> memory;
    const float* u = nullptr;      // float paths
    const int16_t* u16 = nullptr;  // int8; nullptr: W's phase weights fail the exactness bound, the GEMM runs
    bool direct = false;           // u is laid out for the direct window (else for Winograd)

    ConvTState() = default;  // int8 on the GEMM: nothing to keep but that decision
    ConvTState(const void* src, size_t bytes, bool int8) : memory(::operator new(bytes, std::align_val_t(64))) {
        std::memcpy(memory.get(), src, bytes);
        if (int8) u16 = static_cast<const int16_t*>(memory.get());
        else u = static_cast<const float*>(memory.get());
    }
};

Result<std::shared_ptr<const KernelState>> conv_transpose_prepare(const KernelLaunch& l) {
    if (!l.input_constant(1)) return std::shared_ptr<const KernelState>();
    LOOM_ASSIGN_OR_RETURN(ConvT c, check(l));
    LOOM_TRY(ops::check_data(l, "conv_transpose"));
    const SubPixel sp = sub_pixel(c, direct_allowed());
    if (!sp.on()) return std::shared_ptr<const KernelState>();
    cpu::ScratchScope scope;
    if (sp.int8) {
        const int16_t* u = sub_pixel_i8_weights(c, sp, l.inputs[1], scope);
        if (!u) return std::shared_ptr<const KernelState>(std::make_shared<const ConvTState>());
        const size_t bytes = cpu::winograd_i8_weights_i16(sp.s.K, c.C) * sizeof(int16_t);
        return std::shared_ptr<const KernelState>(std::make_shared<const ConvTState>(u, bytes, true));
    }
    float* u = scope.alloc(sp.weights_floats(c.C));
    sub_pixel_weights(c, sp, ops::as_f32(l.inputs[1], scope), u, scope);
    auto state = std::make_shared<ConvTState>(u, sp.weights_floats(c.C) * sizeof(float), false);
    state->direct = sp.direct;
    return std::shared_ptr<const KernelState>(std::move(state));
}

// Per image: the 3x3 conv into z, then Y's rows from z through the epilogue, in parallel over
// (output channel, band of rows) items.
// int8: z holds the exact sums dequantized (x_scale x WS[k] for phase channel (k, ry, rx), one
// rounding, as the GEMM path's epilogue does first), and the epilogue after the shuffle has the
// rest. u16 from sub_pixel_i8_weights (or the state).
Status sub_pixel_run(const ConvT& c, const SubPixel& sp, const KernelLaunch& l, const float* u, const int16_t* u16,
                     cpu::ScratchScope& scope, ThreadPool& pool) {
    const TensorRef &xt = l.inputs[0], &yt = l.outputs[0];
    const bool half = yt.dtype == DType::F16;  // X and Y have one dtype
    const ops::ChannelEpilogueData ed = ops::channel_epilogue_f32(c, scope, pool);
    const int64_t plane_in = c.H * c.W, plane_out = c.Ho * c.Wo;
    float* z = scope.alloc(static_cast<size_t>(sp.s.K * sp.s.Ho * sp.s.Wo));
    const int8_t* planes = nullptr;
    cpu::Epilogue ez;  // the sub-pixel conv's own: int8's dequantize
    if (sp.int8) {
        planes = ops::winograd_i8_phase_planes(xt, c.N, c.C, c.H, c.W, sp.s.pad_top, sp.s.pad_left, c.q.x_scale,
                                               sp.planes, scope, pool);
        const float* dq = ops::dequant_factors(c.q, scope);
        float* dz = scope.alloc(static_cast<size_t>(sp.s.K));
        const int64_t phases = c.g.sh * c.g.sw;
        for (int64_t kk = 0; kk < sp.s.K; ++kk) dz[kk] = dq[c.q.w_scale->elements() == 1 ? 0 : kk / phases];
        ez.dequant = {dz, 1, 0};
    }
    constexpr int64_t kBandRows = 16;
    const int64_t bands = cost::ceil_div(c.Ho, kBandRows);
    for (int64_t n = 0; n < c.N; ++n) {
        const int64_t x0 = n * c.C * plane_in, y0 = n * c.K * plane_out;
        const cpu::WinogradIn xw =
            half ? cpu::WinogradIn(xt.as<const f16>() + x0) : cpu::WinogradIn(xt.as<const float>() + x0);
        if (sp.int8) {
            const int64_t bytes = static_cast<int64_t>(cpu::winograd_i8_plane_bytes(c.C, sp.planes));
            cpu::winograd_i8_conv(sp.s, {planes + n * bytes, sp.planes.rows, sp.planes.tq}, u16, z, ez, pool);
        } else if (sp.direct) {
            cpu::direct_conv(sp.s, sp.th, sp.tw, xw, u, z, pool);
        } else {
            cpu::winograd_conv(sp.tile, sp.s, xw, u, z, ez, pool);
        }
        const cpu::Epilogue ep = ops::channel_epilogue(c, ed, 0, y0, plane_out);
        pool.parallel_for(static_cast<size_t>(c.K * bands), 1, [&](size_t i0, size_t i1) {
            cpu::ScratchScope rows_scope;
            float* row = half ? rows_scope.alloc(static_cast<size_t>(c.Wo)) : nullptr;
            for (size_t item = i0; item < i1; ++item) {
                const int64_t k = static_cast<int64_t>(item) / bands;
                const int64_t lo = static_cast<int64_t>(item) % bands * kBandRows, hi = std::min(c.Ho, lo + kBandRows);
                for (int64_t oy = lo; oy < hi; ++oy) {
                    const int64_t at = y0 + k * plane_out + oy * c.Wo;
                    float* dst = half ? row : yt.as<float>() + at;
                    sub_pixel_row(c, sp, z, k, oy, dst);
                    cpu::apply_epilogue(ep, dst, k, oy * c.Wo, c.Wo);
                    if (half) cpu::vec_f32_to_f16(row, yt.as<f16>() + at, c.Wo);
                }
            }
        });
    }
    return {};
}

Status conv_transpose_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(ConvT c, check(l));
    LOOM_TRY(ops::check_data(l, "conv_transpose"));
    cpu::ScratchScope scope;
    // A prepared launch runs the path its weights were laid out for.
    const ConvTState* state = static_cast<const ConvTState*>(l.state.get());
    if (const SubPixel sp = sub_pixel(c, state ? state->direct : direct_allowed()); sp.on()) {
        if (sp.int8) {  // a state without weights decided on the GEMM
            const int16_t* u16 = state ? state->u16 : sub_pixel_i8_weights(c, sp, l.inputs[1], scope);
            if (u16) return sub_pixel_run(c, sp, l, nullptr, u16, scope, pool);
        } else {
            const float* u = state ? state->u : nullptr;
            if (!u) {
                float* w = scope.alloc(sp.weights_floats(c.C));
                sub_pixel_weights(c, sp, ops::as_f32(l.inputs[1], scope), w, scope);
                u = w;
            }
            return sub_pixel_run(c, sp, l, u, nullptr, scope, pool);
        }
    }
    const bool int8 = c.q.on();
    // int8: X quantized to int8, W's own int8 values; the GEMM's sums are exact int32. An fp16 X
    // is widened as the GEMM packs it.
    const bool x_half = !int8 && l.inputs[0].dtype == DType::F16;
    const float* x = int8 || x_half ? nullptr : ops::as_f32(l.inputs[0], scope, &pool);
    const float* w = int8 ? nullptr : ops::as_f32(l.inputs[1], scope);
    const int8_t* xq = int8 ? ops::quantize_i8(l.inputs[0], c.q.x_scale, scope, pool) : nullptr;
    const int8_t* wq = int8 ? l.inputs[1].as<const int8_t>() : nullptr;
    ops::ChannelEpilogueData ed = ops::channel_epilogue_f32(c, scope, pool);
    if (int8) ed.dequant = ops::dequant_factors(c.q, scope), ed.dequant_count = c.q.w_scale->elements();
    const TensorRef& yt = l.outputs[0];

    const int64_t plane_in = c.H * c.W, plane_out = c.Ho * c.Wo;
    const int64_t gm = c.kg() * c.taps(), gk = c.cg();  // GEMM rows (k, ky, kx) and depth (c)
    // W_g^T once per launch: row (k, ky, kx), column c is W[g * C/group + c, k, ky, kx].
    const size_t a_size = int8 ? cpu::gemm_packed_a_i16(gm, gk) : cpu::gemm_packed_a_floats(gm, gk);
    float* packed = int8 ? nullptr : scope.alloc(static_cast<size_t>(c.g.group) * a_size);
    int16_t* packed_i8 = int8 ? scope.alloc_as<int16_t>(static_cast<size_t>(c.g.group) * a_size) : nullptr;
    for (int64_t gi = 0; gi < c.g.group; ++gi) {
        if (int8) cpu::gemm_pack_a(gm, gk, cpu::MatViewI8{wq + gi * gk * gm, 1, gm}, packed_i8 + gi * a_size);
        else cpu::gemm_pack_a(gm, gk, cpu::MatView{w + gi * gk * gm, 1, gm}, packed + gi * a_size);
    }
    // int8 sums too long for fp32 to hold exactly: the GEMM's and the image's sums in int32.
    const bool i32 = int8 && gk * c.taps() > cpu::kGemmExactK;
    const bool exact = !i32 && c.tiles_exactly();
    // Where the kernel tiles the output exactly, each output row is finished at once, so an fp16
    // Y gets its rows rounded as they are written (a row of scratch per thread); else Y is
    // accumulated in fp32 and rounded at the end.
    const bool y_half = exact && yt.dtype == DType::F16;
    float* y = y_half ? nullptr : ops::f32_output(yt, scope);
    if (exact && !int8) {
        // Each input row on its own: its GEMM on one thread into a buffer that stays in L2 (K x sh
        // x sw rows of W), then its sh output rows of every channel through the epilogue. (The
        // blocks below write a 16 MiB cols buffer and read it back; here nothing leaves the cache
        // but Y, and no cols buffer is taken.)
        // A Y larger than the cache goes out with non-temporal stores (each row finished in
        // `row` first): ordinary stores would read every line of it from memory before
        // overwriting it.
        const int64_t rows_per_image = c.g.group * c.H;
        const bool stream = !y_half && static_cast<int64_t>(yt.bytes()) >= cpu::kWinogradStreamBytes;
        pool.parallel_for(static_cast<size_t>(c.N * rows_per_image), 1, [&](size_t i0, size_t i1) {
            cpu::ScratchScope rows_scope;
            float* cr = rows_scope.alloc(static_cast<size_t>(gm * c.W));
            float* row = y_half || stream ? rows_scope.alloc(static_cast<size_t>(c.Wo)) : nullptr;
            for (size_t item = i0; item < i1; ++item) {
                const int64_t n = static_cast<int64_t>(item) / rows_per_image;
                const int64_t gi = static_cast<int64_t>(item) / c.H % c.g.group, r = static_cast<int64_t>(item) % c.H;
                const int64_t x0 = (n * c.C + gi * gk) * plane_in + r * c.W;
                const float* ap = packed + gi * a_size;
                if (x_half) {
                    const cpu::MatViewF16 b{l.inputs[0].as<const f16>() + x0, plane_in, 1};
                    cpu::gemm_packed(gm, c.W, gk, ap, cpu::gemm_pack_b_strided_f16, &b, cr, c.W, cpu::Epilogue{});
                } else {
                    const cpu::MatView b{x + x0, plane_in, 1};
                    cpu::gemm_packed(gm, c.W, gk, ap, static_cast<cpu::PackB>(cpu::gemm_pack_b_strided), &b, cr, c.W,
                                     cpu::Epilogue{});
                }
                const cpu::Epilogue ep = ops::channel_epilogue(c, ed, 0, n * c.K * plane_out, plane_out);
                for (int64_t k = 0; k < c.kg(); ++k) {
                    const int64_t kglob = gi * c.kg() + k, at = (n * c.K + kglob) * plane_out;
                    col2im_exact_channel(c, cr, c.W, k, kglob, r, 0, 1, ep, y ? y + at : nullptr,
                                         y_half ? yt.as<f16>() + at : nullptr, row, stream);
                }
            }
            if (stream) cpu::stream_fence();
        });
        if (!y_half) ops::store_f32(y, yt, &pool);
        return {};
    }
    // Input rows per GEMM: cols stays within about 16 MiB.
    constexpr int64_t kColsBudget = int64_t{1} << 22;
    const int64_t block_rows = std::clamp<int64_t>(kColsBudget / std::max<int64_t>(1, gm * c.W), 1, c.H);
    const size_t cols_size = static_cast<size_t>(gm * block_rows * c.W);
    float* cols = i32 ? nullptr : scope.alloc(cols_size);
    int32_t* cols_i = i32 ? scope.alloc_as<int32_t>(cols_size) : nullptr;
    int32_t* acc = i32 ? scope.alloc_as<int32_t>(static_cast<size_t>(c.K * plane_out)) : nullptr;
    // col2im runs over (output channel, band of rows) items, so that a deconv with few output
    // channels (UpConv7's last: 3) still spreads over every thread. A band is kBandRows output
    // rows (overlapping kernels: each takes its taps from every input row that reaches it) or
    // input rows (exact tiling: each input row owns its output rows).
    constexpr int64_t kBandRows = 16;
    const int64_t bands = cost::ceil_div(exact ? block_rows : c.Ho, kBandRows);
    for (int64_t n = 0; n < c.N; ++n) {
        float* yn = y ? y + n * c.K * plane_out : nullptr;
        f16* yhn = y_half ? yt.as<f16>() + n * c.K * plane_out : nullptr;
        const cpu::Epilogue ep = ops::channel_epilogue(c, ed, 0, n * c.K * plane_out, plane_out);
        for (int64_t gi = 0; gi < c.g.group; ++gi) {
            const int64_t x0 = (n * c.C + gi * gk) * plane_in;  // this image and group's X
            for (int64_t iy0 = 0; iy0 < c.H; iy0 += block_rows) {
                const int64_t rows = std::min(block_rows, c.H - iy0), ncols = rows * c.W;
                if (int8) {
                    const cpu::MatViewI8 b{xq + x0 + iy0 * c.W, plane_in, 1};
                    const auto pack_b = static_cast<cpu::PackBI8>(cpu::gemm_pack_b_strided);
                    const int16_t* ap = packed_i8 + gi * a_size;
                    if (i32) cpu::gemm_packed(gm, ncols, gk, ap, pack_b, &b, cols_i, ncols, pool);
                    else cpu::gemm_packed(gm, ncols, gk, ap, pack_b, &b, cols, ncols, cpu::Epilogue{}, pool);
                } else if (x_half) {
                    const cpu::MatViewF16 b{l.inputs[0].as<const f16>() + x0 + iy0 * c.W, plane_in, 1};
                    cpu::gemm_packed(gm, ncols, gk, packed + gi * a_size, cpu::gemm_pack_b_strided_f16, &b, cols,
                                     ncols, cpu::Epilogue{}, pool);
                } else {
                    const cpu::MatView b{x + x0 + iy0 * c.W, plane_in, 1};
                    cpu::gemm_packed(gm, ncols, gk, packed + gi * a_size,
                                     static_cast<cpu::PackB>(cpu::gemm_pack_b_strided), &b, cols, ncols,
                                     cpu::Epilogue{}, pool);
                }
                const bool first = iy0 == 0, last = iy0 + rows == c.H;
                pool.parallel_for(static_cast<size_t>(c.kg() * bands), 1, [&](size_t i0, size_t i1) {
                    cpu::ScratchScope rows_scope;
                    float* row = y_half ? rows_scope.alloc(static_cast<size_t>(c.Wo)) : nullptr;
                    for (size_t item = i0; item < i1; ++item) {
                        const int64_t k = static_cast<int64_t>(item) / bands, kglob = gi * c.kg() + k;
                        const int64_t lo = static_cast<int64_t>(item) % bands * kBandRows;
                        float* yk = yn ? yn + kglob * plane_out : nullptr;
                        if (exact) {
                            if (lo < rows)
                                col2im_exact_channel(c, cols, ncols, k, kglob, iy0, lo, std::min(rows, lo + kBandRows),
                                                     ep, yk, yhn ? yhn + kglob * plane_out : nullptr, row);
                            continue;
                        }
                        const int64_t hi = std::min(c.Ho, lo + kBandRows);
                        const int64_t band = (hi - lo) * c.Wo;  // the band's values, from lo * Wo
                        if (i32) {
                            int32_t* ak = acc + kglob * plane_out;
                            if (first) std::fill_n(ak + lo * c.Wo, band, 0);
                            col2im_channel(c, cols_i, ncols, k, iy0, rows, ak, lo, hi);
                            if (last)
                                for (int64_t i = lo * c.Wo; i < hi * c.Wo; ++i) yk[i] = static_cast<float>(ak[i]);
                        } else {
                            if (first) std::fill_n(yk + lo * c.Wo, band, 0.0f);
                            col2im_channel(c, cols, ncols, k, iy0, rows, yk, lo, hi);
                        }
                        if (last)
                            for (int64_t oy = lo; oy < hi; ++oy)
                                cpu::apply_epilogue(ep, yk + oy * c.Wo, kglob, oy * c.Wo, c.Wo);
                    }
                });
            }
        }
    }
    if (!y_half) ops::store_f32(y, yt, &pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_conv_transpose;
const KernelDef kernel_conv_transpose = {"conv_transpose", conv_transpose_work, conv_transpose_cost,
                                         conv_transpose_run, conv_transpose_prepare};

}  // namespace loom::device
