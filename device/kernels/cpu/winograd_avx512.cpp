// AVX-512 block transforms for Winograd F(4x4, 3x3), F(2x2, 3x3) and F(6x6, 3x3), sixteen tiles
// per vector (F(6,3): two-source permutes, see Perm6):
// winograd_avx2.cpp's shuffles on vectors twice as wide. They work within 128-bit lanes, so the
// same steps de-interleave sixteen tiles instead of eight; only the order the tiles come out in
// differs (F(4,3): lane L of the vector of column j holds tiles L, L + 4, L + 8, L + 12; F(2,3):
// 2L, 2L + 1, 2L + 8, 2L + 9), and V and M keep it within each group of sixteen, which a V
// panel (16 or 32 wide) never splits; only F(6,3), whose tiles come out in order, has 8-wide
// panels. Every value takes the AVX2 version's operations in the
// same order, so the outputs agree bit for bit. Image edges and the last group of a row use
// masked loads and stores instead of AVX2's blends and copies. Built with -mavx512f..vl.
#include <immintrin.h>

#include <cstdint>

#include "device/kernels/cpu/winograd.hpp"

namespace loom::device::cpu {

namespace {

// Local min/max: no std:: templates are instantiated with AVX-512 code generation in this file,
// so the linker can never pick an AVX-512 copy for baseline callers.
inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Lanes lo <= i < hi on (lo, hi may lie outside 0..16).
inline __mmask16 lanes(int64_t lo, int64_t hi) {
    lo = imax(lo, 0), hi = imin(hi, 16);
    if (hi <= lo) return 0;
    return static_cast<__mmask16>(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// Sixteen values of a map to and from fp32: fp32 as is, fp16 through vcvtph2ps / vcvtps2ph
// (exact widening; narrowing rounds to nearest even whatever MXCSR says, the bits of types.hpp's
// f32_to_f16); the masked forms touch only the lanes on.
// The conversions go through their zero-masked forms with every lane on (the same
// instructions) for the reason unpacklo gives below.
constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
inline __m512 widen(__m256i h) { return _mm512_maskz_cvtph_ps(0xFFFF, h); }
inline __m256i narrow(__m512 v) { return _mm512_maskz_cvtps_ph(0xFFFF, v, kRound); }
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const f16* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load16(const f16* p, __mmask16 m) { return widen(_mm256_maskz_loadu_epi16(m, p)); }
inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline void store16(f16* p, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), narrow(v)); }
inline void store16(float* p, __mmask16 m, __m512 v) { _mm512_mask_storeu_ps(p, m, v); }
inline void store16(f16* p, __mmask16 m, __m512 v) { _mm256_mask_storeu_epi16(p, m, narrow(v)); }

// unpacklo/hi through their masked forms with every lane on (the same instruction): GCC 12's
// plain _mm512_unpack*_ps (and max/min) pass an _mm512_undefined_ps() that
// -Wmaybe-uninitialized flags.
inline __m512 unpacklo(__m512 a, __m512 b) { return _mm512_mask_unpacklo_ps(a, 0xFFFF, a, b); }
inline __m512 unpackhi(__m512 a, __m512 b) { return _mm512_mask_unpackhi_ps(a, 0xFFFF, a, b); }
// max and min likewise, zero-masked with every lane on: vmaxps / vminps a, b (b when either is NaN).
inline __m512 max(__m512 a, __m512 b) { return _mm512_maskz_max_ps(0xFFFF, a, b); }
inline __m512 min(__m512 a, __m512 b) { return _mm512_maskz_min_ps(0xFFFF, a, b); }

// a0..a3 hold 64 consecutive floats x0..x63 (tile t's columns at 4t..4t+3: one 128-bit lane per
// tile); d[j] gets x[4t + j] for the sixteen t (permuted).
inline void deinterleave4(const float* p, __m512& d0, __m512& d1, __m512& d2, __m512& d3) {
    const __m512 a0 = _mm512_loadu_ps(p), a1 = _mm512_loadu_ps(p + 16), a2 = _mm512_loadu_ps(p + 32),
                 a3 = _mm512_loadu_ps(p + 48);
    const __m512 t0 = unpacklo(a0, a1), t1 = unpackhi(a0, a1);
    const __m512 t2 = unpacklo(a2, a3), t3 = unpackhi(a2, a3);
    d0 = _mm512_shuffle_ps(t0, t2, 0x44), d1 = _mm512_shuffle_ps(t0, t2, 0xEE);
    d2 = _mm512_shuffle_ps(t1, t3, 0x44), d3 = _mm512_shuffle_ps(t1, t3, 0xEE);
}

// Columns 0 and 1 only.
inline void deinterleave4_01(const float* p, __m512& d0, __m512& d1) {
    const __m512 a0 = _mm512_loadu_ps(p), a1 = _mm512_loadu_ps(p + 16), a2 = _mm512_loadu_ps(p + 32),
                 a3 = _mm512_loadu_ps(p + 48);
    const __m512 t0 = unpacklo(a0, a1), t2 = unpacklo(a2, a3);
    d0 = _mm512_shuffle_ps(t0, t2, 0x44), d1 = _mm512_shuffle_ps(t0, t2, 0xEE);
}

// The inverse of deinterleave4: the 64 floats x[4t + j] = o_j[t], the first `valid` of them
// stored to p.
template <typename T>
inline void interleave4(__m512 o0, __m512 o1, __m512 o2, __m512 o3, T* p, int64_t valid) {
    const __m512 t0 = _mm512_shuffle_ps(o0, o1, 0x44), t2 = _mm512_shuffle_ps(o0, o1, 0xEE);
    const __m512 t1 = _mm512_shuffle_ps(o2, o3, 0x44), t3 = _mm512_shuffle_ps(o2, o3, 0xEE);
    const __m512 r[4] = {
        _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)),
        _mm512_shuffle_ps(t2, t3, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(t2, t3, _MM_SHUFFLE(3, 1, 3, 1))};
    if (valid == 64) {
        for (int q = 0; q < 4; ++q) store16(p + 16 * q, r[q]);
        return;
    }
    for (int q = 0; q < 4; ++q) store16(p + 16 * q, lanes(0, valid - 16 * q), r[q]);
}

// 32 consecutive floats x0..x31: d0 gets x[2t], d1 x[2t + 1] (permuted).
inline void deinterleave2(const float* p, __m512& d0, __m512& d1) {
    const __m512 a0 = _mm512_loadu_ps(p), a1 = _mm512_loadu_ps(p + 16);
    d0 = _mm512_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0));
    d1 = _mm512_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1));
}

