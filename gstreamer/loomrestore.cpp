#include "gstreamer/loomrestore.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <fmt/format.h>
#include <gst/video/video.h>

#include "common/file.hpp"
#include "common/frame.hpp"
#include "common/status.hpp"
#include "compiler/compile_cache.hpp"
#include "preprocess/gst_video.hpp"
#include "restore/context.hpp"
#include "restore/engine.hpp"

GST_DEBUG_CATEGORY_STATIC(loom_restore_debug);
#define GST_CAT_DEFAULT loom_restore_debug

namespace {

using loom::FrameView;
using loom::PixelFormat;
using loom::Status;
namespace restore = loom::restore;
namespace compiler = loom::compiler;

constexpr int kInFlightDefault = 3;
constexpr int kInFlightMax = 16;

// The properties, as set by the application (read when the element starts and when caps come).
struct Settings {
    std::string model, device = "edge", kb, trace, models_dir, cache_dir;
    compiler::Precision precision = compiler::Precision::FP32;
    int in_flight = kInFlightDefault;
    int tile = 0;
};

// One frame between its submit and its push: the output buffer, mapped while the engine writes
// into it (directly when its planes are tight, else from the engine's buffer at the push).
struct Pending {
    GstBuffer* out = nullptr;
    GstVideoFrame out_frame{};
    bool mapped = false, direct = false;
    bool done = false;
    Status status;
    FrameView view;  // the restored frame (the engine's buffer when not direct)
    uint64_t sequence = 0;
};

// An input buffer mapped for reading, kept alive (and mapped) while the engine holds its view.
struct InputMap {
    GstVideoFrame frame{};
    bool mapped = false;
    ~InputMap() {
        if (mapped) gst_video_frame_unmap(&frame);
    }
};

// Device contexts shared by every element of the process on the same device (one simulated NPU
// per device, its models loaded once): held by the elements, dropped with the last of them.
loom::Result<std::shared_ptr<restore::DeviceContext>> shared_context(const std::string& device, bool trace) {
    restore::ContextOptions o;
    o.device = device;
    o.trace = trace;
    if (trace) return restore::DeviceContext::create(o);  // a trace records this element's device alone
    static std::mutex mutex;
    static std::map<std::string, std::weak_ptr<restore::DeviceContext>> contexts;
    std::lock_guard lock(mutex);
    std::erase_if(contexts, [](const auto& kv) { return kv.second.expired(); });
    if (auto c = contexts[device].lock()) return c;
    LOOM_ASSIGN_OR_RETURN(std::shared_ptr<restore::DeviceContext> c, restore::DeviceContext::create(o));
    contexts[device] = c;
    return c;
}

// The formats, frame views and colorimetry shared with the GStreamer media back end: the caps
// templates, the caps the element offers and the mapping to Loom's frames come from one table.
using loom::preprocess::gst::color_of;
using loom::preprocess::gst::format_list;
using loom::preprocess::gst::pixel_format_of;
using loom::preprocess::gst::view_of;

}  // namespace

// The element's C++ state, behind the GObject instance.
struct LoomRestoreState {
    std::mutex settings_mutex;  // guards settings
    Settings settings;

    // Set at start(), dropped at stop(): the model resolved, its scale, the device.
    std::string model_path;
    // 0: not known (not started, or the model could not be read). Read by caps queries from any
    // thread.
    std::atomic<int64_t> scale{0};
    // A compiled model file's frame size (it takes no other); 0: any size.
    std::atomic<int64_t> fixed_width{0}, fixed_height{0};
    std::shared_ptr<restore::DeviceContext> context;
    Settings running;  // the settings the element started with

    // The engine for the negotiated caps; replaced only with no frame in flight. engine_mutex
    // guards the pointer against the property readers (the streaming thread owns its use).
    std::mutex engine_mutex;
    std::unique_ptr<restore::Engine> engine;
    restore::FrameFormat in_format{}, out_format{};
    GstVideoInfo in_info{}, out_info{};
    uint64_t frames_before = 0, h2d_before = 0, d2h_before = 0;  // earlier engines' totals
    uint64_t frames_traced = 0;                                  // frames in the last trace written

    // Frames in flight, in submission order.
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::unique_ptr<Pending>> pending;
    uint64_t sequence = 0;
};

struct _GstLoomRestore {
    GstVideoFilter parent;
    LoomRestoreState* state;
};

G_DEFINE_TYPE(GstLoomRestore, gst_loom_restore, GST_TYPE_VIDEO_FILTER)

