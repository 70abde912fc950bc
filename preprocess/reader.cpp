// MediaReader: demux the best video stream, decode it (hardware through FFmpeg's hwdevice API
// when asked and available, else software), and copy each picture into the caller's tight
// 4:2:0 buffer, converting with swscale only when the decoder's format is not one of Loom's.
#include <algorithm>
#include <cmath>
#include <mutex>
#include <optional>
#include <vector>

extern "C" {
#include <libavfilter/avfilter.h>
#include <libavfilter/buffersink.h>
#include <libavfilter/buffersrc.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
}

#include "common/log.hpp"
#include "preprocess/av_util.hpp"
#include "preprocess/backend.hpp"
#include "preprocess/media_io.hpp"

namespace loom::preprocess {

namespace {

constexpr std::string_view kLog = "media";
// Corrupt frames logged at warn per reader; the rest go to debug (all are counted).
constexpr int64_t kCorruptWarnings = 5;
// Decoder errors in a row without a frame before the stream is declared undecodable, whatever
// error_rate_max says (a guard against a decoder that never recovers).
constexpr int kErrorsInARowMax = 1000;

}  // namespace

struct MediaReader::Impl {
    std::string path;
    ReaderOptions options;
    VideoInfo info;
    DecodeStats stats;

    av::InputPtr input;
    av::CodecPtr decoder;
    av::BufferPtr hw_device;
    AVPixelFormat hw_format = AV_PIX_FMT_NONE;
    av::PacketPtr packet;
    av::FramePtr frame, transferred, converted;
    av::SwsPtr sws;
    AVPixelFormat sws_source = AV_PIX_FMT_NONE;

    // Pictures in options.frame_memory (get_picture): one block per picture, all planes in it,
    // recycled by FFmpeg's buffer pool (thread-safe: frame threads allocate concurrently).
    std::mutex pool_mutex;
    AVBufferPool* picture_pool = nullptr;  // guarded by pool_mutex; freed once its blocks return
    size_t picture_pool_block = 0;
    bool direct_pictures = false;  // the decoder takes get_picture (DR1, software, memory given)

    bool flushed = false;  // the end of input was sent to the decoder
    bool ended = false;    // the decoder drained
    Status failed;         // sticky: once a read failed, every later read returns it
    int errors_in_a_row = 0;
    // Where the last packet sent to the decoder came from, for error messages.
    int64_t packet_pts = AV_NOPTS_VALUE, packet_pos = -1;
    int64_t last_pts = AV_NOPTS_VALUE, last_duration = 0;
    std::string last_error_at;

    // A segment (ReaderOptions.start_frame / frame_count): frames are delivered while
    // start_pts <= pts < end_pts. While `seeking`, video packets before the keyframe whose pts
    // is seek_pts are dropped undecoded (a segment start: they are all presented before it).
    int64_t start_pts = INT64_MIN, end_pts = INT64_MAX;
    bool seeking = false, rewound = false;
    int64_t seek_pts = AV_NOPTS_VALUE;
    int64_t frames_before_start = 0;  // decoded and dropped (the demuxer landed early)
    // Times the video packets for the seek (a stream without timestamps counts them; see
    // av::UntimedClock): it sees every video packet read since the input was opened.
    av::UntimedClock clock;

    // ReaderOptions.deinterlace: decoded pictures go through buffer -> bwdif -> buffersink, made
    // at the first picture (its size, format and aspect); receive() takes its output.
    struct GraphDeleter {
        void operator()(AVFilterGraph* g) const { avfilter_graph_free(&g); }
    };
    std::unique_ptr<AVFilterGraph, GraphDeleter> graph;
    AVFilterContext* graph_in = nullptr;
    AVFilterContext* graph_out = nullptr;
    bool graph_flushed = false;
    Status open_deinterlacer(const AVFrame* f);

    // Offers the hardware surface format when the decoder lists it, else its first software one.
    static AVPixelFormat pick_format(AVCodecContext* ctx, const AVPixelFormat* formats) {
        auto* self = static_cast<Impl*>(ctx->opaque);
        for (const AVPixelFormat* f = formats; *f != AV_PIX_FMT_NONE; ++f)
            if (*f == self->hw_format) return *f;
        for (const AVPixelFormat* f = formats; *f != AV_PIX_FMT_NONE; ++f) {
            const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(*f);
            if (d && !(d->flags & AV_PIX_FMT_FLAG_HWACCEL)) {
                log::warn(kLog, "{}: the hardware decoder does not take this stream; decoding in software", self->path);
                return *f;
            }
        }
        return AV_PIX_FMT_NONE;
    }