// The inverse of deinterleave2: the 32 floats x[2t + j] = o_j[t], the first `valid` stored. Lane
// L holds tiles 2L, 2L + 1, 2L + 8, 2L + 9, so unpacklo gives tiles 0..7 and unpackhi 8..15.
template <typename T>
inline void interleave2(__m512 o0, __m512 o1, T* p, int64_t valid) {
    const __m512 lo = unpacklo(o0, o1), hi = unpackhi(o0, o1);
    if (valid == 32) {
        store16(p, lo), store16(p + 16, hi);
        return;
    }
    store16(p, lanes(0, valid), lo);
    store16(p + 16, lanes(0, valid - 16), hi);
}

// v = B^T d, F(4,3).
inline void bt6(const __m512* d, __m512* v) {
    const __m512 four = _mm512_set1_ps(4), five = _mm512_set1_ps(5), two = _mm512_set1_ps(2);
    v[0] = _mm512_fnmadd_ps(five, d[2], _mm512_fmadd_ps(four, d[0], d[4]));
    v[1] = _mm512_fnmadd_ps(four, _mm512_add_ps(d[1], d[2]), _mm512_add_ps(d[3], d[4]));
    v[2] = _mm512_fmadd_ps(four, _mm512_sub_ps(d[1], d[2]), _mm512_sub_ps(d[4], d[3]));
    const __m512 d42 = _mm512_sub_ps(d[4], d[2]), d31 = _mm512_sub_ps(d[3], d[1]);
    v[3] = _mm512_fmadd_ps(two, d31, d42);
    v[4] = _mm512_fnmadd_ps(two, d31, d42);
    v[5] = _mm512_fnmadd_ps(five, d[3], _mm512_fmadd_ps(four, d[1], d[5]));
}

