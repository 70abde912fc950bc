#pragma once

namespace loom {
// Bumped with every release; compiled models record it.
inline constexpr const char* kVersion = "0.1.0";
// The source tree this binary was built from: "g<commit>" (with "-dirty" for uncommitted
// changes) or "unknown". Compiled models record it; the compile cache rebuilds entries another
// build made.
const char* build_id();
}  // namespace loom
