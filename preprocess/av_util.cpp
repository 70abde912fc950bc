#include "preprocess/av_util.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <unordered_map>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

extern "C" {
#include <libavutil/avstring.h>
#include <libavutil/dict.h>
#include <libavutil/log.h>
#include <libavutil/mathematics.h>
#include <libavutil/mem.h>
#include <libavutil/pixdesc.h>
}

#include "common/log.hpp"

namespace loom::preprocess::av {

std::string error_text(int err) {
    char buf[AV_ERROR_MAX_STRING_SIZE] = {};
    if (av_strerror(err, buf, sizeof buf) < 0) return fmt::format("FFmpeg error {}", err);
    return buf;
}

Status error(int err, std::string_view path, std::string_view what) {
    StatusCode code = StatusCode::INTERNAL;
    if (err == AVERROR(ENOENT))
        code = StatusCode::NOT_FOUND;
    else if (err == AVERROR_INVALIDDATA || err == AVERROR_EOF || err == AVERROR_DECODER_NOT_FOUND ||
             err == AVERROR_DEMUXER_NOT_FOUND || err == AVERROR_STREAM_NOT_FOUND)
        code = StatusCode::PARSE_ERROR;
    else if (err == AVERROR_ENCODER_NOT_FOUND || err == AVERROR_MUXER_NOT_FOUND || err == AVERROR_PATCHWELCOME ||
             err == AVERROR(ENOSYS))
        code = StatusCode::UNSUPPORTED;
    else if (err == AVERROR(EINVAL))
        code = StatusCode::INVALID_ARGUMENT;
    else if (err < 0 && err > -4096)  // AVERROR(errno) of an OS call
        code = StatusCode::IO_ERROR;
    return Status(code, fmt::format("{}: {}: {}", path, what, error_text(err)));
}

namespace {

// FFmpeg errors on corrupt input come many per frame; past this many a second they go to debug.
constexpr int kWarnLinesPerSecond = 8;
thread_local bool t_quiet = false;

// Decoders whose errors are counted (count_decoder_errors): AVCodecContext.opaque -> counter.
// Looked up for error messages only, which are rare.
std::mutex g_counted_mutex;
std::unordered_map<const void*, std::atomic<int64_t>*>& counted_decoders() {
    static auto* map = new std::unordered_map<const void*, std::atomic<int64_t>*>;  // lives to the exit
    return *map;
}

void count_error(void* avcl) {
    if (!avcl) return;
    const AVClass* cls = *static_cast<const AVClass* const*>(avcl);
    if (cls != avcodec_get_class()) return;
    const void* key = static_cast<const AVCodecContext*>(avcl)->opaque;
    if (!key) return;
    std::lock_guard lock(g_counted_mutex);
    auto& map = counted_decoders();
    auto it = map.find(key);
    if (it != map.end()) it->second->fetch_add(1, std::memory_order_relaxed);
}

void log_callback(void* avcl, int level, const char* format, va_list args) {
    if (level > AV_LOG_WARNING) return;
    if (level <= AV_LOG_ERROR) count_error(avcl);
    auto loom_level = level <= AV_LOG_ERROR && !t_quiet ? spdlog::level::warn : spdlog::level::debug;
    if (loom_level == spdlog::level::warn) {
        static std::atomic<int64_t> window{0};
        static std::atomic<int> lines{0};
        const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count();
        if (window.exchange(now, std::memory_order_relaxed) != now) lines.store(0, std::memory_order_relaxed);
        if (lines.fetch_add(1, std::memory_order_relaxed) >= kWarnLinesPerSecond) loom_level = spdlog::level::debug;
    }
    if (!log::enabled(loom_level)) return;
    thread_local int print_prefix = 1;
    char line[1024];
    av_log_format_line2(avcl, level, format, args, line, sizeof line, &print_prefix);
    size_t n = std::strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) --n;
    if (n == 0) return;
    log::write(loom_level, "ffmpeg", std::string_view(line, n));
}

}  // namespace

