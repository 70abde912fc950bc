// Direct convolution for few output channels: the last layer of the restoration networks, whose
// transposed conv runs as a small window over X into K x sh x sw phase channels (12 for a 4x4
// stride-2 kernel to RGB; conv_transpose.cpp's sub-pixel form). With so few outputs Winograd
// spends its time transforming X (each input value transformed once per 12 products), and an
// im2col GEMM packing it; this kernel keeps a block of kDirectBlockK output channels times one
// or two vectors of output pixels in registers and runs the channel and tap loops over them,
// reading each input vector once per block for all 12 channels, with weights broadcast from a
// layout made once.
// Values are summed per output in (channel, tap row, tap column) order on every instruction set,
// with one rounding per multiply-add (FMA from AVX2 up; separate multiply and add on the
// baseline), so results may differ between levels in the last bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernels/cpu/winograd.hpp"

namespace loom::device::cpu {

// Output channels one pass computes; the weights are padded to a multiple of it.
inline constexpr int64_t kDirectBlockK = 12;

// Floats of direct_conv's weights for K output channels, C input channels and a th x tw window.
size_t direct_conv_weights_floats(int64_t K, int64_t C, int64_t th, int64_t tw);
// Lays w (K x C x th x tw) out as direct_conv reads it: per block of kDirectBlockK output
// channels, [C][th][tw][kDirectBlockK], zero past K.
void direct_conv_pack_weights(const float* w, int64_t K, int64_t C, int64_t th, int64_t tw, float* out);

// y (K x Ho x Wo, from s) = conv(x (C x H x W), w) at stride 1 with a th x tw window: output
// (oy, ox) reads input rows oy - pad_top .. + th - 1 and columns ox - pad_left .. + tw - 1, values
// outside the image zero (pads may be negative: the window then starts inside the image). x may
// be fp16 storage, widened exactly as it is read (the fp32 result of the widened map). wp from
// direct_conv_pack_weights. No epilogue. Parallel over (block of channels, output row).
void direct_conv(const Conv2dShape& s, int64_t th, int64_t tw, WinogradIn x, const float* wp, float* y,
                 ThreadPool& pool);

// One output row of one block of channels (internal; per instruction set).
struct DirectRow {
    const float* x = nullptr;  // the image, C x H x W: fp32, or fp16 storage (xh); one is set
    const f16* xh = nullptr;
    int64_t C = 0, H = 0, W = 0, th = 0, tw = 0;
    int64_t iy0 = 0, ix0 = 0;  // input coordinates of output (oy, 0)'s window
    int64_t Wo = 0;
    const float* w = nullptr;  // the block's weights, [C][th][tw][kDirectBlockK]
    float* y = nullptr;        // output row oy of the block's first channel
    int64_t plane = 0;         // floats between channels of y
    int64_t channels = 0;      // channels of the block (<= kDirectBlockK)
};
using DirectRowFn = void (*)(const DirectRow& r);
void direct_conv_row_generic(const DirectRow& r);
void direct_conv_row_avx2(const DirectRow& r);
void direct_conv_row_avx512(const DirectRow& r);

}  // namespace loom::device::cpu
