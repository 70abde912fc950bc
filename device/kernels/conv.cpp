// conv: ONNX Conv (1-D and 2-D, NCHW) with the epilogue the compiler fuses into it:
//   Y = act(conv(X, W) + B [+ R]) [+ R]
// Inputs: X [N, C, (H,) W], W [K, C/group, (kh,) kw], then optional (absent or empty): B [K],
// R (residual, Y's shape), S (prelu slopes: 1 or K values), WS (W's scales, with an i8 W).
// Output: Y.
// Attributes: group, kernel_shape, strides, dilations, pads, auto_pad (ONNX), activation (none,
// relu, leaky_relu + alpha, prelu, clip + min/max, sigmoid, hard_swish), residual_after_activation
// (0: R is added before the activation, 1: after), x_scale (with an i8 W).
// Dtypes: all f32, or all f16 (stored f16, computed with fp32 accumulation, rounded once).
// int8: W may be i8 with WS (f32, 1 value or K, indexed by the output channel) and x_scale > 0.
// X (f32 or f16, Y's dtype) is quantized once per launch, q = clamp(nearbyint(x / x_scale),
// -127, 127); the reduction over C/group x kh x kw is exact int32 (at most 132104 products);
// then x_scale x WS[k] x sum, and the epilogue as for float.
//
// Host paths, chosen per launch: Winograd for 3x3 stride-1 dilation-1 ungrouped float convs,
// F(4x4, 3x3) or F(2x2, 3x3) by cpu::winograd_tile_for (a rule measured on C and K only; today
// F(4,3) everywhere, which beat both F(2,3) and the GEMM down to 3 channels); a direct loop for
// depthwise convs; otherwise a GEMM whose B operand is packed straight from a zero-padded copy
// of the image (im2col without the buffer or bounds checks), or the image itself for 1x1
// stride-1 unpadded convs. int8 never
// takes Winograd (its transforms are not exact): the integers run as fp32 on the GEMM paths in
// exact slices (cpu::gemm_packed_int), and on the depthwise loop when the kernel area is at
// most cpu::kGemmExactK (every fp32 sum there is exact).
// NPU cost: the Cube runs it as an implicit GEMM per image and group (m = output pixels, n =
// K / group, k = C / group x kernel area), with img2col done by MTE1 from L1 so each input byte
// comes from global memory about once; int8 as CubeWork::int8 plus a dequantize pass; depthwise
// convs run on the Vector unit (int8: plus the quantize and dequantize passes).
#include <algorithm>
#include <cstring>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/winograd.hpp"
#include "device/kernels/cube_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Conv : ops::ConvShape {
    ops::Quant q;

    bool depthwise() const {
        return g.group == C && g.group > 1 && cg() == 1 && (!q.on() || g.kh * g.kw <= cpu::kGemmExactK);
    }
    // The Winograd variant this conv runs as (NONE: another path); see cpu::winograd_tile_for.
    cpu::WinogradTile winograd() const {
        const bool eligible = !q.on() && g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 &&
                              g.dw == 1 && g.group == 1;
        return eligible ? cpu::winograd_tile_for(C, K) : cpu::WinogradTile::NONE;
    }
    bool winograd_any() const { return winograd() != cpu::WinogradTile::NONE; }
};

