// MediaWriter: encode Loom frames with their own timestamps (the source's time base, so a
// variable frame rate survives), copy the source's audio and subtitle packets untouched from a
// second demuxer, interleave both by time, and rename the temporary file into place in finish().
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <vector>

extern "C" {
#include <libavutil/avstring.h>
#include <libavutil/dict.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

#include "common/log.hpp"
#include "preprocess/av_util.hpp"
#include "preprocess/backend.hpp"
#include "preprocess/media_io.hpp"

namespace loom::preprocess {

namespace {

constexpr std::string_view kLog = "media";
// PNG sequences are numbered from 1, as the ffmpeg program numbers them.
constexpr int kImageStartNumber = 1;
// How far apart in time a file's interleaved packets may be stored (libavformat's default
// max_interleave_delta): a segment's copy demuxer seeks this much before the segment and stops
// reading this much after it.
constexpr int64_t kInterleaveSlackS = 10;

}  // namespace

struct MediaWriter::Impl {
    std::string path, temporary;
    VideoInfo source;
    FrameLayout layout;
    ColorInfo color;
    WriterOptions options;
    bool images = false;  // a PNG sequence through the image2 muxer
    EncodeStats stats;

    av::OutputPtr output;
    av::CodecPtr encoder;
    AVStream* video = nullptr;
    av::FramePtr frame, rgb;
    av::PacketPtr packet;
    av::SwsPtr sws;

    // The second demuxer on the source file, for stream copy.
    av::InputPtr copy_input;
    std::vector<int> copy_map;  // input stream index -> output stream index, -1 not copied
    av::PacketPtr copy_packet;
    bool copy_pending = false, copy_done = true;
    // Per output stream, the dts of the last copied packet; a packet whose dts goes back (corrupt
    // input) is dropped and counted (stats.packets_dropped), as the muxer would refuse it and
    // fail the whole file.
    std::vector<int64_t> copy_last_dts;
    // Added to every packet's timestamps (microseconds): what lifts the source's earliest start
    // (AAC's priming samples start at -21 ms, say) to zero. The muxer would shift a file that
    // starts below zero by itself, but only the segment that holds that start: the segments of
    // one source would then disagree about the timeline by that much at every seam. Every writer
    // of the source (a whole run, each segment) applies the same offset instead.
    int64_t ts_offset_us = 0;
    void offset(AVPacket* p, AVRational tb) const {
        if (ts_offset_us == 0) return;
        const int64_t d = av_rescale_q(ts_offset_us, AV_TIME_BASE_Q, tb);
        if (p->pts != AV_NOPTS_VALUE) p->pts += d;
        if (p->dts != AV_NOPTS_VALUE) p->dts += d;
    }

    int64_t last_pts = AV_NOPTS_VALUE;
    bool opened_file = false, finished = false;
    Status failed;

    Status open_source();
    Status copy_video_side_data(const AVStream* in);
    Status find_earliest(const std::vector<bool>& written);
    Status open_encoder();
    Status copy_until(int64_t ts, AVRational tb);
    bool in_segment(const AVPacket* p);
    Status drain_encoder();
    Status fail(Status st) {
        failed = st;
        return st;
    }
    std::string image_name(int64_t number) const {
        std::vector<char> buf(path.size() + 32);
        if (av_get_frame_filename2(buf.data(), static_cast<int>(buf.size()), path.c_str(), static_cast<int>(number), 0) < 0)
            return {};
        return buf.data();
    }
};

MediaWriter::MediaWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MediaWriter::MediaWriter(std::unique_ptr<WriterBackend> other) : other_(std::move(other)) {}
const FrameLayout& MediaWriter::layout() const { return other_ ? other_->layout() : impl_->layout; }
EncodeStats MediaWriter::stats() const { return other_ ? other_->stats() : impl_->stats; }

MediaWriter::~MediaWriter() {
    if (other_) return;  // the back end cleans up after itself
    Impl& s = *impl_;
    if (s.finished) return;
    s.encoder.reset();
    s.output.reset();  // closes the temporary file
    std::error_code ec;
    if (s.images) {
        // The image2 muxer wrote each picture atomically under its final name: take them back.
        for (int64_t i = 0; i < s.stats.frames + 1; ++i) {
            const std::string name = s.image_name(kImageStartNumber + i);
            if (!name.empty()) std::filesystem::remove(name, ec);
        }
    } else if (s.opened_file) {
        std::filesystem::remove(s.temporary, ec);
    }
    if (s.opened_file) log::warn(kLog, "{}: writer closed before finish(); nothing was kept", s.path);
}

// Sets ts_offset_us from the first packets of the streams written (a stream's start_time leaves
// out what an edit list skips, such as AAC's priming samples, whose packets still come first):
// a second demuxer reads the file's start, at most kProbePackets packets.
Status MediaWriter::Impl::find_earliest(const std::vector<bool>& written) {
    constexpr int kProbePackets = 2000;
    auto in = av::open_input(source.path, std::numeric_limits<int>::max() - 1);
    if (!in.ok()) return in.status().with_context("opening the source for its first timestamps");
    AVFormatContext* f = in->get();
    std::vector<bool> seen(f->nb_streams, false);
    size_t wanted = 0;
    for (unsigned i = 0; i < f->nb_streams; ++i) {
        const bool w = i < written.size() && written[i];
        if (!w) f->streams[i]->discard = AVDISCARD_ALL;
        wanted += w;
    }
    av::PacketPtr p(av_packet_alloc());
    if (!p) return make_error(StatusCode::INTERNAL, "{}: out of memory", path);
    int64_t earliest = 0;
    for (int n = 0; n < kProbePackets && wanted > 0; ++n) {
        if (av_read_frame(f, p.get()) < 0) break;
        const auto k = static_cast<size_t>(p->stream_index);
        const int64_t t = p->pts != AV_NOPTS_VALUE ? p->pts : p->dts;
        if (k < written.size() && written[k] && !seen[k] && t != AV_NOPTS_VALUE) {
            seen[k] = true;
            --wanted;
            earliest = std::min(earliest, av_rescale_q(t, f->streams[k]->time_base, AV_TIME_BASE_Q));
        }
        av_packet_unref(p.get());
    }
    // A start more than an hour below zero is no priming delay: the muxer's own shift handles it.
    ts_offset_us = -earliest <= int64_t{3600} * AV_TIME_BASE ? -earliest : 0;
    return {};
}

// The source video's side data that still describes the restored video: HDR mastering display
// and content light level (the pictures keep the source's colour), and the display matrix (a
// rotation players apply). The container's, or for HDR video whose container has none, what the
// first picture's SEI carries (HDR10 in HEVC often lives there only). What no longer holds after
// re-encoding (Dolby Vision's configuration, a stereo 3D or spherical layout, CPB properties),
// and what the output's container cannot hold, are named in a warning and left out.
Status MediaWriter::Impl::copy_video_side_data(const AVStream* in) {
    const std::string_view muxer = output->oformat->name;
    auto add = [&](AVPacketSideDataType type, const uint8_t* bytes, size_t size) -> Status {
        const char* name = av_packet_side_data_name(type);
        const bool held = type == AV_PKT_DATA_DISPLAYMATRIX ? av::holds_display_matrix(muxer) : av::holds_hdr(muxer);
        if (!held) {
            log::warn(kLog, "{}: the source video's {} cannot be stored in {}; not copied", path, name, muxer);
            return {};
        }
        if (av_stream_get_side_data(video, type, nullptr)) return {};
        uint8_t* data = av_stream_new_side_data(video, type, size);
        if (!data) return make_error(StatusCode::INTERNAL, "{}: out of memory copying the video's {}", path, name);
        std::memcpy(data, bytes, size);
        return {};
    };
    for (int i = 0; i < in->nb_side_data; ++i) {
        const AVPacketSideData& sd = in->side_data[i];
        if (sd.type != AV_PKT_DATA_MASTERING_DISPLAY_METADATA && sd.type != AV_PKT_DATA_CONTENT_LIGHT_LEVEL &&
            sd.type != AV_PKT_DATA_DISPLAYMATRIX) {
            const char* name = av_packet_side_data_name(sd.type);
            log::warn(kLog, "{}: the source video's {} does not describe the restored video; not copied", path,
                      name ? name : "side data");
            continue;
        }
        LOOM_TRY(add(sd.type, sd.data, sd.size));
    }
    const bool hdr = color.transfer == AVCOL_TRC_SMPTE2084 || color.transfer == AVCOL_TRC_ARIB_STD_B67;
    if (!hdr || (av_stream_get_side_data(in, AV_PKT_DATA_MASTERING_DISPLAY_METADATA, nullptr) &&
                 av_stream_get_side_data(in, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, nullptr)))
        return {};
    // The first picture's SEI: a decoder of its own on a demuxer of its own (this one's packets
    // are for the copy).
    auto probe = av::open_input(source.path, std::numeric_limits<int>::max() - 1);
    if (!probe.ok()) return probe.status().with_context("opening the source for its HDR metadata");
    AVFormatContext* f = probe->get();
    if (in->index >= static_cast<int>(f->nb_streams)) return {};
    const AVStream* st = f->streams[in->index];
    const AVCodec* codec = avcodec_find_decoder(st->codecpar->codec_id);
    av::CodecPtr dec(codec ? avcodec_alloc_context3(codec) : nullptr);
    av::PacketPtr pkt(av_packet_alloc());
    av::FramePtr frame(av_frame_alloc());
    if (!dec || !pkt || !frame || avcodec_parameters_to_context(dec.get(), st->codecpar) < 0) return {};
    dec->thread_count = 1;
    if (avcodec_open2(dec.get(), codec, nullptr) < 0) return {};
    for (unsigned i = 0; i < f->nb_streams; ++i)
        if (i != static_cast<unsigned>(in->index)) f->streams[i]->discard = AVDISCARD_ALL;
    constexpr int kPacketsMax = 64;  // a first picture takes a few packets at most
    bool got = false;
    for (int n = 0; n < kPacketsMax && !got; ++n) {
        const bool more = av_read_frame(f, pkt.get()) >= 0;
        if (more && pkt->stream_index != in->index) {
            av_packet_unref(pkt.get());
            continue;
        }
        avcodec_send_packet(dec.get(), more ? pkt.get() : nullptr);
        av_packet_unref(pkt.get());
        got = avcodec_receive_frame(dec.get(), frame.get()) == 0;
        if (!more) break;
    }
    if (!got) return {};
    if (const AVFrameSideData* sd = av_frame_get_side_data(frame.get(), AV_FRAME_DATA_MASTERING_DISPLAY_METADATA))
        LOOM_TRY(add(AV_PKT_DATA_MASTERING_DISPLAY_METADATA, sd->data, sd->size));
    if (const AVFrameSideData* sd = av_frame_get_side_data(frame.get(), AV_FRAME_DATA_CONTENT_LIGHT_LEVEL))
        LOOM_TRY(add(AV_PKT_DATA_CONTENT_LIGHT_LEVEL, sd->data, sd->size));
    return {};
}

Status MediaWriter::Impl::open_source() {
    auto in = av::open_input(source.path, std::numeric_limits<int>::max() - 1);
    if (!in.ok()) return in.status().with_context("opening the source for stream copy");
    copy_input = std::move(in).value();
    av::copy_metadata(copy_input->metadata, &output->metadata);
    if (source.stream_index >= 0 && source.stream_index < static_cast<int>(copy_input->nb_streams)) {
        const AVStream* in_video = copy_input->streams[source.stream_index];
        av::copy_metadata(in_video->metadata, &video->metadata);
        video->disposition = in_video->disposition;
        LOOM_TRY(copy_video_side_data(in_video));
    }
    copy_map.assign(copy_input->nb_streams, -1);
    std::vector<bool> written(copy_input->nb_streams, false);
    if (source.stream_index >= 0 && source.stream_index < static_cast<int>(copy_input->nb_streams))
        written[static_cast<size_t>(source.stream_index)] = true;
    if (!options.copy_streams || images) {
        LOOM_TRY(find_earliest(written));
        if (!images) av::copy_chapters(copy_input.get(), output.get(), ts_offset_us, path);
        return {};
    }
    for (unsigned i = 0; i < copy_input->nb_streams; ++i) {
        AVStream* in_st = copy_input->streams[i];
        const AVCodecParameters* par = in_st->codecpar;
        if (static_cast<int>(i) == source.stream_index) {
            in_st->discard = AVDISCARD_ALL;
            continue;
        }
        const bool attachment = par->codec_type == AVMEDIA_TYPE_ATTACHMENT;
        const AVDictionaryEntry* name = av_dict_get(in_st->metadata, "filename", nullptr, 0);
        const char* type = av_get_media_type_string(par->codec_type);
        const std::string what = fmt::format("stream {} ({} {}{}{})", i, type ? type : "unknown",
                                             avcodec_get_name(par->codec_id), attachment ? " " : "",
                                             attachment ? (name ? name->value : "unnamed") : "");
        if ((par->codec_type != AVMEDIA_TYPE_AUDIO && par->codec_type != AVMEDIA_TYPE_SUBTITLE && !attachment) ||
            (in_st->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
            log::warn(kLog, "{}: {} is not copied: only audio, subtitles and attachments are", path, what);
            in_st->discard = AVDISCARD_ALL;
            continue;
        }
        // Attachments (the fonts ASS subtitles need, cover images) are files in the header, no
        // packets: Matroska alone holds them.
        const bool stored = attachment ? av::holds_attachments(output->oformat->name)
                                       : av::holds_codec(output->oformat, par->codec_id);
        if (!stored) {
            log::warn(kLog, "{}: {} cannot be stored in {}; not copied", path, what, output->oformat->name);
            in_st->discard = AVDISCARD_ALL;
            continue;
        }
        AVStream* out_st = avformat_new_stream(output.get(), nullptr);
        if (!out_st) return make_error(StatusCode::INTERNAL, "{}: out of memory adding a stream", path);
        int r = avcodec_parameters_copy(out_st->codecpar, par);
        if (r < 0) return av::error(r, path, fmt::format("copying the parameters of stream {}", i));
        out_st->codecpar->codec_tag = 0;  // the tag is the old container's; the muxer picks its own
        out_st->time_base = in_st->time_base;
        out_st->disposition = in_st->disposition;
        av::copy_metadata(in_st->metadata, &out_st->metadata);
        for (const char* key : {"language", "title"}) {
            const AVDictionaryEntry* t = av_dict_get(in_st->metadata, key, nullptr, 0);
            if (t && !av::holds_stream_tag(output->oformat->name, key))
                log::warn(kLog, "{}: {}'s {} tag \"{}\" cannot be stored in {}; not kept", path, what, key, t->value,
                          output->oformat->name);
        }
        copy_map[i] = out_st->index;
        written[i] = !attachment;  // an attachment has no packets to wait for
    }
    LOOM_TRY(find_earliest(written));
    av::copy_chapters(copy_input.get(), output.get(), ts_offset_us, path);
    copy_packet.reset(av_packet_alloc());
    if (!copy_packet) return make_error(StatusCode::INTERNAL, "{}: out of memory", path);
    copy_done = false;
    if (options.copy_from_pts != INT64_MIN) {
        // A later segment: start reading a little before it rather than at the file's start.
        const AVRational tb{source.time_base.num, source.time_base.den};
        const int64_t target = av_rescale_q(options.copy_from_pts, tb, AV_TIME_BASE_Q) - kInterleaveSlackS * AV_TIME_BASE;
        if (target > 0) {
            int r = avformat_seek_file(copy_input.get(), -1, INT64_MIN, target, target, 0);
            if (r < 0) {  // read from the start instead
                log::debug(kLog, "{}: seeking the copy demuxer failed ({}); reading {} from the start", path,
                           av::error_text(r), source.path);
                auto again = av::open_input(source.path, std::numeric_limits<int>::max() - 1);
                if (!again.ok()) return again.status().with_context("opening the source for stream copy");
                std::vector<AVDiscard> discard;
                for (unsigned i = 0; i < copy_input->nb_streams; ++i) discard.push_back(copy_input->streams[i]->discard);
                copy_input = std::move(again).value();
                for (unsigned i = 0; i < copy_input->nb_streams && i < discard.size(); ++i)
                    copy_input->streams[i]->discard = discard[i];
            }
        }
    }
    return {};
}

Status MediaWriter::Impl::open_encoder() {
    const AVCodec* codec = avcodec_find_encoder_by_name(options.codec.c_str());
    if (!codec || codec->type != AVMEDIA_TYPE_VIDEO)
        return make_error(StatusCode::UNSUPPORTED, "{}: no video encoder '{}' in this FFmpeg", path, options.codec);
    AVPixelFormat pixels;
    if (images)
        pixels = bit_depth(layout.format) > 8 ? AV_PIX_FMT_RGB48BE : AV_PIX_FMT_RGB24;
    else
        pixels = av::to_av(av::planar_of(layout.format));
    bool supported = codec->pix_fmts == nullptr;
    for (const AVPixelFormat* f = codec->pix_fmts; f && *f != AV_PIX_FMT_NONE; ++f) supported |= *f == pixels;
    if (!supported)
        return make_error(StatusCode::UNSUPPORTED, "{}: encoder {} does not take {}", path, codec->name,
                          av_get_pix_fmt_name(pixels));

    encoder.reset(avcodec_alloc_context3(codec));
    if (!encoder) return make_error(StatusCode::INTERNAL, "{}: out of memory allocating the encoder", path);
    AVCodecContext* e = encoder.get();
    e->width = static_cast<int>(layout.width);
    e->height = static_cast<int>(layout.height);
    e->pix_fmt = pixels;
    e->time_base = {source.time_base.num, source.time_base.den};
    if (source.frame_rate.num > 0 && source.frame_rate.den > 0) e->framerate = {source.frame_rate.num, source.frame_rate.den};
    if (source.sample_aspect_ratio.num > 0)
        e->sample_aspect_ratio = {source.sample_aspect_ratio.num, source.sample_aspect_ratio.den};
    e->colorspace = av::matrix_to_av(color.matrix, static_cast<AVColorSpace>(source.color_matrix_code));
    e->color_range = color.range == ColorRange::FULL ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG;
    e->color_primaries = av_color_primaries_name(static_cast<AVColorPrimaries>(color.primaries))
                             ? static_cast<AVColorPrimaries>(color.primaries)
                             : AVCOL_PRI_UNSPECIFIED;
    e->color_trc = av_color_transfer_name(static_cast<AVColorTransferCharacteristic>(color.transfer))
                       ? static_cast<AVColorTransferCharacteristic>(color.transfer)
                       : AVCOL_TRC_UNSPECIFIED;
    e->thread_count = options.threads;
    if (output->oformat->flags & AVFMT_GLOBALHEADER) e->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;

    AVDictionary* raw = nullptr;
    const bool x26x = options.codec == "libx264" || options.codec == "libx265";
    if (x26x) {
        av_dict_set(&raw, "preset", options.preset.c_str(), 0);
        av_dict_set_int(&raw, "crf", options.crf, 0);
        // x265 prints to stderr by itself; keep it to errors unless the caller chose.
        if (options.codec == "libx265" && !options.codec_options.contains("x265-params"))
            av_dict_set(&raw, "x265-params", "log-level=error", 0);
    }
    for (const auto& [k, v] : options.codec_options) av_dict_set(&raw, k.c_str(), v.c_str(), 0);
    std::unique_ptr<AVDictionary*, void (*)(AVDictionary**)> dict(&raw, [](AVDictionary** d) { av_dict_free(d); });
    int r = avcodec_open2(e, codec, &raw);
    if (r < 0) return av::error(r, path, fmt::format("opening the {} encoder", codec->name));
    if (const AVDictionaryEntry* left = av_dict_get(raw, "", nullptr, AV_DICT_IGNORE_SUFFIX))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: encoder {} has no option '{}'", path, codec->name, left->key);

    video = avformat_new_stream(output.get(), nullptr);
    if (!video) return make_error(StatusCode::INTERNAL, "{}: out of memory adding the video stream", path);
    r = avcodec_parameters_from_context(video->codecpar, e);
    if (r < 0) return av::error(r, path, "setting the video stream's parameters");
    video->time_base = e->time_base;
    video->avg_frame_rate = e->framerate;
    video->sample_aspect_ratio = e->sample_aspect_ratio;

    frame.reset(av_frame_alloc());
    packet.reset(av_packet_alloc());
    if (!frame || !packet) return make_error(StatusCode::INTERNAL, "{}: out of memory", path);
    AVFrame* f = frame.get();
    if (images) {
        rgb.reset(av_frame_alloc());
        if (!rgb) return make_error(StatusCode::INTERNAL, "{}: out of memory", path);
        f->format = av::to_av(av::planar_of(layout.format));  // staging for swscale
        sws.reset(sws_getContext(e->width, e->height, static_cast<AVPixelFormat>(f->format), e->width, e->height,
                                 pixels, SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT | SWS_BITEXACT, nullptr,
                                 nullptr, nullptr));
        if (!sws) return make_error(StatusCode::UNSUPPORTED, "{}: swscale cannot convert to {}", path, av_get_pix_fmt_name(pixels));
        av::sws_keep_color(sws.get(), color.matrix, color.range, ColorRange::FULL);
        rgb->format = pixels;
        rgb->width = e->width;
        rgb->height = e->height;
        r = av_frame_get_buffer(rgb.get(), 0);
        if (r < 0) return av::error(r, path, "allocating a frame");
    } else {
        f->format = pixels;
    }
    f->width = e->width;
    f->height = e->height;
    r = av_frame_get_buffer(f, 0);
    if (r < 0) return av::error(r, path, "allocating a frame");
    return {};
}

Result<std::unique_ptr<MediaWriter>> MediaWriter::open(const std::string& path, const VideoInfo& source,
                                                       const FrameLayout& layout, const ColorInfo& color,
                                                       const WriterOptions& options) {
    if (options.backend == "gstreamer") {
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<WriterBackend> other,
                              open_gst_writer(path, source, layout, color, options));
        return std::unique_ptr<MediaWriter>(new MediaWriter(std::move(other)));
    }
    if (options.backend != "ffmpeg")
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: backend \"{}\" (ffmpeg or gstreamer)", path,
                          options.backend);
    if (!options.gst_encoder.empty() || !options.gst_muxer.empty())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: a GStreamer encoder or muxer needs backend \"gstreamer\"", path);
    av::route_log();
    LOOM_TRY(layout.check().with_context(path));
    if (options.pixel_format != layout.format)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: WriterOptions.pixel_format {} differs from the frames' {}",
                          path, pixel_format_name(options.pixel_format), pixel_format_name(layout.format));
    if (options.copy_from_pts >= options.copy_to_pts)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: copy_from_pts {} is not before copy_to_pts {}", path,
                          options.copy_from_pts, options.copy_to_pts);
    if (source.time_base.num <= 0 || source.time_base.den <= 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: the source's time base {}/{} is not valid", path,
                          source.time_base.num, source.time_base.den);
    auto impl = std::make_unique<Impl>();
    Impl& s = *impl;
    s.path = path;
    s.source = source;
    s.layout = layout;
    s.color = color;
    s.options = options;
    s.images = options.codec == "png";

    AVFormatContext* raw = nullptr;
    int r = avformat_alloc_output_context2(&raw, nullptr, s.images ? "image2" : nullptr, path.c_str());
    if (r < 0 || !raw) return av::error(r < 0 ? r : AVERROR_MUXER_NOT_FOUND, path, "choosing a container from the name");
    s.output.reset(raw);
    if (s.images) {
        if (s.image_name(kImageStartNumber).empty() || s.image_name(kImageStartNumber) == s.image_name(kImageStartNumber + 1))
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: a PNG sequence needs a pattern such as out/%06d.png", path);
    } else if (s.output->oformat->flags & AVFMT_NOFILE) {
        return make_error(StatusCode::UNSUPPORTED, "{}: container {} writes its own files; not supported", path,
                          s.output->oformat->name);
    }

    LOOM_TRY(s.open_encoder());
    // A pipe or a device was read once by the decoder and cannot be read again for its other
    // streams: only a file's are copied.
    std::error_code ec;
    const bool rereadable = !source.path.empty() && std::filesystem::is_regular_file(source.path, ec);
    if (!source.path.empty() && !rereadable && options.copy_streams)
        log::warn(kLog, "{}: {} is not a regular file (a pipe or a device): its other streams are not copied", path,
                  source.path);
    if (rereadable && !s.images) LOOM_TRY(s.open_source());

    AVDictionary* raw_opts = nullptr;
    std::unique_ptr<AVDictionary*, void (*)(AVDictionary**)> opts(&raw_opts, [](AVDictionary** d) { av_dict_free(d); });
    if (s.images) {
        av_dict_set(&raw_opts, "atomic_writing", "1", 0);
        av_dict_set_int(&raw_opts, "start_number", kImageStartNumber, 0);
    } else {
        s.temporary = av::temporary_name(path);
        r = avio_open(&s.output->pb, s.temporary.c_str(), AVIO_FLAG_WRITE);
        if (r < 0) return av::error(r, s.temporary, "creating the output file");
    }
    s.opened_file = true;
    r = avformat_write_header(s.output.get(), &raw_opts);
    if (r < 0) return av::error(r, path, fmt::format("writing the {} header", s.output->oformat->name));
    log::info(kLog, "{}: writing {}x{} {} with {} in {}{}", path, layout.width, layout.height,
              pixel_format_name(layout.format), options.codec, s.output->oformat->name,
              s.copy_done ? "" : ", copying the source's audio and subtitles");
    return std::unique_ptr<MediaWriter>(new MediaWriter(std::move(impl)));
}

