// Winograd F(m x m, 3x3), m = 6, 4 or 2: weight transforms, the generic block transforms and the
// driver shared by the tile sizes.
//   input:  V = B^T d B,  output: Y = A^T M A,  weights: U = G g G^T
//   F(4,3): B 6x6, A 6x4, G 6x3 (points 0, +-1, +-2, inf);  F(2,3): B 4x4, A 4x2, G 4x3
//   (points 0, +-1, inf);  F(6,3): B 8x8, A 8x6, G 8x3 (points 0, +-1, +-2, +-1/2, inf).
#include "device/kernels/cpu/winograd.hpp"

#include <algorithm>
#include <cstring>

#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/vmath.hpp"

namespace loom::device::cpu {

namespace {

constexpr int64_t MR = kGemmMR;
constexpr int64_t kTileAlign = 16;   // a block's tiles are padded to a multiple of this

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// 1-D transforms of n = m + 2 values (input, output) or three (weights), for F(4,3) ...
inline void bt6(const float* d, int64_t s, float* v, int64_t vs) {
    const float d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
    v[0] = 4 * d0 - 5 * d2 + d4;
    v[vs] = -4 * (d1 + d2) + d3 + d4;
    v[2 * vs] = 4 * (d1 - d2) - d3 + d4;
    v[3 * vs] = 2 * (d3 - d1) + (d4 - d2);
    v[4 * vs] = 2 * (d1 - d3) + (d4 - d2);
    v[5 * vs] = 4 * d1 - 5 * d3 + d5;
}

inline void at6(const float* m, int64_t s, float* o, int64_t os) {
    const float m0 = m[0], m1 = m[s], m2 = m[2 * s], m3 = m[3 * s], m4 = m[4 * s], m5 = m[5 * s];
    o[0] = m0 + m1 + m2 + m3 + m4;
    o[os] = (m1 - m2) + 2 * (m3 - m4);
    o[2 * os] = (m1 + m2) + 4 * (m3 + m4);
    o[3 * os] = (m1 - m2) + 8 * (m3 - m4) + m5;
}

inline void g6(const double* g, int64_t s, double* u, int64_t us) {
    const double g0 = g[0], g1 = g[s], g2 = g[2 * s];
    u[0] = g0 / 4;
    u[us] = -(g0 + g1 + g2) / 6;
    u[2 * us] = -(g0 - g1 + g2) / 6;
    u[3 * us] = g0 / 24 + g1 / 12 + g2 / 6;
    u[4 * us] = g0 / 24 - g1 / 12 + g2 / 6;
    u[5 * us] = g2;
}

// ... and for F(2,3).
inline void bt4(const float* d, int64_t s, float* v, int64_t vs) {
    const float d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s];
    v[0] = d0 - d2;
    v[vs] = d1 + d2;
    v[2 * vs] = d2 - d1;
    v[3 * vs] = d1 - d3;
}

inline void at4(const float* m, int64_t s, float* o, int64_t os) {
    const float m0 = m[0], m1 = m[s], m2 = m[2 * s], m3 = m[3 * s];
    o[0] = m0 + m1 + m2;
    o[os] = m1 - m2 - m3;
}

inline void g4(const double* g, int64_t s, double* u, int64_t us) {
    const double g0 = g[0], g1 = g[s], g2 = g[2 * s];
    u[0] = g0;
    u[us] = (g0 + g1 + g2) / 2;
    u[2 * us] = (g0 - g1 + g2) / 2;
    u[3 * us] = g2;
}

// ... and for F(6,3) (points 0, +-1, +-2, +-1/2, inf), in the operation order of the vector
// versions (winograd_avx2.cpp) so that every level computes the same values.
inline void bt8(const float* d, int64_t s, float* v, int64_t vs) {
    const float d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s], d6 = d[6 * s],
                d7 = d[7 * s];
    v[0] = (d0 - d6) + 5.25f * (d4 - d2);
    v[7 * vs] = (d7 - d1) + 5.25f * (d3 - d5);
    const float a12 = (d2 + d6) - 4.25f * d4, b12 = (d1 + d5) - 4.25f * d3;
    v[vs] = a12 + b12;
    v[2 * vs] = a12 - b12;
    const float a34 = (d6 + 0.25f * d2) - 1.25f * d4, b34 = (0.5f * d1 - 2.5f * d3) + 2.0f * d5;
    v[3 * vs] = a34 + b34;
    v[4 * vs] = a34 - b34;
    const float a56 = d6 + 4.0f * (d2 - 1.25f * d4), b56 = (2.0f * d1 - 2.5f * d3) + 0.5f * d5;
    v[5 * vs] = a56 + b56;
    v[6 * vs] = a56 - b56;
}

