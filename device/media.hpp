// Functional side of the media engine (DVPP-like): colour conversion and resize of 8-bit
// frames. The runtime times them on the MEDIA engine; these functions compute the pixels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::device {

// Checks sizes for a resize: both images positive and their buffers exactly w*h*channels.
Status check_resize_args(size_t dst_size, int64_t dst_w, int64_t dst_h, size_t src_size, int64_t src_w,
                         int64_t src_h, int64_t channels);
// Checks sizes for NV12 -> RGB: even width and height, NV12 is w*h*3/2 bytes, RGB w*h*3.
Status check_nv12_args(size_t dst_size, size_t src_size, int64_t width, int64_t height);

// Bilinear resize with half-pixel centres (OpenCV INTER_LINEAR / ONNX half_pixel), clamped at
// the borders, rounded to nearest.
void resize_bilinear_u8(uint8_t* dst, int64_t dst_w, int64_t dst_h, const uint8_t* src, int64_t src_w,
                        int64_t src_h, int64_t channels, ThreadPool& pool);
// NV12 (Y plane, then interleaved UV at half resolution) BT.601 limited range to RGB888.
void nv12_to_rgb_u8(uint8_t* dst_rgb, const uint8_t* src_nv12, int64_t width, int64_t height, ThreadPool& pool);

}  // namespace loom::device
