#include "restore/engine.hpp"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/log.hpp"
#include "compiler/compile_cache.hpp"
#include "compiler/import.hpp"
#include "compiler/model_file.hpp"
#include "compiler/ops.hpp"
#include "compiler/passes.hpp"
#include "executor/frame_scheduler.hpp"
#include "executor/tiled.hpp"
#include "tuner/kb.hpp"
#include "tuner/tune.hpp"

namespace loom::restore {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kInFlightMax = 16;

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

std::string relative_to(const std::string& base, const std::string& path) {
    fs::path p(path);
    if (p.is_relative() && !base.empty()) p = fs::path(base) / p;
    return p.lexically_normal().string();
}

}  // namespace

Status upload_frame(device::Stream& st, const FrameView& frame, device::DevicePtr<uint8_t> dst, std::string_view name) {
    LOOM_TRY(frame.check());
    const size_t bytes = frame.layout.bytes();
    if (dst.size() < bytes)
        return make_error(StatusCode::INVALID_ARGUMENT, "upload '{}': a {}x{} {} frame of {} bytes into {} bytes", name,
                          frame.layout.width, frame.layout.height, pixel_format_name(frame.layout.format), bytes,
                          dst.size());
    if (frame.is_tight())
        return st.copy_h2d(dst.slice(0, bytes), device::HostView<const uint8_t>(frame.plane[0], bytes, frame.pinned),
                           name);
    size_t offset = 0;
    for (int p = 0; p < frame.planes(); ++p) {
        const auto i = static_cast<size_t>(p);
        const size_t row = frame.plane_row_bytes(p), rows = static_cast<size_t>(frame.plane_rows(p));
        const auto pitch = static_cast<size_t>(frame.stride[i]);
        const device::HostView<const uint8_t> src(frame.plane[i], (rows - 1) * pitch + row, frame.pinned);
        LOOM_TRY(st.copy_h2d_2d(dst.slice(offset, row * rows), row, src, pitch, row, rows, name));
        offset += row * rows;
    }
    return {};
}

Result<std::string> resolve_model(const ModelRequest& r) {
    const std::string& m = r.model;
    if (m.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "{}: no model named", r.where);
    if (m.ends_with(".param") || m.ends_with(".onnx") || m.ends_with(".loom") ||
        (m.find('/') != std::string::npos && find_models(r.models_dir, m).empty())) {
        std::string path = relative_to(r.base_dir, m);
        std::error_code ec;
        if (!fs::exists(path, ec))
            return make_error(StatusCode::NOT_FOUND, "{}: model file {} not found", r.where, path);
        return path;
    }
    const std::vector<std::string> found = find_models(r.models_dir, m);
    if (found.empty())
        return make_error(StatusCode::NOT_FOUND,
                          "{}: no model '{}' ({}.param or .onnx) in {} (scripts/fetch-models puts the restoration "
                          "models there; LOOM_MODEL_DIR or --models picks another folder)",
                          r.where, m, m, r.models_dir);
    if (found.size() > 1)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: model '{}' is ambiguous in {}: {}; name it as FOLDER/{} (waifu2x CUnet and UpConv7 "
                          "share file names)",
                          r.where, m, r.models_dir, fmt::join(found, ", "), m);
    return found[0];
}

bool is_compiled_model(const std::string& path) { return path.ends_with(".loom"); }

namespace {

// A .loom's input dims (1x3xHxW for a restoration model), its output dims and weights; errors
// name `where` and the file.
struct CompiledShape {
    std::vector<int64_t> in, out;
    uint64_t weight_bytes = 0;
    bool host = false;
};
Result<CompiledShape> compiled_shape(const std::string& path, const std::string& where) {
    Result<compiler::CompiledModel> loaded = compiler::load_compiled_model(path);
    if (!loaded.ok()) return loaded.status().with_context(where);
    const compiler::CompiledModel& m = *loaded;
    CompiledShape c;
    c.host = m.mode != compiler::ExecMode::SINK;
    c.weight_bytes = m.weights.bytes();
    if (!c.host && m.inputs.size() == 1 && m.outputs.size() == 1) {
        c.in = m.tensors[static_cast<size_t>(m.inputs[0])].dims;
        c.out = m.tensors[static_cast<size_t>(m.outputs[0])].dims;
    }
    return c;
}

}  // namespace

Result<std::optional<std::array<int64_t, 2>>> compiled_frame_size(const ModelRequest& request) {
    LOOM_ASSIGN_OR_RETURN(std::string path, resolve_model(request));
    if (!is_compiled_model(path)) return std::optional<std::array<int64_t, 2>>();
    LOOM_ASSIGN_OR_RETURN(CompiledShape c, compiled_shape(path, request.where));
    if (c.in.size() != 4 || c.in[0] != 1 || c.in[1] != 3)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: {} is not compiled for one image frame (1x3xHxW input, sink mode)", request.where, path);
    return std::optional<std::array<int64_t, 2>>(std::array<int64_t, 2>{c.in[3], c.in[2]});
}

// The engine's output buffers, shared with the views that hold one.
struct Engine::OutputBuffers {
    std::mutex mutex;  // guards free, aborted
    std::condition_variable cv;
    std::vector<device::PinnedBuffer<uint8_t>> buffers;  // filled on first use, then fixed
    std::vector<size_t> free;
    bool aborted = false;
};

