// Host instruction-set selection for the kernels' fast paths. The CPU is checked once per
// process (CPUID, and XGETBV for the register state the OS saves); LOOM_ISA=generic|avx2|avx512
// forces a lower level, and tests switch it with set_isa to cover every level the CPU has.
// Kernels read isa() once per call and take their function pointers from it, never per element.
#pragma once

#include <cstdint>
#include <string_view>

namespace loom::device::cpu {

// Levels in increasing order; each includes the ones below it.
//   AVX2:   AVX2 + FMA + F16C, YMM state enabled by the OS.
//   AVX512: AVX-512 F + BW + DQ + VL on top of AVX2, opmask and ZMM state enabled by the OS.
enum class Isa : uint8_t { GENERIC, AVX2, AVX512 };
inline constexpr int kIsaCount = 3;  // the levels above, for loops and tables indexed by Isa

// Returns the instruction set the kernels use now.
Isa isa();
// Returns the best level this CPU supports (ignores overrides).
Isa isa_detected();
// Returns whether this CPU supports `i` (so set_isa(i) would take effect).
inline bool isa_supported(Isa i) { return i <= isa_detected(); }
// Returns whether the CPU has AVX-512 VNNI (vpdpwssd, vpdpbusd). The int8 kernels use it only
// while isa() is AVX512.
bool isa_has_vnni();
// Selects `want` for every later kernel call, or the best level below it that the CPU has.
// Returns the instruction set now in use. Not for use while kernels run.
Isa set_isa(Isa want);
// "generic", "avx2" or "avx512" (the LOOM_ISA spellings).
std::string_view isa_name(Isa i);

}  // namespace loom::device::cpu
