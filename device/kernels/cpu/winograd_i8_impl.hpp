// The integer F(4,3) block transforms (winograd_i8.hpp), written once with GCC vector extensions
// (sixteen int32 lanes) and built per instruction set: winograd_i8.cpp (baseline x86-64: four
// SSE2 registers a vector), winograd_i8_avx2.cpp (two), winograd_i8_avx512.cpp (one). Include
// only from those files. Everything here has internal linkage and uses no std:: templates, so no
// copy built for a wider instruction set can be linked into a baseline caller.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "device/kernels/cpu/winograd_i8.hpp"

// Every function here is inlined into its caller, so no vector crosses a call: the ABI notes GCC
// gives for 64-byte vectors passed by value outside AVX-512 builds do not apply. (GCC reports
// them at the end of the file, so the including file keeps the setting.)
#pragma GCC diagnostic ignored "-Wpsabi"

namespace loom::device::cpu {

namespace {

typedef int32_t WiVec __attribute__((vector_size(64)));
typedef uint32_t WuVec __attribute__((vector_size(64)));
typedef float WfVec __attribute__((vector_size(64)));

#define LOOM_WI8_INLINE inline __attribute__((always_inline))

LOOM_WI8_INLINE int64_t wi8_min(int64_t a, int64_t b) { return a < b ? a : b; }

// Sixteen int8 values sign-extended to int32 lanes (GCC scalarises a convertvector of a
// memcpy'd int8 vector, so the widening is spelled per instruction set).
LOOM_WI8_INLINE WiVec wi8_load(const int8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
#if defined(__AVX512F__)
    return (WiVec)_mm512_maskz_cvtepi8_epi32(0xFFFF, b);  // zero-masked, all lanes: GCC 12 flags the plain form
#elif defined(__AVX2__)
    const __m256i lo = _mm256_cvtepi8_epi32(b), hi = _mm256_cvtepi8_epi32(_mm_srli_si128(b, 8));
    WiVec v;
    __builtin_memcpy(&v, &lo, sizeof lo);
    __builtin_memcpy(reinterpret_cast<char*>(&v) + sizeof lo, &hi, sizeof hi);
    return v;
#else
    // SSE2: each byte doubled into a 16-bit lane and shifted back (sign-extended), then each
    // 16-bit value doubled into a 32-bit lane and shifted back.
    const __m128i w0 = _mm_srai_epi16(_mm_unpacklo_epi8(b, b), 8), w1 = _mm_srai_epi16(_mm_unpackhi_epi8(b, b), 8);
    const __m128i q[4] = {
        _mm_srai_epi32(_mm_unpacklo_epi16(w0, w0), 16), _mm_srai_epi32(_mm_unpackhi_epi16(w0, w0), 16),
        _mm_srai_epi32(_mm_unpacklo_epi16(w1, w1), 16), _mm_srai_epi32(_mm_unpackhi_epi16(w1, w1), 16)};
    WiVec v;
    __builtin_memcpy(&v, q, sizeof v);
    return v;
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

// V of one channel for sixteen tiles whose first column is phase 0 at t of each of six rows
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
    const int64_t full = tiles_gemm / b.nr * b.nr;
    for (int64_t g = 0; g < b.groups; ++g) {
        const int64_t tile = 16 * g;
        const int64_t q = tile < full ? tile / b.nr : full / b.nr, width = tile < full ? b.nr : 16;
        const int64_t at = tile - q * b.nr;
        int32_t* dst = reinterpret_cast<int32_t*>(v16) + q * ps32 + at;
        const int8_t* src = b.x.p + b.row0 * 4 * tq + b.t0 + tile;
        for (int64_t c = 0; c < b.C; c += 2) {
            WiVec lo[36], hi[36];
            wi8_input_channel(src + c * plane, tq, lo);
            if (c + 1 < b.C) wi8_input_channel(src + (c + 1) * plane, tq, hi);
            else
                for (WiVec& x : hi) x = WiVec{};
            int32_t* d = dst + (c / 2) * width;
            for (int64_t e = 0; e < 36; ++e) {
                // Channel c in the low half of each word, c + 1 in the high half: the int8
                // GEMM's pair layout.
                const WuVec w = ((WuVec)lo[e] & 0xFFFFu) | ((WuVec)hi[e] << 16);
                __builtin_memcpy(d + e * b.panels * ps32, &w, sizeof w);
            }
        }
    }
}

// The fused epilogue on sixteen values of output channel k: apply_epilogue's operations in its
// order (dequantize, bias, activation), so the same bits; no FMA contraction in this file
// (winograd_i8.cpp's CMake flags) keeps the multiply and the add separate, as in the baseline
// apply_epilogue.
LOOM_WI8_INLINE WfVec wi8_epilogue(const WinogradI8Epilogue& ep, WfVec v, float dq, float bias, float slope) {
    const WfVec zero = {};
    v = v * dq;
    if (ep.bias) v = v + bias;
    switch (ep.act) {
    case Act::RELU: return v < zero ? zero : v;  // std::max(v, 0): v unless v < 0
    case Act::LEAKY_RELU: return (v < zero ? zero : v) + (zero < v ? zero : v) * ep.alpha;
    case Act::PRELU: return (v < zero ? zero : v) + (zero < v ? zero : v) * slope;
    default: return v;
    }
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
    const WiVec lo = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
    const WiVec hi = lo + 8;
    const WiVec lo2 = {0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23};
    const WiVec hi2 = lo2 + 8;
    const int64_t rows = wi8_min(4, Ho - oy0), cols = wi8_min(4 * tiles, Wo - ox0);
    for (int64_t k = 0; k < K; ++k) {
        const float dq = ep ? ep->dequant[k * ep->dequant_rs] : 1.0f;
        const float bias = ep && ep->bias ? ep->bias[k * ep->bias_rs] : 0.0f;
        const float slope = ep && ep->slope ? ep->slope[k * ep->slope_rs] : 0.0f;
        for (int64_t g = 0; 16 * g < tiles; ++g) {
            const int32_t* mk = m + k * ks + 16 * g;
            WuVec s[24];  // s[i * 4 + jj]: row i of M' along its columns
            for (int64_t i = 0; i < 6; ++i) {
                WuVec r[6];
                for (int64_t j = 0; j < 6; ++j) __builtin_memcpy(&r[j], mk + (i * 6 + j) * es, sizeof(WuVec));
                wi8_at(r, 1, s + i * 4, 1);
            }
            WuVec o[16];  // o[r * 4 + jj]: output row r, column jj of each tile, 576 Y mod 2^32
            for (int64_t jj = 0; jj < 4; ++jj) wi8_at(s + jj, 4, o + jj, 4);
            const int64_t c0 = 64 * g, n = wi8_min(64, cols - c0);
            for (int64_t r = 0; r < rows; ++r) {
                WfVec f[4];
                for (int64_t jj = 0; jj < 4; ++jj) {
                    // 64 Y mod 2^32, then Y by an arithmetic shift (exact for |Y| < 2^25).
                    const WiVec y64 = (WiVec)(o[r * 4 + jj] * kInv9);
                    f[jj] = __builtin_convertvector(y64 >> 6, WfVec);
                    if (ep) f[jj] = wi8_epilogue(*ep, f[jj], dq, bias, slope);
                }
                const WfVec a0 = __builtin_shuffle(f[0], f[1], lo), a1 = __builtin_shuffle(f[0], f[1], hi);
                const WfVec b0 = __builtin_shuffle(f[2], f[3], lo), b1 = __builtin_shuffle(f[2], f[3], hi);
                const WfVec out0 = __builtin_shuffle(a0, b0, lo2), out1 = __builtin_shuffle(a0, b0, hi2);
                const WfVec out2 = __builtin_shuffle(a1, b1, lo2), out3 = __builtin_shuffle(a1, b1, hi2);
                float* dst = stream ? &buf[r][c0] : y + (k * Ho + oy0 + r) * Wo + ox0 + c0;
                if (n == 64) {
                    __builtin_memcpy(dst, &out0, sizeof out0), __builtin_memcpy(dst + 16, &out1, sizeof out1);
                    __builtin_memcpy(dst + 32, &out2, sizeof out2), __builtin_memcpy(dst + 48, &out3, sizeof out3);
                    continue;
                }
                const WfVec out[4] = {out0, out1, out2, out3};
                __builtin_memcpy(dst, out, static_cast<size_t>(n) * sizeof(float));
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
