// check_output: a finished output probed and compared with its source and with what was
// written. Packets are read, never decoded: the video's size, colour tags, aspect ratio, HDR and
// rotation side data, every frame's pts, and every other stream, chapter and tag of the source.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

extern "C" {
#include <libavutil/avstring.h>
#include <libavutil/mathematics.h>
#include <libavutil/pixdesc.h>
}

#include "preprocess/av_util.hpp"
#include "preprocess/media_io.hpp"

namespace loom::preprocess {

namespace {

// The frames whose times differ are listed up to this many; the rest are counted.
constexpr size_t kFramesListed = 5;

const char* type_name(AVMediaType t) {
    const char* n = av_get_media_type_string(t);
    return n ? n : "unknown";
}

std::string tag(const AVDictionary* d, const char* key) {
    const AVDictionaryEntry* e = av_dict_get(d, key, nullptr, 0);
    return e ? e->value : "";
}

// A stream's tag, with "und" (MP4's and MPEG-TS's word for no language) as none.
std::string tag_value(const AVStream* st, const char* key) {
    std::string v = tag(st->metadata, key);
    return v == "und" && std::string_view(key) == "language" ? std::string() : v;
}

std::string stream_name(const AVStream* st) {
    const AVCodecParameters* p = st->codecpar;
    const bool file = p->codec_type == AVMEDIA_TYPE_ATTACHMENT;
    return fmt::format("stream {} ({} {}{}{})", st->index, type_name(p->codec_type), avcodec_get_name(p->codec_id),
                       file ? " " : "", file ? tag(st->metadata, "filename") : std::string());
}

std::string disposition_text(int d) {
    static constexpr std::pair<int, const char*> kFlags[] = {
        {AV_DISPOSITION_DEFAULT, "default"},           {AV_DISPOSITION_FORCED, "forced"},
        {AV_DISPOSITION_HEARING_IMPAIRED, "hearing impaired"}, {AV_DISPOSITION_VISUAL_IMPAIRED, "visual impaired"},
        {AV_DISPOSITION_COMMENT, "commentary"},        {AV_DISPOSITION_ORIGINAL, "original"},
        {AV_DISPOSITION_DUB, "dub"}};
    std::string out;
    for (const auto& [flag, name] : kFlags)
        if (d & flag) out.append(out.empty() ? "" : ", ").append(name);
    return out.empty() ? "none" : out;
}

struct Checker {
    const OutputExpectation& expect;
    const std::string& output;
    FidelityReport report;
    std::string muxer;
    const AVOutputFormat* writer = nullptr;  // the muxer the output's name picks, as the writer's did

