// The loomrestore element (gstreamer/) in real GStreamer pipelines and in GStreamer's test
// harness, the plugin loaded from the file the build made (LOOM_GST_PLUGIN): every frame comes out
// once, in order, with its timestamps, at scale x the size, equal to the restore engine run
// alone on the same frames; each caps format; a format change asked for downstream; caps
// renegotiated mid-stream; negotiation, model and state errors on the bus naming the reason; a
// flushing seek and EOS; the latency it adds; its figures; its trace. The model is the tiny x2
// network the engine tests use.
#include <gst/app/gstappsink.h>
#include <gst/check/gstharness.h>
#include <gst/gst.h>
#include <gst/video/video.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "common/frame.hpp"
#include "restore/context.hpp"
#include "restore/engine.hpp"
#include "test_util.hpp"
#include "tiny_model.hpp"

namespace loom {
namespace {

using test::TempDir;

struct Format {
    const char* gst;
    PixelFormat loom;
};
constexpr Format kFormats[] = {{"I420", PixelFormat::YUV420P},        {"NV12", PixelFormat::NV12},
                               {"I420_10LE", PixelFormat::YUV420P10}, {"P010_10LE", PixelFormat::P010},
                               {"RGB", PixelFormat::RGB24},           {"BGR", PixelFormat::BGR24}};

// A frame of seeded samples in the limited range of `l`'s format, laid out tight.
std::vector<uint8_t> random_frame(const FrameLayout& l, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> f(l.bytes());
    if (bit_depth(l.format) == 8) {
        std::uniform_int_distribution<int> v(16, 235);
        for (uint8_t& x : f) x = static_cast<uint8_t>(v(rng));
    } else {
        std::uniform_int_distribution<int> v(64, 940);
        const int shift = l.format == PixelFormat::P010 ? 6 : 0;
        for (size_t i = 0; i + 1 < f.size(); i += 2) {
            const auto s = static_cast<uint16_t>(v(rng) << shift);
            std::memcpy(&f[i], &s, 2);
        }
    }
    return f;
}

// The element's output buffer's planes, tight (the element may write strided rows).
std::vector<uint8_t> tight_copy(GstBuffer* buffer, GstCaps* caps, const FrameLayout& l) {
    GstVideoInfo info;
    EXPECT_TRUE(gst_video_info_from_caps(&info, caps));
    GstVideoFrame f;
    EXPECT_TRUE(gst_video_frame_map(&f, &info, buffer, GST_MAP_READ));
    std::vector<uint8_t> out(l.bytes());
    const FrameView v = FrameView::tight(l, out.data());
    for (int p = 0; p < v.planes(); ++p)
        for (int64_t r = 0; r < v.plane_rows(p); ++r)
            std::memcpy(out.data() + (v.plane[p] - out.data()) + r * v.stride[p],
                        static_cast<const uint8_t*>(GST_VIDEO_FRAME_PLANE_DATA(&f, p)) +
                            r * GST_VIDEO_FRAME_PLANE_STRIDE(&f, p),
                        v.plane_row_bytes(p));
    gst_video_frame_unmap(&f);
    return out;
}

class LoomRestore : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        gst_init(nullptr, nullptr);
        GError* error = nullptr;
        GstPlugin* plugin = gst_plugin_load_file(LOOM_GST_PLUGIN, &error);
        ASSERT_NE(plugin, nullptr) << LOOM_GST_PLUGIN << ": " << (error ? error->message : "?");
        gst_object_unref(plugin);
    }
    LoomRestore() { test::write_tiny_x2(dir, "tiny", 7); }

    std::string element(const std::string& extra = "") const {
        return "loomrestore model=tiny models-dir=" + dir.file("") + " cache-dir=" + dir.file("cache") + " " + extra;
    }

