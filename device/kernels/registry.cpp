#include <array>

#include "device/kernel.hpp"
#include "device/kernels/kernel_list.hpp"

namespace loom::device {

#define LOOM_X(name) extern const KernelDef kernel_##name;
LOOM_KERNEL_LIST(LOOM_X)
#undef LOOM_X

namespace {
#define LOOM_X(name) &kernel_##name,
const std::array<const KernelDef*, kKernelCount> kKernels = {LOOM_KERNEL_LIST(LOOM_X)};
#undef LOOM_X
}  // namespace

const KernelDef* find_kernel(std::string_view name) {
    for (const KernelDef* k : kKernels)
        if (name == k->name) return k;
    return nullptr;
}

std::span<const KernelDef* const> all_kernels() { return kKernels; }

int64_t TensorRef::elements() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= dims[static_cast<size_t>(i)];
    return n;
}

}  // namespace loom::device
