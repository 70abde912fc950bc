// AVX2 + FMA block transforms for Winograd F(4x4, 3x3), F(2x2, 3x3) and F(6x6, 3x3), eight
// tiles per vector (F(6,3)'s tiles, 6 floats apart: 8 x 8 transposes of one load per tile).
// F(4,3): tile t's six input columns sit at 4t .. 4t+5 of a transformed row, so a 4-way
// de-interleave of 32 floats gives columns 0..3 of eight tiles (and one more, 4 floats on, gives
// columns 4 and 5); the shuffles leave the tiles in the order 0 2 4 6 1 3 5 7. F(2,3): tile t's
// four columns sit at 2t .. 2t+3, a 2-way de-interleave of 16 floats gives columns 0 and 1 (and
// one 2 floats on, columns 2 and 3) in the order 0 1 4 5 2 3 6 7. V and M keep that order (the
// GEMM does not care) and the output transform's interleave, the exact inverse, puts them back.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "device/kernels/cpu/vmath.hpp"
#include "device/kernels/cpu/winograd.hpp"

namespace loom::device::cpu {

namespace {

// Local min/max: no std:: templates are instantiated with AVX2 code generation in this file,
// so the linker can never pick an AVX2 copy for baseline callers.
inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// Eight values of a map to and from fp32: fp32 as is, fp16 through F16C (exact widening;
// narrowing rounds to nearest even whatever MXCSR says, the bits of types.hpp's f32_to_f16).
constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load8(const f16* p) { return load8(reinterpret_cast<const uint16_t*>(p)); }
inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline void store8(uint16_t* p, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, kRound)); }
inline void store8(f16* p, __m256 v) { store8(reinterpret_cast<uint16_t*>(p), v); }
// The local buffers of a T map hold raw bits (uint16_t for f16): an f16 array would run f16's
// implicitly inline default constructor, which an unoptimised build could emit from this file
// for every caller (see imin).
template <typename T>
struct Raw {
    using type = float;
};
template <>
struct Raw<f16> {
    using type = uint16_t;
};
// Lanes lo <= l < hi of the eight at p (mask: those lanes on), the rest zero; nothing else is
// read. fp32 through vmaskmovps; fp16, which has no masked load, through a copy.
inline __m256 load8_part(const float* p, __m256i mask, int64_t, int64_t) { return _mm256_maskload_ps(p, mask); }
inline __m256 load8_part(const f16* p, __m256i, int64_t lo, int64_t hi) {
    alignas(16) uint16_t tmp[8] = {};
    for (int64_t l = imax(lo, 0); l < imin(hi, 8); ++l) tmp[l] = p[l].bits;
    return load8(tmp);
}

// a0..a3 hold 32 consecutive floats x0..x31; d[j] gets x[4t + j] for the eight t (permuted).
inline void deinterleave4(const float* p, __m256& d0, __m256& d1, __m256& d2, __m256& d3) {
    const __m256 a0 = _mm256_loadu_ps(p), a1 = _mm256_loadu_ps(p + 8), a2 = _mm256_loadu_ps(p + 16),
                 a3 = _mm256_loadu_ps(p + 24);
    const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
    const __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
    d0 = _mm256_shuffle_ps(t0, t2, 0x44), d1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    d2 = _mm256_shuffle_ps(t1, t3, 0x44), d3 = _mm256_shuffle_ps(t1, t3, 0xEE);
}

// Columns 0 and 1 only.
inline void deinterleave4_01(const float* p, __m256& d0, __m256& d1) {
    const __m256 a0 = _mm256_loadu_ps(p), a1 = _mm256_loadu_ps(p + 8), a2 = _mm256_loadu_ps(p + 16),
                 a3 = _mm256_loadu_ps(p + 24);
    const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t2 = _mm256_unpacklo_ps(a2, a3);
    d0 = _mm256_shuffle_ps(t0, t2, 0x44), d1 = _mm256_shuffle_ps(t0, t2, 0xEE);
}

