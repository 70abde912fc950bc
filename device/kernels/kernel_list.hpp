// The one list of device kernels. Adding a kernel: one file in device/kernels/ defining
// `const KernelDef kernel_NAME`, and one line here.
#pragma once

#define LOOM_KERNEL_LIST(X) \
    X(matmul)               \
    X(eltwise)              \
    X(conv)

#define LOOM_X(name) +1
inline constexpr int kKernelCount = 0 LOOM_KERNEL_LIST(LOOM_X);
#undef LOOM_X
