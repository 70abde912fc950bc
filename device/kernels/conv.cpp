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
// winograd (host path, optional): 0 runs the GEMM, 2, 4 or 6 Winograd F(m x m, 3x3) (int8: 0 or
// 4); absent: the rule below. The compiler records it from measurements (compiler/measure.hpp).
// Host paths, chosen per launch: Winograd for 3x3 stride-1 dilation-1 ungrouped float convs,
// F(6x6, 3x3), F(4x4, 3x3) or F(2x2, 3x3) by cpu::winograd_tile_for (a rule measured on C and K
// only: F(6,3) for the wide convs, F(4,3), which beat both F(2,3) and the GEMM down to 3
// channels, elsewhere); a direct loop for
// depthwise convs; otherwise a GEMM whose B operand is packed straight from a zero-padded copy
// of the image (im2col without the buffer or bounds checks), or the image itself for 1x1
// stride-1 unpadded convs. int8 3x3 stride-1 undilated ungrouped convs take the integer
// Winograd F(4x4, 3x3) (cpu/winograd_i8.hpp: exact int32 sums, the GEMM's bits) when W keeps
// every sum below 2^25 (cpu::winograd_i8_exact; 'winograd' 0 forces the GEMM), on X quantized
// once per launch into its phase planes; the other int8 paths run the int8 GEMM
// (cpu/gemm_i8.hpp) on X quantized to int8 once per launch (zero-padded for im2col) and W's own
// int8 values, and the depthwise loop runs the integers as fp32 when the kernel area is at most
// cpu::kGemmExactK (every fp32 sum there is exact).
// NPU cost: the Cube runs it as an implicit GEMM per image and group (m = output pixels, n =
// K / group, k = C / group x kernel area), with img2col done by MTE1 from L1 so each input byte
// comes from global memory about once; int8 as CubeWork::int8 plus a dequantize pass; depthwise
// convs run on the Vector unit (int8: plus the quantize and dequantize passes).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/gemm_i8.hpp"
#include "device/kernels/cpu/vmath.hpp"
#include "device/kernels/cpu/winograd.hpp"
#include "device/kernels/cpu/winograd_i8.hpp"
#include "device/kernels/cube_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

struct Conv : ops::ConvShape {
    ops::Quant q;
    int64_t chosen = -1;  // the `winograd` attribute: 0 (the GEMM), 2, 4 or 6; -1: the rule

    bool unpadded() const { return g.pad_top == 0 && g.pad_bottom == 0 && g.pad_left == 0 && g.pad_right == 0; }
    bool depthwise() const {
        return g.group == C && g.group > 1 && cg() == 1 && (!q.on() || g.kh * g.kw <= cpu::kGemmExactK);
    }
    // The Winograd variant this conv runs as (NONE: another path); see cpu::winograd_tile_for.
    // 3x3, stride 1, dilation 1, one group: the shape Winograd takes.
    bool winograd_geometry() const {
        return g.kh == 3 && g.kw == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.group == 1;
    }
    bool winograd_eligible() const { return !q.on() && winograd_geometry(); }
    cpu::WinogradTile winograd() const {
        if (!winograd_eligible()) return cpu::WinogradTile::NONE;
        return chosen >= 0 ? static_cast<cpu::WinogradTile>(chosen) : cpu::winograd_tile_for(C, K);
    }
    bool winograd_any() const { return winograd() != cpu::WinogradTile::NONE; }
    // An int8 conv the integer F(4,3) may run (cpu/winograd_i8.hpp), unless the 'winograd'
    // attribute says 0; whether it does also depends on W (ConvPlan::pack).
    bool winograd_i8_shape() const { return q.on() && chosen != 0 && winograd_geometry(); }
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
                               "alpha", "min", "max", "residual_after_activation", "x_scale", "winograd"})
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
    if (l.attrs.has("winograd")) {
        LOOM_ASSIGN_OR_RETURN(c.chosen, l.attrs.get_int("winograd"));
        if (c.chosen != 0 && c.chosen != 2 && c.chosen != 4 && c.chosen != 6)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "conv: attribute 'winograd' is {} (0: the GEMM, 2, 4 or 6: F(m x m, 3x3))", c.chosen);
        const bool runs = c.q.on() ? c.chosen == 4 && c.winograd_i8_shape() : c.winograd_eligible();
        if (c.chosen != 0 && !runs)
            return make_error(StatusCode::INVALID_ARGUMENT, "conv: attribute 'winograd' is {}, but {}", c.chosen,
                              c.q.on() ? "an int8 conv runs only as the GEMM (0) or, 3x3 stride-1 undilated "
                                         "ungrouped, as the integer F(4x4, 3x3) (4)"
                                       : "only a 3x3 stride-1 undilated ungrouped float conv runs as Winograd");
    }
    return c;
}

