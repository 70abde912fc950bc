// quantize_row_i8's loop on AVX-512 vectors (cpu/quantize.hpp). Built with -mavx512f..vl; called
// only after the CPU check. Each step is the SSE2 loop's (device/kernels/cube_util.cpp), so the
// bits are the same: x / x_scale (IEEE division), NaN lanes zeroed (the and with t == t there),
// the clamps to [-127, 127], the round-to-nearest-even by adding and taking away 1.5 x 2^23, and
// a truncating conversion of a whole number.
#include <immintrin.h>

#include "device/kernels/cpu/quantize.hpp"

namespace loom::device::cpu {

int64_t quantize_row_i8_avx512(const float* in, int64_t n, float x_scale, int8_t* out) {
    const __m512 scale = _mm512_set1_ps(x_scale), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    const __m512 round = _mm512_set1_ps(12582912.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 t = _mm512_div_ps(_mm512_loadu_ps(in + i), scale);
        t = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(t, t, _CMP_EQ_OQ), t);  // NaN -> +0
        t = _mm512_maskz_min_ps(0xFFFF, _mm512_maskz_max_ps(0xFFFF, t, lo), hi);
        t = _mm512_maskz_sub_ps(0xFFFF, _mm512_maskz_add_ps(0xFFFF, t, round), round);  // whole: exact
        const __m512i q = _mm512_maskz_cvttps_epi32(0xFFFF, t);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm512_maskz_cvtepi32_epi8(0xFFFF, q));  // in range
    }
    return i;
}

}  // namespace loom::device::cpu