Result<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<DeviceContext> context, const EngineOptions& options,
                                               const FrameFormat& input) {
    LOOM_ASSERT(context);
    if (options.in_flight < 1 || options.in_flight > kInFlightMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: in_flight {} (1 to {})", options.model.where,
                          options.in_flight, kInFlightMax);
    LOOM_TRY(input.layout.check().with_context(options.model.where));
    std::unique_ptr<Engine> e(new Engine());
    e->context_ = std::move(context);
    e->options_ = options;
    LOOM_TRY(e->prepare(input));
    return e;
}

Engine::~Engine() {
    flush();
    // The slots' streams may still run the last callbacks' tails; the buffers below go after.
    for (Slot& s : slots_)
        if (s.stream.valid()) (void)s.stream.synchronize();
    if (tiled_stream_.valid()) (void)tiled_stream_.synchronize();
    frames_.reset();
}

Status Engine::open_kb() {
    const ModelRequest& r = options_.model;
    if (r.kb.empty()) return {};
    kb_path_ = relative_to(r.base_dir, r.kb);
    tuner::KbOptions o;
    o.create = false;
    device::Device& dev = context_->device();
    auto kb = tuner::KnowledgeBase::open(kb_path_, o);
    if (!kb.ok()) return kb.status().with_context(fmt::format("{}: kb", r.where_kb));
    auto source = tuner::KbTilingSource::load(*kb, dev.spec());
    if (!source.ok()) return source.status().with_context(fmt::format("{}: kb", r.where_kb));
    kb_records_ = (*source)->size();
    tilings_ = std::move(*source);
    log::info("restore", "knowledge base {}: {} records for {}", kb_path_, kb_records_, dev.spec().name);
    return {};
}

namespace {

// memory_floor for a compiled model file: its weights, and whole frames (in_flight slots) at the
// one size it is compiled for.
Result<MemoryFloor> compiled_floor(const EngineOptions& options, const FrameFormat& input, MemoryFloor f) {
    const ModelRequest& r = options.model;
    const FrameLayout& L = input.layout;
    LOOM_ASSIGN_OR_RETURN(CompiledShape c, compiled_shape(f.model_path, r.where));
    if (c.host)
        return make_error(StatusCode::UNSUPPORTED, "{}: {} is compiled in host mode; frames run sink-mode models",
                          r.where, f.model_path);
    if (c.in != std::vector<int64_t>{1, 3, L.height, L.width} || c.out.size() != 4 || c.out[2] % L.height ||
        c.out[3] % L.width || c.out[2] / L.height != c.out[3] / L.width)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: {} is compiled for {} -> {}; the frames are {}x{} (a compiled model runs the size it "
                          "was compiled for: loomc compile --restore --shape 1,3,{},{})",
                          r.where, f.model_path, compiler::shape_str(compiler::shape_of(c.in)),
                          compiler::shape_str(compiler::shape_of(c.out)), L.width, L.height, L.height, L.width);
    const int64_t scale = c.out[2] / L.height;
    f.weight_bytes = c.weight_bytes;
    f.output.layout = {options.output_format.value_or(L.format), L.width * scale, L.height * scale};
    f.output.color = input.color;
    if (options.output_matrix) f.output.color.matrix = *options.output_matrix;
    if (options.output_range) f.output.color.range = *options.output_range;
    const auto slots = static_cast<uint64_t>(std::clamp<int64_t>(options.in_flight, 1, kInFlightMax));
    const uint64_t frames = slots * (static_cast<uint64_t>(L.bytes()) + static_cast<uint64_t>(f.output.layout.bytes()));
    f.bytes = f.weight_bytes + frames;
    f.detail = fmt::format("weights {} + frames {} (compiled file, whole frames, {} in flight)", f.weight_bytes,
                           frames, slots);
    return f;
}

}  // namespace

