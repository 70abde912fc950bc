#include "device/types.hpp"

#include <cmath>
#include <cstring>

#include "common/status.hpp"

namespace loom::device {

SimTime sim_from_ns(double ns) {
    LOOM_ASSERT(std::isfinite(ns) && ns >= 0);
    return static_cast<SimTime>(std::llround(ns * static_cast<double>(kPsPerNs)));
}

std::string_view engine_name(Engine e) {
    switch (e) {
#define LOOM_X(en, n) \
    case Engine::en: return n;
        LOOM_ENGINE_LIST(LOOM_X)
#undef LOOM_X
    }
    return "?";
}

bool engine_from_name(std::string_view name, Engine& out) {
#define LOOM_X(en, n)     \
    if (name == n) {      \
        out = Engine::en; \
        return true;      \
    }
    LOOM_ENGINE_LIST(LOOM_X)
#undef LOOM_X
    return false;
}

f16 f32_to_f16(float v) {
    uint32_t x;
    std::memcpy(&x, &v, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xffu) return f16{static_cast<uint16_t>(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u))};
    int32_t e = static_cast<int32_t>(exp) - 127 + 15;
    if (e >= 31) return f16{static_cast<uint16_t>(sign | 0x7c00u)};
    if (e <= 0) {
        if (e < -10) return f16{static_cast<uint16_t>(sign)};
        // Subnormal: shift the full mantissa (with its hidden bit) and round to nearest even.
        man |= 0x800000u;
        uint32_t shift = static_cast<uint32_t>(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) ++half;
        return f16{static_cast<uint16_t>(sign | half)};
    }
    uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: correct
    return f16{static_cast<uint16_t>(half)};
}

float f16_to_f32(f16 h) {
    uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1fu;
    uint32_t man = h.bits & 0x3ffu;
    uint32_t x;
    if (exp == 0x1fu) {
        x = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            x = sign;
        } else {  // subnormal: normalise
            int32_t e = -1;
            do {
                man <<= 1;
                ++e;
            } while (!(man & 0x400u));
            x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        x = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float v;
    std::memcpy(&v, &x, 4);
    return v;
}

size_t dtype_size(DType t) {
    switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::I8: return 1;
    case DType::I32: return 4;
    case DType::U8: return 1;
    case DType::I64: return 8;
    }
    return 0;
}

std::string_view dtype_name(DType t) {
    switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::I8: return "i8";
    case DType::I32: return "i32";
    case DType::U8: return "u8";
    case DType::I64: return "i64";
    }
    return "?";
}

}  // namespace loom::device
