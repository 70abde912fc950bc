#include "compiler/halo.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "compiler/ops.hpp"

namespace loom::compiler {

namespace {

// What the analysis knows of one value: spatial (an NCHW map of the input frame) with its
// scale and accumulated halo, or a per-channel / scalar operand that does not vary over H, W.
struct Spatial {
    bool spatial = false;
    int64_t scale = 1;
    int64_t halo = 0;
};

// A non-spatial operand must not vary over H and W (right-aligned against NCHW).
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

}  // namespace

Result<SpatialTiling> analyse_spatial_tiling(const Graph& g) {
    if (g.inputs.size() != 1)
        return make_error(StatusCode::UNSUPPORTED, "{}: tiling needs exactly one graph input, the model has {}", g.source,
                          g.inputs.size());
    std::vector<Spatial> info(g.values.size());
    const Value& x = g.value(g.inputs[0]);
    if (x.shape.size() != 4)
        return make_error(StatusCode::UNSUPPORTED, "{}: tiling needs an NCHW input, '{}' is {}", g.source, x.name,
                          shape_str(x.shape));
    info[static_cast<size_t>(g.inputs[0])] = {true, 1, 0};
    int64_t align = 1;
    for (const Node& n : g.nodes) {
        const OpDef* op = find_op(n.op);
        // The spatial inputs must agree on their scale; the halo is the largest.
        std::optional<Spatial> in;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
            if (n.inputs[i] < 0) continue;
            const Spatial& s = info[static_cast<size_t>(n.inputs[i])];
            if (!s.spatial) {
                // Weights, scales and bounds are parameters; any other operand must be the same
                // for every pixel (a bias, a per-channel slope, a scalar).
                const bool parameter = i > 0 && op && op->has(OpTrait::PARAMETER_INPUTS);
                if (!parameter && !constant_over_hw(g.value(n.inputs[i])))
                    return unsupported(n, fmt::format("input {} ('{}') is not a map of the frame and varies over H or W",
                                                      i, g.value(n.inputs[i]).name));
                continue;
            }
            if (in && in->scale != s.scale)
                return unsupported(n, fmt::format("its inputs are at scales {} and {}", in->scale, s.scale));
            if (!in) in = s;
            in->halo = std::max(in->halo, s.halo);
        }
        if (!in) {
            // Only constants in (folding left it): its outputs are not maps of the frame.
            continue;
        }
        Spatial out = *in;
        const bool pointwise = op && op->has(OpTrait::POINTWISE);  // the output is its inputs' map
        if (!pointwise && !(op && op->tile))
            return unsupported(n, "it mixes pixels beyond a fixed neighbourhood or changes the layout");
        if (!pointwise) {
            SpatialTiling t{in->scale, in->halo, align};
            LOOM_TRY(op->tile(g, n, t).with_context(fmt::format("{} is not spatially tileable", node_label(n))));
            out.scale = t.scale;
            out.halo = t.halo;
            align = t.align;
        }
        for (int o : n.outputs) info[static_cast<size_t>(o)] = out;
    }
    std::optional<Spatial> result;
    for (int o : g.outputs) {
        const Spatial& s = info[static_cast<size_t>(o)];
        if (!s.spatial || g.value(o).shape.size() != 4)
            return make_error(StatusCode::UNSUPPORTED, "{}: output '{}' is not a map of the input frame", g.source,
                              g.value(o).name);
        if (result && result->scale != s.scale)
            return make_error(StatusCode::UNSUPPORTED, "{}: outputs at scales {} and {}", g.source, result->scale, s.scale);
        if (!result) result = s;
        result->halo = std::max(result->halo, s.halo);
    }
    if (!result) return make_error(StatusCode::UNSUPPORTED, "{}: the model has no outputs", g.source);
    return SpatialTiling{result->scale, result->halo, align};
}

}  // namespace loom::compiler