Result<MemoryFloor> Engine::memory_floor(const EngineOptions& options, const FrameFormat& input) {
    const ModelRequest& r = options.model;
    const FrameLayout& L = input.layout;
    LOOM_TRY(L.check().with_context(r.where));
    MemoryFloor f;
    LOOM_ASSIGN_OR_RETURN(f.model_path, resolve_model(r));
    if (is_compiled_model(f.model_path)) return compiled_floor(options, input, std::move(f));
    LOOM_ASSIGN_OR_RETURN(compiler::Graph g, compiler::import_model(f.model_path));
    const uint64_t element = r.precision == compiler::Precision::FP32   ? 4
                             : r.precision == compiler::Precision::FP16 ? 2
                                                                        : 1;
    // The weights every plan uploads: those of the convolutions and matrix products (what
    // folding and fusion keep), each counted once.
    std::vector<bool> counted(g.values.size());
    for (const compiler::Node& n : g.nodes) {
        if (n.op != "Conv" && n.op != "ConvTranspose" && n.op != "Gemm" && n.op != "MatMul") continue;
        if (n.inputs.size() < 2 || n.inputs[1] < 0) continue;
        const auto w = static_cast<size_t>(n.inputs[1]);
        if (w >= g.values.size() || counted[w] || !g.values[w].is_constant()) continue;
        counted[w] = true;
        f.weight_bytes += static_cast<uint64_t>(g.values[w].data->elements()) * element;
    }
    // The output's size: the descriptor's scale (prepare() wraps the network so that it gives
    // exactly scale x the frame), else shape inference over the frame, with constants folded
    // where the shapes depend on them (as the compiler folds them). A model whose output is not
    // scale x the frame fails here as it would there.
    if (g.inputs.size() != 1 || g.outputs.size() != 1)
        return make_error(
            StatusCode::INVALID_ARGUMENT,
            "{}: model {} has {} inputs and {} outputs; a restoration model takes one image and gives one", r.where,
            f.model_path, g.inputs.size(), g.outputs.size());
    int64_t scale = 0;
    if (r.restore && g.descriptor) {
        scale = std::max<int64_t>(g.descriptor->scale, 1);
    } else {
        g.descriptor.reset();
        LOOM_TRY(compiler::set_input_shapes(g, {{g.value(g.inputs[0]).name, {1, 3, L.height, L.width}}})
                     .with_context(r.where));
        LOOM_TRY(compiler::infer_shapes(g).with_context(r.where));
        if (!compiler::shape_static(g.value(g.outputs[0]).shape)) {
            compiler::OptimizeOptions oo;
            oo.fuse = false;
            LOOM_TRY(compiler::optimize(g, oo).status().with_context(r.where));
        }
        const compiler::Shape& out = g.value(g.outputs[0]).shape;
        const bool ok = out.size() == 4 && compiler::shape_static(out) && out[0].value == 1 && out[1].value == 3 &&
                        out[2].value % L.height == 0 && out[3].value % L.width == 0 &&
                        out[2].value / L.height == out[3].value / L.width && out[2].value >= L.height;
        if (!ok)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: model {} maps 1x3x{}x{} to {}; a restoration model gives 1x3x(s*H)x(s*W)", r.where,
                              f.model_path, L.height, L.width, compiler::shape_str(out));
        scale = out[2].value / L.height;
    }
    f.output.layout = {options.output_format.value_or(L.format), L.width * scale, L.height * scale};
    f.output.color = input.color;
    if (options.output_matrix) f.output.color.matrix = *options.output_matrix;
    if (options.output_range) f.output.color.range = *options.output_range;
    const uint64_t yuv = static_cast<uint64_t>(L.bytes()) + static_cast<uint64_t>(f.output.layout.bytes());
    const uint64_t tensor_in = 3 * static_cast<uint64_t>(L.width) * static_cast<uint64_t>(L.height) * element;
    const uint64_t tensor_out = tensor_in * static_cast<uint64_t>(scale * scale);
    uint64_t frames = 0;
    if (options.tile == -1) {
        const auto slots = static_cast<uint64_t>(std::clamp<int64_t>(options.in_flight, 1, kInFlightMax));
        frames = slots * (yuv + tensor_out);
        f.detail = fmt::format("weights {} + frames {} (whole frames, {} in flight)", f.weight_bytes, frames, slots);
    } else {
        frames = yuv + tensor_in + tensor_out;
        f.detail = fmt::format("weights {} + frames {} (in tiles, one frame in flight)", f.weight_bytes, frames);
    }
    f.bytes = f.weight_bytes + frames;
    return f;
}

