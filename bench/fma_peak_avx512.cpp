// fma_peak_avx2.cpp with 16-wide vectors: the fp32 FMA peak of one thread on AVX-512 (twice the
// AVX2 figure where the CPU has two 512-bit FMA pipes, the same where it splits a 512-bit FMA in
// two, as Zen 4 does). Built with -mavx512f; call only after the CPU check. Returns GFLOPS.
#include <immintrin.h>

#include <chrono>

namespace loom::bench {

double fma_peak_gflops_avx512(double seconds) {
    __m512 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(1.0f + 0.001f * static_cast<float>(i));
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    const auto t0 = std::chrono::steady_clock::now();
    long iters = 0;
    double elapsed = 0;
    do {
        for (int r = 0; r < 4096; ++r)
            for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
        iters += 4096;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds);
    float sink = 0;
    for (int i = 0; i < 12; ++i) sink += _mm512_cvtss_f32(a[i]);
    volatile float keep = sink;  // keep the chains alive
    (void)keep;
    return static_cast<double>(iters) * 12 * 16 * 2 / elapsed / 1e9;
}

}  // namespace loom::bench