Result<KernelWork> conv_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Conv c, check(l));
    const double elem = static_cast<double>(dtype_size(c.dtype));
    // int8: the dequantize multiply is one more epilogue pass.
    const double passes = ops::epilogue_passes(c.act, c.dtype,
                                               (c.bias ? 1 : 0) + (c.residual ? 1 : 0) + (c.q.on() ? 1 : 0));
    if (c.depthwise()) {
        cost::VectorWork w;
        w.elements = c.N * c.K * c.Ho * c.Wo;
        w.elem_bytes = static_cast<int64_t>(elem);
        // Each input byte is fetched about once (the window's halo is re-read from UB), the
        // taps are one multiply-add pass each.
        w.in_bytes = elem * static_cast<double>(c.C * c.H * c.W) /
                         static_cast<double>(std::max<int64_t>(1, c.K * c.Ho * c.Wo)) +
                     (c.residual ? elem : 0);
        w.out_bytes = elem;
        w.vector_passes = static_cast<double>(c.g.kh * c.g.kw) + passes;
        // int8: X is quantized once (one pass, +1 to widen f16) per input element.
        if (c.q.on())
            w.vector_passes += (c.dtype == DType::F16 ? 2.0 : 1.0) * static_cast<double>(c.C * c.H * c.W) /
                               static_cast<double>(std::max<int64_t>(1, c.K * c.Ho * c.Wo));
        w.flops = 2.0 * static_cast<double>(c.g.kh * c.g.kw);
        w.ub_buffers = 2 + (c.residual ? 1 : 0);
        return cost::vector_work(w);
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
    return cost::cube_work(w);
}

Result<CycleBreakdown> conv_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(conv_work(l, s), l.tiling, s, "conv");
}

// B of the conv GEMM for one image and group, read straight from the image zero-padded by the
// conv's pads (so no bounds checks): row k = (c, ky, kx), column j = output pixel (oy, ox).
template <typename T>
struct Im2col {
    const T* x;  // [C/group planes of Hp x Wp]
    int64_t Hp, Wp, kh, kw, sh, sw, dh, dw, Wo;
};

// Walks the rows k = (c, ky, kx) of an Im2col from k0: next() returns row k's first element.
template <typename T>
struct Im2colRows {
    const Im2col<T>& m;
    int64_t c, ky, kx;

    Im2colRows(const Im2col<T>& im, int64_t k0)
        : m(im), c(k0 / (im.kh * im.kw)), ky((k0 / im.kw) % im.kh), kx(k0 % im.kw) {}
    const T* next() {
        const T* src = m.x + c * m.Hp * m.Wp + ky * m.dh * m.Wp + kx * m.dw;
        if (++kx == m.kw) {
            kx = 0;
            if (++ky == m.kh) ky = 0, ++c;
        }
        return src;
    }
};

