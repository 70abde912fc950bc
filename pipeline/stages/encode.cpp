// encode: encodes frames and muxes them into a file (FFmpeg, or GStreamer:
// preprocess/media_io.hpp), with the
// input's audio and subtitle streams copied untouched, its timestamps, metadata and colour tags
// kept when the frames came from a media file (caps' `file`); frames from any other source are
// written with the caps' time base alone. Written under a temporary name and renamed at the end
// of the stream: a cancelled or failed job leaves no file under the final name.
//
//   output        the file (default: loomd run --output); a PNG sequence takes a %d pattern
//   codec         libx264 | libx265 | ffv1 | png (default libx264)
//   crf, preset   libx264 / libx265 quality (default 18, "medium")
//   copy_streams  copy the input's audio and subtitles (default true)
//   threads       encoder threads (0: the encoder's choice)
//   backend       ffmpeg | gstreamer (default ffmpeg). GStreamer encodes with x264enc, x265enc or
//                 avenc_ffv1 (from codec, crf, preset, threads) or the given encoder, muxes with
//                 the muxer for the output's extension (matroskamux, mp4mux, qtmux, mpegtsmux,
//                 webmmux, avimux, flvmux) or the given one, and copies the input's audio and
//                 subtitles through parsebin, untouched. Segments are FFmpeg's only.
//   encoder       gstreamer only: the encoder as a gst-launch description ("x264enc
//                 speed-preset=slow tune=film", "vaapih264enc ! h264parse")
//   muxer         gstreamer only: the muxer, one element with its properties ("mp4mux
//                 faststart=true")
//   fidelity      fail | warn | off (default fail; warn with backend gstreamer, whose muxers add
//                 tags of their own): once written, the output is probed and
//                 compared with its source and with the frames written (preprocess::check_output):
//                 every frame at its time, the size, colour tags, HDR and rotation, each copied
//                 stream with its codec, tags and packets, chapters, tags. A difference its
//                 container or the options do not account for fails the job (and the output is
//                 removed), or is logged as a warning; the summary carries the comparison.
#include <filesystem>
#include <system_error>

#include "common/log.hpp"
#include "pipeline/stage.hpp"

namespace loom::pipeline {
namespace {

class EncodeStage final : public Stage {
public:
    Result<Caps> estimate(const Caps* in, const Env&, Needs& needs) override {
        LOOM_ASSERT(in);
        if (options_.backend != "ffmpeg" && needs.whole_only.empty())
            needs.whole_only = fmt::format("{}: encode: backend \"{}\" writes whole streams", where_, options_.backend);
        needs.fidelity = options_.codec == "png" ? "off" : fidelity_;
        needs.copy_streams = options_.copy_streams;
        return *in;
    }

    Result<Caps> prepare(const Caps* in, const Env& env) override {
        LOOM_ASSERT(in);
        std::string path = env.output.empty() ? output_ : env.output;
        if (path.empty())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: encode: no output file (set 'output' or --output)",
                              where_);
        if (env.output.empty() && std::filesystem::path(path).is_relative())
            path = (std::filesystem::path(env.config_dir) / path).string();
        options_.pixel_format = in->layout.format;
        options_.copy_from_pts = in->copy_from_pts;
        options_.copy_to_pts = in->copy_to_pts;
        // Frames from a media file keep its streams, tags and timing; others (a generator, a
        // network session) are timed by the caps alone.
        preprocess::VideoInfo timing;
        if (!in->file) {
            timing.time_base = in->time_base;
            timing.frame_rate = in->frame_rate;
            timing.layout = in->layout;
            timing.color = in->color;
        }
        LOOM_ASSIGN_OR_RETURN(writer_, preprocess::MediaWriter::open(path, in->file ? *in->file : timing, in->layout,
                                                                     in->color, options_));
        path_ = path;
        log::info("pipeline", "encode: {} ({} {}x{} {})", path, options_.codec, in->layout.width, in->layout.height,
                  pixel_format_name(in->layout.format));
        expect_ = {};
        if (in->file) {
            expect_.source = *in->file;
            const FrameLayout& s = in->file->layout;
            if (s.width > 0 && s.height > 0 && in->layout.width % s.width == 0 &&
                in->layout.width / s.width * s.height == in->layout.height)
                expect_.scale = in->layout.width / s.width;
        } else {
            expect_.source.time_base = in->time_base;
        }
        expect_.layout = in->layout;
        expect_.color = in->color;
        expect_.copy_streams = options_.copy_streams;
        expect_.whole = in->copy_from_pts == INT64_MIN && in->copy_to_pts == INT64_MAX;
        return *in;
    }

    Status run(StageRun& run) override {
        Status st = write_all(run);
        if (st.ok() && !stopped_) {
            st = writer_->finish();
            finished_ = st.ok();
            if (finished_) st = check();
        }
        if (!finished_) {
            // Cancelled, failed here or elsewhere: the writer goes now, removing its temporary
            // file, not when the pipeline is destroyed.
            stats_ = writer_->stats();
            writer_.reset();
        }
        return stopped_ && st.code() == StatusCode::CANCELLED ? Status() : st;
    }

    // Writes every frame until the end of the stream or a stop.
    Status write_all(StageRun& run) {
        while (FrameRef f = run.take()) {
            {
                auto w = run.waiting();
                LOOM_TRY(f->wait_ready().with_context(fmt::format("frame {}", f->meta.index)));
            }
            LOOM_TRY(writer_->write(f->view(), f->meta));
            if (fidelity_ != "off") expect_.frame_pts.push_back(f->meta.pts);  // 8 bytes a frame, for check()
            run.consumed(f.get());
        }
        return {};
    }

