// Data-movement ops: reshapes (Identity, Reshape, Flatten, Squeeze, Unsqueeze), Concat, Split,
// Slice, Pad, Transpose, DepthToSpace, SpaceToDepth, Resize (and the older Upsample), Shape and
// Gather.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/halo.hpp"
#include "compiler/ops.hpp"
#include "compiler/ops/util.hpp"
#include "compiler/split.hpp"

namespace loom::compiler {

namespace {

using opu::norm_axis;

int64_t rank_of(const Value* v) { return static_cast<int64_t>(v->shape.size()); }

// Product of dims [first, last), or `fresh` when one is symbolic.
Result<Dim> product(const Shape& s, size_t first, size_t last, const Dim& fresh) {
    Checked p = 1;
    for (size_t i = first; i < last; ++i) {
        if (!s[i].known()) return last - first == 1 ? s[i] : fresh;
        p = p * s[i].value;
    }
    return opu::checked_dim(p, "the product of the dims");
}

Result<Lowered> lower_reshape(const Graph&, const Node& n) {
    // Every reshape moves no data: the output aliases the input.
    return Lowered{"reshape", {}, {n.inputs[0]}, true};
}

Status infer_identity(InferContext& c) {
    c.set(0, c.in(0)->dtype, c.in(0)->shape);
    return {};
}

Status infer_reshape(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"allowzero"}));
    const Value *x = c.in(0), *shape_in = c.in(1);
    LOOM_ASSIGN_OR_RETURN(int64_t allowzero, c.attrs().get_int("allowzero", 0));
    const HostTensor* target = c.constant(1);
    if (!target) {
        if (shape_in->shape.size() != 1 || !shape_in->shape[0].known())
            return make_error(StatusCode::UNSUPPORTED, "Reshape to a shape of unknown rank");
        Shape out;
        for (int64_t i = 0; i < shape_in->shape[0].value; ++i) out.push_back(c.fresh(0, static_cast<size_t>(i)));
        c.set(0, x->dtype, std::move(out));
        return {};
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, target->to_ints());
    Shape out;
    int infer_at = -1;
    for (size_t i = 0; i < dims.size(); ++i) {
        const int64_t d = dims[i];
        if (d == -1) {
            if (infer_at >= 0) return make_error(StatusCode::INVALID_ARGUMENT, "shape {} has more than one -1", fmt::join(dims, "x"));
            infer_at = static_cast<int>(i);
            out.push_back(Dim(1));
        } else if (d == 0 && !allowzero) {
            if (i >= x->shape.size())
                return make_error(StatusCode::INVALID_ARGUMENT, "shape [{}]: 0 at axis {} copies a dim X ({}) lacks",
                                  fmt::join(dims, ", "), i, shape_str(x->shape));
            out.push_back(x->shape[i]);
        } else if (d < 0) {
            return make_error(StatusCode::INVALID_ARGUMENT, "shape [{}] has the negative dim {}", fmt::join(dims, ", "), d);
        } else {
            out.push_back(Dim(d));
        }
    }
    if (infer_at >= 0) {
        if (!shape_static(x->shape) || !shape_static(out)) {
            out[static_cast<size_t>(infer_at)] = c.fresh(0, static_cast<size_t>(infer_at));
        } else {
            LOOM_ASSIGN_OR_RETURN(int64_t total, shape_elements(x->shape, "input"));
            LOOM_ASSIGN_OR_RETURN(int64_t known, shape_elements(out, "shape"));
            if (known == 0 || total % known != 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "cannot reshape {} to [{}]", shape_str(x->shape),
                                  fmt::join(dims, ", "));
            out[static_cast<size_t>(infer_at)] = Dim(total / known);
        }
    }
    if (shape_static(x->shape) && shape_static(out)) {
        LOOM_ASSIGN_OR_RETURN(int64_t a, shape_elements(x->shape, "input"));
        LOOM_ASSIGN_OR_RETURN(int64_t b, shape_elements(out, "shape"));
        if (a != b)
            return make_error(StatusCode::INVALID_ARGUMENT, "cannot reshape {} ({} elements) to {} ({} elements)",
                              shape_str(x->shape), a, shape_str(out), b);
    }
    c.set(0, x->dtype, std::move(out));
    return {};
}

Status infer_flatten(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"axis"}));
    const Value* x = c.in(0);
    LOOM_ASSIGN_OR_RETURN(int64_t axis, c.attrs().get_int("axis", 1));
    const int64_t r = rank_of(x);
    if (axis < -r || axis > r) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'axis' {} out of range for rank {}", axis, r);
    if (axis < 0) axis += r;
    const size_t a = static_cast<size_t>(axis);
    LOOM_ASSIGN_OR_RETURN(Dim outer, product(x->shape, 0, a, c.fresh(0, 0)));
    LOOM_ASSIGN_OR_RETURN(Dim inner, product(x->shape, a, x->shape.size(), c.fresh(0, 1)));
    c.set(0, x->dtype, Shape{std::move(outer), std::move(inner)});
    return {};
}