namespace {

enum {
    PROP_0,
    PROP_MODEL,
    PROP_DEVICE,
    PROP_PRECISION,
    PROP_IN_FLIGHT,
    PROP_TILE,
    PROP_KB,
    PROP_TRACE,
    PROP_MODELS_DIR,
    PROP_CACHE_DIR,
    PROP_FRAMES,
    PROP_SIM_FPS,
    PROP_H2D_BYTES,
    PROP_D2H_BYTES,
};

GType precision_get_type() {
    static GType type = 0;
    static const GEnumValue values[] = {
        {static_cast<gint>(compiler::Precision::FP32), "32-bit float", "fp32"},
        {static_cast<gint>(compiler::Precision::FP16), "16-bit float (half the weights' device memory)", "fp16"},
        {0, nullptr, nullptr},
    };
    if (g_once_init_enter(&type)) g_once_init_leave(&type, g_enum_register_static("GstLoomRestorePrecision", values));
    return type;
}

LoomRestoreState& state_of(GstLoomRestore* self) { return *self->state; }
LoomRestoreState& state_of(GstBaseTransform* trans) { return state_of(reinterpret_cast<GstLoomRestore*>(trans)); }
GstBaseTransformClass* parent_transform() { return GST_BASE_TRANSFORM_CLASS(gst_loom_restore_parent_class); }

Settings settings_of(LoomRestoreState& s) {
    std::lock_guard lock(s.settings_mutex);
    return s.settings;
}

restore::EngineOptions engine_options(const Settings& set) {
    restore::EngineOptions o;
    o.model.model = set.model;
    o.model.where = "loomrestore";
    o.model.base_dir = std::filesystem::current_path().string();
    o.model.models_dir = set.models_dir.empty() ? loom::default_models_dir() : set.models_dir;
    o.model.cache_dir = set.cache_dir.empty() ? compiler::default_cache_dir() : set.cache_dir;
    o.model.kb = set.kb;
    o.model.where_kb = "loomrestore: kb";
    o.model.precision = set.precision;
    o.in_flight = set.in_flight;
    o.tile = set.tile;
    o.output_buffers = static_cast<size_t>(set.in_flight) + 1;
    return o;
}

// --- frames in flight ---------------------------------------------------------------------

// Releases a frame's output buffer (unmapped) without pushing it.
void drop(Pending& p) {
    if (p.mapped) gst_video_frame_unmap(&p.out_frame);
    p.mapped = false;
    p.view = {};
    if (p.out) gst_buffer_unref(p.out);
    p.out = nullptr;
}

// The finished frame's buffer, ready to push (the engine's output copied in when it did not
// write the buffer itself); null with an element error when the frame failed.
GstBuffer* finish(GstLoomRestore* self, Pending& p) {
    if (!p.status.ok()) {
        GST_ELEMENT_ERROR(self, STREAM, FAILED,
                          ("loomrestore: frame %" G_GUINT64_FORMAT " could not be restored", p.sequence),
                          ("%s", p.status.to_string().c_str()));
        drop(p);
        return nullptr;
    }
    if (!p.direct) {
        const FrameView& v = p.view;
        for (int i = 0; i < v.planes(); ++i) {
            auto* dst = static_cast<uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&p.out_frame, i));
            const int64_t stride = GST_VIDEO_FRAME_PLANE_STRIDE(&p.out_frame, i);
            const size_t row = v.plane_row_bytes(i);
            for (int64_t r = 0; r < v.plane_rows(i); ++r)
                std::memcpy(dst + r * stride, v.plane[i] + r * v.stride[i], row);
        }
    }
    p.view = {};
    gst_video_frame_unmap(&p.out_frame);
    p.mapped = false;
    GstBuffer* out = p.out;
    p.out = nullptr;
    return out;
}

// Waits for every frame in flight and pushes them in order. Returns the first push's failure
// (the frames after it are dropped).
GstFlowReturn drain(GstLoomRestore* self) {
    LoomRestoreState& s = state_of(self);
    if (s.engine) s.engine->flush();
    GstFlowReturn ret = GST_FLOW_OK;
    for (;;) {
        std::unique_ptr<Pending> p;
        {
            std::lock_guard lock(s.mutex);
            if (s.pending.empty()) break;
            p = std::move(s.pending.front());
            s.pending.pop_front();
        }
        if (ret != GST_FLOW_OK) {
            drop(*p);
            continue;
        }
        GstBuffer* out = finish(self, *p);
        ret = out ? gst_pad_push(GST_BASE_TRANSFORM_SRC_PAD(self), out) : GST_FLOW_ERROR;
    }
    return ret;
}

// Waits for the frames in flight and drops them (a flush, a stop).
void discard(LoomRestoreState& s) {
    if (s.engine) s.engine->flush();
    std::lock_guard lock(s.mutex);
    for (auto& p : s.pending) drop(*p);
    s.pending.clear();
}

// Replaces the engine (none: null), keeping the totals of the one it replaces.
void set_engine(LoomRestoreState& s, std::unique_ptr<restore::Engine> engine) {
    std::unique_ptr<restore::Engine> old;
    {
        std::lock_guard lock(s.engine_mutex);
        if (s.engine) {
            const restore::EngineStats st = s.engine->stats();
            s.frames_before += st.frames_completed;
            s.h2d_before += st.h2d_bytes;
            s.d2h_before += st.d2h_bytes;
        }
        old = std::move(s.engine);
        s.engine = std::move(engine);
    }
    old.reset();  // waits for its completions, frees its device memory
}

// Writes the device's trace when the trace property names a file and frames ran since the last.
void write_trace(GstLoomRestore* self) {
    LoomRestoreState& s = state_of(self);
    if (s.running.trace.empty() || !s.context) return;
    uint64_t frames = s.frames_before;
    {
        std::lock_guard lock(s.engine_mutex);
        if (s.engine) frames += s.engine->stats().frames_completed;
    }
    if (frames == s.frames_traced) return;
    s.frames_traced = frames;
    if (Status st = s.context->device().write_trace(s.running.trace); !st.ok())
        GST_ELEMENT_WARNING(self, RESOURCE, WRITE,
                            ("loomrestore: trace %s could not be written", s.running.trace.c_str()),
                            ("%s", st.to_string().c_str()));
    else GST_INFO_OBJECT(self, "trace of %" G_GUINT64_FORMAT " frames written to %s", frames, s.running.trace.c_str());
}

// --- caps --------------------------------------------------------------------------------

constexpr int kSideMax = static_cast<int>(loom::kFrameSideMax);

// Maps one size field through the scale (to the source side: x scale; to the sink side: / scale
// where it divides). False when no value is left.
bool scale_field(GstStructure* st, const char* field, int64_t scale, GstPadDirection direction) {
    const GValue* v = gst_structure_get_value(st, field);
    if (!v) return true;
    auto map_int = [&](int n, int& out) {
        if (direction == GST_PAD_SINK) {
            if (static_cast<int64_t>(n) * scale > kSideMax) return false;
            out = static_cast<int>(n * scale);
        } else {
            if (n % scale != 0) return false;
            out = static_cast<int>(n / scale);
        }
        return true;
    };
    if (G_VALUE_HOLDS_INT(v)) {
        int n = 0;
        if (!map_int(g_value_get_int(v), n)) return false;
        gst_structure_set(st, field, G_TYPE_INT, n, nullptr);
        return true;
    }
    if (GST_VALUE_HOLDS_INT_RANGE(v)) {
        const int64_t a = gst_value_get_int_range_min(v), b = gst_value_get_int_range_max(v);
        int64_t lo = 0, hi = 0;
        if (direction == GST_PAD_SINK) {
            lo = a * scale;
            hi = std::min<int64_t>(b * scale, kSideMax);
        } else {
            lo = (a + scale - 1) / scale;
            hi = b / scale;
        }
        if (lo > hi) return false;
        if (lo == hi) gst_structure_set(st, field, G_TYPE_INT, static_cast<int>(lo), nullptr);
        else gst_structure_set(st, field, GST_TYPE_INT_RANGE, static_cast<int>(lo), static_cast<int>(hi), nullptr);
        return true;
    }
    if (GST_VALUE_HOLDS_LIST(v)) {
        GValue list = G_VALUE_INIT;
        g_value_init(&list, GST_TYPE_LIST);
        for (guint i = 0; i < gst_value_list_get_size(v); ++i) {
            const GValue* e = gst_value_list_get_value(v, i);
            int n = 0;
            if (!G_VALUE_HOLDS_INT(e) || !map_int(g_value_get_int(e), n)) continue;
            GValue x = G_VALUE_INIT;
            g_value_init(&x, G_TYPE_INT);
            g_value_set_int(&x, n);
            gst_value_list_append_and_take_value(&list, &x);
        }
        const bool any = gst_value_list_get_size(&list) > 0;
        if (any) gst_structure_take_value(st, field, &list);
        else g_value_unset(&list);
        return any;
    }
    return false;  // a size Loom does not understand
}