    // AVCodecContext.get_buffer2: pictures of Loom's formats in options.frame_memory, laid out
    // as FFmpeg's default allocator lays them out (dimensions aligned for the codec, every row
    // 64-byte aligned, padding after each plane); anything else by FFmpeg's default.
    static int get_picture(AVCodecContext* ctx, AVFrame* f, int flags) {
        auto* self = static_cast<Impl*>(ctx->opaque);
        PixelFormat ours;
        if (!self->direct_pictures || f->hw_frames_ctx || ctx->hw_frames_ctx ||
            !av::from_av(static_cast<AVPixelFormat>(f->format), ours))
            return avcodec_default_get_buffer2(ctx, f, flags);
        const auto format = static_cast<AVPixelFormat>(f->format);
        int w = f->width, h = f->height;
        int align[AV_NUM_DATA_POINTERS];
        avcodec_align_dimensions2(ctx, &w, &h, align);
        constexpr int kRowAlign = 64;  // every CPU's SIMD (FFmpeg's STRIDE_ALIGN is at most 64)
        int linesize[4] = {};
        for (;;) {  // widen until every plane's rows are aligned, as FFmpeg's own allocator does
            if (av_image_fill_linesizes(linesize, format, w) < 0) return AVERROR(EINVAL);
            bool aligned = true;
            for (int i = 0; i < 4; ++i) aligned = aligned && linesize[i] % kRowAlign == 0;
            if (aligned) break;
            w += w & ~(w - 1);
        }
        ptrdiff_t pitches[4];
        for (int i = 0; i < 4; ++i) pitches[i] = linesize[i];
        size_t sizes[4] = {};
        if (av_image_fill_plane_sizes(sizes, format, h, pitches) < 0) return AVERROR(EINVAL);
        constexpr size_t kPad = 16 + kRowAlign;  // what FFmpeg's allocator leaves after a plane
        size_t block = 0;
        for (size_t sz : sizes)
            if (sz) block += (sz + kPad + kRowAlign - 1) / kRowAlign * kRowAlign;
        AVBufferRef* buf = nullptr;
        {
            std::lock_guard lock(self->pool_mutex);
            if (!self->picture_pool || self->picture_pool_block != block) {
                av_buffer_pool_uninit(&self->picture_pool);  // its blocks go once returned
                self->picture_pool = av_buffer_pool_init2(block, self, &Impl::alloc_block, nullptr);
                self->picture_pool_block = block;
            }
            if (self->picture_pool) buf = av_buffer_pool_get(self->picture_pool);
        }
        if (!buf) return AVERROR(ENOMEM);
        f->buf[0] = buf;
        uint8_t* at = buf->data;
        for (int i = 0; i < 4; ++i) {
            if (!sizes[i]) break;
            f->data[i] = at;
            f->linesize[i] = linesize[i];
            at += (sizes[i] + kPad + kRowAlign - 1) / kRowAlign * kRowAlign;
        }
        f->extended_data = f->data;
        return 0;
    }
    static AVBufferRef* alloc_block(void* opaque, size_t bytes) {
        const ReaderOptions::FrameMemory& m = static_cast<Impl*>(opaque)->options.frame_memory;
        void* p = m.alloc(bytes);
        if (!p) return nullptr;
        // The block outlives the reader when a view holds it: its release needs only m.free.
        AVBufferRef* ref = av_buffer_create(static_cast<uint8_t*>(p), bytes, &Impl::free_block,
                                            reinterpret_cast<void*>(m.free), 0);
        if (!ref) m.free(p);
        return ref;
    }
    static void free_block(void* opaque, uint8_t* data) {
        reinterpret_cast<void (*)(void*)>(opaque)(data);
    }
    ~Impl() {
        av::stop_counting_decoder_errors(this);
        std::lock_guard lock(pool_mutex);
        av_buffer_pool_uninit(&picture_pool);
    }

    // Receives the next frame to deliver into `frame` (its pts checked against the segment and
    // the previous frame; deinterlaced when asked); false at the end of the stream or segment.
    Result<bool> receive();
    Result<bool> receive_decoded();
    // Returns `f` in info.layout (checked, counted): `f` itself, the hardware picture copied to
    // memory, or the picture converted by swscale. `held`: the result will be held beyond this
    // read (a view), so a conversion must not write into a picture a view still holds.
    Result<AVFrame*> picture(AVFrame* f, bool held);
    // Fills `meta` for the decoded frame `f` and counts it as delivered.
    void take_meta(const AVFrame* f, FrameMeta& meta);
    Status open_decoder(const AVCodec* codec, const AVStream* st);
    bool try_hw(const AVCodec* codec, AVHWDeviceType type, bool asked);
    Status fill_info(const AVCodec* codec, const AVStream* st);
    Status feed();

