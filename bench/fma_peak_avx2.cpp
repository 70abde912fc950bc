// The machine's fp32 FMA peak on one thread: 12 independent 8-wide FMA chains (enough to cover
// the FMA latency on two pipes), run for about `seconds`. Built with -mavx2 -mfma; call only
// after the CPU check. Returns GFLOPS.
#include <immintrin.h>

#include <chrono>

namespace loom::bench {

double fma_peak_gflops_avx2(double seconds) {
    __m256 a[12];
    for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(1.0f + 0.001f * static_cast<float>(i));
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    const auto t0 = std::chrono::steady_clock::now();
    long iters = 0;
    double elapsed = 0;
    do {
        for (int r = 0; r < 4096; ++r)
            for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
        iters += 4096;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (elapsed < seconds);
    float sink = 0;
    for (int i = 0; i < 12; ++i) sink += _mm256_cvtss_f32(a[i]);
    volatile float keep = sink;  // keep the chains alive
    (void)keep;
    return static_cast<double>(iters) * 12 * 8 * 2 / elapsed / 1e9;
}

}  // namespace loom::bench