// Narrows `field` of `st` to `n` (a compiled model's frame side); false when it cannot hold n.
bool pin_field(GstStructure* st, const char* field, int64_t n) {
    const GValue* v = gst_structure_get_value(st, field);
    GValue want = G_VALUE_INIT;
    g_value_init(&want, G_TYPE_INT);
    g_value_set_int(&want, static_cast<int>(n));
    GValue both = G_VALUE_INIT;
    const bool ok = !v || gst_value_intersect(&both, v, &want);
    g_value_unset(&want);
    if (ok && v) gst_structure_take_value(st, field, &both);
    else if (ok) gst_structure_set(st, field, G_TYPE_INT, static_cast<int>(n), nullptr);
    return ok;
}

GstCaps* transform_caps(GstBaseTransform* trans, GstPadDirection direction, GstCaps* caps, GstCaps* filter) {
    LoomRestoreState& s = state_of(trans);
    const int64_t scale = s.scale;
    const int64_t fixed_w = s.fixed_width, fixed_h = s.fixed_height;
    GstCaps* ret = gst_caps_new_empty();
    for (guint i = 0; i < gst_caps_get_size(caps); ++i) {
        GstStructure* st = gst_structure_copy(gst_caps_get_structure(caps, i));
        GstCapsFeatures* features = gst_caps_features_copy(gst_caps_get_features(caps, i));
        bool keep = true;
        // A compiled model takes its own frame size only: the sink side is narrowed to it (the
        // given caps before scaling when they are the sink's, the result after when they are
        // the source's).
        if (fixed_w > 0 && direction == GST_PAD_SINK)
            keep = pin_field(st, "width", fixed_w) && pin_field(st, "height", fixed_h);
        if (keep && scale > 0) {
            keep = scale_field(st, "width", scale, direction) && scale_field(st, "height", scale, direction);
            if (keep && fixed_w > 0 && direction == GST_PAD_SRC)
                keep = pin_field(st, "width", fixed_w) && pin_field(st, "height", fixed_h);
        } else if (keep) {
            gst_structure_set(st, "width", GST_TYPE_INT_RANGE, 1, kSideMax, "height", GST_TYPE_INT_RANGE, 1, kSideMax,
                              nullptr);
        }
        // Any of the formats on the other side (the engine converts), and any colour matrix or
        // range (it writes the one asked for); fixate_caps prefers the input's.
        GValue formats = format_list();
        gst_structure_take_value(st, "format", &formats);
        gst_structure_remove_field(st, "colorimetry");
        if (keep) gst_caps_append_structure_full(ret, st, features);
        else {
            gst_structure_free(st);
            gst_caps_features_free(features);
        }
    }
    if (filter) {
        GstCaps* f = gst_caps_intersect_full(filter, ret, GST_CAPS_INTERSECT_FIRST);
        gst_caps_unref(ret);
        ret = f;
    }
    if (gst_caps_is_empty(ret)) {
        // No size on the other side matches (upstream's offer meets nothing downstream takes, or
        // the output would pass the largest frame): the other side offers its template anyway,
        // so that the caps event reaches check_caps_event, which names the reason (a plain "not
        // negotiated" from the source would not).
        gst_caps_unref(ret);
        GstCaps* any = gst_pad_get_pad_template_caps(direction == GST_PAD_SRC ? GST_BASE_TRANSFORM_SINK_PAD(trans)
                                                                              : GST_BASE_TRANSFORM_SRC_PAD(trans));
        ret = filter ? gst_caps_intersect_full(filter, any, GST_CAPS_INTERSECT_FIRST) : gst_caps_ref(any);
        gst_caps_unref(any);
    }
    GST_DEBUG_OBJECT(trans, "transformed %" GST_PTR_FORMAT " to %" GST_PTR_FORMAT, caps, ret);
    return ret;
}

