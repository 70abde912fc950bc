// The 6 x 32 fp32 micro-kernel for AVX-512 (F): twelve 16-float accumulators stay in registers;
// per k, two B vectors are loaded and six A values broadcast, as in the AVX2 6 x 16 kernel with
// vectors twice as wide, so each output takes the same fused multiply-adds in the same order
// and the two kernels agree bit for bit. 6 x 32 won the measurement against 8 x 32, 12 x 32,
// 6 x 48, 8 x 48, 6 x 64 and 12 x 16 (docs/benchmarks.md), and keeps the A panels' MR = 6 of
// every other instruction set. Built with -mavx512f..vl; called only after the CPU check.
#include <immintrin.h>

#include "device/kernels/cpu/gemm.hpp"

namespace loom::device::cpu {

void gemm_micro_avx512(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
    constexpr int64_t NR = 32;
    __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (accumulate) {
        c00 = _mm512_loadu_ps(c + 0 * ldc), c01 = _mm512_loadu_ps(c + 0 * ldc + 16);
        c10 = _mm512_loadu_ps(c + 1 * ldc), c11 = _mm512_loadu_ps(c + 1 * ldc + 16);
        c20 = _mm512_loadu_ps(c + 2 * ldc), c21 = _mm512_loadu_ps(c + 2 * ldc + 16);
        c30 = _mm512_loadu_ps(c + 3 * ldc), c31 = _mm512_loadu_ps(c + 3 * ldc + 16);
        c40 = _mm512_loadu_ps(c + 4 * ldc), c41 = _mm512_loadu_ps(c + 4 * ldc + 16);
        c50 = _mm512_loadu_ps(c + 5 * ldc), c51 = _mm512_loadu_ps(c + 5 * ldc + 16);
    } else {
        c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k, a += kGemmMR, b += NR) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        __m512 x = _mm512_set1_ps(a[0]);
        c00 = _mm512_fmadd_ps(x, b0, c00), c01 = _mm512_fmadd_ps(x, b1, c01);
        x = _mm512_set1_ps(a[1]);
        c10 = _mm512_fmadd_ps(x, b0, c10), c11 = _mm512_fmadd_ps(x, b1, c11);
        x = _mm512_set1_ps(a[2]);
        c20 = _mm512_fmadd_ps(x, b0, c20), c21 = _mm512_fmadd_ps(x, b1, c21);
        x = _mm512_set1_ps(a[3]);
        c30 = _mm512_fmadd_ps(x, b0, c30), c31 = _mm512_fmadd_ps(x, b1, c31);
        x = _mm512_set1_ps(a[4]);
        c40 = _mm512_fmadd_ps(x, b0, c40), c41 = _mm512_fmadd_ps(x, b1, c41);
        x = _mm512_set1_ps(a[5]);
        c50 = _mm512_fmadd_ps(x, b0, c50), c51 = _mm512_fmadd_ps(x, b1, c51);
    }
    _mm512_storeu_ps(c + 0 * ldc, c00), _mm512_storeu_ps(c + 0 * ldc + 16, c01);
    _mm512_storeu_ps(c + 1 * ldc, c10), _mm512_storeu_ps(c + 1 * ldc + 16, c11);
    _mm512_storeu_ps(c + 2 * ldc, c20), _mm512_storeu_ps(c + 2 * ldc + 16, c21);
    _mm512_storeu_ps(c + 3 * ldc, c30), _mm512_storeu_ps(c + 3 * ldc + 16, c31);
    _mm512_storeu_ps(c + 4 * ldc, c40), _mm512_storeu_ps(c + 4 * ldc + 16, c41);
    _mm512_storeu_ps(c + 5 * ldc, c50), _mm512_storeu_ps(c + 5 * ldc + 16, c51);
}

// 6 x 16, one vector a row: the last 16 columns of a Winograd block (the AVX2 kernel's sums).
void gemm_micro_avx512_16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
    constexpr int64_t NR = 16;
    __m512 c0, c1, c2, c3, c4, c5;
    if (accumulate) {
        c0 = _mm512_loadu_ps(c + 0 * ldc), c1 = _mm512_loadu_ps(c + 1 * ldc), c2 = _mm512_loadu_ps(c + 2 * ldc);
        c3 = _mm512_loadu_ps(c + 3 * ldc), c4 = _mm512_loadu_ps(c + 4 * ldc), c5 = _mm512_loadu_ps(c + 5 * ldc);
    } else {
        c0 = c1 = c2 = c3 = c4 = c5 = _mm512_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k, a += kGemmMR, b += NR) {
        const __m512 b0 = _mm512_load_ps(b);
        c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[0]), b0, c0), c1 = _mm512_fmadd_ps(_mm512_set1_ps(a[1]), b0, c1);
        c2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2]), b0, c2), c3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3]), b0, c3);
        c4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4]), b0, c4), c5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5]), b0, c5);
    }
    _mm512_storeu_ps(c + 0 * ldc, c0), _mm512_storeu_ps(c + 1 * ldc, c1), _mm512_storeu_ps(c + 2 * ldc, c2);
    _mm512_storeu_ps(c + 3 * ldc, c3), _mm512_storeu_ps(c + 4 * ldc, c4), _mm512_storeu_ps(c + 5 * ldc, c5);
}

}  // namespace loom::device::cpu