// Returns whether a copied packet lies in [copy_from_pts, copy_to_pts); sets copy_done once the
// packets read are so far past the segment that none of it can follow.
bool MediaWriter::Impl::in_segment(const AVPacket* p) {
    const bool from_start = options.copy_from_pts == INT64_MIN, to_end = options.copy_to_pts == INT64_MAX;
    if (from_start && to_end) return true;
    const int64_t t = p->pts != AV_NOPTS_VALUE ? p->pts : p->dts;
    if (t == AV_NOPTS_VALUE) return from_start;
    const AVRational in_tb = copy_input->streams[p->stream_index]->time_base;
    const AVRational tb{source.time_base.num, source.time_base.den};
    if (!from_start && av_compare_ts(t, in_tb, options.copy_from_pts, tb) < 0) return false;
    if (!to_end && av_compare_ts(t, in_tb, options.copy_to_pts, tb) >= 0) {
        const int64_t to_us = av_rescale_q(options.copy_to_pts, tb, AV_TIME_BASE_Q);
        if (av_compare_ts(t, in_tb, to_us + kInterleaveSlackS * AV_TIME_BASE, AV_TIME_BASE_Q) >= 0) copy_done = true;
        return false;
    }
    return true;
}

// Writes the copied packets whose time is not after `ts` (in `tb`).
Status MediaWriter::Impl::copy_until(int64_t ts, AVRational tb) {
    while (!copy_done) {
        if (!copy_pending) {
            int r = av_read_frame(copy_input.get(), copy_packet.get());
            if (r == AVERROR_EOF) {
                copy_done = true;
                break;
            }
            if (r < 0) {
                log::warn(kLog, "{}: stream copy stopped reading {}: {}", path, source.path, av::error_text(r));
                copy_done = true;
                break;
            }
            if (copy_map[copy_packet->stream_index] < 0 || !in_segment(copy_packet.get())) {
                av_packet_unref(copy_packet.get());
                continue;
            }
            copy_pending = true;
        }
        AVPacket* p = copy_packet.get();
        const AVRational in_tb = copy_input->streams[p->stream_index]->time_base;
        const int64_t t = p->dts != AV_NOPTS_VALUE ? p->dts : p->pts;
        if (t != AV_NOPTS_VALUE && ts != AV_NOPTS_VALUE && av_compare_ts(t, in_tb, ts, tb) > 0) break;
        const int out_index = copy_map[p->stream_index];
        p->stream_index = out_index;
        av_packet_rescale_ts(p, in_tb, output->streams[out_index]->time_base);
        offset(p, output->streams[out_index]->time_base);
        p->pos = -1;
        copy_pending = false;
        if (copy_last_dts.size() < output->nb_streams) copy_last_dts.resize(output->nb_streams, AV_NOPTS_VALUE);
        int64_t& last = copy_last_dts[static_cast<size_t>(out_index)];
        const bool strict = !(output->oformat->flags & AVFMT_TS_NONSTRICT);
        if (p->dts != AV_NOPTS_VALUE && last != AV_NOPTS_VALUE && (p->dts < last || (strict && p->dts == last))) {
            if (++stats.packets_dropped <= 5)
                log::warn(kLog, "{}: dropped a copied packet of stream {} whose dts {} is not after {} (corrupt input)",
                          path, out_index, p->dts, last);
            av_packet_unref(p);
            continue;
        }
        if (p->dts != AV_NOPTS_VALUE) last = p->dts;
        int r = av_interleaved_write_frame(output.get(), p);  // takes the packet's data
        if (r < 0) return av::error(r, path, "writing a copied packet");
        ++stats.packets_copied;
    }
    return {};
}