// The source caps for fixed sink caps: the size x scale, the input's format where downstream
// takes it, and the input's colorimetry where downstream leaves it open (between RGB and YUV: the
// input's primaries and transfer, with RGB's matrix and range, or YUV's default matrix for the
// size and limited range).
GstCaps* fixate_caps(GstBaseTransform* trans, GstPadDirection direction, GstCaps* caps, GstCaps* othercaps) {
    GstVideoInfo in;
    if (direction != GST_PAD_SINK || !gst_caps_is_fixed(caps) || !gst_video_info_from_caps(&in, caps))
        return gst_caps_fixate(othercaps);
    GstCaps* preferred = gst_caps_copy(caps);
    GstStructure* st = gst_caps_get_structure(preferred, 0);
    const int64_t scale = std::max<int64_t>(state_of(trans).scale, 1);
    gst_structure_set(st, "width", G_TYPE_INT, static_cast<int>(in.width * scale), "height", G_TYPE_INT,
                      static_cast<int>(in.height * scale), nullptr);
    gst_structure_remove_field(st, "colorimetry");
    GstCaps* result = nullptr;
    for (int pass = 0; pass < 2 && !result; ++pass) {
        if (pass == 1) gst_structure_remove_field(st, "format");
        GstCaps* both = gst_caps_intersect(preferred, othercaps);
        if (!gst_caps_is_empty(both)) result = gst_caps_fixate(gst_caps_ref(both));
        gst_caps_unref(both);
    }
    gst_caps_unref(preferred);
    if (result) {
        gst_caps_unref(othercaps);
    } else {
        result = gst_caps_fixate(othercaps);
    }
    if (gst_caps_is_empty(result)) return result;
    result = gst_caps_make_writable(result);
    GstStructure* out = gst_caps_get_structure(result, 0);
    const gchar* format = gst_structure_get_string(out, "format");
    int height = 0;
    if (!format || gst_structure_has_field(out, "colorimetry") || !gst_structure_get_int(out, "height", &height))
        return result;
    const GstVideoFormatInfo* finfo = gst_video_format_get_info(gst_video_format_from_string(format));
    GstVideoColorimetry c = in.colorimetry;
    if (finfo && GST_VIDEO_FORMAT_INFO_IS_RGB(finfo) && !GST_VIDEO_INFO_IS_RGB(&in)) {
        c.matrix = GST_VIDEO_COLOR_MATRIX_RGB;
        c.range = GST_VIDEO_COLOR_RANGE_0_255;
    } else if (finfo && !GST_VIDEO_FORMAT_INFO_IS_RGB(finfo) && GST_VIDEO_INFO_IS_RGB(&in)) {
        c.matrix = height >= 720 ? GST_VIDEO_COLOR_MATRIX_BT709 : GST_VIDEO_COLOR_MATRIX_BT601;
        c.range = GST_VIDEO_COLOR_RANGE_16_235;
    }
    if (gchar* text = gst_video_colorimetry_to_string(&c)) {
        gst_structure_set(out, "colorimetry", G_TYPE_STRING, text, nullptr);
        g_free(text);
    }
    return result;
}

// Refuses caps the negotiation cannot satisfy with a message naming why: a compiled model's
// other frame size, the model's output size past Loom's largest frame, or downstream taking no
// size the model gives.
bool check_caps_event(GstLoomRestore* self, GstCaps* caps) {
    LoomRestoreState& s = state_of(self);
    GstVideoInfo in;
    const int64_t scale = s.scale;
    if (scale <= 0 || !gst_video_info_from_caps(&in, caps)) return true;  // the base class says why
    if (s.fixed_width > 0 && (in.width != s.fixed_width || in.height != s.fixed_height)) {
        GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                          ("loomrestore: model %s is compiled for %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                           " frames; the stream is %dx%d (compile it for that size, or name the model itself)",
                           s.model_path.c_str(), s.fixed_width.load(), s.fixed_height.load(), in.width, in.height),
                          (nullptr));
        return false;
    }
    const int64_t w = in.width * scale, h = in.height * scale;
    if (w > loom::kFrameSideMax || h > loom::kFrameSideMax) {
        GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                          ("loomrestore: model %s makes %dx%d frames %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                           ", over the largest frame Loom takes (%" G_GINT64_FORMAT " a side)",
                           s.model_path.c_str(), in.width, in.height, w, h, loom::kFrameSideMax),
                          (nullptr));
        return false;
    }
    GstCaps* ours = transform_caps(GST_BASE_TRANSFORM(self), GST_PAD_SINK, caps, nullptr);
    GstCaps* peer = gst_pad_peer_query_caps(GST_BASE_TRANSFORM_SRC_PAD(self), ours);
    const bool empty = gst_caps_is_empty(peer);
    if (empty) {
        GstCaps* downstream = gst_pad_peer_query_caps(GST_BASE_TRANSFORM_SRC_PAD(self), nullptr);
        gchar* d = gst_caps_to_string(downstream);
        GST_ELEMENT_ERROR(
            self, CORE, NEGOTIATION,
            ("loomrestore: model %s restores %dx%d %s into %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
             " (x%" G_GINT64_FORMAT "); downstream takes none of that",
             s.model_path.c_str(), in.width, in.height, gst_video_format_to_string(in.finfo->format), w, h, scale),
            ("downstream caps: %s", d ? d : "?"));
        g_free(d);
        gst_caps_unref(downstream);
    }
    gst_caps_unref(peer);
    gst_caps_unref(ours);
    return !empty;
}

gboolean set_caps(GstBaseTransform* trans, GstCaps* incaps, GstCaps* outcaps) {
    if (!parent_transform()->set_caps(trans, incaps, outcaps)) return FALSE;
    // The base classes take a filter without transform_frame for an in-place one: this element
    // writes other buffers.
    gst_base_transform_set_in_place(trans, FALSE);
    return TRUE;
}