// The inverse of deinterleave4: writes the 32 floats x[4t + j] = o_j[t] to p.
template <typename T>
inline void interleave4(__m256 o0, __m256 o1, __m256 o2, __m256 o3, T* p) {
    const __m256 t0 = _mm256_shuffle_ps(o0, o1, 0x44), t2 = _mm256_shuffle_ps(o0, o1, 0xEE);
    const __m256 t1 = _mm256_shuffle_ps(o2, o3, 0x44), t3 = _mm256_shuffle_ps(o2, o3, 0xEE);
    store8(p, _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)));
    store8(p + 8, _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    store8(p + 16, _mm256_shuffle_ps(t2, t3, _MM_SHUFFLE(2, 0, 2, 0)));
    store8(p + 24, _mm256_shuffle_ps(t2, t3, _MM_SHUFFLE(3, 1, 3, 1)));
}

// 16 consecutive floats x0..x15: d0 gets x[2t], d1 x[2t + 1] (tiles in the order 0 1 4 5 2 3 6 7).
inline void deinterleave2(const float* p, __m256& d0, __m256& d1) {
    const __m256 a0 = _mm256_loadu_ps(p), a1 = _mm256_loadu_ps(p + 8);
    d0 = _mm256_shuffle_ps(a0, a1, _MM_SHUFFLE(2, 0, 2, 0));
    d1 = _mm256_shuffle_ps(a0, a1, _MM_SHUFFLE(3, 1, 3, 1));
}

// The inverse of deinterleave2: the 16 floats x[2t + j] = o_j[t]. Lanes 0 1 | 2 3 | 4 5 | 6 7
// hold tiles 0 1 | 4 5 | 2 3 | 6 7, so unpacklo gives tiles 0..3 and unpackhi tiles 4..7.
template <typename T>
inline void interleave2(__m256 o0, __m256 o1, T* p) {
    store8(p, _mm256_unpacklo_ps(o0, o1));
    store8(p + 8, _mm256_unpackhi_ps(o0, o1));
}

// v = B^T d, F(4,3).
inline void bt6(const __m256* d, __m256* v) {
    const __m256 four = _mm256_set1_ps(4), five = _mm256_set1_ps(5), two = _mm256_set1_ps(2);
    v[0] = _mm256_fnmadd_ps(five, d[2], _mm256_fmadd_ps(four, d[0], d[4]));
    v[1] = _mm256_fnmadd_ps(four, _mm256_add_ps(d[1], d[2]), _mm256_add_ps(d[3], d[4]));
    v[2] = _mm256_fmadd_ps(four, _mm256_sub_ps(d[1], d[2]), _mm256_sub_ps(d[4], d[3]));
    const __m256 d42 = _mm256_sub_ps(d[4], d[2]), d31 = _mm256_sub_ps(d[3], d[1]);
    v[3] = _mm256_fmadd_ps(two, d31, d42);
    v[4] = _mm256_fnmadd_ps(two, d31, d42);
    v[5] = _mm256_fnmadd_ps(five, d[3], _mm256_fmadd_ps(four, d[1], d[5]));
}

// o = A^T m, F(4,3).
inline void at6(__m256 m0, __m256 m1, __m256 m2, __m256 m3, __m256 m4, __m256 m5, __m256* o) {
    const __m256 a = _mm256_add_ps(m1, m2), b = _mm256_sub_ps(m1, m2);
    const __m256 c = _mm256_add_ps(m3, m4), d = _mm256_sub_ps(m3, m4);
    o[0] = _mm256_add_ps(_mm256_add_ps(m0, a), c);
    o[1] = _mm256_fmadd_ps(_mm256_set1_ps(2), d, b);
    o[2] = _mm256_fmadd_ps(_mm256_set1_ps(4), c, a);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8), d, b), m5);
}

// v = B^T d, F(2,3).
inline void bt4(const __m256* d, __m256* v) {
    v[0] = _mm256_sub_ps(d[0], d[2]);
    v[1] = _mm256_add_ps(d[1], d[2]);
    v[2] = _mm256_sub_ps(d[2], d[1]);
    v[3] = _mm256_sub_ps(d[1], d[3]);
}

// o = A^T m, F(2,3).
inline void at4(__m256 m0, __m256 m1, __m256 m2, __m256 m3, __m256* o) {
    o[0] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
    o[1] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
}

