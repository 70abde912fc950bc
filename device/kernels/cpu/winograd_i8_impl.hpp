// The integer F(4,3) block transforms (winograd_i8.hpp), written once with GCC vector extensions
// of the instruction set's own width (kLanes int32 lanes: 16 for AVX-512, 8 for AVX2, 4 for SSE2,
// so each vector is one register; GCC lowers wider ones through memory) and built per
// instruction set: winograd_i8.cpp (baseline x86-64), winograd_i8_avx2.cpp,
// winograd_i8_avx512.cpp. A group of sixteen tiles is 16 / kLanes vectors. Include only from
// those files. Everything here has internal linkage and uses no std:: templates, so no copy built
// for a wider instruction set can be linked into a baseline caller.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "device/kernels/cpu/winograd_i8.hpp"

namespace loom::device::cpu {

namespace {

#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
#elif defined(__AVX2__)
constexpr int64_t kLanes = 8;
#else
constexpr int64_t kLanes = 4;
#endif
typedef int32_t WiVec __attribute__((vector_size(4 * kLanes)));
typedef uint32_t WuVec __attribute__((vector_size(4 * kLanes)));
typedef float WfVec __attribute__((vector_size(4 * kLanes)));

#define LOOM_WI8_INLINE inline __attribute__((always_inline))

LOOM_WI8_INLINE int64_t wi8_min(int64_t a, int64_t b) { return a < b ? a : b; }

// kLanes int8 values sign-extended to int32 lanes.
LOOM_WI8_INLINE WiVec wi8_load(const int8_t* p) {
#if defined(__AVX512F__)
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return (WiVec)_mm512_maskz_cvtepi8_epi32(0xFFFF, b);  // zero-masked, all lanes: GCC 12 flags the plain form
#elif defined(__AVX2__)
    return (WiVec)_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
#else
    // SSE2: each byte doubled into a 16-bit lane and shifted back (sign-extended), then each
    // 16-bit value doubled into a 32-bit lane and shifted back.
    int32_t four;
    __builtin_memcpy(&four, p, sizeof four);
    const __m128i b = _mm_cvtsi32_si128(four), w = _mm_srai_epi16(_mm_unpacklo_epi8(b, b), 8);
    return (WiVec)_mm_srai_epi32(_mm_unpacklo_epi16(w, w), 16);
#endif
}

// V's rows (or columns) from six input values: B^T d (the float bt6's formulas, in integers).
LOOM_WI8_INLINE void wi8_bt(const WiVec* d, int64_t s, WiVec* v, int64_t vs) {
    const WiVec d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
    v[0] = 4 * d0 - 5 * d2 + d4;
    v[vs] = -4 * (d1 + d2) + d3 + d4;
    v[2 * vs] = 4 * (d1 - d2) - d3 + d4;
    v[3 * vs] = 2 * (d3 - d1) + (d4 - d2);
    v[4 * vs] = 2 * (d1 - d3) + (d4 - d2);
    v[5 * vs] = 4 * d1 - 5 * d3 + d5;
}

// Four outputs from six transformed values: A'^T m, A' = A with its last row times 4
// (winograd_i8.hpp); unsigned, so that wrapping is defined.
LOOM_WI8_INLINE void wi8_at(const WuVec* m, int64_t s, WuVec* o, int64_t os) {
    const WuVec m0 = m[0], m1 = m[s], m2 = m[2 * s], m3 = m[3 * s], m4 = m[4 * s], m5 = m[5 * s];
    o[0] = m0 + m1 + m2 + m3 + m4;
    o[os] = (m1 - m2) + 2 * (m3 - m4);
    o[2 * os] = (m1 + m2) + 4 * (m3 + m4);
    o[3 * os] = (m1 - m2) + 8 * (m3 - m4) + 4 * m5;
}

// V of one channel for kLanes tiles whose first column is phase 0 at t of each of six rows
// starting at `row` (phase planes: rows 4 x tq apart, phases tq apart).
LOOM_WI8_INLINE void wi8_input_channel(const int8_t* row, int64_t tq, WiVec* v) {
    WiVec h[36];  // h[a * 6 + j]: row a's horizontal transform
    for (int64_t a = 0; a < 6; ++a) {
        const int8_t* r = row + a * 4 * tq;
        WiVec d[6];
        for (int64_t b = 0; b < 4; ++b) d[b] = wi8_load(r + b * tq);
        d[4] = wi8_load(r + 1), d[5] = wi8_load(r + tq + 1);
        wi8_bt(d, 1, h + a * 6, 1);
    }
    for (int64_t j = 0; j < 6; ++j) wi8_bt(h + j, 6, v + j, 6);
}

LOOM_WI8_INLINE void wi8_input(const WinogradI8Block& b, int16_t* v16) {
    const int64_t tq = b.x.tq, plane = b.x.rows * 4 * tq;
    const int64_t ps32 = b.panel_stride / 2, tiles_gemm = 16 * b.groups;
    for (int64_t g = 0; g < b.groups; ++g) {
        const int64_t tile = 16 * g;
        const WinogradPanel pn = winograd_panel(tile, tiles_gemm, b.nr);  // nr-wide, then 16-wide
        for (int64_t sub = 0; sub < 16; sub += kLanes) {
            int32_t* dst = reinterpret_cast<int32_t*>(v16) + pn.q * ps32 + pn.at + sub;
            const int8_t* src = b.x.p + b.row0 * 4 * tq + b.t0 + tile + sub;
            for (int64_t c = 0; c < b.C; c += 2) {
                // The next pair's 48 row segments, each a phase row apart and a plane apart per
                // channel, are too short and too many for the hardware prefetchers: ask for them
                // while this pair is transformed.
                if (c + 2 < b.C)
                    for (int64_t r = 0; r < 2 * 24 && c + 2 + r / 24 < b.C; ++r)
                        _mm_prefetch(reinterpret_cast<const char*>(src + (c + 2 + r / 24) * plane + (r % 24) * tq),
                                     _MM_HINT_T0);
                WiVec lo[36], hi[36];
                wi8_input_channel(src + c * plane, tq, lo);
                if (c + 1 < b.C) wi8_input_channel(src + (c + 1) * plane, tq, hi);
                else
                    for (WiVec& x : hi) x = WiVec{};
                int32_t* d = dst + (c / 2) * pn.width;
                for (int64_t e = 0; e < 36; ++e) {
                    // Channel c in the low half of each word, c + 1 in the high half: the int8
                    // GEMM's pair layout.
                    const WuVec w = ((WuVec)lo[e] & 0xFFFFu) | ((WuVec)hi[e] << 16);
                    __builtin_memcpy(d + e * b.panels * ps32, &w, sizeof w);
                }
            }
        }
    }
}

// std::max(v, 0) and std::min(v, 0) lane by lane, with their bits: maxps / minps with 0 first
// return the second operand, v, when it is NaN or both are zeros, as std::max(v, 0.0f) keeps v
// unless v < 0 and std::min(v, 0.0f) unless 0 < v.
template <bool kMax>
LOOM_WI8_INLINE WfVec wi8_clamp0(WfVec v) {
#if defined(__AVX512F__)
    // zero-masked with every lane on (the same instruction): GCC 12's plain forms trip
    // -Wmaybe-uninitialized
    const __m512 z = _mm512_setzero_ps();
    if constexpr (kMax) return (WfVec)_mm512_maskz_max_ps(0xFFFF, z, (__m512)v);
    else return (WfVec)_mm512_maskz_min_ps(0xFFFF, z, (__m512)v);
#elif defined(__AVX2__)
    if constexpr (kMax) return (WfVec)_mm256_max_ps(_mm256_setzero_ps(), (__m256)v);
    else return (WfVec)_mm256_min_ps(_mm256_setzero_ps(), (__m256)v);
#else
    if constexpr (kMax) return (WfVec)_mm_max_ps(_mm_setzero_ps(), (__m128)v);
    else return (WfVec)_mm_min_ps(_mm_setzero_ps(), (__m128)v);
#endif
}

// The per-channel factors as vectors, broadcast once per channel.
struct WiEpilogueLanes {
    WfVec dq, bias, slope;
};
LOOM_WI8_INLINE WiEpilogueLanes wi8_lanes(const WinogradI8Epilogue& ep, int64_t k) {
    const float dq = ep.dequant[k * ep.dequant_rs], bias = ep.bias ? ep.bias[k * ep.bias_rs] : 0.0f;
    const float slope = ep.act == Act::PRELU ? ep.slope[k * ep.slope_rs] : ep.alpha;
    const WfVec zero = {};
    return {zero + dq, zero + bias, zero + slope};
}

// The fused epilogue on kLanes values of one output channel: apply_epilogue's operations in its
// order (dequantize, bias, activation), so the same bits; no FMA contraction in these files
// (device/CMakeLists.txt) keeps the multiply and the add separate, as in the baseline
// apply_epilogue.
LOOM_WI8_INLINE WfVec wi8_epilogue(const WinogradI8Epilogue& ep, WfVec v, const WiEpilogueLanes& c) {
    v = v * c.dq;
    if (ep.bias) v = v + c.bias;
    switch (ep.act) {
    case Act::RELU: return wi8_clamp0<true>(v);
    case Act::LEAKY_RELU:  // c.slope holds alpha
    case Act::PRELU: return wi8_clamp0<true>(v) + wi8_clamp0<false>(v) * c.slope;
    default: return v;
    }
}

// Interleaves four vectors of kLanes tiles' values (column jj = 0..3 of each tile) into the
// 4 kLanes floats of a row, tile by tile: dst[4 t + jj] = f[jj][t].
LOOM_WI8_INLINE void wi8_interleave4(const WfVec* f, float* dst) {
#if defined(__AVX512F__)
    // Two-source permutes: index i < 16 takes lane i of the first source, 16 + i lane i of the
    // second.
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    const __m512i lo2 = _mm512_setr_epi32(0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
    const __m512i hi2 = _mm512_add_epi32(lo2, _mm512_set1_epi32(8));
    const __m512 f0 = (__m512)f[0], f1 = (__m512)f[1], f2 = (__m512)f[2], f3 = (__m512)f[3];
    const __m512 a0 = _mm512_permutex2var_ps(f0, lo, f1), a1 = _mm512_permutex2var_ps(f0, hi, f1);
    const __m512 b0 = _mm512_permutex2var_ps(f2, lo, f3), b1 = _mm512_permutex2var_ps(f2, hi, f3);
    _mm512_storeu_ps(dst, _mm512_permutex2var_ps(a0, lo2, b0));
    _mm512_storeu_ps(dst + 16, _mm512_permutex2var_ps(a0, hi2, b0));
    _mm512_storeu_ps(dst + 32, _mm512_permutex2var_ps(a1, lo2, b1));
    _mm512_storeu_ps(dst + 48, _mm512_permutex2var_ps(a1, hi2, b1));
#elif defined(__AVX2__)
    const __m256 v0 = (__m256)f[0], v1 = (__m256)f[1], v2 = (__m256)f[2], v3 = (__m256)f[3];
    const __m256 u0 = _mm256_unpacklo_ps(v0, v1), u1 = _mm256_unpackhi_ps(v0, v1);
    const __m256 u2 = _mm256_unpacklo_ps(v2, v3), u3 = _mm256_unpackhi_ps(v2, v3);
    const __m256 t0 = _mm256_shuffle_ps(u0, u2, 0x44), t1 = _mm256_shuffle_ps(u0, u2, 0xEE);
    const __m256 t2 = _mm256_shuffle_ps(u1, u3, 0x44), t3 = _mm256_shuffle_ps(u1, u3, 0xEE);
    // t0..t3 hold tiles (0, 4), (1, 5), (2, 6), (3, 7).
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(t0, t1, 0x20));
    _mm256_storeu_ps(dst + 8, _mm256_permute2f128_ps(t2, t3, 0x20));
    _mm256_storeu_ps(dst + 16, _mm256_permute2f128_ps(t0, t1, 0x31));
    _mm256_storeu_ps(dst + 24, _mm256_permute2f128_ps(t2, t3, 0x31));
#else
    const __m128 v0 = (__m128)f[0], v1 = (__m128)f[1], v2 = (__m128)f[2], v3 = (__m128)f[3];
    const __m128 u0 = _mm_unpacklo_ps(v0, v1), u1 = _mm_unpackhi_ps(v0, v1);
    const __m128 u2 = _mm_unpacklo_ps(v2, v3), u3 = _mm_unpackhi_ps(v2, v3);
    _mm_storeu_ps(dst, _mm_movelh_ps(u0, u2));
    _mm_storeu_ps(dst + 4, _mm_movehl_ps(u2, u0));
    _mm_storeu_ps(dst + 8, _mm_movelh_ps(u1, u3));
    _mm_storeu_ps(dst + 12, _mm_movehl_ps(u3, u1));
#endif
}

// n floats from src to dst, dst's whole cache lines through non-temporal stores (the ends, which
// may share a line with a neighbouring block's outputs, through ordinary ones).
LOOM_WI8_INLINE void wi8_stream_row(const float* src, float* dst, int64_t n) {
    int64_t i = wi8_min(n, static_cast<int64_t>((64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63) / 4);
    for (int64_t j = 0; j < i; ++j) dst[j] = src[j];
    for (; i + 16 <= n; i += 16) {
#if defined(__AVX512F__)
        _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
#elif defined(__AVX__)
        _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
        _mm256_stream_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
#else
        for (int64_t l = 0; l < 16; l += 4) _mm_stream_ps(dst + i + l, _mm_loadu_ps(src + i + l));
#endif
    }
    for (; i < n; ++i) dst[i] = src[i];
}

LOOM_WI8_INLINE void wi8_output(const int32_t* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, float* y,
                                int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradI8Epilogue* ep,
                                bool streamed) {
    // A streamed map's rows go through a buffer, then out in whole lines (winograd_i8.hpp).
    const bool stream = streamed && tiles <= kWinogradBlockTiles;
    alignas(64) float buf[4][4 * kWinogradBlockTiles];
    constexpr uint32_t kInv9 = 954437177u;  // 9 x kInv9 = 2 x 2^32 + 1
    const int64_t rows = wi8_min(4, Ho - oy0), cols = wi8_min(4 * tiles, Wo - ox0);
    for (int64_t k = 0; k < K; ++k) {
        const WiEpilogueLanes lanes = ep ? wi8_lanes(*ep, k) : WiEpilogueLanes{};
        for (int64_t g = 0; g * kLanes < tiles; ++g) {  // kLanes tiles at a time
            const int32_t* mk = m + k * ks + kLanes * g;
            WuVec s[24];  // s[i * 4 + jj]: row i of M' along its columns
            for (int64_t i = 0; i < 6; ++i) {
                WuVec r[6];
                for (int64_t j = 0; j < 6; ++j) __builtin_memcpy(&r[j], mk + (i * 6 + j) * es, sizeof(WuVec));
                wi8_at(r, 1, s + i * 4, 1);
            }
            WuVec o[16];  // o[r * 4 + jj]: output row r, column jj of each tile, 576 Y mod 2^32
            for (int64_t jj = 0; jj < 4; ++jj) wi8_at(s + jj, 4, o + jj, 4);
            const int64_t c0 = 4 * kLanes * g, n = wi8_min(4 * kLanes, cols - c0);
            for (int64_t r = 0; r < rows; ++r) {
                WfVec f[4];
                for (int64_t jj = 0; jj < 4; ++jj) {
                    // 64 Y mod 2^32, then Y by an arithmetic shift (exact for |Y| < 2^25).
                    const WiVec y64 = (WiVec)(o[r * 4 + jj] * kInv9);
                    f[jj] = __builtin_convertvector(y64 >> 6, WfVec);
                    if (ep) f[jj] = wi8_epilogue(*ep, f[jj], lanes);
                }
                float* dst = stream ? &buf[r][c0] : y + (k * Ho + oy0 + r) * Wo + ox0 + c0;
                if (n == 4 * kLanes) {
                    wi8_interleave4(f, dst);
                    continue;
                }
                alignas(64) float row[4 * kLanes];
                wi8_interleave4(f, row);
                for (int64_t i = 0; i < n; ++i) dst[i] = row[i];
            }
        }
        if (stream)
            for (int64_t r = 0; r < rows; ++r) wi8_stream_row(buf[r], y + (k * Ho + oy0 + r) * Wo + ox0, cols);
    }
    if (stream) _mm_sfence();  // the streamed lines reach memory before the block counts as done
}

#undef LOOM_WI8_INLINE

}  // namespace

}  // namespace loom::device::cpu
