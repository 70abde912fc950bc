// The 6 x 16 int8 micro-kernel for AVX2: twelve vectors of 8 int32 sums stay in registers; per
// pair of K, two B vectors (16 columns x the pair, int16) are loaded and six A pairs broadcast,
// and each pmaddwd multiplies and adds a pair into int32 (exact: see gemm_i8.hpp) before one add
// into the accumulator. Built with -mavx2; called only after the CPU check.
#include <immintrin.h>

#include <cstring>

#include "device/kernels/cpu/gemm_i8.hpp"

namespace loom::device::cpu {

namespace {

// A's pair (row i, k and k + 1) in all eight lanes.
inline __m256i pair(const int16_t* a) {
    int32_t v;
    std::memcpy(&v, a, sizeof v);
    return _mm256_set1_epi32(v);
}

inline __m256i madd_add(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }

}  // namespace

void gemm_i8_micro_avx2(int64_t kp, const int16_t* a, const int16_t* b, int32_t* c, int64_t ldc, bool accumulate) {
    static_assert(kGemmI8MR == 6);
    constexpr int64_t NR = 16;
    auto ld = [&](int64_t i, int64_t j) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i * ldc + j)); };
    __m256i c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (accumulate) {
        c00 = ld(0, 0), c01 = ld(0, 8), c10 = ld(1, 0), c11 = ld(1, 8), c20 = ld(2, 0), c21 = ld(2, 8);
        c30 = ld(3, 0), c31 = ld(3, 8), c40 = ld(4, 0), c41 = ld(4, 8), c50 = ld(5, 0), c51 = ld(5, 8);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm256_setzero_si256();
    }
    for (int64_t p = 0; p < kp; ++p, a += 2 * kGemmI8MR, b += 2 * NR) {
        const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
        const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 16));
        __m256i x = pair(a + 0);
        c00 = madd_add(c00, x, b0), c01 = madd_add(c01, x, b1);
        x = pair(a + 2);
        c10 = madd_add(c10, x, b0), c11 = madd_add(c11, x, b1);
        x = pair(a + 4);
        c20 = madd_add(c20, x, b0), c21 = madd_add(c21, x, b1);
        x = pair(a + 6);
        c30 = madd_add(c30, x, b0), c31 = madd_add(c31, x, b1);
        x = pair(a + 8);
        c40 = madd_add(c40, x, b0), c41 = madd_add(c41, x, b1);
        x = pair(a + 10);
        c50 = madd_add(c50, x, b0), c51 = madd_add(c51, x, b1);
    }
    auto st = [&](int64_t i, int64_t j, __m256i v) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + i * ldc + j), v);
    };
    st(0, 0, c00), st(0, 8, c01), st(1, 0, c10), st(1, 8, c11), st(2, 0, c20), st(2, 8, c21);
    st(3, 0, c30), st(3, 8, c31), st(4, 0, c40), st(4, 8, c41), st(5, 0, c50), st(5, 8, c51);
}

}  // namespace loom::device::cpu
