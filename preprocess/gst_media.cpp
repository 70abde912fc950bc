// The GStreamer back end of MediaReader and MediaWriter (preprocess/media_io.hpp).
//
// Reader: uridecodebin on the path or URI (or the user's gst-launch description), then
// videoconvert into an appsink that takes Loom's four 4:2:0 formats. Only video is decoded:
// decodebin stops at every other stream (its autoplug-continue), whose pad stays unlinked. Frames
// are views of the appsink's buffers, mapped, held by the view; their timestamps are the
// buffers' stream time in nanoseconds (the time base is 1/1000000000). Warnings on the bus and
// buffers flagged corrupted count as decode errors.
//
// Writer: appsrc (the frames, copied into buffers of a pool) into the encoder, its output into a
// muxer request pad, the muxer into a filesink on a temporary name renamed into place at EOS.
// The source file's other streams come from filesrc into parsebin: each audio or subtitle stream
// it exposes goes through a queue into a muxer pad of its own, untouched (a stream the muxer
// cannot hold is named in a warning, never dropped silently); its video goes to a fakesink.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <vector>

#include <gst/app/gstappsink.h>
#include <gst/audio/audio.h>
#include <gst/app/gstappsrc.h>

#include "common/log.hpp"
#include "preprocess/av_util.hpp"
#include "preprocess/backend.hpp"
#include "preprocess/gst_video.hpp"

namespace loom::preprocess {

namespace {

constexpr std::string_view kLog = "media";
constexpr GstClockTime kPoll = 100 * GST_MSECOND;
constexpr int64_t kNs = 1'000'000'000;
// How long a writer waits for the muxer to finish after the last frame, and for the source's
// other streams to show themselves before the first frame.
constexpr auto kFinishWait = std::chrono::minutes(10);
constexpr auto kStreamsWait = std::chrono::seconds(30);
// Bytes a copied stream may queue ahead of the frames.
constexpr guint kCopyQueueBytes = 16u << 20;
// Warnings logged per reader; the rest are counted only.
constexpr int64_t kWarningsLogged = 5;

template <typename T>
struct GstUnref {
    void operator()(T* p) const {
        if (p) gst_object_unref(p);
    }
};
using ElementPtr = std::unique_ptr<GstElement, GstUnref<GstElement>>;
using BusPtr = std::unique_ptr<GstBus, GstUnref<GstBus>>;
using PoolPtr = std::unique_ptr<GstBufferPool, GstUnref<GstBufferPool>>;

// Takes the floating reference GStreamer's constructors return.
ElementPtr own(GstElement* e) { return ElementPtr(e ? GST_ELEMENT(gst_object_ref_sink(e)) : nullptr); }

struct CapsUnref {
    void operator()(GstCaps* c) const { gst_caps_unref(c); }
};
using CapsPtr = std::unique_ptr<GstCaps, CapsUnref>;

struct MessageUnref {
    void operator()(GstMessage* m) const { gst_message_unref(m); }
};
using MessagePtr = std::unique_ptr<GstMessage, MessageUnref>;

std::string caps_text(const GstCaps* caps) {
    gchar* s = caps ? gst_caps_to_string(caps) : nullptr;
    std::string out = s ? s : "(no caps)";
    g_free(s);
    return out;
}

// A gst-launch description parsed with missing elements and properties as errors.
Result<GstElement*> parse(const std::string& desc, const std::string& path, std::string_view what, bool bin) {
    GError* err = nullptr;
    GstElement* e = bin ? gst_parse_bin_from_description_full(desc.c_str(), TRUE, nullptr, GST_PARSE_FLAG_FATAL_ERRORS,
                                                              &err)
                        : gst_parse_launch_full(desc.c_str(), nullptr, GST_PARSE_FLAG_FATAL_ERRORS, &err);
    if (err || !e) {
        std::string msg = err && err->message ? err->message : "not a valid description";
        g_clear_error(&err);
        own(e);  // dropped
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: GStreamer {} \"{}\": {}", path, what, desc, msg);
    }
    return e;
}

// The first ERROR message on the bus as a status naming `path` (OK when there is none);
// WARNINGs are handed to `on_warning`.
template <typename F>
Status drain_bus(GstBus* bus, const std::string& path, GstClockTime wait, F&& on_warning) {
    while (MessagePtr m{gst_bus_timed_pop_filtered(
               bus, wait, static_cast<GstMessageType>(GST_MESSAGE_ERROR | GST_MESSAGE_WARNING))}) {
        if (GST_MESSAGE_TYPE(m.get()) == GST_MESSAGE_ERROR)
            return make_error(StatusCode::IO_ERROR, "{}: GStreamer: {}", path, gst::message_text(m.get()));
        on_warning(m.get());
        wait = 0;
    }
    return {};
}

// An element inside `bin`, at any depth, whose factory's class holds all of `klass` (a new
// reference), or null.
ElementPtr find_element(GstElement* bin, std::initializer_list<const char*> klass) {
    ElementPtr found;
    GstIterator* it = gst_bin_iterate_recurse(GST_BIN(bin));
    GValue v = G_VALUE_INIT;
    while (!found && gst_iterator_next(it, &v) == GST_ITERATOR_OK) {
        auto* e = GST_ELEMENT(g_value_get_object(&v));
        GstElementFactory* f = gst_element_get_factory(e);
        const gchar* k = f ? gst_element_factory_get_metadata(f, GST_ELEMENT_METADATA_KLASS) : nullptr;
        bool all = k != nullptr;
        for (const char* want : klass) all = all && std::strstr(k, want);
        if (all) found.reset(GST_ELEMENT(gst_object_ref(e)));
        g_value_reset(&v);
    }
    g_value_unset(&v);
    gst_iterator_free(it);
    return found;
}

std::string factory_name(GstElement* e) {
    GstElementFactory* f = e ? gst_element_get_factory(e) : nullptr;
    return f ? GST_OBJECT_NAME(f) : "";
}

// FFmpeg's codec name for the common compressed video caps, else the caps' media type.
std::string codec_name(const GstCaps* caps) {
    if (!caps || gst_caps_is_empty(caps)) return "";
    const GstStructure* s = gst_caps_get_structure(caps, 0);
    const std::string_view n = gst_structure_get_name(s);
    int version = 0;
    if (n == "video/x-h264") return "h264";
    if (n == "video/x-h265") return "hevc";
    if (n == "video/x-vp8") return "vp8";
    if (n == "video/x-vp9") return "vp9";
    if (n == "video/x-av1") return "av1";
    if (n == "video/x-theora") return "theora";
    if (n == "video/x-raw") return "rawvideo";
    if (n == "video/mpeg" && gst_structure_get_int(s, "mpegversion", &version))
        return version == 4 ? "mpeg4" : version == 2 ? "mpeg2video" : "mpeg1video";
    return std::string(n);
}

// Whether demuxer `name` expresses the file's edit lists (MP4 and MOV) as the segment it sends:
// the buffers' stream time is then the presentation timeline FFmpeg reports. Other demuxers'
// buffer times are the container's own, and their segment starts only where playback should begin
// (matroskademux starts it at the first frame): that stream time would move every frame by the
// first one's time.
bool edit_lists(const std::string& demuxer) { return demuxer == "qtdemux"; }

// --- reader ------------------------------------------------------------------------------

// A decoded buffer mapped for reading, held by the frame views of it.
struct HeldFrame {
    GstSample* sample = nullptr;
    GstVideoFrame frame{};
    bool mapped = false;
    ~HeldFrame() {
        if (mapped) gst_video_frame_unmap(&frame);
        if (sample) gst_sample_unref(sample);
    }
};

// decodebin goes on only with video and containers: audio, subtitles and text stop where they
// are, still encoded, and their pads stay unlinked (nothing decodes them).
gboolean video_only(GstElement*, GstPad*, GstCaps* caps, gpointer) {
    if (!caps || gst_caps_is_empty(caps) || gst_caps_is_any(caps)) return TRUE;
    const std::string_view n = gst_structure_get_name(gst_caps_get_structure(caps, 0));
    const bool other = n.starts_with("audio/") || n.starts_with("text/") || n.starts_with("subpicture/") ||
                       n.starts_with("subtitle/") || n == "application/x-ssa" || n == "application/x-ass" ||
                       n == "application/x-subtitle-vtt" || n == "application/x-usf";
    return other ? FALSE : TRUE;
}

class GstReader final : public ReaderBackend {
public:
    ~GstReader() override {
        if (pipeline_) gst_element_set_state(pipeline_.get(), GST_STATE_NULL);
    }

