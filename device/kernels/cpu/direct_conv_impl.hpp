// direct_conv's row (direct_conv.hpp), written once with GCC vector extensions of the
// instruction set's own width and built per instruction set: direct_conv.cpp (baseline x86-64),
// direct_conv_avx2.cpp, direct_conv_avx512.cpp. Include only from those files; internal linkage
// and no std:: templates, so no copy built for a wider set can be linked into a baseline caller.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "device/kernels/cpu/direct_conv.hpp"

namespace loom::device::cpu {

namespace {

#if defined(__AVX512F__)
constexpr int64_t kDLanes = 16;
constexpr int64_t kDVecs = 2;  // output vectors per pass: 24 accumulators of 32 registers
#elif defined(__AVX2__)
constexpr int64_t kDLanes = 8;
constexpr int64_t kDVecs = 1;  // 12 accumulators of 16 registers
#else
constexpr int64_t kDLanes = 4;
constexpr int64_t kDVecs = 1;
#endif
constexpr int64_t kDSpan = kDLanes * kDVecs;  // output pixels per pass
typedef float DVec __attribute__((vector_size(4 * kDLanes)));

#define LOOM_DC_INLINE inline __attribute__((always_inline))

LOOM_DC_INLINE DVec dc_load(const float* p) {
    DVec v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

LOOM_DC_INLINE void dc_store(float* p, DVec v) { __builtin_memcpy(p, &v, sizeof v); }

// kDLanes fp16 values widened (exactly): F16C from AVX2 up, one at a time on the baseline.
LOOM_DC_INLINE DVec dc_load(const f16* p) {
#if defined(__AVX512F__)
    // zero-masked, all lanes: GCC 12 flags the plain form
    return (DVec)_mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#elif defined(__AVX2__)
    return (DVec)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#else
    DVec v;
    for (int64_t i = 0; i < kDLanes; ++i) v[i] = f16_to_f32(p[i]);
    return v;
#endif
}

LOOM_DC_INLINE float dc_widen(float x) { return x; }
// F16C where this copy is built for it, so an AVX object never holds an out-of-line copy of
// types.hpp's inline f16_to_f32 that the linker could pick for a baseline caller; the baseline
// build calls that one (the same bits: both are exact).
LOOM_DC_INLINE float dc_widen(f16 x) {
#if defined(__F16C__)
    return _cvtsh_ss(x.bits);
#else
    return f16_to_f32(x);
#endif
}

// x in every lane, loaded as one broadcast (a scalar added to a zero vector costs an add first).
LOOM_DC_INLINE DVec dc_splat(const float* x) {
#if defined(__AVX512F__)
    return (DVec)_mm512_set1_ps(*x);
#elif defined(__AVX2__)
    return (DVec)_mm256_broadcast_ss(x);
#else
    return (DVec)_mm_load1_ps(x);
#endif
}

// Output pixels ox0 .. ox0 + kDSpan of the row (n of them valid), every channel of the block.
// `edge`: the window leaves the image's columns, so each input run is copied into `buf` with
// zeros outside first. The pass reads C x th rows of the image, far too many streams for the
// hardware prefetchers, so it asks for each row's lines of the next pass itself (UpConv7's last
// layer at AVX-512: 20.7 -> 11.3 ms; two passes ahead was slower).
template <typename T>
LOOM_DC_INLINE void dc_pass(const DirectRow& r, const T* x, int64_t ox0, int64_t n, bool edge, float* buf) {
    DVec acc[kDirectBlockK][kDVecs];
    for (int64_t k = 0; k < kDirectBlockK; ++k)
        for (int64_t p = 0; p < kDVecs; ++p) acc[k][p] = DVec{};
    const int64_t run = kDSpan + r.tw - 1;  // input columns the pass reads per row
    const int64_t ix = r.ix0 + ox0;         // the first of them
    for (int64_t c = 0; c < r.C; ++c)
        for (int64_t ty = 0; ty < r.th; ++ty) {
            const int64_t iy = r.iy0 + ty;
            if (iy < 0 || iy >= r.H) continue;
            const T* row = x + (c * r.H + iy) * r.W;
            const T* src = row + (edge ? 0 : ix);  // an edge pass reads buf (ix may be negative)
            if (edge) {
                for (int64_t j = 0; j < run; ++j) buf[j] = ix + j >= 0 && ix + j < r.W ? dc_widen(row[ix + j]) : 0.0f;
            } else {
                __builtin_prefetch(src + kDSpan + 16);
                __builtin_prefetch(src + 2 * kDSpan);
            }
            const float* w = r.w + (c * r.th + ty) * r.tw * kDirectBlockK;
            for (int64_t tx = 0; tx < r.tw; ++tx, w += kDirectBlockK) {
                DVec v[kDVecs];
                for (int64_t p = 0; p < kDVecs; ++p)
                    v[p] = edge ? dc_load(buf + tx + p * kDLanes) : dc_load(src + tx + p * kDLanes);
                for (int64_t k = 0; k < kDirectBlockK; ++k) {
                    const DVec wk = dc_splat(w + k);
                    for (int64_t p = 0; p < kDVecs; ++p) acc[k][p] += wk * v[p];
                }
            }
        }
    for (int64_t k = 0; k < r.channels; ++k) {
        float* dst = r.y + k * r.plane + ox0;
        if (n == kDSpan) {
            for (int64_t p = 0; p < kDVecs; ++p) dc_store(dst + p * kDLanes, acc[k][p]);
            continue;
        }
        float out[kDSpan];
        for (int64_t p = 0; p < kDVecs; ++p) dc_store(out + p * kDLanes, acc[k][p]);
        for (int64_t j = 0; j < n; ++j) dst[j] = out[j];
    }
}

LOOM_DC_INLINE void dc_row(const DirectRow& r) {
    float buf[kDSpan + 64];  // an edge pass's input run (tw <= 64: direct_conv checks)
    for (int64_t ox0 = 0; ox0 < r.Wo; ox0 += kDSpan) {
        const int64_t n = r.Wo - ox0 < kDSpan ? r.Wo - ox0 : kDSpan;
        const int64_t ix = r.ix0 + ox0;
        const bool edge = ix < 0 || ix + kDSpan + r.tw - 1 > r.W;
        if (r.xh) dc_pass(r, r.xh, ox0, n, edge, buf);
        else dc_pass(r, r.x, ox0, n, edge, buf);
    }
}

}  // namespace

}  // namespace loom::device::cpu
