// infer: restores every frame with a model on the simulated NPU: a thin loop over the restore
// engine (restore/engine.hpp), which is prepared here from the fields below and the input's
// caps, on the pipeline's device context (models loaded once per context). Each frame is handed
// on at once, pending, into a pooled output frame the engine downloads into; the engine's
// completion marks it ready (or failed), so this thread never waits for the device except for
// a free slot. Stopping abandons the frames in flight.
//
// One thread submits all of a pipeline's device work, in frame order: that keeps the simulated
// timeline deterministic (the runtime places tasks in submission order).
//
//   model          a model name (found in the models folder or one folder down, e.g.
//                  realesr-animevideov3-x2; FOLDER/NAME where a name is in two folders, e.g.
//                  waifu2x-cunet/noise1_scale2.0x_model) or a path to an .onnx / ncnn .param
//                  file (relative to the config file)
//   precision      fp32 | fp16 (default fp32: the host computes fp16 slower than fp32)
//   in_flight      frames on the device at once (1..16, default 3): the most; with tile 0, fewer
//                  when the device's memory holds fewer (logged), before tiles
//   frames         output frames in the pool (default in_flight + 4)
//   mean, std      per-channel normalisation of [0,1] RGB into the model (default: from the
//                  model's descriptor's value range, else [0,0,0], [1,1,1])
//   channel_order  rgb | bgr (default: the descriptor's, else rgb)
//   output_format  yuv420p | nv12 | yuv420p10le | p010le (default: the input's)
//   output_matrix, output_range   the output's colour contract (default: the input's)
//   cache          compile through the compile cache (default true)
//   restore        true (default): run the model as its own program does, by its descriptor
//                  (compiler/descriptor.hpp: pad the frame, run, crop, add the residual), so the
//                  output is exactly scale x the frame; false: the bare network (whose output
//                  must then be scale x the frame). A model without a descriptor runs bare.
//   kb             a tuner's knowledge base (`loomc tune --kb`; relative to the config file): the
//                  model's launches take the tilings it holds for this device and frame size
//                  instead of the default heuristic's (results are the same, the simulated time
//                  shorter); it must exist. Default: none.
//   measure_host   true: when the model compiles, time each 3x3 conv's host algorithms (GEMM,
//                  Winograd F(2,3), F(4,3), F(6,3)) at the frame's size and keep the fastest
//                  (compiler/measure.hpp; a few seconds per model, cached with it); false
//                  (default): the rule on the conv's channels.
//   tile           0 (default): untiled, or tiled when the untiled model does not fit in device
//                  memory; N > 0: always tiled with a core step of N input pixels; -1: never
//                  tiled. Tiled frames (executor/tiled.hpp: bit-identical to untiled runs) go
//                  one at a time: YUV up, the media engine's conversion, the tensor down for
//                  the tiles' windows, the tiles, the output tensor up, conversion, YUV down.
#include <fmt/format.h>

#include "pipeline/stage.hpp"
#include "restore/engine.hpp"

namespace loom::pipeline {
namespace {

class InferStage final : public Stage {
public:
    void take_env(const Env& env) {
        options_.model.base_dir = env.config_dir;
        options_.model.models_dir = env.models_dir;
        options_.model.cache_dir = use_cache_ ? env.cache_dir : std::string();
    }

    Result<Caps> estimate(const Caps* in, const Env& env, Needs& needs) override {
        LOOM_ASSERT(in);
        take_env(env);
        LOOM_ASSIGN_OR_RETURN(restore::MemoryFloor f,
                              restore::Engine::memory_floor(options_, {in->layout, in->color}));
        needs.device_bytes_min += f.bytes;
        needs.detail.push_back(fmt::format("{}: model {} at {}x{}: {}", options_.model.where, f.model_path,
                                           in->layout.width, in->layout.height, f.detail));
        Caps caps = *in;
        caps.layout = f.output.layout;
        caps.color = f.output.color;
        return caps;
    }

    Result<Caps> prepare(const Caps* in, const Env& env) override {
        LOOM_ASSERT(in && env.context);
        take_env(env);
        LOOM_ASSIGN_OR_RETURN(engine_, restore::Engine::create(env.context, options_, {in->layout, in->color}));
        const restore::FrameFormat& out = engine_->output_format();
        LOOM_ASSIGN_OR_RETURN(pool_, FramePool::create("infer frames", out.layout, static_cast<size_t>(pool_frames_)));
        Caps caps = *in;
        caps.layout = out.layout;
        caps.color = out.color;
        return caps;
    }

    Status run(StageRun& run) override {
        const ColorInfo color = engine_->output_format().color;
        while (FrameRef in = run.take()) {
            FrameRef out;
            {
                auto w = run.waiting();
                out = pool_->acquire();
            }
            if (!out) break;  // stopped
            out->meta = in->meta;
            out->color = color;
            out->set_pending();
            // The completion holds both frames: the input goes back to its pool once restored,
            // the output is ready (or failed) for the stage downstream.
            Status st = engine_->submit(
                in->view(),
                [in, out](restore::RestoredFrame r) mutable {
                    in.reset();
                    out->set_ready(std::move(r.status));
                },
                out->data());
            if (!st.ok()) {
                if (stopped_.load()) break;
                st = st.with_context(fmt::format("frame {}", in->meta.index));
                out->set_ready(st);
                return st;
            }
            if (!run.emit(std::move(out))) break;
        }
        engine_->flush();
        return {};
    }

    void stop() override {
        stopped_ = true;
        if (pool_) pool_->abort();
        if (engine_) engine_->abandon();
    }

