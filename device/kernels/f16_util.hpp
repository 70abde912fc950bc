// Fast f16 <-> f32 conversions for the kernels' block loops.
#pragma once

#include <bit>
#include <cstdint>

#include "device/types.hpp"

namespace loom::device::ops {

// f16 -> f32 and f32 -> f16 (round to nearest even, overflow to infinity, NaN payload kept),
// bit-identical to device/types.cpp's f16_to_f32 / f32_to_f16 but inline and branch-free, so
// the block loops of the f16 paths run several times faster.
// (F. Giesen's half_to_float_fast5 and float_to_half_fast3_rtne.)
// Every path is computed and the result picked with masks (not branches), so the loops
// vectorise on plain SSE2, which has no f16 conversion instructions.
inline float to_f32(f16 h) {
    const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
    const int32_t o = static_cast<int32_t>(h.bits & 0x7fffu) << 13;
    const int32_t exp = o & 0x0f800000;
    const int32_t normal = o + ((127 - 15) << 23);
    const int32_t special = normal + ((128 - 16) << 23);  // infinity or NaN
    // Zero or subnormal: renormalise with one float subtraction (exact).
    const int32_t tiny =
        std::bit_cast<int32_t>(std::bit_cast<float>(normal + (1 << 23)) - std::bit_cast<float>(113 << 23));
    const int32_t is_special = -static_cast<int32_t>(exp == 0x0f800000);
    const int32_t is_tiny = -static_cast<int32_t>(exp == 0);
    const int32_t r = (special & is_special) | (tiny & is_tiny) | (normal & ~(is_special | is_tiny));
    return std::bit_cast<float>(static_cast<uint32_t>(r) | sign);
}

inline f16 to_f16(float v) {
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const int32_t u = static_cast<int32_t>(bits & 0x7fffffffu);
    // NaN keeps its payload (quieted), anything from 65536 up is infinity.
    const int32_t is_nan = -static_cast<int32_t>(u > 0x7f800000);
    const int32_t special = 0x7c00 | (is_nan & (0x200 | ((u & 0x7fffff) >> 13)));
    // Below 2^-14 (subnormal or zero): an fp32 addition rounds at 2^-24, to nearest even.
    constexpr int32_t magic = 126 << 23;
    const int32_t tiny = std::bit_cast<int32_t>(std::bit_cast<float>(u) + std::bit_cast<float>(magic)) - magic;
    // Normal: rebias the exponent and round to nearest even.
    const int32_t normal = (u + ((15 - 127) << 23) + 0xfff + ((u >> 13) & 1)) >> 13;
    const int32_t is_special = -static_cast<int32_t>(u >= (127 + 16) << 23);
    const int32_t is_tiny = -static_cast<int32_t>(u < 113 << 23);
    const int32_t o = (special & is_special) | (tiny & is_tiny) | (normal & ~(is_special | is_tiny));
    return f16{static_cast<uint16_t>(static_cast<uint32_t>(o) | ((bits >> 16) & 0x8000u))};
}

}  // namespace loom::device::ops
