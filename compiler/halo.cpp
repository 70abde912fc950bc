#include "compiler/halo.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "compiler/ops.hpp"
#include "compiler/ops/util.hpp"

namespace loom::compiler {

namespace {

// What the analysis knows of one value: a map of the frame (its flow), a value computed from a
// mean over the frame (the same for every pixel: a tiled run supplies it), or neither (constant).
enum class Kind : uint8_t { CONSTANT, MAP, GLOBAL };

struct Info {
    Kind kind = Kind::CONSTANT;
    TileFlow flow;
};

// A non-map operand must not vary over H and W (right-aligned against NCHW).
bool constant_over_hw(const Value& v) {
    const Shape& s = v.shape;
    for (size_t back = 0; back < 2 && back < s.size(); ++back) {
        const Dim& d = s[s.size() - 1 - back];
        if (!d.known() || d.value != 1) return false;
    }
    return true;
}

Status unsupported(const Node& n, std::string_view why) {
    return make_error(StatusCode::UNSUPPORTED, "{} is not spatially tileable: {}", node_label(n), why);
}

std::string scale_str(int64_t num, int64_t den) {
    return den == 1 ? fmt::format("{}", num) : fmt::format("{}/{}", num, den);
}

int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

}  // namespace

int64_t origin_multiple(int64_t num, int64_t den, int64_t m) {
    // o * num / den = k * m  <=>  o * num is a multiple of m * den.
    const int64_t md = m * den;
    return md / std::gcd(num, md);
}

Result<SpatialTiling> analyse_spatial_tiling(const Graph& g) {
    if (g.inputs.size() != 1)
        return make_error(StatusCode::UNSUPPORTED, "{}: tiling needs exactly one graph input, the model has {}", g.source,
                          g.inputs.size());
    std::vector<Info> info(g.values.size());
    const Value& x = g.value(g.inputs[0]);
    if (x.shape.size() != 4 || !x.shape[2].known() || !x.shape[3].known())
        return make_error(StatusCode::UNSUPPORTED, "{}: tiling needs an NCHW input of known H and W, '{}' is {}",
                          g.source, x.name, shape_str(x.shape));
    info[static_cast<size_t>(g.inputs[0])] = {Kind::MAP, {}};
    SpatialTiling result;
    int64_t align = 1;
    for (const Node& n : g.nodes) {
        const OpDef* op = find_op(n.op);
        // The map inputs must agree on their scale; the contamination is the largest.
        std::optional<TileFlow> in;
        bool global = false;
        const bool takes_map = std::any_of(n.inputs.begin(), n.inputs.end(), [&](int v) {
            return v >= 0 && info[static_cast<size_t>(v)].kind == Kind::MAP;
        });
        for (size_t i = 0; i < n.inputs.size(); ++i) {
            if (n.inputs[i] < 0) continue;
            const Info& s = info[static_cast<size_t>(n.inputs[i])];
            if (s.kind != Kind::MAP) {
                global = global || s.kind == Kind::GLOBAL;
                // Weights, scales and bounds are parameters, and shape-deciding inputs (a
                // Slice's starts) attributes; any other operand of a map must be the same for
                // every pixel (a bias, a per-channel slope, a scalar, a per-channel mean).
                const bool parameter = (i > 0 && op && op->has(OpTrait::PARAMETER_INPUTS)) ||
                                       (op && i < 32 && ((op->constant_inputs >> i) & 1u));
                if (takes_map && !parameter && !constant_over_hw(g.value(n.inputs[i])))
                    return unsupported(n, fmt::format("input {} ('{}') is not a map of the frame and varies over H or W",
                                                      i, g.value(n.inputs[i]).name));
                continue;
            }
            if (in && (in->num != s.flow.num || in->den != s.flow.den))
                return unsupported(n, fmt::format("its inputs are at scales {} and {}", scale_str(in->num, in->den),
                                                  scale_str(s.flow.num, s.flow.den)));
            if (!in) in = s.flow;
            in->lo = std::max(in->lo, s.flow.lo);
            in->hi = std::max(in->hi, s.flow.hi);
        }
        if (!in) {
            // No map in: constants (folding left them) or values of the frame's means.
            for (int o : n.outputs) info[static_cast<size_t>(o)].kind = global ? Kind::GLOBAL : Kind::CONSTANT;
            continue;
        }
        if (n.op == "GlobalAveragePool" || opu::is_spatial_mean(g, n)) {
            // A mean over the whole frame: a tiled run computes it over the windows first.
            const Value& v = g.value(n.inputs[0]);
            if (v.shape.size() != 4 || !shape_static(v.shape))
                return unsupported(n, fmt::format("it averages '{}' of {}, not an NCHW map of known size", v.name,
                                                  shape_str(v.shape)));
            FrameReduction r{.node = n.name,
                             .input = v.name,
                             .output = g.value(n.outputs[0]).name,
                             .num = in->num,
                             .den = in->den,
                             .lo = in->lo,
                             .hi = in->hi,
                             .frame_h = v.shape[2].value,
                             .frame_w = v.shape[3].value};
            result.reductions.push_back(std::move(r));
            info[static_cast<size_t>(n.outputs[0])].kind = Kind::GLOBAL;
            continue;
        }
        TileFlow out = *in;
        const bool pointwise = op && op->has(OpTrait::POINTWISE);  // the output is its inputs' map
        if (!pointwise && !(op && op->tile))
            return unsupported(n, "it mixes pixels beyond a fixed neighbourhood or changes the layout");
        if (!pointwise) {
            out.align = align;
            LOOM_TRY(op->tile(g, n, out).with_context(fmt::format("{} is not spatially tileable", node_label(n))));
            const int64_t d = std::gcd(out.num, out.den);
            out.num /= d, out.den /= d;
            // Every map's pixels must fall on whole pixels of the frame's map.
            align = std::lcm(out.align, origin_multiple(out.num, out.den, 1));
            out.align = align;
        }
        for (int o : n.outputs) info[static_cast<size_t>(o)] = {Kind::MAP, out};
    }
    std::optional<TileFlow> flow;
    for (int o : g.outputs) {
        const Info& s = info[static_cast<size_t>(o)];
        if (s.kind != Kind::MAP || g.value(o).shape.size() != 4)
            return make_error(StatusCode::UNSUPPORTED, "{}: output '{}' is not a map of the input frame", g.source,
                              g.value(o).name);
        if (flow && (flow->num != s.flow.num || flow->den != s.flow.den))
            return make_error(StatusCode::UNSUPPORTED, "{}: outputs at scales {} and {}", g.source,
                              scale_str(flow->num, flow->den), scale_str(s.flow.num, s.flow.den));
        if (!flow) flow = s.flow;
        flow->lo = std::max(flow->lo, s.flow.lo);
        flow->hi = std::max(flow->hi, s.flow.hi);
    }
    if (!flow) return make_error(StatusCode::UNSUPPORTED, "{}: the model has no outputs", g.source);
    if (flow->den != 1)
        return make_error(StatusCode::UNSUPPORTED, "{}: the output is at {}x the input, not a whole scale", g.source,
                          scale_str(flow->num, flow->den));
    result.scale = flow->num;
    result.align = align;
    result.lead = ceil_div(flow->lo, flow->num);
    result.trail = ceil_div(flow->hi, flow->num);
    result.halo = std::max(result.lead, result.trail);
    const int64_t frame[2] = {x.shape[2].value, x.shape[3].value};
    for (size_t axis = 0; axis < 2; ++axis) {
        std::optional<int64_t> shrink;
        for (int o : g.outputs) {
            const Dim& d = g.value(o).shape[axis + 2];
            if (!d.known())
                return make_error(StatusCode::UNSUPPORTED, "{}: output '{}' has no known size", g.source,
                                  g.value(o).name);
            const int64_t s = result.scale * frame[axis] - d.value;
            if (s < 0 || (shrink && *shrink != s))
                return make_error(StatusCode::UNSUPPORTED,
                                  "{}: output '{}' is {} for a {}-pixel input, not {}x it less a border", g.source,
                                  g.value(o).name, d.value, frame[axis], result.scale);
            shrink = s;
        }
        result.shrink[axis] = *shrink;
        // A reduction's map is covered when consecutive windows' clean pixels meet: the window
        // exceeds the step by (frame * s - map + lo + hi) / s input pixels.
        for (const FrameReduction& r : result.reductions) {
            const int64_t len = axis == 0 ? r.frame_h : r.frame_w;
            const int64_t need = ceil_div(r.num * frame[axis] - r.den * len + r.den * (r.lo + r.hi), r.num);
            result.overlap[axis] = std::max(result.overlap[axis], need);
        }
    }
    return result;
}

}  // namespace loom::compiler
