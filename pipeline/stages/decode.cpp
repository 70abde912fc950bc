// decode: demuxes and decodes a media file (FFmpeg, or GStreamer: preprocess/media_io.hpp) into
// frames that view the decoder's own pictures (FFmpeg's page-locked; no copy). The source of a
// file job.
//
//   input           the file (default: loomd run --input); with backend "gstreamer" also a URI
//   backend         ffmpeg | gstreamer (default ffmpeg): GStreamer reads whatever the machine's
//                   GStreamer plugins read, through uridecodebin, with the same frames,
//                   timestamps (in nanoseconds) and colour contract; segments are FFmpeg's only
//   pipeline        gstreamer only: a gst-launch description of the source to use instead of
//                   uridecodebin ("v4l2src device=/dev/video0", "filesrc location=a.mkv !
//                   matroskademux ! h264parse ! avdec_h264"); Loom adds its appsink
//   hwaccel         ffmpeg only: auto | none | vaapi | cuda
//   threads         decoder threads (0: FFmpeg's choice)
//   deinterlace     off | bwdif (default off): pictures the decoder marks interlaced are
//                   deinterlaced by FFmpeg's bwdif before the model, one frame per frame, the
//                   times kept. Each frame is made with its neighbours, so such a job is not cut
//                   into segments (ffmpeg only)
//   error_rate_max  share of frames with decode errors that fails the job (default 0.05)
//   frames          frames in flight from this stage (default 8): bounds the decoded pictures
//                   held downstream (the decoder keeps its reference pictures besides)
//   start_frame     a segment: the first frame, a keyframe segments start on (default 0)
//   frame_count     a segment: how many frames (default -1: to the end). The encoder then
//                   copies only the audio and subtitles of the segment, so that segment
//                   outputs join without re-encoding (loomd segments / loomd join).
#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "common/log.hpp"
#include "pipeline/stage.hpp"

namespace loom::pipeline {
namespace {

class DecodeStage final : public Stage {
public:
    Result<std::string> input_path(const Env& env) const {
        std::string path = env.input.empty() ? input_ : env.input;
        if (path.empty() && !options_.gst_pipeline.empty()) return options_.gst_pipeline;  // its name in messages
        if (path.empty())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: decode: no input file (set 'input' or --input)",
                              where_);
        const bool uri = path.find("://") != std::string::npos && options_.backend == "gstreamer";
        if (env.input.empty() && !uri && std::filesystem::path(path).is_relative())
            path = (std::filesystem::path(env.config_dir) / path).string();
        return path;
    }

    static Caps caps_of(const preprocess::VideoInfo& info) {
        Caps caps;
        caps.layout = info.layout;
        caps.color = info.color;
        caps.time_base = info.time_base;
        caps.frame_rate = info.frame_rate;
        caps.file = std::make_shared<preprocess::VideoInfo>(info);
        caps.frames_expected = info.frames_estimate;
        return caps;
    }

    // The input probed (software decoding: the frames' format without starting a device).
    Result<Caps> estimate(const Caps*, const Env& env, Needs& needs) override {
        LOOM_ASSIGN_OR_RETURN(std::string path, input_path(env));
        if (options_.backend != "ffmpeg" && needs.whole_only.empty())
            needs.whole_only = fmt::format("{}: decode: backend \"{}\" reads whole streams", where_, options_.backend);
        if (!options_.deinterlace.empty() && needs.whole_only.empty())
            needs.whole_only = fmt::format("{}: decode: deinterlace makes each frame with its neighbours", where_);
        preprocess::ReaderOptions o = options_;
        o.hwaccel = "none";
        const std::atomic<bool>* flag = env.stop;
        o.interrupted = [flag] { return flag && flag->load(); };
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<preprocess::MediaReader> reader, preprocess::MediaReader::open(path, o));
        return caps_of(reader->info());
    }

