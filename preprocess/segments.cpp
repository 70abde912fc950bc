// Segments: keyframes from a scan of the video packets (frame indices from their pts, so that
// B-frames' reordering is accounted for), a plan of N segments on keyframes, and the
// join of segment files by stream copy.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <vector>

extern "C" {
#include <libavutil/opt.h>
#include <libavutil/mathematics.h>
}

#include "common/log.hpp"
#include "preprocess/av_util.hpp"
#include "preprocess/media_io.hpp"

namespace loom::preprocess {

namespace {
constexpr std::string_view kLog = "media";
}  // namespace

namespace av {

Result<VideoPacketIndex> index_video_packets(const std::string& path, const MediaLimits& limits,
                                             const Interrupt* interrupt) {
    route_log();
    LOOM_ASSIGN_OR_RETURN(InputPtr in, open_input(path, limits.streams_max, interrupt));
    const AVCodec* codec = nullptr;
    // The same choice as MediaReader::open, so that both see one stream.
    int index = av_find_best_stream(in.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (index == AVERROR_DECODER_NOT_FOUND) index = av_find_best_stream(in.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (index == AVERROR_STREAM_NOT_FOUND) return make_error(StatusCode::PARSE_ERROR, "{}: no video stream", path);
    if (index < 0) return error(index, path, "finding the video stream");
    for (unsigned i = 0; i < in->nb_streams; ++i)
        if (static_cast<int>(i) != index) in->streams[i]->discard = AVDISCARD_ALL;

    VideoPacketIndex out;
    out.stream_index = index;
    out.time_base = in->streams[index]->time_base;
    struct Packet {
        int64_t pts;
        bool key;
        bool closed;  // proved closed by its content (a stream without timestamps)
    };
    std::vector<Packet> decode_order;
    UntimedClock clock;
    const AVCodecID codec_id = in->streams[index]->codecpar->codec_id;
    PacketPtr packet(av_packet_alloc());
    if (!packet) return make_error(StatusCode::INTERNAL, "{}: out of memory", path);
    for (;;) {
        int r = av_read_frame(in.get(), packet.get());
        if (r < 0 && interrupt && *interrupt && (*interrupt)())
            return make_error(StatusCode::CANCELLED, "{}: reading interrupted", path);
        if (r == AVERROR_EOF) break;
        if (r < 0) return error(r, path, fmt::format("reading video packet {}", decode_order.size()));
        struct Unref {
            AVPacket* p;
            ~Unref() { av_packet_unref(p); }
        } unref{packet.get()};
        const AVPacket& p = *packet;
        if (p.stream_index != index || (p.flags & AV_PKT_FLAG_DISCARD)) continue;
        const int64_t pts = clock.stamp(p);
        if (pts == AV_NOPTS_VALUE)
            return make_error(StatusCode::UNSUPPORTED,
                              "{}: video packet {} (byte offset {}) has no pts while others have; segments need "
                              "every frame's time",
                              path, decode_order.size(), p.pos);
        if (static_cast<int64_t>(decode_order.size()) >= limits.frames_max)
            return make_error(StatusCode::OUT_OF_RANGE, "{}: more than frames_max {} video packets", path,
                              limits.frames_max);
        const bool key = (p.flags & AV_PKT_FLAG_KEY) != 0;
        decode_order.push_back({pts, key, key && clock.counting() && starts_closed_group(codec_id, p)});
    }
    out.counted = clock.counting();
    const size_t n = decode_order.size();
    out.sorted_pts.reserve(n);
    for (const Packet& p : decode_order) out.sorted_pts.push_back(p.pts);
    std::sort(out.sorted_pts.begin(), out.sorted_pts.end());
    auto same = std::adjacent_find(out.sorted_pts.begin(), out.sorted_pts.end());
    if (same != out.sorted_pts.end())
        return make_error(StatusCode::UNSUPPORTED, "{}: two video packets have pts {}; frames cannot be indexed by pts",
                          path, *same);

    // A keyframe is closed when everything before it in decode order is presented before it and
    // everything from it on is presented from it on: prefix maximum < pts == suffix minimum.
    std::vector<int64_t> suffix_min(n + 1, std::numeric_limits<int64_t>::max());
    for (size_t i = n; i-- > 0;) suffix_min[i] = std::min(suffix_min[i + 1], decode_order[i].pts);
    int64_t prefix_max = std::numeric_limits<int64_t>::min();
    for (size_t i = 0; i < n; ++i) {
        const Packet& p = decode_order[i];
        if (p.key) {
            KeyframeInfo k;
            k.pts = p.pts;
            k.frame = std::lower_bound(out.sorted_pts.begin(), out.sorted_pts.end(), p.pts) - out.sorted_pts.begin();
            k.time_s = static_cast<double>(p.pts) * av_q2d(out.time_base);
            // Without timestamps every packet's time rises in decode order: only the content
            // tells a closed group from an open one, and an open one cannot be placed.
            const bool after_what_came_before = i == 0 || prefix_max < p.pts;
            k.closed = out.counted ? i == 0 || p.closed : after_what_came_before && suffix_min[i] == p.pts;
            k.segment_start = out.counted ? k.closed : after_what_came_before;
            out.keyframes.push_back(k);
        }
        prefix_max = std::max(prefix_max, p.pts);
    }
    std::sort(out.keyframes.begin(), out.keyframes.end(),
              [](const KeyframeInfo& a, const KeyframeInfo& b) { return a.frame < b.frame; });
    return out;
}

}  // namespace av

Result<std::vector<KeyframeInfo>> list_keyframes(const std::string& path, const ReaderOptions& options, int64_t* frames) {
    LOOM_ASSIGN_OR_RETURN(av::VideoPacketIndex index,
                          av::index_video_packets(path, options.limits,
                                                  options.interrupted ? &options.interrupted : nullptr));
    if (frames) *frames = static_cast<int64_t>(index.sorted_pts.size());
    return std::move(index.keyframes);
}

std::vector<SegmentRange> plan_segments(const std::vector<KeyframeInfo>& keyframes, int64_t total_frames, int n) {
    std::vector<SegmentRange> out;
    if (n < 1 || total_frames < 1) return out;
    std::vector<const KeyframeInfo*> starts;  // segment starts inside (0, total_frames), by frame
    for (const KeyframeInfo& k : keyframes)
        if (k.segment_start && k.frame > 0 && k.frame < total_frames) starts.push_back(&k);
    std::sort(starts.begin(), starts.end(), [](auto* a, auto* b) { return a->frame < b->frame; });

    std::vector<const KeyframeInfo*> chosen;
    for (int s = 1; s < n; ++s) {
        const int64_t target = total_frames * s / n;
        const KeyframeInfo* best = nullptr;
        for (const KeyframeInfo* k : starts) {
            if (!chosen.empty() && k->frame <= chosen.back()->frame) continue;
            if (!best || std::llabs(k->frame - target) < std::llabs(best->frame - target)) best = k;
        }
        if (best) chosen.push_back(best);
    }
    int64_t start = 0;
    int64_t from = std::numeric_limits<int64_t>::min();
    for (const KeyframeInfo* k : chosen) {
        out.push_back({start, k->frame - start, from, k->pts});
        start = k->frame;
        from = k->pts;
    }
    out.push_back({start, total_frames - start, from, std::numeric_limits<int64_t>::max()});
    return out;
}

namespace {

// Returns why stream `b` of a segment cannot follow stream `a` of the first, or empty.
std::string stream_difference(const AVStream* a, const AVStream* b) {
    const AVCodecParameters* x = a->codecpar;
    const AVCodecParameters* y = b->codecpar;
    if (x->codec_type != y->codec_type)
        return fmt::format("is {}, not {}", av_get_media_type_string(y->codec_type) ? av_get_media_type_string(y->codec_type) : "?",
                           av_get_media_type_string(x->codec_type) ? av_get_media_type_string(x->codec_type) : "?");
    if (x->codec_id != y->codec_id)
        return fmt::format("has codec {}, not {}", avcodec_get_name(y->codec_id), avcodec_get_name(x->codec_id));
    if (x->width != y->width || x->height != y->height)
        return fmt::format("is {}x{}, not {}x{}", y->width, y->height, x->width, x->height);
    if (x->format != y->format) return fmt::format("has pixel or sample format {}, not {}", y->format, x->format);
    if (x->sample_rate != y->sample_rate)
        return fmt::format("has sample rate {}, not {}", y->sample_rate, x->sample_rate);
    if (x->ch_layout.nb_channels != y->ch_layout.nb_channels)
        return fmt::format("has {} channels, not {}", y->ch_layout.nb_channels, x->ch_layout.nb_channels);
    if (av_cmp_q(a->time_base, b->time_base) != 0)
        return fmt::format("has time base {}/{}, not {}/{}", b->time_base.num, b->time_base.den, a->time_base.num,
                           a->time_base.den);
    if (x->extradata_size != y->extradata_size ||
        (x->extradata_size > 0 && std::memcmp(x->extradata, y->extradata, static_cast<size_t>(x->extradata_size)) != 0))
        return "has other codec parameters (extradata)";
    return {};
}

}  // namespace

Status join_segments(const std::vector<std::string>& segments, const std::string& output) {
    av::route_log();
    if (segments.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "{}: no segments to join", output);
    constexpr int kStreamsMax = 1024;
    std::vector<av::InputPtr> inputs;
    inputs.reserve(segments.size());
    for (const std::string& s : segments) {
        auto in = av::open_input(s, kStreamsMax);
        if (!in.ok()) return in.status().with_context(fmt::format("{}: joining", output));
        inputs.push_back(std::move(in).value());
    }
    // The streams come from the segment with the most: a container such as MP4 leaves out a
    // track that got no packet (audio that ends before the video's last segment), so a segment
    // may hold fewer. Each segment's streams map, in order, onto equal streams of that one.
    size_t widest = 0;
    for (size_t i = 1; i < inputs.size(); ++i)
        if (inputs[i]->nb_streams > inputs[widest]->nb_streams) widest = i;
    const AVFormatContext* first = inputs[widest].get();
    std::vector<std::vector<int>> stream_map(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        unsigned next = 0;
        for (unsigned k = 0; k < inputs[i]->nb_streams; ++k) {
            std::string why = "is not in " + segments[widest];
            while (next < first->nb_streams) {
                why = stream_difference(first->streams[next], inputs[i]->streams[k]);
                if (why.empty()) break;
                if (inputs[i]->nb_streams == first->nb_streams) break;  // same count: stream for stream
                ++next;
            }
            if (next >= first->nb_streams || !why.empty())
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: segment {} cannot be joined: its stream {} {} (as in {})",
                                  segments[i], i, k, why.empty() ? "has no match" : why, segments[widest]);
            stream_map[i].push_back(static_cast<int>(next++));
        }
    }

    AVFormatContext* raw = nullptr;
    int r = avformat_alloc_output_context2(&raw, nullptr, nullptr, output.c_str());
    if (r < 0 || !raw) return av::error(r < 0 ? r : AVERROR_MUXER_NOT_FOUND, output, "choosing a container from the name");
    av::OutputPtr out(raw);
    if (out->oformat->flags & AVFMT_NOFILE)
        return make_error(StatusCode::UNSUPPORTED, "{}: container {} writes its own files; not supported", output,
                          out->oformat->name);
    av::copy_metadata(first->metadata, &out->metadata);
    av::copy_chapters(first, out.get(), 0, output);  // each segment holds all the source's chapters
    for (unsigned k = 0; k < first->nb_streams; ++k) {
        const AVStream* in_st = first->streams[k];
        AVStream* st = avformat_new_stream(out.get(), nullptr);
        if (!st) return make_error(StatusCode::INTERNAL, "{}: out of memory adding a stream", output);
        r = avcodec_parameters_copy(st->codecpar, in_st->codecpar);  // colour tags included
        if (r < 0) return av::error(r, output, fmt::format("copying the parameters of stream {}", k));
        st->codecpar->codec_tag = 0;
        st->time_base = in_st->time_base;
        st->avg_frame_rate = in_st->avg_frame_rate;
        st->sample_aspect_ratio = in_st->sample_aspect_ratio;
        st->disposition = in_st->disposition;
        av::copy_metadata(in_st->metadata, &st->metadata);
    }

    const std::string temporary = av::temporary_name(output);
    struct RemoveUnlessKept {
        const std::string& path;
        bool keep = false;
        ~RemoveUnlessKept() {
            std::error_code ec;
            if (!keep) std::filesystem::remove(path, ec);
        }
    } guard{temporary};
    r = avio_open(&out->pb, temporary.c_str(), AVIO_FLAG_WRITE);
    if (r < 0) return av::error(r, temporary, "creating the output file");
    // MP4 and MOV write where a track starts (an empty edit) in the movie's time scale, 1/1000 s
    // by default: a video that starts 20.996 ms in (after primed audio) would come back 20 ms in.
    // The video's own time scale keeps the whole run's timeline exact.
    AVDictionary* raw_opts = nullptr;
    std::unique_ptr<AVDictionary*, void (*)(AVDictionary**)> opts(&raw_opts, [](AVDictionary** d) { av_dict_free(d); });
    const AVClass* muxer_class = out->oformat->priv_class;
    if (muxer_class &&
        av_opt_find(&muxer_class, "movie_timescale", nullptr, 0, AV_OPT_SEARCH_FAKE_OBJ) != nullptr) {
        for (unsigned k = 0; k < out->nb_streams; ++k) {
            const AVStream* st = out->streams[k];
            if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && st->time_base.num == 1 && st->time_base.den > 0) {
                av_dict_set_int(&raw_opts, "movie_timescale", st->time_base.den, 0);
                break;
            }
        }
    }
    r = avformat_write_header(out.get(), &raw_opts);
    if (r < 0) return av::error(r, output, fmt::format("writing the {} header", out->oformat->name));

