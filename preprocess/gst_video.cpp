#include "preprocess/gst_video.hpp"

#include <mutex>

#include <fmt/format.h>

namespace loom::preprocess::gst {

Status init() {
    static std::once_flag once;
    static std::string failure;
    std::call_once(once, [] {
        GError* err = nullptr;
        if (!gst_init_check(nullptr, nullptr, &err)) {
            failure = err && err->message ? err->message : "gst_init_check failed";
            g_clear_error(&err);
        }
    });
    if (!failure.empty()) return make_error(StatusCode::FAILED_PRECONDITION, "GStreamer could not be initialised: {}", failure);
    return {};
}

bool pixel_format_of(GstVideoFormat f, PixelFormat& out) {
    for (const FormatPair& x : kFormats)
        if (x.gst == f) {
            out = x.loom;
            return true;
        }
    return false;
}

GstVideoFormat gst_format_of(PixelFormat f) {
    for (const FormatPair& x : kFormats)
        if (x.loom == f) return x.gst;
    return GST_VIDEO_FORMAT_UNKNOWN;
}

GValue format_list(bool yuv_only) {
    GValue formats = G_VALUE_INIT;
    g_value_init(&formats, GST_TYPE_LIST);
    for (const FormatPair& x : kFormats) {
        if (yuv_only && packed_rgb(x.loom)) continue;
        GValue v = G_VALUE_INIT;
        g_value_init(&v, G_TYPE_STRING);
        g_value_set_static_string(&v, gst_video_format_to_string(x.gst));
        gst_value_list_append_and_take_value(&formats, &v);
    }
    return formats;
}

FrameView view_of(const GstVideoFrame& f, const FrameLayout& l) {
    FrameView v;
    v.layout = l;
    for (int p = 0; p < v.planes(); ++p) {
        v.plane[static_cast<size_t>(p)] = static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&f, p));
        v.stride[static_cast<size_t>(p)] = GST_VIDEO_FRAME_PLANE_STRIDE(&f, p);
    }
    return v;
}

namespace {

// Loom's colour matrix for a GStreamer one; false for those it does not convert.
bool matrix_of(const GstVideoInfo& info, ColorMatrix& out) {
    switch (info.colorimetry.matrix) {
    case GST_VIDEO_COLOR_MATRIX_BT601: out = ColorMatrix::BT601; return true;
    case GST_VIDEO_COLOR_MATRIX_BT709: out = ColorMatrix::BT709; return true;
    case GST_VIDEO_COLOR_MATRIX_BT2020: out = ColorMatrix::BT2020_NCL; return true;
    case GST_VIDEO_COLOR_MATRIX_UNKNOWN: out = info.height >= 720 ? ColorMatrix::BT709 : ColorMatrix::BT601; return true;
    default: return false;
    }
}

}  // namespace

Result<ColorInfo> color_of(const GstVideoInfo& info, const char* side) {
    const GstVideoColorimetry& c = info.colorimetry;
    ColorInfo out;
    if (GST_VIDEO_INFO_IS_RGB(&info)) {
        out.range = ColorRange::FULL;
    } else {
        if (!matrix_of(info, out.matrix)) {
            gchar* s = gst_video_colorimetry_to_string(&c);
            const std::string text = s ? s : "?";
            g_free(s);
            return make_error(StatusCode::UNSUPPORTED,
                              "{} colorimetry {}: the colour matrix is not one Loom converts (bt601, bt709, bt2020)",
                              side, text);
        }
        out.range = c.range == GST_VIDEO_COLOR_RANGE_0_255 ? ColorRange::FULL : ColorRange::LIMITED;
    }
    out.primaries = static_cast<int>(gst_video_color_primaries_to_iso(c.primaries));
    out.transfer = static_cast<int>(gst_video_transfer_function_to_iso(c.transfer));
    if (out.primaries == 0) out.primaries = 2;  // unknown: H.273's "unspecified"
    if (out.transfer == 0) out.transfer = 2;
    return out;
}

GstVideoColorimetry colorimetry_of(const ColorInfo& color, PixelFormat format) {
    GstVideoColorimetry c{};
    if (packed_rgb(format)) {
        c.matrix = GST_VIDEO_COLOR_MATRIX_RGB;
        c.range = GST_VIDEO_COLOR_RANGE_0_255;
    } else {
        c.matrix = color.matrix == ColorMatrix::BT601   ? GST_VIDEO_COLOR_MATRIX_BT601
                   : color.matrix == ColorMatrix::BT709 ? GST_VIDEO_COLOR_MATRIX_BT709
                                                        : GST_VIDEO_COLOR_MATRIX_BT2020;
        c.range = color.range == ColorRange::FULL ? GST_VIDEO_COLOR_RANGE_0_255 : GST_VIDEO_COLOR_RANGE_16_235;
    }
    c.primaries = gst_video_color_primaries_from_iso(static_cast<guint>(color.primaries));
    c.transfer = gst_video_transfer_function_from_iso(static_cast<guint>(color.transfer));
    return c;
}

std::string message_text(GstMessage* m) {
    GError* err = nullptr;
    gchar* debug = nullptr;
    if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR)
        gst_message_parse_error(m, &err, &debug);
    else if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_WARNING)
        gst_message_parse_warning(m, &err, &debug);
    std::string text = fmt::format("{}: {}", GST_MESSAGE_SRC_NAME(m) ? GST_MESSAGE_SRC_NAME(m) : "?",
                                   err && err->message ? err->message : "(no message)");
    if (debug && *debug) text += fmt::format(" ({})", debug);
    g_clear_error(&err);
    g_free(debug);
    return text;
}

}  // namespace loom::preprocess::gst
