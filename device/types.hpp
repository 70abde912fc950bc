// Small vocabulary types of the simulated NPU shared by the runtime, kernels and cost model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

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

// The engines of the chip. Each has one lane except AICORE, which has one per AI core.
#define LOOM_ENGINE_LIST(X) \
    X(H2D, "h2d")           \
    X(D2H, "d2h")           \
    X(D2D, "d2d")           \
    X(AICORE, "aicore")     \
    X(MEDIA, "media")       \
    X(HOST_CPU, "host_cpu")

enum class Engine : uint8_t {
#define LOOM_X(e, n) e,
    LOOM_ENGINE_LIST(LOOM_X)
#undef LOOM_X
};
#define LOOM_X(e, n) +1
inline constexpr size_t kEngineCount = 0 LOOM_ENGINE_LIST(LOOM_X);
#undef LOOM_X
static_assert(kEngineCount == 6);

// Returns the lowercase engine name used in traces, faults and stats ("aicore").
std::string_view engine_name(Engine e);
// Returns true and sets `out` when `name` names an engine.
bool engine_from_name(std::string_view name, Engine& out);

enum class DType : uint8_t { F32, F16, I8, I32, U8, I64 };

// IEEE 754 binary16 storage; arithmetic happens in fp32, as on the Cube (fp16 in, fp32 acc).
struct f16 {
    uint16_t bits = 0;
};
// Converts with round-to-nearest-even; overflow gives infinity, NaN stays NaN.
f16 f32_to_f16(float v);
float f16_to_f32(f16 h);

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