Result<Conv> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "conv", 2, 6, 1));
    const TensorRef &x = l.inputs[0], &w = l.inputs[1], &y = l.outputs[0];
    if (x.rank != 3 && x.rank != 4)
        return make_error(StatusCode::UNSUPPORTED, "conv: X is {} (1-D [N,C,W] and 2-D [N,C,H,W] convs are supported)",
                          ops::shape_str(x));
    if (w.rank != x.rank || y.rank != x.rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "conv: X {}, W {} and Y {} must have the same rank",
                          ops::shape_str(x), ops::shape_str(w), ops::shape_str(y));
    LOOM_TRY(ops::check_float_operands(l, "conv"));
    Conv c;
    c.dtype = x.dtype;
    const int spatial = x.rank - 2;
    c.N = x.dim(0), c.C = x.dim(1), c.W = x.dim(x.rank - 1), c.H = spatial == 2 ? x.dim(2) : 1;
    c.K = w.dim(0);
    const int64_t kh = spatial == 2 ? w.dim(2) : 1, kw = w.dim(w.rank - 1);
    c.Ho = spatial == 2 ? y.dim(2) : 1, c.Wo = y.dim(y.rank - 1);
    LOOM_TRY(l.attrs
                 .check_known({"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "activation",
                               "alpha", "min", "max", "residual_after_activation", "x_scale"})
                 .with_context("conv"));
    auto g = ops::parse_conv_geometry(l.attrs, spatial, kh, kw, c.H, c.W, false, c.Ho, c.Wo);
    if (!g.ok()) return g.status().with_context("conv");
    c.g = *g;
    if (c.C % c.g.group || c.K % c.g.group || w.dim(1) != c.C / c.g.group)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "conv: X has {} channels and W is {} with group {} (W must be [K, C / group, ...] and group "
                          "must divide C and K)",
                          c.C, ops::shape_str(w), c.g.group);
    if (kh < 1 || kw < 1) return make_error(StatusCode::INVALID_ARGUMENT, "conv: empty kernel {}", ops::shape_str(w));
    const int64_t span_h = (kh - 1) * c.g.dh + 1, span_w = (kw - 1) * c.g.dw + 1;
    const int64_t ho = (c.H + c.g.pad_top + c.g.pad_bottom - span_h) / c.g.sh + 1;
    const int64_t wo = (c.W + c.g.pad_left + c.g.pad_right - span_w) / c.g.sw + 1;
    if (c.H + c.g.pad_top + c.g.pad_bottom < span_h || c.W + c.g.pad_left + c.g.pad_right < span_w)
        return make_error(StatusCode::INVALID_ARGUMENT, "conv: the {}x{} kernel span is larger than the padded input",
                          span_h, span_w);
    LOOM_TRY(ops::check_conv_output(c, ho, wo, x, w, y, "conv"));
    LOOM_ASSIGN_OR_RETURN(static_cast<ops::ChannelEpilogue&>(c),
                          ops::parse_channel_epilogue(l, "conv", c.K, c.dtype, y));
    LOOM_ASSIGN_OR_RETURN(c.q, ops::parse_quant(l, "conv", "W", "WS", 5, "K", c.K));
    if (c.q.on()) LOOM_TRY(ops::check_int8_reduction(c.cg() * kh * kw, "conv", "C/group x kh x kw"));
    return c;
}

Result<CycleBreakdown> conv_cost(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Conv c, check(l));
    const double elem = static_cast<double>(dtype_size(c.dtype));
    // int8: the dequantize multiply is one more epilogue pass.
    const double passes =
        ops::epilogue_passes(c.act, c.dtype, (c.bias ? 1 : 0) + (c.residual ? 1 : 0) + (c.q.on() ? 1 : 0));
    if (c.depthwise()) {
        cost::VectorWork w;
        w.elements = c.N * c.K * c.Ho * c.Wo;
        w.elem_bytes = static_cast<int64_t>(elem);
        // Each input byte is fetched about once (the window's halo is re-read from UB), the
        // taps are one multiply-add pass each.
        w.in_bytes = elem * static_cast<double>(c.C * c.H * c.W) / static_cast<double>(std::max<int64_t>(1, c.K * c.Ho * c.Wo)) +
                     (c.residual ? elem : 0);
        w.out_bytes = elem;
        w.vector_passes = static_cast<double>(c.g.kh * c.g.kw) + passes;
        // int8: X is quantized once (one pass, +1 to widen f16) per input element.
        if (c.q.on())
            w.vector_passes += (c.dtype == DType::F16 ? 2.0 : 1.0) * static_cast<double>(c.C * c.H * c.W) /
                               static_cast<double>(std::max<int64_t>(1, c.K * c.Ho * c.Wo));
        w.flops = 2.0 * static_cast<double>(c.g.kh * c.g.kw);
        w.ub_buffers = 2 + (c.residual ? 1 : 0);
        return cost::vector_cost(s, w, l.tiling, "conv");
    }
    cost::CubeWork w;
    w.m = c.Ho * c.Wo;
    w.n = c.kg();
    w.k = c.cg() * c.g.kh * c.g.kw;
    w.batch = c.N * c.g.group;
    w.dtype = c.dtype;
    w.int8 = c.q.on();
    // img2col happens in MTE1 (L1 -> L0A): global memory sees the raw input, not k copies.
    w.a_gm_scale = std::min(1.0, static_cast<double>(c.cg() * c.H * c.W) / static_cast<double>(w.m * w.k));
    w.epilogue_passes = passes;
    w.epilogue_in_bytes = c.residual ? elem : 0;
    return cost::cube_cost(s, w, l.tiling, "conv");
}

