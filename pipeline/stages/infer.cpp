// infer: runs a restoration model on every frame on the simulated NPU, frames staying YUV
// across the host link. Per frame, on one slot of an executor::FramePipeline (its own stream
// and arena; `in_flight` of them overlap): the chip's video decoder's time (VDEC lane), the H2D
// copy of the 4:2:0 frame, the media engine's conversion into the model's input (colour
// matrix and range of the frame, normalisation), the compiled model, the media engine's
// conversion of its output back to 4:2:0 in the output's colour contract, the D2H copy into a
// pooled host frame, and the video encoder's time (VENC lane). The frame handed on is pending
// until a stream callback marks it ready, so this thread never waits for the device except for
// a free slot.
//
// One thread submits all of a pipeline's device work, in frame order: that keeps the simulated
// timeline deterministic (the runtime places tasks in submission order), which separate
// upload / infer / download threads racing to submit would not.
//
//   model          a model name (found in the models folder or one folder down, e.g.
//                  realesr-animevideov3-x2; FOLDER/NAME where a name is in two folders, e.g.
//                  waifu2x-cunet/noise1_scale2.0x_model) or a path to an .onnx / ncnn .param
//                  file (relative to the config file)
//   precision      fp32 | fp16 (default fp32: the host computes fp16 slower than fp32)
//   in_flight      frames on the device at once (1..16, default 3)
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
#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/ranges.h>

#include "common/log.hpp"
#include "compiler/compile.hpp"
#include "compiler/import.hpp"
#include "compiler/compile_cache.hpp"
#include "device/media.hpp"
#include "executor/frame_pipeline.hpp"
#include "executor/tiled.hpp"
#include "pipeline/stage.hpp"
#include "tuner/kb.hpp"
#include "tuner/tune.hpp"

namespace loom::pipeline {
namespace {

namespace fs = std::filesystem;

// The models named `name` in `dir` (NAME.param / NAME.onnx, directly or one folder down, so
// FAMILY/NAME picks one folder's), sorted: more than one means the name is ambiguous.
std::vector<std::string> find_models(const std::string& dir, const std::string& name) {
    std::vector<std::string> found;
    std::error_code ec;
    for (const char* ext : {".param", ".onnx"}) {
        fs::path direct = fs::path(dir) / (name + ext);
        if (fs::exists(direct, ec)) {
            found.push_back(direct.string());
            continue;
        }
        if (name.find('/') != std::string::npos) continue;
        for (const auto& e : fs::directory_iterator(dir, ec)) {
            fs::path p = e.path() / (name + ext);
            if (e.is_directory(ec) && fs::exists(p, ec)) found.push_back(p.string());
        }
    }
    std::sort(found.begin(), found.end());
    return found;
}

// The names of a slot's device tasks in the trace, made once (the streams tell frames apart).
struct TaskNames {
    std::string vdec, h2d, preprocess, postprocess, d2h, venc, tensor_d2h, tensor_h2d;
    static TaskNames of_slot(size_t slot) {
        auto n = [slot](const char* what) { return fmt::format("slot {} {}", slot, what); };
        return {n("vdec"), n("h2d"), n("preprocess"), n("postprocess"), n("d2h"), n("venc"), n("tensor d2h"),
                n("tensor h2d")};
    }
};

class InferStage final : public Stage {
public:
    Result<Caps> prepare(const Caps* in, const Env& env) override {
        LOOM_ASSERT(in);
        in_caps_ = *in;
        device_ = env.device;
        LOOM_TRY(resolve_model(env));
        LOOM_TRY(open_kb(env));
        const FrameLayout& L = in->layout;
        LOOM_ASSIGN_OR_RETURN(compiler::Graph g, compiler::import_model(model_path_));
        if (g.inputs.size() != 1 || g.outputs.size() != 1)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: infer: model {} has {} inputs and {} outputs; a restoration model takes one image "
                              "and gives one",
                              where_model_, model_path_, g.inputs.size(), g.outputs.size());
        if (!restore_) g.descriptor.reset();
        if (g.descriptor) {
            descriptor_ = *g.descriptor;
            // The model's value range and channel order, unless the file set them.
            const compiler::ModelDescriptor& d = *g.descriptor;
            for (device::TensorFormat* t : {&in_format_, &out_format_}) {
                const bool in = t == &in_format_;
                const double lo = in ? d.input_min : d.output_min, hi = in ? d.input_max : d.output_max;
                for (size_t c = 0; c < 3 && !mean_given_ && !std_given_; ++c) {
                    t->mean[c] = static_cast<float>(-lo / (hi - lo));
                    t->std[c] = static_cast<float>(1.0 / (hi - lo));
                }
                if (!order_given_)
                    t->order = d.order == compiler::PixelOrder::BGR ? device::ChannelOrder::BGR : device::ChannelOrder::RGB;
            }
        }
        std::vector<int64_t> out_dims;
        if (tile_ > 0) {
            LOOM_TRY(prepare_tiled(std::move(g), tile_, out_dims));
        } else {
            compiler::Graph copy = tile_ == 0 ? g : compiler::Graph{};
            if (g.descriptor) {
                LOOM_TRY(compiler::apply_descriptor(g, L.height, L.width)
                             .with_context(fmt::format("{}: infer", where_model_)));
                descriptor_ = *g.descriptor;  // applied
            }
            Status st = prepare_untiled(std::move(g), env, out_dims);
            if (st.code() == StatusCode::OUT_OF_DEVICE_MEMORY && tile_ == 0) {
                log::info("pipeline", "infer: {} at {}x{} does not fit untiled ({}): running it in tiles", model_path_,
                          L.width, L.height, st.message());
                frames_.reset();
                loaded_.reset();
                LOOM_TRY(prepare_tiled(std::move(copy), 0, out_dims));
            } else {
                LOOM_TRY(st);
            }
        }
        if (out_dims.size() != 4 || out_dims[0] != 1 || out_dims[1] != 3 || out_dims[2] % L.height ||
            out_dims[3] % L.width || out_dims[2] / L.height != out_dims[3] / L.width)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: infer: model {} maps 1x3x{}x{} to {}; a restoration model gives 1x3x(s*H)x(s*W)",
                              where_model_, model_path_, L.height, L.width,
                              compiler::shape_str(compiler::shape_of(out_dims)));
        scale_ = out_dims[2] / L.height;
        in_format_.height = L.height;
        in_format_.width = L.width;
        out_format_.height = out_dims[2];
        out_format_.width = out_dims[3];