Status Engine::prepare(const FrameFormat& input) {
    input_ = input;
    const ModelRequest& r = options_.model;
    LOOM_ASSIGN_OR_RETURN(model_path_, resolve_model(r));
    LOOM_TRY(open_kb());
    const FrameLayout& L = input.layout;
    device::Device& dev = context_->device();
    const bool compiled = is_compiled_model(model_path_);
    compiler::Graph g;
    if (!compiled) {
        LOOM_ASSIGN_OR_RETURN(g, compiler::import_model(model_path_));
        if (g.inputs.size() != 1 || g.outputs.size() != 1)
            return make_error(
                StatusCode::INVALID_ARGUMENT,
                "{}: model {} has {} inputs and {} outputs; a restoration model takes one image and gives one",
                r.where, model_path_, g.inputs.size(), g.outputs.size());
        if (!r.restore) g.descriptor.reset();
    }
    set_normalisation(g.descriptor);
    if (g.descriptor) descriptor_ = *g.descriptor;

    const size_t memory_before = dev.stats().memory_used;
    std::vector<int64_t> out_dims;
    if (compiled) {
        LOOM_TRY(prepare_compiled(out_dims));
    } else if (options_.tile > 0) {
        LOOM_TRY(prepare_tiled(std::move(g), options_.tile, out_dims));
    } else {
        compiler::Graph copy = options_.tile == 0 ? g : compiler::Graph{};
        if (g.descriptor) {
            LOOM_TRY(compiler::apply_descriptor(g, L.height, L.width).with_context(r.where));
            descriptor_ = *g.descriptor;  // applied
        }
        Status st = prepare_whole(std::move(g), out_dims);
        if (st.code() == StatusCode::OUT_OF_DEVICE_MEMORY && options_.tile == 0) {
            log::info("restore", "{} at {}x{} does not fit whole ({}): running it in tiles", model_path_, L.width,
                      L.height, st.message());
            frames_.reset();
            loaded_.reset();
            weights_shared_ = false;
            weight_bytes_ = 0;
            Status tiled = prepare_tiled(std::move(copy), 0, out_dims);
            if (!tiled.ok())
                return Status(tiled.code(), fmt::format("{} at {}x{} does not fit the device whole, even one frame in "
                                                        "flight ({}), and cannot run in tiles: {}",
                                                        model_path_, L.width, L.height, st.message(), tiled.message()));
        } else {
            LOOM_TRY(st);
        }
    }
    if (out_dims.size() != 4 || out_dims[0] != 1 || out_dims[1] != 3 || out_dims[2] % L.height ||
        out_dims[3] % L.width || out_dims[2] / L.height != out_dims[3] / L.width)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: model {} maps 1x3x{}x{} to {}; a restoration model gives 1x3x(s*H)x(s*W)", r.where,
                          model_path_, L.height, L.width, compiler::shape_str(compiler::shape_of(out_dims)));
    scale_ = out_dims[2] / L.height;
    in_tensor_.height = L.height;
    in_tensor_.width = L.width;
    out_tensor_.height = out_dims[2];
    out_tensor_.width = out_dims[3];
    output_.layout = {options_.output_format.value_or(L.format), out_dims[3], out_dims[2]};
    output_.color = input.color;
    if (options_.output_matrix) output_.color.matrix = *options_.output_matrix;
    if (options_.output_range) output_.color.range = *options_.output_range;

    const size_t slots = runner_ ? 1 : static_cast<size_t>(options_.in_flight);
    for (size_t i = 0; i < slots; ++i) {
        Slot s;
        LOOM_ASSIGN_OR_RETURN(s.yuv_in, dev.malloc(L.bytes(), "restore: YUV frame in"));
        LOOM_ASSIGN_OR_RETURN(s.yuv_out, dev.malloc(output_.layout.bytes(), "restore: YUV frame out"));
        auto n = [i](const char* what) { return fmt::format("slot {} {}", i, what); };
        s.vdec = n("vdec");
        s.h2d = n("h2d");
        s.preprocess = n("preprocess");
        s.postprocess = n("postprocess");
        s.d2h = n("d2h");
        s.venc = n("venc");
        s.tensor_d2h = n("tensor d2h");
        s.tensor_h2d = n("tensor h2d");
        slots_.push_back(std::move(s));
    }
    if (runner_) {
        LOOM_ASSIGN_OR_RETURN(tensor_in_, dev.malloc(in_tensor_.bytes(), "restore: tiled frame tensor in"));
        LOOM_ASSIGN_OR_RETURN(tensor_out_, dev.malloc(out_tensor_.bytes(), "restore: tiled frame tensor out"));
        host_in_ = compiler::HostTensor(in_tensor_.dtype, {1, 3, L.height, L.width});
        tiled_stream_ = dev.create_stream();
        slots_[0].stream = tiled_stream_;
    }
    // What this engine took (others preparing at once on a shared device blur it; the weights
    // count only when this engine uploaded them).
    const size_t memory_after = dev.stats().memory_used;
    const size_t taken = memory_after > memory_before ? memory_after - memory_before : 0;
    device_memory_reserved_ = taken - std::min(taken, weights_shared_ ? 0 : weight_bytes_);
    pending_.resize(static_cast<size_t>(options_.in_flight) + 2);
    outputs_ = std::make_shared<OutputBuffers>();
    return {};
}

// Normalisation and channel order: the options', else the descriptor's, else identity / RGB.
void Engine::set_normalisation(const std::optional<compiler::ModelDescriptor>& descriptor) {
    for (device::TensorFormat* t : {&in_tensor_, &out_tensor_}) {
        const bool in = t == &in_tensor_;
        for (size_t c = 0; c < 3; ++c) {
            t->mean[c] = options_.mean ? (*options_.mean)[c] : 0.0f;
            t->std[c] = options_.std ? (*options_.std)[c] : 1.0f;
        }
        t->order = options_.order.value_or(device::ChannelOrder::RGB);
        if (!descriptor) continue;
        const compiler::ModelDescriptor& d = *descriptor;
        const double lo = in ? d.input_min : d.output_min, hi = in ? d.input_max : d.output_max;
        for (size_t c = 0; c < 3 && !options_.mean && !options_.std; ++c) {
            t->mean[c] = static_cast<float>(-lo / (hi - lo));
            t->std[c] = static_cast<float>(1.0 / (hi - lo));
        }
        if (!options_.order)
            t->order = d.order == compiler::PixelOrder::BGR ? device::ChannelOrder::BGR : device::ChannelOrder::RGB;
    }
}