// v = B^T d, F(6,3) (winograd.cpp's bt8, with FMAs; winograd_avx512.cpp's bt8 is the same).
inline void bt8(const __m256* d, __m256* v) {
    const __m256 c525 = _mm256_set1_ps(5.25f), c425 = _mm256_set1_ps(4.25f), c125 = _mm256_set1_ps(1.25f),
                 c25 = _mm256_set1_ps(2.5f);
    v[0] = _mm256_fmadd_ps(c525, _mm256_sub_ps(d[4], d[2]), _mm256_sub_ps(d[0], d[6]));
    v[7] = _mm256_fmadd_ps(c525, _mm256_sub_ps(d[3], d[5]), _mm256_sub_ps(d[7], d[1]));
    const __m256 a12 = _mm256_fnmadd_ps(c425, d[4], _mm256_add_ps(d[2], d[6]));
    const __m256 b12 = _mm256_fnmadd_ps(c425, d[3], _mm256_add_ps(d[1], d[5]));
    v[1] = _mm256_add_ps(a12, b12);
    v[2] = _mm256_sub_ps(a12, b12);
    const __m256 a34 = _mm256_fnmadd_ps(c125, d[4], _mm256_fmadd_ps(_mm256_set1_ps(0.25f), d[2], d[6]));
    const __m256 b34 = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d[5],
                                       _mm256_fnmadd_ps(c25, d[3], _mm256_mul_ps(_mm256_set1_ps(0.5f), d[1])));
    v[3] = _mm256_add_ps(a34, b34);
    v[4] = _mm256_sub_ps(a34, b34);
    const __m256 a56 = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), _mm256_fnmadd_ps(c125, d[4], d[2]), d[6]);
    const __m256 b56 = _mm256_fmadd_ps(_mm256_set1_ps(0.5f), d[5], _mm256_fnmadd_ps(c25, d[3], _mm256_add_ps(d[1], d[1])));
    v[5] = _mm256_add_ps(a56, b56);
    v[6] = _mm256_sub_ps(a56, b56);
}

// o = A^T m, F(6,3).
inline void at8(const __m256* m, __m256* o) {
    const __m256 a = _mm256_add_ps(m[1], m[2]), b = _mm256_add_ps(m[3], m[4]), c = _mm256_add_ps(m[5], m[6]);
    const __m256 d = _mm256_sub_ps(m[1], m[2]), e = _mm256_sub_ps(m[3], m[4]), f = _mm256_sub_ps(m[5], m[6]);
    o[0] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(m[0], a), b), c);
    o[1] = _mm256_fmadd_ps(_mm256_set1_ps(0.5f), f, _mm256_fmadd_ps(_mm256_set1_ps(2.0f), e, d));
    o[2] = _mm256_fmadd_ps(_mm256_set1_ps(0.25f), c, _mm256_fmadd_ps(_mm256_set1_ps(4.0f), b, a));
    o[3] = _mm256_fmadd_ps(_mm256_set1_ps(0.125f), f, _mm256_fmadd_ps(_mm256_set1_ps(8.0f), e, d));
    o[4] = _mm256_fmadd_ps(_mm256_set1_ps(0.0625f), c, _mm256_fmadd_ps(_mm256_set1_ps(16.0f), b, a));
    o[5] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(0.03125f), f, _mm256_fmadd_ps(_mm256_set1_ps(32.0f), e, d)),
                         m[7]);
}

// The 8 x 8 transpose of r[0..7] in place (unpacks, shuffles, then 128-bit lane swaps).
inline void transpose8(__m256* r) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// WinogradEpilogue on the values of output channel k (bias and slope broadcast by the caller),
// with apply_epilogue's operations: max(0, v) and min(0, v) keep v when it is NaN or -0, as
// std::max(v, 0.0f) and std::min(v, 0.0f) do.
inline __m256 fused_epilogue(const WinogradEpilogue& ep, __m256 v, __m256 bias, __m256 slope) {
    if (ep.bias) v = _mm256_add_ps(v, bias);
    const __m256 zero = _mm256_setzero_ps();
    switch (ep.act) {
    case Act::RELU: return _mm256_max_ps(zero, v);
    case Act::LEAKY_RELU:
    case Act::PRELU: return _mm256_add_ps(_mm256_max_ps(zero, v), _mm256_mul_ps(_mm256_min_ps(zero, v), slope));
    default: return v;
    }
}

// The per-channel operands of fused_epilogue for channel k: bias and slope (alpha for LEAKY_RELU).
inline void fused_operands(const WinogradEpilogue& ep, int64_t k, __m256& bias, __m256& slope) {
    bias = _mm256_set1_ps(ep.bias ? ep.bias[k * ep.bias_rs] : 0.0f);
    slope = _mm256_set1_ps(ep.act == Act::LEAKY_RELU ? ep.alpha : ep.slope ? ep.slope[k * ep.slope_rs] : 0.0f);
}

