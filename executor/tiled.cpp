#include "executor/tiled.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/thread_pool.hpp"
#include "compiler/measure.hpp"
#include "compiler/ops.hpp"
#include "compiler/passes.hpp"
#include "device/kernels/cpu/exact_sum.hpp"
#include "device/kernels/cpu/vmath.hpp"

namespace loom::executor {

using compiler::Graph;
using compiler::SpatialTiling;

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The input pixels of a window that give no output of its own (tiled.hpp: e).
int64_t window_excess(const SpatialTiling& t, size_t axis) {
    const int64_t border = (t.shrink[axis] + t.scale - 1) / t.scale;
    return std::max(t.lead + t.trail + border, t.overlap[axis]);
}

// Windows an axis of `frame` pixels needs at step `step` (a multiple of t.align).
size_t window_count(int64_t frame, int64_t step, const SpatialTiling& t, size_t axis) {
    const int64_t e = window_excess(t, axis);
    if (frame <= step + e) return 1;
    const int64_t window = step + e + (frame - step - e) % t.align;
    return static_cast<size_t>((frame - window + step - 1) / step + 1);
}

std::string dims_str(const std::vector<int64_t>& dims) { return fmt::format("{}", fmt::join(dims, "x")); }

// Bytes of a device allocation of `bytes`, rounded to the device's allocation alignment.
int64_t allocated_bytes(int64_t bytes, const device::DeviceSpec& spec) {
    return round_up(std::max<int64_t>(bytes, 64), std::max<int64_t>(spec.memory_alignment_bytes, 1));
}

// The host memory available now (MemAvailable), or 0 when it cannot be read.
int64_t host_available_bytes() {
    std::FILE* f = std::fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    long long kib = 0;
    while (std::fgets(line, sizeof line, f))
        if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
    std::fclose(f);
    return static_cast<int64_t>(kib) * 1024;
}

// Host bytes that live tiled runners keep between their passes (TiledRunner::host_carry_promised):
// a runner that takes the default budget counts what the others promised themselves, so that
// concurrent jobs do not each take half of the same free memory.
std::atomic<int64_t> g_host_carry{0};

}  // namespace

HostTensor pad_frame(const HostTensor& frame, const compiler::ModelDescriptor& d, const compiler::FramePadding& p) {
    HostTensor out;
    pad_frame(frame, d, p, out);
    return out;
}

void pad_frame(const HostTensor& frame, const compiler::ModelDescriptor& d, const compiler::FramePadding& p,
               HostTensor& out) {
    LOOM_ASSERT(frame.dims().size() == 4);
    const int64_t planes = frame.dims()[0] * frame.dims()[1], H = frame.dims()[2], W = frame.dims()[3];
    const int64_t PH = H + p.top + p.bottom, PW = W + p.left + p.right;
    const std::vector<int64_t> dims{frame.dims()[0], frame.dims()[1], PH, PW};
    if (out.dtype() != frame.dtype() || out.dims() != dims || out.shared() || !out.data())
        out = HostTensor(frame.dtype(), dims);
    const size_t es = device::dtype_size(frame.dtype());
    // The source index of padded position i of an axis of n pixels, or -1 outside (ZERO).
    auto source = [&](int64_t i, int64_t n) -> int64_t {
        if (i >= 0 && i < n) return i;
        switch (d.border) {
            case compiler::BorderMode::REPLICATE: return std::clamp<int64_t>(i, 0, n - 1);
            case compiler::BorderMode::REFLECT: return i < 0 ? -i : 2 * (n - 1) - i;
            case compiler::BorderMode::ZERO: return -1;
        }
        return -1;
    };
    std::vector<int64_t> xs(static_cast<size_t>(PW));
    for (int64_t x = 0; x < PW; ++x) xs[static_cast<size_t>(x)] = source(x - p.left, W);
    const auto* src = static_cast<const std::byte*>(frame.data());
    auto* dst = static_cast<std::byte*>(out.data());
    // Every position is written (a recycled `out` holds an earlier frame): the frame's row in
    // one copy, the border pixel by pixel, ZERO's fill as zeros.
    for (int64_t plane = 0; plane < planes; ++plane)
        for (int64_t y = 0; y < PH; ++y) {
            std::byte* row = dst + static_cast<size_t>((plane * PH + y) * PW) * es;
            const int64_t sy = source(y - p.top, H);
            if (sy < 0) {
                std::memset(row, 0, static_cast<size_t>(PW) * es);
                continue;
            }
            LOOM_ASSERT(sy < H);
            const std::byte* from = src + static_cast<size_t>((plane * H + sy) * W) * es;
            std::memcpy(row + static_cast<size_t>(p.left) * es, from, static_cast<size_t>(W) * es);
            auto border = [&](int64_t x) {
                const int64_t sx = xs[static_cast<size_t>(x)];
                LOOM_ASSERT(sx < W);
                if (sx < 0) std::memset(row + static_cast<size_t>(x) * es, 0, es);
                else std::memcpy(row + static_cast<size_t>(x) * es, from + static_cast<size_t>(sx) * es, es);
            };
            for (int64_t x = 0; x < p.left; ++x) border(x);
            for (int64_t x = p.left + W; x < PW; ++x) border(x);
        }
}

HostTensor finish_restore(const HostTensor& network_out, const HostTensor& frame, const compiler::ModelDescriptor& d) {
    const int64_t n = frame.dims()[0], c = network_out.dims()[1], H = frame.dims()[2], W = frame.dims()[3];
    const int64_t s = d.scale, OH = network_out.dims()[2], OW = network_out.dims()[3];
    LOOM_ASSERT(OH >= d.crop + s * H && OW >= d.crop + s * W);
    HostTensor out(network_out.dtype(), {n, c, s * H, s * W});
    const size_t es = device::dtype_size(out.dtype());
    const auto* src = static_cast<const std::byte*>(network_out.data());
    auto* dst = static_cast<std::byte*>(out.data());
    for (int64_t plane = 0; plane < n * c; ++plane)
        for (int64_t y = 0; y < s * H; ++y)
            std::memcpy(dst + static_cast<size_t>((plane * s * H + y) * s * W) * es,
                        src + static_cast<size_t>((plane * OH + d.crop + y) * OW + d.crop) * es,
                        static_cast<size_t>(s * W) * es);
    if (d.residual == compiler::ResidualMode::NEAREST) {
        LOOM_ASSERT(frame.dims()[1] == c && frame.dtype() == out.dtype());
        auto add = [&](auto* o, const auto* in) {
            for (int64_t plane = 0; plane < n * c; ++plane)
                for (int64_t y = 0; y < s * H; ++y)
                    for (int64_t x = 0; x < s * W; ++x) {
                        const int64_t i = (plane * s * H + y) * s * W + x;
                        const float v = device::load_as_f32(o, i) + device::load_as_f32(in, (plane * H + y / s) * W + x / s);
                        device::store_from_f32(o, i, v);
                    }
        };
        if (out.dtype() == compiler::DType::F16) add(out.as<device::f16>(), frame.as<device::f16>());
        else add(out.as<float>(), frame.as<float>());
    }
    return out;
}