void route_log() {
    static std::once_flag once;
    std::call_once(once, [] { av_log_set_callback(log_callback); });
}

void count_decoder_errors(const void* key, std::atomic<int64_t>* count) {
    std::lock_guard lock(g_counted_mutex);
    counted_decoders()[key] = count;
}

void stop_counting_decoder_errors(const void* key) {
    std::lock_guard lock(g_counted_mutex);
    counted_decoders().erase(key);
}

QuietLog::QuietLog() : previous_(t_quiet) { t_quiet = true; }
QuietLog::~QuietLog() { t_quiet = previous_; }

std::string temporary_name(const std::string& path) {
    // The pid tells processes apart; the counter and a random word tell apart the writers of one
    // process (two jobs writing one folder) and a pid reused after a crash.
    static std::atomic<uint64_t> serial{0};
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const std::filesystem::path p(path);
    const std::string name = fmt::format(".{}.partial-{}-{}-{:08x}{}", p.stem().string(), ::getpid(),
                                         serial.fetch_add(1, std::memory_order_relaxed),
                                         static_cast<uint32_t>(rng()), p.extension().string());
    return (p.parent_path() / name).string();
}

bool carried_tag(const char* key) {
    return av_strcasecmp(key, "encoder") != 0 && av_strcasecmp(key, "duration") != 0 &&
           !std::string_view(key).starts_with("_STATISTICS") && av_strncasecmp(key, "NUMBER_OF_", 10) != 0 &&
           av_strcasecmp(key, "BPS") != 0;
}

void copy_metadata(const AVDictionary* from, AVDictionary** to) {
    const AVDictionaryEntry* e = nullptr;
    while ((e = av_dict_get(from, "", e, AV_DICT_IGNORE_SUFFIX)))
        if (carried_tag(e->key)) av_dict_set(to, e->key, e->value, 0);
}

bool holds_display_matrix(std::string_view m) { return m == "mov" || m == "mp4" || m == "ipod" || m == "ismv"; }
bool holds_hdr(std::string_view m) { return holds_display_matrix(m) || m == "matroska" || m == "webm"; }
bool holds_chapters(std::string_view m) { return holds_hdr(m) || m == "ogg"; }
bool holds_attachments(std::string_view m) { return m == "matroska"; }
bool holds_stream_tag(std::string_view m, std::string_view key) {
    if (m == "matroska" || m == "webm") return true;
    if (key == "language") return holds_display_matrix(m) || m == "mpegts";
    return key == "title" && m == "avi";
}
bool holds_frame_times(std::string_view m) { return m != "avi"; }
bool holds_codec(const AVOutputFormat* muxer, AVCodecID codec) {
    const int r = avformat_query_codec(muxer, codec, FF_COMPLIANCE_NORMAL);
    if (r >= 0) return r == 1;
    // No list: a muxer takes a kind of stream it has a default codec for (MPEG-TS: audio and
    // subtitles), not one it has none for (a raw .h264 file: video only).
    switch (avcodec_get_type(codec)) {
        case AVMEDIA_TYPE_AUDIO: return muxer->audio_codec != AV_CODEC_ID_NONE;
        case AVMEDIA_TYPE_SUBTITLE: return muxer->subtitle_codec != AV_CODEC_ID_NONE;
        case AVMEDIA_TYPE_VIDEO: return muxer->video_codec != AV_CODEC_ID_NONE;
        default: return false;
    }
}