    std::vector<int64_t> last_dts(first->nb_streams, AV_NOPTS_VALUE);  // per output stream, in its time base
    av::PacketPtr packet(av_packet_alloc());
    if (!packet) return make_error(StatusCode::INTERNAL, "{}: out of memory", output);
    int64_t packets = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
        AVFormatContext* in = inputs[i].get();
        for (;;) {
            r = av_read_frame(in, packet.get());
            if (r == AVERROR_EOF) break;
            if (r < 0) return av::error(r, segments[i], fmt::format("reading segment {} to join into {}", i, output));
            AVPacket* p = packet.get();
            const AVRational in_tb = in->streams[p->stream_index]->time_base;
            const int k = stream_map[i][static_cast<size_t>(p->stream_index)];
            p->stream_index = k;
            AVStream* st = out->streams[k];
            av_packet_rescale_ts(p, in_tb, st->time_base);
            p->pos = -1;
            // Matroska keeps no decode timestamps: its demuxer gives none for the packets ahead of
            // a B-frame stream's first reordered one. Inside one file the muxer infers them; at a
            // seam it would infer them from the previous segment's timeline and go back in time,
            // so they are set one tick past the last (decode order; pts untouched).
            if (p->dts == AV_NOPTS_VALUE && i > 0 && last_dts[k] != AV_NOPTS_VALUE &&
                (p->pts == AV_NOPTS_VALUE || last_dts[k] + 1 <= p->pts))
                p->dts = last_dts[k] + 1;
            // The encoders of neighbouring segments may give dts that touch at the seam; nudge
            // by one tick where pts allows, else refuse.
            if (p->dts != AV_NOPTS_VALUE && last_dts[k] != AV_NOPTS_VALUE && p->dts <= last_dts[k]) {
                if (i > 0 && (p->pts == AV_NOPTS_VALUE || last_dts[k] + 1 <= p->pts)) {
                    log::debug(kLog, "{}: dts {} of stream {} in {} moved to {}", output, p->dts, k, segments[i],
                               last_dts[k] + 1);
                    p->dts = last_dts[k] + 1;
                } else {
                    av_packet_unref(p);
                    return make_error(StatusCode::INVALID_ARGUMENT,
                                      "{}: segment {} goes back in time: stream {} dts {} after {} (segments out of "
                                      "order or overlapping?)",
                                      segments[i], i, k, p->dts, last_dts[k]);
                }
            }
            if (p->dts != AV_NOPTS_VALUE) last_dts[k] = p->dts;
            r = av_interleaved_write_frame(out.get(), p);  // takes the packet's data
            if (r < 0) return av::error(r, output, fmt::format("writing a packet of {}", segments[i]));
            ++packets;
        }
    }
    r = av_write_trailer(out.get());
    if (r < 0) return av::error(r, output, "writing the trailer");
    r = avio_closep(&out->pb);
    if (r < 0) return av::error(r, temporary, "closing the output file");
    std::error_code ec;
    std::filesystem::rename(temporary, output, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: renaming {} into place: {}", output, temporary, ec.message());
    guard.keep = true;
    log::info(kLog, "{}: {} segments joined, {} packets", output, segments.size(), packets);
    return {};
}

}  // namespace loom::preprocess