// A compiled model file (.loom): compiled for one frame size, device and precision, whole frames
// only. Loaded once per context (its weights shared like a compiled model's), checked against
// the device and the frame; its descriptor gives the normalisation.
Status Engine::prepare_compiled(std::vector<int64_t>& out_dims) {
    const ModelRequest& r = options_.model;
    const FrameLayout& L = input_.layout;
    device::Device& dev = context_->device();
    if (options_.tile > 0)
        return make_error(StatusCode::UNSUPPORTED,
                          "{}: {} is compiled for whole frames of one size: tile {} needs the model itself (.onnx, "
                          ".param or a name)",
                          r.where, model_path_, options_.tile);
    // The file as it is now is the model's identity in the context's cache.
    std::error_code ec;
    const auto bytes = fs::file_size(model_path_, ec);
    const auto written = fs::last_write_time(model_path_, ec).time_since_epoch().count();
    const std::string key = fmt::format("file:{}:{}:{}", fs::absolute(model_path_).string(), bytes, written);
    auto build = [&]() -> Result<std::shared_ptr<const compiler::CompiledModel>> {
        LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel m, compiler::load_compiled_model(model_path_));
        LOOM_TRY(compiler::check_compatible(m, dev.spec(), model_path_));
        if (m.mode != compiler::ExecMode::SINK)
            return make_error(StatusCode::UNSUPPORTED, "{}: compiled in {} mode; frames run sink-mode models",
                              model_path_, compiler::exec_mode_name(m.mode));
        if (m.inputs.size() != 1 || m.outputs.size() != 1)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: {} inputs and {} outputs; a restoration model takes one image and gives one",
                              model_path_, m.inputs.size(), m.outputs.size());
        return std::make_shared<const compiler::CompiledModel>(std::move(m));
    };
    Result<SharedModel> got = context_->model(key, build);
    if (!got.ok()) return got.status().with_context(r.where);
    SharedModel shared = std::move(*got);
    const compiler::CompiledModel& m = shared.loaded->model();
    const std::vector<int64_t>& in = m.tensors[static_cast<size_t>(m.inputs[0])].dims;
    if (in != std::vector<int64_t>{1, 3, L.height, L.width})
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: {} is compiled for {} ({}); the frames are {}x{}: compile it for them (loomc compile "
                          "--restore --shape 1,3,{},{}) or name the model itself",
                          r.where, model_path_, compiler::shape_str(compiler::shape_of(in)),
                          in.size() == 4 ? fmt::format("{}x{} frames", in[3], in[2]) : std::string("no frame size"),
                          L.width, L.height, L.height, L.width);
    if (r.precision != m.precision)
        log::info("restore", "{}: compiled at {}, which it keeps (precision {} is for models compiled here)",
                  model_path_, compiler::precision_name(m.precision), compiler::precision_name(r.precision));
    if (r.restore && m.descriptor) {
        set_normalisation(m.descriptor);
        descriptor_ = m.descriptor;
    }
    return adopt(std::move(shared), "off (compiled file)", out_dims);
}

// The model compiled for the whole frame (through the context's model cache), in a
// FrameScheduler of in_flight slots.
Status Engine::prepare_whole(compiler::Graph g, std::vector<int64_t>& out_dims) {
    const ModelRequest& r = options_.model;
    const FrameLayout& L = input_.layout;
    device::Device& dev = context_->device();
    compiler::CompileOptions o;
    o.precision = r.precision;
    o.tiling_source = tilings_;
    o.measure_host = r.measure_host;
    o.pool = &context_->pool();
    o.shapes.emplace_back(g.value(g.inputs[0]).name, std::vector<int64_t>{1, 3, L.height, L.width});
    // What the compiled model depends on: the source graph (descriptor applied), every option
    // that shapes it, the device.
    const std::string key = fmt::format("{:016x}-{:016x}-{:016x}", compiler::graph_hash(g),
                                        compiler::CompileCache::options_hash(g, o), dev.spec().hash());
    const std::string cache_dir = r.cache_dir;
    std::string outcome;
    auto build = [&]() -> Result<std::shared_ptr<const compiler::CompiledModel>> {
        compiler::CompiledModel compiled;
        if (!cache_dir.empty()) {
            LOOM_ASSIGN_OR_RETURN(compiler::CacheResult c,
                                  compiler::CompileCache(cache_dir).compile(std::move(g), o, dev.spec()));
            log::info("restore", "{} for {}x{} ({}): compile cache {}{}", model_path_, L.width, L.height,
                      compiler::precision_name(r.precision), compiler::cache_outcome_name(c.outcome),
                      c.reason.empty() ? "" : " (" + c.reason + ")");
            compiled = std::move(c.model);
            outcome = std::string(compiler::cache_outcome_name(c.outcome));
        } else {
            LOOM_ASSIGN_OR_RETURN(compiled, compiler::compile_graph(std::move(g), o, dev.spec()));
            outcome = "off";
        }
        return std::make_shared<const compiler::CompiledModel>(std::move(compiled));
    };
    LOOM_ASSIGN_OR_RETURN(SharedModel shared, context_->model(key, build));
    return adopt(std::move(shared), outcome, out_dims);
}