Status infer_squeeze(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"axes"}));
    const Value* x = c.in(0);
    LOOM_ASSIGN_OR_RETURN(auto axes, opu::ints_from(c.graph(), c.node(), 1, "axes"));
    std::vector<bool> drop(x->shape.size(), false);
    if (!axes) {
        for (size_t i = 0; i < x->shape.size(); ++i) {
            if (!x->shape[i].known())
                return make_error(StatusCode::UNSUPPORTED, "Squeeze without axes of the symbolic shape {}", shape_str(x->shape));
            drop[i] = x->shape[i].value == 1;
        }
    }
    for (int64_t a : axes.value_or(std::vector<int64_t>{})) {
        LOOM_ASSIGN_OR_RETURN(int64_t ax, norm_axis(a, rank_of(x), "axis"));
        if (x->shape[static_cast<size_t>(ax)].known() && x->shape[static_cast<size_t>(ax)].value != 1)
            return make_error(StatusCode::INVALID_ARGUMENT, "cannot squeeze axis {} of {} (not 1)", a, shape_str(x->shape));
        drop[static_cast<size_t>(ax)] = true;
    }
    Shape out;
    for (size_t i = 0; i < x->shape.size(); ++i)
        if (!drop[i]) out.push_back(x->shape[i]);
    c.set(0, x->dtype, std::move(out));
    return {};
}

Status infer_unsqueeze(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"axes"}));
    const Value* x = c.in(0);
    LOOM_ASSIGN_OR_RETURN(auto axes, opu::ints_from(c.graph(), c.node(), 1, "axes"));
    if (!axes) return make_error(StatusCode::INVALID_ARGUMENT, "Unsqueeze needs axes");
    const int64_t r = rank_of(x) + static_cast<int64_t>(axes->size());
    std::vector<bool> add(static_cast<size_t>(r), false);
    for (int64_t a : *axes) {
        LOOM_ASSIGN_OR_RETURN(int64_t ax, norm_axis(a, r, "axis"));
        if (add[static_cast<size_t>(ax)]) return make_error(StatusCode::INVALID_ARGUMENT, "axis {} repeats", a);
        add[static_cast<size_t>(ax)] = true;
    }
    Shape out;
    size_t next = 0;
    for (size_t i = 0; i < add.size(); ++i) out.push_back(add[i] ? Dim(1) : x->shape[next++]);
    c.set(0, x->dtype, std::move(out));
    return {};
}

Status infer_concat(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"axis"}));
    const Value* x0 = c.in(0);
    LOOM_ASSIGN_OR_RETURN(int64_t axis_attr, c.attrs().get_int("axis"));
    LOOM_ASSIGN_OR_RETURN(int64_t axis, norm_axis(axis_attr, rank_of(x0), "attribute 'axis'"));
    Shape out = x0->shape;
    Dim& sum = out[static_cast<size_t>(axis)];
    for (size_t i = 1; i < c.input_count(); ++i) {
        const Value* v = c.in(i);
        if (!v) return make_error(StatusCode::INVALID_ARGUMENT, "input {} is absent", i);
        if (v->shape.size() != x0->shape.size() || v->dtype != x0->dtype)
            return make_error(StatusCode::INVALID_ARGUMENT, "input {} is {} {}, input 0 is {} {}", i,
                              device::dtype_name(v->dtype), shape_str(v->shape), device::dtype_name(x0->dtype),
                              shape_str(x0->shape));
        for (size_t k = 0; k < out.size(); ++k) {
            const Dim &a = x0->shape[k], &o = v->shape[k];
            if (k != static_cast<size_t>(axis) && a.known() && o.known() && a.value != o.value)
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "input {} is {}, input 0 is {}: they differ off axis {}", i, shape_str(v->shape),
                                  shape_str(x0->shape), axis);
        }
        const Dim& d = v->shape[static_cast<size_t>(axis)];
        if (sum.known() && d.known()) {
            LOOM_ASSIGN_OR_RETURN(sum, opu::checked_dim(Checked(sum.value) + d.value, "the concatenated size"));
        } else {
            sum = c.fresh(0, static_cast<size_t>(axis));
        }
    }
    c.set(0, x0->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_concat(const Graph&, const Node& n) {
    return Lowered{"concat", n.attrs, n.inputs, false};
}

Status infer_split(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"axis", "split"}));
    const Value* x = c.in(0);
    LOOM_ASSIGN_OR_RETURN(int64_t axis_attr, c.attrs().get_int("axis", 0));
    LOOM_ASSIGN_OR_RETURN(int64_t axis, norm_axis(axis_attr, rank_of(x), "attribute 'axis'"));
    LOOM_ASSIGN_OR_RETURN(auto split, opu::ints_from(c.graph(), c.node(), 1, "split"));
    const size_t n = c.output_count();
    const Dim& total = x->shape[static_cast<size_t>(axis)];
    for (size_t i = 0; i < n; ++i) {
        Shape s = x->shape;
        Dim& d = s[static_cast<size_t>(axis)];
        if (split) {
            if (split->size() != n)
                return make_error(StatusCode::INVALID_ARGUMENT, "split has {} sizes for {} outputs", split->size(), n);
            d = Dim((*split)[i]);
        } else if (total.known()) {
            if (total.value % static_cast<int64_t>(n) != 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "axis {} of size {} does not split into {} equal parts",
                                  axis, total.value, n);
            d = Dim(total.value / static_cast<int64_t>(n));
        } else {
            d = c.fresh(i, static_cast<size_t>(axis));
        }
        c.set(i, x->dtype, std::move(s));
    }
    if (split && total.known()) {
        Checked checked_sum = 0;
        for (int64_t v : *split) checked_sum = checked_sum + v;
        LOOM_ASSIGN_OR_RETURN(const int64_t sum, opu::checked_value(checked_sum, "the sum of the split sizes"));
        if (sum != total.value)
            return make_error(StatusCode::INVALID_ARGUMENT, "split sizes [{}] sum to {}, axis {} has {}",
                              fmt::join(*split, ", "), sum, axis, total.value);
    }
    return {};
}

