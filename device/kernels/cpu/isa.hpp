// Host instruction-set selection for the kernels' fast paths. The CPU is checked once at
// start-up; LOOM_ISA=generic (or avx2) overrides it, and tests switch it to cover both paths.
#pragma once

#include <string_view>

namespace loom::device::cpu {

enum class Isa { GENERIC, AVX2 };  // AVX2 means AVX2 + FMA + F16C

// Returns the instruction set the kernels use now.
Isa isa();
// Returns what this CPU supports best (ignores overrides).
Isa isa_detected();
// Selects `want` for every later kernel call; falls back to GENERIC when the CPU lacks it.
// Returns the instruction set now in use. Not for use while kernels run.
Isa set_isa(Isa want);
std::string_view isa_name(Isa i);

}  // namespace loom::device::cpu
