// Media I/O (preprocess/media_io.hpp) against the ffmpeg and ffprobe programs on small clips made
// by the ffmpeg program in a temporary folder: frame counts and pixels against ffmpeg's own
// decode (exact), pts against ffprobe's (exact), an ffv1 round trip (bit-exact frames, same
// pts), stream copy (audio and subtitle packets hashed with framemd5, equal), colour and
// metadata tags, corrupt and truncated input, limits, the temporary file, hwaccel fallback and
// bad paths; segments: keyframes against ffprobe's, segment reads against one full read,
// ffv1 segments joined against a one-run file (frames, pts, audio and subtitle packets), join
// refusals. The GStreamer back end (where the build has it) against the FFmpeg one: the same
// frames, times and colour on Matroska, MP4, AVI, 10-bit and odd sizes; its writer's frames,
// times, colour tags and copied audio and subtitles against the source. Skipped when the ffmpeg
// program is absent.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "preprocess/media_io.hpp"

extern "C" {
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/mastering_display_metadata.h>
}

namespace test_media_io {  // this file's names, apart from the rest of its unity batch

namespace {

namespace fs = std::filesystem;
using loom::ColorMatrix;
using loom::ColorRange;
using loom::FrameLayout;
using loom::PixelFormat;
using loom::StatusCode;
using namespace loom::preprocess;

// Returns the stdout of `command` (stderr not captured).
std::string capture(const std::string& command) {
    std::string out;
    FILE* p = ::popen(command.c_str(), "r");
    if (!p) return out;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
    return out;
}

bool run(const std::string& command) { return std::system(command.c_str()) == 0; }

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// The ffmpeg program's decode of the first video stream as raw frames, timestamps untouched.
std::string ffmpeg_raw(const std::string& path, const std::string& pix_fmt) {
    return capture("ffmpeg -v error -i " + quoted(path) + " -map 0:v:0 -fps_mode passthrough -f rawvideo -pix_fmt " +
                   pix_fmt + " -");
}

std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
        if (!l.empty()) out.push_back(l);
    return out;
}

// ffprobe's entries for the first video stream, one string per frame.
std::vector<std::string> probe_frames(const std::string& path, const std::string& entry) {
    return lines(capture("ffprobe -v error -select_streams v:0 -show_entries frame=" + entry + " -of default=nw=1:nk=1 " +
                         quoted(path)));
}

// ffprobe's `key=value` pairs for `entries` (e.g. "stream=color_space:format_tags").
std::map<std::string, std::string> probe(const std::string& path, const std::string& select, const std::string& entries) {
    std::map<std::string, std::string> out;
    for (const auto& l : lines(capture("ffprobe -v error " + select + " -show_entries " + entries +
                                       " -of default=nw=1 " + quoted(path)))) {
        auto eq = l.find('=');
        if (eq != std::string::npos) out[l.substr(0, eq)] = l.substr(eq + 1);
    }
    return out;
}

// Packet hashes and timestamps of the streams `map` selects, copied as they are.
std::string packet_hashes(const std::string& path, const std::string& map) {
    return capture("ffmpeg -v error -i " + quoted(path) + " -map " + map + " -c copy -f framemd5 -");
}

struct Decoded {
    loom::Status status;
    VideoInfo info;
    DecodeStats stats;
    std::vector<std::vector<uint8_t>> frames;
    std::vector<FrameMeta> metas;
    std::string joined() const {
        std::string all;
        for (const auto& f : frames) all.append(reinterpret_cast<const char*>(f.data()), f.size());
        return all;
    }
};

Decoded read_all(const std::string& path, const ReaderOptions& options = {}) {
    Decoded d;
    auto reader = MediaReader::open(path, options);
    if (!reader.ok()) {
        d.status = reader.status();
        return d;
    }
    d.info = (*reader)->info();
    std::vector<uint8_t> buf(d.info.layout.bytes());
    for (;;) {
        FrameMeta meta;
        auto more = (*reader)->read(buf.data(), buf.size(), meta);
        if (!more.ok()) {
            d.status = more.status();
            break;
        }
        if (!*more) break;
        d.frames.push_back(buf);
        d.metas.push_back(meta);
    }
    d.stats = (*reader)->stats();
    return d;
}

// Writes every frame of `path` (read with `read_options`) to `out` with `options`; returns the
// writer's stats.
EncodeStats transcode(const std::string& path, const std::string& out, WriterOptions options,
                      const ReaderOptions& read_options = {}) {
    auto reader = MediaReader::open(path, read_options);
    EXPECT_TRUE(reader.ok()) << reader.status().to_string();
    if (!reader.ok()) return {};
    const VideoInfo& info = (*reader)->info();
    options.pixel_format = info.layout.format;
    auto writer = MediaWriter::open(out, info, info.layout, info.color, options);
    EXPECT_TRUE(writer.ok()) << writer.status().to_string();
    if (!writer.ok()) return {};
    std::vector<uint8_t> buf(info.layout.bytes());
    FrameMeta meta;
    for (;;) {
        auto more = (*reader)->read(buf.data(), buf.size(), meta);
        EXPECT_TRUE(more.ok()) << more.status().to_string();
        if (!more.ok() || !*more) break;
        auto st = (*writer)->write(buf.data(), buf.size(), meta);
        EXPECT_TRUE(st.ok()) << st.to_string();
        if (!st.ok()) return {};
    }
    auto st = (*writer)->finish();
    EXPECT_TRUE(st.ok()) << st.to_string();
    return (*writer)->stats();
}

// Captures Loom's log lines while alive.
class LogCapture {
public:
    LogCapture() : previous_(spdlog::default_logger()) {
        auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text_);
        auto logger = std::make_shared<spdlog::logger>("media_io_test_capture", sink);
        logger->set_level(spdlog::level::info);
        spdlog::set_default_logger(logger);
    }
    ~LogCapture() {
        spdlog::set_default_logger(previous_);
        spdlog::drop("media_io_test_capture");
    }
    std::string text() const { return text_.str(); }

private:
    std::ostringstream text_;
    std::shared_ptr<spdlog::logger> previous_;
};

class MediaIo : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        available_ = run("ffmpeg -version >/dev/null 2>&1") && run("ffprobe -version >/dev/null 2>&1");
        ReaderOptions o;
        o.backend = "gstreamer";
        auto r = MediaReader::open("/nonexistent", o);
        gstreamer_ = r.status().message().find("this build has no GStreamer") == std::string::npos;
        dir_ = fs::temp_directory_path() / ("loom_media_io_" + std::to_string(::getpid()));
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    void SetUp() override {
        if (!available_) GTEST_SKIP() << "the ffmpeg program is not installed";
        work_ = dir_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
        fs::create_directories(work_);
    }

    // Returns the path of the clip `name`, made by ffmpeg with `args` on first use.
    static std::string clip(const std::string& name, const std::string& args) {
        const fs::path p = dir_ / name;
        if (!fs::exists(p)) {
            const std::string cmd = "cd " + quoted(dir_.string()) + " && ffmpeg -v error -y " + args + " " + quoted(p.string());
            EXPECT_TRUE(run(cmd)) << cmd;
        }
        return p.string();
    }
    static std::string src(const std::string& size = "160x120") {
        return "-f lavfi -i testsrc2=size=" + size + ":rate=25";
    }
    // 2 s of H.264 with B-frames, AAC audio, SubRip subtitles, BT.601 tags and metadata.
    static std::string av_clip() {
        std::ofstream(dir_ / "subs.srt") << "1\n00:00:00,200 --> 00:00:00,900\nHello Loom\n\n"
                                            "2\n00:00:01,000 --> 00:00:01,600\nSecond line\n";
        return clip("av.mkv", src() +
                                  " -f lavfi -i sine=frequency=440:sample_rate=48000 -i subs.srt -t 2 -map 0 -map 1 -map 2"
                                  " -c:v libx264 -preset veryfast -c:a aac -c:s srt -color_primaries bt470bg"
                                  " -color_trc smpte170m -colorspace smpte170m -color_range tv"
                                  " -metadata LOOM_NOTE=kept -metadata:s:v:0 title=pictures");
    }
    // Variable frame rate H.264 with B-frames: frame n at (0.04 n + 0.001 n^2) s.
    static std::string vfr_clip() {
        return clip("vfr.mkv", src() + " -t 2 -vf \"setpts='(N*0.04+N*N*0.001)/TB'\" -fps_mode vfr -c:v libx264"
                                       " -preset veryfast");
    }
    // 3 s of H.264 with a closed GOP every 25 frames (no scene-cut keyframes) and 2 B-frames,
    // AAC audio and SubRip subtitles: the source of the segment tests.
    static std::string seg_clip() {
        std::ofstream(dir_ / "seg.srt") << "1\n00:00:00,300 --> 00:00:00,700\nFirst\n\n"
                                           "2\n00:00:01,100 --> 00:00:01,500\nSecond\n\n"
                                           "3\n00:00:02,500 --> 00:00:02,900\nThird\n";
        return clip("seg.mkv", src() +
                                   " -f lavfi -i sine=frequency=440:sample_rate=48000 -i seg.srt -t 3 -map 0 -map 1 -map 2"
                                   " -c:v libx264 -preset veryfast -g 25 -keyint_min 25 -sc_threshold 0 -bf 2"
                                   " -c:a aac -c:s srt -colorspace bt709 -color_primaries bt709 -color_trc bt709"
                                   " -metadata LOOM_NOTE=kept");
    }
    std::string out(const std::string& name) const { return (work_ / name).string(); }

    static inline bool available_ = false, gstreamer_ = false;
    static inline fs::path dir_;
    fs::path work_;
};

TEST_F(MediaIo, FrameCountFromDecodingAndPixelsEqualFfmpegDecode) {
    const std::string path = av_clip();
    Decoded d = read_all(path);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_EQ(d.frames.size(), probe_frames(path, "pts").size());
    EXPECT_EQ(d.stats.frames, 50);
    EXPECT_EQ(d.stats.decode_errors, 0);
    EXPECT_EQ(d.info.codec, "h264");
    EXPECT_NE(d.info.container.find("matroska"), std::string::npos);
    EXPECT_EQ(d.info.layout, (FrameLayout{PixelFormat::YUV420P, 160, 120}));
    EXPECT_EQ(d.info.streams, 3);
    EXPECT_EQ(d.info.time_base.num, 1);
    EXPECT_EQ(d.info.time_base.den, 1000);
    EXPECT_EQ(d.info.decoder, "h264");
    EXPECT_TRUE(d.metas.front().keyframe);
    EXPECT_EQ(d.metas.front().duration, 40);
    EXPECT_TRUE(d.joined() == ffmpeg_raw(path, "yuv420p")) << "pixels differ from the ffmpeg program's decode";
}

TEST_F(MediaIo, ColourFromStreamTagsAndFfmpegDefaultsWhenUntagged) {
    Decoded tagged = read_all(av_clip());
    ASSERT_TRUE(tagged.status.ok()) << tagged.status.to_string();
    EXPECT_EQ(tagged.info.color.matrix, ColorMatrix::BT601);
    EXPECT_EQ(tagged.info.color.range, ColorRange::LIMITED);
    EXPECT_EQ(tagged.info.color.primaries, 5);  // bt470bg
    EXPECT_EQ(tagged.info.color.transfer, 6);   // smpte170m
    EXPECT_EQ(tagged.info.color_matrix_code, 6);

    auto big = read_all(clip("untagged720.mkv", "-f lavfi -i testsrc2=size=1280x720:rate=25 -frames:v 2 -c:v ffv1"));
    ASSERT_TRUE(big.status.ok()) << big.status.to_string();
    EXPECT_EQ(big.info.color.matrix, ColorMatrix::BT709);
    EXPECT_EQ(big.info.color.range, ColorRange::LIMITED);
    EXPECT_EQ(big.info.color.primaries, 2);

    auto full = read_all(clip("full.avi", src() + " -frames:v 3 -pix_fmt yuvj420p -c:v mjpeg"));
    ASSERT_TRUE(full.status.ok()) << full.status.to_string();
    EXPECT_EQ(full.info.layout.format, PixelFormat::YUV420P);
    EXPECT_EQ(full.info.color.matrix, ColorMatrix::BT601);
    EXPECT_EQ(full.info.color.range, ColorRange::FULL);
}

TEST_F(MediaIo, PtsOfEveryFrameEqualFfprobeOnVariableFrameRate) {
    const std::string path = vfr_clip();
    Decoded d = read_all(path);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    const auto expected = probe_frames(path, "pts");
    ASSERT_EQ(d.metas.size(), expected.size());
    ASSERT_GT(d.metas.size(), 10u);
    std::vector<std::string> got;
    for (const auto& m : d.metas) got.push_back(std::to_string(m.pts));
    EXPECT_EQ(got, expected);
    EXPECT_NE(d.metas[2].pts - d.metas[1].pts, d.metas[20].pts - d.metas[19].pts) << "the clip is not variable rate";
}

TEST_F(MediaIo, TenBitDeliveredAsYuv420p10Exactly) {
    const std::string path = clip("ten.mkv", src() + " -frames:v 8 -pix_fmt yuv420p10le -c:v ffv1");
    Decoded d = read_all(path);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_EQ(d.info.layout.format, PixelFormat::YUV420P10);
    EXPECT_EQ(d.frames.size(), 8u);
    EXPECT_TRUE(d.joined() == ffmpeg_raw(path, "yuv420p10le"));
}

TEST_F(MediaIo, OddSizeChromaIsCeilHalf) {
    // testsrc, not testsrc2: the latter rounds odd sizes down.
    const std::string path = clip("odd.mkv", "-f lavfi -i testsrc=size=161x121:rate=25 -frames:v 6 -pix_fmt yuv420p -c:v ffv1");
    Decoded d = read_all(path);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_EQ(d.info.layout, (FrameLayout{PixelFormat::YUV420P, 161, 121}));
    EXPECT_EQ(d.info.layout.bytes(), 161u * 121 + 2u * 81 * 61);
    EXPECT_TRUE(d.joined() == ffmpeg_raw(path, "yuv420p"));
}