Result<Lowered> lower_split(const Graph&, const Node& n) {
    Lowered l{"split", {}, {n.inputs[0]}, false};
    opu::copy_attrs(n.attrs, l.attrs, {"axis"});
    return l;
}

struct SliceArgs {
    std::vector<int64_t> starts, ends, axes, steps;
};

Result<SliceArgs> slice_args(const Graph& g, const Node& n, int64_t rank) {
    SliceArgs a;
    LOOM_ASSIGN_OR_RETURN(auto starts, opu::ints_from(g, n, 1, "starts"));
    LOOM_ASSIGN_OR_RETURN(auto ends, opu::ints_from(g, n, 2, "ends"));
    LOOM_ASSIGN_OR_RETURN(auto axes, opu::ints_from(g, n, 3, "axes"));
    LOOM_ASSIGN_OR_RETURN(auto steps, opu::ints_from(g, n, 4, ""));
    if (!starts || !ends) return make_error(StatusCode::INVALID_ARGUMENT, "Slice needs starts and ends");
    a.starts = *starts;
    a.ends = *ends;
    if (axes) a.axes = *axes;
    else
        for (size_t i = 0; i < a.starts.size(); ++i) a.axes.push_back(static_cast<int64_t>(i));
    a.steps = steps ? *steps : std::vector<int64_t>(a.starts.size(), 1);
    if (a.ends.size() != a.starts.size() || a.axes.size() != a.starts.size() || a.steps.size() != a.starts.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "starts/ends/axes/steps have {}/{}/{}/{} values", a.starts.size(),
                          a.ends.size(), a.axes.size(), a.steps.size());
    for (int64_t& ax : a.axes) {
        LOOM_ASSIGN_OR_RETURN(ax, norm_axis(ax, rank, "slice axis"));
    }
    return a;
}

Status infer_slice(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"starts", "ends", "axes"}));
    const Value* x = c.in(0);
    Shape out = x->shape;
    auto args = slice_args(c.graph(), c.node(), rank_of(x));
    if (!args.ok()) {
        if (args.status().code() != StatusCode::UNSUPPORTED) return args.status();
        for (size_t i = 0; i < out.size(); ++i) out[i] = c.fresh(0, i);  // dynamic starts/ends
        c.set(0, x->dtype, std::move(out));
        return {};
    }
    for (size_t i = 0; i < args->starts.size(); ++i) {
        const size_t ax = static_cast<size_t>(args->axes[i]);
        const Dim& d = x->shape[ax];
        const int64_t step = args->steps[i];
        if (step == 0) return make_error(StatusCode::INVALID_ARGUMENT, "slice step of axis {} is 0", ax);
        if (!d.known()) {
            out[ax] = c.fresh(0, ax);
            continue;
        }
        int64_t s = args->starts[i], e = args->ends[i];
        const int64_t dim = d.value;
        if (s < 0) s += dim;  // negative plus a size >= 0: no overflow
        if (e < 0) e += dim;
        // Counts without start + step, which overflows for steps near the int64 limits.
        if (step > 0) {
            s = std::clamp<int64_t>(s, 0, dim);
            e = std::clamp<int64_t>(e, 0, dim);
            out[ax] = Dim(e > s ? (e - s - 1) / step + 1 : 0);
        } else {
            s = std::clamp<int64_t>(s, 0, dim - 1);
            e = std::clamp<int64_t>(e, -1, dim - 1);
            const uint64_t stride = uint64_t{0} - static_cast<uint64_t>(step);  // |step|, INT64_MIN included
            out[ax] = Dim(s > e ? static_cast<int64_t>(static_cast<uint64_t>(s - e - 1) / stride) + 1 : 0);
        }
    }
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_slice(const Graph& g, const Node& n) {
    LOOM_ASSIGN_OR_RETURN(SliceArgs a, slice_args(g, n, static_cast<int64_t>(g.value(n.inputs[0]).shape.size())));
    Lowered l{"slice", {}, {n.inputs[0]}, false};
    l.attrs.set("starts", a.starts).set("ends", a.ends).set("axes", a.axes).set("steps", a.steps);
    return l;
}