    void summarise(nlohmann::json& out) const override {
        out.update(engine_->describe());
        const restore::EngineStats s = engine_->stats();
        const FrameLayout& L = engine_->input_format().layout;
        const FrameLayout& O = engine_->output_format().layout;
        const double n = static_cast<double>(std::max<uint64_t>(s.frames_completed, 1));
        // What a float-RGB path would move: the model's input and output as fp32 planes.
        out["h2d_bytes"] = s.h2d_bytes;
        out["d2h_bytes"] = s.d2h_bytes;
        out["h2d_bytes_per_frame"] = static_cast<double>(s.h2d_bytes) / n;
        out["d2h_bytes_per_frame"] = static_cast<double>(s.d2h_bytes) / n;
        out["h2d_bytes_per_frame_float_rgb"] = 12.0 * static_cast<double>(L.width * L.height);
        out["d2h_bytes_per_frame_float_rgb"] = 12.0 * static_cast<double>(O.width * O.height);
        if (!engine_->tiled()) {
            out["inferences"] = s.inferences;
            out["slot_waits"] = s.slot_waits;
        }
        out["frames_failed"] = s.frames_failed;
        out["sim_fps"] = s.sim_fps;
        out["device_memory_reserved"] = s.device_memory_reserved;
        out["weight_bytes"] = s.weight_bytes;
        out["weights_shared"] = s.weights_shared;
        out["pool_frames"] = pool_->count();
        out["pool_in_use_max"] = pool_->in_use_max();
    }

    restore::EngineOptions options_;
    int64_t pool_frames_ = 0;
    bool use_cache_ = true;
    std::unique_ptr<FramePool> pool_;  // before engine_: outlives the completions
    std::unique_ptr<restore::Engine> engine_;
    std::atomic<bool> stopped_{false};
};

Result<std::unique_ptr<Stage>> create(Fields& f) {
    auto s = std::make_unique<InferStage>();
    restore::EngineOptions& o = s->options_;
    o.model.where = f.where("model");
    o.model.where_kb = f.where("kb");
    LOOM_ASSIGN_OR_RETURN(o.model.kb, f.string("kb", ""));
    LOOM_ASSIGN_OR_RETURN(o.model.model, f.string("model", ""));
    if (o.model.model.empty())
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: 'model' is required (a model name or file)",
                          f.where("model"), f.what());
    o.model.where = fmt::format("{}: infer", o.model.where);
    LOOM_ASSIGN_OR_RETURN(const std::string precision, f.one_of("precision", "fp32", {"fp32", "fp16"}));
    LOOM_ASSIGN_OR_RETURN(o.model.precision, compiler::parse_precision(precision));
    LOOM_ASSIGN_OR_RETURN(o.in_flight, f.integer("in_flight", 3, 1, 16));
    LOOM_ASSIGN_OR_RETURN(s->pool_frames_, f.integer("frames", o.in_flight + 4, o.in_flight + 1, 256));
    LOOM_ASSIGN_OR_RETURN(s->use_cache_, f.boolean("cache", true));
    LOOM_ASSIGN_OR_RETURN(o.model.measure_host, f.boolean("measure_host", false));
    LOOM_ASSIGN_OR_RETURN(o.tile, f.integer("tile", 0, -1, kFrameSideMax));
    LOOM_ASSIGN_OR_RETURN(const int64_t carry_mib, f.integer("tile_carry_mib", -1, -1, int64_t{1} << 24));
    o.tile_carry_bytes = carry_mib < 0 ? -1 : carry_mib * 1048576;
    LOOM_ASSIGN_OR_RETURN(o.model.restore, f.boolean("restore", true));
    const bool mean_given = f.has("mean"), std_given = f.has("std"), order_given = f.has("channel_order");
    LOOM_ASSIGN_OR_RETURN(std::vector<double> mean, f.numbers("mean", {0, 0, 0}, 3, -1e6, 1e6));
    LOOM_ASSIGN_OR_RETURN(std::vector<double> stdev, f.numbers("std", {1, 1, 1}, 3, 1e-6, 1e6));
    LOOM_ASSIGN_OR_RETURN(std::string order, f.one_of("channel_order", "rgb", {"rgb", "bgr"}));
    // Either of mean and std given: both are the file's (the other's default), as before.
    if (mean_given || std_given) {
        o.mean = std::array<float, 3>{};
        o.std = std::array<float, 3>{};
        for (size_t c = 0; c < 3; ++c) {
            (*o.mean)[c] = static_cast<float>(mean[c]);
            (*o.std)[c] = static_cast<float>(stdev[c]);
        }
    }
    if (order_given) o.order = order == "bgr" ? device::ChannelOrder::BGR : device::ChannelOrder::RGB;
    PixelFormat format = PixelFormat::YUV420P;
    ColorMatrix matrix = ColorMatrix::BT709;
    ColorRange range = ColorRange::LIMITED;
    LOOM_ASSIGN_OR_RETURN(bool format_given, f.choice("output_format", format, yuv_format_from_name,
                                                      "yuv420p, nv12, yuv420p10le, p010le"));
    LOOM_ASSIGN_OR_RETURN(bool matrix_given,
                          f.choice("output_matrix", matrix, color_matrix_from_name, "bt601, bt709, bt2020nc"));
    LOOM_ASSIGN_OR_RETURN(bool range_given, f.choice("output_range", range, color_range_from_name, "limited or full"));
    if (format_given) o.output_format = format;
    if (matrix_given) o.output_matrix = matrix;
    if (range_given) o.output_range = range;
    return std::unique_ptr<Stage>(std::move(s));
}

}  // namespace

extern const StageType kStage_infer;
const StageType kStage_infer{
    "infer", "restore frames with a model on the simulated NPU (YUV in and out)", false, false, false, create};

}  // namespace loom::pipeline