inline void at8(const float* m, int64_t s, float* o, int64_t os) {
    const float m0 = m[0], m1 = m[s], m2 = m[2 * s], m3 = m[3 * s], m4 = m[4 * s], m5 = m[5 * s], m6 = m[6 * s],
                m7 = m[7 * s];
    const float a = m1 + m2, b = m3 + m4, c = m5 + m6;  // even rows
    const float d = m1 - m2, e = m3 - m4, f = m5 - m6;  // odd rows
    o[0] = ((m0 + a) + b) + c;
    o[os] = (d + 2.0f * e) + 0.5f * f;
    o[2 * os] = (a + 4.0f * b) + 0.25f * c;
    o[3 * os] = (d + 8.0f * e) + 0.125f * f;
    o[4 * os] = (a + 16.0f * b) + 0.0625f * c;
    o[5 * os] = ((d + 32.0f * e) + 0.03125f * f) + m7;
}

inline void g8(const double* g, int64_t s, double* u, int64_t us) {
    const double g0 = g[0], g1 = g[s], g2 = g[2 * s];
    u[0] = g0;
    u[us] = -2.0 * (g0 + g1 + g2) / 9;
    u[2 * us] = -2.0 * (g0 - g1 + g2) / 9;
    u[3 * us] = g0 / 90 + g1 / 45 + 2.0 * g2 / 45;
    u[4 * us] = g0 / 90 - g1 / 45 + 2.0 * g2 / 45;
    u[5 * us] = 32.0 * g0 / 45 + 16.0 * g1 / 45 + 8.0 * g2 / 45;
    u[6 * us] = 32.0 * g0 / 45 - 16.0 * g1 / 45 + 8.0 * g2 / 45;
    u[7 * us] = g2;
}

template <int M>
inline void bt(const float* d, int64_t s, float* v, int64_t vs) {
    if constexpr (M == 6) bt8(d, s, v, vs);
    else if constexpr (M == 4) bt6(d, s, v, vs);
    else bt4(d, s, v, vs);
}

template <int M>
inline void at(const float* m, int64_t s, float* o, int64_t os) {
    if constexpr (M == 6) at8(m, s, o, os);
    else if constexpr (M == 4) at6(m, s, o, os);
    else at4(m, s, o, os);
}

template <int M>
inline void gt(const double* g, int64_t s, double* u, int64_t us) {
    if constexpr (M == 6) g8(g, s, u, us);
    else if constexpr (M == 4) g6(g, s, u, us);
    else g4(g, s, u, us);
}

template <int M>
void transform_weights(const float* w, int64_t K, int64_t C, float* u) {
    constexpr int N = M + 2;
    const int64_t kp = ceil_div(K, MR) * MR;
    for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c) {
            // In double so the transformed weights are the exact transform rounded once.
            double g[9], t[N * 3], r[N * N];
            for (int i = 0; i < 9; ++i) g[i] = w[(k * C + c) * 9 + i];
            for (int j = 0; j < 3; ++j) gt<M>(g + j, 3, t + j, 3);             // columns: t (N x 3) = G g
            for (int i = 0; i < N; ++i) gt<M>(t + i * 3, 1, r + i * N, 1);  // rows: r (N x N) = t G^T
            const int64_t panel = k / MR, row = k % MR;
            for (int e = 0; e < N * N; ++e) u[(e * kp + panel * MR) * C + c * MR + row] = static_cast<float>(r[e]);
        }
}