// Pads as 2 x rank begins-then-ends, from input 1 (opset 11+, with optional axes in input 3)
// or the attribute (opset 2).
Result<std::vector<int64_t>> pad_amounts(const Graph& g, const Node& n, int64_t rank) {
    LOOM_ASSIGN_OR_RETURN(auto pads, opu::ints_from(g, n, 1, "pads"));
    if (!pads) return make_error(StatusCode::INVALID_ARGUMENT, "Pad needs pads");
    LOOM_ASSIGN_OR_RETURN(auto axes, opu::ints_from(g, n, 3, ""));
    if (!axes) {
        if (static_cast<int64_t>(pads->size()) != 2 * rank)
            return make_error(StatusCode::INVALID_ARGUMENT, "pads has {} values, expected 2 x rank = {}", pads->size(),
                              2 * rank);
        return *pads;
    }
    if (pads->size() != 2 * axes->size())
        return make_error(StatusCode::INVALID_ARGUMENT, "pads has {} values for {} axes", pads->size(), axes->size());
    std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
    for (size_t i = 0; i < axes->size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(int64_t ax, norm_axis((*axes)[i], rank, "pad axis"));
        full[static_cast<size_t>(ax)] = (*pads)[i];
        full[static_cast<size_t>(ax + rank)] = (*pads)[i + axes->size()];
    }
    return full;
}

Status infer_pad(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"mode", "pads", "value"}));
    const Value* x = c.in(0);
    const int64_t r = rank_of(x);
    auto pads = pad_amounts(c.graph(), c.node(), r);
    Shape out = x->shape;
    for (size_t i = 0; i < out.size(); ++i) {
        if (!pads.ok() || !out[i].known()) {
            if (!pads.ok() && pads.status().code() != StatusCode::UNSUPPORTED) return pads.status();
            out[i] = c.fresh(0, i);
            continue;
        }
        LOOM_ASSIGN_OR_RETURN(out[i], opu::checked_dim(Checked(out[i].value) + (*pads)[i] +
                                                           (*pads)[i + static_cast<size_t>(r)],
                                                       fmt::format("the padded size of axis {}", i)));
        if (out[i].value < 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "pads [{}] make axis {} negative", fmt::join(*pads, ", "), i);
    }
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_pad(const Graph& g, const Node& n) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                          pad_amounts(g, n, static_cast<int64_t>(g.value(n.inputs[0]).shape.size())));
    Lowered l{"pad", {}, {n.inputs[0]}, false};
    l.attrs.set("pads", pads);
    opu::copy_attrs(n.attrs, l.attrs, {"mode"});
    LOOM_ASSIGN_OR_RETURN(auto value, opu::floats_from(g, n, 2, "value"));
    if (value) {
        if (value->size() > 1) return make_error(StatusCode::INVALID_ARGUMENT, "Pad constant_value is not a scalar");
        if (!value->empty()) l.attrs.set("value", (*value)[0]);
    }
    return l;
}

Result<std::vector<int64_t>> transpose_perm(const KernelAttrs& a, size_t rank) {
    std::vector<int64_t> reversed(rank);
    for (size_t i = 0; i < rank; ++i) reversed[i] = static_cast<int64_t>(rank - 1 - i);
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, a.get_ints("perm", reversed));
    std::vector<bool> seen(rank, false);
    if (perm.size() != rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "perm [{}] has {} values for rank {}", fmt::join(perm, ", "),
                          perm.size(), rank);
    for (int64_t p : perm) {
        if (p < 0 || p >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(p)])
            return make_error(StatusCode::INVALID_ARGUMENT, "perm [{}] is not a permutation", fmt::join(perm, ", "));
        seen[static_cast<size_t>(p)] = true;
    }
    return perm;
}

Status infer_transpose(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"perm"}));
    const Value* x = c.in(0);
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, transpose_perm(c.attrs(), x->shape.size()));
    Shape out;
    for (int64_t p : perm) out.push_back(x->shape[static_cast<size_t>(p)]);
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_transpose(const Graph& g, const Node& n) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, transpose_perm(n.attrs, g.value(n.inputs[0]).shape.size()));
    Lowered l{"transpose", {}, {n.inputs[0]}, false};
    l.attrs.set("perm", perm);
    return l;
}

