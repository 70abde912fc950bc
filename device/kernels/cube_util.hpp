// Shared by the Cube-op kernels (conv, conv_transpose, matmul, gemm): the fused activation
// attributes and epilogue, the convolution geometry attributes (ONNX Conv / ConvTranspose),
// optional inputs, int8 weights with per-channel scales, and host copies of f16 and i8 tensors
// as fp32 for the fp32-accumulating paths.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/gemm_i8.hpp"
#include "device/kernels/cpu/winograd_i8.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::device::ops {

// activation = none | relu | leaky_relu (alpha, default 0.01) | prelu (slopes from an input) |
// clip (min, max) | sigmoid | hard_swish. Returns the epilogue's activation fields.
struct Activation {
    cpu::Act act = cpu::Act::NONE;
    float alpha = 0, beta = 0;
};
Result<Activation> parse_activation(const KernelAttrs& attrs);

// The epilogue that applies `a` and nothing else (callers add bias, slopes, residual, scale).
inline cpu::Epilogue activation_epilogue(const Activation& a) {
    cpu::Epilogue ep;
    ep.act = a.act, ep.alpha = a.alpha, ep.beta = a.beta;
    return ep;
}

// Vector passes per output element of a Cube op's epilogue: `addends` (bias, residual, scale:
// one each), the activation when there is one, and the fp32 -> f16 cast when storing f16.
inline double epilogue_passes(const Activation& a, DType dtype, int addends) {
    return addends + (a.act != cpu::Act::NONE ? 1 : 0) + (dtype == DType::F16 ? 1 : 0);
}

// Fails unless input 0 is f32 or f16 and output 0 has its dtype, and input 1 (the weights) has
// it too or is i8 (then parse_quant checks the rest); errors are prefixed with `kernel`.
Status check_float_operands(const KernelLaunch& l, std::string_view kernel);

// int8 weights with per-channel scales. When the weight input (input 1, named `w_name`) is i8,
// input `ws_index` (`ws_name`) holds its scales, f32, 1 value (per tensor) or `n` (one per
// output channel, `n_name`), and attribute x_scale (> 0, finite, used as f32) quantizes the
// float activation inside the kernel: q = clamp(nearbyint(x / x_scale), -127, 127). The
// reduction is exact int32 (the Cube's int8 x int8 -> int32) and the result is
// x_scale x WS[channel] x sum before the float epilogue. Fails when the scales or x_scale come
// without an i8 weight, or an i8 weight without them; errors are prefixed with `kernel`.
struct Quant {
    const TensorRef* w_scale = nullptr;  // null: float weights
    float x_scale = 0;
    bool on() const { return w_scale != nullptr; }
};
Result<Quant> parse_quant(const KernelLaunch& l, std::string_view kernel, std::string_view w_name,
                          std::string_view ws_name, size_t ws_index, std::string_view n_name, int64_t n);
// Fails when an int8 reduction of `k_red` products (named by `what`) could overflow int32.
Status check_int8_reduction(int64_t k_red, std::string_view kernel, std::string_view what);

// Returns v quantized as an integer-valued fp32: q above with the division in fp32, ties to even
// (adding and subtracting 1.5 x 2^23 rounds |t| < 2^22 in the default rounding mode, so loops
// vectorise without a libm call); NaN gives 0.
inline float quantize_value(float v, float x_scale) {
    constexpr float kRound = 12582912.0f;
    float t = v / x_scale;
    t = t == t ? t : 0.0f;
    t = std::min(std::max(t, -127.0f), 127.0f);
    return (t + kRound) - kRound;
}
// Writes in[0..n) (f32 or f16) quantized (quantize_value) to out as int8, vectorised.
void quantize_row_i8(const float* in, int64_t n, float x_scale, int8_t* out);
void quantize_row_i8(const f16* in, int64_t n, float x_scale, int8_t* out);
// Returns x quantized (quantize_value) in `scope`; once per launch, split over `pool`. As
// integer-valued fp32 (the depthwise loop) or as int8 (the int8 GEMM).
const float* quantize_f32(const TensorRef& x, float x_scale, cpu::ScratchScope& scope, ThreadPool& pool);
const int8_t* quantize_i8(const TensorRef& x, float x_scale, cpu::ScratchScope& scope, ThreadPool& pool);
// Returns x (N x C x H x W, f32 or f16) quantized (quantize_value) into the integer F(4,3)'s
// phase planes (cpu::WinogradI8Planes) for a conv with these leading pads, N x C of them of
// winograd_i8_plane_bytes(1, ps) each, in `scope`: the launch's one pass over X, split over
// `pool` by planes. pad_left + W must fit 4 x ps.tq.
const int8_t* winograd_i8_phase_planes(const TensorRef& x, int64_t N, int64_t C, int64_t H, int64_t W,
                                       int64_t pad_top, int64_t pad_left, float x_scale,
                                       cpu::WinogradI8PlaneShape ps, cpu::ScratchScope& scope, ThreadPool& pool);