// o = A^T m, F(4,3).
inline void at6(__m512 m0, __m512 m1, __m512 m2, __m512 m3, __m512 m4, __m512 m5, __m512* o) {
    const __m512 a = _mm512_add_ps(m1, m2), b = _mm512_sub_ps(m1, m2);
    const __m512 c = _mm512_add_ps(m3, m4), d = _mm512_sub_ps(m3, m4);
    o[0] = _mm512_add_ps(_mm512_add_ps(m0, a), c);
    o[1] = _mm512_fmadd_ps(_mm512_set1_ps(2), d, b);
    o[2] = _mm512_fmadd_ps(_mm512_set1_ps(4), c, a);
    o[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8), d, b), m5);
}

// v = B^T d, F(2,3).
inline void bt4(const __m512* d, __m512* v) {
    v[0] = _mm512_sub_ps(d[0], d[2]);
    v[1] = _mm512_add_ps(d[1], d[2]);
    v[2] = _mm512_sub_ps(d[2], d[1]);
    v[3] = _mm512_sub_ps(d[1], d[3]);
}

// o = A^T m, F(2,3).
inline void at4(__m512 m0, __m512 m1, __m512 m2, __m512 m3, __m512* o) {
    o[0] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
    o[1] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
}

// v = B^T d, F(6,3), in the operations of winograd_avx2.cpp's bt8.
inline void bt8(const __m512* d, __m512* v) {
    const __m512 c525 = _mm512_set1_ps(5.25f), c425 = _mm512_set1_ps(4.25f), c125 = _mm512_set1_ps(1.25f),
                 c25 = _mm512_set1_ps(2.5f);
    v[0] = _mm512_fmadd_ps(c525, _mm512_sub_ps(d[4], d[2]), _mm512_sub_ps(d[0], d[6]));
    v[7] = _mm512_fmadd_ps(c525, _mm512_sub_ps(d[3], d[5]), _mm512_sub_ps(d[7], d[1]));
    const __m512 a12 = _mm512_fnmadd_ps(c425, d[4], _mm512_add_ps(d[2], d[6]));
    const __m512 b12 = _mm512_fnmadd_ps(c425, d[3], _mm512_add_ps(d[1], d[5]));
    v[1] = _mm512_add_ps(a12, b12);
    v[2] = _mm512_sub_ps(a12, b12);
    const __m512 a34 = _mm512_fnmadd_ps(c125, d[4], _mm512_fmadd_ps(_mm512_set1_ps(0.25f), d[2], d[6]));
    const __m512 b34 = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d[5],
                                       _mm512_fnmadd_ps(c25, d[3], _mm512_mul_ps(_mm512_set1_ps(0.5f), d[1])));
    v[3] = _mm512_add_ps(a34, b34);
    v[4] = _mm512_sub_ps(a34, b34);
    const __m512 a56 = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), _mm512_fnmadd_ps(c125, d[4], d[2]), d[6]);
    const __m512 b56 = _mm512_fmadd_ps(_mm512_set1_ps(0.5f), d[5], _mm512_fnmadd_ps(c25, d[3], _mm512_add_ps(d[1], d[1])));
    v[5] = _mm512_add_ps(a56, b56);
    v[6] = _mm512_sub_ps(a56, b56);
}

