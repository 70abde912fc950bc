// The generic (<cmath>) versions of vmath.hpp and the choice of instruction set per call.
// AVX-512 runs the AVX2 versions: exp, sigmoid and tanh take under 1% of the restoration models'
// time (docs/benchmarks.md, "AVX-512"), so wider versions would not show.
#include "device/kernels/cpu/vmath.hpp"

#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "device/kernels/cpu/isa.hpp"

namespace loom::device::cpu {

void vec_exp(const float* x, float* y, int64_t n, float shift) {
    if (isa() >= Isa::AVX2) return vec_exp_avx2(x, y, n, shift);
    for (int64_t i = 0; i < n; ++i) y[i] = std::exp(x[i] - shift);
}

double vec_exp_sum(const float* x, float* y, int64_t n, float shift) {
    if (isa() >= Isa::AVX2) return vec_exp_sum_avx2(x, y, n, shift);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        y[i] = std::exp(x[i] - shift);
        sum += y[i];
    }
    return sum;
}

void vec_sigmoid(const float* x, float* y, int64_t n) {
    if (isa() >= Isa::AVX2) return vec_sigmoid_avx2(x, y, n);
    for (int64_t i = 0; i < n; ++i) {  // e^-|x| never overflows (see vmath_avx2.cpp)
        const float e = std::exp(-std::fabs(x[i]));
        y[i] = (x[i] < 0 ? e : 1.0f) / (1.0f + e);
    }
}

void vec_tanh(const float* x, float* y, int64_t n) {
    if (isa() >= Isa::AVX2) return vec_tanh_avx2(x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void vec_f16_to_f32(const f16* x, float* y, int64_t n) {
    if (isa() >= Isa::AVX2) return vec_f16_to_f32_avx2(x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

void vec_f32_to_f16(const float* x, f16* y, int64_t n) {
    if (isa() >= Isa::AVX2) return vec_f32_to_f16_avx2(x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void vec_copy_streamed(const float* x, float* y, int64_t n) {
#if defined(__SSE2__)
    int64_t i = 0;
    for (; i < n && reinterpret_cast<uintptr_t>(y + i) % 16 != 0; ++i) y[i] = x[i];
    for (; i + 4 <= n; i += 4) _mm_stream_ps(y + i, _mm_loadu_ps(x + i));
    for (; i < n; ++i) y[i] = x[i];
#else
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
#endif
}

void stream_fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

}  // namespace loom::device::cpu