    void note_error(std::string_view what, int err, bool skipped);
    // Counts what the decoder reported in its log since the last call as one more error.
    void take_logged_errors();
    // Errors seen from our side (calls that failed, frames flagged corrupt, frames out of
    // order), and the stretches between two packets in which the decoder logged errors (what it
    // concealed or dropped without saying so in a call). Both see most damaged frames; the
    // larger is the count (DecodeStats.decode_errors).
    int64_t explicit_errors = 0, logged_episodes = 0;
    std::atomic<int64_t> logged_errors{0};  // the decoder's error messages (av::count_decoder_errors)
    int64_t logged_seen = 0;
    Status check_error_rate(bool at_end) const;
    Status open_segment();
    Status rewind();
    Status seek_to(int64_t pts);
    Status fail(Status st) {
        failed = st;
        return st;
    }
};

MediaReader::MediaReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MediaReader::MediaReader(std::unique_ptr<ReaderBackend> other) : other_(std::move(other)) {}
MediaReader::~MediaReader() = default;
const VideoInfo& MediaReader::info() const { return other_ ? other_->info() : impl_->info; }
DecodeStats MediaReader::stats() const { return other_ ? other_->stats() : impl_->stats; }

bool MediaReader::Impl::try_hw(const AVCodec* codec, AVHWDeviceType type, bool asked) {
    const char* name = av_hwdevice_get_type_name(type);
    AVPixelFormat surface = AV_PIX_FMT_NONE;
    for (int i = 0;; ++i) {
        const AVCodecHWConfig* c = avcodec_get_hw_config(codec, i);
        if (!c) break;
        if ((c->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX) && c->device_type == type) {
            surface = c->pix_fmt;
            break;
        }
    }
    auto level = asked ? spdlog::level::warn : spdlog::level::info;
    if (surface == AV_PIX_FMT_NONE) {
        log::write(level, kLog, fmt::format("{}: {} cannot decode {}; trying the next decoder", path, name, codec->name));
        return false;
    }
    AVBufferRef* device = nullptr;
    int r;
    {
        // "auto" on a machine without the device is the normal case, not worth FFmpeg's errors.
        std::optional<av::QuietLog> quiet;
        if (!asked) quiet.emplace();
        r = av_hwdevice_ctx_create(&device, type, nullptr, nullptr, 0);
    }
    if (r < 0) {
        log::write(level, kLog, fmt::format("{}: no {} device ({}); trying the next decoder", path, name, av::error_text(r)));
        return false;
    }
    hw_device.reset(device);
    hw_format = surface;
    return true;
}

Status MediaReader::Impl::open_decoder(const AVCodec* codec, const AVStream* st) {
    decoder.reset(avcodec_alloc_context3(codec));
    if (!decoder) return make_error(StatusCode::INTERNAL, "{}: out of memory allocating the {} decoder", path, codec->name);
    int r = avcodec_parameters_to_context(decoder.get(), st->codecpar);
    if (r < 0) return av::error(r, path, "setting up the decoder");
    decoder->pkt_timebase = st->time_base;
    // Its errors are counted by its opaque, which get_format and get_picture read too.
    decoder->opaque = this;
    av::count_decoder_errors(this, &logged_errors);
    decoder->thread_count = options.threads;
    decoder->max_pixels = options.limits.pixels_max;  // the decoder refuses larger pictures itself

    std::vector<AVHWDeviceType> candidates;
    const bool asked = options.hwaccel != "auto";
    if (!options.deinterlace.empty()) {
        // The deinterlacer takes pictures in memory: decode in software.
        if (options.hwaccel != "auto" && options.hwaccel != "none")
            log::warn(kLog, "{}: hwaccel '{}' is not used: deinterlacing decodes in software", path, options.hwaccel);
    } else if (options.hwaccel == "auto") {
        candidates = {AV_HWDEVICE_TYPE_VAAPI, AV_HWDEVICE_TYPE_CUDA};
    } else if (options.hwaccel != "none") {
        AVHWDeviceType t = av_hwdevice_find_type_by_name(options.hwaccel.c_str());
        if (t == AV_HWDEVICE_TYPE_NONE)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: hwaccel '{}' is not a hardware decoder FFmpeg knows (auto, none, vaapi, cuda, ...)",
                              path, options.hwaccel);
        candidates = {t};
    }
    for (AVHWDeviceType t : candidates)
        if (try_hw(codec, t, asked)) break;
    if (hw_device) {
        decoder->hw_device_ctx = av_buffer_ref(hw_device.get());
        decoder->get_format = &Impl::pick_format;
    } else if (options.frame_memory.alloc && options.frame_memory.free && (codec->capabilities & AV_CODEC_CAP_DR1)) {
        direct_pictures = true;  // software pictures straight into the caller's memory
        decoder->get_buffer2 = &Impl::get_picture;
    }
    r = avcodec_open2(decoder.get(), codec, nullptr);
    if (r < 0) return av::error(r, path, fmt::format("opening the {} decoder", codec->name));
    if (hw_device)
        log::info(kLog, "{}: decoding {} on {}", path, codec->name,
                  av_hwdevice_get_type_name(reinterpret_cast<AVHWDeviceContext*>(hw_device->data)->type));
    else if (asked && options.hwaccel != "none")
        log::warn(kLog, "{}: hwaccel '{}' unavailable; decoding {} in software", path, options.hwaccel, codec->name);
    else
        log::info(kLog, "{}: decoding {} in software", path, codec->name);
    return {};
}

Status MediaReader::Impl::fill_info(const AVCodec* codec, const AVStream* st) {
    const AVCodecParameters* par = st->codecpar;
    info.path = path;
    info.container = input->iformat->name;
    info.codec = avcodec_get_name(par->codec_id);
    info.stream_index = st->index;
    info.streams = static_cast<int>(input->nb_streams);
    info.time_base = {st->time_base.num, st->time_base.den};
    info.frame_rate = {st->avg_frame_rate.num, st->avg_frame_rate.den};
    info.sample_aspect_ratio = {par->sample_aspect_ratio.num, par->sample_aspect_ratio.den};
    switch (av::field_order_of(*par)) {
        case AV_FIELD_PROGRESSIVE: info.field_order = "progressive"; break;
        case AV_FIELD_TT: info.field_order = "tt"; break;
        case AV_FIELD_BB: info.field_order = "bb"; break;
        case AV_FIELD_TB: info.field_order = "tb"; break;
        case AV_FIELD_BT: info.field_order = "bt"; break;
        default: info.field_order = "unknown"; break;
    }
    if (input->duration > 0)
        info.duration_s = static_cast<double>(input->duration) / AV_TIME_BASE;
    else if (st->duration > 0)
        info.duration_s = static_cast<double>(st->duration) * av_q2d(st->time_base);
    if (st->nb_frames > 0)
        info.frames_estimate = st->nb_frames;
    else if (info.duration_s > 0 && st->avg_frame_rate.num > 0)
        info.frames_estimate = std::llround(info.duration_s * av_q2d(st->avg_frame_rate));

    const auto source = static_cast<AVPixelFormat>(par->format);
    if (source == AV_PIX_FMT_NONE) return make_error(StatusCode::PARSE_ERROR, "{}: the video stream has no known pixel format", path);
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(source);
    const bool full_format = source == AV_PIX_FMT_YUVJ420P || source == AV_PIX_FMT_YUVJ422P ||
                             source == AV_PIX_FMT_YUVJ444P || source == AV_PIX_FMT_YUVJ440P ||
                             source == AV_PIX_FMT_YUVJ411P;
    const bool rgb = desc && (desc->flags & AV_PIX_FMT_FLAG_RGB);

    ColorInfo& c = info.color;
    bool bad[4] = {};
    const AVColorSpace space = av::color_space_of(*par, &bad[0]);
    const AVColorRange range = av::color_range_of(*par, &bad[1]);
    c.primaries = av::color_primaries_of(*par, &bad[2]);
    c.transfer = av::color_transfer_of(*par, &bad[3]);
    if (bad[0] || bad[1] || bad[2] || bad[3])
        log::warn(kLog, "{}: the video's colour tags hold codes no standard defines (matrix, range, primaries, "
                        "transfer: {}{}{}{}); those are treated as unspecified",
                  path, bad[0] ? "bad" : "ok", bad[1] ? ", bad" : ", ok", bad[2] ? ", bad" : ", ok",
                  bad[3] ? ", bad" : ", ok");
    info.color_matrix_code = space;
    if (!av::matrix_from_av(space, c.matrix)) {
        c.matrix = av::default_matrix(par->height);
        if (space != AVCOL_SPC_UNSPECIFIED && space != AVCOL_SPC_RGB)
            log::warn(kLog, "{}: colourspace '{}' is not one Loom converts; treating it as {}", path,
                      av_color_space_name(space), color_matrix_name(c.matrix));
    }
    if (range == AVCOL_RANGE_JPEG && !rgb)
        c.range = ColorRange::FULL;
    else if (range == AVCOL_RANGE_MPEG || rgb)
        c.range = ColorRange::LIMITED;  // RGB sources are converted to limited-range YUV
    else
        c.range = full_format ? ColorRange::FULL : ColorRange::LIMITED;

    FrameLayout& l = info.layout;
    l.width = par->width;
    l.height = par->height;
    LOOM_TRY(l.check().with_context(path));
    PixelFormat direct;
    const bool exact = av::from_av(source, direct);
    l.format = exact ? direct : (av::depth_of(source) > 8 ? PixelFormat::YUV420P10 : PixelFormat::YUV420P);
    info.decoder = codec->name;
    if (hw_device)
        info.decoder += fmt::format(" ({})", av_hwdevice_get_type_name(
                                                 reinterpret_cast<AVHWDeviceContext*>(hw_device->data)->type));
    if (!exact) {
        info.decoder += fmt::format(" + swscale {} -> {}", av_get_pix_fmt_name(source), pixel_format_name(l.format));
        log::info(kLog, "{}: {} frames are converted to {} by swscale (matrix {} and range {} kept)", path,
                  av_get_pix_fmt_name(source), pixel_format_name(l.format), color_matrix_name(c.matrix),
                  color_range_name(c.range));
    }
    return {};
}