TileAxis plan_tile_axis(int64_t frame, int64_t step, const SpatialTiling& t, size_t axis) {
    LOOM_ASSERT_MSG(frame > 0 && step > 0 && t.align > 0 && t.lead >= 0 && t.trail >= 0 && axis < 2 && t.scale > 0,
                    "frame {}, step {}, align {}, lead {}, trail {}, axis {}", frame, step, t.align, t.lead, t.trail,
                    axis);
    TileAxis a;
    a.frame = frame;
    a.step = round_up(step, t.align);
    a.halo = t.halo;
    const int64_t e = window_excess(t, axis), s = t.scale, out = s * frame - t.shrink[axis];
    if (frame <= a.step + e) {
        a.window = frame;
        a.origins = {0};
        a.cuts = {0, out};
        return a;
    }
    // frame - window is a multiple of align, so the last origin (frame - window) is one too.
    a.window = a.step + e + (frame - a.step - e) % t.align;
    const size_t n = window_count(frame, a.step, t, axis);
    a.cuts.push_back(0);
    for (size_t i = 0; i < n; ++i) {
        const int64_t at = static_cast<int64_t>(i) * a.step;
        a.origins.push_back(std::min(at, frame - a.window));
        if (i > 0) a.cuts.push_back(s * (at + t.lead));
    }
    a.cuts.push_back(out);
    return a;
}

int64_t balance_tile_step(int64_t frame, int64_t step, const SpatialTiling& t, size_t axis) {
    step = round_up(step, t.align);
    const size_t n = window_count(frame, step, t, axis);
    // The count does not grow with the step: find the smallest step with at most n windows.
    int64_t lo = 1, hi = step / t.align;
    while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if (window_count(frame, mid * t.align, t, axis) <= n) hi = mid;
        else lo = mid + 1;
    }
    return lo * t.align;
}

namespace {

// The model for pass k over the tiles (tiled.hpp): the window's graph `w` with the means before
// the k-th given as inputs (their nodes removed) and, for k below the reduction count, the k-th
// mean's map as its one output. `a` is the analysed graph, which types the means.
Result<Graph> stage_graph(const Graph& w, const Graph& a, const SpatialTiling& t, size_t k) {
    Graph v = w;
    const size_t given = std::min(k, t.reductions.size());
    for (size_t j = 0; j < given; ++j) {
        const compiler::FrameReduction& r = t.reductions[j];
        auto it = std::find_if(v.nodes.begin(), v.nodes.end(),
                               [&](const compiler::Node& n) { return n.name == r.node; });
        const int typed = a.find_value(r.output);
        if (it == v.nodes.end() || it->outputs.size() != 1 || typed < 0)
            return make_error(StatusCode::INTERNAL, "{}: the mean '{}' is not in the model", w.source, r.node);
        const int out = it->outputs[0];
        v.nodes.erase(it);
        compiler::Value& mean = v.value(out);
        mean.dtype = a.value(typed).dtype;
        mean.shape = a.value(typed).shape;
        mean.typed = true;
        v.inputs.push_back(out);
    }
    if (k < t.reductions.size()) {
        const int map = v.find_value(t.reductions[k].input);
        if (map < 0)
            return make_error(StatusCode::INTERNAL, "{}: the map '{}' is not in the model", w.source,
                              t.reductions[k].input);
        v.outputs = {map};
    }
    compiler::eliminate_dead_code(v);
    return v;
}

// The passes when the values a pass hands on are kept on the host (TiledOptions::carry_bytes):
// `fw`, the window's graph folded at the window's shape, cut at the means. A node belongs to
// pass k when the latest mean it depends on is the k-th (k = 0: none); pass k reads the window,
// the means and what earlier passes made, and gives the k-th mean's map, what later passes read
// and the model's outputs it makes. keep[k] lists what a tile keeps after pass k.
struct CarrySplit {
    std::vector<Graph> graphs;
    std::vector<std::vector<std::string>> keep;
};

Result<CarrySplit> split_at_means(const Graph& fw, const SpatialTiling& t) {
    const size_t L = t.reductions.size();
    std::vector<int> level(fw.values.size(), -1);  // -1: a constant
    level[static_cast<size_t>(fw.inputs[0])] = 0;
    std::vector<int> node_level(fw.nodes.size(), -1);  // -1: a mean, computed by the runner
    for (size_t i = 0; i < fw.nodes.size(); ++i) {
        const compiler::Node& n = fw.nodes[i];
        int mean = -1;
        for (size_t j = 0; j < L; ++j)
            if (t.reductions[j].node == n.name) mean = static_cast<int>(j);
        if (mean >= 0) {
            if (n.outputs.size() != 1)
                return make_error(StatusCode::INTERNAL, "{}: the mean '{}' has {} outputs", fw.source, n.name,
                                  n.outputs.size());
            level[static_cast<size_t>(n.outputs[0])] = mean + 1;
            continue;
        }
        int l = 0;
        for (int v : n.inputs)
            if (v >= 0) l = std::max(l, level[static_cast<size_t>(v)]);
        node_level[i] = l;
        for (int o : n.outputs) level[static_cast<size_t>(o)] = l;
    }
    // The last pass each value is read in (L + 1: the final assembly; maps of later means too).
    std::vector<int> last_read(fw.values.size(), -1);
    for (size_t i = 0; i < fw.nodes.size(); ++i)
        if (node_level[i] >= 0)
            for (int v : fw.nodes[i].inputs)
                if (v >= 0)
                    last_read[static_cast<size_t>(v)] = std::max(last_read[static_cast<size_t>(v)], node_level[i]);
    for (size_t j = 0; j < L; ++j) {
        const int map = fw.find_value(t.reductions[j].input);
        if (map < 0)
            return make_error(StatusCode::INTERNAL, "{}: the map '{}' is not in the model", fw.source,
                              t.reductions[j].input);
        last_read[static_cast<size_t>(map)] = std::max(last_read[static_cast<size_t>(map)], static_cast<int>(j));
    }
    for (int o : fw.outputs) last_read[static_cast<size_t>(o)] = static_cast<int>(L) + 1;

    CarrySplit split;
    for (size_t k = 0; k <= L; ++k) {
        Graph v = fw;
        std::vector<compiler::Node> nodes;
        std::vector<bool> made(fw.values.size(), false), read(fw.values.size(), false);
        for (size_t i = 0; i < fw.nodes.size(); ++i) {
            if (node_level[i] != static_cast<int>(k)) continue;
            nodes.push_back(fw.nodes[i]);
            for (int o : fw.nodes[i].outputs) made[static_cast<size_t>(o)] = true;
            for (int in : fw.nodes[i].inputs)
                if (in >= 0) read[static_cast<size_t>(in)] = true;
        }
        v.nodes = std::move(nodes);
        v.inputs.clear();
        v.outputs.clear();
        std::vector<std::string> keep;
        for (size_t id = 0; id < fw.values.size(); ++id) {
            const compiler::Value& val = fw.values[id];
            if (read[id] && !made[id] && !val.is_constant()) v.inputs.push_back(static_cast<int>(id));
            if (made[id] && last_read[id] >= static_cast<int>(k) &&
                (last_read[id] > static_cast<int>(k) || (k < L && val.name == t.reductions[k].input)))
                v.outputs.push_back(static_cast<int>(id));
            // Kept after this pass: made here or before, read in a later pass or the assembly.
            if (level[id] >= 0 && level[id] <= static_cast<int>(k) && last_read[id] > static_cast<int>(k) &&
                !val.is_constant() && static_cast<int>(id) != fw.inputs[0]) {
                bool mean = false;
                for (const compiler::FrameReduction& r : t.reductions) mean = mean || r.output == val.name;
                if (!mean) keep.push_back(val.name);
            }
        }
        if (v.outputs.empty())
            return make_error(StatusCode::INTERNAL, "{}: pass {} of the carried split gives nothing", fw.source, k);
        LOOM_TRY(v.topo_sort().with_context(fmt::format("{}: pass {}", fw.source, k)));
        split.graphs.push_back(std::move(v));
        split.keep.push_back(std::move(keep));
    }
    return split;
}

// Pixels [x0, x1) of row y of plane `plane` of the NCHW map `t` (f32 or f16), as floats into `out`.
void rows_as_f32(const HostTensor& t, int64_t plane, int64_t y, int64_t x0, int64_t x1, float* out) {
    const int64_t h = t.dims()[2], w = t.dims()[3];
    const int64_t at = (plane * h + y) * w + x0;
    if (t.dtype() == compiler::DType::F16) {
        device::cpu::vec_f16_to_f32(t.as<device::f16>() + at, out, x1 - x0);
    } else {
        std::memcpy(out, t.as<float>() + at, static_cast<size_t>(x1 - x0) * sizeof(float));
    }
}

}  // namespace