// B of the conv GEMM for one image and group, read straight from the image zero-padded by the
// conv's pads (so no bounds checks): row k = (c, ky, kx), column j = output pixel (oy, ox).
struct Im2col {
    const float* x;  // [C/group planes of Hp x Wp]
    int64_t Hp, Wp, kh, kw, sh, sw, dh, dw, Wo;
};

void pack_im2col(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
    const Im2col& m = *static_cast<const Im2col*>(ctx);
    constexpr int64_t NR = cpu::kGemmNR;
    const int64_t panels = (nc + NR - 1) / NR;
    for (int64_t p = 0; p < panels; ++p) {
        const int64_t jp = j0 + p * NR, cols = std::min(NR, nc - p * NR);
        int64_t base[NR];  // offset of column jj's window corner in a padded plane
        for (int64_t jj = 0; jj < cols; ++jj) base[jj] = ((jp + jj) / m.Wo) * m.sh * m.Wp + ((jp + jj) % m.Wo) * m.sw;
        // A full panel inside one output row at stride 1 reads NR consecutive values per row of B.
        const bool run = cols == NR && m.sw == 1 && jp % m.Wo + NR <= m.Wo;
        float* d = dst + p * kc * NR;
        int64_t c = k0 / (m.kh * m.kw), ky = (k0 / m.kw) % m.kh, kx = k0 % m.kw;
        for (int64_t kk = 0; kk < kc; ++kk, d += NR) {
            const float* src = m.x + c * m.Hp * m.Wp + ky * m.dh * m.Wp + kx * m.dw;
            if (run) {
                std::memcpy(d, src + base[0], NR * sizeof(float));  // a fixed size: inlined
            } else {
                for (int64_t jj = 0; jj < cols; ++jj) d[jj] = src[base[jj]];
                for (int64_t jj = cols; jj < NR; ++jj) d[jj] = 0;
            }
            if (++kx == m.kw) {
                kx = 0;
                if (++ky == m.kh) ky = 0, ++c;
            }
        }
    }
}