Result<std::unique_ptr<MediaReader>> MediaReader::open(const std::string& path, const ReaderOptions& options) {
    if (options.backend == "gstreamer") {
        if (!options.deinterlace.empty())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: deinterlace is the FFmpeg back end's (libavfilter); "
                              "GStreamer's is a deinterlace element in the description", path);
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ReaderBackend> other, open_gst_reader(path, options));
        return std::unique_ptr<MediaReader>(new MediaReader(std::move(other)));
    }
    if (options.backend != "ffmpeg")
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: backend \"{}\" (ffmpeg or gstreamer)", path,
                          options.backend);
    if (!options.gst_pipeline.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: a GStreamer description needs backend \"gstreamer\"",
                          path);
    if (!options.deinterlace.empty() && options.deinterlace != "bwdif")
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: deinterlace \"{}\" (bwdif, or empty for none)", path,
                          options.deinterlace);
    av::route_log();
    if (!(options.error_rate_max >= 0.0))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: error_rate_max {} must be >= 0", path, options.error_rate_max);
    if (options.start_frame < 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: start_frame {} must be >= 0", path, options.start_frame);
    if (options.frame_count != -1 && options.frame_count < 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame_count {} must be >= 1, or -1 for all", path,
                          options.frame_count);
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->options = options;
    LOOM_ASSIGN_OR_RETURN(impl->input, av::open_input(path, options.limits.streams_max,
                                                      impl->options.interrupted ? &impl->options.interrupted : nullptr));

    const AVCodec* codec = nullptr;
    int index = av_find_best_stream(impl->input.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (index == AVERROR_STREAM_NOT_FOUND) return make_error(StatusCode::PARSE_ERROR, "{}: no video stream", path);
    if (index == AVERROR_DECODER_NOT_FOUND || !codec) {
        int any = av_find_best_stream(impl->input.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
        const char* name = any >= 0 ? avcodec_get_name(impl->input->streams[any]->codecpar->codec_id) : "?";
        return make_error(StatusCode::UNSUPPORTED, "{}: no decoder for the video codec '{}'", path, name);
    }
    if (index < 0) return av::error(index, path, "finding the video stream");
    const AVStream* st = impl->input->streams[index];
    const int64_t pixels = static_cast<int64_t>(st->codecpar->width) * st->codecpar->height;
    if (pixels > options.limits.pixels_max)
        return make_error(StatusCode::OUT_OF_RANGE, "{}: {}x{} frames ({} pixels) exceed the limit pixels_max {}", path,
                          st->codecpar->width, st->codecpar->height, pixels, options.limits.pixels_max);
    // Only the video stream is read: the demuxer drops the others' packets unread where it can.
    for (unsigned i = 0; i < impl->input->nb_streams; ++i)
        if (static_cast<int>(i) != index) impl->input->streams[i]->discard = AVDISCARD_ALL;

    LOOM_TRY(impl->open_decoder(codec, st));
    LOOM_TRY(impl->fill_info(codec, st));
    impl->packet.reset(av_packet_alloc());
    impl->frame.reset(av_frame_alloc());
    impl->transferred.reset(av_frame_alloc());
    if (!impl->packet || !impl->frame || !impl->transferred)
        return make_error(StatusCode::INTERNAL, "{}: out of memory allocating frames", path);
    if (options.start_frame > 0 || options.frame_count > 0) LOOM_TRY(impl->open_segment());
    return std::unique_ptr<MediaReader>(new MediaReader(std::move(impl)));
}

Status MediaReader::Impl::open_segment() {
    if (options.segment_pts) {
        // Bounds from a plan: no scan. The seek lands on the keyframe, or the read fails.
        const ReaderOptions::SegmentPts& b = *options.segment_pts;
        if (options.start_frame > 0) {
            if (b.from == INT64_MIN)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: segment from frame {} without its keyframe's pts",
                                  path, options.start_frame);
            start_pts = b.from;
            LOOM_TRY(seek_to(start_pts));
        }
        if (b.to != INT64_MAX && b.to <= b.from)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: segment pts [{}, {}) is empty", path, b.from, b.to);
        end_pts = b.to;
        log::info(kLog, "{}: segment from frame {} (pts {}) to pts {} (planned)", path, options.start_frame,
                  options.start_frame > 0 ? start_pts : 0, end_pts);
        return {};
    }
    LOOM_ASSIGN_OR_RETURN(av::VideoPacketIndex index,
                          av::index_video_packets(path, options.limits,
                                                  options.interrupted ? &options.interrupted : nullptr));
    if (index.stream_index != info.stream_index)
        return make_error(StatusCode::INTERNAL, "{}: the packet scan chose video stream {}, the reader {}", path,
                          index.stream_index, info.stream_index);
    const auto frames = static_cast<int64_t>(index.sorted_pts.size());
    const int64_t start = options.start_frame;
    if (start >= frames)
        return make_error(StatusCode::OUT_OF_RANGE, "{}: start_frame {} is past the last frame ({} frames)", path, start,
                          frames);
    if (start > 0) {
        const KeyframeInfo* at = nullptr;
        const KeyframeInfo *before = nullptr, *after = nullptr;
        for (const KeyframeInfo& k : index.keyframes) {
            if (!k.segment_start) continue;
            if (k.frame == start) at = &k;
            if (k.frame < start) before = &k;
            if (k.frame > start && !after) after = &k;
        }
        if (!at) {
            auto name = [](const KeyframeInfo* k) {
                return k ? fmt::format("frame {} (pts {})", k->frame, k->pts) : std::string("none");
            };
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: start_frame {} is not a keyframe a segment can start on; the nearest before is "
                              "{}, after {}",
                              path, start, name(before), name(after));
        }
        start_pts = at->pts;
        LOOM_TRY(seek_to(start_pts));
    }
    if (options.frame_count > 0 && options.frame_count < frames - start)
        end_pts = index.sorted_pts[static_cast<size_t>(start + options.frame_count)];
    log::info(kLog, "{}: segment from frame {} (pts {}), {} frames", path, start,
              start > 0 ? start_pts : index.sorted_pts.empty() ? 0 : index.sorted_pts[0],
              options.frame_count > 0 ? std::min(options.frame_count, frames - start) : frames - start);
    return {};
}

