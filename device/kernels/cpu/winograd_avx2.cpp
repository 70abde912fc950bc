// AVX2 + FMA block transforms for Winograd F(4x4, 3x3). Eight tiles per vector: tile t's six
// input columns sit at 4t .. 4t+5 of a transformed row, so a 4-way de-interleave of 32 floats
// gives columns 0..3 of eight tiles (and one more, 4 floats on, gives columns 4 and 5). The
// shuffles leave the tiles in the order 0 2 4 6 1 3 5 7; V and M keep that order (the GEMM does
// not care) and the output transform's interleave, the exact inverse, puts them back.
#include <immintrin.h>

#include <cstring>

#include "device/kernels/cpu/winograd.hpp"

namespace loom::device::cpu {

namespace {

constexpr int64_t NR = kGemmNR;

// Local min/max: no std:: templates are instantiated with AVX2 code generation in this file,
// so the linker can never pick an AVX2 copy for baseline callers.
inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

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
inline void deinterleave2(const float* p, __m256& d0, __m256& d1) {
    const __m256 a0 = _mm256_loadu_ps(p), a1 = _mm256_loadu_ps(p + 8), a2 = _mm256_loadu_ps(p + 16),
                 a3 = _mm256_loadu_ps(p + 24);
    const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t2 = _mm256_unpacklo_ps(a2, a3);
    d0 = _mm256_shuffle_ps(t0, t2, 0x44), d1 = _mm256_shuffle_ps(t0, t2, 0xEE);
}

// The inverse of deinterleave4: writes the 32 floats x[4t + j] = o_j[t] to p.
inline void interleave4(__m256 o0, __m256 o1, __m256 o2, __m256 o3, float* p) {
    const __m256 t0 = _mm256_shuffle_ps(o0, o1, 0x44), t2 = _mm256_shuffle_ps(o0, o1, 0xEE);
    const __m256 t1 = _mm256_shuffle_ps(o2, o3, 0x44), t3 = _mm256_shuffle_ps(o2, o3, 0xEE);
    _mm256_storeu_ps(p, _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm256_storeu_ps(p + 8, _mm256_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm256_storeu_ps(p + 16, _mm256_shuffle_ps(t2, t3, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm256_storeu_ps(p + 24, _mm256_shuffle_ps(t2, t3, _MM_SHUFFLE(3, 1, 3, 1)));
}

// v = B^T d for six vectors.
inline void bt6(__m256 d0, __m256 d1, __m256 d2, __m256 d3, __m256 d4, __m256 d5, __m256* v) {
    const __m256 four = _mm256_set1_ps(4), five = _mm256_set1_ps(5), two = _mm256_set1_ps(2);
    v[0] = _mm256_fnmadd_ps(five, d2, _mm256_fmadd_ps(four, d0, d4));
    v[1] = _mm256_fnmadd_ps(four, _mm256_add_ps(d1, d2), _mm256_add_ps(d3, d4));
    v[2] = _mm256_fmadd_ps(four, _mm256_sub_ps(d1, d2), _mm256_sub_ps(d4, d3));
    const __m256 d42 = _mm256_sub_ps(d4, d2), d31 = _mm256_sub_ps(d3, d1);
    v[3] = _mm256_fmadd_ps(two, d31, d42);
    v[4] = _mm256_fnmadd_ps(two, d31, d42);
    v[5] = _mm256_fnmadd_ps(five, d3, _mm256_fmadd_ps(four, d1, d5));
}

// o = A^T m for six vectors.
inline void at6(__m256 m0, __m256 m1, __m256 m2, __m256 m3, __m256 m4, __m256 m5, __m256* o) {
    const __m256 a = _mm256_add_ps(m1, m2), b = _mm256_sub_ps(m1, m2);
    const __m256 c = _mm256_add_ps(m3, m4), d = _mm256_sub_ps(m3, m4);
    o[0] = _mm256_add_ps(_mm256_add_ps(m0, a), c);
    o[1] = _mm256_fmadd_ps(_mm256_set1_ps(2), d, b);
    o[2] = _mm256_fmadd_ps(_mm256_set1_ps(4), c, a);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8), d, b), m5);
}

}  // namespace

void winograd43_input_avx2(const WinogradBlock& b, float* v, float* work) {
    const int64_t width = 4 * b.tiles_padded + 8;  // room for the last group's shifted load
    const int64_t cols = 4 * b.tiles + 2;           // input columns the block really covers
    const int64_t panels = b.tiles_padded / NR;
    const int64_t ps = winograd43_panel_stride(b.C);
    float* t = work;
    // Valid column range of the image inside [ix0, ix0 + cols).
    const int64_t j_lo = imax(0, -b.ix0), j_hi = imin(cols, b.W - b.ix0);
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c = 0; c < b.C; ++c) {
        const float* xc = b.x + c * b.H * b.W;
        // Rows read in place (no padded copies): rows outside the image are zero, and columns
        // outside it are masked off (a masked load never touches the masked-out addresses).
        const float* src[6];
        for (int64_t i = 0; i < 6; ++i) {
            const int64_t iy = b.iy0 + i;
            src[i] = iy >= 0 && iy < b.H && j_hi > j_lo ? xc + iy * b.W + b.ix0 : nullptr;
        }
        for (int64_t j = 0; j < width; j += 8) {
            __m256 r[6];
            if (j >= j_lo && j + 8 <= j_hi) {
                for (int i = 0; i < 6; ++i) r[i] = src[i] ? _mm256_loadu_ps(src[i] + j) : _mm256_setzero_ps();
            } else {
                // lanes with j_lo <= j + lane < j_hi
                const __m256i pos = _mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(j)));
                const __m256i mask = _mm256_and_si256(
                    _mm256_cmpgt_epi32(pos, _mm256_set1_epi32(static_cast<int>(j_lo) - 1)),
                    _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(j_hi)), pos));
                for (int i = 0; i < 6; ++i)
                    r[i] = src[i] ? _mm256_maskload_ps(src[i] + j, mask) : _mm256_setzero_ps();
            }
            __m256 o[6];
            bt6(r[0], r[1], r[2], r[3], r[4], r[5], o);
            for (int k = 0; k < 6; ++k) _mm256_storeu_ps(t + k * width + j, o[k]);
        }
        for (int64_t k = 0; k < 6; ++k) {
            const float* tk = t + k * width;
            for (int64_t g = 0; g < b.tiles_padded; g += 8) {
                __m256 d0, d1, d2, d3, d4, d5, o[6];
                deinterleave4(tk + 4 * g, d0, d1, d2, d3);
                deinterleave2(tk + 4 * g + 4, d4, d5);
                bt6(d0, d1, d2, d3, d4, d5, o);
                float* dst = v + (k * 6 * panels + g / NR) * ps + c * NR + g % NR;
                for (int l = 0; l < 6; ++l) _mm256_store_ps(dst + l * panels * ps, o[l]);
            }
        }
    }
}

void winograd43_output_avx2(const float* m, int64_t kp, int64_t tiles_padded, int64_t tiles, int64_t K, float* y,
                            int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0) {
    const int64_t es = kp * tiles_padded;
    const int64_t rows = imin(4, Ho - oy0);
    for (int64_t k = 0; k < K; ++k)
        for (int64_t g = 0; g < tiles; g += 8) {
            const float* mk = m + k * tiles_padded + g;
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
            for (int64_t i = 0; i < rows; ++i) {
                float* dst = y + (k * Ho + oy0 + i) * Wo + ox;
                if (valid == 32) {
                    interleave4(s[i][0], s[i][1], s[i][2], s[i][3], dst);
                } else {
                    alignas(32) float tmp[32];
                    interleave4(s[i][0], s[i][1], s[i][2], s[i][3], tmp);
                    std::memcpy(dst, tmp, static_cast<size_t>(valid) * sizeof(float));
                }
            }
        }
}

}  // namespace loom::device::cpu
