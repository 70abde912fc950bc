// Shared by the Cube-op kernels (conv, conv_transpose, matmul, gemm): the fused activation
// attributes, the convolution geometry attributes (ONNX Conv / ConvTranspose), optional inputs,
// and host copies of f16 tensors as fp32 for the fp32-accumulating paths.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/gemm.hpp"

namespace loom::device::ops {

// activation = none | relu | leaky_relu (alpha, default 0.01) | prelu (slopes from an input) |
// clip (min, max) | sigmoid | hard_swish. Returns the epilogue's activation fields.
struct Activation {
    cpu::Act act = cpu::Act::NONE;
    float alpha = 0, beta = 0;
};
Result<Activation> parse_activation(const KernelAttrs& attrs);
// The attribute names parse_activation reads.
inline constexpr std::array<std::string_view, 4> kActivationAttrs = {"activation", "alpha", "min", "max"};

// An optional input: absent when the launch has fewer inputs or the tensor holds no elements.
inline const TensorRef* optional_input(const KernelLaunch& l, size_t i) {
    return i < l.inputs.size() && l.inputs[i].elements() > 0 ? &l.inputs[i] : nullptr;
}

// The fused epilogue of conv and conv_transpose: B (input 2, K values), R (input 3, the residual,
// Y's shape), S (input 4, prelu slopes: 1 or K values), the activation attributes and
// residual_after_activation (0 or 1). Errors are prefixed with `kernel`.
struct ChannelEpilogue {
    const TensorRef *bias = nullptr, *residual = nullptr, *slope = nullptr;
    Activation act;
    bool residual_after_act = false;
};
Result<ChannelEpilogue> parse_channel_epilogue(const KernelLaunch& l, std::string_view kernel, int64_t K, DType dtype,
                                               const TensorRef& y);

// Convolution geometry for 1 or 2 spatial dims (1-D convs are 2-D with H = 1).
struct ConvGeometry {
    int spatial = 2;
    int64_t group = 1;
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
    int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
    int64_t out_pad_h = 0, out_pad_w = 0;  // conv_transpose only
};

// Reads group, kernel_shape (checked against the weights' kernel dims), strides, dilations,
// pads and auto_pad (NOTSET, SAME_UPPER, SAME_LOWER, VALID) for a conv over spatial sizes
// in_h x in_w. For conv_transpose (`transpose`), also output_padding and output_shape
// (out_h/out_w are the output tensor's spatial sizes, used for SAME and output_shape).
Result<ConvGeometry> parse_conv_geometry(const KernelAttrs& attrs, int spatial, int64_t kh, int64_t kw,
                                         int64_t in_h, int64_t in_w, bool transpose, int64_t out_h, int64_t out_w);

// The attribute names parse_conv_geometry reads.
inline constexpr std::array<std::string_view, 8> kConvGeometryAttrs = {
    "group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "output_padding", "output_shape"};

// Returns t's data as fp32: the tensor itself when f32, else a converted copy in `scope`.
const float* as_f32(const TensorRef& t, cpu::ScratchScope& scope);
// Writes fp32 values to t (rounding once to f16 when t is f16).
void store_f32(const float* src, const TensorRef& t);

}  // namespace loom::device::ops