// o = A^T m, F(6,3).
inline void at8(const __m512* m, __m512* o) {
    const __m512 a = _mm512_add_ps(m[1], m[2]), b = _mm512_add_ps(m[3], m[4]), c = _mm512_add_ps(m[5], m[6]);
    const __m512 d = _mm512_sub_ps(m[1], m[2]), e = _mm512_sub_ps(m[3], m[4]), f = _mm512_sub_ps(m[5], m[6]);
    o[0] = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(m[0], a), b), c);
    o[1] = _mm512_fmadd_ps(_mm512_set1_ps(0.5f), f, _mm512_fmadd_ps(_mm512_set1_ps(2.0f), e, d));
    o[2] = _mm512_fmadd_ps(_mm512_set1_ps(0.25f), c, _mm512_fmadd_ps(_mm512_set1_ps(4.0f), b, a));
    o[3] = _mm512_fmadd_ps(_mm512_set1_ps(0.125f), f, _mm512_fmadd_ps(_mm512_set1_ps(8.0f), e, d));
    o[4] = _mm512_fmadd_ps(_mm512_set1_ps(0.0625f), c, _mm512_fmadd_ps(_mm512_set1_ps(16.0f), b, a));
    o[5] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(0.03125f), f, _mm512_fmadd_ps(_mm512_set1_ps(32.0f), e, d)),
                         m[7]);
}

// F(6,3)'s tiles sit 6 floats apart, which no in-lane shuffle separates: two-source permutes over
// pairs of vectors do. Phase j of sixteen tiles (x[6t + j], t = 0..15) comes from x0..x95, vector
// pair (2a, 2a + 1) holding x[32a .. 32a + 31]: lane t takes (6t + j) % 32 of pair (6t + j) / 32.
// The inverse puts six phase vectors o_j back in order: float p = 16q + l of the 96 is
// o_{p % 6}[p / 6], from pair (p % 6) / 2 at index (p % 6 % 2) x 16 + p / 6.
struct Perm6 {
    int32_t idx[6][16];
    __mmask16 pair1[6], pair2[6];  // lanes taken from pair 1 and 2 (the rest: pair 0)
};
constexpr Perm6 make_perm6(bool inverse) {
    Perm6 p{};
    for (int j = 0; j < 6; ++j)
        for (int l = 0; l < 16; ++l) {
            const int at = inverse ? 16 * j + l : 6 * l + j;                   // the float's place in x0..x95
            const int pair = inverse ? at % 6 / 2 : at / 32;
            p.idx[j][l] = inverse ? at % 6 % 2 * 16 + at / 6 : at % 32;
            if (pair == 1) p.pair1[j] = static_cast<__mmask16>(p.pair1[j] | (1u << l));
            if (pair == 2) p.pair2[j] = static_cast<__mmask16>(p.pair2[j] | (1u << l));
        }
    return p;
}
constexpr Perm6 kDeinterleave6 = make_perm6(false), kInterleave6 = make_perm6(true);

// out[j] = lanes of three permuted pairs of in (in[0..5]) by table row j.
inline __m512 permute6(const Perm6& p, int j, const __m512* in) {
    const __m512i idx = _mm512_loadu_si512(p.idx[j]);
    const __m512 p0 = _mm512_permutex2var_ps(in[0], idx, in[1]), p1 = _mm512_permutex2var_ps(in[2], idx, in[3]),
                 p2 = _mm512_permutex2var_ps(in[4], idx, in[5]);
    return _mm512_mask_blend_ps(p.pair2[j], _mm512_mask_blend_ps(p.pair1[j], p0, p1), p2);
}

// Lanes 1..15 of lo, then lane 0 of hi (valignd by one lane, through its masked form with every
// lane on for the reason unpacklo gives above).
inline __m512i next_lane(__m512i hi, __m512i lo) { return _mm512_mask_alignr_epi32(lo, 0xFFFF, hi, lo, 1); }