// Runs a loaded model on whole frames: a FrameScheduler of in_flight slots.
Status Engine::adopt(SharedModel shared, const std::string& outcome, std::vector<int64_t>& out_dims) {
    const FrameLayout& L = input_.layout;
    loaded_ = std::move(shared.loaded);
    weights_shared_ = shared.reused;
    weight_bytes_ = loaded_->weights().bytes();
    cache_outcome_ = shared.reused ? "shared" : outcome;
    if (shared.reused)
        log::info("restore", "{} for {}x{}: weights shared with another engine on the device ({} bytes)", model_path_,
                  L.width, L.height, weight_bytes_);
    const compiler::CompiledModel& m = loaded_->model();
    in_tensor_.dtype = m.tensors[static_cast<size_t>(m.inputs[0])].dtype;
    out_tensor_.dtype = m.tensors[static_cast<size_t>(m.outputs[0])].dtype;
    out_dims = m.tensors[static_cast<size_t>(m.outputs[0])].dims;
    // tile 0 (the engine's choice): as many frames in flight as the device's memory holds, up
    // to in_flight, before tiles; tile -1 (whole frames as asked): in_flight or nothing.
    executor::FrameSchedulerOptions po;
    const size_t asked = static_cast<size_t>(options_.in_flight);
    for (po.in_flight = asked;; --po.in_flight) {
        auto scheduler = executor::FrameScheduler::create(loaded_, po);
        if (scheduler.ok()) {
            frames_ = std::move(scheduler).value();
            break;
        }
        if (scheduler.status().code() != StatusCode::OUT_OF_DEVICE_MEMORY || options_.tile != 0 || po.in_flight == 1)
            return scheduler.status();
        log::info("restore", "{} at {}x{}: {} frames in flight do not fit ({}); trying {}", model_path_, L.width,
                  L.height, po.in_flight, scheduler.status().message(), po.in_flight - 1);
    }
    if (po.in_flight < asked) {
        log::warn("restore", "{} at {}x{}: {} of the {} frames in flight asked fit in the device's memory; running {}",
                  model_path_, L.width, L.height, po.in_flight, asked, po.in_flight);
        options_.in_flight = static_cast<int64_t>(po.in_flight);
    }
    return {};
}

// The model compiled for one window and run over tiles of each frame (step 0: from memory).
Status Engine::prepare_tiled(compiler::Graph g, int64_t step, std::vector<int64_t>& out_dims) {
    const FrameLayout& L = input_.layout;
    executor::TiledOptions to;
    to.tile = step;
    to.carry_bytes = options_.tile_carry_bytes;
    to.precision = options_.model.precision;
    to.tiling_source = tilings_;
    to.measure_host = options_.model.measure_host;
    to.restore = g.descriptor.has_value();
    if (to.restore) {
        descriptor_ = *g.descriptor;
        descriptor_->applied = true;  // by the runner, around the tiles
    }
    LOOM_ASSIGN_OR_RETURN(
        runner_, executor::TiledRunner::create(context_->device(), std::move(g), {1, 3, L.height, L.width}, to));
    in_tensor_.dtype = runner_->frame_dtype();
    out_tensor_.dtype = runner_->frame_dtype();
    out_dims = runner_->output_dims().at(0);
    cache_outcome_ = "off (tiled)";
    log::info("restore", "{} at {}x{} in {} tiles of {}x{}, {} pass{} over them", model_path_, L.width, L.height,
              runner_->plan().tiles(), runner_->plan().w.window, runner_->plan().h.window,
              runner_->tiling().reductions.size() + 1, runner_->tiling().reductions.empty() ? "" : "es");
    if (!runner_->carry_note().empty()) log::info("restore", "{}: {}", model_path_, runner_->carry_note());
    return {};
}

// Preprocessing: the decoder's time, the upload of the YUV frame and the media engine's
// conversion into `tensor`.
Status Engine::enqueue_preprocess(device::Stream& st, const FrameView& in, size_t slot,
                                  device::DevicePtr<uint8_t> tensor) {
    const Slot& s = slots_[slot];
    LOOM_TRY(st.video_decode(in.layout.width, in.layout.height, s.vdec));
    LOOM_TRY(upload_frame(st, in, s.yuv_in.as<uint8_t>(), s.h2d));
    return st.media_frame_to_tensor(s.yuv_in.as<uint8_t>(), in.layout, input_.color, tensor, in_tensor_, s.preprocess);
}

// Postprocessing: the conversion back to YUV, the download into `dst`, the encoder's time, and
// the callback that completes frame `seq`.
Status Engine::enqueue_postprocess(device::Stream& st, device::DevicePtr<const uint8_t> tensor, size_t slot,
                                   uint8_t* dst, uint64_t seq) {
    const Slot& s = slots_[slot];
    const FrameLayout& O = output_.layout;
    LOOM_TRY(st.media_tensor_to_frame(tensor, out_tensor_, s.yuv_out.as<uint8_t>(), O, output_.color, s.postprocess));
    LOOM_TRY(st.copy_d2h(device::HostView<uint8_t>(dst, O.bytes(), true),
                         device::DevicePtr<const uint8_t>(s.yuv_out.as<uint8_t>()), s.d2h));
    LOOM_TRY(st.video_encode(O.width, O.height, s.venc));
    return st.add_callback([this, seq](Status status) { complete(seq, std::move(status)); });
}

Status Engine::submit_whole(const FrameView& in, uint8_t* dst, uint64_t seq) {
    bool completion_added = false;
    const executor::SlotWork before = [&](const executor::SlotIo& io) {
        Slot& s = slots_[io.slot];
        {
            std::lock_guard lock(mutex_);
            if (!s.stream.valid()) s.stream = *io.stream;
            // abandon() may have come while this submit waited for the slot.
            if (abandoned_) return make_error(StatusCode::CANCELLED, "{}: the engine was abandoned", model_path_);
        }
        return enqueue_preprocess(*io.stream, in, io.slot, io.inputs[0]);
    };
    const executor::SlotWork after = [&](const executor::SlotIo& io) {
        LOOM_TRY(enqueue_postprocess(*io.stream, io.outputs[0], io.slot, dst, seq));
        completion_added = true;
        return Status();
    };
    LOOM_ASSIGN_OR_RETURN(executor::FrameFuture future, frames_->submit_device(before, after));
    if (completion_added) return {};
    // `before` or `after` failed part-way: the frame's error comes with its inference.
    auto r = future.get();
    return r.ok() ? Status(StatusCode::INTERNAL, "not submitted") : r.status();
}