    // The frames restored by the engine alone (no GStreamer), on a context of its own.
    std::vector<std::vector<uint8_t>> reference(const std::vector<std::vector<uint8_t>>& frames, const FrameLayout& l,
                                                PixelFormat out_format) const {
        restore::ContextOptions co;
        auto ctx = restore::DeviceContext::create(co);
        EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
        restore::EngineOptions o;
        o.model.model = "tiny";
        o.model.models_dir = dir.file("");
        o.model.where = "reference";
        o.output_format = out_format;
        auto e = restore::Engine::create(*ctx, o, {l, kBt709});
        EXPECT_TRUE(e.ok()) << e.status().to_string();
        std::vector<std::vector<uint8_t>> out(frames.size());
        for (size_t i = 0; i < frames.size(); ++i) {
            out[i].resize((*e)->output_format().layout.bytes());
            EXPECT_TRUE((*e)->submit(
                                FrameView::tight(l, frames[i].data()),
                                [](restore::RestoredFrame f) { EXPECT_TRUE(f.status.ok()) << f.status.to_string(); },
                                out[i].data())
                            .ok());
        }
        (*e)->flush();
        return out;
    }

    static constexpr ColorInfo kBt709{ColorMatrix::BT709, ColorRange::LIMITED, 1, 1};
    TempDir dir;
};

// A harness around one loomrestore, its source caps set.
GstHarness* harness(const std::string& description, const std::string& caps) {
    GstHarness* h = gst_harness_new_parse(description.c_str());
    EXPECT_NE(h, nullptr);
    gst_harness_set_src_caps_str(h, caps.c_str());
    return h;
}

std::string caps_of(const char* format, int w, int h) {
    return fmt::format("video/x-raw,format={},width={},height={},framerate=25/1,colorimetry=bt709", format, w, h);
}

// A tight frame as a buffer, its planes described by a video meta (GStreamer's default layout
// pads rows to 4 bytes; a decoder's frames have strides of their own).
GstBuffer* buffer_of(const std::vector<uint8_t>& frame, int index, const FrameLayout& l) {
    GstBuffer* b = gst_buffer_new_memdup(frame.data(), frame.size());
    const FrameView v = FrameView::tight(l, frame.data());
    gsize offset[GST_VIDEO_MAX_PLANES] = {};
    gint stride[GST_VIDEO_MAX_PLANES] = {};
    for (int p = 0; p < v.planes(); ++p) {
        offset[p] = static_cast<gsize>(v.plane[p] - frame.data());
        stride[p] = static_cast<gint>(v.stride[p]);
    }
    GstVideoFormat f = GST_VIDEO_FORMAT_UNKNOWN;
    for (const Format& x : kFormats)
        if (x.loom == l.format) f = gst_video_format_from_string(x.gst);
    gst_buffer_add_video_meta_full(b, GST_VIDEO_FRAME_FLAG_NONE, f, static_cast<guint>(l.width),
                                   static_cast<guint>(l.height), static_cast<guint>(v.planes()), offset, stride);
    GST_BUFFER_PTS(b) = static_cast<GstClockTime>(index) * GST_SECOND / 25;
    GST_BUFFER_DURATION(b) = GST_SECOND / 25;
    return b;
}