    // The output probed and compared with what it should hold (see `fidelity` above).
    Status check() {
        if (fidelity_ == "off" || options_.codec == "png") return {};
        expect_.packets_dropped = writer_->stats().packets_dropped;
        auto report = preprocess::check_output(path_, expect_);
        if (!report.ok()) return report.status().with_context("encode: checking the output");
        report_ = std::move(*report);
        for (const preprocess::FidelityItem& d : report_->differences)
            if (!d.explained.empty())
                log::info("pipeline", "{}: {}: {} in the source, {} in the output ({})", path_, d.what, d.source,
                          d.output, d.explained);
        const int bad = report_->unexplained();
        if (bad == 0) {
            log::info("pipeline", "{}: output checked against its source: {} comparisons, no difference unaccounted "
                                  "for", path_, report_->checks);
            return {};
        }
        const std::string what = fmt::format("{}: the output differs from its source {} in {} of {} comparisons: {}",
                                             path_, expect_.source.path, bad, report_->checks, report_->summary());
        if (fidelity_ == "warn") {
            log::warn("pipeline", "{}", what);
            return {};
        }
        std::error_code ec;
        std::filesystem::remove(path_, ec);
        finished_ = false;
        return make_error(StatusCode::FAILED_PRECONDITION, "{} (the output was removed; encode.fidelity = \"warn\" "
                                                           "keeps it)", what);
    }

    void stop() override { stopped_ = true; }

    void summarise(nlohmann::json& out) const override {
        const preprocess::EncodeStats s = writer_ ? writer_->stats() : stats_;
        out["output"] = path_;
        out["codec"] = options_.codec;
        out["backend"] = options_.backend;
        out["frames_encoded"] = s.frames;
        out["packets_copied"] = s.packets_copied;
        out["packets_dropped"] = s.packets_dropped;
        out["bytes"] = s.bytes;
        out["finished"] = finished_;
        if (report_) {
            nlohmann::json diffs = nlohmann::json::array();
            for (const preprocess::FidelityItem& d : report_->differences)
                diffs.push_back({{"what", d.what}, {"source", d.source}, {"output", d.output},
                                 {"explained", d.explained}});
            out["fidelity"] = {{"policy", fidelity_},
                               {"checks", report_->checks},
                               {"unexplained", report_->unexplained()},
                               {"differences", std::move(diffs)}};
        }
    }

    std::string output_, where_, path_;
    preprocess::WriterOptions options_;
    std::unique_ptr<preprocess::MediaWriter> writer_;
    preprocess::EncodeStats stats_;  // the writer's, once it is gone
    std::atomic<bool> stopped_{false};
    bool finished_ = false;
    std::string fidelity_ = "fail";
    preprocess::OutputExpectation expect_;
    std::optional<preprocess::FidelityReport> report_;
};

Result<std::unique_ptr<Stage>> create(Fields& f) {
    auto s = std::make_unique<EncodeStage>();
    s->where_ = f.where("output");
    LOOM_ASSIGN_OR_RETURN(s->output_, f.string("output", ""));
    LOOM_ASSIGN_OR_RETURN(s->options_.codec, f.one_of("codec", "libx264", {"libx264", "libx265", "ffv1", "png"}));
    LOOM_ASSIGN_OR_RETURN(int64_t crf, f.integer("crf", 18, 0, 51));
    s->options_.crf = static_cast<int>(crf);
    LOOM_ASSIGN_OR_RETURN(s->options_.preset, f.string("preset", "medium"));
    LOOM_ASSIGN_OR_RETURN(s->options_.copy_streams, f.boolean("copy_streams", true));
    LOOM_ASSIGN_OR_RETURN(int64_t threads, f.integer("threads", 0, 0, 64));
    s->options_.threads = static_cast<int>(threads);
    LOOM_ASSIGN_OR_RETURN(s->options_.backend, f.one_of("backend", "ffmpeg", {"ffmpeg", "gstreamer"}));
    LOOM_ASSIGN_OR_RETURN(s->options_.gst_encoder, f.string("encoder", ""));
    LOOM_ASSIGN_OR_RETURN(s->options_.gst_muxer, f.string("muxer", ""));
    // GStreamer's muxers add tags of their own (a language, "Video" and "Audio" titles) and the
    // writer cannot stop them: its differences are warnings unless asked otherwise.
    LOOM_ASSIGN_OR_RETURN(s->fidelity_, f.one_of("fidelity", s->options_.backend == "gstreamer" ? "warn" : "fail",
                                                 {"fail", "warn", "off"}));
    if ((!s->options_.gst_encoder.empty() || !s->options_.gst_muxer.empty()) && s->options_.backend != "gstreamer")
        return make_error(StatusCode::PARSE_ERROR,
                          "{}: {}: 'encoder' and 'muxer' are GStreamer descriptions: set backend = \"gstreamer\"",
                          f.where(s->options_.gst_encoder.empty() ? "muxer" : "encoder"), f.what());
    return std::unique_ptr<Stage>(std::move(s));
}

}  // namespace

extern const StageType kStage_encode;
const StageType kStage_encode{"encode",
                              "encode and mux frames into a file, copying audio and subtitles (FFmpeg or GStreamer)",
                              false, true, false, create};

}  // namespace loom::pipeline