    Result<Caps> prepare(const Caps*, const Env& env) override {
        LOOM_ASSIGN_OR_RETURN(std::string path, input_path(env));
        // Software decoders write their pictures straight into page-locked memory, which the
        // frames then view in place (no copy between the decoder and the device upload).
        if (env.segment && options_.backend != "ffmpeg")
            return make_error(StatusCode::UNSUPPORTED,
                              "{}: decode: backend \"{}\" reads whole streams; a segment needs backend \"ffmpeg\"",
                              where_, options_.backend);
        if (env.segment) {
            options_.start_frame = env.segment->start_frame;
            options_.frame_count = env.segment->frame_count;
            options_.segment_pts = env.segment->pts;
            if (options_.start_frame < 0 || options_.frame_count == 0 || options_.frame_count < -1)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: decode: segment [{}, +{}) is not a frame range",
                                  where_, options_.start_frame, options_.frame_count);
        }
        options_.frame_memory = {&pinned_frame_alloc, &pinned_frame_free, true};
        // A stop (or the pipeline's stop flag, before the pipeline can call stop()) interrupts
        // a read that waits for input: a pipe, a device, a network stream.
        const std::atomic<bool>* flag = env.stop;
        options_.interrupted = [this, flag] { return stopping_.load() || (flag && flag->load()); };
        LOOM_ASSIGN_OR_RETURN(reader_, preprocess::MediaReader::open(path, options_));
        const preprocess::VideoInfo& info = reader_->info();
        LOOM_ASSIGN_OR_RETURN(pool_, FramePool::create("decode frames", info.layout, pool_frames_, false));
        log::info("pipeline", "decode: {} ({} {}x{} {}, {}, decoder {})", path, info.container, info.layout.width,
                  info.layout.height, pixel_format_name(info.layout.format), color_matrix_name(info.color.matrix),
                  info.decoder);
        Caps caps = caps_of(info);
        if (options_.segment_pts) {  // planned: nothing to scan
            if (options_.start_frame > 0) caps.copy_from_pts = options_.segment_pts->from;
            caps.copy_to_pts = options_.segment_pts->to;
            caps.frames_expected = options_.frame_count > 0 ? options_.frame_count
                                                             : std::max<int64_t>(0, caps.frames_expected - options_.start_frame);
        } else if (options_.start_frame > 0 || options_.frame_count >= 0) {
            LOOM_TRY(segment_bounds(path, caps));
        }
        return caps;
    }

    Status run(StageRun& run) override {
        for (;;) {
            run.begin();
            FrameRef f;
            {
                auto w = run.waiting();
                f = pool_->acquire();
            }
            if (!f) return {};  // stopped
            Result<bool> got = reader_->read(f->external, f->meta);
            if (!got.ok() && stopping_.load()) return {};  // interrupted by stop()
            LOOM_TRY(got.status());
            if (!*got) return {};
            f->color = reader_->info().color;
            if (!run.emit(std::move(f))) return {};
        }
    }

    // The copy bounds of a segment: its keyframe's pts, and the pts of the keyframe that starts
    // the next segment (when it ends on one; otherwise nothing can follow it and it keeps the
    // rest of the audio).
    Status segment_bounds(const std::string& path, Caps& caps) const {
        int64_t total = 0;
        LOOM_ASSIGN_OR_RETURN(std::vector<preprocess::KeyframeInfo> keys,
                              preprocess::list_keyframes(path, options_, &total));
        const int64_t end = options_.frame_count < 0 ? total : std::min(total, options_.start_frame + options_.frame_count);
        caps.frames_expected = end - options_.start_frame;
        for (const preprocess::KeyframeInfo& k : keys) {
            if (options_.start_frame > 0 && k.frame == options_.start_frame) caps.copy_from_pts = k.pts;
            if (end < total && k.frame == end) caps.copy_to_pts = k.pts;
        }
        if (end < total && caps.copy_to_pts == INT64_MAX)
            log::warn("pipeline", "decode: the segment ends at frame {}, which is no keyframe: no segment can follow it",
                      end);
        return {};
    }

    void stop() override {
        stopping_ = true;
        if (pool_) pool_->abort();
    }

    void summarise(nlohmann::json& out) const override {
        const preprocess::DecodeStats s = reader_->stats();
        const preprocess::VideoInfo& i = reader_->info();
        out["input"] = i.path;
        out["codec"] = i.codec;
        out["decoder"] = i.decoder;
        out["backend"] = options_.backend;
        out["size"] = {i.layout.width, i.layout.height};
        out["pixel_format"] = pixel_format_name(i.layout.format);
        out["matrix"] = color_matrix_name(i.color.matrix);
        out["range"] = color_range_name(i.color.range);
        out["frames_decoded"] = s.frames;
        out["packets"] = s.packets;
        out["decode_errors"] = s.decode_errors;
        out["frames_skipped"] = s.frames_skipped;
        out["field_order"] = i.field_order;
        out["interlaced_frames"] = s.interlaced_frames;
        out["pool_frames"] = pool_->count();
        out["pool_in_use_max"] = pool_->in_use_max();
    }

    std::string input_, where_;
    preprocess::ReaderOptions options_;
    int64_t pool_frames_ = 8;
    std::unique_ptr<preprocess::MediaReader> reader_;
    std::unique_ptr<FramePool> pool_;
    std::atomic<bool> stopping_{false};  // set by stop() from another thread
};