// Every frame of every format comes out once, in order, with its timestamps, x2, equal to the
// engine run alone; the element's figures count them.
TEST_F(LoomRestore, EveryFormatRestoresEveryFrameInOrderAsTheEngineAlone) {
    for (const Format& f : kFormats) {
        SCOPED_TRACE(f.gst);
        const FrameLayout l{f.loom, 30, 22};  // odd chroma rows: the planes' strides are not the width's half
        std::vector<std::vector<uint8_t>> frames;
        for (int i = 0; i < 7; ++i) frames.push_back(random_frame(l, 10 + i));
        GstHarness* h = harness(element("in-flight=3"), caps_of(f.gst, 30, 22));
        for (int i = 0; i < 7; ++i) ASSERT_EQ(gst_harness_push(h, buffer_of(frames[i], i, l)), GST_FLOW_OK);
        ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
        const auto want = reference(frames, l, f.loom);
        const FrameLayout out{f.loom, 60, 44};
        GstCaps* caps = gst_pad_get_current_caps(h->sinkpad);
        ASSERT_NE(caps, nullptr);
        GstVideoInfo info;
        ASSERT_TRUE(gst_video_info_from_caps(&info, caps));
        EXPECT_EQ(info.width, 60);
        EXPECT_EQ(info.height, 44);
        EXPECT_STREQ(gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(&info)), f.gst);
        EXPECT_EQ(info.colorimetry.matrix,
                  packed_rgb(f.loom) ? GST_VIDEO_COLOR_MATRIX_RGB : GST_VIDEO_COLOR_MATRIX_BT709);
        for (int i = 0; i < 7; ++i) {
            GstBuffer* b = gst_harness_pull(h);
            ASSERT_NE(b, nullptr) << "frame " << i;
            EXPECT_EQ(GST_BUFFER_PTS(b), static_cast<GstClockTime>(i) * GST_SECOND / 25) << "frame " << i;
            EXPECT_EQ(GST_BUFFER_DURATION(b), GST_SECOND / 25);
            EXPECT_TRUE(tight_copy(b, caps, out) == want[i]) << "frame " << i << " differs from the engine alone";
            gst_buffer_unref(b);
        }
        EXPECT_EQ(gst_harness_buffers_in_queue(h), 0u);
        guint64 frames_done = 0, h2d = 0, d2h = 0;
        GstElement* e = gst_harness_find_element(h, "loomrestore");
        g_object_get(e, "frames", &frames_done, "h2d-bytes", &h2d, "d2h-bytes", &d2h, nullptr);
        gst_object_unref(e);
        EXPECT_EQ(frames_done, 7u);
        EXPECT_EQ(h2d, 7 * l.bytes());
        EXPECT_EQ(d2h, 7 * out.bytes());
        gst_caps_unref(caps);
        gst_harness_teardown(h);
    }
}

// Downstream asks for another format (10-bit, packed RGB): the engine writes it.
TEST_F(LoomRestore, WritesTheFormatDownstreamAsksFor) {
    const FrameLayout l{PixelFormat::YUV420P, 32, 24};
    std::vector<std::vector<uint8_t>> frames = {random_frame(l, 1), random_frame(l, 2)};
    for (const Format& out : {kFormats[3], kFormats[4]}) {
        SCOPED_TRACE(out.gst);
        GstHarness* h = harness(element(), caps_of("I420", 32, 24));
        gst_harness_set_sink_caps_str(h, fmt::format("video/x-raw,format={}", out.gst).c_str());
        for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_harness_push(h, buffer_of(frames[i], i, l)), GST_FLOW_OK);
        ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
        const auto want = reference(frames, l, out.loom);
        GstCaps* caps = gst_pad_get_current_caps(h->sinkpad);
        ASSERT_NE(caps, nullptr);
        GstVideoInfo info;
        ASSERT_TRUE(gst_video_info_from_caps(&info, caps));
        EXPECT_STREQ(gst_video_format_to_string(GST_VIDEO_INFO_FORMAT(&info)), out.gst);
        for (int i = 0; i < 2; ++i) {
            GstBuffer* b = gst_harness_pull(h);
            ASSERT_NE(b, nullptr);
            EXPECT_TRUE(tight_copy(b, caps, {out.loom, 64, 48}) == want[i]) << "frame " << i;
            gst_buffer_unref(b);
        }
        gst_caps_unref(caps);
        gst_harness_teardown(h);
    }
}

// New caps mid-stream: the frames before them come out at the old size, the next at the new.
TEST_F(LoomRestore, RenegotiatesANewSizeMidStream) {
    GstHarness* h = harness(element(), caps_of("I420", 32, 24));
    const FrameLayout a{PixelFormat::YUV420P, 32, 24}, b{PixelFormat::YUV420P, 20, 16};
    for (int i = 0; i < 2; ++i) ASSERT_EQ(gst_harness_push(h, buffer_of(random_frame(a, i), i, a)), GST_FLOW_OK);
    gst_harness_set_src_caps_str(h, caps_of("I420", 20, 16).c_str());
    for (int i = 2; i < 4; ++i) ASSERT_EQ(gst_harness_push(h, buffer_of(random_frame(b, i), i, b)), GST_FLOW_OK);
    ASSERT_TRUE(gst_harness_push_event(h, gst_event_new_eos()));
    for (int i = 0; i < 4; ++i) {
        GstBuffer* out = gst_harness_pull(h);
        ASSERT_NE(out, nullptr);
        const FrameLayout want = i < 2 ? FrameLayout{PixelFormat::YUV420P, 64, 48}
                                       : FrameLayout{PixelFormat::YUV420P, 40, 32};
        EXPECT_EQ(gst_buffer_get_size(out), want.bytes()) << "frame " << i;
        EXPECT_EQ(GST_BUFFER_PTS(out), static_cast<GstClockTime>(i) * GST_SECOND / 25);
        gst_buffer_unref(out);
    }
    gst_harness_teardown(h);
}

