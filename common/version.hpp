#pragma once

namespace loom {
// Bumped with every release; compiled models record it.
inline constexpr const char* kVersion = "0.1.0";
}  // namespace loom
