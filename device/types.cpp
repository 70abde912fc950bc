#include "device/types.hpp"

#include <cmath>

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