namespace {

// A pipe or a device read through poll(2), so that a wait for data that never comes can be
// interrupted (AVIOContext's opaque).
struct PolledInput {
    int fd = -1;
    const Interrupt* interrupt = nullptr;
};

int polled_read(void* opaque, uint8_t* buf, int size) {
    auto* in = static_cast<PolledInput*>(opaque);
    for (;;) {
        if ((*in->interrupt)()) return AVERROR_EXIT;
        pollfd p{in->fd, POLLIN, 0};
        const int r = ::poll(&p, 1, 50);
        if (r < 0 && errno != EINTR) return AVERROR(errno);
        if (r <= 0) continue;
        const ssize_t n = ::read(in->fd, buf, static_cast<size_t>(size));
        if (n > 0) return static_cast<int>(n);
        if (n == 0) return AVERROR_EOF;
        if (errno != EAGAIN && errno != EINTR) return AVERROR(errno);
    }
}

int interrupt_callback(void* opaque) { return (*static_cast<const Interrupt*>(opaque))() ? 1 : 0; }

// Frees a reading context made by open_input, its buffer, descriptor and state (FFmpeg frees
// none of them: custom I/O belongs to its maker).
void free_polled(AVIOContext* pb) {
    auto* in = static_cast<PolledInput*>(pb->opaque);
    av_freep(&pb->buffer);
    avio_context_free(&pb);
    ::close(in->fd);
    delete in;
}

}  // namespace

void InputDeleter::operator()(AVFormatContext* c) const {
    AVIOContext* pb = (c->flags & AVFMT_FLAG_CUSTOM_IO) ? c->pb : nullptr;
    avformat_close_input(&c);
    if (pb) free_polled(pb);
}

Result<InputPtr> open_input(const std::string& path, int streams_max, const Interrupt* interrupt) {
    AVFormatContext* raw = avformat_alloc_context();
    if (!raw) return make_error(StatusCode::INTERNAL, "{}: out of memory allocating a demuxer", path);
    // One more than the limit, so that a file past it is recognised and refused below rather
    // than failing inside the demuxer with a vaguer error.
    raw->max_streams = streams_max + 1;
    // Packets that carry a dts but no pts (AVI, raw MPEG-2 video: the reference frames of a
    // stream with B-frames) get it from the next reference frame's dts, as the ffmpeg program's
    // -fflags +genpts does: segments and copy bounds are cut on pts.
    raw->flags |= AVFMT_FLAG_GENPTS;
    if (interrupt && *interrupt) {
        raw->interrupt_callback = {&interrupt_callback, const_cast<Interrupt*>(interrupt)};
        struct stat st{};
        if (::stat(path.c_str(), &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
            // Opening a pipe without O_NONBLOCK waits for a writer, out of reach of any check.
            const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0) {
                avformat_free_context(raw);
                return make_error(StatusCode::IO_ERROR, "{}: cannot open: {}", path, std::strerror(errno));
            }
            constexpr int kBuffer = 1 << 15;
            auto* in = new PolledInput{fd, interrupt};
            auto* buffer = static_cast<uint8_t*>(av_malloc(kBuffer));
            AVIOContext* pb = buffer ? avio_alloc_context(buffer, kBuffer, 0, in, &polled_read, nullptr, nullptr)
                                     : nullptr;
            if (!pb) {
                av_free(buffer);
                ::close(fd);
                delete in;
                avformat_free_context(raw);
                return make_error(StatusCode::INTERNAL, "{}: out of memory allocating a reader", path);
            }
            raw->pb = pb;
            raw->flags |= AVFMT_FLAG_CUSTOM_IO;
        }
    }
    AVIOContext* custom = (raw->flags & AVFMT_FLAG_CUSTOM_IO) ? raw->pb : nullptr;
    int r = avformat_open_input(&raw, path.c_str(), nullptr, nullptr);  // frees raw on failure
    if (r < 0 && custom) free_polled(custom);  // the demuxer is gone; the reading context is ours
    // An interrupt during the probe may come back as any error ("not media", say).
    if (r == AVERROR_EXIT || (r < 0 && interrupt && *interrupt && (*interrupt)()))
        return make_error(StatusCode::CANCELLED, "{}: opening interrupted", path);
    if (r < 0) {
        Status st = error(r, path, "cannot open as media");
        // A file FFmpeg cannot identify is "not media", not an internal fault.
        if (r == AVERROR_INVALIDDATA) return Status(StatusCode::PARSE_ERROR, st.message() + " (not a media file)");
        // A demuxer refused a stream past max_streams reports it as out of memory.
        if (r == AVERROR(ENOMEM))
            return Status(StatusCode::OUT_OF_RANGE, fmt::format("{} (or more streams than the limit streams_max {})",
                                                                st.message(), streams_max));
        return st;
    }
    InputPtr in(raw);
    r = avformat_find_stream_info(in.get(), nullptr);
    // An interrupt during the probe may leave it incomplete without an error: what it found
    // then is no answer (a stream "without a pixel format"), the interrupt is.
    if (r == AVERROR_EXIT || (interrupt && *interrupt && (*interrupt)()))
        return make_error(StatusCode::CANCELLED, "{}: reading interrupted", path);
    if (r < 0) return error(r, path, "reading stream info");
    if (static_cast<int64_t>(in->nb_streams) > streams_max)
        return make_error(StatusCode::OUT_OF_RANGE, "{}: {} streams exceed the limit streams_max {}", path,
                          in->nb_streams, streams_max);
    return in;
}