// Seeks to the keyframe at `pts` (reading from the start when the demuxer cannot seek).
Status MediaReader::Impl::seek_to(int64_t pts) {
    seek_pts = pts;
    seeking = true;
    // A container without timestamps (raw elementary streams) has none to seek by, and its
    // frames are timed by counting from the start: read from there, dropping packets undecoded.
    if (input->iformat->flags & AVFMT_NOTIMESTAMPS) return {};
    int r = avformat_seek_file(input.get(), info.stream_index, INT64_MIN, seek_pts, seek_pts, 0);
    if (r < 0) {
        log::debug(kLog, "{}: seeking to pts {} failed ({}); reading from the start", path, seek_pts, av::error_text(r));
        LOOM_TRY(rewind());
    }
    return {};
}

// Opens the input again at its start (the demuxer's seek landed past the keyframe, or failed).
Status MediaReader::Impl::rewind() {
    if (rewound && options.segment_pts)
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "{}: the segment's first frame (pts {}) is no keyframe of the file: the file changed since "
                          "the segment was planned?",
                          path, seek_pts);
    if (rewound)
        return make_error(StatusCode::INTERNAL, "{}: the keyframe at pts {} was not found reading from the start", path,
                          seek_pts);
    rewound = true;
    clock = {};
    LOOM_ASSIGN_OR_RETURN(input, av::open_input(path, options.limits.streams_max,
                                                options.interrupted ? &options.interrupted : nullptr));
    for (unsigned i = 0; i < input->nb_streams; ++i)
        if (static_cast<int>(i) != info.stream_index) input->streams[i]->discard = AVDISCARD_ALL;
    return {};
}

void MediaReader::Impl::take_logged_errors() {
    const int64_t now = logged_errors.load(std::memory_order_relaxed);
    if (now == logged_seen) return;
    logged_seen = now;
    // A segment that starts on an open GOP's keyframe decodes its leading frames without the
    // group before: what the decoder says before the segment's first frame is about those.
    if (start_pts != INT64_MIN && stats.frames == 0) return;
    ++logged_episodes;
    last_error_at = fmt::format("frame {}, pts {}, byte offset {}", stats.frames,
                                packet_pts == AV_NOPTS_VALUE ? std::string("unknown") : std::to_string(packet_pts),
                                packet_pos);
    stats.decode_errors = std::max(explicit_errors, logged_episodes);
}

void MediaReader::Impl::note_error(std::string_view what, int err, bool skipped) {
    ++explicit_errors;
    stats.decode_errors = std::max(explicit_errors, logged_episodes);
    if (skipped) ++stats.frames_skipped;
    last_error_at = fmt::format("frame {}, pts {}, byte offset {}", stats.frames,
                                packet_pts == AV_NOPTS_VALUE ? std::string("unknown") : std::to_string(packet_pts),
                                packet_pos);
    auto level = stats.decode_errors <= kCorruptWarnings ? spdlog::level::warn : spdlog::level::debug;
    if (log::enabled(level))
        log::write(level, kLog,
                   fmt::format("{}: {} at {}{}{}", path, what, last_error_at, err ? ": " : "",
                               err ? av::error_text(err) : std::string()));
}

Status MediaReader::Impl::check_error_rate(bool at_end) const {
    const int64_t seen = stats.frames + stats.frames_skipped;
    if (stats.decode_errors == 0 || (!at_end && seen < 10)) return {};
    const double rate = static_cast<double>(stats.decode_errors) / static_cast<double>(std::max<int64_t>(seen, 1));
    if (rate <= options.error_rate_max) return {};
    return make_error(StatusCode::PARSE_ERROR,
                      "{}: {} decode errors in {} frames ({:.1f}%) exceed error_rate_max {:.1f}%; last at {}", path,
                      stats.decode_errors, seen, 100.0 * rate, 100.0 * options.error_rate_max, last_error_at);
}