template <int M, typename T>
void input_generic(const WinogradBlock& b, const T* x, float* v, float* work) {
    constexpr int N = M + 2;
    const int64_t cols = M * b.tiles + 2;
    float* rows = work;  // N zero-padded input rows, then their vertical transforms
    float* t = work + N * cols;
    const int64_t NR = b.nr, ps = b.panel_stride, panels = winograd_panel_count(b.tiles_gemm, NR);
    for (int64_t c = 0; c < b.C; ++c) {
        const T* xc = x + c * b.H * b.W;
        for (int64_t i = 0; i < N; ++i) {
            const int64_t iy = b.iy0 + i;
            float* r = rows + i * cols;
            for (int64_t j = 0; j < cols; ++j) {
                const int64_t ix = b.ix0 + j;
                r[j] = iy >= 0 && iy < b.H && ix >= 0 && ix < b.W ? load_as_f32(xc, iy * b.W + ix) : 0.0f;
            }
        }
        for (int64_t j = 0; j < cols; ++j) bt<M>(rows + j, cols, t + j, cols);
        for (int64_t k = 0; k < N; ++k)
            for (int64_t tile = 0; tile < b.tiles_gemm; ++tile) {
                float d[N];
                if (tile < b.tiles) bt<M>(t + k * cols + M * tile, 1, d, 1);
                else std::fill_n(d, N, 0.0f);
                const WinogradPanel p = winograd_panel(tile, b.tiles_gemm, NR);
                for (int64_t l = 0; l < N; ++l) v[((k * N + l) * panels + p.q) * ps + c * p.width + p.at] = d[l];
            }
    }
}

// apply_epilogue's bias and activation on one value (see WinogradEpilogue).
inline float fused_epilogue(const WinogradEpilogue& ep, float v, float bias, float slope) {
    if (ep.bias) v += bias;
    switch (ep.act) {
    case Act::RELU: return std::max(v, 0.0f);
    case Act::LEAKY_RELU: return std::max(v, 0.0f) + std::min(v, 0.0f) * ep.alpha;
    case Act::PRELU: return std::max(v, 0.0f) + std::min(v, 0.0f) * slope;
    default: return v;
    }
}

template <int M, typename T>
void output_generic(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, T* y, int64_t Ho,
                    int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    constexpr int N = M + 2;
    for (int64_t k = 0; k < K; ++k)
        for (int64_t tile = 0; tile < tiles; ++tile) {
            const float* mk = m + k * ks + tile;
            float s[N * M], o[M * M];
            for (int64_t r = 0; r < N; ++r) at<M>(mk + r * N * es, es, s + r * M, 1);  // along columns
            for (int64_t j = 0; j < M; ++j) at<M>(s + j, M, o + j, M);                 // along rows
            if (ep) {
                const float bias = ep->bias ? ep->bias[k * ep->bias_rs] : 0.0f;
                const float slope = ep->slope ? ep->slope[k * ep->slope_rs] : 0.0f;
                for (float& v : o) v = fused_epilogue(*ep, v, bias, slope);
            }
            for (int64_t i = 0; i < M; ++i) {
                const int64_t oy = oy0 + i;
                if (oy >= Ho) break;
                for (int64_t j = 0; j < M; ++j) {
                    const int64_t ox = ox0 + M * tile + j;
                    if (ox < Wo) store_from_f32(y, (k * Ho + oy) * Wo + ox, o[i * M + j]);
                }
            }
        }
}

using WinogradInput = void (*)(const WinogradBlock& b, float* v, float* work);

// The block transforms per instruction set (rows: Isa), F(4,3), F(2,3) then F(6,3).
struct WinogradTransforms {
    WinogradInput input43, input23, input63;
    WinogradOutput output43, output23, output63;
};
constexpr WinogradTransforms kTransforms[kIsaCount] = {
    {winograd43_input_generic, winograd23_input_generic, winograd63_input_generic, winograd43_output_generic,
     winograd23_output_generic, winograd63_output_generic},
    {winograd43_input_avx2, winograd23_input_avx2, winograd63_input_avx2, winograd43_output_avx2,
     winograd23_output_avx2, winograd63_output_avx2},
    {winograd43_input_avx512, winograd23_input_avx512, winograd63_input_avx512, winograd43_output_avx512,
     winograd23_output_avx512, winograd63_output_avx512},
};

}  // namespace