void copy_chapters(const AVFormatContext* in, AVFormatContext* out, int64_t shift_us, const std::string& path) {
    const unsigned n = in->nb_chapters;
    if (n == 0) return;
    const std::string_view muxer = out->oformat->name;
    if (!holds_chapters(muxer)) {
        log::warn("media", "{}: the source's {} chapters cannot be stored in {}; not copied", path, n, muxer);
        return;
    }
    for (unsigned i = 0; i < n; ++i) {
        const AVChapter* from = in->chapters[i];
        auto* ch = static_cast<AVChapter*>(av_mallocz(sizeof(AVChapter)));
        // The output context owns each chapter it lists (avformat_free_context frees them);
        // unsigned and int share a representation, as FFmpeg's own muxers rely on.
        if (!ch || av_dynarray_add_nofree(&out->chapters, reinterpret_cast<int*>(&out->nb_chapters), ch) < 0) {
            av_free(ch);
            log::warn("media", "{}: out of memory copying chapter {}; {} chapters not copied", path, i, n - i);
            return;
        }
        const int64_t shift = av_rescale_q(shift_us, AV_TIME_BASE_Q, from->time_base);
        ch->id = from->id;
        ch->time_base = from->time_base;
        ch->start = from->start + shift;
        ch->end = from->end + shift;
        copy_metadata(from->metadata, &ch->metadata);
    }
}

namespace {

// The integer stored in an enum field, read without loading it as the enum.
template <typename E>
int stored(const E& field) {
    static_assert(sizeof(E) == sizeof(int));
    int v;
    std::memcpy(&v, &field, sizeof v);
    return v;
}

template <typename E>
E checked(const E& field, int count, E unspecified, bool* bad) {
    const int v = stored(field);
    const bool in_range = v >= 0 && v < count;
    if (bad) *bad = !in_range;
    return in_range ? static_cast<E>(v) : unspecified;
}

}  // namespace

AVColorSpace color_space_of(const AVCodecParameters& p, bool* bad) {
    return checked(p.color_space, AVCOL_SPC_NB, AVCOL_SPC_UNSPECIFIED, bad);
}
AVColorRange color_range_of(const AVCodecParameters& p, bool* bad) {
    return checked(p.color_range, AVCOL_RANGE_NB, AVCOL_RANGE_UNSPECIFIED, bad);
}
AVColorPrimaries color_primaries_of(const AVCodecParameters& p, bool* bad) {
    return checked(p.color_primaries, AVCOL_PRI_NB, AVCOL_PRI_UNSPECIFIED, bad);
}
AVColorTransferCharacteristic color_transfer_of(const AVCodecParameters& p, bool* bad) {
    return checked(p.color_trc, AVCOL_TRC_NB, AVCOL_TRC_UNSPECIFIED, bad);
}
AVFieldOrder field_order_of(const AVCodecParameters& p, bool* bad) {
    return checked(p.field_order, AV_FIELD_BT + 1, AV_FIELD_UNKNOWN, bad);
}

