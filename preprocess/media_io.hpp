// Media files through FFmpeg's libraries (libavformat, libavcodec, libswscale, libavutil):
// MediaReader demuxes and decodes the best video stream of any container and codec they read;
// MediaWriter encodes frames, muxes them with the input's other streams copied untouched, and
// renames the file into place only when everything was written.
//
// Frames cross this interface as Loom frames (common/frame.hpp): 4:2:0 YUV, tight rows, with
// their colour contract. The reader copies each decoded picture once into the caller's buffer
// (the pipeline's pooled, pinned host frame), converting with swscale only when the decoder's
// format is not one of Loom's four (4:2:2, 4:4:4, RGB, 12-bit ...: to the 4:2:0 format of the
// same depth class). Nothing in this header exposes FFmpeg types.
//
// Segments (resume after a crash, scale-out across machines): list_keyframes and plan_segments
// cut a video into frame ranges that start on closed keyframes; a MediaReader opened with
// ReaderOptions.start_frame / frame_count reads one range, a MediaWriter with
// WriterOptions.copy_from_pts / copy_to_pts writes it with its share of the audio and
// subtitles, and join_segments remuxes the segment files (no re-encode) into what one run
// writes.
//
// Back ends: FFmpeg's libraries by default; ReaderOptions / WriterOptions.backend "gstreamer" reads
// with GStreamer (uridecodebin, or a gst-launch description, into an appsink) and writes with it
// (appsrc into an encoder and a muxer, the source's other streams copied through parsebin), where
// the build has GStreamer. Frames, timestamps and colour cross this interface the same way for
// both; the GStreamer reader's time base is GStreamer's nanoseconds. Segments (start_frame,
// frame_count, copy_from_pts, copy_to_pts) are FFmpeg's only.
//
// Threads: a reader or a writer is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/frame.hpp"
#include "common/status.hpp"

