#include "compiler/ops/util.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace loom::compiler::opu {

Result<int64_t> norm_axis(int64_t axis, int64_t rank, std::string_view what) {
    // A scalar has no axis: every caller indexes the shape with the result.
    if (axis < -rank || axis >= rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "{} {} is out of range for rank {}", what, axis, rank);
    return axis < 0 ? axis + rank : axis;
}

Result<Shape> broadcast(const Shape& a, const Shape& b, const Dim& fresh) {
    const size_t r = std::max(a.size(), b.size());
    Shape out(r);
    for (size_t i = 0; i < r; ++i) {
        const Dim da = i < r - a.size() ? Dim(1) : a[i - (r - a.size())];
        const Dim db = i < r - b.size() ? Dim(1) : b[i - (r - b.size())];
        Dim& o = out[i];
        if (da == db) o = da;
        else if (da.known() && da.value == 1) o = db;
        else if (db.known() && db.value == 1) o = da;
        else if (da.known() && db.known())
            return make_error(StatusCode::INVALID_ARGUMENT, "shapes {} and {} do not broadcast (axis {}: {} vs {})",
                              shape_str(a), shape_str(b), i, da.value, db.value);
        else if (da.known()) o = da;
        else if (db.known()) o = db;
        else o = fresh;
    }
    return out;
}

namespace {
template <typename T, typename Conv>
Result<std::optional<std::vector<T>>> list_from(const Graph& g, const Node& n, size_t input, std::string_view attr,
                                                Conv conv, bool ints) {
    if (const Value* v = g.input(n, input)) {
        if (!v->data)
            return make_error(StatusCode::UNSUPPORTED, "input {} ('{}') must be a constant (dynamic values are not supported)",
                              input, v->name);
        return std::optional<std::vector<T>>(conv(*v->data));
    }
    if (!attr.empty() && n.attrs.has(attr)) {
        if (ints) {
            auto r = n.attrs.get_ints(attr);
            if (!r.ok()) return r.status();
            return std::optional<std::vector<T>>(std::vector<T>(r->begin(), r->end()));
        }
        auto r = n.attrs.get_floats(attr);
        if (!r.ok()) return r.status();
        return std::optional<std::vector<T>>(std::vector<T>(r->begin(), r->end()));
    }
    return std::optional<std::vector<T>>();
}
}  // namespace

Result<std::optional<std::vector<int64_t>>> ints_from(const Graph& g, const Node& n, size_t input,
                                                      std::string_view attr) {
    if (const Value* v = g.input(n, input); v && v->data) {
        auto r = v->data->to_ints();
        if (!r.ok()) return r.status().with_context(fmt::format("input {} ('{}')", input, v->name));
        return std::optional<std::vector<int64_t>>(std::move(*r));
    }
    return list_from<int64_t>(g, n, input, attr, [](const HostTensor&) { return std::vector<int64_t>(); }, true);
}

bool is_spatial_mean(const Graph& g, const Node& n) {
    if (n.op != "ReduceMean" || n.inputs.empty() || n.inputs[0] < 0 || n.outputs.size() != 1) return false;
    const Value& x = g.value(n.inputs[0]);
    if (!x.typed || x.shape.size() != 4 || x.is_constant() || (x.dtype != DType::F32 && x.dtype != DType::F16))
        return false;
    for (size_t a = 2; a < 4; ++a)
        if (x.shape[a].known() && x.shape[a].value <= 0) return false;  // GlobalAveragePool refuses an empty plane
    auto keep = n.attrs.get_int("keepdims", 1);
    auto axes = ints_from(g, n, 1, "axes");
    if (!keep.ok() || *keep != 1 || !axes.ok() || !*axes || (*axes)->size() != 2) return false;
    bool h = false, w = false;
    for (int64_t a : **axes) {
        h = h || a == 2 || a == -2;
        w = w || a == 3 || a == -1;
    }
    return h && w;
}

Result<std::optional<std::vector<double>>> floats_from(const Graph& g, const Node& n, size_t input,
                                                       std::string_view attr) {
    return list_from<double>(g, n, input, attr, [](const HostTensor& t) { return t.to_doubles(); }, false);
}

Result<std::vector<int64_t>> static_dims(const Value& v) {
    if (!v.typed) return make_error(StatusCode::INTERNAL, "value '{}' has no inferred type", v.name);
    if (!shape_static(v.shape))
        return make_error(StatusCode::UNSUPPORTED, "value '{}' has the symbolic shape {} (give --shape)", v.name,
                          shape_str(v.shape));
    return shape_dims(v.shape);
}

Result<int64_t> checked_value(Checked v, std::string_view what) {
    if (const auto value = v.get()) return *value;
    return make_error(StatusCode::OUT_OF_RANGE, "{} overflows 64-bit arithmetic", what);
}