gboolean set_info(GstVideoFilter* filter, GstCaps*, GstVideoInfo* in_info, GstCaps*, GstVideoInfo* out_info) {
    auto* self = reinterpret_cast<GstLoomRestore*>(filter);
    LoomRestoreState& s = state_of(self);
    try {
        restore::FrameFormat in{}, out{};
        if (!pixel_format_of(GST_VIDEO_INFO_FORMAT(in_info), in.layout.format) ||
            !pixel_format_of(GST_VIDEO_INFO_FORMAT(out_info), out.layout.format)) {
            GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                              ("loomrestore: format %s to %s is not one Loom restores",
                               gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(in_info)),
                               gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(out_info))),
                              (nullptr));
            return FALSE;
        }
        in.layout.width = in_info->width;
        in.layout.height = in_info->height;
        out.layout.width = out_info->width;
        out.layout.height = out_info->height;
        auto in_color = color_of(*in_info, "input");
        auto out_color = in_color.ok() ? color_of(*out_info, "output") : in_color;
        if (!out_color.ok()) {
            GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("loomrestore: %s", out_color.status().message().c_str()),
                              (nullptr));
            return FALSE;
        }
        in.color = *in_color;
        out.color = *out_color;
        if (out.color.primaries != in.color.primaries || out.color.transfer != in.color.transfer) {
            GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                              ("loomrestore: downstream asks for colour primaries %d and transfer %d, the input has %d "
                               "and %d (H.273); Loom does no gamut or tone mapping",
                               out.color.primaries, out.color.transfer, in.color.primaries, in.color.transfer),
                              (nullptr));
            return FALSE;
        }
        if (s.engine && s.in_format.layout == in.layout && s.in_format.color == in.color &&
            s.out_format.layout == out.layout && s.out_format.color == out.color)
            return TRUE;
        if (!s.context) {
            GST_ELEMENT_ERROR(self, CORE, STATE_CHANGE, ("loomrestore: caps before the element started"), (nullptr));
            return FALSE;
        }
        set_engine(s, nullptr);  // the old one's device memory is free before the new one takes its own
        restore::EngineOptions o = engine_options(s.running);
        o.output_format = out.layout.format;
        o.output_matrix = out.color.matrix;
        o.output_range = out.color.range;
        auto engine = restore::Engine::create(s.context, o, in);
        if (!engine.ok()) {
            GST_ELEMENT_ERROR(
                self, CORE, NEGOTIATION,
                ("loomrestore: model %s cannot restore %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " %s frames",
                 s.model_path.c_str(), in.layout.width, in.layout.height,
                 gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(in_info))),
                ("%s", engine.status().to_string().c_str()));
            return FALSE;
        }
        const restore::FrameFormat& made = (*engine)->output_format();
        if (made.layout != out.layout) {
            GST_ELEMENT_ERROR(self, CORE, NEGOTIATION,
                              ("loomrestore: model %s makes %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
                               " from %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "; the output caps say %dx%d",
                               s.model_path.c_str(), made.layout.width, made.layout.height, in.layout.width,
                               in.layout.height, out_info->width, out_info->height),
                              (nullptr));
            return FALSE;
        }
        GST_INFO_OBJECT(self, "engine: %s", (*engine)->describe().dump().c_str());
        {
            std::lock_guard lock(s.engine_mutex);  // the latency query reads in_info
            s.in_format = in;
            s.out_format = made;
            s.in_info = *in_info;
            s.out_info = *out_info;
        }
        set_engine(s, std::move(*engine));
        return TRUE;
    } catch (const std::exception& e) {
        GST_ELEMENT_ERROR(self, CORE, FAILED, ("loomrestore: %s", e.what()), (nullptr));
        return FALSE;
    }
}

// --- allocation ----------------------------------------------------------------------------

// Upstream's pool holds the frames in flight besides its own.
gboolean propose_allocation(GstBaseTransform* trans, GstQuery* decide_query, GstQuery* query) {
    if (!parent_transform()->propose_allocation(trans, decide_query, query)) return FALSE;
    if (decide_query && gst_query_get_n_allocation_pools(query) > 0) {
        GstBufferPool* pool = nullptr;
        guint size = 0, min = 0, max = 0;
        gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
        const guint held = static_cast<guint>(settings_of(state_of(trans)).in_flight) + 1;
        gst_query_set_nth_allocation_pool(query, 0, pool, size, std::max(min, held), max ? std::max(max, held) : 0);
        if (pool) gst_object_unref(pool);
    }
    return TRUE;
}

// The output pool (downstream's, or a video pool) holds the frames in flight besides
// downstream's own: steady state allocates nothing.
gboolean decide_allocation(GstBaseTransform* trans, GstQuery* query) {
    if (!parent_transform()->decide_allocation(trans, query)) return FALSE;
    if (gst_query_get_n_allocation_pools(query) == 0) return TRUE;
    GstBufferPool* pool = nullptr;
    guint size = 0, min = 0, max = 0;
    gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
    if (!pool) return TRUE;
    const guint extra = static_cast<guint>(state_of(trans).running.in_flight) + 1;
    const guint min2 = min + extra, max2 = max ? std::max(max, min2) : 0;
    GstStructure* config = gst_buffer_pool_get_config(pool);
    GstCaps* caps = nullptr;
    gst_buffer_pool_config_get_params(config, &caps, nullptr, nullptr, nullptr);
    gst_buffer_pool_config_set_params(config, caps, size, min2, max2);
    if (!gst_buffer_pool_set_config(pool, config)) {
        // The pool may refuse and offer its nearest: take it if it still holds what is needed.
        config = gst_buffer_pool_get_config(pool);
        if (!gst_buffer_pool_config_validate_params(config, caps, size, min2, max2)) {
            gst_structure_free(config);
            GST_WARNING_OBJECT(trans, "the output pool does not take %u more buffers", extra);
        } else if (!gst_buffer_pool_set_config(pool, config)) {
            GST_WARNING_OBJECT(trans, "the output pool refused its configuration");
        }
    }
    gst_query_set_nth_allocation_pool(query, 0, pool, size, min2, max2);
    gst_object_unref(pool);
    return TRUE;
}

// --- frames ---------------------------------------------------------------------------------