template <int M>
inline void bt(const __m256* d, __m256* v) {
    if constexpr (M == 6) bt8(d, v);
    else if constexpr (M == 4) bt6(d, v);
    else bt4(d, v);
}

// The input transform of F(M x M, 3x3): the vertical pass reads the N = M + 2 input rows in
// place and writes N transformed rows of `width` floats to work; the horizontal pass
// de-interleaves eight tiles at a time and writes their N x N values into the V panels.
template <int M, typename T>
void input_avx2(const WinogradBlock& b, const T* x, float* v, float* work) {
    constexpr int N = M + 2;
    const int64_t width = M * b.tiles_padded + 8;  // room for the last group's shifted load
    const int64_t cols = M * b.tiles + 2;           // input columns the block really covers
    const int64_t NR = b.nr, panels = winograd_panel_count(b.tiles_gemm, NR), ps = b.panel_stride;
    float* t = work;
    // Valid column range of the image inside [ix0, ix0 + cols).
    const int64_t j_lo = imax(0, -b.ix0), j_hi = imin(cols, b.W - b.ix0);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c = 0; c < b.C; ++c) {
        const T* xc = x + c * b.H * b.W;
        // Rows read in place (no padded copies): rows outside the image are zero, and columns
        // outside it are masked off (a masked load never touches the masked-out addresses).
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
        for (int64_t j = 0; j < width; j += 8) {
            __m256 r[N];
            if (j >= j_lo && j + 8 <= j_hi) {
                for (int i = 0; i < N; ++i) r[i] = src[i] ? load8(src[i] + j) : _mm256_setzero_ps();
            } else {
                // lanes with j_lo <= j + lane < j_hi
                const __m256i pos = _mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(j)));
                const __m256i mask = _mm256_and_si256(
                    _mm256_cmpgt_epi32(pos, _mm256_set1_epi32(static_cast<int>(j_lo) - 1)),
                    _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(j_hi)), pos));
                for (int i = 0; i < N; ++i)
                    r[i] = src[i] ? load8_part(src[i] + j, mask, j_lo - j, j_hi - j) : _mm256_setzero_ps();
            }
            __m256 o[N];
            bt<M>(r, o);
            for (int k = 0; k < N; ++k) _mm256_storeu_ps(t + k * width + j, o[k]);
        }
        for (int64_t k = 0; k < N; ++k) {
            const float* tk = t + k * width;
            for (int64_t g = 0; g < b.tiles_gemm; g += 8) {
                __m256 d[N], o[N];
                if constexpr (M == 6) {
                    // Tiles 6 floats apart: tile t's eight columns are one load at 6t, and an
                    // 8 x 8 transpose turns the eight tiles' rows into the eight phases.
                    for (int tt = 0; tt < 8; ++tt) d[tt] = _mm256_loadu_ps(tk + 6 * (g + tt));
                    transpose8(d);
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
                for (int l = 0; l < N; ++l) _mm256_store_ps(dst + l * panels * ps, o[l]);
            }
        }
    }
}

template <int M>
void input_avx2(const WinogradBlock& b, float* v, float* work) {
    if (b.x.half) input_avx2<M>(b, b.x.half, v, work);
    else input_avx2<M>(b, b.x.f32, v, work);
}

// n floats from src to dst, dst's whole cache lines through non-temporal stores (the ends, which
// may share a line with a neighbouring block's outputs, through ordinary ones).
inline void stream_row(const float* src, float* dst, int64_t n) {
    const int64_t head = imin(n, static_cast<int64_t>((64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63) / 4);
    std::memcpy(dst, src, static_cast<size_t>(head) * sizeof(float));
    int64_t i = head;
    for (; i + 16 <= n; i += 16) {
        _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
        _mm256_stream_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
    }
    std::memcpy(dst + i, src + i, static_cast<size_t>(n - i) * sizeof(float));
}

// The same into an fp16 row, rounded as store8 rounds: 32 values (one line) two stream stores,
// the ends through vmath's F16C conversion.
inline void stream_row(const float* src, f16* dst, int64_t n) {
    const int64_t head = imin(n, static_cast<int64_t>((64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63) / 2);
    vec_f32_to_f16_avx2(src, dst, head);
    int64_t i = head;
    for (; i + 32 <= n; i += 32)
        for (int64_t h = 0; h < 32; h += 16) {
            const __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + h), kRound);
            const __m128i hi = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + h + 8), kRound);
            _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + h), _mm256_set_m128i(hi, lo));
        }
    vec_f32_to_f16_avx2(src + i, dst + i, n - i);
}