TEST_F(MediaIo, Yuv422ConvertedBySwscaleWithLumaAndColourKept) {
    const std::string path = clip("y422.mkv", src() + " -frames:v 4 -pix_fmt yuv422p -c:v ffv1");
    Decoded d = read_all(path);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_EQ(d.info.layout.format, PixelFormat::YUV420P);
    EXPECT_NE(d.info.decoder.find("swscale yuv422p -> yuv420p"), std::string::npos) << d.info.decoder;
    EXPECT_EQ(d.info.color.matrix, ColorMatrix::BT601);
    EXPECT_EQ(d.info.color.range, ColorRange::LIMITED);
    ASSERT_EQ(d.frames.size(), 4u);
    // Luma passes through untouched; each 4:2:0 chroma sample is near the mean of the two 4:2:2
    // rows it replaces (swscale's bicubic vertical filter: mean error under 2 levels).
    const std::string ref = ffmpeg_raw(path, "yuv422p");
    const size_t luma = 160 * 120, chroma422 = 80 * 120;
    ASSERT_EQ(ref.size(), 4 * (luma + 2 * chroma422));
    double err = 0;
    size_t count = 0;
    for (size_t f = 0; f < 4; ++f) {
        const auto* r = reinterpret_cast<const uint8_t*>(ref.data()) + f * (luma + 2 * chroma422);
        const auto& got = d.frames[f];
        ASSERT_EQ(std::memcmp(got.data(), r, luma), 0) << "luma changed in frame " << f;
        for (size_t plane = 0; plane < 2; ++plane)
            for (size_t y = 0; y < 60; ++y)
                for (size_t x = 0; x < 80; ++x) {
                    const uint8_t* rp = r + luma + plane * chroma422;
                    const double mean = (rp[(2 * y) * 80 + x] + rp[(2 * y + 1) * 80 + x]) / 2.0;
                    err += std::abs(got[luma + plane * 80 * 60 + y * 80 + x] - mean);
                    ++count;
                }
    }
    EXPECT_LT(err / static_cast<double>(count), 2.0);
}

// Writes `frames` of `layout` (pts 0, 40, ...) to an ffv1 file at `dst`.
void write_frames(const std::string& dst, const VideoInfo& source, const FrameLayout& layout,
                  const std::vector<std::vector<uint8_t>>& frames) {
    WriterOptions options;
    options.codec = "ffv1";
    options.pixel_format = layout.format;
    auto writer = MediaWriter::open(dst, source, layout, source.color, options);
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    for (size_t i = 0; i < frames.size(); ++i) {
        FrameMeta meta;
        meta.index = static_cast<int64_t>(i);
        meta.pts = 40 * meta.index;
        ASSERT_TRUE((*writer)->write(frames[i].data(), frames[i].size(), meta).ok());
    }
    ASSERT_TRUE((*writer)->finish().ok());
}

// A counting allocator for ReaderOptions::frame_memory.
std::atomic<int64_t> g_blocks_allocated{0}, g_blocks_freed{0};
void* counting_alloc(size_t bytes) {
    ++g_blocks_allocated;
    return ::operator new(bytes, std::align_val_t(64));
}
void counting_free(void* p) {
    ++g_blocks_freed;
    ::operator delete(p, std::align_val_t(64));
}

TEST_F(MediaIo, ViewsOfDecodedPicturesEqualCopiedReadsAndOutliveTheReader) {
    // Every delivery path: the decoder's own picture (h264, DR1: into frame_memory, rows padded
    // to 64 bytes), ffv1 at an odd size and at 10 bits, NV12 raw video, and a picture converted
    // by swscale (4:2:2). All views are held until the reader is gone, then compared with the
    // copying read: a later read must never write into a picture a view holds.
    struct Case {
        std::string path;
        bool decoder_memory;  // the decoder writes into frame_memory (pinned views)
    };
    const std::vector<Case> cases = {
        {av_clip(), true},
        {clip("odd.mkv", "-f lavfi -i testsrc=size=161x121:rate=25 -frames:v 6 -pix_fmt yuv420p -c:v ffv1"), true},
        {clip("ten.mkv", src() + " -frames:v 8 -pix_fmt yuv420p10le -c:v ffv1"), true},
        {clip("nv12.nut", src() + " -frames:v 3 -pix_fmt nv12 -c:v rawvideo"), false},
        {clip("y422.mkv", src() + " -frames:v 4 -pix_fmt yuv422p -c:v ffv1"), false},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.path);
        const Decoded copied = read_all(c.path);
        ASSERT_TRUE(copied.status.ok()) << copied.status.to_string();
        g_blocks_allocated = 0;
        g_blocks_freed = 0;
        ReaderOptions options;
        options.frame_memory = {&counting_alloc, &counting_free, true};
        std::vector<loom::FrameView> views;
        std::vector<FrameMeta> metas;
        {
            auto reader = MediaReader::open(c.path, options);
            ASSERT_TRUE(reader.ok()) << reader.status().to_string();
            for (;;) {
                loom::FrameView v;
                FrameMeta meta;
                auto more = (*reader)->read(v, meta);
                ASSERT_TRUE(more.ok()) << more.status().to_string();
                if (!*more) break;
                EXPECT_TRUE(v.check().ok());
                EXPECT_EQ(v.layout, copied.info.layout);
                EXPECT_EQ(v.pinned, c.decoder_memory);
                views.push_back(std::move(v));
                metas.push_back(meta);
            }
        }
        ASSERT_EQ(views.size(), copied.frames.size());
        if (c.decoder_memory) {
            EXPECT_GT(g_blocks_allocated.load(), 0);
            EXPECT_FALSE(views.front().is_tight());  // rows are the decoder's, padded
        }
        for (size_t i = 0; i < views.size(); ++i) {
            std::vector<uint8_t> tight(views[i].layout.bytes());
            views[i].copy_to(tight.data());
            EXPECT_TRUE(tight == copied.frames[i]) << "frame " << i;
            EXPECT_EQ(metas[i].pts, copied.metas[i].pts);
            EXPECT_EQ(metas[i].index, copied.metas[i].index);
        }
        views.clear();
        EXPECT_EQ(g_blocks_freed.load(), g_blocks_allocated.load()) << "blocks leaked";
    }
}

TEST_F(MediaIo, ViewsReleasedAsTheyComeRecycleTheDecodersMemory) {
    // 50 frames, each view dropped before the next read: the blocks in use never exceed the
    // decoder's reference pictures and threads, whatever the clip's length.
    g_blocks_allocated = 0;
    g_blocks_freed = 0;
    ReaderOptions options;
    options.frame_memory = {&counting_alloc, &counting_free, true};
    options.threads = 2;
    int64_t frames = 0;
    {
        auto reader = MediaReader::open(av_clip(), options);
        ASSERT_TRUE(reader.ok()) << reader.status().to_string();
        loom::FrameView v;
        FrameMeta meta;
        for (;;) {
            auto more = (*reader)->read(v, meta);
            ASSERT_TRUE(more.ok()) << more.status().to_string();
            if (!*more) break;
            ++frames;
        }
    }
    EXPECT_EQ(frames, 50);
    EXPECT_GT(g_blocks_allocated.load(), 0) << "the decoder did not write into frame_memory";
    EXPECT_LE(g_blocks_allocated.load(), 24) << "pictures are not recycled";
    EXPECT_EQ(g_blocks_freed.load(), g_blocks_allocated.load());
}

TEST(FrameView, TightPaddedAndInvalidViews) {
    const FrameLayout l{PixelFormat::NV12, 5, 3};  // chroma 3x2, interleaved: 6 bytes a row
    std::vector<uint8_t> tight(l.bytes());
    for (size_t i = 0; i < tight.size(); ++i) tight[i] = static_cast<uint8_t>(i * 7 + 1);
    loom::FrameView t = loom::FrameView::tight(l, tight.data());
    EXPECT_TRUE(t.check().ok());
    EXPECT_TRUE(t.is_tight());
    EXPECT_EQ(t.planes(), 2);
    EXPECT_EQ(t.plane_row_bytes(1), 6u);
    // The same pixels with 16-byte rows and planes apart.
    std::vector<uint8_t> y(16 * 3, 0xEE), uv(16 * 2, 0xEE);
    for (int r = 0; r < 3; ++r) std::memcpy(&y[16 * static_cast<size_t>(r)], &tight[5 * static_cast<size_t>(r)], 5);
    for (int r = 0; r < 2; ++r) std::memcpy(&uv[16 * static_cast<size_t>(r)], &tight[15 + 6 * static_cast<size_t>(r)], 6);
    loom::FrameView padded;
    padded.layout = l;
    padded.plane = {y.data(), uv.data(), nullptr};
    padded.stride = {16, 16, 0};
    EXPECT_TRUE(padded.check().ok());
    EXPECT_FALSE(padded.is_tight());
    std::vector<uint8_t> back(l.bytes());
    padded.copy_to(back.data());
    EXPECT_EQ(back, tight);
    loom::FrameView bad = padded;
    bad.stride[1] = 4;  // under the 6 bytes of a UV row
    EXPECT_NE(bad.check().to_string().find("plane 1's stride 4"), std::string::npos) << bad.check().to_string();
    bad = padded;
    bad.plane[0] = nullptr;
    EXPECT_FALSE(bad.check().ok());
}

TEST_F(MediaIo, SemiPlanarFramesReadAndWrittenExactly) {
    // NV12 in: delivered as NV12 byte for byte; written through ffv1 (stored planar) and read
    // back equal to ffmpeg's planar unpacking of the source.
    const std::string nv12 = clip("nv12.nut", src() + " -frames:v 3 -pix_fmt nv12 -c:v rawvideo");
    Decoded d = read_all(nv12);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_EQ(d.info.layout.format, PixelFormat::NV12);
    EXPECT_TRUE(d.joined() == ffmpeg_raw(nv12, "nv12"));
    write_frames(out("from_nv12.mkv"), d.info, d.info.layout, d.frames);
    Decoded back = read_all(out("from_nv12.mkv"));
    ASSERT_TRUE(back.status.ok()) << back.status.to_string();
    EXPECT_EQ(back.info.layout.format, PixelFormat::YUV420P);
    EXPECT_TRUE(back.joined() == ffmpeg_raw(nv12, "yuv420p"));

    // P010 out: 10-bit frames packed by hand into P010 come back as the same YUV420P10.
    Decoded ten = read_all(clip("ten.mkv", src() + " -frames:v 8 -pix_fmt yuv420p10le -c:v ffv1"));
    ASSERT_TRUE(ten.status.ok()) << ten.status.to_string();
    const FrameLayout planar = ten.info.layout, p010{PixelFormat::P010, planar.width, planar.height};
    std::vector<std::vector<uint8_t>> packed;
    for (const auto& f : ten.frames) {
        std::vector<uint16_t> in(f.size() / 2), o(p010.bytes() / 2);
        std::memcpy(in.data(), f.data(), f.size());
        const size_t luma = static_cast<size_t>(planar.width * planar.height), chroma = planar.chroma_bytes() / 2;
        for (size_t i = 0; i < luma; ++i) o[i] = static_cast<uint16_t>(in[i] << 6);
        for (size_t i = 0; i < chroma; ++i) {
            o[luma + 2 * i] = static_cast<uint16_t>(in[luma + i] << 6);
            o[luma + 2 * i + 1] = static_cast<uint16_t>(in[luma + chroma + i] << 6);
        }
        packed.emplace_back(p010.bytes());
        std::memcpy(packed.back().data(), o.data(), p010.bytes());
    }
    write_frames(out("from_p010.mkv"), ten.info, p010, packed);
    Decoded ten_back = read_all(out("from_p010.mkv"));
    ASSERT_TRUE(ten_back.status.ok()) << ten_back.status.to_string();
    EXPECT_EQ(ten_back.info.layout.format, PixelFormat::YUV420P10);
    ASSERT_EQ(ten_back.frames.size(), ten.frames.size());
    for (size_t i = 0; i < ten.frames.size(); ++i) {
        size_t diff = 0, first = 0;
        for (size_t b = 0; b < ten.frames[i].size(); ++b)
            if (ten.frames[i][b] != ten_back.frames[i][b] && diff++ == 0) first = b;
        EXPECT_EQ(diff, 0u) << "frame " << i << " first difference at byte " << first;
    }
}

TEST_F(MediaIo, Ffv1RoundTripIsBitExactWithSamePts) {
    const std::string path = vfr_clip(), dst = out("round.mkv");
    WriterOptions options;
    options.codec = "ffv1";
    EncodeStats es = transcode(path, dst, options);
    Decoded a = read_all(path), b = read_all(dst);
    ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status.to_string() << b.status.to_string();
    EXPECT_EQ(es.frames, static_cast<int64_t>(a.frames.size()));
    EXPECT_GT(es.bytes, 0);
    EXPECT_EQ(b.info.codec, "ffv1");
    ASSERT_EQ(a.frames.size(), b.frames.size());
    for (size_t i = 0; i < a.frames.size(); ++i) {
        EXPECT_TRUE(a.frames[i] == b.frames[i]) << "frame " << i;
        EXPECT_EQ(a.metas[i].pts, b.metas[i].pts) << "frame " << i;
    }
    EXPECT_EQ(probe_frames(dst, "pts"), probe_frames(path, "pts"));
}

TEST_F(MediaIo, X265TenBitKeepsDepthAndStaysClose) {
    const std::string path = clip("ten.mkv", src() + " -frames:v 8 -pix_fmt yuv420p10le -c:v ffv1"), dst = out("ten.mkv");
    WriterOptions options;
    options.codec = "libx265";
    options.preset = "ultrafast";
    EncodeStats es = transcode(path, dst, options);
    EXPECT_EQ(es.frames, 8);
    Decoded a = read_all(path), b = read_all(dst);
    ASSERT_TRUE(b.status.ok()) << b.status.to_string();
    EXPECT_EQ(b.info.codec, "hevc");
    EXPECT_EQ(b.info.layout.format, PixelFormat::YUV420P10);
    ASSERT_EQ(a.frames.size(), b.frames.size());
    // crf 18, ultrafast, on a detailed pattern: mean luma error under 8 levels of 1023 (4.5
    // measured); a depth or packing mistake would be off by hundreds.
    double err = 0;
    const size_t luma = 160 * 120;
    for (size_t f = 0; f < a.frames.size(); ++f)
        for (size_t i = 0; i < luma; ++i) {
            uint16_t x, y;
            std::memcpy(&x, a.frames[f].data() + 2 * i, 2);
            std::memcpy(&y, b.frames[f].data() + 2 * i, 2);
            err += std::abs(static_cast<int>(x) - static_cast<int>(y));
        }
    EXPECT_LT(err / static_cast<double>(luma * a.frames.size()), 8.0);
}