Status infer_space(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"blocksize", "mode"}));
    const Value* x = c.in(0);
    if (x->shape.size() != 4)
        return make_error(StatusCode::INVALID_ARGUMENT, "input is {}, expected NCHW", shape_str(x->shape));
    LOOM_ASSIGN_OR_RETURN(int64_t b, c.attrs().get_int("blocksize"));
    if (b < 1) return make_error(StatusCode::INVALID_ARGUMENT, "blocksize {} (must be >= 1)", b);
    const bool to_space = c.node().op == "DepthToSpace";
    // blocksize^2 overflowed (and wrapped to 0: a division by zero) before it was checked.
    LOOM_ASSIGN_OR_RETURN(const int64_t b2, opu::checked_value(Checked(b) * b, fmt::format("blocksize^2 ({})", b)));
    auto scale = [&](const Dim& d, bool up, size_t axis) -> Result<Dim> {
        if (!d.known()) return c.fresh(0, axis);
        if (up) return opu::checked_dim(Checked(d.value) * b, fmt::format("axis {} times the blocksize", axis));
        if (d.value % b != 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "axis {} of {} is not a multiple of blocksize {}", axis,
                              shape_str(x->shape), b);
        return Dim(d.value / b);
    };
    Shape out{x->shape[0]};
    if (to_space) {
        const Dim& ch = x->shape[1];
        if (ch.known() && ch.value % b2 != 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "channels {} not a multiple of blocksize^2 = {}", ch.value,
                              b2);
        out.push_back(ch.known() ? Dim(ch.value / b2) : c.fresh(0, 1));
    } else if (x->shape[1].known()) {
        LOOM_ASSIGN_OR_RETURN(Dim ch, opu::checked_dim(Checked(x->shape[1].value) * b2, "channels times blocksize^2"));
        out.push_back(std::move(ch));
    } else {
        out.push_back(c.fresh(0, 1));
    }
    for (size_t i = 2; i < 4; ++i) {
        LOOM_ASSIGN_OR_RETURN(Dim d, scale(x->shape[i], to_space, i));
        out.push_back(d);
    }
    c.set(0, x->dtype, std::move(out));
    return {};
}

// DepthToSpace may carry a fused residual as input 1 (compiler/passes.hpp).
Result<Lowered> lower_space(const Graph&, const Node& n) {
    const bool d2s = n.op == "DepthToSpace";
    return Lowered{d2s ? "depth_to_space" : "space_to_depth", n.attrs, d2s ? n.inputs : std::vector<int>{n.inputs[0]},
                   false};
}

// Resize (opset 11+: X, roi, scales, sizes; opset 10: X, scales) and Upsample (opset 9: X,
// scales; opset 7: the scales attribute).
struct ResizeArgs {
    std::optional<std::vector<double>> scales;
    std::optional<std::vector<int64_t>> sizes;
    std::optional<std::vector<double>> roi;
};

bool legacy_resize(const Graph& g, const Node& n) { return n.op == "Upsample" || g.opset < 11; }

Result<ResizeArgs> resize_args(const Graph& g, const Node& n) {
    ResizeArgs a;
    if (legacy_resize(g, n)) {
        LOOM_ASSIGN_OR_RETURN(a.scales, opu::floats_from(g, n, 1, "scales"));
        return a;
    }
    // roi matters only for tf_crop_and_resize; elsewhere it may be anything, even dynamic.
    auto coord = n.attrs.get_string("coordinate_transformation_mode", "half_pixel");
    if (coord.ok() && *coord == "tf_crop_and_resize") {
        LOOM_ASSIGN_OR_RETURN(a.roi, opu::floats_from(g, n, 1, ""));
    }
    LOOM_ASSIGN_OR_RETURN(a.scales, opu::floats_from(g, n, 2, ""));
    LOOM_ASSIGN_OR_RETURN(a.sizes, opu::ints_from(g, n, 3, ""));
    if (a.scales && a.scales->empty()) a.scales.reset();
    if (a.sizes && a.sizes->empty()) a.sizes.reset();
    if (a.roi && a.roi->empty()) a.roi.reset();
    if (a.scales && a.sizes) return make_error(StatusCode::INVALID_ARGUMENT, "Resize has both scales and sizes");
    return a;
}