namespace loom::preprocess {

class ReaderBackend;  // preprocess/backend.hpp
class WriterBackend;

// Limits that protect memory: an input beyond them is refused before decoding starts (or, for
// the frame count, when the frame past the limit arrives).
struct MediaLimits {
    int64_t pixels_max = 8192 * 4352;  // per frame (8K)
    int streams_max = 64;              // streams in the container
    int64_t frames_max = 10'000'000;   // decoded video frames
    int64_t packet_bytes_max = 64 << 20;
};

struct ReaderOptions {
    // "ffmpeg" or "gstreamer" (see the top of this file).
    std::string backend = "ffmpeg";
    // GStreamer only: a gst-launch description of the source instead of uridecodebin on the path
    // (a camera, a network stream, a user's own demuxer and decoder). Its last element gives the
    // video; Loom adds videoconvert and its appsink. The path is then only the name errors use
    // and the file the writer copies other streams from, when it is one.
    std::string gst_pipeline;
    // "auto": try the machine's hardware decoders (VAAPI, then CUDA) through FFmpeg's hwdevice
    // API and fall back to software, logging the choice; "none": software; "vaapi" / "cuda":
    // that one, falling back to software with a warning when it cannot be opened.
    std::string hwaccel = "auto";
    int threads = 0;  // decoder threads; 0 = FFmpeg's choice
    // "": frames as decoded; "bwdif": pictures the decoder marks interlaced are deinterlaced by
    // FFmpeg's bwdif filter (libavfilter), one frame out per frame in, the times kept; each frame
    // is made with its neighbours, so a segment would differ from a whole run at its seams.
    // Decodes in software. FFmpeg back end only.
    std::string deinterlace;
    // Decode errors (corrupt packets, concealed or skipped frames) above this share of the
    // frames read so far (checked once 10 frames were read, and at the end) fail the read with
    // an error naming the file and position.
    double error_rate_max = 0.05;
    MediaLimits limits;
    // A segment of the video (frame indices in presentation order, as KeyframeInfo.frame counts
    // them). start_frame > 0 must be the frame of a keyframe with segment_start (list_keyframes),
    // else open() fails with INVALID_ARGUMENT naming the file, the frame and the nearest such
    // keyframes before and after it; open() then seeks there (no decoding of what comes before).
    // read() delivers the frames whose pts lie in [pts of frame start_frame, pts of frame
    // start_frame + frame_count): frame_count frames, or fewer at the end of the stream;
    // -1 = to the end. FrameMeta.index continues from start_frame, pts are the source's.
    // Either one set costs open() a scan of the file's packets (list_keyframes), unless
    // segment_pts gives the segment's bounds.
    int64_t start_frame = 0;
    int64_t frame_count = -1;
    // The segment's bounds from a plan of this very file (plan_segments' copy_from_pts and
    // copy_to_pts for this start_frame): the pts of its first frame (its keyframe; ignored
    // when start_frame is 0) and of the frame after its last (INT64_MAX: to the end). open()
    // then seeks without scanning. A bound that is no keyframe of the file (the file changed)
    // fails the read, never delivers another segment's frames.
    struct SegmentPts {
        int64_t from = INT64_MIN, to = INT64_MAX;
    };
    std::optional<SegmentPts> segment_pts;
    // Memory for decoded pictures, e.g. page-locked memory the device copies from without
    // staging. With `alloc` set, software decoders that allow it (FFmpeg's AV_CODEC_CAP_DR1)
    // decode straight into blocks from it (recycled, never freed while the reader or a view
    // still uses them), and read(FrameView&) hands those pictures on in place, marked `pinned`.
    // Asked while the reader waits for input (opening, probing, every read); true stops the
    // wait: open() fails with CANCELLED, and so does read() from then on. Cancellation of a
    // reader blocked on a pipe, a device or a network stream (FFmpeg's interrupt callback).
    // Called from the reader's thread; empty: never interrupted.
    std::function<bool()> interrupted;
    struct FrameMemory {
        void* (*alloc)(size_t bytes) = nullptr;  // 64-byte aligned; nullptr when out of memory
        void (*free)(void* block) = nullptr;
        bool pinned = false;
    } frame_memory;
};

// A keyframe of the video stream, found by scanning packets (no decoding).
struct KeyframeInfo {
    int64_t frame = 0;   // its index in presentation order: the frames presented before it
    int64_t pts = 0;     // in the video stream's time base (VideoInfo.time_base)
    double time_s = 0;   // pts in seconds
    // True when the packets before it in decode order are all presented before it and those
    // from it on are all presented from it on (an IDR or a closed GOP). False for an open GOP's
    // keyframe, whose leading frames (decoded after it, presented before it) need the previous
    // group.
    bool closed = true;
    // True when a segment may start here: every packet decoded before it is presented before
    // it, so a reader skips them undecoded, and what is presented from it on decodes from it
    // (a closed group's keyframe, or an open one's: its leading frames belong to the previous
    // segment, whose reader decodes past this keyframe to deliver them). In a stream without
    // timestamps, where presentation order is unknown before decoding, only a closed group's
    // keyframe proved by its content (H.264 or HEVC IDR).
    bool segment_start = true;
};

// Lists the keyframes (packets flagged key) of `path`'s video stream (the one MediaReader
// reads) in presentation order. Frame indices come from the packets' pts: the index of a
// keyframe is the number of packets with a smaller pts. `frames`, when not null, receives the
// number of video packets (= the frames MediaReader delivers from an intact file). Errors name
// the file: a packet without pts, two packets with one pts, over options.limits.
Result<std::vector<KeyframeInfo>> list_keyframes(const std::string& path, const ReaderOptions& options = {},
                                                 int64_t* frames = nullptr);

// One segment of a plan: ReaderOptions.start_frame / frame_count for the reader and
// WriterOptions.copy_from_pts / copy_to_pts for the writer of that segment.
struct SegmentRange {
    int64_t start_frame = 0;
    int64_t frame_count = 0;
    int64_t copy_from_pts = INT64_MIN;  // this segment's keyframe pts; INT64_MIN for the first
    int64_t copy_to_pts = INT64_MAX;    // the next segment's keyframe pts; INT64_MAX for the last
};

// Splits frames [0, total_frames) into at most `n` segments of roughly equal length, each but
// the first starting on a keyframe with segment_start (the one nearest to k * total_frames / n);
// fewer when there are fewer such keyframes. Empty when n < 1 or total_frames < 1. The segments cover every
// frame once, in order.
std::vector<SegmentRange> plan_segments(const std::vector<KeyframeInfo>& keyframes, int64_t total_frames, int n);

// Timing and position of one frame, in the input video stream's time base.
struct FrameMeta {
    int64_t index = 0;        // decode order of output frames, from 0
    int64_t pts = 0;          // presentation time stamp (best effort, as FFmpeg gives it)
    int64_t duration = 0;     // 0 when unknown
    bool keyframe = false;
};

struct Rational {
    int num = 0, den = 1;
};

struct VideoInfo {
    std::string path;
    std::string container;    // "matroska,webm", "mov,mp4,m4a,3gp,3g2,mj2", ...
    std::string codec;        // "h264", "hevc", "ffv1", ...
    int stream_index = -1;    // of the video stream in the container
    FrameLayout layout;       // of the frames read() delivers
    ColorInfo color;          // from the stream's tags; untagged: FFmpeg's defaults by size
                              // (BT.601 below 720 lines, BT.709 from 720, limited range)
    Rational time_base;       // of pts and duration
    Rational frame_rate;      // average, as the container gives it (may be 0/1)
    int64_t frames_estimate = 0;  // the container's count, or duration x rate; 0 = unknown.
                                  // For progress only: real counts come from decoding.
    double duration_s = 0;
    std::string decoder;      // the decoder that runs: "h264", "h264 (vaapi)", ...
    int streams = 0;          // streams in the container
    // The stream's MatrixCoefficients tag as written (H.273; 2 = untagged): `color.matrix`
    // folds smpte170m and bt470bg into BT601, the writer uses this to keep the exact tag.
    int color_matrix_code = 2;
    Rational sample_aspect_ratio;  // 0/1 when unknown
    // As the container or the stream's headers give it: "progressive", "tt" (top field first,
    // coded and shown so), "bb", "tb" (coded top first, shown bottom first), "bt", or "unknown".
    // DecodeStats.interlaced_frames counts the pictures the decoder marks interlaced.
    std::string field_order = "unknown";
};

struct DecodeStats {
    int64_t frames = 0;         // delivered by read()
    int64_t packets = 0;        // video packets sent to the decoder
    // Packets or frames the decoder rejected or flagged corrupt, or the stretches between two
    // packets in which it reported errors in its log (slices it concealed, frames it dropped or
    // decoded without a reference picture), whichever count is larger.
    int64_t decode_errors = 0;
    int64_t frames_skipped = 0; // of those, frames dropped rather than delivered concealed
    int64_t interlaced_frames = 0;  // delivered frames the decoder marks interlaced (two fields)
};

class MediaReader {
public:
    // Opens `path`, finds its best video stream, checks the limits and opens the decoder. Errors
    // name the file: not found, not media, no video stream, over a limit, no decoder.
    static Result<std::unique_ptr<MediaReader>> open(const std::string& path, const ReaderOptions& options = {});
    ~MediaReader();
    MediaReader(const MediaReader&) = delete;
    MediaReader& operator=(const MediaReader&) = delete;