Result<std::unique_ptr<Stage>> create(Fields& f) {
    auto s = std::make_unique<DecodeStage>();
    s->where_ = f.where("input");
    LOOM_ASSIGN_OR_RETURN(s->input_, f.string("input", ""));
    LOOM_ASSIGN_OR_RETURN(s->options_.backend, f.one_of("backend", "ffmpeg", {"ffmpeg", "gstreamer"}));
    LOOM_ASSIGN_OR_RETURN(s->options_.gst_pipeline, f.string("pipeline", ""));
    if (!s->options_.gst_pipeline.empty() && s->options_.backend != "gstreamer")
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: 'pipeline' is a GStreamer description: set backend = "
                          "\"gstreamer\"", f.where("pipeline"), f.what());
    LOOM_ASSIGN_OR_RETURN(s->options_.hwaccel, f.one_of("hwaccel", "auto", {"auto", "none", "vaapi", "cuda"}));
    LOOM_ASSIGN_OR_RETURN(int64_t threads, f.integer("threads", 0, 0, 64));
    s->options_.threads = static_cast<int>(threads);
    LOOM_ASSIGN_OR_RETURN(const std::string deinterlace, f.one_of("deinterlace", "off", {"off", "bwdif"}));
    if (deinterlace != "off") s->options_.deinterlace = deinterlace;
    if (!s->options_.deinterlace.empty() && s->options_.backend != "ffmpeg")
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: deinterlace is the FFmpeg back end's: with GStreamer put "
                          "a deinterlace element in 'pipeline'", f.where("deinterlace"), f.what());
    LOOM_ASSIGN_OR_RETURN(s->options_.error_rate_max, f.number("error_rate_max", 0.05, 0.0, 1.0));
    LOOM_ASSIGN_OR_RETURN(s->pool_frames_, f.integer("frames", 8, 2, 256));
    LOOM_ASSIGN_OR_RETURN(s->options_.start_frame, f.integer("start_frame", 0, 0, INT64_MAX));
    LOOM_ASSIGN_OR_RETURN(s->options_.frame_count, f.integer("frame_count", -1, -1, INT64_MAX));
    if (s->options_.frame_count == 0)
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: frame_count 0 (a positive count, or -1 for all)",
                          f.where("frame_count"), f.what());
    return std::unique_ptr<Stage>(std::move(s));
}

}  // namespace

extern const StageType kStage_decode;
const StageType kStage_decode{"decode", "demux and decode a media file into host frames (FFmpeg or GStreamer)", true,
                              false, false, create};

}  // namespace loom::pipeline