Status check_resize_attrs(const Graph& g, const Node& n) {
    if (legacy_resize(g, n)) return n.attrs.check_known({"mode", "scales"});
    LOOM_TRY(n.attrs.check_known({"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                                  "exclude_outside", "extrapolation_value", "antialias", "keep_aspect_ratio_policy"}));
    LOOM_ASSIGN_OR_RETURN(int64_t antialias, n.attrs.get_int("antialias", 0));
    if (antialias) return make_error(StatusCode::UNSUPPORTED, "Resize with antialias = 1");
    LOOM_ASSIGN_OR_RETURN(std::string policy, n.attrs.get_string("keep_aspect_ratio_policy", "stretch"));
    if (policy != "stretch") return make_error(StatusCode::UNSUPPORTED, "Resize keep_aspect_ratio_policy '{}'", policy);
    return {};
}

Status infer_resize(InferContext& c) {
    LOOM_TRY(check_resize_attrs(c.graph(), c.node()));
    const Value* x = c.in(0);
    auto args = resize_args(c.graph(), c.node());
    Shape out = x->shape;
    if (!args.ok()) {
        if (args.status().code() != StatusCode::UNSUPPORTED) return args.status();
        for (size_t i = 0; i < out.size(); ++i) out[i] = c.fresh(0, i);
    } else if (args->sizes) {
        if (args->sizes->size() != out.size())
            return make_error(StatusCode::INVALID_ARGUMENT, "sizes has {} values for rank {}", args->sizes->size(), out.size());
        for (size_t i = 0; i < out.size(); ++i) {
            if ((*args->sizes)[i] < 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "sizes [{}] has a negative size",
                                  fmt::join(*args->sizes, ", "));
            out[i] = Dim((*args->sizes)[i]);
        }
    } else if (args->scales) {
        if (args->scales->size() != out.size())
            return make_error(StatusCode::INVALID_ARGUMENT, "scales has {} values for rank {}", args->scales->size(),
                              out.size());
        for (size_t i = 0; i < out.size(); ++i) {
            const double s = (*args->scales)[i];
            if (!(s > 0) || !std::isfinite(s))
                return make_error(StatusCode::INVALID_ARGUMENT, "scale {} of axis {} is not positive", s, i);
            if (s == 1.0) continue;
            if (!out[i].known()) {
                out[i] = c.fresh(0, i);
                continue;
            }
            // A double past 2^62 does not convert to int64 (undefined behaviour); refuse it first.
            const double size = std::floor(static_cast<double>(out[i].value) * s);
            if (!(size < 0x1p62))
                return make_error(StatusCode::OUT_OF_RANGE, "scale {} of axis {} makes {} elements of {}", s, i, size,
                                  out[i].value);
            out[i] = Dim(static_cast<int64_t>(size));
        }
    } else {
        return make_error(StatusCode::INVALID_ARGUMENT, "Resize needs scales or sizes");
    }
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_resize(const Graph& g, const Node& n) {
    LOOM_TRY(check_resize_attrs(g, n));
    LOOM_ASSIGN_OR_RETURN(ResizeArgs a, resize_args(g, n));
    Lowered l{"resize", {}, {n.inputs[0]}, false};
    if (legacy_resize(g, n)) {
        // Opset 7-10: nearest is floor(x / scale), linear has asymmetric coordinates.
        LOOM_ASSIGN_OR_RETURN(std::string mode, n.attrs.get_string("mode", "nearest"));
        l.attrs.set("mode", mode == "bilinear" ? std::string("linear") : mode);
        l.attrs.set("coordinate_transformation_mode", "asymmetric");
        l.attrs.set("nearest_mode", "floor");
    } else {
        opu::copy_attrs(n.attrs, l.attrs,
                        {"mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
                         "extrapolation_value"});
        LOOM_ASSIGN_OR_RETURN(std::string coord, n.attrs.get_string("coordinate_transformation_mode", "half_pixel"));
        if (a.roi && coord == "tf_crop_and_resize") l.attrs.set("roi", *a.roi);
    }
    if (a.scales) l.attrs.set("scales", *a.scales);
    return l;
}

Status infer_shape(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"start", "end"}));
    const int64_t r = rank_of(c.in(0));
    LOOM_ASSIGN_OR_RETURN(int64_t start, c.attrs().get_int("start", 0));
    LOOM_ASSIGN_OR_RETURN(int64_t end, c.attrs().get_int("end", r));
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, 0, r);
    c.set(0, DType::I64, Shape{Dim(std::max<int64_t>(end - start, 0))});
    return {};
}

Result<Lowered> lower_shape(const Graph&, const Node& n) { return Lowered{"shape", n.attrs, {n.inputs[0]}, false}; }

Status infer_gather(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"axis"}));
    const Value *x = c.in(0), *idx = c.in(1);
    if (idx->dtype != DType::I32 && idx->dtype != DType::I64)
        return make_error(StatusCode::INVALID_ARGUMENT, "indices are {}, expected int32 or int64",
                          device::dtype_name(idx->dtype));
    LOOM_ASSIGN_OR_RETURN(int64_t axis_attr, c.attrs().get_int("axis", 0));
    LOOM_ASSIGN_OR_RETURN(int64_t axis, norm_axis(axis_attr, rank_of(x), "attribute 'axis'"));
    Shape out(x->shape.begin(), x->shape.begin() + axis);
    out.insert(out.end(), idx->shape.begin(), idx->shape.end());
    out.insert(out.end(), x->shape.begin() + axis + 1, x->shape.end());
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_gather(const Graph&, const Node& n) { return Lowered{"gather", n.attrs, n.inputs, false}; }

// TransData: Loom's own op between the ND and NC1HWC0 device layouts (compiler/passes.hpp,
// assign_layouts); the value is unchanged.
Status infer_trans_data(InferContext& c) {
    LOOM_TRY(c.attrs().check_known({"src", "dst"}));
    if (c.in(0)->shape.size() != 4)
        return make_error(StatusCode::INVALID_ARGUMENT, "input is {}, must be 4-D", shape_str(c.in(0)->shape));
    return infer_identity(c);
}

Result<Lowered> lower_trans_data(const Graph&, const Node& n) {
    return Lowered{"trans_data", n.attrs, {n.inputs[0]}, false};
}

// Spatial tiling through Concat and Split (their ONNX default axes differ): along the channels
// only.
template <int64_t kAxisDefault>
Status tile_channels(const Graph&, const Node& n, TileFlow&) {
    LOOM_ASSIGN_OR_RETURN(int64_t axis, n.attrs.get_int("axis", kAxisDefault));
    if (axis != 1 && axis != -3) return make_error(StatusCode::UNSUPPORTED, "it joins or cuts along a spatial axis");
    return {};
}

