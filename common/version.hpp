#pragma once

namespace loom {
// Bumped with every release; compiled models record it.
inline constexpr const char* kVersion = "0.1.0";
// The sources this binary was built from: "g<commit>+s<hash of every source file>" (no commit
// part outside git). Compiled models record it; the compile cache rebuilds entries another
// build made, committed or not.
const char* build_id();
}  // namespace loom