// A tiled frame: the converted frame comes down for the runner to cut its windows from (on the
// host), and the assembled output goes back up for postprocessing.
Status Engine::submit_tiled(const FrameView& in, uint8_t* dst, uint64_t seq) {
    device::Stream& st = tiled_stream_;
    const Slot& s = slots_[0];
    // The previous frame's device error (already handed to its completion) must not fail this
    // one: the stream keeps an error until it is synchronized.
    (void)st.synchronize();
    {
        std::lock_guard lock(mutex_);
        if (abandoned_) return make_error(StatusCode::CANCELLED, "{}: the engine was abandoned", model_path_);
    }
    LOOM_TRY(enqueue_preprocess(st, in, 0, tensor_in_.as<uint8_t>()));
    LOOM_TRY(st.copy_d2h(device::HostView<uint8_t>(static_cast<uint8_t*>(host_in_.data()), host_in_.bytes(), false),
                         device::DevicePtr<const uint8_t>(tensor_in_.as<uint8_t>()), s.tensor_d2h));
    LOOM_TRY(st.synchronize());
    LOOM_ASSIGN_OR_RETURN(std::vector<compiler::HostTensor> outs, runner_->run(host_in_));
    host_out_ = std::move(outs.at(0));  // kept until the upload below has run
    LOOM_TRY(st.copy_h2d(
        tensor_out_.as<uint8_t>(),
        device::HostView<const uint8_t>(static_cast<const uint8_t*>(host_out_.data()), host_out_.bytes(), false),
        s.tensor_h2d));
    return enqueue_postprocess(st, tensor_out_.as<uint8_t>(), 0, dst, seq);
}

Status Engine::submit(const FrameView& frame, Completion done, uint8_t* dst, uint64_t tag) {
    LOOM_ASSERT(done);
    LOOM_TRY(frame.check().with_context(model_path_));
    if (frame.layout != input_.layout)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: a {}x{} {} frame into an engine prepared for {}x{} {}",
                          model_path_, frame.layout.width, frame.layout.height, pixel_format_name(frame.layout.format),
                          input_.layout.width, input_.layout.height, pixel_format_name(input_.layout.format));
    std::shared_ptr<const void> buffer;
    if (!dst) {
        // One of the engine's buffers; the view that carries it gives it back when dropped.
        OutputBuffers& ob = *outputs_;
        std::unique_lock lock(ob.mutex);
        const size_t count = options_.output_buffers ? options_.output_buffers
                                                     : static_cast<size_t>(options_.in_flight) + 1;
        if (ob.buffers.empty())
            for (size_t i = 0; i < count; ++i) {
                ob.buffers.emplace_back(output_.layout.bytes());
                ob.free.push_back(i);
            }
        ob.cv.wait(lock, [&] { return !ob.free.empty() || ob.aborted; });
        if (ob.aborted) return make_error(StatusCode::CANCELLED, "{}: the engine was abandoned", model_path_);
        const size_t i = ob.free.back();
        ob.free.pop_back();
        dst = ob.buffers[i].data();
        std::shared_ptr<OutputBuffers> keep = outputs_;
        buffer = std::shared_ptr<const void>(dst, [keep, i](const void*) {
            {
                std::lock_guard l(keep->mutex);
                keep->free.push_back(i);
            }
            keep->cv.notify_one();
        });
    }
    uint64_t seq;
    {
        std::unique_lock lock(mutex_);
        if (abandoned_) return make_error(StatusCode::CANCELLED, "{}: the engine was abandoned", model_path_);
        seq = next_seq_;
        // The entry of the frame pending_.size() before this one must have completed.
        cv_.wait(lock, [&] { return !pending_[seq % pending_.size()].used || abandoned_; });
        if (abandoned_) return make_error(StatusCode::CANCELLED, "{}: the engine was abandoned", model_path_);
        Pending& p = pending_[seq % pending_.size()];
        p.used = true;
        p.done = false;
        p.input = frame;
        p.completion = std::move(done);
        p.dst = dst;
        p.buffer = std::move(buffer);
        p.tag = tag;
        p.status = Status();
        if (seq == 0) sim_first_ = context_->device().stats().host_now;
    }
    Status st = runner_ ? submit_tiled(frame, dst, seq) : submit_whole(frame, dst, seq);
    std::lock_guard lock(mutex_);
    if (!st.ok()) {
        // Nothing will complete it: the entry is free again and the sequence number unused.
        Pending& p = pending_[seq % pending_.size()];
        p = Pending();
        return st.with_context(fmt::format("{}: frame {}", model_path_, seq));
    }
    ++next_seq_;
    h2d_bytes_ += frame.layout.bytes();
    d2h_bytes_ += output_.layout.bytes();
    return {};
}