        out_layout_ = {out_format_given_ ? out_pixel_format_ : L.format, out_dims[3], out_dims[2]};
        out_color_ = in->color;
        if (matrix_given_) out_color_.matrix = out_matrix_;
        if (range_given_) out_color_.range = out_range_;
        const size_t slots = runner_ ? 1 : static_cast<size_t>(in_flight_);
        for (size_t i = 0; i < slots; ++i) {
            LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer a, device_->malloc(L.bytes(), "infer: YUV frame in"));
            LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer b, device_->malloc(out_layout_.bytes(), "infer: YUV frame out"));
            yuv_in_.push_back(std::move(a));
            yuv_out_.push_back(std::move(b));
            names_.push_back(TaskNames::of_slot(i));
        }
        if (runner_) {
            LOOM_ASSIGN_OR_RETURN(tensor_in_, device_->malloc(in_format_.bytes(), "infer: tiled frame tensor in"));
            LOOM_ASSIGN_OR_RETURN(tensor_out_, device_->malloc(out_format_.bytes(), "infer: tiled frame tensor out"));
            host_in_ = compiler::HostTensor(in_format_.dtype, {1, 3, L.height, L.width});
            stream_ = device_->create_stream();
        }
        LOOM_ASSIGN_OR_RETURN(pool_, FramePool::create("infer frames", out_layout_, static_cast<size_t>(pool_frames_)));
        Caps out = *in;
        out.layout = out_layout_;
        out.color = out_color_;
        return out;
    }

    // The knowledge base named by `kb`, read once: its fresh records for this device become the
    // compile's tiling source.
    Status open_kb(const Env& env) {
        if (kb_.empty()) return {};
        fs::path p(kb_);
        if (p.is_relative()) p = fs::path(env.config_dir) / p;
        kb_path_ = p.lexically_normal().string();
        tuner::KbOptions o;
        o.create = false;
        auto kb = tuner::KnowledgeBase::open(kb_path_, o);
        if (!kb.ok()) return kb.status().with_context(fmt::format("{}: kb", where_kb_));
        auto source = tuner::KbTilingSource::load(*kb, device_->spec());
        if (!source.ok()) return source.status().with_context(fmt::format("{}: kb", where_kb_));
        kb_records_ = (*source)->size();
        tilings_ = std::move(*source);
        log::info("pipeline", "infer: knowledge base {}: {} records for {}", kb_path_, kb_records_,
                  device_->spec().name);
        return {};
    }

    // The model compiled for the whole frame, in a FramePipeline of in_flight slots.
    Status prepare_untiled(compiler::Graph g, const Env& env, std::vector<int64_t>& out_dims) {
        const FrameLayout& L = in_caps_.layout;
        compiler::CompileOptions o;
        o.precision = precision_;
        o.tiling_source = tilings_;
        o.measure_host = measure_host_;
        o.shapes.emplace_back(g.value(g.inputs[0]).name, std::vector<int64_t>{1, 3, L.height, L.width});
        compiler::CompiledModel compiled;
        if (use_cache_ && !env.cache_dir.empty()) {
            LOOM_ASSIGN_OR_RETURN(compiler::CacheResult r,
                                  compiler::CompileCache(env.cache_dir).compile(std::move(g), o, device_->spec()));
            log::info("pipeline", "infer: {} for {}x{} ({}): compile cache {}{}", model_path_, L.width, L.height,
                      compiler::precision_name(precision_), compiler::cache_outcome_name(r.outcome),
                      r.reason.empty() ? "" : " (" + r.reason + ")");
            compiled = std::move(r.model);
            cache_outcome_ = std::string(compiler::cache_outcome_name(r.outcome));
        } else {
            LOOM_ASSIGN_OR_RETURN(compiled, compiler::compile_graph(std::move(g), o, device_->spec()));
            cache_outcome_ = "off";
        }
        auto model = std::make_shared<const compiler::CompiledModel>(std::move(compiled));
        in_format_.dtype = model->tensors[static_cast<size_t>(model->inputs[0])].dtype;
        out_format_.dtype = model->tensors[static_cast<size_t>(model->outputs[0])].dtype;
        out_dims = model->tensors[static_cast<size_t>(model->outputs[0])].dims;
        LOOM_ASSIGN_OR_RETURN(loaded_, executor::LoadedModel::load(*device_, model));
        executor::FramePipelineOptions po;
        po.in_flight = static_cast<size_t>(in_flight_);
        LOOM_ASSIGN_OR_RETURN(frames_, executor::FramePipeline::create(loaded_, po));
        return {};
    }

    // The model compiled for one window and run over tiles of each frame (step 0: from memory).
    Status prepare_tiled(compiler::Graph g, int64_t step, std::vector<int64_t>& out_dims) {
        const FrameLayout& L = in_caps_.layout;
        executor::TiledOptions to;
        to.tile = step;
        to.precision = precision_;
        to.tiling_source = tilings_;
        to.measure_host = measure_host_;
        to.restore = g.descriptor.has_value();
        if (to.restore) {
            descriptor_ = *g.descriptor;
            descriptor_->applied = true;  // by the runner, around the tiles
        }
        LOOM_ASSIGN_OR_RETURN(runner_, executor::TiledRunner::create(*device_, std::move(g), {1, 3, L.height, L.width}, to));
        in_format_.dtype = runner_->frame_dtype();
        out_format_.dtype = runner_->frame_dtype();
        out_dims = runner_->output_dims().at(0);
        cache_outcome_ = "off (tiled)";
        log::info("pipeline", "infer: {} at {}x{} in {} tiles of {}x{}", model_path_, L.width, L.height,
                  runner_->plan().tiles(), runner_->plan().w.window, runner_->plan().h.window);
        return {};
    }

    Status run(StageRun& run) override {
        uint64_t n = 0;
        while (FrameRef in = run.take()) {
            FrameRef out;
            {
                auto w = run.waiting();
                out = pool_->acquire();
            }
            if (!out) break;  // stopped
            out->meta = in->meta;
            out->color = out_color_;
            out->set_pending();
            Status st = runner_ ? submit_tiled(in, out) : submit(in, out);
            if (!st.ok()) {
                st = st.with_context(fmt::format("frame {}", in->meta.index));
                out->set_ready(st);
                return st;
            }
            h2d_bytes_ += in->bytes();
            d2h_bytes_ += out->bytes();
            ++n;
            if (!run.emit(std::move(out))) break;
        }
        if (frames_) frames_->flush();
        if (runner_) (void)stream_.synchronize();
        frames_done_ = n;
        return {};
    }

    // The device's part after the model, on `st`: conversion back to YUV, the download into the
    // pooled output frame, the encoder's time, and the callback that hands the frames back.
    Status enqueue_output(device::Stream& st, device::DevicePtr<const uint8_t> tensor, const device::DeviceBuffer& yuv,
                          const FrameRef& in, const FrameRef& out, const TaskNames& names) {
        LOOM_TRY(st.media_tensor_to_frame(tensor, out_format_, yuv.as<uint8_t>(), out_layout_, out_color_,
                                          names.postprocess));
        LOOM_TRY(st.copy_d2h(device::HostView<uint8_t>(out->data(), out->bytes(), true),
                             device::DevicePtr<const uint8_t>(yuv.as<uint8_t>()), names.d2h));
        LOOM_TRY(st.video_encode(out_layout_.width, out_layout_.height, names.venc));
        // Runs once the D2H has run: the input frame goes back to its pool, the output frame is
        // ready for the encoder.
        return st.add_callback([in_ref = in, out_ref = out](Status s) mutable {
            in_ref.reset();
            out_ref->set_ready(std::move(s));
        });
    }

    // The decoder's time, the upload of the YUV frame and the conversion into `tensor`.
    Status enqueue_input(device::Stream& st, const FrameRef& in, const device::DeviceBuffer& yuv,
                         device::DevicePtr<uint8_t> tensor, const TaskNames& names) {
        LOOM_TRY(st.video_decode(in->layout.width, in->layout.height, names.vdec));
        LOOM_TRY(upload_frame(st, in->view(), yuv.as<uint8_t>(), names.h2d));
        return st.media_frame_to_tensor(yuv.as<uint8_t>(), in->layout, in->color, tensor, in_format_,
                                        names.preprocess);
    }

    // One frame on a FramePipeline slot; returns once it is submitted.
    Status submit(const FrameRef& in, const FrameRef& out) {
        bool completion_added = false;
        const executor::SlotWork before = [&](const executor::SlotIo& io) {
            return enqueue_input(*io.stream, in, yuv_in_[io.slot], io.inputs[0], names_[io.slot]);
        };
        const executor::SlotWork after = [&](const executor::SlotIo& io) {
            LOOM_TRY(enqueue_output(*io.stream, io.outputs[0], yuv_out_[io.slot], in, out, names_[io.slot]));
            completion_added = true;
            return Status();
        };
        LOOM_ASSIGN_OR_RETURN(executor::FrameFuture future, frames_->submit_device(before, after));
        if (completion_added) return {};
        // `before` or `after` failed part-way: the frame's error comes with its inference.
        auto r = future.get();
        return r.ok() ? Status(StatusCode::INTERNAL, "not submitted") : r.status();
    }

    // One frame in tiles: the converted frame comes down for the runner to cut its windows from
    // (on the host, as TiledRunner does), and the assembled output goes back up for the
    // conversion. Returns once the output's device work is submitted.
    Status submit_tiled(const FrameRef& in, const FrameRef& out) {
        device::Stream& st = stream_;
        const TaskNames& names = names_[0];
        LOOM_TRY(enqueue_input(st, in, yuv_in_[0], tensor_in_.as<uint8_t>(), names));
        LOOM_TRY(st.copy_d2h(device::HostView<uint8_t>(static_cast<uint8_t*>(host_in_.data()), host_in_.bytes(), false),
                             device::DevicePtr<const uint8_t>(tensor_in_.as<uint8_t>()), names.tensor_d2h));
        LOOM_TRY(st.synchronize());
        LOOM_ASSIGN_OR_RETURN(std::vector<compiler::HostTensor> outs, runner_->run(host_in_));
        host_out_ = std::move(outs.at(0));  // kept until the upload below has run
        LOOM_TRY(st.copy_h2d(tensor_out_.as<uint8_t>(),
                             device::HostView<const uint8_t>(static_cast<const uint8_t*>(host_out_.data()),
                                                             host_out_.bytes(), false),
                             names.tensor_h2d));
        return enqueue_output(st, tensor_out_.as<uint8_t>(), yuv_out_[0], in, out, names);
    }

    void stop() override {
        if (pool_) pool_->abort();
    }

    void summarise(nlohmann::json& out) const override {
        out["model"] = model_path_;
        out["precision"] = std::string(compiler::precision_name(precision_));
        out["compile_cache"] = cache_outcome_;
        if (tilings_) out["kb"] = {{"path", kb_path_}, {"records", kb_records_}};
        out["scale"] = scale_;
        if (descriptor_) out["descriptor"] = compiler::descriptor_json(*descriptor_);
        out["in_flight"] = in_flight_;
        out["output_size"] = {out_layout_.width, out_layout_.height};
        out["output_pixel_format"] = pixel_format_name(out_layout_.format);
        out["output_matrix"] = color_matrix_name(out_color_.matrix);
        out["output_range"] = color_range_name(out_color_.range);
        const double n = static_cast<double>(std::max<uint64_t>(frames_done_, 1));
        // What a float-RGB path would move: the model's input and output as fp32 planes.
        const double float_in = 12.0 * static_cast<double>(in_caps_.layout.width * in_caps_.layout.height);
        const double float_out = 12.0 * static_cast<double>(out_layout_.width * out_layout_.height);
        out["h2d_bytes"] = h2d_bytes_;
        out["d2h_bytes"] = d2h_bytes_;
        out["h2d_bytes_per_frame"] = static_cast<double>(h2d_bytes_) / n;
        out["d2h_bytes_per_frame"] = static_cast<double>(d2h_bytes_) / n;
        out["h2d_bytes_per_frame_float_rgb"] = float_in;
        out["d2h_bytes_per_frame_float_rgb"] = float_out;
        if (frames_) {
            const executor::FramePipelineStats s = frames_->stats();
            out["inferences"] = s.inferences;
            out["frames_failed"] = s.frames_failed;
            out["slot_waits"] = s.submits_blocked;
        }
        if (runner_) {
            out["tiles"] = runner_->plan().tiles();
            out["tile_window"] = {runner_->plan().w.window, runner_->plan().h.window};
        }
        out["pool_frames"] = pool_->count();
        out["pool_in_use_max"] = pool_->in_use_max();
    }

    Status resolve_model(const Env& env) {
        if (model_.ends_with(".param") || model_.ends_with(".onnx") ||
            (model_.find('/') != std::string::npos && find_models(env.models_dir, model_).empty())) {
            fs::path p(model_);
            if (p.is_relative()) p = fs::path(env.config_dir) / p;
            model_path_ = p.lexically_normal().string();
            std::error_code ec;
            if (!fs::exists(model_path_, ec))
                return make_error(StatusCode::NOT_FOUND, "{}: infer: model file {} not found", where_model_,
                                  model_path_);
            return {};
        }
        const std::vector<std::string> found = find_models(env.models_dir, model_);
        if (found.empty())
            return make_error(StatusCode::NOT_FOUND,
                              "{}: infer: no model '{}' ({}.param or .onnx) in {} (scripts/fetch-models puts the "
                              "restoration models there; LOOM_MODEL_DIR or --models picks another folder)",
                              where_model_, model_, model_, env.models_dir);
        if (found.size() > 1)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: infer: model '{}' is ambiguous in {}: {}; name it as FOLDER/{} (waifu2x CUnet and "
                              "UpConv7 share file names)",
                              where_model_, model_, env.models_dir, fmt::join(found, ", "), model_);
        model_path_ = found[0];
        return {};
    }

    // Fields.
    std::string model_, where_model_;
    compiler::Precision precision_ = compiler::Precision::FP32;
    bool measure_host_ = false;
    bool restore_ = true, mean_given_ = false, std_given_ = false, order_given_ = false;
    std::optional<compiler::ModelDescriptor> descriptor_;
    int64_t in_flight_ = 3, pool_frames_ = 0;
    bool use_cache_ = true;
    bool out_format_given_ = false, matrix_given_ = false, range_given_ = false;
    PixelFormat out_pixel_format_ = PixelFormat::YUV420P;
    ColorMatrix out_matrix_ = ColorMatrix::BT709;
    ColorRange out_range_ = ColorRange::LIMITED;
    device::TensorFormat in_format_, out_format_;

    // Prepared.
    Caps in_caps_;
    device::Device* device_ = nullptr;
    std::string model_path_, cache_outcome_;
    int64_t scale_ = 1;
    FrameLayout out_layout_;
    ColorInfo out_color_;
    std::unique_ptr<FramePool> pool_;  // before frames_: outlives the inferences' callbacks
    std::shared_ptr<executor::LoadedModel> loaded_;
    std::unique_ptr<executor::FramePipeline> frames_;     // untiled
    std::vector<device::DeviceBuffer> yuv_in_, yuv_out_;  // per slot (tiled: one)
    std::vector<TaskNames> names_;                        // per slot
    // Tiled: the runner, its stream, the whole frame's tensors on the device and on the host.
    int64_t tile_ = 0;
    std::unique_ptr<executor::TiledRunner> runner_;
    device::Stream stream_;
    device::DeviceBuffer tensor_in_, tensor_out_;
    compiler::HostTensor host_in_, host_out_;

    std::string kb_, kb_path_, where_kb_;  // the `kb` field, resolved, and its position
    std::shared_ptr<const compiler::TilingSource> tilings_;  // from the knowledge base
    size_t kb_records_ = 0;

    // Written by the stage's thread; read after it joined.
    uint64_t h2d_bytes_ = 0, d2h_bytes_ = 0, frames_done_ = 0;
};

