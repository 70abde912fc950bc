// What the reader and the writer share on top of FFmpeg's libraries: owning pointers, errors
// as Status, the log bridge, and the mapping between FFmpeg's pixel formats and colour enums
// and Loom's (common/frame.hpp). Internal to preprocess/: media_io.hpp exposes no FFmpeg type.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/buffer.h>
#include <libavutil/frame.h>
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>
}

#include "common/frame.hpp"
#include "common/status.hpp"
#include "preprocess/media_io.hpp"

namespace loom::preprocess::av {

// Closes a demuxer, and the reading context open_input made for it (a pipe or device).
struct InputDeleter {
    void operator()(AVFormatContext* c) const;
};
struct CodecDeleter {
    void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameDeleter {
    void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketDeleter {
    void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct BufferDeleter {
    void operator()(AVBufferRef* b) const { av_buffer_unref(&b); }
};
struct SwsDeleter {
    void operator()(SwsContext* s) const { sws_freeContext(s); }
};
using InputPtr = std::unique_ptr<AVFormatContext, InputDeleter>;
using CodecPtr = std::unique_ptr<AVCodecContext, CodecDeleter>;
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using BufferPtr = std::unique_ptr<AVBufferRef, BufferDeleter>;
using SwsPtr = std::unique_ptr<SwsContext, SwsDeleter>;

// Returns av_strerror's text for `err`.
std::string error_text(int err);
// Returns "<path>: <what>: <FFmpeg's text>" with a code chosen from `err`: NOT_FOUND for a
// missing file, IO_ERROR for other OS errors, PARSE_ERROR for invalid data, else INTERNAL.
Status error(int err, std::string_view path, std::string_view what);

// Routes FFmpeg's av_log into Loom's logger (component "ffmpeg"): FFmpeg errors at warn (at
// most a few lines a second; the rest at debug), its warnings at debug, the rest dropped.
// Installs the callback once per process; later calls do nothing.
void route_log();
// Counts into `*count` every error FFmpeg logs (AV_LOG_ERROR and worse) for a decoder whose
// AVCodecContext.opaque is `key`, its frame threads' copies included (they share the opaque),
// until stop_counting_decoder_errors(key). A decoder reports what it conceals or drops (a broken
// slice header, a missing reference picture, "no frame!") in its log, often without flagging a
// frame or failing a call. Needs route_log().
void count_decoder_errors(const void* key, std::atomic<int64_t>* count);
void stop_counting_decoder_errors(const void* key);
// While alive, FFmpeg's messages from this thread go to debug (probing for optional hardware).
class QuietLog {
public:
    QuietLog();
    ~QuietLog();
    QuietLog(const QuietLog&) = delete;
    QuietLog& operator=(const QuietLog&) = delete;

private:
    bool previous_;
};

struct OutputDeleter {
    void operator()(AVFormatContext* c) const {
        if (c->pb && !(c->oformat->flags & AVFMT_NOFILE)) avio_closep(&c->pb);
        avformat_free_context(c);
    }
};
using OutputPtr = std::unique_ptr<AVFormatContext, OutputDeleter>;

// `dir/.name.partial-<pid>-<n>-<random>.ext`: hidden, next to the final file (so the rename
// stays on one file system), unique to each writer of the process, with the extension kept so
// that anything guessing by name still guesses right.
std::string temporary_name(const std::string& path);
// Copies `from` into `*to` without the keys that describe the old file rather than the content
// (encoder, duration, Matroska's statistics tags): those carried_tag refuses.
void copy_metadata(const AVDictionary* from, AVDictionary** to);
bool carried_tag(const char* key);

// What a muxer (AVOutputFormat.name) holds besides audio and video: chapters (Matroska, WebM,
// MP4, MOV, Ogg), attachments (Matroska), a display matrix (the MOV family: its track matrix),
// HDR10's mastering display and content light level (Matroska, WebM, the MOV family).
bool holds_chapters(std::string_view muxer);
bool holds_attachments(std::string_view muxer);
bool holds_display_matrix(std::string_view muxer);
bool holds_hdr(std::string_view muxer);
// Whether a muxer takes packets of `codec`: as its list says, or without a list (MPEG-TS, raw
// streams), whether it has a default codec for that kind of stream.
bool holds_codec(const AVOutputFormat* muxer, AVCodecID codec);
// Whether a muxer keeps a stream's `key` tag ("language", "title"): Matroska every tag, the MOV
// family and MPEG-TS the language, AVI the title.
bool holds_stream_tag(std::string_view muxer, std::string_view key);
// Whether a muxer stores each frame's time; AVI stores a constant frame rate instead.
bool holds_frame_times(std::string_view muxer);

// Copies `in`'s chapters (times, titles and other tags) into `out`, each moved `shift_us`
// microseconds later, where `out`'s container holds chapters (Matroska, WebM, MP4, MOV, Ogg);
// else, and on running out of memory, warns naming `path` and how many were not copied.
void copy_chapters(const AVFormatContext* in, AVFormatContext* out, int64_t shift_us, const std::string& path);

// A check FFmpeg makes while it waits for input (AVIOInterruptCB): true ends the wait and the
// call fails with AVERROR_EXIT. It must outlive the demuxer it is given to.
using Interrupt = std::function<bool()>;

// Opens `path` for demuxing and reads its stream info; refuses more than `streams_max`
// streams. Errors name the file. With `interrupt`, every wait for input checks it: FFmpeg's
// own protocols through their interrupt callback, and a named pipe or a device (whose reads
// block in the kernel, where FFmpeg's file protocol cannot look) through a reading context of
// our own that polls the descriptor and checks `interrupt` every 50 ms.
Result<InputPtr> open_input(const std::string& path, int streams_max, const Interrupt* interrupt = nullptr);

// The video packets of a file in presentation order, from a scan of its packets (no decoding):
// what segments (media_io.hpp: list_keyframes, ReaderOptions.start_frame) are built on.
struct VideoPacketIndex {
    int stream_index = -1;               // the stream MediaReader picks (av_find_best_stream)
    AVRational time_base{0, 1};
    std::vector<int64_t> sorted_pts;     // of every video packet not flagged discard, ascending
    std::vector<KeyframeInfo> keyframes; // in presentation order
    bool counted = false;                // no timestamps: times counted by UntimedClock
};
// Scans `path`'s video packets (timed by UntimedClock). Errors name the file: a packet without
// pts among packets with, two packets with the same pts (frames could not be told apart by
// pts), over the limits. `interrupt` as for open_input (CANCELLED).
Result<VideoPacketIndex> index_video_packets(const std::string& path, const MediaLimits& limits,
                                             const Interrupt* interrupt = nullptr);

// The time of a video packet for segments. Packets with a pts keep it. A stream whose packets
// carry no timestamps at all, even after genpts (raw H.264 and HEVC elementary streams: neither
// pts nor dts), is timed as MediaReader times its frames: from 0, each frame after the previous
// by its duration (at least 1), in presentation order. A closed keyframe is presented after
// exactly the frames decoded before it, so its time is the sum of the durations of the packets
// before it in decode order, which this clock counts. The first packet decides; give it every
// video packet of the stream from its start, in order.
class UntimedClock {
public:
    int64_t stamp(const AVPacket& p);
    bool counting() const { return mode_ == Mode::COUNTED; }

private:
    enum class Mode { UNDECIDED, TIMED, COUNTED } mode_ = Mode::UNDECIDED;
    int64_t next_ = 0;
};
// Whether the Annex B packet `p` of `codec` starts a closed group without timestamps to prove
// it: an H.264 IDR slice or an HEVC IDR picture (nothing decoded after it is presented before
// it, nothing decoded before it after it). False for every other codec and picture.
bool starts_closed_group(AVCodecID codec, const AVPacket& p);

// A stream's colour and field tags as FFmpeg stored them from the bitstream or the container: a
// hostile file leaves values outside their enums there (an H.264 VUI's 8-bit matrix code, say),
// and loading such a value as the enum is undefined behaviour. These read the stored integer
// and give the unspecified value for anything out of range (`bad`, when given, says so).
AVColorSpace color_space_of(const AVCodecParameters& p, bool* bad = nullptr);
AVColorRange color_range_of(const AVCodecParameters& p, bool* bad = nullptr);
AVColorPrimaries color_primaries_of(const AVCodecParameters& p, bool* bad = nullptr);
AVColorTransferCharacteristic color_transfer_of(const AVCodecParameters& p, bool* bad = nullptr);
AVFieldOrder field_order_of(const AVCodecParameters& p, bool* bad = nullptr);

// Returns FFmpeg's pixel format for a Loom format.
AVPixelFormat to_av(PixelFormat f);
// Returns true and sets `out` when `f` is stored exactly as a Loom format (yuvj420p included).
bool from_av(AVPixelFormat f, PixelFormat& out);
// Returns the bit depth of the first component of `f` (8 when unknown).
int depth_of(AVPixelFormat f);
// Returns the planar 4:2:0 format of the same depth class (YUV420P or YUV420P10).
PixelFormat planar_of(PixelFormat f);

// Returns Loom's matrix for an FFmpeg colourspace tag; false for untagged or unsupported ones.
bool matrix_from_av(AVColorSpace s, ColorMatrix& out);
// Returns FFmpeg's default matrix by height: BT.601 below 720 lines, else BT.709.
ColorMatrix default_matrix(int64_t height);
// Returns the colourspace tag to write for `m`: `source_tag` when it names the same matrix
// (smpte170m and bt470bg both mean BT.601), else the canonical one.
AVColorSpace matrix_to_av(ColorMatrix m, AVColorSpace source_tag);
// Returns swscale's SWS_CS_* constant for `m`.
int sws_colorspace(ColorMatrix m);
// Keeps `m` and `r` through a swscale conversion (no matrix or range change); returns false
// when swscale refused the details.
bool sws_keep_color(SwsContext* s, ColorMatrix m, ColorRange src_range, ColorRange dst_range);

// A view of `f`'s planes (its format is to_av(l.format), or its j-variant); no owner.
FrameView view_of(const AVFrame* f, const FrameLayout& l);
// Copies `f` (as view_of takes it) into the tight buffer `dst`.
void copy_to_tight(const AVFrame* f, const FrameLayout& l, uint8_t* dst);
// Copies the frame `v` into `f`, whose format is to_av(planar_of(v.layout.format)): semi-planar
// chroma is de-interleaved and P010 samples shifted down to the low 10 bits (exact).
void copy_from_view(const FrameView& v, AVFrame* f);

}  // namespace loom::preprocess::av