// d[j] = x[6t + j] for sixteen tiles t, j = 0..7, from the 112 floats at x (98 used).
inline void deinterleave6(const float* x, __m512* d) {
    __m512 r[7];
    for (int i = 0; i < 7; ++i) r[i] = _mm512_loadu_ps(x + 16 * i);
    for (int j = 0; j < 6; ++j) d[j] = permute6(kDeinterleave6, j, r);
    // Phases 6 and 7 are phases 0 and 1 of the next tile: one lane on, x96 and x97 last.
    const __m512i r6 = _mm512_castps_si512(r[6]);
    d[6] = _mm512_castsi512_ps(next_lane(r6, _mm512_castps_si512(d[0])));
    d[7] = _mm512_castsi512_ps(next_lane(next_lane(r6, r6), _mm512_castps_si512(d[1])));
}

// The inverse for the six output phases: x[6t + j] = o[j][t], the first `valid` of the 96 stored.
template <typename T>
inline void interleave6(const __m512* o, T* x, int64_t valid) {
    for (int q = 0; q < 6; ++q) {
        const __m512 w = permute6(kInterleave6, q, o);
        if (valid >= 16 * q + 16) store16(x + 16 * q, w);
        else store16(x + 16 * q, lanes(0, valid - 16 * q), w);
    }
}

// WinogradEpilogue on the values of output channel k (bias and slope broadcast by the caller),
// with apply_epilogue's operations: max(0, v) and min(0, v) keep v when it is NaN or -0, as
// std::max(v, 0.0f) and std::min(v, 0.0f) do.
inline __m512 fused_epilogue(const WinogradEpilogue& ep, __m512 v, __m512 bias, __m512 slope) {
    if (ep.bias) v = _mm512_add_ps(v, bias);
    const __m512 zero = _mm512_setzero_ps();
    switch (ep.act) {
    case Act::RELU: return max(zero, v);
    case Act::LEAKY_RELU:
    case Act::PRELU: return _mm512_add_ps(max(zero, v), _mm512_mul_ps(min(zero, v), slope));
    default: return v;
    }
}

// The per-channel operands of fused_epilogue for channel k: bias and slope (alpha for LEAKY_RELU).
inline void fused_operands(const WinogradEpilogue& ep, int64_t k, __m512& bias, __m512& slope) {
    bias = _mm512_set1_ps(ep.bias ? ep.bias[k * ep.bias_rs] : 0.0f);
    slope = _mm512_set1_ps(ep.act == Act::LEAKY_RELU ? ep.alpha : ep.slope ? ep.slope[k * ep.slope_rs] : 0.0f);
}

template <int M>
inline void bt(const __m512* d, __m512* v) {
    if constexpr (M == 6) bt8(d, v);
    else if constexpr (M == 4) bt6(d, v);
    else bt4(d, v);
}

