// Small vocabulary types of the simulated NPU shared by the runtime, kernels and cost model.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace loom::device {

// Simulated device time in picoseconds: integer so that timelines are exact and identical on
// every host (int64 covers 106 days).
using SimTime = int64_t;
inline constexpr SimTime kPsPerNs = 1000;
inline constexpr SimTime kPsPerUs = 1000 * kPsPerNs;
inline constexpr SimTime kPsPerMs = 1000 * kPsPerUs;

// Converts nanoseconds (a cost-model result) to SimTime, rounding to the nearest picosecond.
SimTime sim_from_ns(double ns);
inline double sim_to_ms(SimTime t) { return static_cast<double>(t) / static_cast<double>(kPsPerMs); }
inline double sim_to_us(SimTime t) { return static_cast<double>(t) / static_cast<double>(kPsPerUs); }

// The engines of the chip. Each has one lane except AICORE, which has one per AI core. MEDIA is
// the DVPP's image processor (VPC); VDEC and VENC are its video decoder and encoder.
#define LOOM_ENGINE_LIST(X) \
    X(H2D, "h2d")           \
    X(D2H, "d2h")           \
    X(D2D, "d2d")           \
    X(AICORE, "aicore")     \
    X(MEDIA, "media")       \
    X(VDEC, "vdec")         \
    X(VENC, "venc")         \
    X(HOST_CPU, "host_cpu")

enum class Engine : uint8_t {
#define LOOM_X(e, n) e,
    LOOM_ENGINE_LIST(LOOM_X)
#undef LOOM_X
};
#define LOOM_X(e, n) +1
inline constexpr size_t kEngineCount = 0 LOOM_ENGINE_LIST(LOOM_X);
#undef LOOM_X
static_assert(kEngineCount == 8);

// Returns the lowercase engine name used in traces, faults and stats ("aicore").
std::string_view engine_name(Engine e);
// Returns true and sets `out` when `name` names an engine.
bool engine_from_name(std::string_view name, Engine& out);

enum class DType : uint8_t { F32, F16, I8, I32, U8, I64 };

// IEEE 754 binary16 storage; arithmetic happens in fp32, as on the Cube (fp16 in, fp32 acc).
struct f16 {
    uint16_t bits = 0;
};
// f32_to_f16 rounds to nearest even, overflows to infinity and keeps NaN (quieted, payload
// kept); f16_to_f32 is exact. Inline and branch-free: every path is computed and the result
// picked with masks, so element loops over them vectorise even on plain SSE2, which has no f16
// conversion instructions (F. Giesen's half_to_float_fast5 and float_to_half_fast3_rtne).
// Relies on the default floating-point environment (round to nearest, no flush-to-zero).
inline float f16_to_f32(f16 h) {
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

inline f16 f32_to_f16(float v) {
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

// Element i of a float or f16 array as float, and a float stored into one: lets one loop body
// serve both dtypes (fp16 storage, fp32 arithmetic, as on the Cube).
template <typename T, typename I>
inline float load_as_f32(const T* p, I i) {
    if constexpr (std::is_same_v<T, f16>) return f16_to_f32(p[i]);
    else return static_cast<float>(p[i]);
}
template <typename T, typename I>
inline void store_from_f32(T* p, I i, float v) {
    if constexpr (std::is_same_v<T, f16>) p[i] = f32_to_f16(v);
    else p[i] = static_cast<T>(v);
}

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<f16>() { return DType::F16; }
template <> constexpr DType dtype_of<int8_t>() { return DType::I8; }
template <> constexpr DType dtype_of<int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::U8; }
template <> constexpr DType dtype_of<int64_t>() { return DType::I64; }
// Returns the size in bytes of one element.
size_t dtype_size(DType t);
std::string_view dtype_name(DType t);

}  // namespace loom::device