Result<std::unique_ptr<Stage>> create(Fields& f) {
    auto s = std::make_unique<InferStage>();
    s->where_model_ = f.where("model");
    s->where_kb_ = f.where("kb");
    LOOM_ASSIGN_OR_RETURN(s->kb_, f.string("kb", ""));
    LOOM_ASSIGN_OR_RETURN(s->model_, f.string("model", ""));
    if (s->model_.empty())
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: 'model' is required (a model name or file)",
                          f.where("model"), f.what());
    LOOM_ASSIGN_OR_RETURN(const std::string precision, f.one_of("precision", "fp32", {"fp32", "fp16"}));
    LOOM_ASSIGN_OR_RETURN(s->precision_, compiler::parse_precision(precision));
    LOOM_ASSIGN_OR_RETURN(s->in_flight_, f.integer("in_flight", 3, 1, 16));
    LOOM_ASSIGN_OR_RETURN(s->pool_frames_, f.integer("frames", s->in_flight_ + 4, s->in_flight_ + 1, 256));
    LOOM_ASSIGN_OR_RETURN(s->use_cache_, f.boolean("cache", true));
    LOOM_ASSIGN_OR_RETURN(s->measure_host_, f.boolean("measure_host", false));
    LOOM_ASSIGN_OR_RETURN(s->tile_, f.integer("tile", 0, -1, kFrameSideMax));
    LOOM_ASSIGN_OR_RETURN(s->restore_, f.boolean("restore", true));
    s->mean_given_ = f.has("mean");
    s->std_given_ = f.has("std");
    s->order_given_ = f.has("channel_order");
    LOOM_ASSIGN_OR_RETURN(std::vector<double> mean, f.numbers("mean", {0, 0, 0}, 3, -1e6, 1e6));
    LOOM_ASSIGN_OR_RETURN(std::vector<double> stdev, f.numbers("std", {1, 1, 1}, 3, 1e-6, 1e6));
    LOOM_ASSIGN_OR_RETURN(std::string order, f.one_of("channel_order", "rgb", {"rgb", "bgr"}));
    for (device::TensorFormat* t : {&s->in_format_, &s->out_format_}) {
        for (size_t c = 0; c < 3; ++c) {
            t->mean[c] = static_cast<float>(mean[c]);
            t->std[c] = static_cast<float>(stdev[c]);
        }
        t->order = order == "bgr" ? device::ChannelOrder::BGR : device::ChannelOrder::RGB;
    }
    LOOM_ASSIGN_OR_RETURN(s->out_format_given_, f.choice("output_format", s->out_pixel_format_, pixel_format_from_name,
                                                         "yuv420p, nv12, yuv420p10le, p010le"));
    LOOM_ASSIGN_OR_RETURN(s->matrix_given_,
                          f.choice("output_matrix", s->out_matrix_, color_matrix_from_name, "bt601, bt709, bt2020nc"));
    LOOM_ASSIGN_OR_RETURN(s->range_given_,
                          f.choice("output_range", s->out_range_, color_range_from_name, "limited or full"));
    return std::unique_ptr<Stage>(std::move(s));
}

}  // namespace

extern const StageType kStage_infer;
const StageType kStage_infer{"infer", "restore frames with a model on the simulated NPU (YUV in and out)", false,
                             false, false, create};

}  // namespace loom::pipeline