// Reads packets until one video packet went to the decoder, or sends the end of input.
Status MediaReader::Impl::feed() {
    for (;;) {
        int r = av_read_frame(input.get(), packet.get());
        // An interrupted read may reach us as any error, or as an end of file (demuxers map
        // short reads to AVERROR_EOF): never take it for the end of the stream.
        if (r < 0 && (r == AVERROR_EXIT || (options.interrupted && options.interrupted())))
            return make_error(StatusCode::CANCELLED, "{}: reading interrupted", path);
        if (r < 0 && seeking) {  // the end came before the keyframe: the seek went past it
            LOOM_TRY(rewind());
            continue;
        }
        if (r < 0) {
            // As the ffmpeg program does, a read error ends the input; what was decoded stays.
            if (r != AVERROR_EOF) {
                packet_pos = avio_tell(input->pb);
                note_error("demuxing stopped", r, false);
            }
            r = avcodec_send_packet(decoder.get(), nullptr);
            if (r < 0 && r != AVERROR_EOF) return av::error(r, path, "flushing the decoder");
            flushed = true;
            return {};
        }
        struct Unref {
            AVPacket* p;
            ~Unref() { av_packet_unref(p); }
        } unref{packet.get()};
        if (packet->stream_index != info.stream_index) continue;
        const int64_t t = clock.stamp(*packet);
        if (seeking) {
            if (t == AV_NOPTS_VALUE || t < seek_pts) continue;  // presented before the segment
            if (t > seek_pts) {  // past the keyframe: the demuxer landed after it
                log::debug(kLog, "{}: the seek to pts {} landed at pts {}; reading from the start", path, seek_pts, t);
                LOOM_TRY(rewind());
                continue;
            }
            if (!(packet->flags & AV_PKT_FLAG_KEY)) {
                // Timestamps a container does not store (MPEG-PS: not every frame has one) are
                // derived from the packets before; after a seek those differ. From the start they
                // are the scan's: only there does a frame that is no keyframe mean another file.
                if (!rewound) {
                    log::debug(kLog, "{}: the seek to pts {} landed on a frame that is no keyframe; reading from "
                               "the start", path, seek_pts);
                    LOOM_TRY(rewind());
                    continue;
                }
                return make_error(StatusCode::FAILED_PRECONDITION,
                                  "{}: the segment's first frame (pts {}) is no keyframe: the file changed since the "
                                  "segment was planned?",
                                  path, seek_pts);
            }
            seeking = false;  // the keyframe: decoding starts here
        }
        if (clock.counting() && t >= end_pts) {
            // Without timestamps the next segment starts at this packet, a closed group's first:
            // everything decoded before it is this segment's, so the decoder is drained here. A
            // frame the decoder dropped leaves this segment a frame short, never takes one of
            // the next (the frames' own times, counted from the segment's start, run behind).
            int r = avcodec_send_packet(decoder.get(), nullptr);
            if (r < 0 && r != AVERROR_EOF) return av::error(r, path, "flushing the decoder");
            flushed = true;
            return {};
        }
        if (packet->size > options.limits.packet_bytes_max)
            return make_error(StatusCode::OUT_OF_RANGE,
                              "{}: a {}-byte video packet at byte offset {} exceeds the limit packet_bytes_max {}", path,
                              packet->size, packet->pos, options.limits.packet_bytes_max);
        take_logged_errors();  // about the packets before this one
        ++stats.packets;
        packet_pts = packet->pts;
        packet_pos = packet->pos;
        r = avcodec_send_packet(decoder.get(), packet.get());
        if (r == AVERROR(EAGAIN))
            return make_error(StatusCode::INTERNAL, "{}: the decoder took no packet while holding no frame", path);
        if (r < 0) {
            note_error("packet rejected by the decoder", r, true);
            return check_error_rate(false);
        }
        return {};
    }
}

Result<AVFrame*> MediaReader::Impl::picture(AVFrame* f, bool held) {
    const FrameLayout& l = info.layout;
    if (hw_format != AV_PIX_FMT_NONE && f->format == hw_format) {
        av_frame_unref(transferred.get());  // new memory per picture: a view may hold the last
        int r = av_hwframe_transfer_data(transferred.get(), f, 0);
        if (r < 0) return av::error(r, path, fmt::format("copying frame {} from the hardware decoder", stats.frames));
        av_frame_copy_props(transferred.get(), f);
        f = transferred.get();
    }
    if (f->width != l.width || f->height != l.height)
        return make_error(StatusCode::UNSUPPORTED, "{}: frame {} (pts {}) is {}x{}; the stream started at {}x{}", path,
                          stats.frames, f->best_effort_timestamp, f->width, f->height, l.width, l.height);
    if (stats.frames >= options.limits.frames_max)
        return make_error(StatusCode::OUT_OF_RANGE, "{}: more than frames_max {} frames", path,
                          options.limits.frames_max);
    if ((f->flags & AV_FRAME_FLAG_CORRUPT) || f->decode_error_flags) {
        packet_pts = f->best_effort_timestamp;
#if LIBAVUTIL_VERSION_MAJOR < 58  // AVFrame.pkt_pos is deprecated from FFmpeg 6
        packet_pos = f->pkt_pos;
#endif
        note_error("frame decoded with errors (concealed)", 0, false);
    }

    const auto source = static_cast<AVPixelFormat>(f->format);
    PixelFormat direct;
    if (av::from_av(source, direct) && direct == l.format) return f;
    if ((av::depth_of(source) > 8) != (bit_depth(l.format) > 8))
        return make_error(StatusCode::UNSUPPORTED, "{}: frame {} (pts {}) is {}; the stream started as {}", path,
                          stats.frames, f->best_effort_timestamp, av_get_pix_fmt_name(source),
                          pixel_format_name(l.format));
    const AVPixelFormat target = av::to_av(l.format);
    if (source != sws_source || !sws) {
        sws.reset(sws_getContext(f->width, f->height, source, f->width, f->height, target,
                                 SWS_BICUBIC | SWS_ACCURATE_RND | SWS_BITEXACT, nullptr, nullptr, nullptr));
        if (!sws)
            return make_error(StatusCode::UNSUPPORTED, "{}: swscale cannot convert {} to {}", path,
                              av_get_pix_fmt_name(source), pixel_format_name(l.format));
        // Sampling changes only: the stream's matrix and range stay what info().color says.
        if (!av::sws_keep_color(sws.get(), info.color.matrix, info.color.range, info.color.range))
            log::debug(kLog, "{}: swscale kept its own colour details for {}", path, av_get_pix_fmt_name(source));
        converted.reset(av_frame_alloc());
        if (!converted) return make_error(StatusCode::INTERNAL, "{}: out of memory", path);
        sws_source = source;
    }
    // A picture a view still holds is left to it; the conversion gets new memory.
    if (!converted->buf[0] || (held && !av_frame_is_writable(converted.get()))) {
        av_frame_unref(converted.get());
        converted->format = target;
        converted->width = f->width;
        converted->height = f->height;
        int r = av_frame_get_buffer(converted.get(), 0);
        if (r < 0) return av::error(r, path, "allocating a conversion frame");
    }
    int r = sws_scale(sws.get(), f->data, f->linesize, 0, f->height, converted->data, converted->linesize);
    if (r < 0) return av::error(r, path, fmt::format("converting frame {}", stats.frames));
    return converted.get();
}