// Measured on the 2-core AMD EPYC (Zen 4) CI machine, AVX2, 2 threads, through the conv kernel
// (pads 1, bias + relu), ms per conv (medians of 3 for C = 3, 4) for C, K in
// {3, 4, 8, 16, 32, 64} at 240x320 and 480x720 (docs/benchmarks.md has the table): F(4,3) beat
// F(2,3) on 71 of the 72 shapes, by 1.04x to 2.2x (the exception, 16 -> 8 at 240x320 by 5%,
// went 1.6x the other way at 480x720), and beat the im2col GEMM on 70, by up to 4.6x, and 2.7x
// for 3 -> 3 (GEMM 1.05 ms, F(2,3) 0.56, F(4,3) 0.38). The two GEMM wins (3 -> 64 and 4 -> 32
// at 240x320, by 7% and 14%) turned into F(4,3) wins of 13% and 36% at 480x720, and the rule
// may not look at the image size.
// F(2,3) loses because per output pixel it stores and re-reads 4 transformed values per output
// channel against F(4,3)'s 2.25 and runs 4 C multiply-adds against 2.25 C; its cheaper
// transforms never make up for that here. So: F(4,3) for every shape; F(2,3) stays available
// (winograd_conv, tests, bench) for a CPU where the measurement comes out otherwise. The rule
// depends on C and K only, and is the same on both instruction sets, so every tile of a frame
// and every machine runs a conv the same way.
// F(6,3) (2026-11-26, same machine, 240x320, BM_Winograd3x3, medians of 3, F(4,3) ms / F(6,3)
// ms; docs/benchmarks.md has the table): 1.78 transformed values per output pixel against
// F(4,3)'s 2.25, so 21% less GEMM work, for transforms of 8 points instead of 6. With AVX-512 it
// won on every shape with K >= 32 (1.04x to 1.39x; 64 -> 64 1.18x) and tied at K = 16; with AVX2
// (whose 8 x 8 transposes cost more per tile) it won for K >= 64 with C >= 16 (1.09x to 1.26x),
// was mixed at K = 32 (0.93x to 1.13x) and lost with C = 3 or K = 16 (down to 0.75x). So F(6,3)
// where both levels gain: K >= 64 and C >= 16, or K >= 32 and C >= 32 (the CUGAN and CUnet
// bodies, animevideov3's 64 -> 64), F(4,3) elsewhere.
WinogradTile winograd_tile_for(int64_t C, int64_t K) {
    if ((K >= 64 && C >= 16) || (K >= 32 && C >= 32)) return WinogradTile::F63;
    return WinogradTile::F43;
}

size_t winograd_weights_floats(WinogradTile t, int64_t K, int64_t C) {
    return static_cast<size_t>(winograd_positions(t) * ceil_div(K, MR) * MR * C);
}

void winograd_transform_weights(WinogradTile t, const float* w, int64_t K, int64_t C, float* u) {
    std::fill_n(u, winograd_weights_floats(t, K, C), 0.0f);
    if (t == WinogradTile::F63) transform_weights<6>(w, K, C, u);
    else if (t == WinogradTile::F43) transform_weights<4>(w, K, C, u);
    else transform_weights<2>(w, K, C, u);
}

namespace {

template <int M>
void input_generic(const WinogradBlock& b, float* v, float* work) {
    if (b.x.half) input_generic<M>(b, b.x.half, v, work);
    else input_generic<M>(b, b.x.f32, v, work);
}

template <int M>
void output_generic(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y, int64_t Ho,
                    int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    if (y.half) output_generic<M>(m, es, ks, tiles, K, y.half, Ho, Wo, oy0, ox0, ep);
    else output_generic<M>(m, es, ks, tiles, K, y.f32, Ho, Wo, oy0, ox0, ep);
}

}  // namespace

void winograd43_input_generic(const WinogradBlock& b, float* v, float* work) { input_generic<4>(b, v, work); }
void winograd23_input_generic(const WinogradBlock& b, float* v, float* work) { input_generic<2>(b, v, work); }
void winograd63_input_generic(const WinogradBlock& b, float* v, float* work) { input_generic<6>(b, v, work); }
void winograd63_output_generic(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                               int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    output_generic<6>(m, es, ks, tiles, K, y, Ho, Wo, oy0, ox0, ep);
}
void winograd43_output_generic(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                               int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    output_generic<4>(m, es, ks, tiles, K, y, Ho, Wo, oy0, ox0, ep);
}
void winograd23_output_generic(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                               int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    output_generic<2>(m, es, ks, tiles, K, y, Ho, Wo, oy0, ox0, ep);
}

