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

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) return Isa::AVX2;
#endif
    return Isa::GENERIC;
}

Isa initial() {
    const Isa best = isa_detected();
    const char* env = std::getenv("LOOM_ISA");
    if (!env || !*env) return best;
    std::string_view want(env);
    if (want == "generic") return Isa::GENERIC;
    if (want == "avx2") {
        if (best == Isa::AVX2) return Isa::AVX2;
        log::warn("kernels", "LOOM_ISA=avx2 but this CPU lacks AVX2/FMA/F16C; using generic kernels");
        return Isa::GENERIC;
    }
    log::warn("kernels", "LOOM_ISA='{}' is not generic or avx2; using {}", want, isa_name(best));
    return best;
}

std::atomic<Isa>& current() {
    static std::atomic<Isa> isa{initial()};
    return isa;
}

}  // namespace

Isa isa() { return current().load(std::memory_order_relaxed); }

Isa isa_detected() {
    static const Isa best = detect();
    return best;
}

Isa set_isa(Isa want) {
    Isa use = want == Isa::AVX2 && isa_detected() != Isa::AVX2 ? Isa::GENERIC : want;
    current().store(use);
    return use;
}

std::string_view isa_name(Isa i) { return i == Isa::AVX2 ? "avx2" : "generic"; }

}  // namespace loom::device::cpu