Result<Dim> checked_dim(Checked v, std::string_view what) {
    LOOM_ASSIGN_OR_RETURN(const int64_t value, checked_value(v, what));
    return Dim(value);
}

Result<Dim> window_out(const Dim& in, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad_begin,
                       int64_t pad_end, bool ceil_mode, const Dim& fresh) {
    LOOM_ASSIGN_OR_RETURN(const int64_t span, checked_value(Checked(dilation) * (kernel - 1) + 1, "the window span"));
    LOOM_ASSIGN_OR_RETURN(const int64_t pad_total, checked_value(Checked(pad_begin) + pad_end, "the padding"));
    if (!in.known()) return stride == 1 && pad_total == span - 1 ? in : fresh;
    LOOM_ASSIGN_OR_RETURN(const int64_t num, checked_value(Checked(in.value) + pad_total - span, "the window count"));
    if (num < 0) return Dim(0);
    int64_t out = num / stride + (ceil_mode && num % stride != 0) + 1;
    // ONNX (and PyTorch): a ceil-mode window must start inside the input or its left padding.
    const auto last_start = ((Checked(out) - 1) * stride).get();
    if (ceil_mode && (!last_start || *last_start >= in.value + pad_begin)) --out;
    return Dim(out);
}

Result<Window> read_window(const KernelAttrs& a, size_t spatial, const std::vector<int64_t>& weight_kernel) {
    Window w;
    LOOM_ASSIGN_OR_RETURN(w.kernel, a.get_ints("kernel_shape", weight_kernel));
    if (w.kernel.size() != spatial)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'kernel_shape' has {} values, expected {}",
                          w.kernel.size(), spatial);
    LOOM_ASSIGN_OR_RETURN(w.strides, a.get_ints("strides", std::vector<int64_t>(spatial, 1)));
    LOOM_ASSIGN_OR_RETURN(w.dilations, a.get_ints("dilations", std::vector<int64_t>(spatial, 1)));
    LOOM_ASSIGN_OR_RETURN(w.pads, a.get_ints("pads", std::vector<int64_t>(2 * spatial, 0)));
    LOOM_ASSIGN_OR_RETURN(w.auto_pad, a.get_string("auto_pad", "NOTSET"));
    if (w.strides.size() != spatial || w.dilations.size() != spatial || w.pads.size() != 2 * spatial)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "strides/dilations/pads have {}/{}/{} values, expected {}/{}/{}", w.strides.size(),
                          w.dilations.size(), w.pads.size(), spatial, spatial, 2 * spatial);
    for (size_t i = 0; i < spatial; ++i) {
        if (w.kernel[i] < 1 || w.strides[i] < 1 || w.dilations[i] < 1 || w.pads[i] < 0 || w.pads[i + spatial] < 0)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "window of axis {}: kernel {}, stride {}, dilation {}, pads {}/{} (must be positive)", i,
                              w.kernel[i], w.strides[i], w.dilations[i], w.pads[i], w.pads[i + spatial]);
    }
    if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" && w.auto_pad != "VALID")
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'auto_pad' = '{}' (NOTSET, SAME_UPPER, SAME_LOWER, VALID)",
                          w.auto_pad);
    if (w.auto_pad != "NOTSET" && a.has("pads"))
        return make_error(StatusCode::INVALID_ARGUMENT, "attributes 'pads' and auto_pad '{}' exclude each other",
                          w.auto_pad);
    if (w.auto_pad == "VALID") std::fill(w.pads.begin(), w.pads.end(), 0);
    return w;
}

Status resolve_auto_pad(Window& w, size_t axis, int64_t in) {
    if (w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER") return {};
    const size_t spatial = w.kernel.size();
    const int64_t stride = w.strides[axis];
    const int64_t out = in / stride + (in % stride != 0);  // ceil(in / stride) without in + stride
    LOOM_ASSIGN_OR_RETURN(const int64_t needed,
                          checked_value((Checked(out) - 1) * stride + Checked(w.dilations[axis]) * (w.kernel[axis] - 1) +
                                            1 - in,
                                        "the SAME padding"));
    const int64_t total = std::max<int64_t>(0, needed);
    const int64_t small = total / 2, big = total - small;
    w.pads[axis] = w.auto_pad == "SAME_UPPER" ? small : big;
    w.pads[axis + spatial] = w.auto_pad == "SAME_UPPER" ? big : small;
    return {};
}

void copy_attrs(const KernelAttrs& from, KernelAttrs& to, std::initializer_list<std::string_view> names) {
    for (const auto& [name, value] : from.items())
        if (std::find(names.begin(), names.end(), name) != names.end()) to.set(name, value);
}

}  // namespace loom::compiler::opu