// Returns the dequantize factors x_scale x WS[i] (fp32 products, 1 or n values), in `scope`.
const float* dequant_factors(const Quant& q, cpu::ScratchScope& scope);

// Fails unless the slope input S is given exactly when the activation is prelu, holding 1 or
// `n` values (`n_name`: "K" or "N") of `dtype`; errors are prefixed with `kernel`.
Status check_prelu_slope(const Activation& act, const TensorRef* slope, std::string_view kernel,
                         std::string_view n_name, int64_t n, DType dtype);

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

// A ChannelEpilogue's inputs as fp32 (null where absent), converted once per launch, except an
// fp16 residual, which the epilogue reads in place; the int8 kernels add their dequantize
// factors (1 or K values).
struct ChannelEpilogueData {
    const float *bias = nullptr, *residual = nullptr, *slope = nullptr;
    const f16* residual_h = nullptr;  // an fp16 residual, read in place (cpu::Addend::h)
    const float* dequant = nullptr;
    int64_t dequant_count = 0;
};
ChannelEpilogueData channel_epilogue_f32(const ChannelEpilogue& e, cpu::ScratchScope& scope, ThreadPool& pool);
// The host epilogue for output channels k0.. laid out as planes of `plane` elements: dequantize
// factors, bias and slopes per channel (one for all when there is 1 value), the residual read
// from d.residual (or the fp16 d.residual_h) + residual_offset.
cpu::Epilogue channel_epilogue(const ChannelEpilogue& e, const ChannelEpilogueData& d, int64_t k0,
                               int64_t residual_offset, int64_t plane);

// Convolution geometry for 1 or 2 spatial dims (1-D convs are 2-D with H = 1).
struct ConvGeometry {
    int spatial = 2;
    int64_t group = 1;
    int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
    int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
    int64_t out_pad_h = 0, out_pad_w = 0;  // conv_transpose only
};

// What conv and conv_transpose both read from a launch: the geometry, the sizes (1-D convs
// have H = Ho = 1), the dtype and the fused epilogue.
struct ConvShape : ChannelEpilogue {
    ConvGeometry g;
    int64_t N = 0, C = 0, H = 1, W = 0, K = 0, Ho = 1, Wo = 0;
    DType dtype = DType::F32;

    int64_t cg() const { return C / g.group; }
    int64_t kg() const { return K / g.group; }
};

// Fails unless Y is [N, K, (Ho,) Wo] with Ho = ho and Wo = wo (what X, W and the geometry
// give); the error is prefixed with `kernel`.
Status check_conv_output(const ConvShape& c, int64_t ho, int64_t wo, const TensorRef& x, const TensorRef& w,
                         const TensorRef& y, std::string_view kernel);

// Reads group, kernel_shape (checked against the weights' kernel dims), strides, dilations,
// pads and auto_pad (NOTSET, SAME_UPPER, SAME_LOWER, VALID) for a conv over spatial sizes
// in_h x in_w. For conv_transpose (`transpose`), also output_padding and output_shape
// (out_h/out_w are the output tensor's spatial sizes, used for SAME and output_shape).
Result<ConvGeometry> parse_conv_geometry(const KernelAttrs& attrs, int spatial, int64_t kh, int64_t kw,
                                         int64_t in_h, int64_t in_w, bool transpose, int64_t out_h, int64_t out_w);


// Returns t's data (f32, f16 or i8) as fp32: the tensor itself when f32, else a converted copy
// in `scope` (split over `pool` when given: activations; weights and small operands need none).
const float* as_f32(const TensorRef& t, cpu::ScratchScope& scope, ThreadPool* pool = nullptr);
// Writes fp32 values to t (rounding once to f16 when t is f16, split over `pool` when given;
// nothing when src is t's own f32 data).
void store_f32(const float* src, const TensorRef& t, ThreadPool* pool = nullptr);
// Where to compute t in fp32: t's own data when f32, else scratch in `scope` for store_f32.
float* f32_output(const TensorRef& t, cpu::ScratchScope& scope);

}  // namespace loom::device::ops
