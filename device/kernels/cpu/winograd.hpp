// Winograd F(4x4, 3x3) convolution for 3x3, stride 1, dilation 1, ungrouped fp32 convs
// (Lavin & Gray 2016; the transforms below are theirs). Each 6x6 input tile becomes 36
// transformed values, so a 4x4 output tile costs 36 multiply-adds per input-output channel
// pair instead of 144; the 36 products are batched GEMMs (transformed weights x transformed
// input) on the GEMM micro-kernel.
//
// Work is cut into blocks of up to 32 tiles along one tile row. A block's transformed input
// (36 x C x 32 floats), its 36 GEMMs and its output transform all happen on one thread while
// the data stays in L2; blocks run in parallel. The transforms have an AVX2 version (eight
// tiles per vector, de-interleaved with shuffles) and a generic one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernels/cpu/gemm.hpp"

namespace loom::device::cpu {

// Floats needed for the transformed weights of a K x C x 3 x 3 filter.
size_t winograd43_weights_floats(int64_t K, int64_t C);
// Transforms w (K x C x 3 x 3) into U = G w G^T for each of the 36 positions, laid out as GEMM
// A panels (36 x ceil(K/6) panels of C x 6) for winograd43_conv. Done once per weight tensor.
void winograd43_transform_weights(const float* w, int64_t K, int64_t C, float* u);

struct Conv2dShape {
    int64_t C = 0, H = 0, W = 0;  // input channels and size (one image)
    int64_t K = 0, Ho = 0, Wo = 0;
    int64_t pad_top = 0, pad_left = 0;
};

// y (K x Ho x Wo) = epilogue(conv3x3(x (C x H x W), w)) for one image, with u from
// winograd43_transform_weights. The epilogue sees rows i = output channel, columns j = oy * Wo + ox.
void winograd43_conv(const Conv2dShape& s, const float* x, const float* u, float* y, const Epilogue& ep,
                     ThreadPool& pool);

// The block transforms, per instruction set (internal; exposed for the driver and tests).
struct WinogradBlock {
    const float* x = nullptr;  // image, C x H x W
    int64_t C = 0, H = 0, W = 0;
    int64_t iy0 = 0, ix0 = 0;  // input coordinate of the first tile's top-left (may be outside)
    int64_t tiles = 0;         // tiles in this block, <= tiles_padded
    int64_t tiles_padded = 0;  // multiple of 16 (kGemmNR)
};
// Writes V: 36 x (tiles_padded / 16) GEMM B panels of C x 16 floats, each panel starting
// winograd43_panel_stride(C) floats after the previous one (padded by one cache line: panels
// 4 KiB apart would all land in the same L1 set). `work` holds winograd43_work_floats(tiles_padded).
inline int64_t winograd43_panel_stride(int64_t C) { return C * kGemmNR + 16; }
inline size_t winograd43_input_floats(int64_t C, int64_t tiles_padded) {
    return static_cast<size_t>(36 * (tiles_padded / kGemmNR) * winograd43_panel_stride(C));
}
size_t winograd43_work_floats(int64_t tiles_padded);
void winograd43_input_generic(const WinogradBlock& b, float* v, float* work);
void winograd43_input_avx2(const WinogradBlock& b, float* v, float* work);
// Reads M: 36 x kp x tiles_padded (kp = K rounded up to 6) and writes output rows oy0..oy0+3,
// columns ox0..ox0 + 4 * tiles (clipped to Ho x Wo) of every output channel of y (K x Ho x Wo).
void winograd43_output_generic(const float* m, int64_t kp, int64_t tiles_padded, int64_t tiles, int64_t K,
                               float* y, int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0);
void winograd43_output_avx2(const float* m, int64_t kp, int64_t tiles_padded, int64_t tiles, int64_t K, float* y,
                            int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0);

}  // namespace loom::device::cpu