// A GEMM block's columns j0 .. j0 + nc of an Im2col, as the packers walk them: each panel of NR
// columns as runs inside one output row each (a panel crossing a row has two, a map narrower
// than NR more; column jj of a run reads a row of B at base + (jj - begin) x sw), and the
// stretches of the image a row of B reads (runs that follow each other merged), which the
// packers prefetch rows ahead: where the block turns to the next output row, a row's reads
// would otherwise start cold, a miss per row of B.
struct Im2colBlock {
    struct Run {
        int64_t begin, end, base;
    };
    static constexpr int64_t kRunsMax = cpu::kGemmNC + cpu::kGemmNC / 16;  // every column one, + one per panel
    static constexpr int64_t kAhead = 4;                                    // rows of B prefetched ahead
    Run runs[kRunsMax];
    int64_t first[cpu::kGemmNC / 16 + 1];  // panel p's runs: first[p] .. first[p + 1]
    Run stretch[kRunsMax];
    int64_t nr = 0, panels = 0, stretches = 0;

    template <typename T>
    Im2colBlock(const Im2col<T>& m, int64_t j0, int64_t nc, int64_t NR) : nr(NR), panels((nc + NR - 1) / NR) {
        LOOM_ASSERT(panels <= cpu::kGemmNC / 16);
        int64_t count = 0;
        for (int64_t p = 0; p < panels; ++p) {
            first[p] = count;
            const int64_t cols = std::min(NR, nc - p * NR);
            for (int64_t jj = 0; jj < cols;) {
                const int64_t j = j0 + p * NR + jj, ox = j % m.Wo, len = std::min(cols - jj, m.Wo - ox);
                runs[count++] = {jj, jj + len, (j / m.Wo) * m.sh * m.Wp + ox * m.sw};
                jj += len;
            }
        }
        first[panels] = count;
        for (int64_t ri = 0; ri < count; ++ri) {
            const int64_t end = runs[ri].base + (runs[ri].end - runs[ri].begin) * m.sw;
            if (stretches > 0 && stretch[stretches - 1].end == runs[ri].base) stretch[stretches - 1].end = end;
            else stretch[stretches++] = {runs[ri].base, end, 0};
        }
    }
    // Whether panel p is nr columns of one output row (one run).
    bool whole(int64_t p) const { return first[p + 1] - first[p] == 1 && runs[first[p]].end == nr; }
    // Asks for the lines a row of B (its first element `row`) reads.
    template <typename T>
    void prefetch(const T* row) const {
        for (int64_t t = 0; t < stretches; ++t)
            for (int64_t o = stretch[t].begin; o < stretch[t].end + 1; o += 64 / static_cast<int64_t>(sizeof(T)))
                __builtin_prefetch(row + o);
    }
};

template <int64_t NR>
void pack_im2col_nr(const Im2col<float>& m, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
    const Im2colBlock blk(m, j0, nc, NR);
    constexpr int64_t kAhead = Im2colBlock::kAhead;
    Im2colRows<float> ahead(m, k0);
    for (int64_t i = 0; i < kAhead && i < kc; ++i) ahead.next();
    // Row by row of B, each across every panel: a row's runs read one stretch of the image
    // after the other, so each of the kc rows streams (panel by panel, the C x kh rows of a block
    // were as many interleaved streams, too many for the prefetchers). Real-CUGAN's 2x2 stride-2
    // convs: rows (c, ky, 0) and (c, ky, 1) take the even and the odd values of the same
    // stretch, read once for both.
    const bool pairs = m.sw == 2 && m.kw == 2 && m.dw == 1;
    Im2colRows<float> rows(m, k0);
    for (int64_t kk = 0; kk < kc;) {
        const bool pair = pairs && rows.kx == 0 && kk + 1 < kc;
        const float* src = rows.next();
        if (pair) rows.next();
        for (int64_t i = 0; i < (pair ? 2 : 1); ++i)
            if (kk + i + kAhead < kc) {
                const float* next = ahead.next();
                if (!pair || i == 0) blk.prefetch(next);
            }
        float* d = dst + kk * NR;
        for (int64_t p = 0; p < blk.panels; ++p, d += kc * NR) {
            if (blk.whole(p)) {
                const float* r = src + blk.runs[blk.first[p]].base;
                if (pair) {
                    for (int64_t jj = 0; jj < NR; ++jj) d[jj] = r[2 * jj], d[NR + jj] = r[2 * jj + 1];
                } else if (m.sw == 1) {
                    std::memcpy(d, r, NR * sizeof(float));  // fixed sizes: inlined and vectorised
                } else if (m.sw == 2) {
                    for (int64_t jj = 0; jj < NR; ++jj) d[jj] = r[2 * jj];
                } else {
                    for (int64_t jj = 0; jj < NR; ++jj) d[jj] = r[jj * m.sw];
                }
                continue;
            }
            std::fill_n(d, pair ? 2 * NR : NR, 0.0f);
            for (int64_t ri = blk.first[p]; ri < blk.first[p + 1]; ++ri) {
                const Im2colBlock::Run& run = blk.runs[ri];
                for (int64_t jj = run.begin; jj < run.end; ++jj) {
                    const float* at = src + run.base + (jj - run.begin) * m.sw;
                    d[jj] = at[0];
                    if (pair) d[NR + jj] = at[1];
                }
            }
        }
        kk += pair ? 2 : 1;
    }
}