// Spatial tiling through a Slice (ncnn's Crop: a U-Net's skip connection cut to the size of the
// branch it joins): a fixed offset from the map's start, the end a fixed distance from its end
// (negative, or the size of another map of the same scale, which shape inference folded), step
// 1 along H and W. The window's output being its share of the frame's is checked once the
// window is compiled (executor/tiled.cpp: every output and reduced map).
Status tile_slice(const Graph& g, const Node& n, TileFlow& t) {
    const Value& x = *g.input(n, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    LOOM_ASSIGN_OR_RETURN(SliceArgs a, slice_args(g, n, rank));
    // Per spatial axis (H, W), then the larger: an axis not cut keeps the input's.
    int64_t lo[2] = {t.lo, t.lo}, hi[2] = {t.hi, t.hi};
    for (size_t i = 0; i < a.axes.size(); ++i) {
        const int64_t ax = a.axes[i];
        if (ax < rank - 2) continue;
        if (a.steps[i] != 1) return make_error(StatusCode::UNSUPPORTED, "step {} along a spatial axis", a.steps[i]);
        const Dim& d = x.shape[static_cast<size_t>(ax)];
        if (!d.known()) return make_error(StatusCode::UNSUPPORTED, "its input's size is not known");
        if (a.starts[i] < 0)
            return make_error(StatusCode::UNSUPPORTED, "it keeps a fixed count of pixels from the map's end");
        const int64_t s = std::min(a.starts[i], d.value);
        const int64_t e = std::clamp<int64_t>(a.ends[i] < 0 ? a.ends[i] + d.value : a.ends[i], s, d.value);
        const auto k = static_cast<size_t>(ax - (rank - 2));
        lo[k] = std::max<int64_t>(t.lo - s, 0);
        hi[k] = std::max<int64_t>(t.hi - (d.value - e), 0);
    }
    t.lo = std::max(lo[0], lo[1]);
    t.hi = std::max(hi[0], hi[1]);
    return {};
}

Status tile_depth_to_space(const Graph&, const Node& n, TileFlow& t) {
    LOOM_ASSIGN_OR_RETURN(int64_t b, n.attrs.get_int("blocksize"));
    if (b < 1) return make_error(StatusCode::UNSUPPORTED, "blocksize {}", b);
    t.num *= b;
    t.lo *= b;
    t.hi *= b;
    return {};
}

// A split region's bands through DepthToSpace: an input row gives `blocksize` output rows; a fused
// residual is read at the output's rows.
Status split_depth_to_space(const SplitStepView& s, SplitRule& r) {
    LOOM_ASSIGN_OR_RETURN(int64_t b, s.step.attrs.get_int("blocksize"));
    if (b < 1) return make_error(StatusCode::UNSUPPORTED, "blocksize {}", b);
    r.scale = b;
    r.inputs.assign(s.inputs.size(), BandRole::WHOLE);
    r.inputs[0] = BandRole::SOURCE;
    if (s.inputs.size() > 1 && !s.inputs[1].empty()) r.inputs[1] = BandRole::SAME;
    return {};
}

// A split region's bands through Resize / Upsample up by a whole factor along H: a band computes its
// output from input rows widened by the interpolation's reach and keeps the middle, where no
// coordinate was clamped at the band's edge. Its coordinates are the whole map's shifted by whole
// input rows, which rounds the same only where the factor is a power of two or the mode nearest.
Status split_resize(const SplitStepView& s, SplitRule& r) {
    const std::vector<int64_t>& x = s.inputs.at(0);
    const std::vector<int64_t>& y = s.outputs.at(0);
    if (x.size() != 4 || x[2] < 1 || y[2] < x[2] || y[2] % x[2] != 0)
        return make_error(StatusCode::UNSUPPORTED, "it does not scale H up by a whole factor");
    if (x[0] != y[0] || x[1] != y[1]) return make_error(StatusCode::UNSUPPORTED, "it resizes N or C");
    const int64_t f = y[2] / x[2];
    LOOM_ASSIGN_OR_RETURN(std::string mode, s.step.attrs.get_string("mode", "nearest"));
    LOOM_ASSIGN_OR_RETURN(std::string coord, s.step.attrs.get_string("coordinate_transformation_mode", "half_pixel"));
    if (coord != "half_pixel" && coord != "asymmetric")
        return make_error(StatusCode::UNSUPPORTED, "coordinate mode '{}' (bands take half_pixel and asymmetric)",
                          coord);
    if (mode != "nearest" && (f & (f - 1)) != 0)
        return make_error(StatusCode::UNSUPPORTED, "{} interpolation by {} (bands take nearest, or a power of two)",
                          mode, f);
    r.scale = f;
    r.radius = mode == "cubic" ? 2 : 1;
    r.inputs.assign(s.inputs.size(), BandRole::WHOLE);
    r.inputs[0] = BandRole::SOURCE;
    return {};
}

// Spatial tiling through Resize / Upsample by one whole factor on H and W.
Status tile_resize(const Graph& g, const Node& n, TileFlow& t) {
    const Value& y = g.value(n.outputs[0]);
    const Value& xv = *g.input(n, 0);
    // One whole factor on both axes: up by f, or down by d (animevideov3 x2 runs its x4 network,
    // then halves with a bicubic resize).
    int64_t f = 0, d = 0;
    for (size_t a = 2; a < 4; ++a) {
        const int64_t i = xv.shape[a].value, o = y.shape[a].value;
        if (i > 0 && o > 0 && o % i == 0 && (!f || f == o / i) && !d) {
            f = o / i;
        } else if (i > 0 && o > 0 && i % o == 0 && (!d || d == i / o) && !f) {
            d = i / o;
        } else {
            return make_error(StatusCode::UNSUPPORTED, "it does not scale H and W by one whole factor");
        }
    }
    if (xv.shape[0] != y.shape[0] || xv.shape[1] != y.shape[1])
        return make_error(StatusCode::UNSUPPORTED, "it resizes N or C");
    LOOM_ASSIGN_OR_RETURN(std::string mode, n.attrs.get_string("mode", "nearest"));
    LOOM_ASSIGN_OR_RETURN(std::string coord, n.attrs.get_string("coordinate_transformation_mode", "half_pixel"));
    if (coord == "tf_crop_and_resize" || coord == "align_corners")
        return make_error(StatusCode::UNSUPPORTED, "coordinate mode '{}' depends on the frame size", coord);
    // Nearest reads one source pixel (one more when rounding may pick the next one); linear
    // two, cubic four.
    const int64_t reach = mode == "cubic" ? 2 : 1;
    if (d) {
        // Output pixel y samples around source pixel d*y + (d-1)/2: its taps lie within
        // [d*y - reach, d*y + d - 1 + reach]. Tile origins must fall on the d-pixel grid of the
        // source map.
        t.align = std::lcm(t.align, origin_multiple(t.num, t.den, d));
        t.lo = (t.lo + reach + d + d - 1) / d;
        t.hi = (t.hi + reach + d + d - 1) / d;
        t.den *= d;
    } else {
        t.lo = (t.lo + reach) * f;
        t.hi = (t.hi + reach) * f;
        t.num *= f;
    }
    return {};
}

}  // namespace

