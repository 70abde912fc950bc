// Vectorised transcendental functions for the elementwise kernels (softmax, sigmoid, tanh, exp,
// the GEMM epilogue's sigmoid). AVX2 + FMA: exp by range reduction, x = n ln2 + r with
// |r| <= ln2 / 2, then e^r by a degree-6 polynomial fitted for these notes (minimax in relative
// error on [-ln2/2, ln2/2]) and 2^n built in the exponent bits; at most 2 ulp from the correctly
// rounded result over the whole float range (tests/test_cpu_vmath.cpp), including subnormal
// results, overflow to +inf, -inf to 0 and NaN kept. The generic versions call <cmath>.
// Every element takes the same instructions (the last n % 8 through masked loads and stores), so
// a result depends only on its input, not on its place in the array: tiled and untiled runs
// agree bit for bit.
#pragma once

#include <cstdint>

#include "device/types.hpp"

namespace loom::device::cpu {

// y[i] = exp(x[i] - shift) for i < n, the subtraction in fp32; x and y may be the same array.
void vec_exp(const float* x, float* y, int64_t n, float shift = 0);
// The same, and returns the sum of the y[i] accumulated in float64.
double vec_exp_sum(const float* x, float* y, int64_t n, float shift = 0);
// y[i] = 1 / (1 + exp(-x[i])); x and y may be the same array.
void vec_sigmoid(const float* x, float* y, int64_t n);
// y[i] = tanh(x[i]); x and y may be the same array.
void vec_tanh(const float* x, float* y, int64_t n);

// fp16 storage: y[i] = x[i] widened (exact), and y[i] = x[i] rounded to nearest even (overflow
// to infinity, NaN quieted with its payload's top bits), the bits of types.hpp's f16_to_f32 and
// f32_to_f16 on every level (F16C's vcvtph2ps / vcvtps2ph from AVX2 up).
void vec_f16_to_f32(const f16* x, float* y, int64_t n);
void vec_f32_to_f16(const float* x, f16* y, int64_t n);

// y[i] = x[i] for i < n, y written with non-temporal stores (past the cache, without reading
// its lines first) where it is 16-byte aligned: for rows of a map larger than the cache that
// nothing reads soon. The stores are weakly ordered: the writing thread calls stream_fence()
// before another thread may read y (before it signals that its part is done).
void vec_copy_streamed(const float* x, float* y, int64_t n);
void stream_fence();

// The AVX2 + FMA implementations (internal; the functions above pick them by isa(), for AVX2
// and AVX-512).
void vec_exp_avx2(const float* x, float* y, int64_t n, float shift);
double vec_exp_sum_avx2(const float* x, float* y, int64_t n, float shift);
void vec_sigmoid_avx2(const float* x, float* y, int64_t n);
void vec_tanh_avx2(const float* x, float* y, int64_t n);
void vec_f16_to_f32_avx2(const f16* x, float* y, int64_t n);
void vec_f32_to_f16_avx2(const float* x, f16* y, int64_t n);

}  // namespace loom::device::cpu