// The input transform of F(M x M, 3x3): the vertical pass reads the N = M + 2 input rows in
// place (columns outside the image masked off: a masked load never touches the masked-out
// addresses) and writes N transformed rows of `width` floats to work; the horizontal pass
// de-interleaves sixteen tiles at a time and writes their N x N values into the V panels.
template <int M, typename T>
void input_avx512(const WinogradBlock& b, const T* x, float* v, float* work) {
    constexpr int N = M + 2;
    const int64_t width = M * b.tiles_padded + 16;  // whole vectors, with room for the shifted load
    const int64_t cols = M * b.tiles + 2;           // input columns the block really covers
    const int64_t NR = b.nr, panels = winograd_panel_count(b.tiles_gemm, NR), ps = b.panel_stride;
    float* t = work;
    const int64_t j_lo = imax(0, -b.ix0), j_hi = imin(cols, b.W - b.ix0);
    for (int64_t c = 0; c < b.C; ++c) {
        const T* xc = x + c * b.H * b.W;
        const T* src[N];
        for (int64_t i = 0; i < N; ++i) {
            const int64_t iy = b.iy0 + i;
            src[i] = iy >= 0 && iy < b.H && j_hi > j_lo ? xc + iy * b.W + b.ix0 : nullptr;
        }
        // The next channel's rows, a few hundred floats each and a whole plane apart, are too
        // short for the hardware prefetchers: ask for them now, while this channel is transformed.
        if (c + 1 < b.C)
            for (int64_t i = 0; i < N; ++i)
                if (src[i])
                    for (int64_t j = j_lo; j < j_hi; j += 64 / sizeof(T))
                        _mm_prefetch(reinterpret_cast<const char*>(src[i] + b.H * b.W + j), _MM_HINT_T0);
        for (int64_t j = 0; j < width; j += 16) {
            __m512 r[N];
            if (j >= j_lo && j + 16 <= j_hi) {
                for (int i = 0; i < N; ++i) r[i] = src[i] ? load16(src[i] + j) : _mm512_setzero_ps();
            } else {
                const __mmask16 mask = lanes(j_lo - j, j_hi - j);
                for (int i = 0; i < N; ++i) r[i] = src[i] ? load16(src[i] + j, mask) : _mm512_setzero_ps();
            }
            __m512 o[N];
            bt<M>(r, o);
            for (int k = 0; k < N; ++k) _mm512_storeu_ps(t + k * width + j, o[k]);
        }
        for (int64_t k = 0; k < N; ++k) {
            const float* tk = t + k * width;
            for (int64_t g = 0; g < b.tiles_gemm; g += 16) {
                __m512 d[N], o[N];
                if constexpr (M == 6) {
                    deinterleave6(tk + 6 * g, d);
                } else if constexpr (M == 4) {
                    deinterleave4(tk + 4 * g, d[0], d[1], d[2], d[3]);
                    deinterleave4_01(tk + 4 * g + 4, d[4], d[5]);
                } else {
                    deinterleave2(tk + 2 * g, d[0], d[1]);
                    deinterleave2(tk + 2 * g + 2, d[2], d[3]);
                }
                bt<M>(d, o);
                const WinogradPanel p = winograd_panel(g, b.tiles_gemm, NR);
                float* dst = v + (k * N * panels + p.q) * ps + c * p.width + p.at;
                if (p.width == 8)  // the block's last 8 tiles: the vector's low half
                    for (int l = 0; l < N; ++l) _mm512_mask_storeu_ps(dst + l * panels * ps, 0x00FF, o[l]);
                else
                    for (int l = 0; l < N; ++l) _mm512_store_ps(dst + l * panels * ps, o[l]);
            }
        }
    }
}

template <int M>
void input_avx512(const WinogradBlock& b, float* v, float* work) {
    if (b.x.half) input_avx512<M>(b, b.x.half, v, work);
    else input_avx512<M>(b, b.x.f32, v, work);
}

// The six output rows of channel k's sixteen tiles g.. (mk = M at channel k, tile g; lanes past
// `tiles` read as zeros), through the fused epilogue where there is one: o[i][j] is output row i,
// column phase j.
inline void rows63(const float* mk, int64_t es, __mmask16 live, const WinogradEpilogue* ep, __m512 bias,
                   __m512 slope, int64_t rows, __m512 (&o)[6][6]) {
    __m512 s[8][6];  // along the columns of each of the 8 rows of positions
    for (int r = 0; r < 8; ++r) {
        __m512 mr[8];
        for (int c = 0; c < 8; ++c) mr[c] = _mm512_maskz_load_ps(live, mk + (r * 8 + c) * es);
        at8(mr, s[r]);
    }
    for (int j = 0; j < 6; ++j) {
        const __m512 col[8] = {s[0][j], s[1][j], s[2][j], s[3][j], s[4][j], s[5][j], s[6][j], s[7][j]};
        __m512 out[6];
        at8(col, out);
        for (int i = 0; i < 6; ++i) o[i][j] = out[i];
    }
    if (ep)
        for (int64_t i = 0; i < rows; ++i)
            for (int j = 0; j < 6; ++j) o[i][j] = fused_epilogue(*ep, o[i][j], bias, slope);
}