TEST_F(MediaIo, X264Mp4KeepsVariableFrameRatePts) {
    const std::string path = vfr_clip(), dst = out("vfr.mp4");
    WriterOptions options;
    options.preset = "ultrafast";
    transcode(path, dst, options);
    const auto in = probe_frames(path, "pts_time"), got = probe_frames(dst, "pts_time");
    ASSERT_EQ(in.size(), got.size());
    for (size_t i = 0; i < in.size(); ++i) EXPECT_NEAR(std::stod(in[i]), std::stod(got[i]), 1e-6) << "frame " << i;
}

TEST_F(MediaIo, AudioAndSubtitlesCopiedBitExactWithColourAndMetadata) {
    const std::string path = av_clip(), dst = out("copy.mkv");
    WriterOptions options;
    options.preset = "ultrafast";
    EncodeStats es = transcode(path, dst, options);
    EXPECT_EQ(es.frames, 50);
    EXPECT_GT(es.packets_copied, 50);
    const std::string audio = packet_hashes(path, "0:a");
    ASSERT_FALSE(audio.empty());
    EXPECT_EQ(packet_hashes(dst, "0:a"), audio);
    const std::string subs = packet_hashes(path, "0:s");
    ASSERT_FALSE(subs.empty());
    EXPECT_EQ(packet_hashes(dst, "0:s"), subs);

    auto v = probe(dst, "-select_streams v:0", "stream=color_space,color_primaries,color_transfer,color_range:stream_tags=title");
    EXPECT_EQ(v["color_space"], "smpte170m");
    EXPECT_EQ(v["color_primaries"], "bt470bg");
    EXPECT_EQ(v["color_transfer"], "smpte170m");
    EXPECT_EQ(v["color_range"], "tv");
    EXPECT_EQ(v["TAG:title"], "pictures");
    EXPECT_EQ(probe(dst, "", "format_tags=LOOM_NOTE")["TAG:LOOM_NOTE"], "kept");
}

TEST_F(MediaIo, TruncatedFileGivesCountedFramesOrAnErrorNamingTheFile) {
    const std::string path = av_clip(), cut = out("cut.mkv");
    fs::copy_file(path, cut);
    fs::resize_file(cut, fs::file_size(cut) / 2);
    Decoded d = read_all(cut);
    if (d.status.ok()) {
        EXPECT_GT(d.frames.size(), 0u);
        EXPECT_LT(d.frames.size(), 50u);
    } else {
        EXPECT_NE(d.status.message().find(cut), std::string::npos) << d.status.to_string();
    }
}

TEST_F(MediaIo, FlippedBytesAreCountedAndOverTheRateFailNamingPosition) {
    const std::string path = clip("ts.ts", src() + " -t 2 -c:v libx264 -preset veryfast -bf 0 -g 250");
    const std::string bad = out("flipped.ts");
    std::string bytes = capture("cat " + quoted(path));
    for (size_t i = bytes.size() / 5; i < bytes.size(); i += 1499) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
    std::ofstream(bad, std::ios::binary) << bytes;

    ReaderOptions tolerant;
    tolerant.error_rate_max = 1.0;
    Decoded d = read_all(bad, tolerant);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_GT(d.stats.decode_errors, 0);
    EXPECT_GT(d.frames.size(), 0u);

    ReaderOptions strict;
    strict.error_rate_max = 0.0;
    Decoded e = read_all(bad, strict);
    ASSERT_FALSE(e.status.ok());
    EXPECT_EQ(e.status.code(), StatusCode::PARSE_ERROR);
    EXPECT_NE(e.status.message().find(bad), std::string::npos) << e.status.message();
    EXPECT_NE(e.status.message().find("byte offset"), std::string::npos) << e.status.message();
}

TEST_F(MediaIo, LimitsRefuseBeforeDecoding) {
    const std::string path = av_clip();
    ReaderOptions o;
    o.limits.pixels_max = 100 * 100;
    auto r = MediaReader::open(path, o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::OUT_OF_RANGE);
    EXPECT_NE(r.status().message().find(path), std::string::npos);
    EXPECT_NE(r.status().message().find("pixels_max"), std::string::npos);

    o = {};
    o.limits.streams_max = 2;
    r = MediaReader::open(path, o);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("streams_max"), std::string::npos) << r.status().message();

    o = {};
    o.limits.packet_bytes_max = 64;
    Decoded d = read_all(path, o);
    ASSERT_FALSE(d.status.ok());
    EXPECT_NE(d.status.message().find("packet_bytes_max"), std::string::npos) << d.status.message();
    EXPECT_TRUE(d.frames.empty());

    o = {};
    o.limits.frames_max = 5;
    d = read_all(path, o);
    ASSERT_FALSE(d.status.ok());
    EXPECT_NE(d.status.message().find("frames_max"), std::string::npos) << d.status.message();
    EXPECT_EQ(d.frames.size(), 5u);
}

TEST_F(MediaIo, WriterWithoutFinishLeavesNoFileAndNoTemporary) {
    const std::string path = av_clip();
    auto reader = MediaReader::open(path);
    ASSERT_TRUE(reader.ok());
    const VideoInfo& info = (*reader)->info();
    std::vector<uint8_t> buf(info.layout.bytes());
    for (const std::string name : {"gone.mkv", "gone_%04d.png"}) {
        WriterOptions options;
        options.preset = "ultrafast";
        if (name.ends_with(".png")) options.codec = "png";
        {
            auto writer = MediaWriter::open(out(name), info, info.layout, info.color, options);
            ASSERT_TRUE(writer.ok()) << writer.status().to_string();
            FrameMeta meta;
            for (int i = 0; i < 3; ++i) {
                ASSERT_TRUE(*(*reader)->read(buf.data(), buf.size(), meta));
                ASSERT_TRUE((*writer)->write(buf.data(), buf.size(), meta).ok());
            }
            EXPECT_FALSE(fs::is_empty(work_)) << "nothing was being written";
        }
        EXPECT_TRUE(fs::is_empty(work_)) << name << ": " << fs::directory_iterator(work_)->path();
    }
}

TEST_F(MediaIo, PngSequenceWritesOneFilePerFrame) {
    const std::string path = clip("short.mkv", src() + " -frames:v 4 -c:v ffv1");
    WriterOptions options;
    options.codec = "png";
    EncodeStats es = transcode(path, out("f_%03d.png"), options);
    EXPECT_EQ(es.frames, 4);
    for (int i = 1; i <= 4; ++i) EXPECT_TRUE(fs::exists(out("f_00" + std::to_string(i) + ".png"))) << i;
    EXPECT_FALSE(fs::exists(out("f_005.png")));
    auto p = probe(out("f_001.png"), "", "stream=codec_name,width,height");
    EXPECT_EQ(p["codec_name"], "png");
    EXPECT_EQ(p["width"], "160");
}

TEST_F(MediaIo, HwaccelVaapiFallsBackToSoftwareWithAWarning) {
    const std::string path = av_clip();
    ReaderOptions o;
    o.hwaccel = "vaapi";
    LogCapture logs;
    Decoded hw = read_all(path, o);
    ASSERT_TRUE(hw.status.ok()) << hw.status.to_string();
    EXPECT_EQ(hw.info.decoder, "h264");
    EXPECT_NE(logs.text().find("warning"), std::string::npos) << logs.text();
    EXPECT_NE(logs.text().find("vaapi"), std::string::npos) << logs.text();
    o.hwaccel = "none";
    Decoded sw = read_all(path, o);
    ASSERT_TRUE(sw.status.ok());
    EXPECT_TRUE(hw.frames == sw.frames);

    o.hwaccel = "nosuch";
    auto r = MediaReader::open(path, o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::INVALID_ARGUMENT);
}

TEST_F(MediaIo, MissingAndNonMediaFilesGiveErrorsNamingTheFile) {
    const std::string missing = out("missing.mkv");
    auto r = MediaReader::open(missing);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::NOT_FOUND);
    EXPECT_NE(r.status().message().find(missing), std::string::npos) << r.status().message();

    const std::string text = out("notes.mkv");
    std::ofstream(text) << "this is not a media file, only text\n";
    r = MediaReader::open(text);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().message();

    r = MediaReader::open(clip("silence.wav", "-f lavfi -i sine=sample_rate=8000 -t 0.2"));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("no video stream"), std::string::npos) << r.status().message();
}

TEST_F(MediaIo, WriterRefusesMismatchedPixelFormatAndUnknownOptions) {
    auto reader = MediaReader::open(av_clip());
    ASSERT_TRUE(reader.ok());
    const VideoInfo& info = (*reader)->info();
    WriterOptions o;
    o.pixel_format = PixelFormat::YUV420P10;
    auto w = MediaWriter::open(out("x.mkv"), info, info.layout, info.color, o);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), StatusCode::INVALID_ARGUMENT);
    o = {};
    o.codec_options["no_such_option"] = "1";
    w = MediaWriter::open(out("x.mkv"), info, info.layout, info.color, o);
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find("no_such_option"), std::string::npos) << w.status().message();
    EXPECT_TRUE(fs::is_empty(work_));
}

// ---- Segments: keyframes, segment reads, segment writes and their join ----

Decoded read_segment(const std::string& path, int64_t start_frame, int64_t frame_count) {
    ReaderOptions o;
    o.start_frame = start_frame;
    o.frame_count = frame_count;
    return read_all(path, o);
}

// Reads `range` of `path` and writes it to `dst` with ffv1, copying the audio and subtitles of
// the range.
void write_segment(const std::string& path, const std::string& dst, const SegmentRange& range,
                   const std::string& codec = "ffv1") {
    ReaderOptions ro;
    ro.start_frame = range.start_frame;
    ro.frame_count = range.frame_count;
    auto reader = MediaReader::open(path, ro);
    ASSERT_TRUE(reader.ok()) << reader.status().to_string();
    const VideoInfo& info = (*reader)->info();
    WriterOptions wo;
    wo.codec = codec;
    wo.pixel_format = info.layout.format;
    wo.copy_from_pts = range.copy_from_pts;
    wo.copy_to_pts = range.copy_to_pts;
    auto writer = MediaWriter::open(dst, info, info.layout, info.color, wo);
    ASSERT_TRUE(writer.ok()) << writer.status().to_string();
    std::vector<uint8_t> buf(info.layout.bytes());
    FrameMeta meta;
    int64_t n = 0;
    for (;; ++n) {
        auto more = (*reader)->read(buf.data(), buf.size(), meta);
        ASSERT_TRUE(more.ok()) << more.status().to_string();
        if (!*more) break;
        ASSERT_TRUE((*writer)->write(buf.data(), buf.size(), meta).ok());
    }
    EXPECT_EQ(n, range.frame_count);
    auto st = (*writer)->finish();
    ASSERT_TRUE(st.ok()) << st.to_string();
}

TEST_F(MediaIo, KeyframesFromPacketsMatchFfprobeInPresentationOrder) {
    const std::string path = seg_clip();
    const auto types = probe_frames(path, "pict_type");
    ASSERT_EQ(types.size(), 75u);
    EXPECT_NE(std::count(types.begin(), types.end(), "B"), 0) << "the clip should hold B-frames";
    const auto keys = probe_frames(path, "key_frame");
    std::vector<int64_t> expected;
    for (size_t i = 0; i < keys.size(); ++i)
        if (keys[i] == "1") expected.push_back(static_cast<int64_t>(i));
    const auto pts = probe_frames(path, "pts");

    int64_t frames = 0;
    auto list = list_keyframes(path, {}, &frames);
    ASSERT_TRUE(list.ok()) << list.status().to_string();
    EXPECT_EQ(frames, 75);
    std::vector<int64_t> got;
    for (const KeyframeInfo& k : *list) {
        got.push_back(k.frame);
        EXPECT_TRUE(k.closed) << "frame " << k.frame;
        EXPECT_EQ(std::to_string(k.pts), pts.at(static_cast<size_t>(k.frame)));
        EXPECT_NEAR(k.time_s, static_cast<double>(k.pts) / 1000.0, 1e-9);
    }
    EXPECT_EQ(got, expected);
    EXPECT_EQ(got, (std::vector<int64_t>{0, 25, 50}));

    auto plan = plan_segments(*list, frames, 3);
    ASSERT_EQ(plan.size(), 3u);
    const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
    EXPECT_EQ(plan[0].start_frame, 0);
    EXPECT_EQ(plan[0].frame_count, 25);
    EXPECT_EQ(plan[0].copy_from_pts, lo);
    EXPECT_EQ(plan[0].copy_to_pts, (*list)[1].pts);
    EXPECT_EQ(plan[1].start_frame, 25);
    EXPECT_EQ(plan[1].copy_from_pts, (*list)[1].pts);
    EXPECT_EQ(plan[1].copy_to_pts, (*list)[2].pts);
    EXPECT_EQ(plan[2].start_frame, 50);
    EXPECT_EQ(plan[2].frame_count, 25);
    EXPECT_EQ(plan[2].copy_to_pts, hi);
    // More segments than keyframes: one per keyframe; one segment: everything.
    EXPECT_EQ(plan_segments(*list, frames, 8).size(), 3u);
    auto one = plan_segments(*list, frames, 1);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].frame_count, 75);
    EXPECT_TRUE(plan_segments(*list, frames, 0).empty());
    EXPECT_TRUE(plan_segments(*list, 0, 3).empty());
}