    static Result<std::unique_ptr<ReaderBackend>> open(const std::string& path, const ReaderOptions& options);

    const VideoInfo& info() const override { return info_; }
    DecodeStats stats() const override { return stats_; }

    Result<bool> read(FrameView& view, FrameMeta& meta) override {
        if (!failed_.ok()) return failed_;
        if (eos_) return false;
        GstSample* sample = nullptr;
        for (;;) {
            if (options_.interrupted && options_.interrupted())
                return fail(make_error(StatusCode::CANCELLED, "{}: reading interrupted", info_.path));
            sample = gst_app_sink_try_pull_sample(GST_APP_SINK(sink_), kPoll);
            Status st = bus(0);
            if (!st.ok()) {
                if (sample) gst_sample_unref(sample);
                return fail(st);
            }
            if (sample) break;
            if (gst_app_sink_is_eos(GST_APP_SINK(sink_))) {
                eos_ = true;
                LOOM_TRY(check_error_rate(true));
                return false;
            }
        }
        auto held = std::make_shared<HeldFrame>();
        held->sample = sample;
        // The caps are parsed and checked when they change, not per frame.
        if (GstCaps* caps = gst_sample_get_caps(sample); caps != caps_.get()) {
            caps_.reset(caps ? gst_caps_ref(caps) : nullptr);
            GstVideoInfo& vi = frame_info_;
            if (!caps || !gst_video_info_from_caps(&vi, caps))
                return fail(make_error(StatusCode::IO_ERROR, "{}: frame {} has no video caps", info_.path, stats_.frames));
            PixelFormat format{};
            if (!gst::pixel_format_of(GST_VIDEO_INFO_FORMAT(&vi), format) || format != info_.layout.format ||
                GST_VIDEO_INFO_WIDTH(&vi) != info_.layout.width || GST_VIDEO_INFO_HEIGHT(&vi) != info_.layout.height)
                return fail(make_error(StatusCode::UNSUPPORTED,
                                       "{}: frame {} is {}x{} {}; the stream began {}x{} {} (a change of size or "
                                       "format mid-stream)",
                                       info_.path, stats_.frames, GST_VIDEO_INFO_WIDTH(&vi), GST_VIDEO_INFO_HEIGHT(&vi),
                                       gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(&vi)), info_.layout.width,
                                       info_.layout.height, pixel_format_name(info_.layout.format)));
        }
        GstBuffer* buffer = gst_sample_get_buffer(sample);
        held->mapped = buffer && gst_video_frame_map(&held->frame, &frame_info_, buffer, GST_MAP_READ);
        if (!held->mapped) {
            return fail(make_error(StatusCode::IO_ERROR, "{}: frame {} could not be mapped", info_.path, stats_.frames));
        }
        if (GST_BUFFER_FLAG_IS_SET(buffer, GST_BUFFER_FLAG_CORRUPTED)) ++stats_.decode_errors;