GstFlowReturn submit_input_buffer(GstBaseTransform* trans, gboolean is_discont, GstBuffer* input) {
    auto* self = reinterpret_cast<GstLoomRestore*>(trans);
    LoomRestoreState& s = state_of(self);
    // The base class drops frames QoS says are late, and keeps the others for us.
    GstFlowReturn ret = parent_transform()->submit_input_buffer(trans, is_discont, input);
    if (ret != GST_FLOW_OK) return ret;
    GstBuffer* in = trans->queued_buf;
    trans->queued_buf = nullptr;
    if (!in) return GST_FLOW_OK;
    if (!s.engine) {
        gst_buffer_unref(in);
        GST_ELEMENT_ERROR(self, CORE, NEGOTIATION, ("loomrestore: a frame before the caps"), (nullptr));
        return GST_FLOW_NOT_NEGOTIATED;
    }
    try {
        auto map = std::make_shared<InputMap>();
        map->mapped = gst_video_frame_map(&map->frame, &s.in_info, in, GST_MAP_READ);
        if (!map->mapped) {
            gst_buffer_unref(in);
            GST_ELEMENT_ERROR(self, STREAM, FAILED, ("loomrestore: an input buffer could not be mapped"), (nullptr));
            return GST_FLOW_ERROR;
        }
        FrameView view = view_of(map->frame, s.in_format.layout);
        view.owner = map;  // the mapping holds its own reference to the buffer

        auto p = std::make_unique<Pending>();
        ret = parent_transform()->prepare_output_buffer(trans, in, &p->out);
        gst_buffer_unref(in);
        if (ret != GST_FLOW_OK || !p->out) return ret == GST_FLOW_OK ? GST_FLOW_ERROR : ret;
        if (!gst_video_frame_map(&p->out_frame, &s.out_info, p->out, GST_MAP_WRITE)) {
            drop(*p);
            GST_ELEMENT_ERROR(self, STREAM, FAILED, ("loomrestore: an output buffer could not be mapped"), (nullptr));
            return GST_FLOW_ERROR;
        }
        p->mapped = true;
        p->direct = view_of(p->out_frame, s.out_format.layout).is_tight();
        uint8_t* dst = p->direct ? static_cast<uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&p->out_frame, 0)) : nullptr;
        Pending* raw = p.get();
        {
            std::lock_guard lock(s.mutex);
            p->sequence = s.sequence++;
            s.pending.push_back(std::move(p));
        }
        Status st = s.engine->submit(
            view,
            [&s, raw](restore::RestoredFrame f) {
                std::lock_guard lock(s.mutex);
                raw->status = std::move(f.status);
                raw->view = std::move(f.view);
                raw->done = true;
                s.cv.notify_all();
            },
            dst, raw->sequence);
        if (!st.ok()) {
            {
                std::lock_guard lock(s.mutex);
                drop(*s.pending.back());
                s.pending.pop_back();
            }
            GST_ELEMENT_ERROR(self, STREAM, FAILED, ("loomrestore: a frame could not be submitted"),
                              ("%s", st.to_string().c_str()));
            return GST_FLOW_ERROR;
        }
        // Bounded: a frame is pushed by the time in_flight more have been submitted.
        std::unique_lock lock(s.mutex);
        const size_t bound = static_cast<size_t>(s.running.in_flight);
        s.cv.wait(lock, [&] { return s.pending.size() <= bound || s.pending.front()->done; });
        return GST_FLOW_OK;
    } catch (const std::exception& e) {
        GST_ELEMENT_ERROR(self, CORE, FAILED, ("loomrestore: %s", e.what()), (nullptr));
        return GST_FLOW_ERROR;
    }
}

// Hands out the oldest frame once it is restored (the base class pushes it and asks again).
GstFlowReturn generate_output(GstBaseTransform* trans, GstBuffer** outbuf) {
    auto* self = reinterpret_cast<GstLoomRestore*>(trans);
    LoomRestoreState& s = state_of(self);
    *outbuf = nullptr;
    std::unique_ptr<Pending> p;
    {
        std::lock_guard lock(s.mutex);
        if (s.pending.empty() || !s.pending.front()->done) return GST_FLOW_OK;
        p = std::move(s.pending.front());
        s.pending.pop_front();
    }
    *outbuf = finish(self, *p);
    return *outbuf ? GST_FLOW_OK : GST_FLOW_ERROR;
}

gboolean sink_event(GstBaseTransform* trans, GstEvent* event) {
    auto* self = reinterpret_cast<GstLoomRestore*>(trans);
    LoomRestoreState& s = state_of(self);
    switch (GST_EVENT_TYPE(event)) {
    case GST_EVENT_FLUSH_STOP: discard(s); break;
    case GST_EVENT_CAPS: {
        if (drain(self) != GST_FLOW_OK) GST_DEBUG_OBJECT(self, "frames dropped before new caps");
        GstCaps* caps = nullptr;
        gst_event_parse_caps(event, &caps);
        if (!check_caps_event(self, caps)) {
            gst_event_unref(event);
            return FALSE;
        }
        break;
    }
    default:
        // Every other event in the data flow follows the frames before it.
        if ((static_cast<unsigned>(GST_EVENT_TYPE(event)) & GST_EVENT_TYPE_SERIALIZED) != 0) {
            const GstFlowReturn ret = drain(self);
            if (ret != GST_FLOW_OK && ret != GST_FLOW_FLUSHING && ret != GST_FLOW_EOS)
                GST_DEBUG_OBJECT(self, "drain before %s: %s", GST_EVENT_TYPE_NAME(event), gst_flow_get_name(ret));
        }
        if (GST_EVENT_TYPE(event) == GST_EVENT_EOS) write_trace(self);
        break;
    }
    return parent_transform()->sink_event(trans, event);
}

gboolean query(GstBaseTransform* trans, GstPadDirection direction, GstQuery* q) {
    if (!parent_transform()->query(trans, direction, q)) return FALSE;
    if (direction == GST_PAD_SRC && GST_QUERY_TYPE(q) == GST_QUERY_LATENCY) {
        LoomRestoreState& s = state_of(trans);
        gboolean live = FALSE;
        GstClockTime min = 0, max = 0;
        gst_query_parse_latency(q, &live, &min, &max);
        GstClockTime ours = 0;
        {
            std::lock_guard lock(s.engine_mutex);
            const GstVideoInfo& info = s.in_info;
            if (s.engine && info.fps_n > 0 && info.fps_d > 0)
                ours = gst_util_uint64_scale_int(static_cast<guint64>(s.running.in_flight) * GST_SECOND, info.fps_d,
                                                 info.fps_n);
        }
        GST_DEBUG_OBJECT(trans, "latency: %" GST_TIME_FORMAT " for %d frames in flight", GST_TIME_ARGS(ours),
                         s.running.in_flight);
        gst_query_set_latency(q, live, min + ours, GST_CLOCK_TIME_IS_VALID(max) ? max + ours : max);
    }
    return TRUE;
}

// --- state ---------------------------------------------------------------------------------

