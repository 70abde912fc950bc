#include "device/kernels/cpu/isa.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "common/log.hpp"

namespace loom::device::cpu {

namespace {

struct Detected {
    Isa best = Isa::GENERIC;
    bool vnni = false;
};

// Straight from CPUID and XGETBV: clang 14's __builtin_cpu_supports lacks some of these names,
// and a CPU feature is usable only when the OS saves its registers on a context switch (XCR0).
Detected detect() {
    Detected d;
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return d;
    const bool fma = ecx & bit_FMA, osxsave = ecx & bit_OSXSAVE, avx = ecx & bit_AVX, f16c = ecx & bit_F16C;
    if (!osxsave || !avx) return d;
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    constexpr unsigned kYmmState = 0x6;   // XMM and the upper halves of YMM
    constexpr unsigned kZmmState = 0xE0;  // opmask, the upper halves of ZMM0-15, ZMM16-31
    if ((xcr0_lo & kYmmState) != kYmmState) return d;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return d;
    if (!(ebx & bit_AVX2) || !fma || !f16c) return d;
    d.best = Isa::AVX2;
    const bool avx512 = (ebx & bit_AVX512F) && (ebx & bit_AVX512BW) && (ebx & bit_AVX512DQ) && (ebx & bit_AVX512VL);
    if (!avx512 || (xcr0_lo & kZmmState) != kZmmState) return d;
    d.best = Isa::AVX512;
    d.vnni = ecx & bit_AVX512VNNI;
#endif
    return d;
}

const Detected& detected() {
    static const Detected d = detect();
    return d;
}

Isa initial() {
    const Isa best = isa_detected();
    const char* env = std::getenv("LOOM_ISA");
    if (!env || !*env) return best;
    const std::string_view want(env);
    for (int i = 0; i < kIsaCount; ++i) {
        const auto level = static_cast<Isa>(i);
        if (want != isa_name(level)) continue;
        if (level <= best) return level;
        log::warn("kernels", "LOOM_ISA={} but this CPU supports at most {}; using {}", want, isa_name(best),
                  isa_name(best));
        return best;
    }
    log::warn("kernels", "LOOM_ISA='{}' is not generic, avx2 or avx512; using {}", want, isa_name(best));
    return best;
}

std::atomic<Isa>& current() {
    static std::atomic<Isa> isa{initial()};
    return isa;
}

}  // namespace

Isa isa() { return current().load(std::memory_order_relaxed); }

Isa isa_detected() { return detected().best; }

bool isa_has_vnni() { return detected().vnni; }

Isa set_isa(Isa want) {
    const Isa use = want <= isa_detected() ? want : isa_detected();
    current().store(use);
    return use;
}

std::string_view isa_name(Isa i) {
    switch (i) {
    case Isa::GENERIC: return "generic";
    case Isa::AVX2: return "avx2";
    case Isa::AVX512: return "avx512";
    }
    return "generic";
}

}  // namespace loom::device::cpu