        meta = FrameMeta();
        meta.index = stats_.frames;
        meta.keyframe = !GST_BUFFER_FLAG_IS_SET(buffer, GST_BUFFER_FLAG_DELTA_UNIT);
        meta.duration = GST_BUFFER_DURATION_IS_VALID(buffer) ? static_cast<int64_t>(GST_BUFFER_DURATION(buffer)) : 0;
        if (GST_BUFFER_PTS_IS_VALID(buffer)) {
            // The container's presentation timeline (see edit_lists()).
            const GstSegment* seg = gst_sample_get_segment(sample);
            guint64 t = GST_BUFFER_PTS(buffer);
            if (edit_lists_ && seg && seg->format == GST_FORMAT_TIME) {
                const guint64 st = gst_segment_to_stream_time(seg, GST_FORMAT_TIME, t);
                if (GST_CLOCK_TIME_IS_VALID(st)) t = st;
            }
            meta.pts = static_cast<int64_t>(t);
        } else {
            // No timestamp: the previous frame's end, or the frame rate's step.
            const int64_t step = last_duration_ > 0 ? last_duration_ : frame_step_;
            meta.pts = last_pts_ == INT64_MIN ? 0 : last_pts_ + step;
        }
        last_pts_ = meta.pts;
        last_duration_ = meta.duration;
        ++stats_.frames;
        ++stats_.packets;
        if (stats_.frames > options_.limits.frames_max)
            return fail(make_error(StatusCode::OUT_OF_RANGE, "{}: more than {} frames (the limit)", info_.path,
                                   options_.limits.frames_max));
        view = gst::view_of(held->frame, info_.layout);
        view.owner = std::shared_ptr<const void>(held, held.get());
        Status st = view.check();
        if (st.ok()) st = check_error_rate(false);
        if (!st.ok()) return fail(st.with_context(info_.path));
        return true;
    }

private:
    Status fail(Status st) {
        failed_ = st;
        return st;
    }

    // The bus's errors and warnings so far (waiting up to `wait` for the first).
    Status bus(GstClockTime wait) {
        return drain_bus(bus_.get(), info_.path, wait, [this](GstMessage* m) {
            ++stats_.decode_errors;
            if (stats_.decode_errors <= kWarningsLogged)
                log::warn(kLog, "{}: frame {}: GStreamer: {}", info_.path, stats_.frames, gst::message_text(m));
        });
    }

    Status check_error_rate(bool at_end) const {
        if (stats_.frames < 10 && !at_end) return {};
        const double n = static_cast<double>(std::max<int64_t>(stats_.frames, 1));
        if (stats_.decode_errors > 0 && static_cast<double>(stats_.decode_errors) / n > options_.error_rate_max)
            return make_error(StatusCode::IO_ERROR,
                              "{}: {} decode errors in {} frames, over the limit of {:.1f}% (error_rate_max)",
                              info_.path, stats_.decode_errors, stats_.frames, options_.error_rate_max * 100.0);
        return {};
    }

    Status prepare(const std::string& path);

    ReaderOptions options_;
    VideoInfo info_;
    DecodeStats stats_;
    ElementPtr pipeline_;
    GstElement* sink_ = nullptr;  // owned by the pipeline
    BusPtr bus_;
    CapsPtr caps_;               // of the last frame, with frame_info_ parsed from them
    GstVideoInfo frame_info_{};
    bool eos_ = false;
    bool edit_lists_ = false;  // the demuxer's segment is the file's edit list (edit_lists())
    Status failed_;
    int64_t last_pts_ = INT64_MIN, last_duration_ = 0, frame_step_ = 0;
};

Result<std::unique_ptr<ReaderBackend>> GstReader::open(const std::string& path, const ReaderOptions& options) {
    LOOM_TRY(gst::init().with_context(path));
    if (options.start_frame != 0 || options.frame_count != -1 || options.segment_pts)
        return make_error(StatusCode::UNSUPPORTED,
                          "{}: backend \"gstreamer\" reads whole streams; segments are read with backend \"ffmpeg\"",
                          path);
    auto r = std::make_unique<GstReader>();
    r->options_ = options;
    r->info_.path = path;
    LOOM_TRY(r->prepare(path));
    return std::unique_ptr<ReaderBackend>(std::move(r));
}