Status MediaWriter::Impl::drain_encoder() {
    for (;;) {
        int r = avcodec_receive_packet(encoder.get(), packet.get());
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return {};
        if (r < 0) return av::error(r, path, "encoding");
        packet->stream_index = video->index;
        av_packet_rescale_ts(packet.get(), encoder->time_base, video->time_base);
        LOOM_TRY(copy_until(packet->dts != AV_NOPTS_VALUE ? packet->dts : packet->pts, video->time_base));
        offset(packet.get(), video->time_base);
        r = av_interleaved_write_frame(output.get(), packet.get());
        if (r < 0) return av::error(r, path, "writing a video packet");
    }
}

Status MediaWriter::write(const uint8_t* src, size_t src_bytes, const FrameMeta& meta) {
    const FrameLayout& l = layout();
    if (!src || src_bytes < l.bytes())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame {} has {} bytes; a {}x{} {} frame needs {}",
                          other_ ? other_->path() : impl_->path, meta.index, src_bytes, l.width, l.height,
                          pixel_format_name(l.format), l.bytes());
    return write(FrameView::tight(l, src), meta);
}

Status MediaWriter::write(const FrameView& src, const FrameMeta& meta) {
    if (other_) return other_->write(src, meta);
    Impl& s = *impl_;
    if (!s.failed.ok()) return s.failed;
    if (s.finished) return make_error(StatusCode::FAILED_PRECONDITION, "{}: write after finish()", s.path);
    if (src.layout != s.layout)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame {} is {}x{} {}; the writer takes {}x{} {}", s.path,
                          meta.index, src.layout.width, src.layout.height, pixel_format_name(src.layout.format),
                          s.layout.width, s.layout.height, pixel_format_name(s.layout.format));
    if (Status st = src.check(); !st.ok()) return st.with_context(fmt::format("{}: frame {}", s.path, meta.index));
    if (s.last_pts != AV_NOPTS_VALUE && meta.pts <= s.last_pts)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame {} has pts {}, not after the previous {}", s.path,
                          meta.index, meta.pts, s.last_pts);
    AVFrame* f = s.frame.get();
    int r = av_frame_make_writable(f);  // the encoder may still hold the previous picture
    if (r < 0) return s.fail(av::error(r, s.path, "allocating a frame"));
    av::copy_from_view(src, f);
    AVFrame* send = f;
    if (s.images) {
        r = av_frame_make_writable(s.rgb.get());
        if (r < 0) return s.fail(av::error(r, s.path, "allocating a frame"));
        sws_scale(s.sws.get(), f->data, f->linesize, 0, f->height, s.rgb->data, s.rgb->linesize);
        send = s.rgb.get();
    }
    send->pts = meta.pts;
