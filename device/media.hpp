// Functional side of the media engine (DVPP-like): resize of 8-bit images and the conversions
// between frames (common/frame.hpp: 4:2:0 YUV, or packed 8-bit RGB, whose codes / 255 are the
// colour with no matrix or range) and the planar RGB tensors a model takes. The runtime times them
// on the MEDIA engine; these functions compute the pixels.
//
// Colour: YUV <-> RGB uses the exact Kr, Kb of the frame's matrix and its range (limited:
// Y 16..235, C 16..240, times 2^(depth-8); full: 0..2^depth-1, C centred on 2^(depth-1)), RGB
// normalised to [0, 1] as code / (2^depth - 1). Chroma siting is MPEG-2's 4:2:0 (FFmpeg's
// default AVCHROMA_LOC_LEFT): a chroma sample sits on the even luma column and halfway between
// its two luma rows. frame_to_tensor interpolates chroma bilinearly from those sites (what
// swscale does with SWS_FULL_CHR_H_INT and src_h_chr_pos = 0, src_v_chr_pos = 128);
// tensor_to_frame filters back with the weighted averages centred on the same sites that invert
// that interpolation exactly (LeGall 5/3 low-pass horizontally, [-1 3 3 -1]/4 vertically; both
// null the Nyquist frequency), so a frame -> tensor -> frame round trip returns the frame's
// codes instead of softening chroma on every pass.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/frame.hpp"
#include "common/status.hpp"
#include "device/types.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::device {

enum class ChannelOrder : uint8_t { RGB, BGR };

// A planar 1 x 3 x height x width tensor of colour. Element = (rgb - mean[c]) / std[c], rgb in
// [0, 1]; mean and std are indexed by tensor channel (so for BGR, [0] is blue).
struct TensorFormat {
    DType dtype = DType::F32;  // F32 or F16
    ChannelOrder order = ChannelOrder::RGB;
    float mean[3] = {0, 0, 0};
    float std[3] = {1, 1, 1};
    int64_t height = 0, width = 0;

    // Returns the bytes of the tensor (3 * height * width elements); call check() first.
    size_t bytes() const;
    // Returns an error naming the field unless dtype is F32/F16, the sizes are in
    // [1, kFrameSideMax], the means are finite and the stds finite and non-zero.
    Status check() const;
};

// Checks a frame -> tensor conversion: the frame layout and colour are valid, the frame buffer
// holds exactly layout.bytes() and the tensor buffer exactly tensor.bytes(). Any tensor size is
// allowed (it is a resize).
Status check_frame_to_tensor_args(const FrameLayout& frame, const ColorInfo& color, size_t frame_bytes,
                                  const TensorFormat& tensor, size_t tensor_bytes);
// Checks a tensor -> frame conversion as above; the tensor must be the frame's size.
Status check_tensor_to_frame_args(const TensorFormat& tensor, size_t tensor_bytes, const FrameLayout& frame,
                                  const ColorInfo& color, size_t frame_bytes);

// Converts a 4:2:0 frame to a planar RGB tensor, resizing bilinearly (half-pixel centres) when
// the tensor's size differs from the frame's. Arguments must have passed
// check_frame_to_tensor_args.
void frame_to_tensor(uint8_t* tensor, const TensorFormat& tf, const uint8_t* frame, const FrameLayout& layout,
                     const ColorInfo& color, ThreadPool& pool);
// Converts a planar RGB tensor to a 4:2:0 frame of the same size: elements denormalised and
// clamped to [0, 1] (NaN becomes 0), converted, chroma filtered down, rounded to nearest.
// Arguments must have passed check_tensor_to_frame_args.
void tensor_to_frame(uint8_t* frame, const FrameLayout& layout, const ColorInfo& color, const uint8_t* tensor,
                     const TensorFormat& tf, ThreadPool& pool);

// Checks sizes for a resize: both images positive and their buffers exactly w*h*channels.
Status check_resize_args(size_t dst_size, int64_t dst_w, int64_t dst_h, size_t src_size, int64_t src_w,
                         int64_t src_h, int64_t channels);

// Bilinear resize with half-pixel centres (OpenCV INTER_LINEAR / ONNX half_pixel), clamped at
// the borders, rounded to nearest.
void resize_bilinear_u8(uint8_t* dst, int64_t dst_w, int64_t dst_h, const uint8_t* src, int64_t src_w,
                        int64_t src_h, int64_t channels, ThreadPool& pool);

}  // namespace loom::device