    const VideoInfo& info() const;

    // Decodes the next frame into `dst` (info().layout.bytes() bytes) and fills `meta`.
    // Returns true for a frame, false at the end of the stream (the decoder drained). A frame
    // whose size or format differs from info().layout mid-stream is an error naming the frame.
    // Corrupt data is concealed or skipped and counted (stats()); over error_rate_max it fails
    // naming the file and position.
    Result<bool> read(uint8_t* dst, size_t dst_bytes, FrameMeta& meta);
    // The same without the copy: `view` is set to the decoded picture itself (its owner keeps
    // it alive, independently of the reader and of later reads), or to the picture converted
    // to info().layout.format when the decoder's format is another. Rows keep the decoder's
    // padding (view.stride).
    Result<bool> read(FrameView& view, FrameMeta& meta);

    DecodeStats stats() const;

private:
    struct Impl;
    explicit MediaReader(std::unique_ptr<Impl> impl);
    explicit MediaReader(std::unique_ptr<ReaderBackend> other);
    std::unique_ptr<Impl> impl_;
    std::unique_ptr<ReaderBackend> other_;  // another back end than FFmpeg
};

// What a finished output is checked against (check_output): its source, what was written, and
// what was asked.
struct OutputExpectation {
    VideoInfo source;                // the frames' file (read again; empty path: frames from no file)
    FrameLayout layout;              // the frames written
    ColorInfo color;                 // their colour contract, as the writer tagged it
    int64_t scale = 0;               // output size = scale x the source's (0: not checked)
    std::vector<int64_t> frame_pts;  // every frame written, in the source's time base
    // Without frame_pts (a join of parts each checked against its own frames): how many frames
    // the output holds (-1: not checked); the frames' shift is then the first frames'.
    int64_t frames = -1;
    bool copy_streams = true;        // the source's audio, subtitles and attachments were to be copied
    int64_t packets_dropped = 0;     // copied packets the writer left out (EncodeStats.packets_dropped)
    // The output holds the whole source, not a segment: every copied packet, and the copied
    // audio in sync with the video, are compared too.
    bool whole = true;
};

// One comparison that found a difference.
struct FidelityItem {
    std::string what;            // "video frames", "stream 2 (subtitle ass) language tag", "chapters"
    std::string source, output;  // the two sides ("" when absent)
    std::string explained;       // why it was expected (the container cannot hold it, ...), or ""
};

struct FidelityReport {
    int checks = 0;                         // comparisons made
    std::vector<FidelityItem> differences;  // explained and not
    int unexplained() const;
    // The first `listed` unexplained differences, for a message.
    std::string summary(size_t listed = 3) const;
};

// Probes `output` (its packets, no decoding) and compares it with `expect`: the video's size
// (and = scale x the source's), colour tags, sample aspect ratio, HDR and rotation side data,
// language and title; every frame's pts against those written (one constant shift allowed: the
// writer's start offset); each of the source's audio, subtitle and attachment streams present
// in order with its codec, tags, dispositions (Matroska), bytes (attachments) and, for a whole
// output, packet count, the audio moved as the video was, and where the media ends; chapters
// (titles, starts); the container's tags. A difference the output's container or the options account for is
// explained. Errors: a file that cannot be read, an output without video.
Result<FidelityReport> check_output(const std::string& output, const OutputExpectation& expect);

struct WriterOptions {
    // "ffmpeg" or "gstreamer" (see the top of this file).
    std::string backend = "ffmpeg";
    // GStreamer only: the encoder as a gst-launch description ("x264enc speed-preset=slow",
    // "vaapih264enc ! h264parse"); empty: from codec, crf, preset and threads (x264enc, x265enc,
    // avenc_ffv1). And the muxer, one element with its properties ("mp4mux faststart=true");
    // empty: from the output name's extension.
    std::string gst_encoder, gst_muxer;
    // "libx264", "libx265", "ffv1" or "png" (a PNG sequence: the output path holds a printf
    // pattern such as "out/%06d.png"); the container follows the output name's extension.
    std::string codec = "libx264";
    int crf = 18;                      // libx264 / libx265 (ignored by ffv1 and png)
    std::string preset = "medium";     // libx264 / libx265
    PixelFormat pixel_format = PixelFormat::YUV420P;  // frames given to write()
    std::map<std::string, std::string> codec_options;  // passed to the encoder as AVOptions
    bool copy_streams = true;          // copy the input's audio and subtitle streams
    int threads = 0;                   // encoder threads; 0 = FFmpeg's choice
    // For a segment's writer: copy only the audio / subtitle packets whose pts (in the source's
    // video time base, VideoInfo.time_base, compared exactly) lie in [copy_from_pts,
    // copy_to_pts), so that the joined segments hold each packet once. Set them from the
    // keyframe pts of this segment and of the next (SegmentRange does): INT64_MIN for the first
    // segment (keeps what comes before the first frame, e.g. AAC priming), INT64_MAX for the
    // last. Packets without timestamps go to the segment whose copy_from_pts is INT64_MIN.
    int64_t copy_from_pts = INT64_MIN;
    int64_t copy_to_pts = INT64_MAX;
};

struct EncodeStats {
    int64_t frames = 0;           // video frames encoded
    int64_t packets_copied = 0;   // audio / subtitle packets copied from the input
    int64_t packets_dropped = 0;  // copied packets left out: their dts went back (corrupt input)
    int64_t bytes = 0;            // of the finished file (after finish())
};

class MediaWriter {
public:
    // Prepares `path` for frames of `layout` and colour `color`, timed in `source`'s video time
    // base: opens the encoder, and with copy_streams a second demuxer on source's file whose
    // audio and subtitle streams are copied untouched (no re-encode), interleaved with the
    // video by time. Container and stream metadata, the colour tags, and the frame rate are
    // carried over from the source. Writes go to a temporary name next to `path`.
    static Result<std::unique_ptr<MediaWriter>> open(const std::string& path, const VideoInfo& source,
                                                     const FrameLayout& layout, const ColorInfo& color,
                                                     const WriterOptions& options = {});
    // Removes the temporary file unless finish() succeeded: never a half-written file under the
    // final name.
    ~MediaWriter();
    MediaWriter(const MediaWriter&) = delete;
    MediaWriter& operator=(const MediaWriter&) = delete;