void MediaReader::Impl::take_meta(const AVFrame* f, FrameMeta& meta) {
    meta.index = options.start_frame + stats.frames;
    meta.pts = f->best_effort_timestamp;  // set by receive() where the stream gave none
#if LIBAVUTIL_VERSION_MAJOR >= 58  // AVFrame.duration; FFmpeg 5.1 has pkt_duration only
    meta.duration = f->duration;
#else
    meta.duration = f->pkt_duration;
#endif
#ifdef AV_FRAME_FLAG_KEY
    meta.keyframe = (f->flags & AV_FRAME_FLAG_KEY) != 0;
#else
    meta.keyframe = f->key_frame != 0;
#endif
    last_pts = meta.pts;
    last_duration = meta.duration;
    ++stats.frames;
    errors_in_a_row = 0;
}

Status MediaReader::Impl::open_deinterlacer(const AVFrame* f) {
    graph.reset(avfilter_graph_alloc());
    if (!graph) return make_error(StatusCode::INTERNAL, "{}: out of memory allocating the deinterlacer", path);
    const AVRational sar = f->sample_aspect_ratio.num > 0 ? f->sample_aspect_ratio : AVRational{1, 1};
    const std::string args = fmt::format("video_size={}x{}:pix_fmt={}:time_base={}/{}:pixel_aspect={}/{}", f->width,
                                         f->height, f->format, info.time_base.num, info.time_base.den, sar.num,
                                         sar.den);
    AVFilterContext* bwdif = nullptr;
    int r = avfilter_graph_create_filter(&graph_in, avfilter_get_by_name("buffer"), "in", args.c_str(), nullptr,
                                         graph.get());
    // One frame out per frame in (not one per field), the times kept; only pictures marked
    // interlaced are touched, each field order as the picture says.
    if (r >= 0)
        r = avfilter_graph_create_filter(&bwdif, avfilter_get_by_name("bwdif"), "bwdif",
                                         "mode=send_frame:parity=auto:deint=interlaced", nullptr, graph.get());
    if (r >= 0)
        r = avfilter_graph_create_filter(&graph_out, avfilter_get_by_name("buffersink"), "out", nullptr, nullptr,
                                         graph.get());
    if (r >= 0) r = avfilter_link(graph_in, 0, bwdif, 0);
    if (r >= 0) r = avfilter_link(bwdif, 0, graph_out, 0);
    if (r >= 0) r = avfilter_graph_config(graph.get(), nullptr);
    if (r < 0) return av::error(r, path, fmt::format("setting up the bwdif deinterlacer ({})", args));
    log::info(kLog, "{}: deinterlacing with bwdif (pictures marked interlaced, one frame per frame)", path);
    return {};
}

// The decoder's frames through the deinterlacer, when there is one: bwdif holds a frame until
// it has the next one, and gives the held ones back once flushed.
Result<bool> MediaReader::Impl::receive() {
    if (!graph_in && options.deinterlace.empty()) return receive_decoded();
    for (;;) {
        if (graph_out) {
            int r = av_buffersink_get_frame(graph_out, frame.get());
            if (r >= 0) {
                // bwdif counts in half the input's ticks (it could give a frame per field).
                const AVRational tb{info.time_base.num, info.time_base.den};
                frame->best_effort_timestamp =
                    frame->pts == AV_NOPTS_VALUE ? frame->pts
                                                 : av_rescale_q(frame->pts, av_buffersink_get_time_base(graph_out), tb);
                return true;
            }
            if (r == AVERROR_EOF) return false;
            if (r != AVERROR(EAGAIN)) return fail(av::error(r, path, "deinterlacing"));
            if (graph_flushed) return false;
        }
        LOOM_ASSIGN_OR_RETURN(bool got, receive_decoded());
        if (!got) {
            if (!graph_in) return false;  // nothing was decoded
            int r = av_buffersrc_add_frame(graph_in, nullptr);
            if (r < 0) return fail(av::error(r, path, "flushing the deinterlacer"));
            graph_flushed = true;
            continue;
        }
        if (!graph_in) LOOM_TRY(open_deinterlacer(frame.get()));
        frame->pts = frame->best_effort_timestamp;
        int r = av_buffersrc_add_frame(graph_in, frame.get());  // takes the picture
        if (r < 0) return fail(av::error(r, path, fmt::format("deinterlacing frame {}", stats.frames)));
    }
}

