// decode: demuxes and decodes a media file (FFmpeg, preprocess/media_io.hpp) into pooled,
// page-locked host frames. The source of a file job.
//
//   input           the file (default: loomd run --input)
//   hwaccel         auto | none | vaapi | cuda
//   threads         decoder threads (0: FFmpeg's choice)
//   error_rate_max  share of frames with decode errors that fails the job (default 0.05)
//   frames          host frames in the pool (default 8): bounds the decoded frames held
#include <filesystem>

#include "common/log.hpp"
#include "pipeline/stage.hpp"

namespace loom::pipeline {
namespace {

class DecodeStage final : public Stage {
public:
    Result<Caps> prepare(const Caps*, const Env& env) override {
        std::string path = env.input.empty() ? input_ : env.input;
        if (path.empty())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: decode: no input file (set 'input' or --input)",
                              where_);
        if (env.input.empty() && std::filesystem::path(path).is_relative())
            path = (std::filesystem::path(env.config_dir) / path).string();
        LOOM_ASSIGN_OR_RETURN(reader_, preprocess::MediaReader::open(path, options_));
        const preprocess::VideoInfo& info = reader_->info();
        LOOM_ASSIGN_OR_RETURN(pool_, FramePool::create("decode frames", info.layout, pool_frames_));
        log::info("pipeline", "decode: {} ({} {}x{} {}, {}, decoder {})", path, info.container, info.layout.width,
                  info.layout.height, pixel_format_name(info.layout.format), color_matrix_name(info.color.matrix),
                  info.decoder);
        Caps caps;
        caps.layout = info.layout;
        caps.color = info.color;
        caps.source = std::make_shared<preprocess::VideoInfo>(info);
        caps.frames_expected = info.frames_estimate;
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
            LOOM_ASSIGN_OR_RETURN(bool got, reader_->read(f->data(), f->bytes(), f->meta));
            if (!got) return {};
            f->color = reader_->info().color;
            if (!run.emit(std::move(f))) return {};
        }
    }

    void stop() override {
        if (pool_) pool_->abort();
    }

    void summarise(nlohmann::json& out) const override {
        const preprocess::DecodeStats s = reader_->stats();
        const preprocess::VideoInfo& i = reader_->info();
        out["input"] = i.path;
        out["codec"] = i.codec;
        out["decoder"] = i.decoder;
        out["size"] = {i.layout.width, i.layout.height};
        out["pixel_format"] = pixel_format_name(i.layout.format);
        out["matrix"] = color_matrix_name(i.color.matrix);
        out["range"] = color_range_name(i.color.range);
        out["frames_decoded"] = s.frames;
        out["packets"] = s.packets;
        out["decode_errors"] = s.decode_errors;
        out["frames_skipped"] = s.frames_skipped;
        out["pool_frames"] = pool_->count();
        out["pool_in_use_max"] = pool_->in_use_max();
    }

    std::string input_, where_;
    preprocess::ReaderOptions options_;
    int64_t pool_frames_ = 8;
    std::unique_ptr<preprocess::MediaReader> reader_;
    std::unique_ptr<FramePool> pool_;
};

Result<std::unique_ptr<Stage>> create(Fields& f) {
    auto s = std::make_unique<DecodeStage>();
    s->where_ = f.where("input");
    LOOM_ASSIGN_OR_RETURN(s->input_, f.string("input", ""));
    LOOM_ASSIGN_OR_RETURN(s->options_.hwaccel, f.string("hwaccel", "auto"));
    if (s->options_.hwaccel != "auto" && s->options_.hwaccel != "none" && s->options_.hwaccel != "vaapi" &&
        s->options_.hwaccel != "cuda")
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: hwaccel '{}' (auto, none, vaapi or cuda)",
                          f.where("hwaccel"), f.what(), s->options_.hwaccel);
    LOOM_ASSIGN_OR_RETURN(int64_t threads, f.integer("threads", 0, 0, 64));
    s->options_.threads = static_cast<int>(threads);
    LOOM_ASSIGN_OR_RETURN(s->options_.error_rate_max, f.number("error_rate_max", 0.05, 0.0, 1.0));
    LOOM_ASSIGN_OR_RETURN(s->pool_frames_, f.integer("frames", 8, 2, 256));
    return std::unique_ptr<Stage>(std::move(s));
}

}  // namespace

extern const StageType kStage_decode;
const StageType kStage_decode{"decode", "demux and decode a media file into host frames (FFmpeg)", true, false, false,
                              create};

}  // namespace loom::pipeline