    void check(bool same, std::string what, std::string source, std::string out, std::string explained = {}) {
        ++report.checks;
        if (!same) report.differences.push_back({std::move(what), std::move(source), std::move(out), std::move(explained)});
    }
    bool matroska() const { return muxer == "matroska" || muxer == "webm"; }
};

// One read of a file's packets: every packet's pts of the video stream (sorted: its
// presentation order), and per stream the packet count and the first packet's time. With
// `keep`, only those streams are read (the others discarded, as the run's demuxers discard
// them); a source's read error ends the read as it ended the run's (the output's fails).
struct Scan {
    std::vector<int64_t> video_times;  // the timed ones (a raw elementary stream has none)
    int64_t video_packets = 0;
    std::vector<int64_t> counts, first;
    std::vector<int64_t> end_us;   // per stream, the latest pts + duration (microseconds)
    int64_t packet_us_max = 0;     // the longest packet duration seen
};

Result<Scan> scan(AVFormatContext* f, int video, const std::string& path, const std::vector<bool>* keep = nullptr) {
    if (keep)
        for (unsigned i = 0; i < f->nb_streams; ++i)
            f->streams[i]->discard = i < keep->size() && (*keep)[i] ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
    Scan out;
    out.counts.assign(f->nb_streams, 0);
    out.first.assign(f->nb_streams, AV_NOPTS_VALUE);
    out.end_us.assign(f->nb_streams, INT64_MIN);
    av::PacketPtr p(av_packet_alloc());
    if (!p) return make_error(StatusCode::INTERNAL, "{}: out of memory", path);
    for (;;) {
        const int r = av_read_frame(f, p.get());
        if (r == AVERROR_EOF || (r < 0 && keep)) break;
        if (r < 0) return av::error(r, path, "reading the packets back");
        const auto k = static_cast<size_t>(p->stream_index);
        const int64_t t = p->pts != AV_NOPTS_VALUE ? p->pts : p->dts;
        if (k < out.counts.size()) {
            ++out.counts[k];
            if (t != AV_NOPTS_VALUE && (out.first[k] == AV_NOPTS_VALUE || t < out.first[k])) out.first[k] = t;
            if (t != AV_NOPTS_VALUE) {
                const AVRational tb = f->streams[k]->time_base;
                const int64_t d = av_rescale_q(std::max<int64_t>(p->duration, 0), tb, AV_TIME_BASE_Q);
                out.end_us[k] = std::max(out.end_us[k], av_rescale_q(t, tb, AV_TIME_BASE_Q) + d);
                out.packet_us_max = std::max(out.packet_us_max, d);
            }
        }
        if (p->stream_index == video) {
            ++out.video_packets;
            if (t != AV_NOPTS_VALUE) out.video_times.push_back(t);
        }
        av_packet_unref(p.get());
    }
    std::sort(out.video_times.begin(), out.video_times.end());
    return out;
}

void check_video(Checker& c, const AVStream* out, const AVStream* src) {
    const OutputExpectation& e = c.expect;
    const AVCodecParameters* o = out->codecpar;
    c.check(o->width == e.layout.width && o->height == e.layout.height, "video size",
            fmt::format("{}x{} written", e.layout.width, e.layout.height), fmt::format("{}x{}", o->width, o->height));
    if (src && e.scale > 0) {
        const AVCodecParameters* s = src->codecpar;
        c.check(o->width == s->width * e.scale && o->height == s->height * e.scale,
                fmt::format("video size = {} x the source's", e.scale), fmt::format("{}x{}", s->width, s->height),
                fmt::format("{}x{}", o->width, o->height));
    }
    const ColorInfo& col = e.color;
    const AVColorSpace matrix = av::matrix_to_av(col.matrix, static_cast<AVColorSpace>(e.source.color_matrix_code));
    auto name_or = [](const char* n, int v) { return n ? std::string(n) : std::to_string(v); };
    const AVColorSpace space = av::color_space_of(*o);
    c.check(space == matrix, "video colour matrix tag", name_or(av_color_space_name(matrix), matrix),
            name_or(av_color_space_name(space), space));
    const AVColorRange range = col.range == ColorRange::FULL ? AVCOL_RANGE_JPEG : AVCOL_RANGE_MPEG;
    const AVColorRange got_range = av::color_range_of(*o);
    c.check(got_range == range, "video colour range tag", av_color_range_name(range),
            name_or(av_color_range_name(got_range), got_range));
    const AVColorPrimaries primaries = av::color_primaries_of(*o);
    if (col.primaries != AVCOL_PRI_UNSPECIFIED)
        c.check(primaries == col.primaries, "video colour primaries tag",
                name_or(av_color_primaries_name(static_cast<AVColorPrimaries>(col.primaries)), col.primaries),
                name_or(av_color_primaries_name(primaries), primaries));
    const AVColorTransferCharacteristic transfer = av::color_transfer_of(*o);
    if (col.transfer != AVCOL_TRC_UNSPECIFIED)
        c.check(transfer == col.transfer, "video transfer tag",
                name_or(av_color_transfer_name(static_cast<AVColorTransferCharacteristic>(col.transfer)), col.transfer),
                name_or(av_color_transfer_name(transfer), transfer));
    if (!src) return;
    const AVRational sar = src->codecpar->sample_aspect_ratio;
    if (sar.num > 0 && sar.den > 0) {
        const AVRational got = o->sample_aspect_ratio.num > 0 ? o->sample_aspect_ratio : out->sample_aspect_ratio;
        c.check(av_cmp_q(sar, got.num > 0 ? got : AVRational{1, 1}) == 0, "video sample aspect ratio",
                fmt::format("{}:{}", sar.num, sar.den), fmt::format("{}:{}", got.num, got.den));
    }
    for (const AVPacketSideDataType t :
         {AV_PKT_DATA_MASTERING_DISPLAY_METADATA, AV_PKT_DATA_CONTENT_LIGHT_LEVEL, AV_PKT_DATA_DISPLAYMATRIX}) {
        size_t src_size = 0, out_size = 0;
        const uint8_t* a = av_stream_get_side_data(src, t, &src_size);
        const uint8_t* b = av_stream_get_side_data(out, t, &out_size);
        if (!a) continue;
        const bool held = t == AV_PKT_DATA_DISPLAYMATRIX ? av::holds_display_matrix(c.muxer) : av::holds_hdr(c.muxer);
        c.check(b != nullptr, fmt::format("video {}", av_packet_side_data_name(t)), "present", b ? "present" : "absent",
                held ? "" : c.muxer + " cannot hold it");
    }
    for (const char* key : {"language", "title"})
        c.check(tag_value(src, key) == tag_value(out, key), fmt::format("video {} tag", key), tag_value(src, key),
                tag_value(out, key),
                av::holds_stream_tag(c.muxer, key) ? "" : fmt::format("{} cannot hold a stream's {} tag", c.muxer, key));
}

// Every frame written is in the output, at its time: the output's pts (its time base) equal the
// written ones moved by one constant (the writer's start offset), to a tick of the coarser base.
void check_frame_times(Checker& c, const Scan& out, AVRational out_tb, int64_t* shift_us) {
    const OutputExpectation& e = c.expect;
    const std::vector<int64_t>& got = out.video_times;
    const AVRational in_tb{e.source.time_base.num, e.source.time_base.den};
    if (e.frame_pts.empty() && e.frames >= 0) {  // the count alone (a join of checked parts)
        c.check(out.video_packets == e.frames, "video frames", fmt::format("{} written", e.frames),
                std::to_string(out.video_packets));
        return;
    }
    c.check(out.video_packets == static_cast<int64_t>(e.frame_pts.size()), "video frames",
            fmt::format("{} written", e.frame_pts.size()), std::to_string(out.video_packets));
    if (static_cast<int64_t>(got.size()) < out.video_packets) {
        // A raw elementary stream (.h264, .hevc) keeps no time of its frames.
        c.check(false, "video frame times", fmt::format("{} frames' times", e.frame_pts.size()),
                fmt::format("{} of {} frames timed", got.size(), out.video_packets),
                c.writer && (c.writer->flags & AVFMT_NOTIMESTAMPS) ? c.muxer + " stores no frame times" : "");
        return;
    }
    if (got.empty() || e.frame_pts.empty() || in_tb.num <= 0 || in_tb.den <= 0) return;
    std::vector<int64_t> want(e.frame_pts);
    std::sort(want.begin(), want.end());
    // Both in microseconds-scaled output ticks: the shift from the first frames, then each frame.
    auto in_out = [&](int64_t pts) { return av_rescale_q_rnd(pts, in_tb, out_tb, AV_ROUND_NEAR_INF); };
    const int64_t shift = got.front() - in_out(want.front());
    *shift_us = av_rescale_q(shift, out_tb, AV_TIME_BASE_Q);
    // A tick of whichever base is coarser, in output ticks.
    const int64_t slack = std::max<int64_t>(1, av_rescale_q_rnd(1, in_tb, out_tb, AV_ROUND_UP));
    size_t differ = 0;
    std::string listed;
    const size_t n = std::min(got.size(), want.size());
    for (size_t i = 0; i < n; ++i) {
        if (std::llabs(got[i] - (in_out(want[i]) + shift)) <= slack) continue;
        if (differ++ < kFramesListed)
            listed += fmt::format("{}frame {}: {} written, {} in the output", listed.empty() ? "" : "; ", i,
                                  av_rescale_q(want[i], in_tb, out_tb) + shift, got[i]);
    }
    ++c.report.checks;
    if (differ)
        c.report.differences.push_back(
            {"video frame times", fmt::format("{} frames as written (moved {} us)", n, *shift_us),
             fmt::format("{} differ: {}{}", differ, listed, differ > kFramesListed ? "; ..." : ""),
             av::holds_frame_times(c.muxer) ? "" : c.muxer + " stores a frame rate, not each frame's time"});
}

// Why the writer leaves the source's stream `s` out of the output ("" when it copies it).
std::string left_out(const Checker& c, const AVStream* s) {
    const AVCodecParameters* p = s->codecpar;
    const bool attachment = p->codec_type == AVMEDIA_TYPE_ATTACHMENT;
    const bool copied_kind = p->codec_type == AVMEDIA_TYPE_AUDIO || p->codec_type == AVMEDIA_TYPE_SUBTITLE ||
                             attachment;
    if (!copied_kind || (s->disposition & AV_DISPOSITION_ATTACHED_PIC))
        return "Loom copies audio, subtitles and attachments only";
    if (!c.expect.copy_streams) return "copy_streams is off";
    if (attachment ? !av::holds_attachments(c.muxer) : c.writer && !av::holds_codec(c.writer, p->codec_id))
        return c.muxer + " cannot hold it";
    return {};
}

// The source's other streams: each one the writer copies is in the output, in order, with its
// codec, tags and dispositions, and (a whole output) every packet.
void check_streams(Checker& c, const AVFormatContext* src, const AVFormatContext* out, int src_video, int out_video,
                   const Scan* src_scan, const Scan& out_scan) {
    const OutputExpectation& e = c.expect;
    unsigned next = 0;  // output streams are matched in order, by kind
    for (unsigned i = 0; i < src->nb_streams; ++i) {
        const AVStream* s = src->streams[i];
        const AVCodecParameters* p = s->codecpar;
        if (static_cast<int>(i) == src_video) continue;
        const bool attachment = p->codec_type == AVMEDIA_TYPE_ATTACHMENT;
        const std::string name = stream_name(s);
        const std::string why = left_out(c, s);
        if (!why.empty()) {  // not in the output by design: it takes none of the output's streams
            c.check(false, name, "present", "absent", why);
            continue;
        }
        const AVStream* o = nullptr;
        for (unsigned k = next; k < out->nb_streams && !o; ++k) {
            if (static_cast<int>(k) == out_video || out->streams[k]->codecpar->codec_type != p->codec_type) continue;
            o = out->streams[k];
            next = k + 1;
        }
        c.check(o != nullptr, name, "present", o ? "present" : "absent");
        if (!o) continue;
        c.check(p->codec_id == o->codecpar->codec_id, name + " codec", avcodec_get_name(p->codec_id),
                avcodec_get_name(o->codecpar->codec_id));
        for (const char* key : {"language", "title", "filename", "mimetype"}) {
            const std::string a = tag_value(s, key), b = tag_value(o, key);
            if (a.empty() && b.empty()) continue;
            const bool held = attachment || av::holds_stream_tag(c.muxer, key);
            c.check(a == b, fmt::format("{} {} tag", name, key), a, b,
                    held ? "" : fmt::format("{} cannot hold a stream's {} tag", c.muxer, key));
        }
        if (c.matroska())
            c.check(s->disposition == o->disposition, name + " disposition", disposition_text(s->disposition),
                    disposition_text(o->disposition));
        if (attachment)
            c.check(p->extradata_size == o->codecpar->extradata_size, name + " bytes",
                    std::to_string(p->extradata_size), std::to_string(o->codecpar->extradata_size));
        else if (src_scan) {
            const int64_t want = src_scan->counts[i], got = out_scan.counts[static_cast<size_t>(o->index)];
            const bool dropped = got < want && want - got <= e.packets_dropped;
            c.check(want == got, name + " packets", std::to_string(want), std::to_string(got),
                    dropped ? fmt::format("the writer left out {} packets whose dts went back (corrupt input)",
                                          e.packets_dropped)
                            : "");
        }
    }
}

// The copied audio moved as the video was (the writer's one start offset): its first packet's
// time in the output against the source's, to a tick of the coarser base.
void check_sync(Checker& c, const AVFormatContext* src, const AVFormatContext* out, int src_video, int out_video,
                const Scan& src_scan, const Scan& out_scan, int64_t video_shift_us) {
    for (unsigned i = 0, k = 0; i < src->nb_streams && k < out->nb_streams; ++i) {
        const AVStream* s = src->streams[i];
        if (static_cast<int>(i) == src_video || s->codecpar->codec_type != AVMEDIA_TYPE_AUDIO) continue;
        while (k < out->nb_streams && (static_cast<int>(k) == out_video ||
                                       out->streams[k]->codecpar->codec_type != AVMEDIA_TYPE_AUDIO))
            ++k;
        if (k >= out->nb_streams) return;
        if (src_scan.first[i] == AV_NOPTS_VALUE || out_scan.first[k] == AV_NOPTS_VALUE) return;
        const AVStream* o = out->streams[k];
        const int64_t shift = av_rescale_q(out_scan.first[k], o->time_base, AV_TIME_BASE_Q) -
                              av_rescale_q(src_scan.first[i], s->time_base, AV_TIME_BASE_Q);
        const int64_t slack = std::max({av_rescale_q(1, s->time_base, AV_TIME_BASE_Q),
                                        av_rescale_q(1, o->time_base, AV_TIME_BASE_Q), int64_t{1000}});
        c.check(std::llabs(shift - video_shift_us) <= slack, stream_name(s) + " sync with the video",
                fmt::format("moved {} us as the video", video_shift_us), fmt::format("moved {} us", shift));
        return;  // one audio stream tells whether the offset was applied alike
    }
}

// The output ends where the source's video and the streams it holds end, moved as the frames
// were: to the longest packet's duration (the last frame's or audio frame's, which containers
// round or leave out).
void check_duration(Checker& c, const AVFormatContext* src, const AVFormatContext* out, int src_video,
                    const Scan& src_scan, const Scan& out_scan, int64_t shift_us) {
    int64_t src_end = INT64_MIN, out_end = INT64_MIN;
    for (unsigned i = 0; i < src->nb_streams; ++i) {
        const AVMediaType t = src->streams[i]->codecpar->codec_type;
        const bool copied = c.expect.copy_streams && (t == AVMEDIA_TYPE_AUDIO || t == AVMEDIA_TYPE_SUBTITLE);
        if (static_cast<int>(i) == src_video || copied) src_end = std::max(src_end, src_scan.end_us[i]);
    }
    for (unsigned k = 0; k < out->nb_streams; ++k) out_end = std::max(out_end, out_scan.end_us[k]);
    if (src_end == INT64_MIN || out_end == INT64_MIN) return;
    const int64_t want = src_end + shift_us;
    const int64_t slack = std::max({src_scan.packet_us_max, out_scan.packet_us_max, int64_t{1000}}) + 1000;
    c.check(std::llabs(out_end - want) <= slack, "end of the media", fmt::format("{:.3f} s", want / 1e6),
            fmt::format("{:.3f} s", out_end / 1e6));
}

void check_chapters(Checker& c, const AVFormatContext* src, const AVFormatContext* out, int64_t shift_us) {
    if (src->nb_chapters == 0) return;
    const std::string why = av::holds_chapters(c.muxer) ? "" : c.muxer + " cannot hold chapters";
    c.check(src->nb_chapters == out->nb_chapters, "chapters", std::to_string(src->nb_chapters),
            std::to_string(out->nb_chapters), why);
    for (unsigned i = 0; i < std::min(src->nb_chapters, out->nb_chapters); ++i) {
        const AVChapter* a = src->chapters[i];
        const AVChapter* b = out->chapters[i];
        c.check(tag(a->metadata, "title") == tag(b->metadata, "title"), fmt::format("chapter {} title", i + 1),
                tag(a->metadata, "title"), tag(b->metadata, "title"));
        const int64_t start_a = av_rescale_q(a->start, a->time_base, AV_TIME_BASE_Q) + shift_us;
        const int64_t start_b = av_rescale_q(b->start, b->time_base, AV_TIME_BASE_Q);
        c.check(std::llabs(start_a - start_b) <= 1000, fmt::format("chapter {} start", i + 1),
                fmt::format("{:.3f} s", start_a / 1e6), fmt::format("{:.3f} s", start_b / 1e6));
    }
}

void check_tags(Checker& c, const AVFormatContext* src, const AVFormatContext* out) {
    const bool all = c.matroska();  // MP4 and the rest keep the tags they know (title, artist, ...)
    const AVDictionaryEntry* e = nullptr;
    while ((e = av_dict_get(src->metadata, "", e, AV_DICT_IGNORE_SUFFIX))) {
        if (!av::carried_tag(e->key)) continue;
        const AVDictionaryEntry* o = av_dict_get(out->metadata, e->key, nullptr, 0);
        c.check(o && std::string_view(o->value) == e->value, fmt::format("tag {}", e->key), e->value,
                o ? o->value : "", all ? "" : c.muxer + " holds only its own tags");
    }
}

}  // namespace

int FidelityReport::unexplained() const {
    return static_cast<int>(std::count_if(differences.begin(), differences.end(),
                                          [](const FidelityItem& d) { return d.explained.empty(); }));
}

std::string FidelityReport::summary(size_t listed) const {
    std::string out;
    size_t n = 0;
    for (const FidelityItem& d : differences) {
        if (!d.explained.empty()) continue;
        if (n++ == listed) {
            out += "; ...";
            break;
        }
        out += fmt::format("{}{}: {} in the source, {} in the output", out.empty() ? "" : "; ", d.what,
                           d.source.empty() ? "nothing" : d.source, d.output.empty() ? "nothing" : d.output);
    }
    return out;
}

Result<FidelityReport> check_output(const std::string& output, const OutputExpectation& expect) {
    av::route_log();
    LOOM_ASSIGN_OR_RETURN(av::InputPtr out, av::open_input(output, std::numeric_limits<int>::max() - 1));
    Checker c{expect, output, {}, {}, nullptr};
    // The container as the writer chose it (by the name), not as the demuxer calls it.
    c.writer = av_guess_format(nullptr, output.c_str(), nullptr);
    c.muxer = c.writer ? c.writer->name : out->iformat->name;
    const int out_video = av_find_best_stream(out.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (out_video < 0)
        return make_error(StatusCode::FAILED_PRECONDITION, "{}: checking the output: it holds no video stream", output);
    av::InputPtr src;
    int src_video = -1;
    if (!expect.source.path.empty() && expect.source.stream_index >= 0) {
        auto s = av::open_input(expect.source.path, std::numeric_limits<int>::max() - 1);
        if (!s.ok()) return s.status().with_context(fmt::format("{}: checking the output against its source", output));
        src = std::move(s).value();
        src_video = expect.source.stream_index;
        if (src_video >= static_cast<int>(src->nb_streams))
            return make_error(StatusCode::FAILED_PRECONDITION, "{}: the source {} no longer has stream {}", output,
                              expect.source.path, src_video);
    }
    const AVStream* ov = out->streams[out_video];
    check_video(c, ov, src ? src->streams[src_video] : nullptr);
    LOOM_ASSIGN_OR_RETURN(Scan out_scan, scan(out.get(), out_video, output));
    int64_t shift_us = 0;
    check_frame_times(c, out_scan, ov->time_base, &shift_us);
    if (src) {
        std::optional<Scan> src_scan;
        if (expect.whole) {
            // The source read as the run read it: the frames' demuxer took the video stream
            // alone, the copy's demuxer the copied streams alone. On a damaged file a demuxer
            // finds its way back differently with other streams parsed, so one read of every
            // stream could count packets neither of the run's reads saw.
            std::vector<bool> video(src->nb_streams, false), copied(src->nb_streams, false);
            video[static_cast<size_t>(src_video)] = true;
            for (unsigned i = 0; i < src->nb_streams; ++i)
                copied[i] = static_cast<int>(i) != src_video && left_out(c, src->streams[i]).empty();
            LOOM_ASSIGN_OR_RETURN(src_scan, scan(src.get(), src_video, expect.source.path, &video));
            if (std::find(copied.begin(), copied.end(), true) != copied.end()) {
                auto again = av::open_input(expect.source.path, std::numeric_limits<int>::max() - 1);
                if (!again.ok())
                    return again.status().with_context(
                        fmt::format("{}: checking the output against its source", output));
                LOOM_ASSIGN_OR_RETURN(Scan other, scan(again->get(), -1, expect.source.path, &copied));
                for (unsigned i = 0; i < src->nb_streams; ++i)
                    if (copied[i]) {
                        src_scan->counts[i] = other.counts[i];
                        src_scan->first[i] = other.first[i];
                        src_scan->end_us[i] = other.end_us[i];
                    }
                src_scan->packet_us_max = std::max(src_scan->packet_us_max, other.packet_us_max);
            }
            // Without the frames' own times, the shift is the first frames': the source's and the output's.
            if (expect.frame_pts.empty() && src_scan->first[src_video] != AV_NOPTS_VALUE && !out_scan.video_times.empty())
                shift_us = av_rescale_q(out_scan.video_times.front(), ov->time_base, AV_TIME_BASE_Q) -
                           av_rescale_q(src_scan->first[src_video], src->streams[src_video]->time_base, AV_TIME_BASE_Q);
            if (expect.copy_streams) check_sync(c, src.get(), out.get(), src_video, out_video, *src_scan, out_scan, shift_us);
            check_duration(c, src.get(), out.get(), src_video, *src_scan, out_scan, shift_us);
        }
        check_streams(c, src.get(), out.get(), src_video, out_video, src_scan ? &*src_scan : nullptr, out_scan);
        check_chapters(c, src.get(), out.get(), shift_us);
        check_tags(c, src.get(), out.get());
    }
    return std::move(c.report);
}

}  // namespace loom::preprocess