// The GEMM's B panels for the micro-kernel's NR (16, or 32 for AVX-512), each width compiled
// on its own so a run's copy has a fixed size.
void pack_im2col(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float* dst) {
    const Im2col<float>& m = *static_cast<const Im2col<float>*>(ctx);
    if (nr == 32) return pack_im2col_nr<32>(m, k0, kc, j0, nc, dst);
    LOOM_ASSERT(nr == 16);
    pack_im2col_nr<16>(m, k0, kc, j0, nc, dst);
}

// The int8 GEMM's B panels (pairs of rows interleaved, int16; cpu::PackBI8) from int8 planes,
// pair of rows by pair of rows across every panel with rows prefetched ahead, as pack_im2col_nr
// packs fp32 (the same runs). A pair (c, ky, 0), (c, ky, 1) of a 2x2 stride-2 conv interleaves
// the even and odd values of one stretch: that stretch widened as it is.
template <int64_t NR>
void pack_im2col_i8_nr(const Im2col<int8_t>& m, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int16_t* dst) {
    const Im2colBlock blk(m, j0, nc, NR);
    constexpr int64_t kAhead = Im2colBlock::kAhead;
    const int64_t kp = (kc + 1) / 2;
    Im2colRows<int8_t> ahead(m, k0);
    for (int64_t i = 0; i < kAhead && i < kc; ++i) ahead.next();
    const bool pairs = m.sw == 2 && m.kw == 2 && m.dw == 1;
    Im2colRows<int8_t> rows(m, k0);
    for (int64_t kk = 0; kk < kc; kk += 2) {
        const bool pair = pairs && rows.kx == 0 && kk + 1 < kc;  // then s1 is s0 + 1
        const int8_t* s0 = rows.next();
        const int8_t* s1 = kk + 1 < kc ? rows.next() : nullptr;
        for (int64_t i = 0; i < 2 && kk + i + kAhead < kc; ++i) blk.prefetch(ahead.next());
        int16_t* d = dst + kk / 2 * 2 * NR;
        for (int64_t p = 0; p < blk.panels; ++p, d += kp * 2 * NR) {
            if (blk.whole(p)) {
                const int64_t base = blk.runs[blk.first[p]].base;
                if (pair) {
                    const int8_t* r = s0 + base;
                    for (int64_t t = 0; t < 2 * NR; ++t) d[t] = r[t];
                } else if (s1 && m.sw == 1) {
                    for (int64_t j = 0; j < NR; j += 16) cpu::gemm_i8_pack_pair(s0 + base + j, s1 + base + j, d + 2 * j);
                } else {
                    for (int64_t jj = 0; jj < NR; ++jj) {
                        d[2 * jj] = s0[base + jj * m.sw];
                        d[2 * jj + 1] = s1 ? s1[base + jj * m.sw] : 0;
                    }
                }
                continue;
            }
            std::fill_n(d, 2 * NR, int16_t{0});
            for (int64_t ri = blk.first[p]; ri < blk.first[p + 1]; ++ri) {
                const Im2colBlock::Run& run = blk.runs[ri];
                for (int64_t jj = run.begin; jj < run.end; ++jj) {
                    const int64_t at = run.base + (jj - run.begin) * m.sw;
                    d[2 * jj] = s0[at];
                    d[2 * jj + 1] = s1 ? s1[at] : 0;
                }
            }
        }
    }
}