// A frame's device work has run (a pool thread, from its stream's callback): complete every
// frame in order up to the first one still on the device.
void Engine::complete(uint64_t seq, Status st) {
    std::unique_lock lock(mutex_);
    Pending& p = pending_[seq % pending_.size()];
    p.status = std::move(st);
    p.done = true;
    if (completing_) return;  // the thread completing frames now will see it
    completing_ = true;
    for (;;) {
        Pending& h = pending_[next_complete_ % pending_.size()];
        if (!h.used || !h.done) break;
        RestoredFrame out;
        out.sequence = next_complete_;
        out.tag = h.tag;
        out.status = std::move(h.status);
        if (out.status.ok()) {
            out.view = FrameView::tight(output_.layout, h.dst, true, std::move(h.buffer));
        } else {
            ++failed_;
        }
        Completion done = std::move(h.completion);
        h = Pending();
        ++next_complete_;
        cv_.notify_all();  // a submit waiting for this entry goes on now, not after the whole run
        lock.unlock();
        done(std::move(out));
        lock.lock();
    }
    completing_ = false;
    cv_.notify_all();
}

void Engine::flush() {
    if (frames_) frames_->flush();
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return next_complete_ >= next_seq_ && !completing_; });
}

void Engine::abandon() {
    std::vector<device::Stream> streams;
    {
        std::lock_guard lock(mutex_);
        abandoned_ = true;
        for (const Slot& s : slots_)
            if (s.stream.valid()) streams.push_back(s.stream);
    }
    for (device::Stream& s : streams) s.abort();
    if (outputs_) {
        {
            std::lock_guard l(outputs_->mutex);
            outputs_->aborted = true;
        }
        outputs_->cv.notify_all();
    }
    cv_.notify_all();
}

Result<compiler::HostTensor> Engine::restore_tensor(const compiler::HostTensor& frame, double* sim_ms) {
    {
        std::lock_guard lock(mutex_);
        if (abandoned_) return make_error(StatusCode::CANCELLED, "{}: the engine was abandoned", model_path_);
        LOOM_ASSERT_MSG(next_complete_ >= next_seq_, "restore_tensor with frames in flight");
    }
    if (runner_) {
        executor::TiledStats ts;
        LOOM_ASSIGN_OR_RETURN(std::vector<compiler::HostTensor> outs, runner_->run(frame, &ts));
        if (sim_ms) *sim_ms = ts.sim_ms;
        return std::move(outs.at(0));
    }
    LOOM_ASSIGN_OR_RETURN(executor::FrameFuture future, frames_->submit(std::span(&frame, 1)));
    executor::FrameStats fs;
    LOOM_ASSIGN_OR_RETURN(std::vector<compiler::HostTensor> outs, future.get(&fs));
    if (sim_ms) *sim_ms = fs.sim_end_ms - fs.sim_start_ms;
    return std::move(outs.at(0));
}

std::string Engine::output_name() const {
    const compiler::CompiledModel& m = runner_ ? runner_->model() : loaded_->model();
    return m.tensors[static_cast<size_t>(m.outputs[0])].name;
}

EngineStats Engine::stats() const {
    EngineStats s;
    device::SimTime first = 0;
    {
        std::lock_guard lock(mutex_);
        s.frames_submitted = next_seq_;
        s.frames_completed = next_complete_;
        s.frames_failed = failed_;
        s.h2d_bytes = h2d_bytes_;
        s.d2h_bytes = d2h_bytes_;
        first = sim_first_;
    }
    // The device's clock now: after flush() the engine's last frame has ended (on a shared device
    // later work of other engines counts too), so completions need not read the clock.
    const device::SimTime now = context_->device().stats().sim_now;
    if (s.frames_completed > 0 && now > first) s.sim_ms = device::sim_to_ms(now - first);
    s.sim_fps = s.sim_ms > 0 ? static_cast<double>(s.frames_completed) * 1e3 / s.sim_ms : 0.0;
    if (frames_) {
        const executor::FrameSchedulerStats f = frames_->stats();
        s.inferences = f.inferences;
        s.slot_waits = f.submits_blocked;
    }
    s.device_memory_reserved = device_memory_reserved_;
    s.weight_bytes = weight_bytes_;
    s.weights_shared = weights_shared_;
    return s;
}

nlohmann::json Engine::describe() const {
    nlohmann::json out;
    out["model"] = model_path_;
    out["precision"] = std::string(compiler::precision_name(options_.model.precision));
    out["compile_cache"] = cache_outcome_;
    if (tilings_) out["kb"] = {{"path", kb_path_}, {"records", kb_records_}};
    out["scale"] = scale_;
    if (descriptor_) out["descriptor"] = compiler::descriptor_json(*descriptor_);
    out["in_flight"] = runner_ ? 1 : options_.in_flight;  // tiled frames run one at a time
    out["output_size"] = {output_.layout.width, output_.layout.height};
    out["output_pixel_format"] = pixel_format_name(output_.layout.format);
    out["output_matrix"] = color_matrix_name(output_.color.matrix);
    out["output_range"] = color_range_name(output_.color.range);
    if (runner_) {
        out["tiles"] = runner_->plan().tiles();
        out["tile_window"] = {runner_->plan().w.window, runner_->plan().h.window};
        // One pass over the tiles per mean over the frame (squeeze-and-excitation), then the output's.
        out["tile_passes"] = runner_->tiling().reductions.size() + 1;
        out["tile_carried_mib"] = static_cast<double>(runner_->carried_bytes()) / 1048576.0;
        // Where the passes keep what they hand on: device memory (no copies) or the host.
        if (runner_->carried()) out["tile_carried_in"] = runner_->carried_on_device() ? "device" : "host";
    }
    return out;
}

}  // namespace loom::restore