    // Encodes one frame (layout().bytes() bytes) with meta.pts / meta.duration as its timing
    // (in the source's time base: variable frame rate is kept). Frames come in presentation
    // order.
    Status write(const uint8_t* src, size_t src_bytes, const FrameMeta& meta);
    // The same for a frame in place (rows may be padded); its layout must be layout().
    Status write(const FrameView& src, const FrameMeta& meta);
    // Drains the encoder, copies the rest of the other streams, writes the trailer and renames
    // the temporary file to the final name.
    Status finish();

    const FrameLayout& layout() const;
    EncodeStats stats() const;

private:
    struct Impl;
    explicit MediaWriter(std::unique_ptr<Impl> impl);
    explicit MediaWriter(std::unique_ptr<WriterBackend> other);
    std::unique_ptr<Impl> impl_;
    std::unique_ptr<WriterBackend> other_;  // another back end than FFmpeg
};

// Joins segment files (MediaWriter's outputs for consecutive SegmentRanges of one source) by
// stream copy, no re-encode: every packet of each segment, in order, timestamps kept, into
// `output` (container from its name), written under a temporary name and renamed into place
// at the end. Container and stream metadata, dispositions and colour tags come from the first
// segment. Refuses (INVALID_ARGUMENT naming the file) segments whose streams differ from the
// first's: stream count, type, codec, codec parameters (extradata), frame size, pixel or sample
// format, sample rate, channels, time base; and segments whose timestamps go back.
Status join_segments(const std::vector<std::string>& segments, const std::string& output);

}  // namespace loom::preprocess