Status GstReader::prepare(const std::string& path) {
    const bool uridecode = options_.gst_pipeline.empty();
    const std::string desc = (uridecode ? std::string("uridecodebin name=loom_source") : options_.gst_pipeline) +
                             " ! videoconvert ! appsink name=loom_sink";
    LOOM_ASSIGN_OR_RETURN(GstElement * launched, parse(desc, path, "pipeline", false));
    pipeline_ = own(launched);
    GstElement* p = pipeline_.get();
    if (!GST_IS_BIN(p)) return make_error(StatusCode::INVALID_ARGUMENT, "{}: GStreamer pipeline \"{}\": not a pipeline", path, desc);
    sink_ = gst_bin_get_by_name(GST_BIN(p), "loom_sink");
    if (!sink_) return make_error(StatusCode::INTERNAL, "{}: the appsink is missing", path);
    gst_object_unref(sink_);  // the pipeline keeps it
    if (uridecode) {
        std::string uri = path;
        if (!gst_uri_is_valid(path.c_str())) {
            GError* err = nullptr;
            gchar* u = gst_filename_to_uri(path.c_str(), &err);
            if (!u) {
                std::string msg = err && err->message ? err->message : "?";
                g_clear_error(&err);
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: not a file name GStreamer takes: {}", path, msg);
            }
            uri = u;
            g_free(u);
            std::error_code ec;
            if (!std::filesystem::exists(path, ec))
                return make_error(StatusCode::NOT_FOUND, "{}: no such file", path);
        }
        GstElement* src = gst_bin_get_by_name(GST_BIN(p), "loom_source");
        g_object_set(src, "uri", uri.c_str(), nullptr);
        g_signal_connect(src, "autoplug-continue", G_CALLBACK(video_only), nullptr);
        gst_object_unref(src);
    }
    GstCaps* caps = gst_caps_new_empty_simple("video/x-raw");
    GValue formats = gst::format_list(true);
    gst_caps_set_value(caps, "format", &formats);
    g_value_unset(&formats);
    g_object_set(sink_, "caps", caps, "sync", FALSE, "max-buffers", 2u, "enable-last-sample", FALSE, nullptr);
    gst_caps_unref(caps);
    bus_.reset(gst_element_get_bus(p));

    // Prerolled: the first frame's caps are the stream's.
    if (gst_element_set_state(p, GST_STATE_PAUSED) == GST_STATE_CHANGE_FAILURE) {
        LOOM_TRY(bus(kPoll));
        return make_error(StatusCode::IO_ERROR, "{}: GStreamer could not start the pipeline \"{}\"", path, desc);
    }
    GstSample* preroll = nullptr;
    while (!preroll) {
        if (options_.interrupted && options_.interrupted())
            return make_error(StatusCode::CANCELLED, "{}: opening interrupted", path);
        preroll = gst_app_sink_try_pull_preroll(GST_APP_SINK(sink_), kPoll);
        LOOM_TRY(bus(0));
        if (!preroll && gst_app_sink_is_eos(GST_APP_SINK(sink_)))
            return make_error(StatusCode::NOT_FOUND, "{}: no video stream GStreamer decodes", path);
    }
    GstVideoInfo vi;
    const bool parsed = gst_video_info_from_caps(&vi, gst_sample_get_caps(preroll));
    gst_sample_unref(preroll);
    PixelFormat format{};
    if (!parsed || !gst::pixel_format_of(GST_VIDEO_INFO_FORMAT(&vi), format))
        return make_error(StatusCode::UNSUPPORTED, "{}: GStreamer gives frames Loom does not take", path);
    VideoInfo& info = info_;
    info.layout = FrameLayout{format, GST_VIDEO_INFO_WIDTH(&vi), GST_VIDEO_INFO_HEIGHT(&vi)};
    LOOM_TRY(info.layout.check().with_context(path));
    if (int64_t{info.layout.width} * info.layout.height > options_.limits.pixels_max)
        return make_error(StatusCode::OUT_OF_RANGE, "{}: {}x{} frames exceed the limit of {} pixels", path,
                          info.layout.width, info.layout.height, options_.limits.pixels_max);
    LOOM_ASSIGN_OR_RETURN(info.color, gst::color_of(vi, path.c_str()));
    const guint code = gst_video_color_matrix_to_iso(vi.colorimetry.matrix);
    info.color_matrix_code = code == 0 ? 2 : static_cast<int>(code);
    info.time_base = Rational{1, static_cast<int>(kNs)};
    info.frame_rate = GST_VIDEO_INFO_FPS_N(&vi) > 0 ? Rational{GST_VIDEO_INFO_FPS_N(&vi), GST_VIDEO_INFO_FPS_D(&vi)}
                                                    : Rational{0, 1};
    if (info.frame_rate.num > 0) frame_step_ = kNs * info.frame_rate.den / info.frame_rate.num;
    info.sample_aspect_ratio = Rational{GST_VIDEO_INFO_PAR_N(&vi), GST_VIDEO_INFO_PAR_D(&vi)};
    gint64 duration = 0;
    if (gst_element_query_duration(p, GST_FORMAT_TIME, &duration) && duration > 0) {
        info.duration_s = static_cast<double>(duration) / kNs;
        if (info.frame_rate.num > 0)
            info.frames_estimate = static_cast<int64_t>(info.duration_s * info.frame_rate.num / info.frame_rate.den + 0.5);
    }
    const ElementPtr decoder = find_element(p, {"Decoder", "Video"});
    info.container = factory_name(find_element(p, {"Demuxer"}).get());
    info.decoder = decoder ? factory_name(decoder.get()) + " (gstreamer)" : "gstreamer";
    edit_lists_ = edit_lists(info.container);
    if (decoder) {
        // The codec: the caps into the decoder. Their colorimetry is what the stream is tagged
        // with; what it leaves unknown the decoder filled with a default for the size, which
        // stays "unspecified" here, as FFmpeg says (the matrix used is that same default).
        GstPad* pad = gst_element_get_static_pad(decoder.get(), "sink");
        GstCaps* c = pad ? gst_pad_get_current_caps(pad) : nullptr;
        info.codec = codec_name(c);
        GstVideoColorimetry tagged{};  // all unknown
        const gchar* text = c && !gst_caps_is_empty(c)
                                ? gst_structure_get_string(gst_caps_get_structure(c, 0), "colorimetry")
                                : nullptr;
        if (text && !gst_video_colorimetry_from_string(&tagged, text)) tagged = GstVideoColorimetry{};
        if (tagged.primaries == GST_VIDEO_COLOR_PRIMARIES_UNKNOWN) info.color.primaries = 2;
        if (tagged.transfer == GST_VIDEO_TRANSFER_UNKNOWN) info.color.transfer = 2;
        if (tagged.matrix == GST_VIDEO_COLOR_MATRIX_UNKNOWN) info.color_matrix_code = 2;
        if (c) gst_caps_unref(c);
        if (pad) gst_object_unref(pad);
    }
    info.streams = 1;
    if (gst_element_set_state(p, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
        LOOM_TRY(bus(kPoll));
        return make_error(StatusCode::IO_ERROR, "{}: GStreamer could not play the pipeline \"{}\"", path, desc);
    }
    log::info(kLog, "{}: {} {}x{} {} {}, decoder {}", path, info.container.empty() ? "stream" : info.container,
              info.layout.width, info.layout.height, pixel_format_name(info.layout.format),
              color_matrix_name(info.color.matrix), info.decoder);
    return {};
}

// --- writer ------------------------------------------------------------------------------

// The source's other streams on their way to the muxer (shared with parsebin's streaming thread).
struct CopyBranch {
    GstElement* pipeline = nullptr;  // not owned
    GstElement* mux = nullptr;       // not owned
    std::mutex mutex;
    std::condition_variable cv;
    // Set when data first leaves one of parsebin's pads: it exposes every stream's pad before it
    // lets any data out, so each stream then has its muxer pad.
    bool exposed = false;
    int edit_lists = -1;  // edit_lists() of the source's demuxer; -1: not looked up yet
    // Audio streams going to the muxer, those whose first buffer (or end) was seen, and the
    // longest encoder priming among them (an edit list that skips it, or clipping meta on the
    // first buffer): kept as stored, the priming plays before the first frame, so the frames are
    // placed that much later, keeping sound and picture aligned as FFmpeg's writer does.
    int audio = 0, audio_started = 0;
    int64_t priming_ns = 0;
    std::vector<std::string> refused;  // streams the muxer cannot hold
    std::atomic<int64_t> buffers{0};
};

GstPadProbeReturn count_buffer(GstPad*, GstPadProbeInfo*, gpointer data) {
    static_cast<CopyBranch*>(data)->buffers.fetch_add(1, std::memory_order_relaxed);
    return GST_PAD_PROBE_OK;
}

// On every pad parsebin exposes: marks the streams exposed at their first data, and puts copied
// streams on the container's own timeline: each segment is made to start at 0, so that the
// muxer's running time is the packets' time as stored. Where the segment was an edit list
// (edit_lists()), an audio stream's edit skipped its priming (start - time): the frames, which
// come on the edited timeline, are placed that much later (CopyBranch), as FFmpeg places them.
GstPadProbeReturn on_exposed_data(GstPad* pad, GstPadProbeInfo* info, gpointer data) {
    CopyBranch& b = *static_cast<CopyBranch*>(data);
    {
        std::lock_guard lock(b.mutex);
        if (!b.exposed) {
            b.exposed = true;
            b.cv.notify_all();
        }
    }
    if (!(GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM)) return GST_PAD_PROBE_OK;
    GstEvent* event = GST_PAD_PROBE_INFO_EVENT(info);
    if (GST_EVENT_TYPE(event) != GST_EVENT_SEGMENT) return GST_PAD_PROBE_OK;
    const GstSegment* in = nullptr;
    gst_event_parse_segment(event, &in);
    if (in->format != GST_FORMAT_TIME || (in->start == 0 && in->time == 0 && in->base == 0)) return GST_PAD_PROBE_OK;
    if (b.edit_lists == 1 && in->start > in->time) {
        GstCaps* caps = gst_pad_get_current_caps(pad);
        const bool audio = caps && !gst_caps_is_empty(caps) &&
                           std::string_view(gst_structure_get_name(gst_caps_get_structure(caps, 0))).starts_with("audio/");
        if (caps) gst_caps_unref(caps);
        if (audio) {
            std::lock_guard lock(b.mutex);
            b.priming_ns = std::max(b.priming_ns, static_cast<int64_t>(in->start - in->time));
        }
    }
    GstSegment seg;
    gst_segment_copy_into(in, &seg);
    seg.start = seg.time = seg.base = seg.position = 0;
    GstEvent* replaced = gst_event_new_segment(&seg);
    gst_event_set_seqnum(replaced, gst_event_get_seqnum(event));
    gst_event_unref(event);
    GST_PAD_PROBE_INFO_DATA(info) = replaced;
    return GST_PAD_PROBE_OK;
}

// On a copied audio stream's pad until its first buffer: its priming (see CopyBranch).
GstPadProbeReturn on_first_audio(GstPad* pad, GstPadProbeInfo* info, gpointer data) {
    CopyBranch& b = *static_cast<CopyBranch*>(data);
    int64_t priming = 0;
    if (GST_PAD_PROBE_INFO_TYPE(info) & GST_PAD_PROBE_TYPE_BUFFER) {
        GstBuffer* buffer = GST_PAD_PROBE_INFO_BUFFER(info);
        const GstAudioClippingMeta* m = gst_buffer_get_audio_clipping_meta(buffer);
        GstCaps* caps = gst_pad_get_current_caps(pad);
        int rate = 0;
        if (caps && !gst_caps_is_empty(caps)) gst_structure_get_int(gst_caps_get_structure(caps, 0), "rate", &rate);
        if (caps) gst_caps_unref(caps);
        if (m && m->start > 0 && m->format == GST_FORMAT_TIME) priming = static_cast<int64_t>(m->start);
        if (m && m->start > 0 && m->format == GST_FORMAT_DEFAULT && rate > 0)
            priming = static_cast<int64_t>(gst_util_uint64_scale_round(m->start, GST_SECOND, static_cast<guint64>(rate)));
    } else if (GST_EVENT_TYPE(GST_PAD_PROBE_INFO_EVENT(info)) != GST_EVENT_EOS) {
        return GST_PAD_PROBE_OK;
    }
    std::lock_guard lock(b.mutex);
    b.priming_ns = std::max(b.priming_ns, priming);
    ++b.audio_started;
    b.cv.notify_all();
    return GST_PAD_PROBE_REMOVE;
}

// Links `pad` into `e` (added to the pipeline and started); false when it does not link.
bool link_into(CopyBranch& b, GstPad* pad, GstElement* e) {
    gst_bin_add(GST_BIN(b.pipeline), e);
    gst_element_sync_state_with_parent(e);
    GstPad* sink = gst_element_get_static_pad(e, "sink");
    const bool ok = gst_pad_link(pad, sink) == GST_PAD_LINK_OK;
    gst_object_unref(sink);
    return ok;
}

void on_source_pad(GstElement* parsebin, GstPad* pad, gpointer data) {
    CopyBranch& b = *static_cast<CopyBranch*>(data);
    if (b.edit_lists < 0) b.edit_lists = edit_lists(factory_name(find_element(parsebin, {"Demuxer"}).get())) ? 1 : 0;
    gst_pad_add_probe(pad, static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
                      on_exposed_data, &b, nullptr);
    GstCaps* caps = gst_pad_get_current_caps(pad);
    if (!caps) caps = gst_pad_query_caps(pad, nullptr);
    const std::string name = caps && !gst_caps_is_empty(caps) ? gst_structure_get_name(gst_caps_get_structure(caps, 0)) : "";
    GstPad* mux_pad = nullptr;
    if (!name.starts_with("video/") && !name.starts_with("image/"))
        mux_pad = gst_element_get_compatible_pad(b.mux, pad, caps);
    if (!mux_pad) {
        if (!name.starts_with("video/") && !name.starts_with("image/")) {
            std::lock_guard lock(b.mutex);
            b.refused.push_back(caps_text(caps));
        }
        GstElement* sink = gst_element_factory_make("fakesink", nullptr);
        g_object_set(sink, "sync", FALSE, "async", FALSE, nullptr);
        link_into(b, pad, sink);
    } else {
        // Room for the source's stream to run ahead of the frames while the muxer waits for
        // them (a pad of the muxer is taken before the first frame); bounded by bytes.
        GstElement* queue = gst_element_factory_make("queue", nullptr);
        g_object_set(queue, "max-size-time", guint64{0}, "max-size-buffers", 0u, "max-size-bytes", kCopyQueueBytes,
                     nullptr);
        if (link_into(b, pad, queue)) {
            GstPad* src = gst_element_get_static_pad(queue, "src");
            if (gst_pad_link(src, mux_pad) == GST_PAD_LINK_OK) {
                gst_pad_add_probe(src, GST_PAD_PROBE_TYPE_BUFFER, count_buffer, &b, nullptr);
                if (name.starts_with("audio/")) {
                    {
                        std::lock_guard lock(b.mutex);
                        ++b.audio;
                    }
                    gst_pad_add_probe(pad,
                                      static_cast<GstPadProbeType>(GST_PAD_PROBE_TYPE_BUFFER |
                                                                   GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM),
                                      on_first_audio, &b, nullptr);
                }
            } else {
                std::lock_guard lock(b.mutex);
                b.refused.push_back(caps_text(caps));
            }
            gst_object_unref(src);
        }
        gst_object_unref(mux_pad);
    }
    if (caps) gst_caps_unref(caps);
}

// The muxer that writes `path`'s container, by its extension.
std::string muxer_for(const std::string& path) {
    std::string ext = std::filesystem::path(path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (ext == ".mkv" || ext == ".mka") return "matroskamux";
    if (ext == ".webm") return "webmmux";
    if (ext == ".mp4" || ext == ".m4v") return "mp4mux";
    if (ext == ".mov") return "qtmux";
    if (ext == ".ts" || ext == ".m2ts") return "mpegtsmux";
    if (ext == ".avi") return "avimux";
    if (ext == ".flv") return "flvmux";
    return "";
}

// The encoder description for WriterOptions' codec, quality and threads.
Result<std::string> encoder_for(const std::string& path, const WriterOptions& o) {
    const std::string threads = o.threads > 0 ? fmt::format(" threads={}", o.threads) : "";
    if (o.codec == "libx264")
        return fmt::format("x264enc pass=qual quantizer={} speed-preset={}{}", o.crf, o.preset, threads);
    if (o.codec == "libx265")
        return fmt::format("x265enc option-string=crf={} speed-preset={}", o.crf, o.preset);
    if (o.codec == "ffv1") return std::string("avenc_ffv1");
    return make_error(StatusCode::UNSUPPORTED,
                      "{}: codec {} with backend \"gstreamer\": give the encoder as a description (gst_encoder), or "
                      "use backend \"ffmpeg\"",
                      path, o.codec);
}

class GstWriter final : public WriterBackend {
public:
    ~GstWriter() override {
        if (pipeline_) gst_element_set_state(pipeline_.get(), GST_STATE_NULL);
        if (pool_) gst_buffer_pool_set_active(pool_.get(), FALSE);
        if (!finished_ && !temporary_.empty()) {
            std::error_code ec;
            if (std::filesystem::remove(temporary_, ec))
                log::warn(kLog, "{}: writer closed before finish(); nothing was kept", path_);
        }
    }

    static Result<std::unique_ptr<WriterBackend>> open(const std::string& path, const VideoInfo& source,
                                                       const FrameLayout& layout, const ColorInfo& color,
                                                       const WriterOptions& options);

    const FrameLayout& layout() const override { return layout_; }
    const std::string& path() const override { return path_; }
    EncodeStats stats() const override {
        EncodeStats s = stats_;
        s.packets_copied = copy_ ? copy_->buffers.load() : 0;
        return s;
    }

    Status write(const FrameView& src, const FrameMeta& meta) override {
        if (!failed_.ok()) return failed_;
        if (finished_) return make_error(StatusCode::FAILED_PRECONDITION, "{}: write after finish()", path_);
        if (src.layout != layout_)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame {} is {}x{} {}; the writer takes {}x{} {}", path_,
                              meta.index, src.layout.width, src.layout.height, pixel_format_name(src.layout.format),
                              layout_.width, layout_.height, pixel_format_name(layout_.format));
        if (Status st = src.check(); !st.ok()) return st.with_context(fmt::format("{}: frame {}", path_, meta.index));
        if (stats_.frames > 0 && meta.pts <= last_pts_)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame {} has pts {}, not after the previous {}", path_,
                              meta.index, meta.pts, last_pts_);
        if (copy_ && stats_.frames == 0) LOOM_TRY(wait_for_streams());
        const int64_t pts = to_ns(meta.pts) + lift_ns_;
        if (pts < 0)
            return make_error(StatusCode::UNSUPPORTED,
                              "{}: frame {} has a negative time ({} ns), which GStreamer cannot carry; use backend "
                              "\"ffmpeg\"",
                              path_, meta.index, pts);
        GstBuffer* buffer = nullptr;
        if (gst_buffer_pool_acquire_buffer(pool_.get(), &buffer, nullptr) != GST_FLOW_OK || !buffer)
            return fail(make_error(StatusCode::INTERNAL, "{}: no buffer for frame {}", path_, meta.index));
        GstVideoFrame frame;
        if (!gst_video_frame_map(&frame, &info_, buffer, GST_MAP_WRITE)) {
            gst_buffer_unref(buffer);
            return fail(make_error(StatusCode::INTERNAL, "{}: frame {} could not be mapped", path_, meta.index));
        }
        for (int p = 0; p < src.planes(); ++p) {
            auto* dst = static_cast<uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&frame, p));
            const int64_t stride = GST_VIDEO_FRAME_PLANE_STRIDE(&frame, p);
            const size_t row = src.plane_row_bytes(p);
            for (int64_t r = 0; r < src.plane_rows(p); ++r)
                std::memcpy(dst + r * stride, src.plane[static_cast<size_t>(p)] + r * src.stride[static_cast<size_t>(p)], row);
        }
        gst_video_frame_unmap(&frame);
        GST_BUFFER_PTS(buffer) = static_cast<GstClockTime>(pts);
        if (meta.duration > 0) GST_BUFFER_DURATION(buffer) = static_cast<GstClockTime>(to_ns(meta.duration));
        const GstFlowReturn ret = gst_app_src_push_buffer(GST_APP_SRC(appsrc_), buffer);
        LOOM_TRY(check_bus(0));
        if (ret != GST_FLOW_OK) {
            LOOM_TRY(check_bus(kPoll));
            return fail(make_error(StatusCode::IO_ERROR, "{}: GStreamer refused frame {}: {}", path_, meta.index,
                                   gst_flow_get_name(ret)));
        }
        last_pts_ = meta.pts;
        ++stats_.frames;
        return {};
    }

    Status finish() override {
        if (!failed_.ok()) return failed_;
        if (finished_) return {};
        if (copy_ && stats_.frames == 0) LOOM_TRY(wait_for_streams());
        gst_app_src_end_of_stream(GST_APP_SRC(appsrc_));
        const auto until = std::chrono::steady_clock::now() + kFinishWait;
        for (;;) {
            MessagePtr m{gst_bus_timed_pop_filtered(bus_.get(), kPoll,
                                                    static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR))};
            if (m && GST_MESSAGE_TYPE(m.get()) == GST_MESSAGE_ERROR)
                return fail(make_error(StatusCode::IO_ERROR, "{}: GStreamer: {}", path_, gst::message_text(m.get())));
            if (m) break;
            if (std::chrono::steady_clock::now() > until)
                return fail(make_error(StatusCode::IO_ERROR, "{}: the muxer did not finish in {} s", path_,
                                       std::chrono::duration_cast<std::chrono::seconds>(kFinishWait).count()));
        }
        gst_element_set_state(pipeline_.get(), GST_STATE_NULL);
        std::error_code ec;
        std::filesystem::rename(temporary_, path_, ec);
        if (ec)
            return fail(make_error(StatusCode::IO_ERROR, "{}: renaming {} into place: {}", path_, temporary_,
                                   ec.message()));
        finished_ = true;
        const auto n = std::filesystem::file_size(path_, ec);
        stats_.bytes = ec ? 0 : static_cast<int64_t>(n);
        log::info(kLog, "{}: {} frames written, {} packets copied, {} bytes (GStreamer)", path_, stats_.frames,
                  stats().packets_copied, stats_.bytes);
        return {};
    }