Result<std::unique_ptr<TiledRunner>> TiledRunner::create(device::Device& dev, Graph g, std::vector<int64_t> frame_dims,
                                                         const TiledOptions& options) {
    const std::string source = g.source;
    if (options.precision == compiler::Precision::INT8)
        return make_error(StatusCode::UNSUPPORTED,
                          "{}: tiled runs take fp32 or fp16, not '{}' (int8 calibrates per compiled shape, so tiles "
                          "would not match the untiled run)",
                          source, compiler::precision_name(options.precision));
    if (options.tile < 0) return make_error(StatusCode::INVALID_ARGUMENT, "{}: tile size {}", source, options.tile);
    if (!(options.device_memory_margin >= 0 && options.device_memory_margin < 1))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: device memory margin {} (from 0 to below 1)", source,
                          options.device_memory_margin);
    if (g.inputs.size() != 1)
        return make_error(StatusCode::UNSUPPORTED, "{}: tiling needs exactly one graph input, the model has {}", source,
                          g.inputs.size());
    if (frame_dims.size() != 4 || std::any_of(frame_dims.begin(), frame_dims.end(), [](int64_t d) { return d <= 0; }))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame {} (tiling takes an NCHW frame)", source,
                          dims_str(frame_dims));
    const std::string input = g.value(g.inputs[0]).name;
    std::optional<compiler::ModelDescriptor> restore;
    compiler::FramePadding padding;
    const std::vector<int64_t> user_dims = frame_dims;
    if (options.restore) {
        if (!g.descriptor || g.descriptor->applied)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: a tiled restore needs the model's descriptor{}", source,
                              g.descriptor ? " not yet applied" : " (none: not a known family and no sidecar)");
        if (frame_dims[2] > (int64_t{1} << 24) || frame_dims[3] > (int64_t{1} << 24))
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame {} is too large to restore", source,
                              dims_str(frame_dims));
        restore = *g.descriptor;
        padding = compiler::frame_padding(*restore, frame_dims[2], frame_dims[3]);
        if (restore->border == compiler::BorderMode::REFLECT &&
            (std::max(padding.top, padding.bottom) >= frame_dims[2] || std::max(padding.left, padding.right) >= frame_dims[3]))
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: a {}x{} frame is too small for the reflected padding of {}",
                              source, frame_dims[3], frame_dims[2], restore->prepad);
        frame_dims[2] += padding.top + padding.bottom;
        frame_dims[3] += padding.left + padding.right;
    }

    // The analysis sees the graph at the frame's shape, with what that shape makes constant
    // folded, before any fusion (a fused node mixes scales the analysis keeps apart).
    Graph a = g;
    LOOM_TRY(compiler::set_input_shapes(a, {{input, frame_dims}}).with_context(source));
    LOOM_TRY(compiler::infer_shapes(a).with_context(source));
    LOOM_TRY(compiler::fold_constants(a).status().with_context(source));
    compiler::eliminate_dead_code(a);
    if (options.measure_host) {
        // Measured on the frame, recorded on the model's own nodes (by name) for the windows.
        auto measured = compiler::measure_conv_algorithms(a, dev.pool());
        if (!measured.ok()) return measured.status().with_context(source);
        for (const compiler::MeasuredConv& m : measured->convs)
            for (compiler::Node& n : g.nodes)
                if (n.name == m.node) n.attrs.set("winograd", m.chosen);
    }
    auto analysed = compiler::analyse_spatial_tiling(a);
    if (!analysed.ok()) return analysed.status().with_context(fmt::format("{}: tiled run", source));

    std::unique_ptr<TiledRunner> r(new TiledRunner());
    r->tiling_ = *analysed;
    r->frame_dims_ = user_dims;
    r->net_dims_ = frame_dims;
    r->frame_dtype_ = a.value(a.inputs[0]).dtype;
    for (int o : a.outputs) r->net_output_dims_.push_back(compiler::shape_dims(a.value(o).shape));
    r->output_dims_ = r->net_output_dims_;
    if (restore) {
        const int64_t s = restore->scale;
        if (r->net_output_dims_.size() != 1 || r->net_output_dims_[0].size() != 4)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: a restore takes one 4-D output", source);
        const std::vector<int64_t>& nd = r->net_output_dims_[0];
        if (nd[2] < restore->crop + s * user_dims[2] || nd[3] < restore->crop + s * user_dims[3])
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: the network gives {} for the padded frame; the descriptor keeps {}x{} from ({}, {})",
                              source, dims_str(nd), s * user_dims[3], s * user_dims[2], restore->crop, restore->crop);
        r->output_dims_ = {{nd[0], nd[1], s * user_dims[2], s * user_dims[3]}};
        r->restore_ = restore;
        r->padding_ = padding;
    }
    const SpatialTiling& t = r->tiling_;

    // The window compiles with the model's fixed H and W (the frame's, checked above) made
    // symbols: the analysis shows no node depends on them.
    Graph w = std::move(g);
    compiler::Value& in = w.value(w.inputs[0]);
    if (in.typed && in.shape.size() == 4)
        for (size_t axis = 2; axis < 4; ++axis) in.shape[axis] = compiler::Dim::sym(fmt::format("tile.{}", axis));
    const size_t stage_count = t.reductions.size() + 1;
    std::vector<Graph> stage_graphs;
    for (size_t k = 0; k < stage_count; ++k) {
        LOOM_ASSIGN_OR_RETURN(Graph v, stage_graph(w, a, t, k));
        stage_graphs.push_back(std::move(v));
    }
    compiler::CompileOptions co;
    co.precision = options.precision;
    co.optimize = options.optimize;
    co.tiling_source = options.tiling_source;
    co.mode = compiler::ExecMode::SINK;
    // Every pass's model for the plan's window, and the device memory they take together: each
    // one's weights, and one arena of the largest (the passes run one after another, so their
    // sessions share it). Each input takes its own dims (a mean's, a carried value's), the
    // window the plan's.
    struct Compiled {
        std::vector<CompiledModel> models;
        int64_t arena = 0, resident = 0;
    };
    // With `handed` (the values carried from pass to pass), each stays in its producer's device
    // layout: the producing pass leaves it as its last op wrote it, and the passes that read it
    // take it in that layout (no TransData at the passes' edges).
    auto compile_all = [&](const std::vector<Graph>& graphs, const TilePlan& p,
                           const std::set<std::string>* handed = nullptr) -> Result<Compiled> {
        Compiled c;
        std::unordered_map<std::string, compiler::Layout> layouts;  // of the handed values made so far
        for (size_t k = 0; k < graphs.size(); ++k) {
            Graph gk = graphs[k];
            co.shapes.clear();
            for (int id : gk.inputs) {
                compiler::Value& v = gk.value(id);
                if (v.name == input)
                    co.shapes.push_back({input, {frame_dims[0], frame_dims[1], p.h.window, p.w.window}});
                else co.shapes.emplace_back(v.name, compiler::shape_dims(v.shape));
                if (auto it = layouts.find(v.name); it != layouts.end()) v.layout = it->second;
            }
            if (handed)
                for (int id : gk.outputs)
                    if (handed->count(gk.value(id).name)) gk.value(id).layout = compiler::Layout::NC1HWC0;
            auto m = compiler::compile_graph(std::move(gk), co, dev.spec());
            if (!m.ok())
                return k + 1 == graphs.size()
                           ? m.status()
                           : m.status().with_context(fmt::format("the pass for the mean '{}'", t.reductions[k].node));
            if (handed)
                for (int id : m->outputs) {
                    const compiler::CompiledTensor& ct = m->tensors[static_cast<size_t>(id)];
                    if (handed->count(ct.name)) layouts[ct.name] = ct.layout;
                }
            c.resident += allocated_bytes(m->weights.elements(), dev.spec());
            c.arena = std::max(c.arena, m->arena_bytes);
            c.models.push_back(std::move(*m));
        }
        c.resident += allocated_bytes(c.arena, dev.spec());
        return c;
    };
    auto compile = [&](const TilePlan& p) { return compile_all(stage_graphs, p); };
    auto plan = [&](int64_t step_h, int64_t step_w) {
        return TilePlan{plan_tile_axis(frame_dims[2], step_h, t, 0), plan_tile_axis(frame_dims[3], step_w, t, 1)};
    };
    const device::DeviceStats ds = dev.stats();
    const auto capacity = static_cast<int64_t>(ds.memory_capacity);
    const int64_t budget = capacity - static_cast<int64_t>(ds.memory_used) -
                           static_cast<int64_t>(options.device_memory_margin * static_cast<double>(capacity));

    std::optional<Compiled> compiled;
    if (options.tile > 0) {
        r->plan_ = plan(options.tile, options.tile);
        LOOM_ASSIGN_OR_RETURN(compiled, compile(r->plan_));
    } else {
        // The largest square step (in units of align) whose window fits; the device memory a
        // window takes grows with the step, so a binary search over compiles finds it.
        auto fits = [&](int64_t units, std::optional<Compiled>& out) -> Result<bool> {
            const TilePlan p = plan(units * t.align, units * t.align);
            LOOM_ASSIGN_OR_RETURN(Compiled c, compile(p));
            if (c.resident > budget) return false;
            r->plan_ = p;
            out = std::move(c);
            return true;
        };
        const int64_t whole = (std::max(frame_dims[2], frame_dims[3]) + t.align - 1) / t.align;
        LOOM_ASSIGN_OR_RETURN(bool untiled, fits(whole, compiled));
        if (!untiled) {
            int64_t lo = 1, hi = whole - 1;  // invariant: units above hi do not fit
            while (lo <= hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                LOOM_ASSIGN_OR_RETURN(bool ok, fits(mid, compiled));
                if (ok) lo = mid + 1;
                else hi = mid - 1;
            }
            if (!compiled) {
                const TilePlan p = plan(t.align, t.align);
                LOOM_ASSIGN_OR_RETURN(Compiled c, compile(p));
                return make_error(StatusCode::OUT_OF_DEVICE_MEMORY,
                                  "{}: not even a {}x{} window fits: it needs {} bytes{}, {} of the device's {} are "
                                  "free less the {:.0f}% margin",
                                  source, p.h.window, p.w.window, c.resident,
                                  stage_count > 1 ? fmt::format(" for its {} passes", stage_count) : std::string(),
                                  capacity - static_cast<int64_t>(ds.memory_used), capacity,
                                  options.device_memory_margin * 100);
            }
            // Same tile counts with less overlap: smaller windows fit too (the plan's bytes
            // grow with the window; checked rather than assumed).
            const TilePlan balanced = plan(balance_tile_step(frame_dims[2], r->plan_.h.step, t, 0),
                                           balance_tile_step(frame_dims[3], r->plan_.w.step, t, 1));
            if (balanced.h.window != r->plan_.h.window || balanced.w.window != r->plan_.w.window) {
                LOOM_ASSIGN_OR_RETURN(Compiled c, compile(balanced));
                if (c.resident <= budget) {
                    r->plan_ = balanced;
                    compiled = std::move(c);
                }
            }
        }
    }

    // Each window's maps must be its share of the frame's: scale x (window - frame) pixels fewer
    // than the frame's, which a Resize to a fixed size or a crop to a fixed size would break.
    const TilePlan& p = r->plan_;
    auto share = [&](int64_t frame_len, int64_t num, int64_t den, size_t axis) {
        const int64_t less = (axis == 0 ? frame_dims[2] - p.h.window : frame_dims[3] - p.w.window) * num;
        return less % den == 0 ? frame_len - less / den : -1;
    };
    for (size_t k = 0; k < stage_count; ++k) {
        const CompiledModel& m = compiled->models[k];
        for (size_t i = 0; i < m.outputs.size(); ++i) {
            const std::vector<int64_t>& d = m.tensors[static_cast<size_t>(m.outputs[i])].dims;
            std::vector<int64_t> want;
            if (k + 1 == stage_count) {
                const std::vector<int64_t>& f = r->net_output_dims_[i];
                want = {f[0], f[1], share(f[2], t.scale, 1, 0), share(f[3], t.scale, 1, 1)};
            } else {
                const compiler::FrameReduction& red = t.reductions[k];
                const std::vector<int64_t> f = compiler::shape_dims(a.value(a.find_value(red.input)).shape);
                want = {f[0], f[1], share(red.frame_h, red.num, red.den, 0), share(red.frame_w, red.num, red.den, 1)};
            }
            if (d != want)
                return make_error(StatusCode::UNSUPPORTED,
                                  "{}: {} is {} for a {}x{} window, not the frame's share of it ({}): a size in the "
                                  "model does not follow the input's",
                                  source,
                                  k + 1 == stage_count ? fmt::format("output {}", i)
                                                       : fmt::format("the map '{}'", t.reductions[k].input),
                                  dims_str(d), p.w.window, p.h.window, dims_str(want));
        }
    }
    // Each reduction's map, shared out: tile i sums from its clean start (the frame's edge for
    // the first) to the next tile's; the windows' overlap (SpatialTiling::overlap) keeps every
    // share within its window's clean pixels.
    for (const compiler::FrameReduction& red : t.reductions) {
        std::array<std::vector<int64_t>, 2> cuts;
        for (size_t axis = 0; axis < 2; ++axis) {
            const TileAxis& ax = axis == 0 ? p.h : p.w;
            const int64_t len = axis == 0 ? red.frame_h : red.frame_w;
            const int64_t window_len = share(len, red.num, red.den, axis);
            cuts[axis].push_back(0);
            for (size_t i = 1; i < ax.count(); ++i) cuts[axis].push_back(ax.origins[i] * red.num / red.den + red.lo);
            cuts[axis].push_back(len);
            for (size_t i = 0; i < ax.count(); ++i) {
                const int64_t at = ax.origins[i] * red.num / red.den;
                const int64_t begin = cuts[axis][i] - at, end = cuts[axis][i + 1] - at;
                const int64_t clean_begin = i == 0 ? 0 : red.lo;
                const int64_t clean_end = i + 1 == ax.count() ? window_len : window_len - red.hi;
                if (begin < clean_begin || end > clean_end || begin > end)
                    return make_error(StatusCode::INTERNAL,
                                      "{}: tile {} of the map '{}' keeps [{}, {}) of its {} pixels, clean [{}, {})",
                                      source, i, red.input, begin, end, window_len, clean_begin, clean_end);
            }
        }
        r->reduction_cuts_.push_back(std::move(cuts));
    }
    // The passes hand their values on when they fit, so that each layer runs once per tile
    // instead of once per pass after it: in device memory when it has room (each tile's values
    // at their offsets in a slice of one buffer, read and written where they lie), else through
    // the host.
    for (int o : a.outputs) r->output_names_.push_back(a.value(o).name);
    std::vector<std::vector<std::string>> keep(stage_count);
    std::unordered_map<std::string, int64_t> slot;  // on the device: each handed value's offset in a tile's slice
    auto through_host_note = [](int64_t bytes, const std::string& why) {
        return fmt::format("values handed on between the passes through the host: {} MiB ({})", bytes >> 20, why);
    };
    int64_t host_total = -1;  // the host bytes handing on takes (all tiles), once the passes compiled for it
    const int64_t carry_budget = options.carry_bytes >= 0
                                     ? options.carry_bytes
                                     : std::max<int64_t>(host_available_bytes() - g_host_carry.load(), 0) / 2;
    if (!t.reductions.empty() && carry_budget > 0) {
        Graph fw = w;
        Status folded = compiler::set_input_shapes(fw,
                                                   {{input, {frame_dims[0], frame_dims[1], p.h.window, p.w.window}}});
        if (folded.ok()) folded = compiler::infer_shapes(fw);
        if (folded.ok()) folded = compiler::fold_constants(fw).status();
        if (!folded.ok()) return folded.with_context(fmt::format("{}: the window's graph", source));
        compiler::eliminate_dead_code(fw);
        // A model the split cannot take runs every pass from the window, saying why.
        auto split = split_at_means(fw, t);
        std::set<std::string> handed;  // what a pass gives a later one (the last pass's keep is the outputs)
        if (split.ok())
            for (size_t k = 0; k + 1 < stage_count; ++k) handed.insert(split->keep[k].begin(), split->keep[k].end());
        auto carried = split.ok() ? compile_all(split->graphs, p, &handed) : Result<Compiled>(split.status());
        if (!carried.ok()) {
            r->carry_note_ = fmt::format("every pass from the window: the passes cannot hand values on ({})",
                                         carried.status().message());
        } else {
            // Host bytes: what a tile keeps after each pass, at most. Device bytes: one tile's
            // slice, each handed value live from the pass that makes it to the last that reads it.
            std::unordered_map<std::string, int64_t> bytes;
            std::map<std::string, compiler::BufferRequest> live;
            for (size_t k = 0; k < stage_count; ++k) {
                const CompiledModel& m = carried->models[k];
                for (int id : m.outputs) {
                    const compiler::CompiledTensor& ct = m.tensors[static_cast<size_t>(id)];
                    bytes[ct.name] = ct.bytes;
                    if (handed.count(ct.name))
                        live[ct.name] = {std::max<int64_t>(ct.device_bytes(), 1), static_cast<int>(k),
                                         static_cast<int>(k)};
                }
                for (int id : m.inputs)
                    if (auto it = live.find(m.tensors[static_cast<size_t>(id)].name); it != live.end())
                        it->second.last = static_cast<int>(k);
            }
            int64_t per_tile = 0;
            for (size_t k = 0; k < stage_count; ++k) {
                int64_t kept = 0;
                for (const std::string& name : split->keep[k]) kept += bytes[name];
                per_tile = std::max(per_tile, kept);
            }
            const int64_t total = per_tile * static_cast<int64_t>(p.tiles());
            std::vector<std::string> names;
            std::vector<compiler::BufferRequest> requests;
            for (const auto& [name, req] : live) {
                names.push_back(name);
                requests.push_back(req);
            }
            auto slice = compiler::plan_memory(requests);
            const bool gives_output = std::any_of(r->output_names_.begin(), r->output_names_.end(),
                                                  [&](const std::string& o) { return handed.count(o) > 0; });
            // Each mean's map must come from its own pass, which copies it out; one an earlier
            // pass made (two means of one map) would stay on the device.
            bool own_maps = true;
            for (size_t k = 0; k + 1 < stage_count; ++k) {
                const CompiledModel& m = carried->models[k];
                own_maps = own_maps && std::any_of(m.outputs.begin(), m.outputs.end(), [&](int id) {
                               return m.tensors[static_cast<size_t>(id)].name == t.reductions[k].input;
                           });
            }
            host_total = total;
            const int64_t on_device = slice.ok() ? slice->peak * static_cast<int64_t>(p.tiles()) : -1;
            const int64_t device_room = budget - carried->resident;
            // Why the values cannot stay in device memory (empty: they can).
            std::string off_device;
            if (!options.carry_on_device) off_device = "keeping them on the device is off";
            else if (handed.empty()) off_device = "nothing to keep";
            else if (!slice.ok()) off_device = slice.status().message();
            else if (gives_output) off_device = "a pass before the last gives a model output";
            else if (!own_maps) off_device = "a mean's map comes from an earlier pass";
            else if (allocated_bytes(on_device, dev.spec()) > device_room)
                off_device = fmt::format("on the device they would take {} MiB, {} MiB are free", on_device >> 20,
                                         std::max<int64_t>(device_room, 0) >> 20);
            if (off_device.empty()) {
                compiled = std::move(*carried);
                keep = std::move(split->keep);
                for (size_t i = 0; i < names.size(); ++i) slot[names[i]] = slice->offsets[i];
                r->carried_ = true;
                r->carried_on_device_ = true;
                r->tile_slice_ = slice->peak;
                r->carried_bytes_ = on_device;
                r->carry_note_ = fmt::format(
                    "values handed on between the passes in device memory: {} MiB ({} KiB per tile), not copied",
                    on_device >> 20, slice->peak >> 10);
            } else if (total > carry_budget) {
                r->carry_note_ = fmt::format(
                    "every pass from the window: handing values on would keep {} MiB on the "
                    "host, over the {} MiB allowed",
                    total >> 20, carry_budget >> 20);
            } else if (options.tile == 0 && carried->resident > budget) {
                r->carry_note_ = fmt::format(
                    "every pass from the window: the passes that hand values on take {} MiB of "
                    "device memory, over the {} MiB free",
                    carried->resident >> 20, budget >> 20);
            } else {
                compiled = std::move(*carried);
                keep = std::move(split->keep);
                r->carried_ = true;
                r->carried_bytes_ = total;
                r->carry_note_ = through_host_note(total, off_device);
            }
        }
    } else if (!t.reductions.empty()) {
        r->carry_note_ = "every pass from the window (handing values on is off)";
    }
    // One arena for every pass's session.
    auto arena = dev.malloc(static_cast<size_t>(std::max<int64_t>(compiled->arena, 1)), "tiled arena");
    if (!arena.ok()) return arena.status().with_context(fmt::format("{}: the arena of the tiled passes", source));
    auto shared_arena = std::make_shared<device::DeviceBuffer>(std::move(*arena));
    for (size_t k = 0; k < stage_count; ++k) {
        Stage st;
        auto shared = std::make_shared<const CompiledModel>(std::move(compiled->models[k]));
        for (int id : shared->inputs) {
            const std::string& name = shared->tensors[static_cast<size_t>(id)].name;
            Feed f;
            f.kind = Feed::CARRIED;
            f.name = name;
            if (name == input) f.kind = Feed::WINDOW;
            for (size_t j = 0; j < t.reductions.size(); ++j)
                if (t.reductions[j].output == name) {
                    f.kind = Feed::MEAN;
                    f.mean = j;
                }
            if ((f.kind == Feed::MEAN && f.mean >= k) || (f.kind == Feed::CARRIED && !r->carried_))
                return make_error(StatusCode::INTERNAL, "{}: pass {} takes an input '{}' it has no value for", source,
                                  k, name);
            st.feed.push_back(std::move(f));
        }
        for (int id : shared->outputs) st.gives.push_back(shared->tensors[static_cast<size_t>(id)].name);
        // On the device a tile keeps nothing on the host.
        if (!r->carried_on_device_) st.keep = keep[k];
        LOOM_ASSIGN_OR_RETURN(st.loaded, LoadedModel::load(dev, std::move(shared)));
        LOOM_ASSIGN_OR_RETURN(st.session, Session::create(st.loaded, shared_arena));
        r->stages_.push_back(std::move(st));
    }
    if (r->carried_on_device_) {
        Status on_device = r->bind_carry(dev, slot, p.tiles());
        if (!on_device.ok()) {
            // The same passes hand their values on through the host instead, if that fits.
            if (host_total < 0 || host_total > carry_budget)
                return on_device.with_context(fmt::format("{}: the values the tiled passes hand on", source));
            r->carry_buffer_ = device::DeviceBuffer();
            for (size_t k = 0; k < stage_count; ++k) {
                r->stages_[k].bound.clear();
                r->stages_[k].keep = keep[k];
            }
            r->carried_on_device_ = false;
            r->carried_bytes_ = host_total;
            r->carry_note_ = through_host_note(host_total, fmt::format("in device memory: {}", on_device.message()));
        }
    }
    if (r->carried_ && !r->carried_on_device_) {
        r->host_promise_ = r->carried_bytes_;
        g_host_carry += r->host_promise_;
    }
    r->store_.resize(p.tiles());  // on the device: each tile's host values while it runs
    return r;
}