void pack_im2col_i8(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, int16_t* dst) {
    const Im2col<int8_t>& m = *static_cast<const Im2col<int8_t>*>(ctx);
    if (nr == 32) return pack_im2col_i8_nr<32>(m, k0, kc, j0, nc, dst);
    LOOM_ASSERT(nr == 16);
    pack_im2col_i8_nr<16>(m, k0, kc, j0, nc, dst);
}

// X as planes (N x C of them) with zero borders of the conv's pads: fp32 (float), or quantized
// to int8 (the int8 GEMM; the launch's one pass over X). Split over `pool` by planes.
template <typename T>
const T* padded_input(const Conv& c, const TensorRef& xt, cpu::ScratchScope& scope, ThreadPool& pool) {
    const int64_t pt = c.g.pad_top, pb = c.g.pad_bottom, pl = c.g.pad_left, pr = c.g.pad_right;
    const int64_t Hp = c.H + pt + pb, Wp = c.W + pl + pr, planes = c.N * c.C;
    T* dst = scope.alloc_as<T>(static_cast<size_t>(planes * Hp * Wp));
    const float xs = c.q.x_scale;
    const bool half = xt.dtype == DType::F16;
    pool.parallel_for(static_cast<size_t>(planes), 1, [&](size_t b, size_t e) {
        for (size_t pi = b; pi < e; ++pi) {
            const int64_t plane = static_cast<int64_t>(pi);
            T* d = dst + plane * Hp * Wp;
            std::fill_n(d, pt * Wp, T{0});
            std::fill_n(d + (pt + c.H) * Wp, pb * Wp, T{0});
            for (int64_t y = 0; y < c.H; ++y) {
                T* row = d + (pt + y) * Wp;
                std::fill_n(row, pl, T{0});
                std::fill_n(row + pl + c.W, pr, T{0});
                const int64_t i0 = (plane * c.H + y) * c.W;
                T* out = row + pl;
                if constexpr (std::is_same_v<T, int8_t>) {
                    if (half) ops::quantize_row_i8(xt.as<const f16>() + i0, c.W, xs, out);
                    else ops::quantize_row_i8(xt.as<const float>() + i0, c.W, xs, out);
                } else if (half) {
                    cpu::vec_f16_to_f32(xt.as<const f16>() + i0, out, c.W);
                } else {
                    std::copy_n(xt.as<const float>() + i0, c.W, out);
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

// The paths conv_run takes for `c`, and the weights in that path's layout: Winograd-transformed,
// GEMM A panels per group (fp32, or int8 widened to int16), or for depthwise W as fp32.
struct ConvPlan {
    bool pointwise = false, im2col = false, int8_gemm = false;
    bool int8_winograd = false;          // the integer F(4,3) (set by pack: it depends on W)
    int64_t kk = 0;                      // A's columns: C/group x kh x kw
    size_t a_size = 0;                   // one group's packed panel, in floats or int16 values
    const float* w = nullptr;            // depthwise: W as fp32
    const float* packed = nullptr;       // Winograd weights, or the float GEMM's panels
    const int16_t* packed_i8 = nullptr;  // the int8 GEMM's panels, or the integer F(4,3)'s weights

    explicit ConvPlan(const Conv& c)
        : pointwise(c.g.kh == 1 && c.g.kw == 1 && c.g.sh == 1 && c.g.sw == 1 && c.unpadded()),
          im2col(!c.winograd_any() && !c.depthwise() && !pointwise),
          int8_gemm(c.q.on() && !c.depthwise()),
          kk(c.cg() * c.g.kh * c.g.kw),
          a_size(int8_gemm ? cpu::gemm_packed_a_i16(c.kg(), kk) : cpu::gemm_packed_a_floats(c.kg(), kk)) {}

    // int16 values behind packed_i8.
    size_t i16_size(const Conv& c) const {
        return int8_winograd ? cpu::winograd_i8_weights_i16(c.K, c.C) : static_cast<size_t>(c.g.group) * a_size;
    }

    // Lays W out for the path in `scope`. An int8 conv of Winograd's shape takes the integer
    // F(4,3) when W keeps its sums exact (cpu::winograd_i8_exact), else the GEMM.
    void pack(const Conv& c, const TensorRef& wt, cpu::ScratchScope& scope) {
        const float* wf = int8_gemm ? nullptr : ops::as_f32(wt, scope);
        if (c.winograd_i8_shape() && cpu::winograd_i8_exact(wt.as<const int8_t>(), c.K, c.C)) {
            int8_winograd = true, im2col = false;
            auto* u = scope.alloc_as<int16_t>(cpu::winograd_i8_weights_i16(c.K, c.C));
            cpu::winograd_i8_transform_weights(wt.as<const int8_t>(), c.K, c.C, u);
            packed_i8 = u;
        } else if (c.winograd_any()) {
            float* u = scope.alloc(cpu::winograd_weights_floats(c.winograd(), c.K, c.C));
            cpu::winograd_transform_weights(c.winograd(), wf, c.K, c.C, u);
            packed = u;
        } else if (int8_gemm) {
            auto* a = scope.alloc_as<int16_t>(static_cast<size_t>(c.g.group) * a_size);
            const int8_t* wq = wt.as<const int8_t>();
            for (int64_t gi = 0; gi < c.g.group; ++gi)
                cpu::gemm_pack_a(c.kg(), kk, cpu::MatViewI8{wq + gi * c.kg() * kk, kk, 1}, a + gi * a_size);
            packed_i8 = a;
        } else if (!c.depthwise()) {
            float* a = scope.alloc(static_cast<size_t>(c.g.group) * a_size);
            for (int64_t gi = 0; gi < c.g.group; ++gi)
                cpu::gemm_pack_a(c.kg(), kk, cpu::MatView{wf + gi * c.kg() * kk, kk, 1}, a + gi * a_size);
            packed = a;
        } else {
            w = wf;
        }
    }
};

// A prepared conv: the plan with W packed once, for a launch whose W is constant (a compiled
// model's weights), so that a frame's run does not transform and pack them again.
struct ConvState final : KernelState {
    struct Free {
        void operator()(void* p) const { ::operator delete(p, std::align_val_t(64)); }
    };
    ConvPlan plan;
    std::unique_ptr<void, Free> memory;  // what plan's pointers point into

    ConvState(const Conv& c, const ConvPlan& packed) : plan(packed) {
        // Each of the plan's buffers, copied out of the launch's scratch into memory of its own.
        const size_t f32 = plan.packed ? (c.winograd_any() ? cpu::winograd_weights_floats(c.winograd(), c.K, c.C)
                                                           : static_cast<size_t>(c.g.group) * plan.a_size)
                                       : 0;
        const size_t w32 = plan.w ? static_cast<size_t>(c.K * plan.kk) : 0;
        const size_t i16 = plan.packed_i8 ? plan.i16_size(c) : 0;
        auto round = [](size_t b) { return (b + 63) / 64 * 64; };
        const size_t bytes = round(f32 * sizeof(float)) + round(w32 * sizeof(float)) + round(i16 * sizeof(int16_t));
        memory.reset(::operator new(std::max<size_t>(bytes, 64), std::align_val_t(64)));
        auto* at = static_cast<uint8_t*>(memory.get());
        auto take = [&](const auto* src, size_t n) {
            using T = std::remove_cv_t<std::remove_pointer_t<decltype(src)>>;
            T* dst = reinterpret_cast<T*>(at);
            std::memcpy(dst, src, n * sizeof(T));
            at += (n * sizeof(T) + 63) / 64 * 64;
            return dst;
        };
        if (f32) plan.packed = take(plan.packed, f32);
        if (w32) plan.w = take(plan.w, w32);
        if (i16) plan.packed_i8 = take(plan.packed_i8, i16);
    }
};

Result<std::shared_ptr<const KernelState>> conv_prepare(const KernelLaunch& l) {
    if (!l.input_constant(1)) return std::shared_ptr<const KernelState>();
    LOOM_ASSIGN_OR_RETURN(Conv c, check(l));
    LOOM_TRY(ops::check_data(l, "conv"));
    cpu::ScratchScope scope;
    ConvPlan plan(c);
    plan.pack(c, l.inputs[1], scope);
    return std::shared_ptr<const KernelState>(std::make_shared<const ConvState>(c, plan));
}

Status conv_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Conv c, check(l));
    LOOM_TRY(ops::check_data(l, "conv"));
    cpu::ScratchScope scope;
    const TensorRef& yt = l.outputs[0];
    if (yt.elements() == 0) return {};
    ConvPlan plan = l.state ? static_cast<const ConvState&>(*l.state).plan : ConvPlan(c);
    if (!l.state) plan.pack(c, l.inputs[1], scope);
    const bool pointwise = plan.pointwise, im2col = plan.im2col, int8_gemm = plan.int8_gemm;
    // X once per launch: zero-padded for im2col; int8 quantized, as int8 for the int8 GEMM and as
    // integer-valued fp32 for the depthwise loop (with W's int8 values as fp32), exact either way.
    // Winograd reads and writes fp16 maps as they are (winograd.hpp): no conversion passes.
    // (The im2col GEMM's packing reads fp32: widening while packing the stride-2 gather measured
    // slower than one F16C pass over X.)
    const bool x_half = c.winograd_any() && l.inputs[0].dtype == DType::F16;
    const bool y_half = c.winograd_any() && yt.dtype == DType::F16;
    const float* x = nullptr;
    const int8_t* xq = nullptr;
    const cpu::WinogradI8PlaneShape wps = plan.int8_winograd ? cpu::winograd_i8_plane_shape(c.Ho, c.Wo)
                                                             : cpu::WinogradI8PlaneShape{};
    if (plan.int8_winograd)
        xq = ops::winograd_i8_phase_planes(l.inputs[0], c.N, c.C, c.H, c.W, c.g.pad_top, c.g.pad_left, c.q.x_scale, wps,
                                           scope, pool);
    else if (int8_gemm)
        xq = im2col ? padded_input<int8_t>(c, l.inputs[0], scope, pool)
                    : ops::quantize_i8(l.inputs[0], c.q.x_scale, scope, pool);
    else if (im2col && c.unpadded())
        x = ops::as_f32(l.inputs[0], scope, &pool);  // nothing to pad (CUGAN's 2x2 stride-2 convs): read X in place
    else if (im2col) x = padded_input<float>(c, l.inputs[0], scope, pool);
    else if (c.q.on()) x = ops::quantize_f32(l.inputs[0], c.q.x_scale, scope, pool);
    else if (!x_half) x = ops::as_f32(l.inputs[0], scope, &pool);
    const float* w = plan.w;
    ops::ChannelEpilogueData ed = ops::channel_epilogue_f32(c, scope, pool);
    if (c.q.on()) ed.dequant = ops::dequant_factors(c.q, scope), ed.dequant_count = c.q.w_scale->elements();
    float* y = y_half ? nullptr : ops::f32_output(yt, scope);

    const int64_t Hp = c.H + c.g.pad_top + c.g.pad_bottom, Wp = c.W + c.g.pad_left + c.g.pad_right;
    const int64_t plane_in = im2col ? Hp * Wp : c.H * c.W;
    const int64_t plane_out = c.Ho * c.Wo;
    const int64_t kk = plan.kk;
    const size_t a_size = plan.a_size;
    const float* packed = plan.packed;
    const int16_t* packed_i8 = plan.packed_i8;
    for (int64_t n = 0; n < c.N; ++n) {
        float* yn = y ? y + n * c.K * plane_out : nullptr;
        for (int64_t gi = 0; gi < (c.winograd_any() || c.depthwise() ? 1 : c.g.group); ++gi) {
            const int64_t k0 = gi * c.kg();  // first output channel of this group
            const cpu::Epilogue ep = ops::channel_epilogue(c, ed, k0, n * c.K * plane_out + k0 * plane_out, plane_out);
            const int64_t in0 = (n * c.C + gi * c.cg()) * plane_in;  // this image and group's X
            float* yg = yn ? yn + k0 * plane_out : nullptr;
            if (plan.int8_winograd) {
                cpu::Conv2dShape s{c.C, c.H, c.W, c.K, c.Ho, c.Wo, c.g.pad_top, c.g.pad_left};
                const cpu::WinogradI8Planes xp{xq + n * static_cast<int64_t>(cpu::winograd_i8_plane_bytes(c.C, wps)),
                                               wps.rows, wps.tq};
                cpu::winograd_i8_conv(s, xp, plan.packed_i8, yn, ep, pool);
            } else if (c.winograd_any()) {
                cpu::Conv2dShape s{c.C, c.H, c.W, c.K, c.Ho, c.Wo, c.g.pad_top, c.g.pad_left};
                const cpu::WinogradIn xw = x_half ? cpu::WinogradIn(l.inputs[0].as<const f16>() + in0) : x + in0;
                const cpu::WinogradOut yw = y_half ? cpu::WinogradOut(yt.as<f16>() + n * c.K * plane_out) : yn;
                cpu::winograd_conv(c.winograd(), s, xw, packed, yw, ep, pool);
            } else if (c.depthwise()) {
                depthwise(c, x + in0, w, yn, ep, pool);
            } else if (int8_gemm) {
                const int16_t* ap = packed_i8 + gi * a_size;
                if (pointwise) {
                    cpu::MatViewI8 b{xq + in0, plane_in, 1};
                    cpu::gemm_packed(c.kg(), plane_out, kk, ap, static_cast<cpu::PackBI8>(cpu::gemm_pack_b_strided), &b,
                                     yg, plane_out, ep, pool);
                } else {
                    Im2col<int8_t> m{xq + in0, Hp, Wp, c.g.kh, c.g.kw, c.g.sh, c.g.sw, c.g.dh, c.g.dw, c.Wo};
                    cpu::gemm_packed(c.kg(), plane_out, kk, ap, pack_im2col_i8, &m, yg, plane_out, ep, pool);
                }
            } else {
                const float* ap = packed + gi * a_size;
                if (pointwise) {
                    cpu::MatView b{x + in0, plane_in, 1};
                    cpu::gemm_packed(c.kg(), plane_out, kk, ap, static_cast<cpu::PackB>(cpu::gemm_pack_b_strided), &b,
                                     yg, plane_out, ep, pool);
                } else {
                    Im2col<float> m{x + in0, Hp, Wp, c.g.kh, c.g.kw, c.g.sh, c.g.sw, c.g.dh, c.g.dw, c.Wo};
                    cpu::gemm_packed(c.kg(), plane_out, kk, ap, pack_im2col, &m, yg, plane_out, ep, pool);
                }
            }
        }
    }
    if (!y_half) ops::store_f32(y, yt, &pool);
    return {};
}

}  // namespace

extern const KernelDef kernel_conv;
const KernelDef kernel_conv = {"conv", conv_work, conv_cost, conv_run, conv_prepare};

}  // namespace loom::device