// n floats from src to dst, dst's whole cache lines through non-temporal stores (the ends, which
// may share a line with a neighbouring block's outputs, through ordinary ones).
inline void stream_row(const float* src, float* dst, int64_t n) {
    const int64_t head = imin(n, static_cast<int64_t>((64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63) / 4);
    if (head) _mm512_mask_storeu_ps(dst, lanes(0, head), _mm512_maskz_loadu_ps(lanes(0, head), src));
    int64_t i = head;
    for (; i + 16 <= n; i += 16) _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
    if (i < n) _mm512_mask_storeu_ps(dst + i, lanes(0, n - i), _mm512_maskz_loadu_ps(lanes(0, n - i), src + i));
}

// The same into an fp16 row, rounded as store16 rounds: 32 values (one line) a stream store.
inline void stream_row(const float* src, f16* dst, int64_t n) {
    const int64_t head = imin(n, static_cast<int64_t>((64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63) / 2);
    for (int64_t i = 0; i < head; i += 16) store16(dst + i, lanes(0, head - i), load16(src + i, lanes(0, head - i)));
    int64_t i = head;
    for (; i + 32 <= n; i += 32) {
        // (vinserti64x4 through its zero-masked form with every lane on, as unpacklo below)
        const __m512i lo = _mm512_maskz_inserti64x4(0xFF, _mm512_setzero_si512(), narrow(_mm512_loadu_ps(src + i)), 0);
        const __m512i line = _mm512_maskz_inserti64x4(0xFF, lo, narrow(_mm512_loadu_ps(src + i + 16)), 1);
        _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), line);
    }
    for (; i < n; i += 16) store16(dst + i, lanes(0, n - i), load16(src + i, lanes(0, n - i)));
}

template <typename T>
void output63(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, T* y, int64_t Ho, int64_t Wo,
              int64_t oy0, int64_t ox0, const WinogradEpilogue* ep, bool streamed) {
    const int64_t rows = imin(6, Ho - oy0);
    // A streamed map (WinogradOut::stream, kWinogradStreamBytes) gets its rows through a buffer
    // and non-temporal stores: no line is read before it is overwritten. Only the stores change,
    // not the values.
    const bool stream = streamed && tiles <= kWinogradBlockTiles;
    alignas(64) float buf[6][6 * kWinogradBlockTiles + 16];
    const int64_t run = imin(6 * tiles, Wo - ox0);
    for (int64_t k = 0; k < K; ++k) {
        __m512 bias = _mm512_setzero_ps(), slope = bias;
        if (ep) fused_operands(*ep, k, bias, slope);
        for (int64_t g = 0; g < tiles; g += 16) {
            // The last group's lanes past `tiles` are not read (the GEMMs may have left them
            // unwritten: runs of 8, winograd.hpp) and come out as zeros nothing stores.
            __m512 o[6][6];
            rows63(m + k * ks + g, es, lanes(0, tiles - g), ep, bias, slope, rows, o);
            const int64_t ox = ox0 + 6 * g;
            const int64_t valid = imin(96, imin(6 * (tiles - g), Wo - ox));
            for (int64_t i = 0; i < rows; ++i) {
                if (stream) interleave6(o[i], &buf[i][6 * g], 96);
                else interleave6(o[i], y + (k * Ho + oy0 + i) * Wo + ox, valid);
            }
        }
        if (stream)
            for (int64_t i = 0; i < rows; ++i) stream_row(buf[i], y + (k * Ho + oy0 + i) * Wo + ox0, run);
    }
    if (stream) _mm_sfence();  // the streamed lines reach memory before the block counts as done
}