TEST_F(MediaIo, SegmentStartOffAKeyframeIsRefusedNamingTheNearestKeyframes) {
    const std::string path = seg_clip();
    Decoded d = read_segment(path, 30, 5);
    ASSERT_FALSE(d.status.ok());
    EXPECT_EQ(d.status.code(), StatusCode::INVALID_ARGUMENT);
    const std::string& m = d.status.message();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("start_frame 30"), std::string::npos) << m;
    EXPECT_NE(m.find("frame 25"), std::string::npos) << m;
    EXPECT_NE(m.find("frame 50"), std::string::npos) << m;
    d = read_segment(path, 60, -1);
    EXPECT_NE(d.status.message().find("after none"), std::string::npos) << d.status.message();
    d = read_segment(path, 75, -1);
    EXPECT_EQ(d.status.code(), StatusCode::OUT_OF_RANGE) << d.status.to_string();
    d = read_segment(path, 0, 0);
    EXPECT_EQ(d.status.code(), StatusCode::INVALID_ARGUMENT) << d.status.to_string();
    d = read_segment(path, -25, 1);
    EXPECT_EQ(d.status.code(), StatusCode::INVALID_ARGUMENT) << d.status.to_string();
}

TEST_F(MediaIo, SegmentReadsConcatenateToTheFullRead) {
    const std::string path = seg_clip();
    Decoded full = read_all(path);
    ASSERT_TRUE(full.status.ok()) << full.status.to_string();
    ASSERT_EQ(full.frames.size(), 75u);
    auto check = [&](const Decoded& d, int64_t start, size_t count) {
        ASSERT_TRUE(d.status.ok()) << d.status.to_string();
        ASSERT_EQ(d.frames.size(), count) << "segment at " << start;
        for (size_t i = 0; i < count; ++i) {
            const size_t at = static_cast<size_t>(start) + i;
            EXPECT_TRUE(d.frames[i] == full.frames[at]) << "frame " << at;
            EXPECT_EQ(d.metas[i].pts, full.metas[at].pts) << "frame " << at;
            EXPECT_EQ(d.metas[i].index, static_cast<int64_t>(at));
        }
        EXPECT_EQ(d.stats.decode_errors, 0);
    };
    std::vector<uint8_t> frames;
    std::vector<int64_t> pts;
    for (int64_t start : {0, 25, 50}) {
        Decoded d = read_segment(path, start, 25);
        check(d, start, 25);
        EXPECT_TRUE(d.metas.empty() || d.metas.front().keyframe);
        for (size_t i = 0; i < d.frames.size(); ++i) {
            frames.insert(frames.end(), d.frames[i].begin(), d.frames[i].end());
            pts.push_back(d.metas[i].pts);
        }
    }
    const std::string all = full.joined();
    EXPECT_TRUE(std::string(frames.begin(), frames.end()) == all);
    std::vector<int64_t> full_pts;
    for (const auto& m : full.metas) full_pts.push_back(m.pts);
    EXPECT_EQ(pts, full_pts);

    Decoded last = read_segment(path, 50, -1);   // to the end
    check(last, 50, 25);
    EXPECT_EQ(last.stats.packets, 25) << "the reader should seek to the keyframe, not decode what comes before";
    check(read_segment(path, 50, 1000), 50, 25); // past the end: to the end
    check(read_segment(path, 25, 1), 25, 1);     // one frame
    check(read_segment(path, 0, 1), 0, 1);
    check(read_segment(path, 25, 7), 25, 7);     // ends off a keyframe, within reordered frames
    check(read_segment(path, 0, 26), 0, 26);     // ends one past a keyframe
}