// X as fp32 planes (N x C of them) with zero borders of the conv's pads; int8 quantizes it (the
// launch's one pass over X). Split over `pool` by planes.
const float* padded_input(const Conv& c, const TensorRef& xt, cpu::ScratchScope& scope, ThreadPool& pool) {
    const int64_t pt = c.g.pad_top, pb = c.g.pad_bottom, pl = c.g.pad_left, pr = c.g.pad_right;
    const int64_t Hp = c.H + pt + pb, Wp = c.W + pl + pr, planes = c.N * c.C;
    float* dst = scope.alloc(static_cast<size_t>(planes * Hp * Wp));
    const float xs = c.q.x_scale;
    const bool int8 = c.q.on(), half = xt.dtype == DType::F16;
    pool.parallel_for(static_cast<size_t>(planes), 1, [&](size_t b, size_t e) {
        for (size_t pi = b; pi < e; ++pi) {
            const int64_t plane = static_cast<int64_t>(pi);
            float* d = dst + plane * Hp * Wp;
            std::fill_n(d, pt * Wp, 0.0f);
            std::fill_n(d + (pt + c.H) * Wp, pb * Wp, 0.0f);
            for (int64_t y = 0; y < c.H; ++y) {
                float* row = d + (pt + y) * Wp;
                std::fill_n(row, pl, 0.0f);
                std::fill_n(row + pl + c.W, pr, 0.0f);
                const int64_t i0 = (plane * c.H + y) * c.W;
                float* out = row + pl;
                if (half) {
                    const f16* in = xt.as<const f16>() + i0;
                    if (int8)
                        for (int64_t i = 0; i < c.W; ++i) out[i] = ops::quantize_value(f16_to_f32(in[i]), xs);
                    else
                        for (int64_t i = 0; i < c.W; ++i) out[i] = f16_to_f32(in[i]);
                } else {
                    const float* in = xt.as<const float>() + i0;
                    if (int8)
                        for (int64_t i = 0; i < c.W; ++i) out[i] = ops::quantize_value(in[i], xs);
                    else
                        std::copy_n(in, c.W, out);
                }
            }
        }
    });
    return dst;
}

// Depthwise: one (image, channel) plane at a time; for stride 1 the inner loop over the output
// row is contiguous.
void depthwise(const Conv& c, const float* x, const float* w, float* y, const cpu::Epilogue& ep, ThreadPool& pool) {
    const int64_t mult = c.K / c.C, plane = c.Ho * c.Wo;
    pool.parallel_for(static_cast<size_t>(c.K), 1, [&](size_t b, size_t e) {
        for (size_t kk = b; kk < e; ++kk) {
            const int64_t k = static_cast<int64_t>(kk), ch = k / mult;
            const float* xc = x + ch * c.H * c.W;
            const float* wk = w + k * c.g.kh * c.g.kw;
            float* yk = y + k * plane;
            std::fill_n(yk, plane, 0.0f);
            for (int64_t oy = 0; oy < c.Ho; ++oy) {
                float* yr = yk + oy * c.Wo;
                for (int64_t ky = 0; ky < c.g.kh; ++ky) {
                    const int64_t iy = oy * c.g.sh + ky * c.g.dh - c.g.pad_top;
                    if (iy < 0 || iy >= c.H) continue;
                    const float* xr = xc + iy * c.W;
                    for (int64_t kx = 0; kx < c.g.kw; ++kx) {
                        const float wv = wk[ky * c.g.kw + kx];
                        const int64_t off = kx * c.g.dw - c.g.pad_left;
                        // ox range with 0 <= ox * sw + off < W
                        const int64_t lo = off >= 0 ? 0 : (-off + c.g.sw - 1) / c.g.sw;
                        const int64_t hi = std::min(c.Wo, c.W - off > 0 ? (c.W - off - 1) / c.g.sw + 1 : 0);
                        if (c.g.sw == 1)
                            for (int64_t ox = lo; ox < hi; ++ox) yr[ox] += wv * xr[ox + off];
                        else
                            for (int64_t ox = lo; ox < hi; ++ox) yr[ox] += wv * xr[ox * c.g.sw + off];
                    }
                }
                cpu::apply_epilogue(ep, yr, k, oy * c.Wo, c.Wo);
            }
        }
    });
}