int64_t UntimedClock::stamp(const AVPacket& p) {
    if (mode_ == Mode::UNDECIDED) mode_ = p.pts == AV_NOPTS_VALUE && p.dts == AV_NOPTS_VALUE ? Mode::COUNTED : Mode::TIMED;
    if (mode_ == Mode::TIMED) return p.pts;
    const int64_t t = next_;
    next_ += std::max<int64_t>(p.duration, 1);
    return t;
}

bool starts_closed_group(AVCodecID codec, const AVPacket& p) {
    if (codec != AV_CODEC_ID_H264 && codec != AV_CODEC_ID_HEVC) return false;
    // Annex B start codes (00 00 01, also the tail of 00 00 00 01), each followed by a NAL
    // header: H.264's type in its low 5 bits (5: an IDR slice), HEVC's in bits 1-6 (19, 20:
    // IDR_W_RADL, IDR_N_LP). A CRA, a BLA or a recovery-point I-frame may have leading frames
    // that need the previous group: not closed.
    const uint8_t* d = p.data;
    for (int i = 0; i + 3 < p.size; ++i) {
        if (d[i] != 0 || d[i + 1] != 0 || d[i + 2] != 1) continue;
        const uint8_t h = d[i + 3];
        if (codec == AV_CODEC_ID_H264 && (h & 0x1f) == 5) return true;
        if (codec == AV_CODEC_ID_HEVC && ((h >> 1) & 0x3f) >= 19 && ((h >> 1) & 0x3f) <= 20) return true;
        i += 2;
    }
    return false;
}

AVPixelFormat to_av(PixelFormat f) {
    switch (f) {
        case PixelFormat::YUV420P: return AV_PIX_FMT_YUV420P;
        case PixelFormat::NV12: return AV_PIX_FMT_NV12;
        case PixelFormat::YUV420P10: return AV_PIX_FMT_YUV420P10LE;
        case PixelFormat::P010: return AV_PIX_FMT_P010LE;
        case PixelFormat::RGB24: return AV_PIX_FMT_RGB24;
        case PixelFormat::BGR24: return AV_PIX_FMT_BGR24;
    }
    return AV_PIX_FMT_NONE;
}

bool from_av(AVPixelFormat f, PixelFormat& out) {
    switch (f) {
        case AV_PIX_FMT_YUV420P:
        case AV_PIX_FMT_YUVJ420P: out = PixelFormat::YUV420P; return true;
        case AV_PIX_FMT_NV12: out = PixelFormat::NV12; return true;
        case AV_PIX_FMT_YUV420P10LE: out = PixelFormat::YUV420P10; return true;
        case AV_PIX_FMT_P010LE: out = PixelFormat::P010; return true;
        default: return false;
    }
}

int depth_of(AVPixelFormat f) {
    const AVPixFmtDescriptor* d = av_pix_fmt_desc_get(f);
    return d && d->nb_components > 0 ? d->comp[0].depth : 8;
}

PixelFormat planar_of(PixelFormat f) { return bit_depth(f) > 8 ? PixelFormat::YUV420P10 : PixelFormat::YUV420P; }

bool matrix_from_av(AVColorSpace s, ColorMatrix& out) {
    switch (s) {
        case AVCOL_SPC_BT709: out = ColorMatrix::BT709; return true;
        case AVCOL_SPC_BT470BG:
        case AVCOL_SPC_SMPTE170M: out = ColorMatrix::BT601; return true;
        case AVCOL_SPC_BT2020_NCL: out = ColorMatrix::BT2020_NCL; return true;
        default: return false;
    }
}

ColorMatrix default_matrix(int64_t height) { return height < 720 ? ColorMatrix::BT601 : ColorMatrix::BT709; }

