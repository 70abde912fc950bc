// The colour contract and memory layout of a video frame, shared by the media I/O
// (preprocess/), the media engine's kernels (device/media.*) and the pipeline (pipeline/).
//
// A frame is 4:2:0 YUV in one contiguous buffer with tight rows: the Y plane, then the chroma
// (U then V for the planar formats, interleaved UV for the semi-planar ones); or packed 8-bit
// RGB (RGB24: R, G, B bytes per pixel; BGR24: B, G, R), one plane, whose codes are R'G'B' in
// full range (the colour matrix and range do not apply to it). 10-bit formats
// store each sample in a little-endian uint16: YUV420P10 in the low 10 bits (FFmpeg's
// yuv420p10le), P010 in the high 10 bits (FFmpeg's p010le). Odd sizes are allowed: the chroma
// planes are ceil(width / 2) x ceil(height / 2), as in FFmpeg.
//
// Colour is carried, never guessed at the point of use: matrix, range, primaries, transfer and
// bit depth travel with every frame. Primaries and transfer are ITU-T H.273 code points (the
// values of FFmpeg's AVColorPrimaries / AVColorTransferCharacteristic); they do not change the
// conversion to RGB (Loom does no tone or gamut mapping) but are written to the output's tags.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "common/status.hpp"

namespace loom {

enum class ColorMatrix : uint8_t { BT601, BT709, BT2020_NCL };
enum class ColorRange : uint8_t { LIMITED, FULL };
enum class PixelFormat : uint8_t { YUV420P, NV12, YUV420P10, P010, RGB24, BGR24 };

inline constexpr int64_t kFrameSideMax = 1 << 14;  // 16384: larger frames are refused

struct ColorInfo {
    ColorMatrix matrix = ColorMatrix::BT709;
    ColorRange range = ColorRange::LIMITED;
    int primaries = 2;  // H.273: 1 BT.709, 5/6 BT.601, 9 BT.2020, 2 unspecified
    int transfer = 2;   // H.273: 1 BT.709, 6 BT.601, 14/15 BT.2020, 16 PQ, 18 HLG, 2 unspecified
    bool operator==(const ColorInfo&) const = default;
};

// Returns 8 or 10.
constexpr int bit_depth(PixelFormat f) { return f == PixelFormat::YUV420P10 || f == PixelFormat::P010 ? 10 : 8; }
// Returns the bytes of one sample: 1 or 2.
constexpr size_t sample_bytes(PixelFormat f) { return bit_depth(f) > 8 ? 2 : 1; }
// Returns true for NV12 and P010 (one interleaved UV plane).
constexpr bool semi_planar(PixelFormat f) { return f == PixelFormat::NV12 || f == PixelFormat::P010; }
// Returns true for RGB24 and BGR24 (one plane of 3-byte pixels).
constexpr bool packed_rgb(PixelFormat f) { return f == PixelFormat::RGB24 || f == PixelFormat::BGR24; }

std::string_view pixel_format_name(PixelFormat f);  // "yuv420p", "nv12", "yuv420p10le", "p010le", "rgb24", "bgr24"
std::string_view color_matrix_name(ColorMatrix m);  // "bt601", "bt709", "bt2020nc"
std::string_view color_range_name(ColorRange r);    // "limited", "full"
// Parse the names above; return false for anything else.
bool pixel_format_from_name(std::string_view name, PixelFormat& out);
// As pixel_format_from_name, for the 4:2:0 formats only (what a pipeline's frames are).
bool yuv_format_from_name(std::string_view name, PixelFormat& out);
bool color_matrix_from_name(std::string_view name, ColorMatrix& out);
bool color_range_from_name(std::string_view name, ColorRange& out);

// The layout of one frame in its buffer.
struct FrameLayout {
    PixelFormat format = PixelFormat::YUV420P;
    int64_t width = 0, height = 0;

    // Returns an error unless width and height are in [1, kFrameSideMax].
    Status check() const;
    int64_t chroma_width() const { return (width + 1) / 2; }
    int64_t chroma_height() const { return (height + 1) / 2; }
    // Bytes of the Y plane, of one chroma plane (planar: U or V; semi-planar: half the UV
    // plane), and of the whole frame (Y + 2 chroma). Packed RGB: its one plane, and no chroma.
    size_t luma_bytes() const {
        return static_cast<size_t>(width * height) * sample_bytes(format) * (packed_rgb(format) ? 3 : 1);
    }
    size_t chroma_bytes() const {
        if (packed_rgb(format)) return 0;
        return static_cast<size_t>(chroma_width() * chroma_height()) * sample_bytes(format);
    }
    size_t bytes() const { return luma_bytes() + 2 * chroma_bytes(); }
    // Byte offsets of the U (or UV) plane and of the V plane (planar only). Row strides are
    // width * sample_bytes for Y, chroma_width * sample_bytes for U and V, twice that for UV.
    size_t u_offset() const { return luma_bytes(); }
    size_t v_offset() const { return luma_bytes() + chroma_bytes(); }
    bool operator==(const FrameLayout&) const = default;
};

// A frame in memory that may belong to someone else (a decoder's picture, later a GStreamer
// buffer or a received message): the planes' addresses and row strides over a FrameLayout, and
// a handle that keeps the memory alive while the view is held. Consumers read it in place (the
// device's strided upload, the encoder's copy) instead of first copying it into a tight buffer.
struct FrameView {
    FrameLayout layout;
    std::array<const uint8_t*, 3> plane{};  // Y, U (semi-planar: UV), V (planar only)
    std::array<int64_t, 3> stride{};        // bytes from one row of the plane to the next
    std::shared_ptr<const void> owner;      // keeps the memory alive; may be empty
    bool pinned = false;                    // page-locked: the device copies it without staging

    // A view of a tight buffer (layout.bytes() bytes; common/frame.hpp's layout at the top).
    static FrameView tight(const FrameLayout& layout, const uint8_t* data, bool pinned = false,
                           std::shared_ptr<const void> owner = {});
    // 2 for the semi-planar formats, 3 for the planar ones, 1 for packed RGB.
    int planes() const { return packed_rgb(layout.format) ? 1 : semi_planar(layout.format) ? 2 : 3; }
    int64_t plane_rows(int p) const { return p == 0 ? layout.height : layout.chroma_height(); }
    // Bytes of one row of plane p without padding.
    size_t plane_row_bytes(int p) const {
        if (packed_rgb(layout.format)) return static_cast<size_t>(layout.width) * 3;
        const int64_t w = p == 0 ? layout.width : layout.chroma_width() * (semi_planar(layout.format) ? 2 : 1);
        return static_cast<size_t>(w) * sample_bytes(layout.format);
    }
    // Fails unless the layout is valid, every plane has an address and every stride is at least
    // its row's bytes (negative strides, i.e. bottom-up pictures, are not taken).
    Status check() const;
    // True when the planes lie one after the other with no padding (the tight layout).
    bool is_tight() const;
    // Copies the frame into `dst`, a tight buffer of layout.bytes() bytes.
    void copy_to(uint8_t* dst) const;
};

}  // namespace loom