// Resolves and reads the model, and opens the device: a missing or unreadable model, a bad
// device or property fails the state change, naming it.
gboolean start(GstBaseTransform* trans) {
    auto* self = reinterpret_cast<GstLoomRestore*>(trans);
    LoomRestoreState& s = state_of(self);
    try {
        s.running = settings_of(s);
        if (s.running.model.empty()) {
            GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND,
                              ("loomrestore: no model: set model to a name in the models folder, an .onnx or "
                               "ncnn .param file, or a compiled .loom file"),
                              (nullptr));
            return FALSE;
        }
        restore::EngineOptions o = engine_options(s.running);
        // The model read once at a small size (a compiled file: at its own): its scale for the
        // caps, and any fault in the file.
        restore::FrameFormat probe{{PixelFormat::YUV420P, 64, 64}, {}};
        auto fixed = restore::compiled_frame_size(o.model);
        if (fixed.ok() && *fixed) probe.layout = {PixelFormat::YUV420P, (**fixed)[0], (**fixed)[1]};
        auto floor = fixed.ok() ? restore::Engine::memory_floor(o, probe) : loom::Result<restore::MemoryFloor>(fixed.status());
        if (!floor.ok()) {
            if (floor.status().code() == loom::StatusCode::NOT_FOUND)
                GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND,
                                  ("loomrestore: model %s not found", s.running.model.c_str()),
                                  ("%s", floor.status().to_string().c_str()));
            else
                GST_ELEMENT_ERROR(
                    self, RESOURCE, READ,
                    ("loomrestore: model %s cannot be read as a restoration model", s.running.model.c_str()),
                    ("%s", floor.status().to_string().c_str()));
            return FALSE;
        }
        if (!s.running.kb.empty() && !std::filesystem::exists(s.running.kb)) {
            GST_ELEMENT_ERROR(self, RESOURCE, NOT_FOUND,
                              ("loomrestore: kb: knowledge base %s not found", s.running.kb.c_str()), (nullptr));
            return FALSE;
        }
        auto context = shared_context(s.running.device, !s.running.trace.empty());
        if (!context.ok()) {
            GST_ELEMENT_ERROR(self, RESOURCE, SETTINGS, ("loomrestore: device %s", s.running.device.c_str()),
                              ("%s", context.status().to_string().c_str()));
            return FALSE;
        }
        s.context = *context;
        s.model_path = floor->model_path;
        s.scale = floor->output.layout.width / probe.layout.width;
        s.fixed_width = *fixed ? probe.layout.width : 0;
        s.fixed_height = *fixed ? probe.layout.height : 0;
        s.frames_traced = 0;
        GST_INFO_OBJECT(self, "model %s, x%" G_GINT64_FORMAT ", device %s", s.model_path.c_str(), s.scale.load(),
                        s.running.device.c_str());
        return TRUE;
    } catch (const std::exception& e) {
        GST_ELEMENT_ERROR(self, CORE, FAILED, ("loomrestore: %s", e.what()), (nullptr));
        return FALSE;
    }
}

gboolean stop(GstBaseTransform* trans) {
    auto* self = reinterpret_cast<GstLoomRestore*>(trans);
    LoomRestoreState& s = state_of(self);
    discard(s);
    write_trace(self);
    set_engine(s, nullptr);
    s.context.reset();
    s.scale = 0;
    return TRUE;
}

// --- properties ----------------------------------------------------------------------------

void set_property(GObject* object, guint id, const GValue* value, GParamSpec* pspec) {
    auto* self = reinterpret_cast<GstLoomRestore*>(object);
    LoomRestoreState& s = state_of(self);
    std::lock_guard lock(s.settings_mutex);
    Settings& set = s.settings;
    auto text = [&] { return std::string(g_value_get_string(value) ? g_value_get_string(value) : ""); };
    switch (id) {
    case PROP_MODEL: set.model = text(); break;
    case PROP_DEVICE: set.device = text(); break;
    case PROP_PRECISION: set.precision = static_cast<compiler::Precision>(g_value_get_enum(value)); break;
    case PROP_IN_FLIGHT: set.in_flight = g_value_get_int(value); break;
    case PROP_TILE: set.tile = g_value_get_int(value); break;
    case PROP_KB: set.kb = text(); break;
    case PROP_TRACE: set.trace = text(); break;
    case PROP_MODELS_DIR: set.models_dir = text(); break;
    case PROP_CACHE_DIR: set.cache_dir = text(); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec); break;
    }
}

void get_property(GObject* object, guint id, GValue* value, GParamSpec* pspec) {
    auto* self = reinterpret_cast<GstLoomRestore*>(object);
    LoomRestoreState& s = state_of(self);
    if (id >= PROP_FRAMES) {
        std::lock_guard lock(s.engine_mutex);
        const restore::EngineStats st = s.engine ? s.engine->stats() : restore::EngineStats{};
        switch (id) {
        case PROP_FRAMES: g_value_set_uint64(value, s.frames_before + st.frames_completed); break;
        case PROP_SIM_FPS: g_value_set_double(value, st.sim_fps); break;
        case PROP_H2D_BYTES: g_value_set_uint64(value, s.h2d_before + st.h2d_bytes); break;
        case PROP_D2H_BYTES: g_value_set_uint64(value, s.d2h_before + st.d2h_bytes); break;
        default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec); break;
        }
        return;
    }
    std::lock_guard lock(s.settings_mutex);
    const Settings& set = s.settings;
    switch (id) {
    case PROP_MODEL: g_value_set_string(value, set.model.c_str()); break;
    case PROP_DEVICE: g_value_set_string(value, set.device.c_str()); break;
    case PROP_PRECISION: g_value_set_enum(value, static_cast<gint>(set.precision)); break;
    case PROP_IN_FLIGHT: g_value_set_int(value, set.in_flight); break;
    case PROP_TILE: g_value_set_int(value, set.tile); break;
    case PROP_KB: g_value_set_string(value, set.kb.c_str()); break;
    case PROP_TRACE: g_value_set_string(value, set.trace.c_str()); break;
    case PROP_MODELS_DIR: g_value_set_string(value, set.models_dir.c_str()); break;
    case PROP_CACHE_DIR: g_value_set_string(value, set.cache_dir.c_str()); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, pspec); break;
    }
}

void finalize(GObject* object) {
    auto* self = reinterpret_cast<GstLoomRestore*>(object);
    delete self->state;
    self->state = nullptr;
    G_OBJECT_CLASS(gst_loom_restore_parent_class)->finalize(object);
}

}  // namespace