// A pipeline run to its end or its first error; returns the error's text (empty: EOS).
std::string run_pipeline(GstElement* pipeline, GstStateChangeReturn* change = nullptr) {
    const GstStateChangeReturn r = gst_element_set_state(pipeline, GST_STATE_PLAYING);
    if (change) *change = r;
    GstBus* bus = gst_element_get_bus(pipeline);
    GstMessage* m = gst_bus_timed_pop_filtered(bus, 60 * GST_SECOND,
                                               static_cast<GstMessageType>(GST_MESSAGE_EOS | GST_MESSAGE_ERROR));
    std::string text;
    if (!m) {
        text = "timeout";
    } else if (GST_MESSAGE_TYPE(m) == GST_MESSAGE_ERROR) {
        GError* e = nullptr;
        gchar* debug = nullptr;
        gst_message_parse_error(m, &e, &debug);
        text = std::string(e->message) + " | " + (debug ? debug : "");
        g_error_free(e);
        g_free(debug);
    }
    if (m) gst_message_unref(m);
    gst_object_unref(bus);
    gst_element_set_state(pipeline, GST_STATE_NULL);
    return text;
}

GstElement* parse(const std::string& description) {
    GError* e = nullptr;
    GstElement* p = gst_parse_launch(description.c_str(), &e);
    EXPECT_EQ(e, nullptr) << (e ? e->message : "");
    if (e) g_error_free(e);
    return p;
}

// A size downstream cannot take, a frame past Loom's largest, a missing, a corrupt and an absent
// model: each an error on the bus that names the reason, the application left running.
TEST_F(LoomRestore, ErrorsGoOnTheBusNamingTheReason) {
    const std::string src = "videotestsrc num-buffers=3 ! video/x-raw,format=I420,width=64,height=48 ! ";
    struct Case {
        std::string description, want;
    };
    dir.write("bad.param", "7767517\n1 1\nthis is not a layer\n");
    const std::vector<Case> cases = {
        {src + element() + " ! video/x-raw,width=100 ! fakesink", "downstream takes none of that"},
        {"videotestsrc num-buffers=1 ! video/x-raw,width=9000,height=16 ! " + element() + " ! fakesink",
         "over the largest frame Loom takes"},
        {src + "loomrestore model=nosuch models-dir=" + dir.file("") + " ! fakesink", "model nosuch not found"},
        {src + "loomrestore model=" + dir.file("bad.param") + " ! fakesink", "cannot be read as a restoration model"},
        {src + "loomrestore ! fakesink", "no model"},
        {src + element("device=nosuch") + " ! fakesink", "device nosuch"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.description);
        GstElement* p = parse(c.description);
        ASSERT_NE(p, nullptr);
        const std::string error = run_pipeline(p);
        EXPECT_NE(error.find(c.want), std::string::npos) << error;
        gst_object_unref(p);
    }
    // The corrupt model's error names its file.
    GstElement* p = parse(src + "loomrestore model=" + dir.file("bad.param") + " ! fakesink");
    EXPECT_NE(run_pipeline(p).find("bad.param"), std::string::npos);
    gst_object_unref(p);
}