#if LIBAVUTIL_VERSION_MAJOR >= 58  // AVFrame.duration; FFmpeg 5.1 has pkt_duration only
    send->duration = meta.duration;
#else
    send->pkt_duration = meta.duration;
#endif
    send->color_range = s.encoder->color_range;
    send->colorspace = s.encoder->colorspace;
    send->color_primaries = s.encoder->color_primaries;
    send->color_trc = s.encoder->color_trc;
    r = avcodec_send_frame(s.encoder.get(), send);
    if (r < 0) return s.fail(av::error(r, s.path, fmt::format("encoding frame {} (pts {})", meta.index, meta.pts)));
    s.last_pts = meta.pts;
    ++s.stats.frames;
    Status st = s.drain_encoder();
    if (!st.ok()) return s.fail(st);
    return {};
}

Status MediaWriter::finish() {
    if (other_) return other_->finish();
    Impl& s = *impl_;
    if (!s.failed.ok()) return s.failed;
    if (s.finished) return {};
    int r = avcodec_send_frame(s.encoder.get(), nullptr);
    if (r < 0 && r != AVERROR_EOF) return s.fail(av::error(r, s.path, "flushing the encoder"));
    Status st = s.drain_encoder();
    if (st.ok()) st = s.copy_until(AV_NOPTS_VALUE, AVRational{1, 1});
    if (!st.ok()) return s.fail(st);
    r = av_write_trailer(s.output.get());
    if (r < 0) return s.fail(av::error(r, s.path, "writing the trailer"));
    std::error_code ec;
    if (s.images) {
        s.output.reset();
        for (int64_t i = 0; i < s.stats.frames; ++i) {
            auto n = std::filesystem::file_size(s.image_name(kImageStartNumber + i), ec);
            if (!ec) s.stats.bytes += static_cast<int64_t>(n);
        }
    } else {
        r = avio_closep(&s.output->pb);
        if (r < 0) return s.fail(av::error(r, s.temporary, "closing the output file"));
        std::filesystem::rename(s.temporary, s.path, ec);
        if (ec)
            return s.fail(make_error(StatusCode::IO_ERROR, "{}: renaming {} into place: {}", s.path, s.temporary,
                                     ec.message()));
        auto n = std::filesystem::file_size(s.path, ec);
        s.stats.bytes = ec ? 0 : static_cast<int64_t>(n);
    }
    s.finished = true;
    log::info(kLog, "{}: {} frames written, {} packets copied, {} bytes", s.path, s.stats.frames,
              s.stats.packets_copied, s.stats.bytes);
    return {};
}

}  // namespace loom::preprocess