// A planned segment (its pts bounds given) reads what a scanned one reads, without the scan; a
// bound that is no keyframe (the file changed since the plan) fails, never reads other frames.
TEST_F(MediaIo, PlannedSegmentBoundsReadWhatTheScanReads) {
    const std::string path = seg_clip();
    int64_t frames = 0;
    auto keys = list_keyframes(path, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    const auto plan = plan_segments(*keys, frames, 3);
    ASSERT_EQ(plan.size(), 3u);
    for (const SegmentRange& r : plan) {
        SCOPED_TRACE(r.start_frame);
        Decoded scanned = read_segment(path, r.start_frame, r.frame_count);
        ReaderOptions o;
        o.start_frame = r.start_frame;
        o.frame_count = r.frame_count;
        o.segment_pts = ReaderOptions::SegmentPts{r.copy_from_pts, r.copy_to_pts};
        Decoded planned = read_all(path, o);
        ASSERT_TRUE(planned.status.ok()) << planned.status.to_string();
        ASSERT_EQ(planned.frames.size(), static_cast<size_t>(r.frame_count));
        EXPECT_TRUE(planned.joined() == scanned.joined());
        for (size_t i = 0; i < planned.metas.size(); ++i) {
            EXPECT_EQ(planned.metas[i].pts, scanned.metas[i].pts);
            EXPECT_EQ(planned.metas[i].index, scanned.metas[i].index);
        }
        EXPECT_EQ(planned.stats.packets, scanned.stats.packets);
    }
    // The second segment's bound moved one frame on: that frame is no keyframe.
    Decoded full = read_all(path);
    ASSERT_GT(full.metas.size(), 27u);
    ReaderOptions o;
    o.start_frame = plan[1].start_frame;
    o.frame_count = plan[1].frame_count;
    const size_t next = static_cast<size_t>(plan[1].start_frame) + 1;
    o.segment_pts = ReaderOptions::SegmentPts{full.metas[next].pts, plan[1].copy_to_pts};
    Decoded wrong = read_all(path, o);
    ASSERT_FALSE(wrong.status.ok()) << "read " << wrong.frames.size() << " frames from a bound that is no keyframe";
    EXPECT_NE(wrong.status.message().find("no keyframe"), std::string::npos) << wrong.status.to_string();
}

TEST_F(MediaIo, SegmentsWrittenWithFfv1AndJoinedEqualOneRun) {
    const std::string path = seg_clip(), whole = out("whole.mkv"), joined = out("joined.mkv");
    WriterOptions options;
    options.codec = "ffv1";
    EncodeStats es = transcode(path, whole, options);
    EXPECT_EQ(es.frames, 75);

    int64_t frames = 0;
    auto keys = list_keyframes(path, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    auto plan = plan_segments(*keys, frames, 3);
    ASSERT_EQ(plan.size(), 3u);
    std::vector<std::string> parts;
    for (size_t i = 0; i < plan.size(); ++i) {
        parts.push_back(out("part" + std::to_string(i) + ".mkv"));
        write_segment(path, parts.back(), plan[i]);
        if (HasFatalFailure()) return;
    }
    auto st = join_segments(parts, joined);
    ASSERT_TRUE(st.ok()) << st.to_string();

    const std::string raw = ffmpeg_raw(joined, "yuv420p");
    EXPECT_EQ(raw.size(), 75u * 160 * 120 * 3 / 2);
    EXPECT_TRUE(raw == ffmpeg_raw(whole, "yuv420p")) << "joined frames differ from the one-run file's";
    EXPECT_TRUE(raw == ffmpeg_raw(path, "yuv420p")) << "joined frames differ from the source's";
    EXPECT_EQ(probe_frames(joined, "pts"), probe_frames(whole, "pts"));
    EXPECT_EQ(probe_frames(joined, "pts"), probe_frames(path, "pts"));
    Decoded j = read_all(joined);
    ASSERT_TRUE(j.status.ok()) << j.status.to_string();
    EXPECT_EQ(j.frames.size(), 75u);
    EXPECT_EQ(j.stats.decode_errors, 0);

    const std::string audio = packet_hashes(path, "0:a");
    ASSERT_FALSE(audio.empty());
    EXPECT_EQ(packet_hashes(joined, "0:a"), audio) << "every audio packet once, untouched";
    const std::string subs = packet_hashes(path, "0:s");
    const auto sub_lines = lines(subs);
    EXPECT_EQ(std::count_if(sub_lines.begin(), sub_lines.end(), [](const std::string& l) { return l[0] != '#'; }), 3);
    EXPECT_EQ(packet_hashes(joined, "0:s"), subs) << "every subtitle once";

    auto v = probe(joined, "-select_streams v:0", "stream=codec_name,color_space,color_primaries,color_transfer");
    EXPECT_EQ(v["codec_name"], "ffv1");
    EXPECT_EQ(v["color_space"], "bt709");
    EXPECT_EQ(v["color_primaries"], "bt709");
    EXPECT_EQ(v["color_transfer"], "bt709");
    EXPECT_EQ(probe(joined, "", "format_tags=LOOM_NOTE")["TAG:LOOM_NOTE"], "kept");
    // Nothing but the parts and the two outputs: no temporary left behind.
    size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(work_)) ++files;
    EXPECT_EQ(files, 5u);
}

TEST_F(MediaIo, LongClipSegmentsSeekTheCopiedStreamsAndJoinExactly) {
    // 24 s: the second segment starts 12 s in, so its writer seeks the copy demuxer (10 s of
    // slack) and stops reading 10 s past its end rather than at the end of the file.
    const std::string path = clip("long.mkv", src("64x48") +
                                                  " -f lavfi -i sine=frequency=300:sample_rate=44100 -t 24 -map 0 -map 1"
                                                  " -c:v libx264 -preset veryfast -g 50 -keyint_min 50 -sc_threshold 0"
                                                  " -bf 2 -c:a aac");
    const std::string joined = out("joined.mkv");
    int64_t frames = 0;
    auto keys = list_keyframes(path, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    EXPECT_EQ(frames, 600);
    EXPECT_EQ(keys->size(), 12u);
    auto plan = plan_segments(*keys, frames, 2);
    ASSERT_EQ(plan.size(), 2u);
    EXPECT_EQ(plan[1].start_frame, 300);
    std::vector<std::string> parts{out("a.mkv"), out("b.mkv")};
    for (size_t i = 0; i < 2; ++i) {
        write_segment(path, parts[i], plan[i]);
        if (HasFatalFailure()) return;
    }
    auto st = join_segments(parts, joined);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(ffmpeg_raw(joined, "yuv420p") == ffmpeg_raw(path, "yuv420p"));
    EXPECT_EQ(probe_frames(joined, "pts"), probe_frames(path, "pts"));
    EXPECT_EQ(packet_hashes(joined, "0:a"), packet_hashes(path, "0:a"));
}

// Segments on containers and streams without a pts on every packet, and on open GOPs: AVI
// (MPEG-4 with B-frames: dts only, pts made by genpts) with MP3, MPEG-PS and raw MPEG-2 video
// with open GOPs, MPEG-TS with AAC, raw H.264 (no timestamps at all: frames timed by their
// durations, IDRs proved by their content), HEVC with open GOPs (CRA) and H.264 with open GOPs
// (recovery points) in Matroska. Each is cut
// into 3 segments whose reads are the full read's frames and pts, and whose ffv1 parts join into
// what one run writes: every frame, pts and copied audio packet. A raw HEVC stream with open
// GOPs cannot place its CRAs without decoding: it is planned whole, never cut wrongly.
TEST_F(MediaIo, SegmentsOnEveryContainerJoinToTheWholeRun) {
    const std::string v = src("96x64") + " -t 3";
    const std::string a = " -f lavfi -i sine=frequency=440:sample_rate=44100 -t 3";
    struct Case {
        std::string name, args;
        bool audio;
        bool cut;
    };
    const std::vector<Case> cases = {
        {"open.avi", v + a + " -c:v mpeg4 -bf 2 -g 12 -c:a libmp3lame", true, true},
        {"open.mpg", v + a + " -c:v mpeg2video -bf 2 -g 12 -c:a mp2", true, true},
        {"open.m2v", v + " -c:v mpeg2video -bf 2 -g 12 -f mpeg2video", false, true},
        {"h264.ts", v + a + " -c:v libx264 -preset veryfast -bf 2 -g 12 -keyint_min 12 -sc_threshold 0 -c:a aac", true, true},
        {"raw.h264", v + " -c:v libx264 -preset veryfast -bf 2 -g 12 -keyint_min 12 -sc_threshold 0", false, true},
        {"open.mkv", v + " -c:v libx265 -x265-params log-level=0:keyint=12", false, true},
        // x264's open GOPs: the decoder reports the leading frames' missing references at a
        // segment's start, which are not the segment's errors.
        {"open264.mkv", v + " -c:v libx264 -preset veryfast -bf 2 -g 12 -keyint_min 12 -sc_threshold 0"
                            " -x264-params open-gop=1", false, true},
        {"open.hevc", v + " -c:v libx265 -x265-params log-level=0:keyint=12", false, false},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const std::string path = clip(c.name, c.args);
        Decoded full = read_all(path);
        ASSERT_TRUE(full.status.ok()) << full.status.to_string();
        ASSERT_EQ(full.frames.size(), 75u);
        int64_t frames = 0;
        auto keys = list_keyframes(path, {}, &frames);
        ASSERT_TRUE(keys.ok()) << keys.status().to_string();
        EXPECT_EQ(frames, 75);
        for (const KeyframeInfo& k : *keys) {
            ASSERT_LT(k.frame, 75);
            EXPECT_EQ(k.pts, full.metas[static_cast<size_t>(k.frame)].pts) << "keyframe at frame " << k.frame;
        }
        auto plan = plan_segments(*keys, frames, 3);
        if (!c.cut) {
            EXPECT_EQ(plan.size(), 1u);
            for (const KeyframeInfo& k : *keys) EXPECT_EQ(k.segment_start, k.frame == 0) << "frame " << k.frame;
            continue;
        }
        ASSERT_EQ(plan.size(), 3u);
        std::vector<std::string> parts;
        for (const SegmentRange& r : plan) {
            SCOPED_TRACE(r.start_frame);
            ReaderOptions o;
            o.start_frame = r.start_frame;
            o.frame_count = r.frame_count;
            for (bool planned : {false, true}) {
                if (planned) o.segment_pts = ReaderOptions::SegmentPts{r.copy_from_pts, r.copy_to_pts};
                Decoded d = read_all(path, o);
                ASSERT_TRUE(d.status.ok()) << d.status.to_string();
                ASSERT_EQ(d.frames.size(), static_cast<size_t>(r.frame_count));
                EXPECT_EQ(d.stats.decode_errors, 0);
                for (size_t i = 0; i < d.frames.size(); ++i) {
                    const size_t at = static_cast<size_t>(r.start_frame) + i;
                    EXPECT_TRUE(d.frames[i] == full.frames[at]) << "frame " << at;
                    EXPECT_EQ(d.metas[i].pts, full.metas[at].pts) << "frame " << at;
                }
            }
            parts.push_back(out(c.name + "." + std::to_string(parts.size()) + ".mkv"));
            write_segment(path, parts.back(), r);
            if (HasFatalFailure()) return;
        }
        const std::string whole = out(c.name + ".whole.mkv"), joined = out(c.name + ".joined.mkv");
        WriterOptions wo;
        wo.codec = "ffv1";
        EXPECT_EQ(transcode(path, whole, wo).frames, 75);
        auto st = join_segments(parts, joined);
        ASSERT_TRUE(st.ok()) << st.to_string();
        EXPECT_TRUE(ffmpeg_raw(joined, "yuv420p") == ffmpeg_raw(whole, "yuv420p")) << "joined frames differ";
        EXPECT_EQ(probe_frames(joined, "pts"), probe_frames(whole, "pts"));
        if (c.audio) {
            const std::string audio = packet_hashes(whole, "0:a");
            EXPECT_GT(lines(audio).size(), 50u);
            EXPECT_EQ(packet_hashes(joined, "0:a"), audio) << "every audio packet once, untouched";
        }
    }
}

// What a whole transcode of the read `d` writes: its frames, at their times, in its colour.
OutputExpectation written(const Decoded& d) {
    OutputExpectation e;
    e.source = d.info;
    e.layout = d.info.layout;
    e.color = d.info.color;
    for (const FrameMeta& m : d.metas) e.frame_pts.push_back(m.pts);
    return e;
}

// The fidelity report: a whole run's output against its source finds nothing unaccounted for,
// and explains what the container cannot hold (MP4: the attachment, the subtitle's title); an
// output with a stream, the chapters or the tags dropped, the audio moved against the video, a
// frame missing or moved is caught, each named.
TEST_F(MediaIo, FidelityReportFindsEveryDifferenceNotAskedFor) {
    std::ofstream(dir_ / "fid-chapters.txt") << ";FFMETADATA1\ntitle=Film\n"
                                                "[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=1000\ntitle=One\n"
                                                "[CHAPTER]\nTIMEBASE=1/1000\nSTART=1000\nEND=2000\ntitle=Two\n";
    const std::string path =
        clip("fid.mkv", src("96x64") + " -f lavfi -i sine=frequency=440:sample_rate=48000 -i fid-chapters.txt -t 2"
                                       " -map 0:v -map 1:a -map 1:a -map_chapters 2 -c:v libx264 -preset veryfast"
                                       " -c:a:0 aac -c:a:1 libmp3lame -metadata:s:a:0 language=jpn"
                                       " -metadata:s:a:1 title=Commentary -metadata LOOM_NOTE=kept");
    Decoded d = read_all(path);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    OutputExpectation e = written(d);
    e.scale = 1;
    WriterOptions wo;
    wo.codec = "ffv1";
    const std::string whole = out("whole.mkv");
    ASSERT_EQ(transcode(path, whole, wo).frames, 50);
    auto ok = check_output(whole, e);
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    EXPECT_EQ(ok->unexplained(), 0) << ok->summary(10);
    EXPECT_TRUE(ok->differences.empty()) << ok->summary(10);
    EXPECT_GE(ok->checks, 20);

    wo.codec = "libx264";
    const std::string mp4 = out("whole.mp4");
    ASSERT_EQ(transcode(path, mp4, wo).frames, 50);
    auto in_mp4 = check_output(mp4, e);
    ASSERT_TRUE(in_mp4.ok()) << in_mp4.status().to_string();
    EXPECT_EQ(in_mp4->unexplained(), 0) << in_mp4->summary(10);
    ASSERT_EQ(in_mp4->differences.size(), 2u) << "the commentary's title and the LOOM_NOTE tag";
    EXPECT_EQ(in_mp4->differences[0].explained, "mp4 cannot hold a stream's title tag");
    EXPECT_EQ(in_mp4->differences[1].explained, "mp4 holds only its own tags");

    // A stream the container cannot hold between two it can (PCM between AAC and MP3, into MP4):
    // explained, and the streams after it still matched to theirs.
    const std::string three = clip("fid-three.mkv", src("96x64") + " -f lavfi -i sine=frequency=440:sample_rate=48000"
                                                                   " -t 1 -map 0:v -map 1:a -map 1:a -map 1:a -c:v"
                                                                   " libx264 -preset veryfast -c:a:0 aac -c:a:1"
                                                                   " pcm_s16le -c:a:2 libmp3lame");
    Decoded three_read = read_all(three);
    ASSERT_TRUE(three_read.status.ok()) << three_read.status.to_string();
    const OutputExpectation e3 = written(three_read);
    const std::string three_mp4 = out("three.mp4");
    ASSERT_EQ(transcode(three, three_mp4, wo).frames, 25);
    auto skipped = check_output(three_mp4, e3);
    ASSERT_TRUE(skipped.ok()) << skipped.status().to_string();
    EXPECT_EQ(skipped->unexplained(), 0) << skipped->summary(10);
    ASSERT_EQ(skipped->differences.size(), 1u) << skipped->summary(10);
    EXPECT_EQ(skipped->differences[0].what, "stream 2 (audio pcm_s16le)");
    EXPECT_EQ(skipped->differences[0].explained, "mp4 cannot hold it");

    // A raw H.264 stream keeps no frame times and no audio: both explained, nothing fails.
    const std::string raw = out("raw.h264");
    wo.codec = "libx264";
    ASSERT_EQ(transcode(path, raw, wo).frames, 50);
    auto in_raw = check_output(raw, e);
    ASSERT_TRUE(in_raw.ok()) << in_raw.status().to_string();
    EXPECT_EQ(in_raw->unexplained(), 0) << in_raw->summary(10);
    bool untimed = false;
    for (const FidelityItem& d : in_raw->differences) untimed |= d.explained == "h264 stores no frame times";
    EXPECT_TRUE(untimed) << in_raw->summary(10);

    // Outputs damaged after the fact, each compared with what was written.
    auto damaged = [&](const std::string& name, const std::string& args) {
        const std::string file = out(name);
        EXPECT_TRUE(run("ffmpeg -v error -y " + args + " -c copy " + quoted(file))) << args;
        auto r = check_output(file, e);
        EXPECT_TRUE(r.ok()) << r.status().to_string();
        return r.ok() ? *r : FidelityReport{};
    };
    const std::string in = "-i " + quoted(whole);
    auto no_stream = damaged("no-stream.mkv", in + " -map 0:v -map 0:a:0");
    EXPECT_EQ(no_stream.unexplained(), 1) << no_stream.summary(10);
    EXPECT_NE(no_stream.summary().find("stream 2 (audio mp3): present in the source, absent in the output"),
              std::string::npos) << no_stream.summary();
    auto no_chapters = damaged("no-chapters.mkv", in + " -map 0 -map_chapters -1 -map_metadata -1");
    EXPECT_NE(no_chapters.summary(10).find("chapters: 2 in the source, 0 in the output"), std::string::npos)
        << no_chapters.summary(10);
    EXPECT_NE(no_chapters.summary(10).find("tag LOOM_NOTE: kept in the source, nothing in the output"),
              std::string::npos) << no_chapters.summary(10);
    auto late_audio = damaged("late-audio.mkv", in + " -itsoffset 0.5 " + in + " -map 0:v -map 1:a -map_chapters 0");
    EXPECT_NE(late_audio.summary(10).find("sync with the video"), std::string::npos) << late_audio.summary(10);
    // A copied packet lost: an error, unless the writer says it left one out (corrupt input).
    auto lost = damaged("lost-packet.mkv", in + " -map 0 -bsf:a:0 'noise=drop=eq(n\\,7)'");
    EXPECT_EQ(lost.unexplained(), 1) << lost.summary(10);
    EXPECT_NE(lost.summary().find("stream 1 (audio aac) packets"), std::string::npos) << lost.summary();
    OutputExpectation told = e;
    told.packets_dropped = 1;
    auto explained = check_output(out("lost-packet.mkv"), told);
    ASSERT_TRUE(explained.ok());
    EXPECT_EQ(explained->unexplained(), 0) << explained->summary(10);

    OutputExpectation more = e;
    more.frame_pts.push_back(e.frame_pts.back() + 40);
    auto missing = check_output(whole, more);
    ASSERT_TRUE(missing.ok());
    EXPECT_NE(missing->summary().find("video frames: 51 written in the source, 50 in the output"), std::string::npos)
        << missing->summary();
    OutputExpectation moved = e;
    moved.frame_pts[30] += 20;
    auto shifted = check_output(whole, moved);
    ASSERT_TRUE(shifted.ok());
    EXPECT_EQ(shifted->unexplained(), 1) << shifted->summary();
    EXPECT_NE(shifted->summary().find("1 differ: frame 30"), std::string::npos) << shifted->summary();
    // A join of checked parts: the frame count alone, the shift from the first frames.
    OutputExpectation counted = e;
    counted.frame_pts.clear();
    counted.frames = 50;
    auto by_count = check_output(whole, counted);
    ASSERT_TRUE(by_count.ok());
    EXPECT_TRUE(by_count->differences.empty()) << by_count->summary(10);
    counted.frames = 49;
    auto one_more = check_output(whole, counted);
    ASSERT_TRUE(one_more.ok());
    EXPECT_NE(one_more->summary().find("video frames: 49 written in the source, 50 in the output"), std::string::npos)
        << one_more->summary();
    counted.frames = 50;
    auto late_by_count = check_output(out("late-audio.mkv"), counted);
    ASSERT_TRUE(late_by_count.ok());
    EXPECT_NE(late_by_count->summary(10).find("sync with the video"), std::string::npos) << late_by_count->summary(10);
    OutputExpectation bigger = e;
    bigger.scale = 2;
    bigger.layout.width *= 2;
    bigger.layout.height *= 2;
    auto size = check_output(whole, bigger);
    ASSERT_TRUE(size.ok());
    EXPECT_NE(size->summary().find("video size: 192x128 written"), std::string::npos) << size->summary();
}

// The byte offset of the first SimpleBlock of Matroska track `track` in the `nth` cluster of
// `data` (0-based), or -1: the file's EBML elements walked by their sizes.
int64_t matroska_block(const std::string& data, int nth, int track) {
    auto vint = [&](size_t& at, bool id) -> int64_t {
        if (at >= data.size()) return -1;
        const auto first = static_cast<uint8_t>(data[at]);
        int len = 1;
        while (len <= 8 && !(first & (0x80 >> (len - 1)))) ++len;
        if (len > 8 || at + static_cast<size_t>(len) > data.size()) return -1;
        int64_t v = id ? first : first & (0xFF >> len);
        for (int i = 1; i < len; ++i) v = (v << 8) | static_cast<uint8_t>(data[at + static_cast<size_t>(i)]);
        at += static_cast<size_t>(len);
        return v;
    };
    size_t at = 0;
    int clusters = 0;
    while (at < data.size()) {
        const int64_t id = vint(at, true), size = vint(at, false);
        if (id < 0 || size < 0) return -1;
        if (id == 0x18538067) continue;  // Segment: its children follow
        if (id == 0x1F43B675) {          // Cluster: its children follow, unless not the one
            if (clusters++ == nth) {
                const size_t end = std::min(data.size(), at + static_cast<size_t>(size));
                while (at < end) {
                    const size_t start = at;
                    const int64_t cid = vint(at, true), csize = vint(at, false);
                    if (cid < 0 || csize < 0) return -1;
                    size_t body = at;
                    if (cid == 0xA3 && vint(body, false) == track) return static_cast<int64_t>(start);
                    at += static_cast<size_t>(csize);
                }
                return -1;
            }
        }
        at += static_cast<size_t>(size);
    }
    return -1;
}

// A damaged video block in a Matroska file: the demuxer, parsing it, gives up the rest of its
// cluster, audio included, when it reads every stream; a read of the audio alone (the writer's
// stream copy) skips the block unparsed and keeps that audio. The output is checked against the
// source read as the run read it: no difference, and the audio the copy kept is all there.
TEST_F(MediaIo, FidelityReadsADamagedSourceAsTheRunDid) {
    const std::string path = clip("bad-lacing.mkv",
                                  src("96x64") +
                                      " -f lavfi -i sine=frequency=440:sample_rate=48000 -t 2"
                                      " -c:v libx264 -preset veryfast -g 10 -c:a aac -cluster_time_limit 400");
    std::string data;
    {
        std::ifstream f(path, std::ios::binary);
        data.assign(std::istreambuf_iterator<char>(f), {});
    }
    const int64_t block = matroska_block(data, 2, 1);
    ASSERT_GT(block, 0) << "no video block in the third cluster";
    // SimpleBlock: ID (1 byte), size (vint), track (1 byte), timecode (2), flags (1), data. The
    // flags claim EBML lacing; the lace count and sizes then come from the H.264 length field,
    // whose leading 0x00 is no EBML number.
    size_t at = static_cast<size_t>(block) + 1;
    int size_len = 1;
    while (size_len < 8 && !(static_cast<uint8_t>(data[at]) & (0x80 >> (size_len - 1)))) ++size_len;
    at += static_cast<size_t>(size_len) + 1 + 2;
    data[at] = static_cast<char>(static_cast<uint8_t>(data[at]) | 0x06);
    data[at + 1] = 0x05;
    const std::string damaged = out("bad-lacing-damaged.mkv");
    std::ofstream(damaged, std::ios::binary) << data;

    // The damage is real: every stream read together gives less audio than the audio alone.
    const std::string together = capture("ffmpeg -v quiet -i " + quoted(damaged) +
                                         " -map 0 -c copy -f framemd5 - | grep -c '^1,'");
    const std::string alone = capture("ffmpeg -v quiet -i " + quoted(damaged) +
                                      " -map 0:a -c copy -f framemd5 - | grep -c '^0,'");
    ASSERT_LT(std::stoi(together), std::stoi(alone)) << "the damage no longer makes the demuxer skip audio";

    ReaderOptions ro;
    ro.error_rate_max = 1;  // the video's read ends at the block: one error in few frames
    Decoded d = read_all(damaged, ro);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_GE(d.stats.decode_errors, 1);  // counted, as every read error is
    OutputExpectation e = written(d);
    e.scale = 1;
    WriterOptions wo;
    wo.codec = "ffv1";
    const std::string restored = out("bad-lacing-out.mkv");
    ASSERT_EQ(transcode(damaged, restored, wo, ro).frames, static_cast<int64_t>(d.frames.size()));
    EXPECT_EQ(std::to_string(std::stoi(alone)) + "\n",
              capture("ffmpeg -v quiet -i " + quoted(restored) + " -map 0:a -c copy -f framemd5 - | grep -c '^0,'"));
    auto report = check_output(restored, e);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    EXPECT_EQ(report->unexplained(), 0) << report->summary(10);
}

// Damage the decoder conceals or drops without failing a call or flagging a frame is counted
// from what it reports in its log: two H.264 packets garbled in an MP4 give two packets rejected
// and, after them, frames decoded without their reference pictures. Those count too, so the
// error rate limit sees them.
TEST_F(MediaIo, DecodeErrorsCountWhatTheDecoderReportsInItsLog) {
    const std::string path = clip("damaged-src.mp4", src() + " -t 2 -c:v libx264 -preset veryfast -g 25 -bf 2");
    const auto packets = lines(capture("ffprobe -v error -select_streams v -show_entries packet=pos,size -of csv=p=0 " +
                                       quoted(path)));
    ASSERT_EQ(packets.size(), 50u);
    std::string bytes;
    {
        std::ifstream in(path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    for (size_t k : {10u, 33u}) {  // P or B frames: keep the length and the NAL header, garble the slice
        const size_t comma = packets[k].find(',');
        const size_t size = std::stoul(packets[k].substr(0, comma)), pos = std::stoul(packets[k].substr(comma + 1));
        ASSERT_LE(pos + size, bytes.size());
        for (size_t j = pos + 5; j < pos + size; ++j) bytes[j] = static_cast<char>(bytes[j] * 7 + 13);
    }
    const std::string damaged = out("damaged.mp4");
    std::ofstream(damaged, std::ios::binary) << bytes;

    ReaderOptions o;
    o.threads = 1;  // one decoder thread: its reports come in packet order
    o.error_rate_max = 1;
    Decoded d = read_all(damaged, o);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_EQ(d.stats.frames_skipped, 2);
    EXPECT_EQ(d.stats.frames, 48);
    EXPECT_GE(d.stats.decode_errors, 4) << "the frames decoded without their references are errors too";
    o.threads = 0;  // frame threads report from their own contexts
    Decoded threaded = read_all(damaged, o);
    ASSERT_TRUE(threaded.status.ok()) << threaded.status.to_string();
    EXPECT_GE(threaded.stats.decode_errors, 4);
    // Over 5% of 48 frames: the default limit fails the read, naming the file.
    Decoded limited = read_all(damaged);
    ASSERT_FALSE(limited.status.ok());
    EXPECT_NE(limited.status.message().find("exceed error_rate_max"), std::string::npos) << limited.status.to_string();
    EXPECT_NE(limited.status.message().find(damaged), std::string::npos);
    Decoded clean = read_all(path);
    ASSERT_TRUE(clean.status.ok());
    EXPECT_EQ(clean.stats.decode_errors, 0);
}

// Remuxes `in` into `out` with a display matrix (`rotation` degrees) and HDR10 mastering
// display and content light level on its video stream, as a file from a camera or a studio
// carries them. (The ffmpeg program of Debian 12 sets neither on a stream.)
void remux_with_side_data(const std::string& in, const std::string& out, double rotation) {
    AVFormatContext* ic = nullptr;
    ASSERT_EQ(avformat_open_input(&ic, in.c_str(), nullptr, nullptr), 0) << in;
    std::unique_ptr<AVFormatContext, void (*)(AVFormatContext*)> input(ic, [](AVFormatContext* c) {
        avformat_close_input(&c);
    });
    ASSERT_GE(avformat_find_stream_info(ic, nullptr), 0);
    AVFormatContext* oc = nullptr;
    ASSERT_GE(avformat_alloc_output_context2(&oc, nullptr, nullptr, out.c_str()), 0) << out;
    std::unique_ptr<AVFormatContext, void (*)(AVFormatContext*)> output(oc, [](AVFormatContext* c) {
        avio_closep(&c->pb);
        avformat_free_context(c);
    });
    AVStream* st = avformat_new_stream(oc, nullptr);
    ASSERT_NE(st, nullptr);
    ASSERT_GE(avcodec_parameters_copy(st->codecpar, ic->streams[0]->codecpar), 0);
    st->codecpar->codec_tag = 0;
    st->time_base = ic->streams[0]->time_base;
    auto* m = reinterpret_cast<int32_t*>(av_stream_new_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, 9 * sizeof(int32_t)));
    ASSERT_NE(m, nullptr);
    av_display_rotation_set(m, rotation);
    auto* md = reinterpret_cast<AVMasteringDisplayMetadata*>(
        av_stream_new_side_data(st, AV_PKT_DATA_MASTERING_DISPLAY_METADATA, sizeof(AVMasteringDisplayMetadata)));
    ASSERT_NE(md, nullptr);
    *md = AVMasteringDisplayMetadata{};
    const int xy[3][2] = {{34000, 16000}, {13250, 34500}, {7500, 3000}};
    for (int c = 0; c < 3; ++c)
        for (int k = 0; k < 2; ++k) md->display_primaries[c][k] = av_make_q(xy[c][k], 50000);
    md->white_point[0] = av_make_q(15635, 50000);
    md->white_point[1] = av_make_q(16450, 50000);
    md->min_luminance = av_make_q(50, 10000);
    md->max_luminance = av_make_q(10000000, 10000);
    md->has_primaries = md->has_luminance = 1;
    auto* cll = reinterpret_cast<AVContentLightMetadata*>(
        av_stream_new_side_data(st, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, sizeof(AVContentLightMetadata)));
    ASSERT_NE(cll, nullptr);
    cll->MaxCLL = 1000;
    cll->MaxFALL = 400;
    ASSERT_GE(avio_open(&oc->pb, out.c_str(), AVIO_FLAG_WRITE), 0);
    ASSERT_GE(avformat_write_header(oc, nullptr), 0);
    AVPacket* p = av_packet_alloc();
    while (av_read_frame(ic, p) >= 0) {
        if (p->stream_index == 0) {
            av_packet_rescale_ts(p, ic->streams[0]->time_base, st->time_base);
            p->pos = -1;
            ASSERT_GE(av_interleaved_write_frame(oc, p), 0);
        }
        av_packet_unref(p);
    }
    av_packet_free(&p);
    ASSERT_GE(av_write_trailer(oc), 0);
}

// HDR10 metadata and the rotation survive the restore, from the container (MP4's mdcv, clli and
// track matrix) or, for HEVC whose container has none, from the first picture's SEI; a container
// that cannot hold one gets a warning naming it. Interlaced pictures are counted and named.
TEST_F(MediaIo, HdrMetadataRotationAndInterlacingAreKeptOrNamed) {
    const std::string hdr = " -pix_fmt yuv420p10le -color_primaries bt2020 -color_trc smpte2084 -colorspace bt2020nc";
    const std::string plain = clip("hdr-plain.mp4", src("96x64") + " -t 1" + hdr +
                                                          " -c:v libx265 -x265-params log-level=0");
    const std::string tagged = out("hdr-tagged.mp4");
    remux_with_side_data(plain, tagged, 90);
    if (HasFatalFailure()) return;
    const std::string sei = clip("hdr-sei.mkv", src("96x64") + " -t 1" + hdr +
                                                    " -c:v libx265 -x265-params 'log-level=0:hdr10=1:master-display="
                                                    "G(13250,34500)B(7500,3000)R(34000,16000)WP(15635,16450)"
                                                    "L(10000000,50):max-cll=1000,400'");
    auto side_data = [](const std::string& file) {
        return capture("ffprobe -v error -select_streams v:0 -show_streams " + quoted(file) +
                       " | grep -E '^(side_data_type|rotation|max_luminance|min_luminance|max_content|max_average|"
                       "red_x|white_point_y)='");
    };
    const std::string want = side_data(tagged);
    ASSERT_NE(want.find("side_data_type=Mastering display metadata"), std::string::npos) << want;
    ASSERT_NE(want.find("rotation=-90"), std::string::npos) << want;
    EXPECT_EQ(side_data(sei).find("Mastering"), std::string::npos) << "the SEI file's container should hold none";

    WriterOptions wo;
    wo.codec = "libx265";
    wo.codec_options["x265-params"] = "log-level=0";
    const std::string mp4 = out("kept.mp4");
    EXPECT_EQ(transcode(tagged, mp4, wo).frames, 25);
    EXPECT_EQ(side_data(mp4), want);
    const std::string from_sei = out("from-sei.mkv");
    EXPECT_EQ(transcode(sei, from_sei, wo).frames, 25);
    const std::string got = side_data(from_sei);
    // Matroska stores the values as floats: FFmpeg gives them back reduced.
    EXPECT_NE(got.find("max_luminance=1000/1"), std::string::npos) << got;
    EXPECT_NE(got.find("min_luminance=1/200"), std::string::npos) << got;
    EXPECT_NE(got.find("red_x=17/25"), std::string::npos) << got;
    EXPECT_NE(got.find("max_content=1000"), std::string::npos) << got;
    EXPECT_NE(got.find("max_average=400"), std::string::npos) << got;
    {
        LogCapture log;
        const std::string mkv = out("rotated.mkv");
        EXPECT_EQ(transcode(tagged, mkv, wo).frames, 25);
        EXPECT_NE(side_data(mkv).find("Mastering display metadata"), std::string::npos);
        EXPECT_NE(log.text().find("the source video's Display Matrix cannot be stored in matroska; not copied"),
                  std::string::npos) << log.text();
    }
    Decoded plain_read = read_all(tagged);
    ASSERT_TRUE(plain_read.status.ok());
    EXPECT_EQ(plain_read.stats.interlaced_frames, 0);

    const std::string interlaced = clip("interlaced.mkv", src() + " -t 1 -c:v libx264 -preset veryfast -flags "
                                                                  "+ildct+ilme -x264-params tff=1");
    LogCapture log;
    Decoded d = read_all(interlaced);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    EXPECT_EQ(d.stats.interlaced_frames, 25);
    EXPECT_NE(log.text().find("frame 0 is interlaced"), std::string::npos) << log.text();
}

// decode.deinterlace = "bwdif": the pictures marked interlaced come out as the ffmpeg program's
// bwdif (one frame per frame, field order from each picture) makes them, byte for byte, at the
// same times; the GStreamer back end and an unknown name are refused.
TEST_F(MediaIo, DeinterlaceWithBwdifEqualsTheFfmpegProgramsFilter) {
    const std::string path = clip("interlaced-bwdif.mkv", src() + " -t 1 -c:v libx264 -preset veryfast -flags "
                                                                  "+ildct+ilme -x264-params tff=1");
    ReaderOptions o;
    o.deinterlace = "bwdif";
    Decoded d = read_all(path, o);
    ASSERT_TRUE(d.status.ok()) << d.status.to_string();
    Decoded plain = read_all(path);
    ASSERT_TRUE(plain.status.ok());
    ASSERT_EQ(d.frames.size(), 25u);
    EXPECT_EQ(d.stats.interlaced_frames, 25);
    for (size_t i = 0; i < d.metas.size(); ++i) {
        EXPECT_EQ(d.metas[i].pts, plain.metas[i].pts) << "frame " << i;
        EXPECT_EQ(d.metas[i].index, static_cast<int64_t>(i));
    }
    const std::string want = capture("ffmpeg -v error -i " + quoted(path) +
                                     " -vf bwdif=mode=send_frame:parity=auto:deint=interlaced -fps_mode passthrough"
                                     " -f rawvideo -pix_fmt yuv420p -");
    ASSERT_EQ(want.size(), 25u * 160 * 120 * 3 / 2);
    EXPECT_TRUE(d.joined() == want) << "frames differ from the ffmpeg program's bwdif";
    EXPECT_FALSE(d.joined() == plain.joined()) << "nothing was deinterlaced";
    // A progressive clip goes through untouched (deint=interlaced).
    Decoded progressive = read_all(seg_clip(), o);
    ASSERT_TRUE(progressive.status.ok()) << progressive.status.to_string();
    EXPECT_TRUE(progressive.joined() == read_all(seg_clip()).joined());

    o.deinterlace = "yadif";
    EXPECT_EQ(read_all(path, o).status.code(), StatusCode::INVALID_ARGUMENT);
    o.deinterlace = "bwdif";
    o.backend = "gstreamer";
    Decoded gst = read_all(path, o);
    EXPECT_EQ(gst.status.code(), StatusCode::INVALID_ARGUMENT) << gst.status.to_string();
}

// What a restoration must not lose (Video2X users keep reporting lost chapters, fonts and
// language tags): chapters with their titles and times, attachments (a font for ASS subtitles)
// with their names, types and bytes, stream tags and dispositions, global tags, and the codec of
// every copied stream (MP3 stays MP3), through a whole run and through segments joined. A container
// that cannot hold them (MP4: no attachments; AVI: no chapters) gets a warning naming what was not
// copied.
TEST_F(MediaIo, ChaptersAttachmentsTagsAndCodecLabelsAreKept) {
    std::ofstream(dir_ / "chapters.txt") << ";FFMETADATA1\ntitle=Film\n"
                                            "[CHAPTER]\nTIMEBASE=1/1000\nSTART=0\nEND=1200\ntitle=Opening\n"
                                            "[CHAPTER]\nTIMEBASE=1/1000\nSTART=1200\nEND=3000\ntitle=Part B\n";
    std::ofstream(dir_ / "kept.srt") << "1\n00:00:00,300 --> 00:00:00,900\nHello\n\n"
                                        "2\n00:00:01,500 --> 00:00:02,000\nAgain\n";
    std::string font(3000, '\0');
    for (size_t i = 0; i < font.size(); ++i) font[i] = static_cast<char>((i * 2654435761u) >> 13);
    std::ofstream(dir_ / "font.ttf", std::ios::binary) << font;
    const std::string path =
        clip("kept.mkv", src("96x64") + " -f lavfi -i sine=frequency=440:sample_rate=48000 -i chapters.txt -i kept.srt"
                                        " -t 3 -map 0:v -map 1:a -map 1:a -map 3:s -map_chapters 2 -c:v libx264"
                                        " -preset veryfast -g 25 -keyint_min 25 -sc_threshold 0 -c:a:0 aac"
                                        " -c:a:1 libmp3lame -c:s ass -attach font.ttf"
                                        " -metadata:s:t mimetype=application/x-truetype-font"
                                        " -metadata:s:a:0 language=jpn -metadata:s:a:0 title=Main"
                                        " -metadata:s:a:1 language=eng -metadata:s:a:1 title=Commentary"
                                        " -metadata:s:s:0 language=eng -disposition:a:0 default -disposition:a:1 0"
                                        " -disposition:s:0 forced -metadata LOOM_NOTE=kept -metadata title=Film");
    auto chapters = [](const std::string& file) {
        return capture("ffprobe -v error -show_chapters -show_entries chapter=start_time,end_time:chapter_tags=title"
                       " -of compact " + quoted(file));
    };
    auto streams = [](const std::string& file) {
        return capture("ffprobe -v error -show_entries stream=codec_type,codec_name:stream_tags=language,title,filename,"
                       "mimetype:stream_disposition=default,forced -of compact " + quoted(file));
    };
    auto attachment = [&](const std::string& file) {
        const std::string got = (work_ / "got.ttf").string();
        fs::remove(got);
        // ffmpeg dumps the attachment while it opens the input, then stops: no output is given.
        run("ffmpeg -v quiet -y -dump_attachment:t:0 " + quoted(got) + " -i " + quoted(file) + " >/dev/null 2>&1");
        std::ifstream in(got, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string want_chapters = chapters(path), want_streams = streams(path);
    ASSERT_NE(want_chapters.find("Part B"), std::string::npos) << want_chapters;
    ASSERT_NE(want_streams.find("codec_name=mp3"), std::string::npos) << want_streams;
    ASSERT_TRUE(attachment(path) == font);
    const auto without_video = [](const std::string& text) {  // the video is re-encoded: its lines differ
        std::string out;
        for (const auto& l : lines(text))
            if (l.find("codec_type=video") == std::string::npos) out += l + "\n";
        return out;
    };

    WriterOptions wo;
    wo.codec = "ffv1";
    const std::string whole = out("whole.mkv");
    EXPECT_EQ(transcode(path, whole, wo).frames, 75);
    EXPECT_EQ(chapters(whole), want_chapters);
    EXPECT_EQ(without_video(streams(whole)), without_video(want_streams));
    EXPECT_TRUE(attachment(whole) == font) << "the attached font's bytes";
    const auto tags = probe(whole, "", "format_tags=LOOM_NOTE,title");
    EXPECT_EQ(tags.count("TAG:LOOM_NOTE") ? tags.at("TAG:LOOM_NOTE") : "", "kept");
    EXPECT_EQ(tags.count("TAG:title") ? tags.at("TAG:title") : "", "Film");

    int64_t frames = 0;
    auto keys = list_keyframes(path, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    auto plan = plan_segments(*keys, frames, 2);
    ASSERT_EQ(plan.size(), 2u);
    std::vector<std::string> parts{out("p0.mkv"), out("p1.mkv")};
    for (size_t i = 0; i < 2; ++i) {
        write_segment(path, parts[i], plan[i]);
        if (HasFatalFailure()) return;
    }
    const std::string joined = out("joined.mkv");
    ASSERT_TRUE(join_segments(parts, joined).ok());
    EXPECT_EQ(chapters(joined), want_chapters);
    EXPECT_EQ(without_video(streams(joined)), without_video(want_streams));
    EXPECT_TRUE(attachment(joined) == font);

    // MP4 holds the chapters, not the attachment; AVI neither chapters nor subtitles: named.
    {
        LogCapture log;
        wo.codec = "libx264";
        const std::string mp4 = out("out.mp4");
        EXPECT_EQ(transcode(path, mp4, wo).frames, 75);
        EXPECT_EQ(chapters(mp4), want_chapters);
        EXPECT_NE(log.text().find("stream 4 (attachment ttf font.ttf) cannot be stored in mp4; not copied"),
                  std::string::npos) << log.text();
        EXPECT_NE(streams(mp4).find("codec_name=mp3"), std::string::npos);
        const std::string avi = out("out.avi");
        wo.codec = "ffv1";
        EXPECT_EQ(transcode(path, avi, wo).frames, 75);
        EXPECT_NE(log.text().find("the source's 2 chapters cannot be stored in avi; not copied"), std::string::npos)
            << log.text();
    }
    // MP3 in MP4 (object type 0x6B, which FFmpeg's MP4 demuxer first reads as MPEG audio of any
    // layer) stays MP3 in Matroska.
    const std::string mp3 = clip("mp3.mp4", src("96x64") + " -f lavfi -i sine=frequency=440:sample_rate=44100 -t 1"
                                                           " -c:v libx264 -preset veryfast -c:a libmp3lame");
    const std::string mkv = out("mp3.mkv");
    EXPECT_EQ(transcode(mp3, mkv, wo).frames, 25);
    EXPECT_EQ(probe(mkv, "-select_streams a", "stream=codec_name")["codec_name"], "mp3");
    // The packets' md5s, framemd5's sixth field: times are per container, and MP4 adds its
    // priming as side data (", S=1, size, md5" after it).
    const auto payloads = [](const std::string& hashes) {
        std::vector<std::string> out;
        for (const auto& l : lines(hashes)) {
            if (l[0] == '#') continue;
            std::istringstream fields(l);
            std::string f;
            for (int k = 0; k < 6 && std::getline(fields, f, ','); ++k) {
            }
            out.push_back(f);
        }
        return out;
    };
    EXPECT_EQ(payloads(packet_hashes(mkv, "0:a")), payloads(packet_hashes(mp3, "0:a")));
}

// A raw H.264 stream (no timestamps) with a frame the decoder drops (a broken slice header):
// its segments still hold every frame the whole read delivers, once, in order. The segments
// are cut on the packets' counted times; a segment ends at the next one's keyframe packet, not
// where its frames' own times (a frame short) would reach it.
TEST_F(MediaIo, SegmentsOfARawStreamWithADroppedFrameHoldEveryFrameOnce) {
    const std::string src_path = clip("drop-src.h264", src("96x64") + " -t 3 -c:v libx264 -preset veryfast -bf 0"
                                                                      " -g 25 -keyint_min 25 -sc_threshold 0");
    std::string bytes;
    {
        std::ifstream in(src_path, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    int slices = 0;
    for (size_t i = 0; i + 6 < bytes.size(); ++i) {
        if (bytes[i] != 0 || bytes[i + 1] != 0 || bytes[i + 2] != 1 || (bytes[i + 3] & 0x1f) != 1) continue;
        if (++slices == 5) {  // the fifth P-frame of the first group: its slice header garbled
            bytes[i + 4] = bytes[i + 5] = bytes[i + 6] = static_cast<char>(0xff);
            break;
        }
    }
    ASSERT_EQ(slices, 5);
    const std::string path = out("dropped.h264");
    std::ofstream(path, std::ios::binary) << bytes;
    ReaderOptions o;
    o.error_rate_max = 1;
    o.threads = 1;
    Decoded full = read_all(path, o);
    ASSERT_TRUE(full.status.ok()) << full.status.to_string();
    ASSERT_EQ(full.frames.size(), 74u) << "the decoder should drop the damaged frame";
    int64_t frames = 0;
    auto keys = list_keyframes(path, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    EXPECT_EQ(frames, 75);  // packets
    auto plan = plan_segments(*keys, frames, 3);
    ASSERT_EQ(plan.size(), 3u);
    std::string joined;
    int64_t last = INT64_MIN;
    size_t count = 0;
    for (const SegmentRange& r : plan) {
        o.start_frame = r.start_frame;
        o.frame_count = r.frame_count;
        o.segment_pts = ReaderOptions::SegmentPts{r.copy_from_pts, r.copy_to_pts};
        Decoded d = read_all(path, o);
        ASSERT_TRUE(d.status.ok()) << d.status.to_string();
        joined += d.joined();
        count += d.frames.size();
        for (const FrameMeta& m : d.metas) {
            EXPECT_GT(m.pts, last) << "segment at frame " << r.start_frame;
            last = m.pts;
        }
    }
    EXPECT_EQ(count, 74u);
    EXPECT_TRUE(joined == full.joined()) << "the segments' frames are not the whole read's, once each";
}

// Segments encoded with B-frames (libx264's default preset): Matroska stores no decode
// timestamps, so the packets ahead of a segment's first reordered one come back without any;
// the join must not let the muxer infer them from the previous segment's timeline (it went back
// in time and failed with EINVAL). Every frame, with its pts, in both containers.
TEST_F(MediaIo, SegmentsEncodedWithBFramesJoinInMatroskaAndMp4) {
    const std::string path = seg_clip();
    int64_t frames = 0;
    auto keys = list_keyframes(path, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    auto plan = plan_segments(*keys, frames, 3);
    ASSERT_EQ(plan.size(), 3u);
    for (const std::string ext : {".mkv", ".mp4"}) {
        std::vector<std::string> parts;
        for (size_t i = 0; i < plan.size(); ++i) {
            parts.push_back(out("bpart" + std::to_string(i) + ext));
            write_segment(path, parts.back(), plan[i], "libx264");
            if (HasFatalFailure()) return;
        }
        const std::string joined = out("bjoined" + ext);
        auto st = join_segments(parts, joined);
        ASSERT_TRUE(st.ok()) << ext << ": " << st.to_string();
        EXPECT_EQ(probe_frames(joined, "pts").size(), probe_frames(path, "pts").size()) << ext;
        Decoded j = read_all(joined);
        ASSERT_TRUE(j.status.ok()) << j.status.to_string();
        EXPECT_EQ(j.frames.size(), 75u) << ext;
        EXPECT_EQ(j.stats.decode_errors, 0) << ext;
    }
}

// AAC in MP4 starts 1024 priming samples (21 ms) below zero. A Matroska muxer shifts a file that
// starts below zero, so a whole run's output and its first segment start at +21 ms while the
// later segments did not: the joined timeline jumped back 21 ms at every seam. Every writer now
// applies the source's own offset; the joined pts equal the whole run's. MP4 audio that ends
// before the video leaves the last MP4 segment without an audio track: the join still takes it.
TEST_F(MediaIo, SegmentsOfAnMp4WithPrimedAudioJoinOnTheWholeRunsTimeline) {
    const std::string path = clip("primed.mp4", src() +
                                                    " -f lavfi -i sine=frequency=440:sample_rate=48000 -t 3 -map 0 -map 1"
                                                    " -c:v libx264 -preset veryfast -g 25 -keyint_min 25 -sc_threshold 0"
                                                    " -c:a aac -t 3");
    WriterOptions ffv1;
    ffv1.codec = "ffv1";
    const std::string whole = out("primed-whole.mkv");
    transcode(path, whole, ffv1);
    int64_t frames = 0;
    auto keys = list_keyframes(path, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    auto plan = plan_segments(*keys, frames, 3);
    ASSERT_EQ(plan.size(), 3u);
    std::vector<std::string> parts;
    for (size_t i = 0; i < plan.size(); ++i) {
        parts.push_back(out("primed" + std::to_string(i) + ".mkv"));
        write_segment(path, parts.back(), plan[i]);
        if (HasFatalFailure()) return;
    }
    const std::string joined = out("primed-joined.mkv");
    auto st = join_segments(parts, joined);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const auto pts = probe_frames(joined, "pts");
    EXPECT_EQ(pts.size(), 75u);
    EXPECT_EQ(pts, probe_frames(whole, "pts")) << "the joined timeline differs from the whole run's";
    EXPECT_EQ(packet_hashes(joined, "0:a"), packet_hashes(whole, "0:a"));

    // The same in MP4 at 24 fps (a 1/12288 time base), whose track offset (the video starts
    // after the primed audio) is written in the movie's milliseconds unless the join keeps the
    // video's time scale: the whole run rounds it once, a join would round it twice.
    const std::string path24 = clip("primed24.mp4", "-f lavfi -i testsrc2=size=160x120:rate=24"
                                                    " -f lavfi -i sine=frequency=440:sample_rate=48000 -map 0 -map 1"
                                                    " -c:v libx264 -preset veryfast -g 24 -keyint_min 24"
                                                    " -sc_threshold 0 -c:a aac -t 3");
    WriterOptions x264;
    x264.codec = "libx264";
    const std::string whole_mp4 = out("primed24-whole.mp4");
    transcode(path24, whole_mp4, x264);
    keys = list_keyframes(path24, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    plan = plan_segments(*keys, frames, 3);
    ASSERT_EQ(plan.size(), 3u);
    parts.clear();
    for (size_t i = 0; i < plan.size(); ++i) {
        parts.push_back(out("primed24-" + std::to_string(i) + ".mp4"));
        write_segment(path24, parts.back(), plan[i], "libx264");
        if (HasFatalFailure()) return;
    }
    const std::string joined_mp4 = out("primed24-joined.mp4");
    st = join_segments(parts, joined_mp4);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(probe_frames(joined_mp4, "pts"), probe_frames(whole_mp4, "pts"))
        << "the joined MP4's timeline differs from the whole run's";

    // An MP4 segment past the end of the audio has no audio track at all.
    const std::string short_audio = clip("short-audio.mp4", src() +
                                                             " -f lavfi -i sine=frequency=440:sample_rate=48000 -t 3"
                                                             " -map 0 -map 1 -c:v libx264 -preset veryfast -g 25"
                                                             " -keyint_min 25 -sc_threshold 0 -c:a aac -af atrim=end=1");
    keys = list_keyframes(short_audio, {}, &frames);
    ASSERT_TRUE(keys.ok()) << keys.status().to_string();
    plan = plan_segments(*keys, frames, 2);
    ASSERT_EQ(plan.size(), 2u);
    parts.clear();
    for (size_t i = 0; i < plan.size(); ++i) {
        parts.push_back(out("short" + std::to_string(i) + ".mp4"));
        write_segment(short_audio, parts.back(), plan[i], "libx264");
        if (HasFatalFailure()) return;
    }
    st = join_segments(parts, out("short-joined.mp4"));
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(probe_frames(out("short-joined.mp4"), "pts").size(), 75u);
}

TEST_F(MediaIo, JoinRefusesSegmentsOfOtherSizesAndMissingFiles) {
    const std::string a = clip("join_a.mkv", src() + " -frames:v 5 -c:v ffv1");
    const std::string b = clip("join_b.mkv", src("128x96") + " -frames:v 5 -c:v ffv1");
    const std::string dst = out("joined.mkv");
    auto st = join_segments({a, b}, dst);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find(b), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("128x96"), std::string::npos) << st.message();
    st = join_segments({a, out("missing.mkv")}, dst);
    EXPECT_EQ(st.code(), StatusCode::NOT_FOUND) << st.to_string();
    EXPECT_NE(st.message().find("missing.mkv"), std::string::npos) << st.message();
    EXPECT_FALSE(join_segments({}, dst).ok());
    // The same segment twice goes back in time.
    st = join_segments({a, a}, dst);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(a), std::string::npos) << st.message();
    EXPECT_TRUE(fs::is_empty(work_));
}

// --- the GStreamer back end ----------------------------------------------------------------

ReaderOptions gst_reading() {
    ReaderOptions o;
    o.backend = "gstreamer";
    return o;
}

class GstMediaIo : public MediaIo {
protected:
    void SetUp() override {
        MediaIo::SetUp();
        if (!IsSkipped() && !gstreamer_) GTEST_SKIP() << "this build has no GStreamer";
    }
    // Every frame of `path` read by both back ends: the same pixels, count, layout and colour,
    // and the same time (GStreamer's nanoseconds against FFmpeg's ticks, to the nearest).
    static void expect_same_frames(const std::string& path) {
        SCOPED_TRACE(path);
        Decoded a = read_all(path), g = read_all(path, gst_reading());
        ASSERT_TRUE(a.status.ok()) << a.status.to_string();
        ASSERT_TRUE(g.status.ok()) << g.status.to_string();
        EXPECT_EQ(g.info.layout, a.info.layout);
        EXPECT_EQ(g.info.color, a.info.color);
        EXPECT_EQ(g.info.time_base.den, 1'000'000'000);
        EXPECT_EQ(g.stats.decode_errors, 0);
        ASSERT_EQ(g.frames.size(), a.frames.size());
        ASSERT_GT(a.frames.size(), 0u);
        for (size_t i = 0; i < a.frames.size(); ++i) {
            EXPECT_TRUE(g.frames[i] == a.frames[i]) << "frame " << i << ": pixels differ";
            const double ns = 1e9 * static_cast<double>(a.metas[i].pts) * a.info.time_base.num / a.info.time_base.den;
            const double tick = 1e9 * a.info.time_base.num / a.info.time_base.den;
            EXPECT_LE(std::abs(static_cast<double>(g.metas[i].pts) - ns), tick / 2)
                << "frame " << i << ": " << g.metas[i].pts << " ns against " << a.metas[i].pts << " ticks";
            EXPECT_EQ(g.metas[i].index, static_cast<int64_t>(i));
        }
    }
};

TEST_F(GstMediaIo, ReaderGivesFfmpegsFramesAndTimesOnEveryContainer) {
    expect_same_frames(av_clip());   // Matroska, H.264 with B-frames, AAC, subtitles, BT.601
    expect_same_frames(vfr_clip());  // variable frame rate
    // MP4 with B-frames and AAC (an edit list), AVI with MPEG-4 part 2 and MP3, 10-bit, odd size.
    expect_same_frames(clip("gst.mp4", src() + " -f lavfi -i sine=sample_rate=48000 -t 1 -c:v libx264 -preset veryfast"
                                               " -bf 2 -c:a aac -colorspace bt709 -color_primaries bt709 -color_trc bt709"));
    expect_same_frames(clip("gst.avi", src() + " -f lavfi -i sine=sample_rate=44100 -t 1 -c:v mpeg4 -qscale:v 3 -c:a "
                                               "libmp3lame"));
    expect_same_frames(clip("gst10.mkv", src() + " -frames:v 6 -pix_fmt yuv420p10le -c:v ffv1"));
    expect_same_frames(clip("gstodd.mkv", src("75x49") + " -frames:v 4 -c:v ffv1"));

    Decoded g = read_all(av_clip(), gst_reading());
    ASSERT_TRUE(g.status.ok()) << g.status.to_string();
    EXPECT_EQ(g.info.codec, "h264");
    EXPECT_EQ(g.info.container, "matroskademux");
    EXPECT_NE(g.info.decoder.find("(gstreamer)"), std::string::npos) << g.info.decoder;
    EXPECT_EQ(g.info.color_matrix_code, 6);
    EXPECT_EQ(g.info.frame_rate.num, 25);
    EXPECT_NEAR(g.info.duration_s, 2.0, 0.1);
}

TEST_F(GstMediaIo, ReaderTakesAUriAndADescriptionOfTheUsersOwn) {
    const std::string path = clip("gst_uri.mkv", src() + " -frames:v 5 -c:v ffv1");
    Decoded uri = read_all("file://" + path, gst_reading());
    ASSERT_TRUE(uri.status.ok()) << uri.status.to_string();
    EXPECT_EQ(uri.frames.size(), 5u);
    ReaderOptions o = gst_reading();
    o.gst_pipeline = "videotestsrc num-buffers=7 ! video/x-raw,format=NV12,width=64,height=48,framerate=30/1";
    Decoded own = read_all("testsrc", o);
    ASSERT_TRUE(own.status.ok()) << own.status.to_string();
    EXPECT_EQ(own.frames.size(), 7u);
    EXPECT_EQ(own.info.layout, (FrameLayout{PixelFormat::NV12, 64, 48}));
    ASSERT_EQ(own.metas.size(), 7u);
    EXPECT_EQ(own.metas[3].pts, 100'000'000);
}

TEST_F(GstMediaIo, ReaderErrorsNameTheFileOrTheDescription) {
    Decoded missing = read_all(out("missing.mkv"), gst_reading());
    EXPECT_EQ(missing.status.code(), StatusCode::NOT_FOUND) << missing.status.to_string();
    EXPECT_NE(missing.status.message().find("missing.mkv"), std::string::npos) << missing.status.message();

    std::ofstream(out("text.mkv")) << "not a video at all\n";
    Decoded text = read_all(out("text.mkv"), gst_reading());
    EXPECT_FALSE(text.status.ok());
    EXPECT_NE(text.status.message().find("text.mkv"), std::string::npos) << text.status.message();

    ReaderOptions o = gst_reading();
    o.gst_pipeline = "nosuchelement ! videoconvert";
    Decoded bad = read_all("described", o);
    EXPECT_EQ(bad.status.code(), StatusCode::INVALID_ARGUMENT) << bad.status.to_string();
    EXPECT_NE(bad.status.message().find("nosuchelement"), std::string::npos) << bad.status.message();

    o = gst_reading();
    o.start_frame = 25;
    Decoded seg = read_all(av_clip(), o);
    EXPECT_EQ(seg.status.code(), StatusCode::UNSUPPORTED) << seg.status.to_string();

    ReaderOptions f;
    f.gst_pipeline = "videotestsrc";
    EXPECT_EQ(MediaReader::open(av_clip(), f).status().code(), StatusCode::INVALID_ARGUMENT);
}

TEST_F(GstMediaIo, WriterKeepsFramesTimesColourAndCopiesAudioAndNamesWhatItCannot) {
    const std::string path = av_clip();
    WriterOptions options;
    options.backend = "gstreamer";
    options.codec = "ffv1";
    for (const bool gst_read : {false, true}) {
        SCOPED_TRACE(gst_read ? "read by GStreamer" : "read by FFmpeg");
        const std::string dst = out(gst_read ? "gg.mkv" : "fg.mkv");
        LogCapture log;
        EncodeStats es = transcode(path, dst, options, gst_read ? gst_reading() : ReaderOptions{});
        EXPECT_EQ(es.frames, 50);
        EXPECT_GT(es.packets_copied, 50);
        EXPECT_GT(es.bytes, 0);
        Decoded a = read_all(path), b = read_all(dst);
        ASSERT_TRUE(b.status.ok()) << b.status.to_string();
        EXPECT_EQ(b.info.codec, "ffv1");
        ASSERT_EQ(b.frames.size(), a.frames.size());
        for (size_t i = 0; i < a.frames.size(); ++i) EXPECT_TRUE(a.frames[i] == b.frames[i]) << "frame " << i;
        EXPECT_EQ(probe_frames(dst, "pts"), probe_frames(path, "pts"));
        // The audio and subtitle packets untouched, at their times.
        const std::string copy = " -map 0:a -c copy -f md5 -";
        EXPECT_EQ(capture("ffmpeg -v error -i " + quoted(dst) + copy), capture("ffmpeg -v error -i " + quoted(path) + copy));
        // GStreamer's Matroska demuxer gives SubRip as Pango markup, which its muxer does not take:
        // the stream is named in a warning, never dropped silently.
        EXPECT_EQ(probe(dst, "", "format=nb_streams")["nb_streams"], "2");
        EXPECT_NE(log.text().find("the muxer cannot hold the source's stream text/x-raw"), std::string::npos)
            << log.text();
        const std::string apts = "ffprobe -v error -select_streams a:0 -show_entries packet=pts_time -of csv=p=0 ";
        EXPECT_EQ(capture(apts + quoted(dst)), capture(apts + quoted(path)));
        auto v = probe(dst, "-select_streams v:0", "stream=color_space,color_primaries,color_transfer,color_range");
        EXPECT_EQ(v["color_space"], "smpte170m");
        EXPECT_EQ(v["color_primaries"], "bt470bg");
        EXPECT_EQ(v["color_transfer"], "smpte170m");
        EXPECT_EQ(v["color_range"], "tv");
    }
}

TEST_F(GstMediaIo, WriterMakesMp4WithX264AndTheGivenEncoderAndMuxer) {
    const std::string path = clip("gst_w.mp4", src() + " -f lavfi -i sine=sample_rate=48000 -t 1 -c:v libx264 -preset "
                                                      "veryfast -bf 2 -c:a aac");
    WriterOptions options;
    options.backend = "gstreamer";
    options.preset = "ultrafast";
    EncodeStats es = transcode(path, out("x264.mp4"), options);
    EXPECT_EQ(es.frames, 25);
    EXPECT_EQ(probe_frames(out("x264.mp4"), "pts_time").size(), 25u);
    EXPECT_EQ(probe(out("x264.mp4"), "-select_streams v:0", "stream=codec_name")["codec_name"], "h264");
    EXPECT_EQ(probe(out("x264.mp4"), "-select_streams a:0", "stream=codec_name")["codec_name"], "aac");

    options.gst_encoder = "x264enc speed-preset=ultrafast key-int-max=5";
    options.gst_muxer = "matroskamux writing-app=loom-test";
    es = transcode(path, out("given.mkv"), options);
    EXPECT_EQ(es.frames, 25);
    const auto keys = lines(capture("ffprobe -v error -select_streams v:0 -show_entries frame=key_frame -of csv=p=0 " +
                                    quoted(out("given.mkv"))));
    EXPECT_GE(std::count(keys.begin(), keys.end(), "1"), 4) << "key-int-max=5 was not applied";
}

TEST_F(GstMediaIo, WriterRefusalsNameTheElementAndLeaveNoFile) {
    const std::string path = av_clip();
    auto reader = MediaReader::open(path);
    ASSERT_TRUE(reader.ok());
    const VideoInfo& info = (*reader)->info();
    WriterOptions options;
    options.backend = "gstreamer";
    options.gst_encoder = "nosuchencoder";
    auto w = MediaWriter::open(out("a.mkv"), info, info.layout, info.color, options);
    EXPECT_EQ(w.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(w.status().message().find("nosuchencoder"), std::string::npos) << w.status().message();

    options.gst_encoder = "pngenc";  // takes RGB, not 4:2:0
    w = MediaWriter::open(out("a.mkv"), info, info.layout, info.color, options);
    EXPECT_EQ(w.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(w.status().message().find("does not take the frames"), std::string::npos) << w.status().message();

    options.gst_encoder.clear();
    w = MediaWriter::open(out("a.xyz"), info, info.layout, info.color, options);
    EXPECT_EQ(w.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(w.status().message().find(".xyz"), std::string::npos) << w.status().message();

    options.copy_to_pts = 1000;
    w = MediaWriter::open(out("a.mkv"), info, info.layout, info.color, options);
    EXPECT_EQ(w.status().code(), StatusCode::UNSUPPORTED) << w.status().to_string();

    WriterOptions ffmpeg;
    ffmpeg.gst_muxer = "mp4mux";
    EXPECT_EQ(MediaWriter::open(out("a.mkv"), info, info.layout, info.color, ffmpeg).status().code(),
              StatusCode::INVALID_ARGUMENT);

    // Closed before finish(): no file, no temporary.
    options.copy_to_pts = INT64_MAX;
    options.preset = "ultrafast";
    {
        auto writer = MediaWriter::open(out("gone.mkv"), info, info.layout, info.color, options);
        ASSERT_TRUE(writer.ok()) << writer.status().to_string();
        std::vector<uint8_t> buf(info.layout.bytes());
        FrameMeta meta;
        for (int i = 0; i < 3; ++i) {
            ASSERT_TRUE(*(*reader)->read(buf.data(), buf.size(), meta));
            ASSERT_TRUE((*writer)->write(buf.data(), buf.size(), meta).ok());
        }
    }
    EXPECT_TRUE(fs::is_empty(work_)) << fs::directory_iterator(work_)->path();
}

}  // namespace

}  // namespace test_media_io