// A flushing seek mid-stream: the frames from the seek on come out once each, in order, and EOS
// brings every frame in flight.
TEST_F(LoomRestore, AFlushingSeekAndEosGiveEveryFrameOnce) {
    GstElement* p = parse("videotestsrc is-live=false ! video/x-raw,format=I420,width=32,height=24,framerate=25/1 ! " +
                          element("in-flight=4") + " ! appsink name=out sync=false max-buffers=4");
    ASSERT_NE(p, nullptr);
    GstElement* sink = gst_bin_get_by_name(GST_BIN(p), "out");
    ASSERT_EQ(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_ASYNC);
    ASSERT_EQ(gst_element_get_state(p, nullptr, nullptr, 30 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
    // From 0 to 1 s first.
    ASSERT_TRUE(gst_element_seek(p, 1.0, GST_FORMAT_TIME,
                                 static_cast<GstSeekFlags>(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_ACCURATE),
                                 GST_SEEK_TYPE_SET, 0, GST_SEEK_TYPE_SET, GST_SECOND));
    gst_element_set_state(p, GST_STATE_PLAYING);
    for (int i = 0; i < 10; ++i) {
        GstSample* s = gst_app_sink_pull_sample(GST_APP_SINK(sink));
        ASSERT_NE(s, nullptr);
        EXPECT_EQ(GST_BUFFER_PTS(gst_sample_get_buffer(s)), static_cast<GstClockTime>(i) * GST_SECOND / 25);
        gst_sample_unref(s);
    }
    // Mid-stream, with frames in flight: to 2 s .. 3 s.
    ASSERT_TRUE(gst_element_seek(p, 1.0, GST_FORMAT_TIME,
                                 static_cast<GstSeekFlags>(GST_SEEK_FLAG_FLUSH | GST_SEEK_FLAG_ACCURATE),
                                 GST_SEEK_TYPE_SET, 2 * GST_SECOND, GST_SEEK_TYPE_SET, 3 * GST_SECOND));
    std::vector<GstClockTime> pts;
    while (GstSample* s = gst_app_sink_pull_sample(GST_APP_SINK(sink))) {
        pts.push_back(GST_BUFFER_PTS(gst_sample_get_buffer(s)));
        gst_sample_unref(s);
    }
    EXPECT_TRUE(gst_app_sink_is_eos(GST_APP_SINK(sink)));
    ASSERT_EQ(pts.size(), 25u);
    for (size_t i = 0; i < pts.size(); ++i)
        EXPECT_EQ(pts[i], 2 * GST_SECOND + static_cast<GstClockTime>(i) * GST_SECOND / 25) << "frame " << i;
    gst_element_set_state(p, GST_STATE_NULL);
    gst_object_unref(sink);
    gst_object_unref(p);
}

// The latency query adds in-flight frame durations; the trace is written at EOS.
TEST_F(LoomRestore, AnswersItsLatencyAndWritesItsTraceAtEos) {
    const std::string trace = dir.file("trace.json");
    GstElement* p = parse("videotestsrc num-buffers=5 ! video/x-raw,format=I420,width=32,height=24,framerate=25/1 ! " +
                          element("in-flight=3 name=restore trace=" + trace) + " ! fakesink name=out");
    ASSERT_NE(p, nullptr);
    ASSERT_EQ(gst_element_set_state(p, GST_STATE_PAUSED), GST_STATE_CHANGE_ASYNC);
    ASSERT_EQ(gst_element_get_state(p, nullptr, nullptr, 30 * GST_SECOND), GST_STATE_CHANGE_SUCCESS);
    GstElement* restore = gst_bin_get_by_name(GST_BIN(p), "restore");
    GstPad* src = gst_element_get_static_pad(restore, "src");
    GstPad* sink = gst_element_get_static_pad(restore, "sink");
    auto latency = [](GstPad* pad, bool peer) {
        GstQuery* q = gst_query_new_latency();
        EXPECT_TRUE(peer ? gst_pad_peer_query(pad, q) : gst_pad_query(pad, q));
        gboolean live = TRUE;
        GstClockTime min = 0, max = 0;
        gst_query_parse_latency(q, &live, &min, &max);
        gst_query_unref(q);
        return min;
    };
    EXPECT_EQ(latency(src, false) - latency(sink, true), 3 * GST_SECOND / 25);  // over upstream's own
    gst_object_unref(sink);
    gst_object_unref(src);
    gst_object_unref(restore);
    EXPECT_EQ(run_pipeline(p), "");
    gst_object_unref(p);
    ASSERT_TRUE(std::filesystem::exists(trace));
    EXPECT_GT(std::filesystem::file_size(trace), 100u);
}

}  // namespace
}  // namespace loom
