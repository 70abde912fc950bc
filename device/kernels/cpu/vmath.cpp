// The generic (<cmath>) versions of vmath.hpp and the choice of instruction set per call.
// AVX-512 runs the AVX2 versions: exp, sigmoid and tanh take under 1% of the restoration models'
// time (docs/benchmarks.md, "AVX-512"), so wider versions would not show.
#include "device/kernels/cpu/vmath.hpp"

#include <cmath>

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

}  // namespace loom::device::cpu
