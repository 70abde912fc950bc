// The 6 x 32 int8 micro-kernel for AVX-512 VNNI: twelve vectors of 16 int32 sums stay in
// registers; per pair of K, two B vectors (32 columns x the pair, int16) are loaded and six A
// pairs broadcast, and each vpdpwssd multiplies the int16 pairs, adds the two products and adds
// that to the accumulator in one instruction (the AVX2 kernel's pmaddwd + paddd; exact: see
// gemm_i8.hpp, and vpdpwssd does not saturate). Built with -mavx512f..vl -mavx512vnni; called
// only after the CPU check.
#include <immintrin.h>

#include <cstring>

#include "device/kernels/cpu/gemm_i8.hpp"

namespace loom::device::cpu {

namespace {

// A's pair (row i, k and k + 1) in all sixteen lanes.
inline __m512i pair(const int16_t* a) {
    int32_t v;
    std::memcpy(&v, a, sizeof v);
    return _mm512_set1_epi32(v);
}

}  // namespace

void gemm_i8_micro_avx512vnni(int64_t kp, const int16_t* a, const int16_t* b, int32_t* c, int64_t ldc,
                              bool accumulate) {
    static_assert(kGemmI8MR == 6);
    constexpr int64_t NR = 32;
    auto ld = [&](int64_t i, int64_t j) { return _mm512_loadu_si512(c + i * ldc + j); };
    __m512i c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (accumulate) {
        c00 = ld(0, 0), c01 = ld(0, 16), c10 = ld(1, 0), c11 = ld(1, 16), c20 = ld(2, 0), c21 = ld(2, 16);
        c30 = ld(3, 0), c31 = ld(3, 16), c40 = ld(4, 0), c41 = ld(4, 16), c50 = ld(5, 0), c51 = ld(5, 16);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm512_setzero_si512();
    }
    for (int64_t p = 0; p < kp; ++p, a += 2 * kGemmI8MR, b += 2 * NR) {
        const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 32);
        __m512i x = pair(a + 0);
        c00 = _mm512_dpwssd_epi32(c00, x, b0), c01 = _mm512_dpwssd_epi32(c01, x, b1);
        x = pair(a + 2);
        c10 = _mm512_dpwssd_epi32(c10, x, b0), c11 = _mm512_dpwssd_epi32(c11, x, b1);
        x = pair(a + 4);
        c20 = _mm512_dpwssd_epi32(c20, x, b0), c21 = _mm512_dpwssd_epi32(c21, x, b1);
        x = pair(a + 6);
        c30 = _mm512_dpwssd_epi32(c30, x, b0), c31 = _mm512_dpwssd_epi32(c31, x, b1);
        x = pair(a + 8);
        c40 = _mm512_dpwssd_epi32(c40, x, b0), c41 = _mm512_dpwssd_epi32(c41, x, b1);
        x = pair(a + 10);
        c50 = _mm512_dpwssd_epi32(c50, x, b0), c51 = _mm512_dpwssd_epi32(c51, x, b1);
    }
    auto st = [&](int64_t i, int64_t j, __m512i v) { _mm512_storeu_si512(c + i * ldc + j, v); };
    st(0, 0, c00), st(0, 16, c01), st(1, 0, c10), st(1, 16, c11), st(2, 0, c20), st(2, 16, c21);
    st(3, 0, c30), st(3, 16, c31), st(4, 0, c40), st(4, 16, c41), st(5, 0, c50), st(5, 16, c51);
}

}  // namespace loom::device::cpu
