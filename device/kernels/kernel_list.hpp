// The one list of device kernels. Adding a kernel: one file in device/kernels/ defining
// `const KernelDef kernel_NAME`, and one line here.
#pragma once

#define LOOM_KERNEL_LIST(X) \
    X(matmul)               \
    X(gemm)                 \
    X(conv_transpose)       \
    X(pool)                 \
    X(global_pool)          \
    X(concat)               \
    X(split)                \
    X(slice)                \
    X(pad)                  \
    X(transpose)            \
    X(reshape)              \
    X(depth_to_space)       \
    X(space_to_depth)       \
    X(resize)               \
    X(gather)               \
    X(shape)                \
    X(binary)               \
    X(unary)                \
    X(cast)                 \
    X(softmax)              \
    X(batchnorm)            \
    X(instancenorm)         \
    X(reduce)               \
    X(eltwise_chain)        \
    X(conv)                 \
    X(trans_data)

#define LOOM_X(name) +1
inline constexpr int kKernelCount = 0 LOOM_KERNEL_LIST(LOOM_X);
#undef LOOM_X