template <typename T>
void output43(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, T* y, int64_t Ho, int64_t Wo,
              int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    const int64_t rows = imin(4, Ho - oy0);
    for (int64_t k = 0; k < K; ++k) {
        __m512 bias = _mm512_setzero_ps(), slope = bias;
        if (ep) fused_operands(*ep, k, bias, slope);
        for (int64_t g = 0; g < tiles; g += 16) {
            const float* mk = m + k * ks + g;
            __m512 s[6][4];
            for (int r = 0; r < 6; ++r) {
                const float* mr = mk + r * 6 * es;
                at6(_mm512_load_ps(mr), _mm512_load_ps(mr + es), _mm512_load_ps(mr + 2 * es),
                    _mm512_load_ps(mr + 3 * es), _mm512_load_ps(mr + 4 * es), _mm512_load_ps(mr + 5 * es), s[r]);
            }
            const int64_t ox = ox0 + 4 * g;
            const int64_t valid = imin(64, imin(4 * (tiles - g), Wo - ox));
            for (int j = 0; j < 4; ++j) {
                __m512 o[4];
                at6(s[0][j], s[1][j], s[2][j], s[3][j], s[4][j], s[5][j], o);
                for (int i = 0; i < 4; ++i) s[i][j] = o[i];  // s[i][j] now holds output row i, column phase j
            }
            if (ep) {
                for (int64_t i = 0; i < rows; ++i)
                    for (int j = 0; j < 4; ++j) s[i][j] = fused_epilogue(*ep, s[i][j], bias, slope);
            }
            for (int64_t i = 0; i < rows; ++i)
                interleave4(s[i][0], s[i][1], s[i][2], s[i][3], y + (k * Ho + oy0 + i) * Wo + ox, valid);
        }
    }
}

template <typename T>
void output23(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, T* y, int64_t Ho, int64_t Wo,
              int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    const int64_t rows = imin(2, Ho - oy0);
    for (int64_t k = 0; k < K; ++k) {
        __m512 bias = _mm512_setzero_ps(), slope = bias;
        if (ep) fused_operands(*ep, k, bias, slope);
        for (int64_t g = 0; g < tiles; g += 16) {
            const float* mk = m + k * ks + g;
            __m512 s[4][2];
            for (int r = 0; r < 4; ++r) {
                const float* mr = mk + r * 4 * es;
                at4(_mm512_load_ps(mr), _mm512_load_ps(mr + es), _mm512_load_ps(mr + 2 * es),
                    _mm512_load_ps(mr + 3 * es), s[r]);
            }
            const int64_t ox = ox0 + 2 * g;
            const int64_t valid = imin(32, imin(2 * (tiles - g), Wo - ox));
            __m512 o[2][2];  // o[i][j]: output row i, column phase j
            for (int j = 0; j < 2; ++j) {
                __m512 col[2];
                at4(s[0][j], s[1][j], s[2][j], s[3][j], col);
                o[0][j] = col[0], o[1][j] = col[1];
            }
            if (ep) {
                for (int64_t i = 0; i < rows; ++i)
                    for (int j = 0; j < 2; ++j) o[i][j] = fused_epilogue(*ep, o[i][j], bias, slope);
            }
            for (int64_t i = 0; i < rows; ++i) interleave2(o[i][0], o[i][1], y + (k * Ho + oy0 + i) * Wo + ox, valid);
        }
    }
}

}  // namespace

void winograd43_input_avx512(const WinogradBlock& b, float* v, float* work) { input_avx512<4>(b, v, work); }
void winograd23_input_avx512(const WinogradBlock& b, float* v, float* work) { input_avx512<2>(b, v, work); }
void winograd63_input_avx512(const WinogradBlock& b, float* v, float* work) { input_avx512<6>(b, v, work); }

void winograd63_output_avx512(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                              int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    if (y.half) output63(m, es, ks, tiles, K, y.half, Ho, Wo, oy0, ox0, ep, y.stream);
    else output63(m, es, ks, tiles, K, y.f32, Ho, Wo, oy0, ox0, ep, y.stream);
}
void winograd43_output_avx512(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                              int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    if (y.half) output43(m, es, ks, tiles, K, y.half, Ho, Wo, oy0, ox0, ep);
    else output43(m, es, ks, tiles, K, y.f32, Ho, Wo, oy0, ox0, ep);
}
void winograd23_output_avx512(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                              int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    if (y.half) output23(m, es, ks, tiles, K, y.half, Ho, Wo, oy0, ox0, ep);
    else output23(m, es, ks, tiles, K, y.f32, Ho, Wo, oy0, ox0, ep);
}

}  // namespace loom::device::cpu