TiledRunner::~TiledRunner() { g_host_carry -= host_promise_; }

int64_t TiledRunner::host_carry_promised() { return g_host_carry.load(); }

Status TiledRunner::bind_carry(device::Device& dev, const std::unordered_map<std::string, int64_t>& slot,
                               size_t tiles) {
    // Tile i's slice starts at i x tile_slice_; each pass reads and writes the handed values
    // there, and copies out the map its mean sums.
    LOOM_ASSIGN_OR_RETURN(carry_buffer_, dev.malloc(static_cast<size_t>(carried_bytes_), "tiled hand-on"));
    for (size_t k = 0; k < stages_.size(); ++k) {
        Stage& st = stages_[k];
        const CompiledModel& m = st.loaded->model();
        for (size_t tile = 0; tile < tiles; ++tile) {
            const int64_t base = static_cast<int64_t>(tile) * tile_slice_;
            auto at = [&](int id, bool to_host) {
                DeviceTensor d;
                if (auto it = slot.find(m.tensors[static_cast<size_t>(id)].name); it != slot.end()) {
                    d.buffer = &carry_buffer_;
                    d.offset = base + it->second;
                    d.to_host = to_host;
                }
                return d;
            };
            std::vector<DeviceTensor> ins, outs;
            for (int id : m.inputs) ins.push_back(at(id, false));
            for (int id : m.outputs)
                outs.push_back(at(id, k + 1 < stages_.size() &&
                                          m.tensors[static_cast<size_t>(id)].name == tiling_.reductions[k].input));
            auto bound = st.session->bind(ins, outs);
            if (!bound.ok()) return bound.status().with_context(fmt::format("pass {}, tile {}", k, tile));
            st.bound.push_back(std::move(*bound));
        }
    }
    return {};
}