static void gst_loom_restore_class_init(GstLoomRestoreClass* klass) {
    GST_DEBUG_CATEGORY_INIT(loom_restore_debug, "loomrestore", 0, "Loom restoration element");
    auto* gobject = G_OBJECT_CLASS(klass);
    auto* element = GST_ELEMENT_CLASS(klass);
    auto* trans = GST_BASE_TRANSFORM_CLASS(klass);
    auto* filter = GST_VIDEO_FILTER_CLASS(klass);
    gobject->set_property = set_property;
    gobject->get_property = get_property;
    gobject->finalize = finalize;

    const auto config = static_cast<GParamFlags>(G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY);
    const auto figure = static_cast<GParamFlags>(G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
    g_object_class_install_property(
        gobject, PROP_MODEL,
        g_param_spec_string("model", "Model",
                            "Restoration model: a name in the models folder (realesr-animevideov3-x2, "
                            "realcugan-se/up2x-conservative, ...), an .onnx or ncnn .param file (its descriptor: "
                            "padding, crop, residual, applied as loomd run applies it), or a .loom file compiled by "
                            "loomc compile --restore (frames of the size it was compiled for only)",
                            "", config));
    g_object_class_install_property(
        gobject, PROP_DEVICE,
        g_param_spec_string("device", "Device",
                            "Simulated NPU: a preset (edge, dc) or a device spec file; elements on the same device "
                            "share it and its loaded models",
                            "edge", config));
    g_object_class_install_property(
        gobject, PROP_PRECISION,
        g_param_spec_enum("precision", "Precision", "Compute precision of the model", precision_get_type(),
                          static_cast<gint>(compiler::Precision::FP32), config));
    g_object_class_install_property(
        gobject, PROP_IN_FLIGHT,
        g_param_spec_int("in-flight", "Frames in flight",
                         "Frames on the device at once (uploads, model and downloads overlap); each adds one frame "
                         "of latency",
                         1, kInFlightMax, kInFlightDefault, config));
    g_object_class_install_property(
        gobject, PROP_TILE,
        g_param_spec_int("tile", "Tile",
                         "0: whole frames, or tiles when a frame does not fit the device memory; N: tiles with a "
                         "core of N input pixels; -1: never tiles",
                         -1, static_cast<int>(loom::kFrameSideMax), 0, config));
    g_object_class_install_property(
        gobject, PROP_KB,
        g_param_spec_string("kb", "Knowledge base", "A tuner's knowledge base (loomc tune --kb): its tilings are used",
                            "", config));
    g_object_class_install_property(
        gobject, PROP_TRACE,
        g_param_spec_string("trace", "Trace",
                            "Write a Perfetto / Chrome trace of the simulated device timeline to this file at EOS "
                            "(the element then has a device of its own)",
                            "", config));
    g_object_class_install_property(
        gobject, PROP_MODELS_DIR,
        g_param_spec_string("models-dir", "Models folder",
                            "Where model names are looked up (empty: $LOOM_MODEL_DIR, else ~/.cache/loom/models)", "",
                            config));
    g_object_class_install_property(
        gobject, PROP_CACHE_DIR,
        g_param_spec_string("cache-dir", "Compile cache",
                            "Compiled models are kept here and reused (empty: ~/.cache/loom/compiled)", "", config));
    g_object_class_install_property(
        gobject, PROP_FRAMES, g_param_spec_uint64("frames", "Frames", "Frames restored", 0, G_MAXUINT64, 0, figure));
    g_object_class_install_property(
        gobject, PROP_SIM_FPS,
        g_param_spec_double("sim-fps", "Simulated fps",
                            "Frames per second of the simulated device (the current caps' engine)", 0, G_MAXDOUBLE, 0,
                            figure));
    g_object_class_install_property(
        gobject, PROP_H2D_BYTES,
        g_param_spec_uint64("h2d-bytes", "Host-to-device bytes", "Frame bytes sent over the simulated host link", 0,
                            G_MAXUINT64, 0, figure));
    g_object_class_install_property(
        gobject, PROP_D2H_BYTES,
        g_param_spec_uint64("d2h-bytes", "Device-to-host bytes", "Frame bytes received over the simulated host link", 0,
                            G_MAXUINT64, 0, figure));
    gst_type_mark_as_plugin_api(precision_get_type(), static_cast<GstPluginAPIFlags>(0));

    gst_element_class_set_static_metadata(
        element, "Loom restoration", "Filter/Effect/Video/Scaler",
        "Restores and upscales video with a restoration model (Real-ESRGAN, Real-CUGAN, waifu2x) on Loom's "
        "simulated NPU",
        "Loom developers");
    GstCaps* caps = gst_caps_new_simple("video/x-raw", "width", GST_TYPE_INT_RANGE, 1, kSideMax, "height",
                                        GST_TYPE_INT_RANGE, 1, kSideMax, "framerate", GST_TYPE_FRACTION_RANGE, 0, 1,
                                        G_MAXINT, 1, nullptr);
    GValue formats = format_list();
    gst_structure_take_value(gst_caps_get_structure(caps, 0), "format", &formats);
    gst_element_class_add_pad_template(element, gst_pad_template_new("sink", GST_PAD_SINK, GST_PAD_ALWAYS, caps));
    gst_element_class_add_pad_template(element, gst_pad_template_new("src", GST_PAD_SRC, GST_PAD_ALWAYS, caps));
    gst_caps_unref(caps);

    trans->transform_caps = transform_caps;
    trans->fixate_caps = fixate_caps;
    trans->set_caps = set_caps;
    trans->propose_allocation = propose_allocation;
    trans->decide_allocation = decide_allocation;
    trans->submit_input_buffer = submit_input_buffer;
    trans->generate_output = generate_output;
    trans->sink_event = sink_event;
    trans->query = query;
    trans->start = start;
    trans->stop = stop;
    trans->passthrough_on_same_caps = FALSE;
    filter->set_info = set_info;
}

static void gst_loom_restore_init(GstLoomRestore* self) {
    self->state = new LoomRestoreState();
    gst_base_transform_set_qos_enabled(GST_BASE_TRANSFORM(self), TRUE);
}