Result<bool> MediaReader::Impl::receive_decoded() {
    if (!failed.ok()) return failed;
    if (ended) return false;
    for (;;) {
        int r = avcodec_receive_frame(decoder.get(), frame.get());
        if (r == 0) {
            if (frame->flags & AV_FRAME_FLAG_DISCARD) {
                av_frame_unref(frame.get());
                continue;
            }
            // A frame without a timestamp (a stream without any) follows the previous one by its
            // duration; the first is at 0, or at the time counted for its segment's keyframe.
            if (frame->best_effort_timestamp == AV_NOPTS_VALUE)
                frame->best_effort_timestamp = last_pts != AV_NOPTS_VALUE ? last_pts + std::max<int64_t>(last_duration, 1)
                                               : start_pts != INT64_MIN  ? start_pts
                                                                         : 0;
            const int64_t pts = frame->best_effort_timestamp;
            if (pts < start_pts) {  // before the segment
                ++frames_before_start;
                av_frame_unref(frame.get());
                continue;
            }
            if (pts >= end_pts) {  // the next segment's first frame
                av_frame_unref(frame.get());
                ended = true;
                take_logged_errors();
                Status st = check_error_rate(true);
                if (!st.ok()) return fail(st);
                log::info(kLog, "{}: segment of {} frames decoded from {} packets ({} decode errors)", path,
                          stats.frames, stats.packets, stats.decode_errors);
                return false;
            }
            // Frames come in presentation order: one whose timestamp is not after the last one
            // delivered (corrupt data) is skipped and counted, never handed on.
            if (last_pts != AV_NOPTS_VALUE && pts <= last_pts) {
                note_error(fmt::format("a frame with pts {} not after the previous frame's {}", pts, last_pts), 0,
                           true);
                av_frame_unref(frame.get());
                Status st = check_error_rate(false);
                if (!st.ok()) return fail(st);
                continue;
            }
            if (frame->interlaced_frame && stats.interlaced_frames++ == 0)
                log::warn(kLog, "{}: frame {} is interlaced ({} field first; the stream says {}): {}", path,
                          options.start_frame + stats.frames, frame->top_field_first ? "top" : "bottom",
                          info.field_order,
                          options.deinterlace.empty() ? "the model sees its two fields as one picture (decode."
                                                        "deinterlace = \"bwdif\" deinterlaces)"
                                                      : "deinterlaced with " + options.deinterlace);
            return true;
        }
        if (r == AVERROR_EOF) {
            ended = true;
            take_logged_errors();
            Status st = check_error_rate(true);
            if (!st.ok()) return fail(st);
            log::info(kLog, "{}: {} frames decoded from {} packets ({} decode errors, {} frames skipped)", path,
                      stats.frames, stats.packets, stats.decode_errors, stats.frames_skipped);
            return false;
        }
        if (r != AVERROR(EAGAIN)) {  // the decoder dropped a frame it could not decode
            note_error("frame rejected by the decoder", r, true);
            Status st = check_error_rate(false);
            if (!st.ok()) return fail(st);
            if (++errors_in_a_row > kErrorsInARowMax)
                return fail(make_error(StatusCode::PARSE_ERROR, "{}: {} decode errors in a row; last at {}", path,
                                       errors_in_a_row, last_error_at));
            continue;
        }
        if (flushed) {  // EAGAIN after the end of input: nothing more will come
            ended = true;
            return false;
        }
        Status st = feed();
        if (!st.ok()) return fail(st);
    }
}

Result<bool> MediaReader::read(uint8_t* dst, size_t dst_bytes, FrameMeta& meta) {
    const VideoInfo& info = this->info();
    if (!dst || dst_bytes < info.layout.bytes())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: read into {} bytes; a {}x{} {} frame needs {}", info.path,
                          dst_bytes, info.layout.width, info.layout.height, pixel_format_name(info.layout.format),
                          info.layout.bytes());
    if (other_) {
        FrameView view;
        LOOM_ASSIGN_OR_RETURN(bool got, other_->read(view, meta));
        if (got) view.copy_to(dst);
        return got;
    }
    Impl& s = *impl_;
    if (!s.failed.ok()) return s.failed;
    LOOM_ASSIGN_OR_RETURN(bool got, s.receive());
    if (!got) return false;
    auto p = s.picture(s.frame.get(), false);
    if (p.ok()) {
        av::copy_to_tight(*p, s.info.layout, dst);
        s.take_meta(s.frame.get(), meta);
    }
    av_frame_unref(s.frame.get());
    if (!p.ok()) return s.fail(p.status());
    Status st = s.check_error_rate(false);
    if (!st.ok()) return s.fail(st);
    return true;
}

Result<bool> MediaReader::read(FrameView& view, FrameMeta& meta) {
    if (other_) return other_->read(view, meta);
    Impl& s = *impl_;
    LOOM_ASSIGN_OR_RETURN(bool got, s.receive());
    if (!got) return false;
    auto p = s.picture(s.frame.get(), true);
    AVFrame* held = nullptr;
    if (p.ok()) {
        // The picture's own reference: the decoder reuses its memory only after the view's
        // owner lets go of it.
        held = av_frame_clone(*p);
        if (held) s.take_meta(s.frame.get(), meta);
    }
    const bool direct = p.ok() && *p == s.frame.get();
    av_frame_unref(s.frame.get());
    if (!p.ok()) return s.fail(p.status());
    if (!held) return s.fail(make_error(StatusCode::INTERNAL, "{}: out of memory holding frame {}", s.path, meta.index));
    view = FrameView();
    view.layout = s.info.layout;
    view.owner = std::shared_ptr<const void>(held, [](const void* x) {
        auto* f = static_cast<AVFrame*>(const_cast<void*>(x));
        av_frame_free(&f);
    });
    for (int i = 0; i < view.planes(); ++i) {
        view.plane[static_cast<size_t>(i)] = held->data[i];
        view.stride[static_cast<size_t>(i)] = held->linesize[i];
    }
    // Only pictures the decoder wrote into options.frame_memory are in it (not the deinterlacer's).
    view.pinned = direct && s.direct_pictures && !s.graph && s.options.frame_memory.pinned && !held->hw_frames_ctx;
    Status st = view.check();
    if (st.ok()) st = s.check_error_rate(false);
    if (!st.ok()) return s.fail(st.with_context(s.path));
    return true;
}

}  // namespace loom::preprocess
