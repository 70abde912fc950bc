// AVX2 + FMA exp, sigmoid and tanh (device/kernels/cpu/vmath.hpp), eight floats per vector.
#include <immintrin.h>

#include <cstring>

#include "device/kernels/cpu/vmath.hpp"

namespace loom::device::cpu {

namespace {

// e^x. x is clamped to [-104, 89]: below, e^x rounds to 0; above, to +inf (e^89 > FLT_MAX),
// and n = round(x / ln2) stays in [-150, 129]. max(lo, x) and min(hi, x) return x when it is
// NaN, and the NaN then runs through every step. 2^n is applied as 2^(n/2) x 2^(n - n/2), two
// normal powers of two, so subnormal results are rounded once, by the last multiply.
inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(89.0f), _mm256_max_ps(_mm256_set1_ps(-104.0f), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.442695022f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // r = x - n ln2 in two steps (ln2 = hi + lo, hi = ln2 rounded to float), each one fused.
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147182f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-1.90465432e-09f), r);
    // e^r = 1 + r + r^2 P(r), P fitted for minimum relative error of e^r on |r| <= ln2 / 2.
    __m256 p = _mm256_set1_ps(0.00138146116f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.00836871006f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.041668389f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.166665211f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.49999994f));
    const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(r, r), p, r), _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i half = _mm256_srai_epi32(ni, 1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(e, s0), s1);
}

// sigmoid: with e = e^-|x|, 1 / (1 + e) for x >= 0 and e / (1 + e) below, so e never
// overflows and tiny results (down to subnormals) keep their precision.
inline __m256 sigmoid8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256 e = exp8(_mm256_or_ps(x, sign));  // e^-|x|
    const __m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_div_ps(num, _mm256_add_ps(one, e));
}

// tanh: x + x^3 Q(x^2) below |x| = 0.625 (Q fitted like exp's P; 1 - 2 / (e^2|x| + 1) would lose
// the leading bits there), else sign(x) (1 - 2 / (e^2|x| + 1)), which is 1 once e^2|x| is +inf.
inline __m256 tanh8(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 ax = _mm256_andnot_ps(sign, x), one = _mm256_set1_ps(1.0f);
    const __m256 z = _mm256_mul_ps(x, x);
    __m256 q = _mm256_set1_ps(-0.00570497988f);
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(0.0206390806f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-0.0537397116f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(0.133314416f));
    q = _mm256_fmadd_ps(q, z, _mm256_set1_ps(-0.333332807f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(x, z), q, x);
    const __m256 e = exp8(_mm256_add_ps(ax, ax));
    __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    large = _mm256_or_ps(large, _mm256_and_ps(sign, x));
    return _mm256_blendv_ps(large, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

// Lanes 0 .. m-1 on (0 < m < 8).
inline __m256i tail_mask(int64_t m) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(m)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// y = f(x) over n floats, the tail masked.
template <typename F>
inline void map8(const float* x, float* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i mask = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, mask, f(_mm256_maskload_ps(x + i, mask)));
    }
}

inline __m256d add_widened(__m256d acc, __m128 v) { return _mm256_add_pd(acc, _mm256_cvtps_pd(v)); }

}  // namespace

void vec_exp_avx2(const float* x, float* y, int64_t n, float shift) {
    const __m256 s = _mm256_set1_ps(shift);
    map8(x, y, n, [s](__m256 v) { return exp8(_mm256_sub_ps(v, s)); });
}

double vec_exp_sum_avx2(const float* x, float* y, int64_t n, float shift) {
    const __m256 s = _mm256_set1_ps(shift);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
        _mm256_storeu_ps(y + i, e);
        acc0 = add_widened(acc0, _mm256_castps256_ps128(e));
        acc1 = add_widened(acc1, _mm256_extractf128_ps(e, 1));
    }
    if (i < n) {
        const __m256i mask = tail_mask(n - i);
        const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), s)),
                                       _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(y + i, mask, e);
        acc0 = add_widened(acc0, _mm256_castps256_ps128(e));
        acc1 = add_widened(acc1, _mm256_extractf128_ps(e, 1));
    }
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, _mm256_add_pd(acc0, acc1));
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

void vec_sigmoid_avx2(const float* x, float* y, int64_t n) { map8(x, y, n, sigmoid8); }

void vec_tanh_avx2(const float* x, float* y, int64_t n) { map8(x, y, n, tanh8); }

// Eight values a step, the tail through a small buffer (F16C has no masked forms). The
// rounding immediate is round-to-nearest-even, whatever MXCSR says.
void vec_f16_to_f32_avx2(const f16* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
    if (i == n) return;
    alignas(16) uint16_t in[8] = {};
    alignas(32) float out[8];
    std::memcpy(in, x + i, static_cast<size_t>(n - i) * sizeof(f16));
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
    std::memcpy(y + i, out, static_cast<size_t>(n - i) * sizeof(float));
}

void vec_f32_to_f16_avx2(const float* x, f16* y, int64_t n) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), kRound));
    if (i == n) return;
    alignas(32) float in[8] = {};
    alignas(16) uint16_t out[8];
    std::memcpy(in, x + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(_mm256_load_ps(in), kRound));
    std::memcpy(y + i, out, static_cast<size_t>(n - i) * sizeof(f16));
}

}  // namespace loom::device::cpu
