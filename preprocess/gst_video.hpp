// GStreamer's raw video as Loom frames: the formats both sides know, a frame view of a mapped
// GStreamer frame, and the colour contract read from and written to caps' colorimetry. Shared by
// the GStreamer back end of MediaReader / MediaWriter and by the loomrestore element, so that a
// caps field means one thing everywhere. Only built where GStreamer's development files are.
#pragma once

#include <string>

#include <gst/gst.h>
#include <gst/video/video.h>

#include "common/frame.hpp"
#include "common/status.hpp"

namespace loom::preprocess::gst {

// Initialises GStreamer once for the process (a no-op where the application already has);
// an error says why it could not be.
Status init();

// The formats Loom takes from GStreamer and gives to it, one table.
struct FormatPair {
    GstVideoFormat gst;
    PixelFormat loom;
};
inline constexpr FormatPair kFormats[] = {
    {GST_VIDEO_FORMAT_I420, PixelFormat::YUV420P},        {GST_VIDEO_FORMAT_NV12, PixelFormat::NV12},
    {GST_VIDEO_FORMAT_I420_10LE, PixelFormat::YUV420P10}, {GST_VIDEO_FORMAT_P010_10LE, PixelFormat::P010},
    {GST_VIDEO_FORMAT_RGB, PixelFormat::RGB24},           {GST_VIDEO_FORMAT_BGR, PixelFormat::BGR24},
};
// false for a format not in kFormats.
bool pixel_format_of(GstVideoFormat f, PixelFormat& out);
GstVideoFormat gst_format_of(PixelFormat f);
// The formats of kFormats as a caps field value (a list of strings); `yuv_only` leaves out the
// packed RGB ones (what a pipeline's frames are). The caller unsets it.
GValue format_list(bool yuv_only = false);

// A frame view of a mapped GStreamer frame of layout `l` (its planes and strides as they lie).
FrameView view_of(const GstVideoFrame& f, const FrameLayout& l);

// The colour contract of `info`; an error names `side` and what Loom cannot take. RGB codes are
// the colour itself (no matrix, full range). An unknown matrix is GStreamer's (and FFmpeg's)
// default for the size: BT.601 below 720 lines, BT.709 from 720.
Result<ColorInfo> color_of(const GstVideoInfo& info, const char* side);
// The colorimetry that says `color` for frames of `format`.
GstVideoColorimetry colorimetry_of(const ColorInfo& color, PixelFormat format);

// "element: message (debug detail)" of an error or warning message on a bus.
std::string message_text(GstMessage* m);

}  // namespace loom::preprocess::gst
