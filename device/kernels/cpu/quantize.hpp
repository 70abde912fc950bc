// Host fast paths of the int8 kernels' activation quantizer (ops::quantize_row_i8, whose
// semantics they keep bit for bit: q = clamp(nearbyint(x / x_scale), -127, 127), NaN -> 0).
#pragma once

#include <cstdint>

namespace loom::device::cpu {

// The first n / 16 * 16 values of in quantized into out, sixteen at a time: the same IEEE
// division, NaN zeroed, the clamps and the rounding add as the SSE2 loop, on AVX-512 vectors.
// Returns how many it did. Call only when isa() is AVX512.
int64_t quantize_row_i8_avx512(const float* in, int64_t n, float x_scale, int8_t* out);

}  // namespace loom::device::cpu