Status conv_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Conv c, check(l));
    LOOM_TRY(ops::check_data(l, "conv"));
    cpu::ScratchScope scope;
    const TensorRef& yt = l.outputs[0];
    if (yt.elements() == 0) return {};
    const bool pointwise = c.g.kh == 1 && c.g.kw == 1 && c.g.sh == 1 && c.g.sw == 1 && c.g.pad_top == 0 &&
                           c.g.pad_left == 0 && c.g.pad_bottom == 0 && c.g.pad_right == 0;
    const bool im2col = !c.winograd_any() && !c.depthwise() && !pointwise;
    // X once per launch: zero-padded for im2col (int8: quantized, and W's int8 values as fp32);
    // every int8 sum below is exact.
    const float* x;
    if (im2col) x = padded_input(c, l.inputs[0], scope, pool);
    else if (c.q.on()) x = ops::quantize_f32(l.inputs[0], c.q.x_scale, scope, pool);
    else x = ops::as_f32(l.inputs[0], scope);
    const float* w = ops::as_f32(l.inputs[1], scope);
    ops::ChannelEpilogueData ed = ops::channel_epilogue_f32(c, scope);
    if (c.q.on()) ed.dequant = ops::dequant_factors(c.q, scope), ed.dequant_count = c.q.w_scale->elements();
    float* y = ops::f32_output(yt, scope);
    const auto gemm = c.q.on() ? cpu::gemm_packed_int : cpu::gemm_packed;

    const int64_t plane_in = im2col ? (c.H + c.g.pad_top + c.g.pad_bottom) * (c.W + c.g.pad_left + c.g.pad_right)
                                    : c.H * c.W;
    const int64_t plane_out = c.Ho * c.Wo;
    const int64_t kk = c.cg() * c.g.kh * c.g.kw;
    float* packed = nullptr;  // weights in the chosen path's layout, once per launch
    if (c.winograd_any()) {
        packed = scope.alloc(cpu::winograd_weights_floats(c.winograd(), c.K, c.C));
        cpu::winograd_transform_weights(c.winograd(), w, c.K, c.C, packed);
    } else if (!c.depthwise()) {
        packed = scope.alloc(static_cast<size_t>(c.g.group) * cpu::gemm_packed_a_floats(c.kg(), kk));
        for (int64_t gi = 0; gi < c.g.group; ++gi)
            cpu::gemm_pack_a(c.kg(), kk, cpu::MatView{w + gi * c.kg() * kk, kk, 1},
                             packed + gi * cpu::gemm_packed_a_floats(c.kg(), kk));
    }
    for (int64_t n = 0; n < c.N; ++n) {
        const float* xn = x + n * c.C * plane_in;
        float* yn = y + n * c.K * plane_out;
        for (int64_t gi = 0; gi < (c.winograd_any() || c.depthwise() ? 1 : c.g.group); ++gi) {
            const int64_t k0 = gi * c.kg();  // first output channel of this group
            const cpu::Epilogue ep =
                ops::channel_epilogue(c, ed, k0, n * c.K * plane_out + k0 * plane_out, plane_out);
            if (c.winograd_any()) {
                cpu::Conv2dShape s{c.C, c.H, c.W, c.K, c.Ho, c.Wo, c.g.pad_top, c.g.pad_left};
                cpu::winograd_conv(c.winograd(), s, xn, packed, yn, ep, pool);
            } else if (c.depthwise()) {
                depthwise(c, xn, w, yn, ep, pool);
            } else {
                const float* xg = xn + gi * c.cg() * plane_in;
                const float* ap = packed + gi * cpu::gemm_packed_a_floats(c.kg(), kk);
                float* yg = yn + k0 * plane_out;
                if (pointwise) {
                    cpu::MatView b{xg, plane_in, 1};
                    gemm(c.kg(), plane_out, kk, ap, cpu::gemm_pack_b_strided, &b, yg, plane_out, ep, pool);
                } else {
                    Im2col m{xg, c.H + c.g.pad_top + c.g.pad_bottom, c.W + c.g.pad_left + c.g.pad_right, c.g.kh, c.g.kw,
                             c.g.sh, c.g.sw, c.g.dh, c.g.dw, c.Wo};
                    gemm(c.kg(), plane_out, kk, ap, pack_im2col, &m, yg, plane_out, ep, pool);
                }
            }
        }
    }
    ops::store_f32(y, yt);
    return {};
}

}  // namespace

extern const KernelDef kernel_conv;
const KernelDef kernel_conv = {"conv", conv_cost, conv_run};

}  // namespace loom::device