Result<std::vector<HostTensor>> TiledRunner::run(const HostTensor& frame, TiledStats* stats) {
    const auto t0 = std::chrono::steady_clock::now();
    const CompiledModel& m = model();
    if (frame.dims() != frame_dims_ || frame.dtype() != frame_dtype_)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame is {} {}, the tiled run was set up for {} {}",
                          m.source, device::dtype_name(frame.dtype()), dims_str(frame.dims()),
                          device::dtype_name(frame_dtype_), dims_str(frame_dims_));
    TiledStats local;
    std::vector<HostTensor> outputs;
    if (restore_) {
        // The padded frame and the network's output are recycled from frame to frame.
        HostTensor padded = std::move(padded_);
        pad_frame(frame, *restore_, padding_, padded);
        auto net = run_network(padded, local);
        padded_ = std::move(padded);
        if (!net.ok()) return net.status();
        outputs.push_back(finish_restore(net->at(0), frame, *restore_));
        for (HostTensor& t : *net) give_back(std::move(t));
    } else {
        LOOM_ASSIGN_OR_RETURN(outputs, run_network(frame, local));
    }
    local.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (stats) *stats = local;
    return outputs;
}

HostTensor TiledRunner::take_buffer(compiler::DType dtype, const std::vector<int64_t>& dims) {
    for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].dtype() == dtype && free_[i].dims() == dims) {
            HostTensor t = std::move(free_[i]);
            free_[i] = std::move(free_.back());
            free_.pop_back();
            return t;
        }
    return HostTensor();  // Session::run allocates it
}