constexpr OpTrait kHost = OpTrait::HOST_WHEN_TINY;

LOOM_DEFINE_OP(Identity, 1, 1, 1, infer_identity, lower_reshape,
               .traits = OpTrait::POINTWISE | OpTrait::LAYOUT_AGNOSTIC | kHost)
LOOM_DEFINE_OP(Reshape, 2, 2, 1, infer_reshape, lower_reshape, .traits = kHost, .constant_inputs = 0b10)
LOOM_DEFINE_OP(Flatten, 1, 1, 1, infer_flatten, lower_reshape)
LOOM_DEFINE_OP(Squeeze, 1, 2, 1, infer_squeeze, lower_reshape, .traits = kHost, .constant_inputs = 0b10)
LOOM_DEFINE_OP(Unsqueeze, 1, 2, 1, infer_unsqueeze, lower_reshape, .traits = kHost, .constant_inputs = 0b10)
LOOM_DEFINE_OP(Concat, 1, 64, 1, infer_concat, lower_concat, .traits = kHost, .tile = tile_channels<1>)
LOOM_DEFINE_OP(Split, 1, 2, 64, infer_split, lower_split, .constant_inputs = 0b10, .tile = tile_channels<0>)
LOOM_DEFINE_OP(Slice, 1, 5, 1, infer_slice, lower_slice, .traits = kHost | OpTrait::SPATIAL, .constant_inputs = 0b11110,
               .tile = tile_slice)
LOOM_DEFINE_OP(Pad, 1, 4, 1, infer_pad, lower_pad, .traits = OpTrait::SPATIAL, .constant_inputs = 0b1110)
LOOM_DEFINE_OP(Transpose, 1, 1, 1, infer_transpose, lower_transpose)
LOOM_DEFINE_OP(DepthToSpace, 1, 2, 1, infer_space, lower_space, .traits = OpTrait::TAKES_EPILOGUE,
               .tile = tile_depth_to_space, .split = split_depth_to_space)
LOOM_DEFINE_OP(SpaceToDepth, 1, 1, 1, infer_space, lower_space)
LOOM_DEFINE_OP(Resize, 1, 4, 1, infer_resize, lower_resize, .traits = OpTrait::PARAMETER_INPUTS | OpTrait::SPATIAL,
               .constant_inputs = 0b1110, .tile = tile_resize, .split = split_resize)
LOOM_DEFINE_OP(Upsample, 1, 2, 1, infer_resize, lower_resize, .traits = OpTrait::PARAMETER_INPUTS | OpTrait::SPATIAL,
               .constant_inputs = 0b10, .tile = tile_resize, .split = split_resize)
LOOM_DEFINE_OP(Shape, 1, 1, 1, infer_shape, lower_shape, .traits = kHost | OpTrait::READS_DIMS_ONLY)
LOOM_DEFINE_OP(Gather, 2, 2, 1, infer_gather, lower_gather, .traits = kHost)
// Pointwise in space (the same logical map in another device layout), not in layout: bands take
// the pointwise rule without the trait.
LOOM_DEFINE_OP(TransData, 1, 1, 1, infer_trans_data, lower_trans_data, .split = pointwise_split_rule)

}  // namespace loom::compiler