template <typename T>
void output63(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, T* y, int64_t Ho, int64_t Wo,
              int64_t oy0, int64_t ox0, const WinogradEpilogue* ep, bool streamed) {
    const int64_t rows = imin(6, Ho - oy0);
    // A streamed map (WinogradOut::stream, kWinogradStreamBytes) gets its rows through a buffer
    // and non-temporal stores: no line is read before it is overwritten. Only the stores change,
    // not the values.
    const bool stream = streamed && tiles <= kWinogradBlockTiles;
    alignas(32) float buf[6][6 * kWinogradBlockTiles + 16];
    const int64_t run = imin(6 * tiles, Wo - ox0);
    for (int64_t k = 0; k < K; ++k) {
        __m256 bias = _mm256_setzero_ps(), slope = bias;
        if (ep) fused_operands(*ep, k, bias, slope);
        for (int64_t g = 0; g < tiles; g += 8) {
            const float* mk = m + k * ks + g;
            __m256 s[8][6];
            for (int r = 0; r < 8; ++r) {
                __m256 mr[8];
                for (int c = 0; c < 8; ++c) mr[c] = _mm256_load_ps(mk + (r * 8 + c) * es);
                at8(mr, s[r]);
            }
            const int64_t ox = ox0 + 6 * g;
            const int64_t valid = imin(48, imin(6 * (tiles - g), Wo - ox));
            __m256 o[6][6];  // o[i][j]: output row i, column phase j
            for (int j = 0; j < 6; ++j) {
                const __m256 col[8] = {s[0][j], s[1][j], s[2][j], s[3][j], s[4][j], s[5][j], s[6][j], s[7][j]};
                __m256 out[6];
                at8(col, out);
                for (int i = 0; i < 6; ++i) o[i][j] = out[i];
            }
            for (int64_t i = 0; i < rows; ++i) {
                // The inverse: the six phases (and two unused rows) transposed to one vector per
                // tile, whose first six values (fewer at the right edge) go to 6t.
                __m256 r[8];
                for (int j = 0; j < 6; ++j) r[j] = ep ? fused_epilogue(*ep, o[i][j], bias, slope) : o[i][j];
                r[6] = r[7] = _mm256_setzero_ps();
                transpose8(r);
                if (stream) {  // whole stores into the buffer, which has room for the last two extra
                    for (int tt = 0; tt < 8; ++tt) _mm256_storeu_ps(&buf[i][6 * (g + tt)], r[tt]);
                    continue;
                }
                // Whole stores in tile order where 8 values fit the row (the next tile's store
                // overwrites the two extra); the rest through a copy (vmaskmovps stores are slow
                // on AMD).
                T* dst = y + (k * Ho + oy0 + i) * Wo + ox;
                for (int64_t tt = 0; tt < 8 && 6 * tt < valid; ++tt) {
                    if (6 * tt + 8 <= valid) {
                        store8(dst + 6 * tt, r[tt]);
                    } else {
                        alignas(32) typename Raw<T>::type tmp[8];
                        store8(tmp, r[tt]);
                        std::memcpy(dst + 6 * tt, tmp, static_cast<size_t>(imin(6, valid - 6 * tt)) * sizeof(T));
                    }
                }
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
        __m256 bias = _mm256_setzero_ps(), slope = bias;
        if (ep) fused_operands(*ep, k, bias, slope);
        for (int64_t g = 0; g < tiles; g += 8) {
            const float* mk = m + k * ks + g;
            __m256 s[6][4];
            for (int r = 0; r < 6; ++r) {
                const float* mr = mk + r * 6 * es;
                at6(_mm256_load_ps(mr), _mm256_load_ps(mr + es), _mm256_load_ps(mr + 2 * es),
                    _mm256_load_ps(mr + 3 * es), _mm256_load_ps(mr + 4 * es), _mm256_load_ps(mr + 5 * es), s[r]);
            }
            const int64_t ox = ox0 + 4 * g;
            const int64_t valid = imin(32, imin(4 * (tiles - g), Wo - ox));
            for (int j = 0; j < 4; ++j) {
                __m256 o[4];
                at6(s[0][j], s[1][j], s[2][j], s[3][j], s[4][j], s[5][j], o);
                for (int i = 0; i < 4; ++i) s[i][j] = o[i];  // s[i][j] now holds output row i, column phase j
            }
            if (ep) {
                for (int64_t i = 0; i < rows; ++i)
                    for (int j = 0; j < 4; ++j) s[i][j] = fused_epilogue(*ep, s[i][j], bias, slope);
            }
            for (int64_t i = 0; i < rows; ++i) {
                T* dst = y + (k * Ho + oy0 + i) * Wo + ox;
                if (valid == 32) {
                    interleave4(s[i][0], s[i][1], s[i][2], s[i][3], dst);
                } else {
                    alignas(32) typename Raw<T>::type tmp[32];
                    interleave4(s[i][0], s[i][1], s[i][2], s[i][3], tmp);
                    std::memcpy(dst, tmp, static_cast<size_t>(valid) * sizeof(T));
                }
            }
        }
    }
}

template <typename T>
void output23(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, T* y, int64_t Ho, int64_t Wo,
              int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    const int64_t rows = imin(2, Ho - oy0);
    for (int64_t k = 0; k < K; ++k) {
        __m256 bias = _mm256_setzero_ps(), slope = bias;
        if (ep) fused_operands(*ep, k, bias, slope);
        for (int64_t g = 0; g < tiles; g += 8) {
            const float* mk = m + k * ks + g;
            __m256 s[4][2];
            for (int r = 0; r < 4; ++r) {
                const float* mr = mk + r * 4 * es;
                at4(_mm256_load_ps(mr), _mm256_load_ps(mr + es), _mm256_load_ps(mr + 2 * es),
                    _mm256_load_ps(mr + 3 * es), s[r]);
            }
            const int64_t ox = ox0 + 2 * g;
            const int64_t valid = imin(16, imin(2 * (tiles - g), Wo - ox));
            __m256 o[2][2];  // o[i][j]: output row i, column phase j
            for (int j = 0; j < 2; ++j) {
                __m256 col[2];
                at4(s[0][j], s[1][j], s[2][j], s[3][j], col);
                o[0][j] = col[0], o[1][j] = col[1];
            }
            if (ep) {
                for (int64_t i = 0; i < rows; ++i)
                    for (int j = 0; j < 2; ++j) o[i][j] = fused_epilogue(*ep, o[i][j], bias, slope);
            }
            for (int64_t i = 0; i < rows; ++i) {
                T* dst = y + (k * Ho + oy0 + i) * Wo + ox;
                if (valid == 16) {
                    interleave2(o[i][0], o[i][1], dst);
                } else {
                    alignas(32) typename Raw<T>::type tmp[16];
                    interleave2(o[i][0], o[i][1], tmp);
                    std::memcpy(dst, tmp, static_cast<size_t>(valid) * sizeof(T));
                }
            }
        }
    }
}

}  // namespace

void winograd43_input_avx2(const WinogradBlock& b, float* v, float* work) { input_avx2<4>(b, v, work); }
void winograd23_input_avx2(const WinogradBlock& b, float* v, float* work) { input_avx2<2>(b, v, work); }
void winograd63_input_avx2(const WinogradBlock& b, float* v, float* work) { input_avx2<6>(b, v, work); }

void winograd63_output_avx2(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                            int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    if (y.half) output63(m, es, ks, tiles, K, y.half, Ho, Wo, oy0, ox0, ep, y.stream);
    else output63(m, es, ks, tiles, K, y.f32, Ho, Wo, oy0, ox0, ep, y.stream);
}
void winograd43_output_avx2(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                            int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    if (y.half) output43(m, es, ks, tiles, K, y.half, Ho, Wo, oy0, ox0, ep);
    else output43(m, es, ks, tiles, K, y.f32, Ho, Wo, oy0, ox0, ep);
}
void winograd23_output_avx2(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                            int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep) {
    if (y.half) output23(m, es, ks, tiles, K, y.half, Ho, Wo, oy0, ox0, ep);
    else output23(m, es, ks, tiles, K, y.f32, Ho, Wo, oy0, ox0, ep);
}

}  // namespace loom::device::cpu