void TiledRunner::give_back(HostTensor&& t) {
    if (!t.shared() && t.data()) free_.push_back(std::move(t));
}

template <typename Use>
Status TiledRunner::run_stage(size_t k, const HostTensor& frame, const std::vector<std::vector<float>>& means,
                              TiledStats& local, Use use) {
    Stage& st = stages_[k];
    const CompiledModel& m = st.loaded->model();
    const int64_t N = net_dims_[0], C = net_dims_[1], H = net_dims_[2], W = net_dims_[3];
    const int64_t wh = plan_.h.window, ww = plan_.w.window;
    const size_t es = device::dtype_size(frame_dtype_);
    // The pass's inputs: the window (refilled per tile), the means it takes, in its dtypes, and
    // the values earlier passes kept (set per tile).
    std::vector<HostTensor> inputs;
    HostTensor window(frame_dtype_, {N, C, wh, ww});
    for (size_t i = 0; i < st.feed.size(); ++i) {
        const compiler::CompiledTensor& ct = m.tensors[static_cast<size_t>(m.inputs[i])];
        if (st.feed[i].kind != Feed::MEAN) {
            inputs.push_back(st.feed[i].kind == Feed::WINDOW ? window : HostTensor());
            continue;
        }
        const std::vector<float>& v = means[st.feed[i].mean];
        HostTensor t(ct.dtype, ct.dims);
        if (t.elements() != static_cast<int64_t>(v.size()))
            return make_error(StatusCode::INTERNAL, "{}: a mean of {} values for an input of {}", m.source, v.size(),
                              dims_str(ct.dims));
        if (t.dtype() == compiler::DType::F16)
            device::cpu::vec_f32_to_f16(v.data(), t.as<device::f16>(), static_cast<int64_t>(v.size()));
        else if (t.dtype() == compiler::DType::F32) std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
        else
            return make_error(StatusCode::UNSUPPORTED, "{}: a mean of dtype {}", m.source,
                              device::dtype_name(t.dtype()));
        inputs.push_back(std::move(t));
    }
    const auto* src = static_cast<const std::byte*>(frame.data());
    auto* win = static_cast<std::byte*>(window.data());
    std::vector<HostTensor> outs;
    const bool reads_window =
        std::any_of(st.feed.begin(), st.feed.end(), [](const Feed& f) { return f.kind == Feed::WINDOW; });
    for (size_t ty = 0; ty < plan_.h.count(); ++ty) {
        for (size_t tx = 0; tx < plan_.w.count(); ++tx) {
            std::unordered_map<std::string, HostTensor>& values = store_[ty * plan_.w.count() + tx];
            const int64_t oy = plan_.h.origins[ty], ox = plan_.w.origins[tx];
            const BoundLaunches* bound = carried_on_device_ ? &st.bound[ty * plan_.w.count() + tx] : nullptr;
            for (size_t i = 0; i < st.feed.size(); ++i) {
                if (st.feed[i].kind != Feed::CARRIED || bound) continue;
                auto it = values.find(st.feed[i].name);
                if (it == values.end())
                    return make_error(StatusCode::INTERNAL, "{}: tile ({}, {}) kept no '{}' for pass {}", m.source, ty,
                                      tx, st.feed[i].name, k);
                inputs[i] = it->second;
            }
            if (reads_window)
                for (int64_t plane = 0; plane < N * C; ++plane)
                    for (int64_t y = 0; y < wh; ++y)
                        std::memcpy(win + static_cast<size_t>((plane * wh + y) * ww) * es,
                                    src + static_cast<size_t>((plane * H + oy + y) * W + ox) * es,
                                    static_cast<size_t>(ww) * es);
            RunStats rs;
            outs.resize(st.gives.size());
            for (size_t i = 0; i < outs.size(); ++i) {
                const compiler::CompiledTensor& ct = m.tensors[static_cast<size_t>(m.outputs[i])];
                const bool stays = bound && bound->outputs()[i].buffer && !bound->outputs()[i].to_host;
                outs[i] = stays ? HostTensor() : take_buffer(ct.dtype, ct.dims);
            }
            const Status ran = bound ? st.session->run(*bound, inputs, outs, &rs) : st.session->run(inputs, outs, &rs);
            if (!ran.ok()) {
                const std::string pass = k + 1 < stages_.size()
                                             ? fmt::format(" (the pass for the mean '{}')", tiling_.reductions[k].node)
                                             : std::string();
                return ran.with_context(fmt::format("tile ({}, {}) of {}x{} at input ({}, {}){}", ty, tx,
                                                    plan_.h.count(), plan_.w.count(), oy, ox, pass));
            }
            local.sim_ms += rs.sim_ms;
            local.launches += rs.launches;
            ++local.tiles;
            for (size_t i = 0; i < st.gives.size(); ++i)
                if (outs[i].data()) values[st.gives[i]] = std::move(outs[i]);
            for (size_t i = 0; i < st.feed.size(); ++i)
                if (st.feed[i].kind == Feed::CARRIED) inputs[i] = HostTensor();
            use(ty, tx, values);
            // What later passes read stays; the rest goes back to the buffers (all of it when
            // nothing is carried).
            for (auto it = values.begin(); it != values.end();) {
                if (std::find(st.keep.begin(), st.keep.end(), it->first) != st.keep.end()) {
                    ++it;
                    continue;
                }
                give_back(std::move(it->second));
                it = values.erase(it);
            }
        }
    }
    ++local.passes;
    local.carried = carried_;
    return {};
}