namespace {

// The WinogradEpilogue for `ep` when that is all it holds (see winograd.hpp), else false.
bool fusable(const Epilogue& ep, WinogradEpilogue& out) {
    const bool act_ok = ep.act == Act::NONE || ep.act == Act::RELU || ep.act == Act::LEAKY_RELU ||
                        (ep.act == Act::PRELU && ep.slope.cs == 0);
    if (!act_ok || ep.scale != 1 || ep.dequant.on() || ep.residual.on() || (ep.bias.p && ep.bias.cs != 0)) return false;
    out.bias = ep.bias.p, out.bias_rs = ep.bias.rs;
    out.act = ep.act, out.alpha = ep.alpha;
    out.slope = ep.slope.p, out.slope_rs = ep.slope.rs;
    return true;
}

}  // namespace

void winograd_conv(WinogradTile t, const Conv2dShape& s, WinogradIn x, const float* u, WinogradOut y,
                   const Epilogue& ep, ThreadPool& pool) {
    LOOM_ASSERT((x.f32 != nullptr) != (x.half != nullptr) && (y.f32 != nullptr) != (y.half != nullptr));
    LOOM_ASSERT(t == WinogradTile::F43 || t == WinogradTile::F23 || t == WinogradTile::F63);
    // The transforms and GEMM micro-kernel for this tile size and instruction set, chosen once
    // per call.
    const Isa level = isa();
    const WinogradTransforms& tr = kTransforms[static_cast<int>(level)];
    const WinogradInput input = t == WinogradTile::F63 ? tr.input63 : t == WinogradTile::F43 ? tr.input43 : tr.input23;
    const WinogradOutput output =
        t == WinogradTile::F63 ? tr.output63 : t == WinogradTile::F43 ? tr.output43 : tr.output23;
    GemmMicro um = gemm_micro(level);
    // AVX-512's GEMMs take its 6 x 16 kernel (V panels 16 wide) instead of the 6 x 32 one where
    // C x K >= 8192: measured 6-12% faster on those convs (64 -> 128, 128 -> 64, 128 -> 256) and
    // 5-8% on the models made of them (UpConv7, CUnet), within +-4% either way below it, where
    // the wider kernel stays (docs/benchmarks.md, "6 x 16 for the wide Winograd convs").
    if (um.nr == 32 && s.C * s.K >= 8192) um.fn = um.narrow, um.nr = 16;
    const int64_t NR = um.nr;
    const int64_t m_edge = static_cast<int64_t>(t), positions = winograd_positions(t);
    const int64_t kp = ceil_div(s.K, MR) * MR;
    const int64_t ps = winograd_panel_stride(s.C, NR);
    WinogradEpilogue fused;
    const bool fuse = !ep.trivial() && fusable(ep, fused);
    const int64_t tiles_y = ceil_div(s.Ho, m_edge), tiles_x = ceil_div(s.Wo, m_edge);
    const int64_t blocks_x = ceil_div(tiles_x, kWinogradBlockTiles);
    // Blocks of whole 16-tile groups where possible (padding tiles cost GEMM work); the same
    // blocks for every NR.
    const int64_t per_block =
        std::min(kWinogradBlockTiles, ceil_div(ceil_div(tiles_x, blocks_x), kTileAlign) * kTileAlign);
    // The GEMMs take a block's tiles in runs of 8 (winograd.hpp), except under AVX-512's F(4,3)
    // and F(2,3) transforms, which keep a group of sixteen tiles in an interleaved order that an
    // 8-wide panel would split.
    const int64_t gemm_align = level == Isa::AVX512 && t != WinogradTile::F63 ? 16 : 8;
    // The output transform applies the whole epilogue; then a large map goes out streamed
    // (winograd.hpp).
    const bool whole = ep.trivial() || fuse;
    WinogradOut yo = y;
    yo.stream = whole && t == WinogradTile::F63 && s.K * s.Ho * s.Wo * (y.f32 ? 4 : 2) >= kWinogradStreamBytes;
    auto run_block = [&](int64_t item) {
        const int64_t ty = item / blocks_x, bx = item % blocks_x;
        WinogradBlock b;
        b.x = x, b.C = s.C, b.H = s.H, b.W = s.W;
        const int64_t tx0 = bx * per_block;
        b.tiles = std::min(per_block, tiles_x - tx0);
        b.tiles_padded = ceil_div(b.tiles, kTileAlign) * kTileAlign;
        b.tiles_gemm = ceil_div(b.tiles, gemm_align) * gemm_align;
        b.nr = NR, b.panel_stride = ps;
        b.iy0 = m_edge * ty - s.pad_top, b.ix0 = m_edge * tx0 - s.pad_left;
        ScratchScope scope;
        float* v = scope.alloc(winograd_input_floats(t, s.C, b.tiles_gemm, NR));
        float* m = scope.alloc(static_cast<size_t>(kp * (positions * b.tiles_padded + 16)));
        float* work = scope.alloc(winograd_work_floats(b.tiles_padded));
        input(b, v, work);
        const int64_t panels = winograd_panel_count(b.tiles_gemm, NR);
        // M channel-major (winograd.hpp): the output transform reads each channel's values as one
        // run of positions x tiles_padded floats, not as `positions` lines a GEMM's worth apart.
        // ks one cache line more than the positions' values: the GEMM writes six channels' rows
        // at once, and rows 4 or 8 KiB apart would all land in the same L1 set.
        const int64_t es = b.tiles_padded, ks = positions * es + 16;
        for (int64_t e = 0; e < positions; ++e) {
            const float* ue = u + e * kp * s.C;
            const float* ve = v + e * panels * ps;
            float* me = m + e * es;
            for (int64_t tile = 0; tile < b.tiles_gemm;) {
                const WinogradPanel pn = winograd_panel(tile, b.tiles_gemm, NR);
                const MicroKernel micro = pn.width == NR ? um.fn : pn.width == 16 ? um.narrow : um.narrow8;
                for (int64_t p = 0; p < kp / MR; ++p)
                    micro(s.C, ue + p * s.C * MR, ve + pn.q * ps, me + p * MR * ks + tile, ks, false);
                tile += pn.width;
            }
        }
        const int64_t oy0 = m_edge * ty, ox0 = m_edge * tx0;
        if (whole) return output(m, es, ks, b.tiles, s.K, yo, s.Ho, s.Wo, oy0, ox0, fuse ? &fused : nullptr);
        const int64_t rows = std::min(m_edge, s.Ho - oy0), run = std::min(m_edge * b.tiles, s.Wo - ox0);
        if (y.f32) {
            output(m, es, ks, b.tiles, s.K, y, s.Ho, s.Wo, oy0, ox0, nullptr);
            for (int64_t k = 0; k < s.K; ++k)
                for (int64_t oy = oy0; oy < oy0 + rows; ++oy)
                    apply_epilogue(ep, y.f32 + (k * s.Ho + oy) * s.Wo + ox0, k, oy * s.Wo + ox0, run);
            return;
        }
        // fp16 y with an epilogue the transform cannot apply: the block's output in fp32 (a
        // K x rows x run map), the epilogue, then the one rounding.
        float* o = scope.alloc(static_cast<size_t>(s.K * rows * run));
        output(m, es, ks, b.tiles, s.K, o, rows, run, 0, 0, nullptr);
        for (int64_t k = 0; k < s.K; ++k)
            for (int64_t i = 0; i < rows; ++i) {
                float* row = o + (k * rows + i) * run;
                apply_epilogue(ep, row, k, (oy0 + i) * s.Wo + ox0, run);
                vec_f32_to_f16(row, y.half + (k * s.Ho + oy0 + i) * s.Wo + ox0, run);
            }
    };
    const int64_t items = tiles_y * blocks_x;
    pool.parallel_for(static_cast<size_t>(items), 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) run_block(static_cast<int64_t>(i));
    });
}

}  // namespace loom::device::cpu