AVColorSpace matrix_to_av(ColorMatrix m, AVColorSpace source_tag) {
    ColorMatrix tagged;
    if (matrix_from_av(source_tag, tagged) && tagged == m) return source_tag;
    switch (m) {
        case ColorMatrix::BT601: return AVCOL_SPC_SMPTE170M;
        case ColorMatrix::BT709: return AVCOL_SPC_BT709;
        case ColorMatrix::BT2020_NCL: return AVCOL_SPC_BT2020_NCL;
    }
    return AVCOL_SPC_UNSPECIFIED;
}

int sws_colorspace(ColorMatrix m) {
    switch (m) {
        case ColorMatrix::BT601: return SWS_CS_ITU601;
        case ColorMatrix::BT709: return SWS_CS_ITU709;
        case ColorMatrix::BT2020_NCL: return SWS_CS_BT2020;
    }
    return SWS_CS_DEFAULT;
}

bool sws_keep_color(SwsContext* s, ColorMatrix m, ColorRange src_range, ColorRange dst_range) {
    const int* coeffs = sws_getCoefficients(sws_colorspace(m));
    return sws_setColorspaceDetails(s, coeffs, src_range == ColorRange::FULL ? 1 : 0, coeffs,
                                    dst_range == ColorRange::FULL ? 1 : 0, 0, 1 << 16, 1 << 16) >= 0;
}

FrameView view_of(const AVFrame* f, const FrameLayout& l) {
    FrameView v;
    v.layout = l;
    for (int p = 0; p < v.planes(); ++p) {
        v.plane[static_cast<size_t>(p)] = f->data[p];
        v.stride[static_cast<size_t>(p)] = f->linesize[p];
    }
    return v;
}

void copy_to_tight(const AVFrame* f, const FrameLayout& l, uint8_t* dst) { view_of(f, l).copy_to(dst); }

void copy_from_view(const FrameView& v, AVFrame* f) {
    const FrameLayout& l = v.layout;
    // P010 holds 10 bits in the high bits of each little-endian uint16; yuv420p10le in the low.
    auto p010_sample = [](const uint8_t* in, uint8_t* out) {
        uint16_t x;
        std::memcpy(&x, in, 2);
        x = static_cast<uint16_t>(x >> 6);
        std::memcpy(out, &x, 2);
    };
    auto row_of = [&](int p, int64_t y) { return v.plane[static_cast<size_t>(p)] + y * v.stride[static_cast<size_t>(p)]; };
    for (int64_t y = 0; y < l.height; ++y) {
        const uint8_t* row = row_of(0, y);
        uint8_t* out = f->data[0] + y * f->linesize[0];
        if (l.format == PixelFormat::P010)
            for (int64_t x = 0; x < l.width; ++x) p010_sample(row + 2 * x, out + 2 * x);
        else
            std::memcpy(out, row, v.plane_row_bytes(0));
    }
    if (v.planes() == 1) return;  // packed RGB
    if (v.planes() == 3) {
        for (int p = 1; p < 3; ++p)
            for (int64_t y = 0; y < v.plane_rows(p); ++y)
                std::memcpy(f->data[p] + y * f->linesize[p], row_of(p, y), v.plane_row_bytes(p));
        return;
    }
    const int64_t cw = l.chroma_width();
    for (int64_t y = 0; y < v.plane_rows(1); ++y) {
        const uint8_t* row = row_of(1, y);
        uint8_t* u = f->data[1] + y * f->linesize[1];
        uint8_t* w = f->data[2] + y * f->linesize[2];
        if (l.format == PixelFormat::NV12) {
            for (int64_t x = 0; x < cw; ++x) {
                u[x] = row[2 * x];
                w[x] = row[2 * x + 1];
            }
        } else {
            for (int64_t x = 0; x < cw; ++x) {
                p010_sample(row + 4 * x, u + 2 * x);
                p010_sample(row + 4 * x + 2, w + 2 * x);
            }
        }
    }
}

}  // namespace loom::preprocess::av