private:
    Status fail(Status st) {
        failed_ = st;
        return st;
    }
    Status check_bus(GstClockTime wait) {
        return drain_bus(bus_.get(), path_, wait, [this](GstMessage* m) {
            log::warn(kLog, "{}: GStreamer: {}", path_, gst::message_text(m));
        });
    }
    int64_t to_ns(int64_t t) const {
        const __int128 v = static_cast<__int128>(t) * time_base_.num * kNs;
        const __int128 d = time_base_.den;
        return static_cast<int64_t>(v >= 0 ? (v + d / 2) / d : -((-v + d / 2) / d));
    }

    // Before the first frame: every stream of the source has its muxer pad (a muxer takes no new
    // pads once it started writing).
    Status wait_for_streams() {
        std::unique_lock lock(copy_->mutex);
        const auto until = std::chrono::steady_clock::now() + kStreamsWait;
        // Exposed, every audio stream's pad is there; then each one's first buffer.
        const auto ready = [&] { return copy_->exposed && copy_->audio_started >= copy_->audio; };
        while (!ready()) {
            lock.unlock();
            LOOM_TRY(check_bus(0));
            lock.lock();
            if (copy_->cv.wait_until(lock, std::min(until, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)),
                                     ready))
                break;
            if (std::chrono::steady_clock::now() > until)
                return fail(make_error(StatusCode::IO_ERROR, "{}: GStreamer found no streams in {} within {} s",
                                       path_, source_path_, kStreamsWait.count()));
        }
        for (const std::string& caps : copy_->refused)
            log::warn(kLog, "{}: the muxer cannot hold the source's stream {}: it is not copied", path_, caps);
        lift_ns_ = copy_->priming_ns;
        if (lift_ns_ > 0)
            log::info(kLog, "{}: the source's audio is primed {:.3f} ms before its first sample: the frames are placed "
                      "that much later, keeping sound and picture aligned",
                      path_, static_cast<double>(lift_ns_) / 1e6);
        return {};
    }

    Status build(const VideoInfo& source, const ColorInfo& color, const WriterOptions& options);

    std::string path_, temporary_, source_path_;
    FrameLayout layout_;
    Rational time_base_;
    GstVideoInfo info_{};
    ElementPtr pipeline_;
    GstElement* appsrc_ = nullptr;  // owned by the pipeline
    BusPtr bus_;
    PoolPtr pool_;
    std::unique_ptr<CopyBranch> copy_;
    EncodeStats stats_;
    int64_t last_pts_ = 0;
    int64_t lift_ns_ = 0;  // added to every frame's time (CopyBranch's priming)
    bool finished_ = false;
    Status failed_;
};

