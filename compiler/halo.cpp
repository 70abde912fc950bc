#include "compiler/halo.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "compiler/ops.hpp"
#include "compiler/ops/util.hpp"
#include "device/kernels/cpu/winograd.hpp"

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
        // The spatial inputs must agree on their scale; the halo is the largest.
        std::optional<Spatial> in;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
            if (n.inputs[i] < 0) continue;
            const Spatial& s = info[static_cast<size_t>(n.inputs[i])];
            if (!s.spatial) {
                // Weights, scales and bounds are parameters; any other operand must be the same
                // for every pixel (a bias, a per-channel slope, a scalar).
                const bool parameter = i > 0 && op_has(n.op, OpTrait::PARAMETER_INPUTS);
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
        // InstanceNormalization is refused here with its own reason.
        if (op_has(n.op, OpTrait::POINTWISE) || n.op == "InstanceNormalization" || n.op == "Concat" ||
            n.op == "Split") {
            if (n.op == "Concat" || n.op == "Split") {
                LOOM_ASSIGN_OR_RETURN(int64_t axis, n.attrs.get_int("axis", n.op == "Split" ? 0 : 1));
                if (axis != 1 && axis != -3) return unsupported(n, "it joins or cuts along a spatial axis");
            }
            if (n.op == "InstanceNormalization") return unsupported(n, "it normalises over the whole frame");
        } else if (n.op == "Conv") {
            const Value& w = *g.input(n, 1);
            std::vector<int64_t> wk;
            for (size_t i = 2; i < w.shape.size(); ++i) wk.push_back(w.shape[i].value);
            if (wk.size() != 2) return unsupported(n, "it is not a 2-D convolution");
            LOOM_ASSIGN_OR_RETURN(opu::Window win, opu::read_window(n.attrs, 2, wk));
            LOOM_ASSIGN_OR_RETURN(int64_t group, n.attrs.get_int("group", 1));
            int64_t radius = 0;
            for (size_t a = 0; a < 2; ++a) {
                const int64_t span = win.dilations[a] * (win.kernel[a] - 1);
                if (win.strides[a] != 1) return unsupported(n, fmt::format("stride {} (tiling takes stride 1)", win.strides[a]));
                const bool same = win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER";
                if (span % 2 != 0 || (!same && (win.pads[a] != span / 2 || win.pads[a + 2] != span / 2)))
                    return unsupported(n, "its padding does not keep pixels in place (pads must be (k - 1) * d / 2)");
                radius = std::max(radius, span / 2);
            }
            // Winograd F(m x m, 3x3) (device/kernels/conv.cpp, m from cpu::winograd_tile_for,
            // which sees only C and K, so a window and the frame agree) groups output pixels in
            // m x m blocks from the map's origin: origins must stay multiples of m pixels of this
            // map. Each block is computed from its whole (m + 2)^2 input tile, so in floating
            // point an output's bits depend on inputs up to m pixels away (1 to m by its place in
            // the block), not 1.
            const int64_t c_in = g.input(n, 0)->shape[1].value, c_out = w.shape[0].value;
            const device::cpu::WinogradTile tile = device::cpu::winograd_tile_for(c_in, c_out);
            if (win.kernel[0] == 3 && win.kernel[1] == 3 && win.dilations[0] == 1 && win.dilations[1] == 1 &&
                group == 1 && tile != device::cpu::WinogradTile::NONE) {
                const int64_t m = static_cast<int64_t>(tile);
                align = std::lcm(align, m / std::gcd<int64_t>(m, in->scale));
                radius = m;
            }
            out.halo += (radius + in->scale - 1) / in->scale;
        } else if (n.op == "DepthToSpace") {
            LOOM_ASSIGN_OR_RETURN(int64_t b, n.attrs.get_int("blocksize"));
            out.scale *= b;
        } else if (n.op == "Resize" || n.op == "Upsample") {
            const Value& y = g.value(n.outputs[0]);
            const Value& xv = *g.input(n, 0);
            // One whole factor on both axes: up by f, or down by d (animevideov3 x2 runs its x4
            // network, then halves with a bicubic resize).
            int64_t f = 0, d = 0;
            for (size_t a = 2; a < 4; ++a) {
                const int64_t i = xv.shape[a].value, o = y.shape[a].value;
                if (i > 0 && o > 0 && o % i == 0 && (!f || f == o / i) && !d) {
                    f = o / i;
                } else if (i > 0 && o > 0 && i % o == 0 && (!d || d == i / o) && !f) {
                    d = i / o;
                } else {
                    return unsupported(n, "it does not scale H and W by one whole factor");
                }
            }
            if (xv.shape[0] != y.shape[0] || xv.shape[1] != y.shape[1]) return unsupported(n, "it resizes N or C");
            LOOM_ASSIGN_OR_RETURN(std::string mode, n.attrs.get_string("mode", "nearest"));
            LOOM_ASSIGN_OR_RETURN(std::string coord, n.attrs.get_string("coordinate_transformation_mode", "half_pixel"));
            if (coord == "tf_crop_and_resize" || coord == "align_corners")
                return unsupported(n, fmt::format("coordinate mode '{}' depends on the frame size", coord));
            // Nearest reads one source pixel (one more when rounding may pick the next one);
            // linear two, cubic four.
            const int64_t reach = mode == "cubic" ? 2 : 1;
            if (d) {
                // Output pixel y samples around source pixel d*y + (d-1)/2: its taps lie within
                // [d*y - reach, d*y + d - 1 + reach]. The result must stay a whole multiple of
                // the input, and tile origins must fall on the d-pixel grid of the source map.
                if (in->scale % d != 0)
                    return unsupported(n, fmt::format("it scales down by {} a map at {}x the input", d, in->scale));
                out.halo += (reach + d + in->scale - 1) / in->scale;
                out.scale /= d;
            } else {
                out.halo += (reach + in->scale - 1) / in->scale;
                out.scale *= f;
            }
        } else {
            return unsupported(n, "it mixes pixels beyond a fixed neighbourhood or changes the layout");
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