// Every tile of the frame the network runs on (net_dims_), assembled; one pass per mean over
// the frame first.
Result<std::vector<HostTensor>> TiledRunner::run_network(const HostTensor& frame, TiledStats& local) {
    for (auto& values : store_) {  // a failed run may have left some
        for (auto& kv : values) give_back(std::move(kv.second));
        values.clear();
    }
    std::vector<std::vector<float>> means;
    for (size_t k = 0; k < tiling_.reductions.size(); ++k) {
        const compiler::FrameReduction& red = tiling_.reductions[k];
        const auto& cuts = reduction_cuts_[k];
        std::vector<device::cpu::ExactSum> sums;
        ThreadPool& pool = stages_[k].loaded->device().pool();
        Status missing;
        LOOM_TRY(run_stage(k, frame, means, local,
                           [&](size_t ty, size_t tx, const std::unordered_map<std::string, HostTensor>& values) {
                               auto it = values.find(red.input);
                               if (it == values.end()) {
                                   missing = make_error(StatusCode::INTERNAL, "{}: pass {} gave no '{}'",
                                                        model().source, k, red.input);
                                   return;
                               }
                               const HostTensor& map = it->second;
                               const int64_t planes = map.dims()[0] * map.dims()[1];
                               if (sums.empty()) sums.resize(static_cast<size_t>(planes));
                               const int64_t at_y = plan_.h.origins[ty] * red.num / red.den,
                                             at_x = plan_.w.origins[tx] * red.num / red.den;
                               const int64_t y0 = cuts[0][ty] - at_y, y1 = cuts[0][ty + 1] - at_y;
                               const int64_t x0 = cuts[1][tx] - at_x, x1 = cuts[1][tx + 1] - at_x;
                               // Planes in parallel on the device's host threads: each plane's sum is its own.
                               pool.parallel_for(static_cast<size_t>(planes), 1, [&](size_t first, size_t last) {
                                   std::vector<float> row(static_cast<size_t>(x1 - x0));
                                   for (size_t plane = first; plane < last; ++plane)
                                       for (int64_t y = y0; y < y1; ++y) {
                                           rows_as_f32(map, static_cast<int64_t>(plane), y, x0, x1, row.data());
                                           sums[plane].add(row.data(), x1 - x0);
                                       }
                               });
                           }));
        LOOM_TRY(missing);
        // As GlobalAveragePool computes it (device/kernels/global_pool.cpp).
        const auto count = static_cast<double>(red.frame_h * red.frame_w);
        std::vector<float>& mean = means.emplace_back();
        for (const device::cpu::ExactSum& s : sums) mean.push_back(static_cast<float>(s.value() / count));
    }

    const int64_t s = tiling_.scale;
    std::vector<HostTensor> outputs(output_names_.size());
    Status missing;
    LOOM_TRY(run_stage(stages_.size() - 1, frame, means, local,
                       [&](size_t ty, size_t tx, const std::unordered_map<std::string, HostTensor>& values) {
                           // The kept core, in output pixels of the frame and of the window.
                           const int64_t oy = plan_.h.origins[ty] * s, ox = plan_.w.origins[tx] * s;
                           const int64_t y0 = plan_.h.cuts[ty], y1 = plan_.h.cuts[ty + 1];
                           const int64_t x0 = plan_.w.cuts[tx], x1 = plan_.w.cuts[tx + 1];
                           for (size_t i = 0; i < outputs.size(); ++i) {
                               auto it = values.find(output_names_[i]);
                               if (it == values.end()) {
                                   missing = make_error(StatusCode::INTERNAL, "{}: no tile gave the output '{}'",
                                                        model().source, output_names_[i]);
                                   return;
                               }
                               const HostTensor& o = it->second;
                               if (outputs[i].dims().empty()) {  // every pixel is some tile's: no fill needed
                                   outputs[i] = take_buffer(o.dtype(), net_output_dims_[i]);
                                   if (outputs[i].dims().empty())
                                       outputs[i] = HostTensor(o.dtype(), net_output_dims_[i]);
                               }
                               const size_t oes = device::dtype_size(o.dtype());
                               const int64_t planes = o.dims()[0] * o.dims()[1], oh = o.dims()[2], ow = o.dims()[3];
                               const int64_t fh = outputs[i].dims()[2], fw = outputs[i].dims()[3];
                               const auto* osrc = static_cast<const std::byte*>(o.data());
                               auto* dst = static_cast<std::byte*>(outputs[i].data());
                               for (int64_t plane = 0; plane < planes; ++plane)
                                   for (int64_t y = y0; y < y1; ++y)
                                       std::memcpy(
                                           dst + static_cast<size_t>((plane * fh + y) * fw + x0) * oes,
                                           osrc + static_cast<size_t>((plane * oh + y - oy) * ow + x0 - ox) * oes,
                                           static_cast<size_t>(x1 - x0) * oes);
                           }
                       }));
    LOOM_TRY(missing);
    return outputs;
}

}  // namespace loom::executor