Result<std::unique_ptr<WriterBackend>> GstWriter::open(const std::string& path, const VideoInfo& source,
                                                       const FrameLayout& layout, const ColorInfo& color,
                                                       const WriterOptions& options) {
    LOOM_TRY(gst::init().with_context(path));
    if (options.copy_from_pts != INT64_MIN || options.copy_to_pts != INT64_MAX)
        return make_error(StatusCode::UNSUPPORTED,
                          "{}: backend \"gstreamer\" writes whole streams; segments are written with backend \"ffmpeg\"",
                          path);
    auto w = std::make_unique<GstWriter>();
    w->path_ = path;
    w->layout_ = layout;
    w->time_base_ = source.time_base;
    LOOM_TRY(w->build(source, color, options));
    return std::unique_ptr<WriterBackend>(std::move(w));
}

Status GstWriter::build(const VideoInfo& source, const ColorInfo& color, const WriterOptions& options) {
    const std::string& path = path_;
    std::string encoder_desc = options.gst_encoder;
    if (encoder_desc.empty()) {
        LOOM_ASSIGN_OR_RETURN(encoder_desc, encoder_for(path, options));
    }
    std::string muxer_desc = options.gst_muxer.empty() ? muxer_for(path) : options.gst_muxer;
    if (muxer_desc.empty())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: no GStreamer muxer is known for the extension \"{}\" (set the muxer)", path,
                          std::filesystem::path(path).extension().string());

    // The frames' caps: size, format, colour, rate and aspect ratio.
    gst_video_info_set_format(&info_, gst::gst_format_of(layout_.format), static_cast<guint>(layout_.width),
                              static_cast<guint>(layout_.height));
    info_.colorimetry = gst::colorimetry_of(color, layout_.format);
    if (source.frame_rate.num > 0 && source.frame_rate.den > 0) {
        GST_VIDEO_INFO_FPS_N(&info_) = source.frame_rate.num;
        GST_VIDEO_INFO_FPS_D(&info_) = source.frame_rate.den;
    } else {
        GST_VIDEO_INFO_FPS_N(&info_) = 0;  // variable
        GST_VIDEO_INFO_FPS_D(&info_) = 1;
    }
    if (source.sample_aspect_ratio.num > 0 && source.sample_aspect_ratio.den > 0) {
        GST_VIDEO_INFO_PAR_N(&info_) = source.sample_aspect_ratio.num;
        GST_VIDEO_INFO_PAR_D(&info_) = source.sample_aspect_ratio.den;
    }
    const CapsPtr caps(gst_video_info_to_caps(&info_));

    pipeline_ = own(gst_pipeline_new("loom-writer"));
    GstElement* pipe = pipeline_.get();
    appsrc_ = gst_element_factory_make("appsrc", "loom_source");
    GstElement* sink = gst_element_factory_make("filesink", nullptr);
    if (!appsrc_ || !sink) {
        own(appsrc_);
        own(sink);
        appsrc_ = nullptr;
        return make_error(StatusCode::UNSUPPORTED, "{}: GStreamer's appsrc or filesink is missing", path);
    }
    gst_bin_add_many(GST_BIN(pipe), appsrc_, sink, nullptr);
    g_object_set(appsrc_, "caps", caps.get(), "format", GST_FORMAT_TIME, "block", TRUE, "max-bytes",
                 static_cast<guint64>(GST_VIDEO_INFO_SIZE(&info_)) * 2, nullptr);

    LOOM_ASSIGN_OR_RETURN(GstElement * enc, parse(encoder_desc, path, "encoder", true));
    gst_bin_add(GST_BIN(pipe), enc);
    LOOM_ASSIGN_OR_RETURN(GstElement * mux, parse(muxer_desc, path, "muxer", false));
    if (GST_IS_PIPELINE(mux)) {
        own(mux);
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: GStreamer muxer \"{}\": one element, not a pipeline", path,
                          muxer_desc);
    }
    gst_bin_add(GST_BIN(pipe), mux);
    // The encoder must take the frames as they are: a conversion here would change them behind
    // the user's back (10-bit to 8-bit, say).
    GstPad* enc_sink = gst_element_get_static_pad(enc, "sink");
    const CapsPtr takes(enc_sink ? gst_pad_query_caps(enc_sink, nullptr) : gst_caps_new_empty());
    if (enc_sink) gst_object_unref(enc_sink);
    if (!gst_caps_can_intersect(caps.get(), takes.get()) || !gst_element_link(appsrc_, enc))
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: GStreamer encoder \"{}\" does not take the frames ({}); it takes {}", path, encoder_desc,
                          caps_text(caps.get()), caps_text(takes.get()));
    if (!gst_element_link(enc, mux))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: GStreamer muxer \"{}\" does not take encoder \"{}\"'s output",
                          path, muxer_desc, encoder_desc);
    if (!gst_element_link(mux, sink))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: GStreamer muxer \"{}\" gives no stream to write", path,
                          muxer_desc);
    temporary_ = av::temporary_name(path);
    g_object_set(sink, "location", temporary_.c_str(), nullptr);

    // The source file's other streams, untouched.
    std::error_code ec;
    const bool rereadable = !source.path.empty() && std::filesystem::is_regular_file(source.path, ec);
    if (!source.path.empty() && !rereadable && options.copy_streams)
        log::warn(kLog, "{}: {} is not a regular file (a pipe or a device): its other streams are not copied", path,
                  source.path);
    if (rereadable && options.copy_streams) {
        source_path_ = source.path;
        copy_ = std::make_unique<CopyBranch>();
        copy_->pipeline = pipe;
        copy_->mux = mux;
        GstElement* file = gst_element_factory_make("filesrc", nullptr);
        GstElement* parsebin = gst_element_factory_make("parsebin", nullptr);
        if (!file || !parsebin)
            return make_error(StatusCode::UNSUPPORTED, "{}: GStreamer's filesrc or parsebin is missing", path);
        g_object_set(file, "location", source.path.c_str(), nullptr);
        gst_bin_add_many(GST_BIN(pipe), file, parsebin, nullptr);
        if (!gst_element_link(file, parsebin))
            return make_error(StatusCode::INTERNAL, "{}: filesrc does not link to parsebin", path);
        g_signal_connect(parsebin, "pad-added", G_CALLBACK(on_source_pad), copy_.get());
    }

    // Buffers for the frames, reused once the encoder lets go of them.
    GstBufferPool* pool = gst_video_buffer_pool_new();
    if (g_object_is_floating(pool)) gst_object_ref_sink(pool);
    pool_.reset(pool);
    GstStructure* config = gst_buffer_pool_get_config(pool_.get());
    GstCaps* pool_caps = gst_video_info_to_caps(&info_);
    gst_buffer_pool_config_set_params(config, pool_caps, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info_)), 2, 0);
    gst_caps_unref(pool_caps);
    if (!gst_buffer_pool_set_config(pool_.get(), config) || !gst_buffer_pool_set_active(pool_.get(), TRUE))
        return make_error(StatusCode::INTERNAL, "{}: the frame buffer pool could not be set up", path);

    bus_.reset(gst_element_get_bus(pipe));
    if (gst_element_set_state(pipe, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
        LOOM_TRY(check_bus(kPoll));
        return make_error(StatusCode::IO_ERROR, "{}: GStreamer could not start the writer", path);
    }
    LOOM_TRY(check_bus(0));
    log::info(kLog, "{}: writing {}x{} {} with {} into {} (GStreamer){}", path, layout_.width, layout_.height,
              pixel_format_name(layout_.format), encoder_desc, muxer_desc,
              copy_ ? ", copying the source's audio and subtitles" : "");
    return {};
}

}  // namespace

Result<std::unique_ptr<ReaderBackend>> open_gst_reader(const std::string& path, const ReaderOptions& options) {
    return GstReader::open(path, options);
}

Result<std::unique_ptr<WriterBackend>> open_gst_writer(const std::string& path, const VideoInfo& source,
                                                       const FrameLayout& layout, const ColorInfo& color,
                                                       const WriterOptions& options) {
    return GstWriter::open(path, source, layout, color, options);
}

}  // namespace loom::preprocess
