// Neural-network ops: convolutions, matrix products, normalisations, pooling, softmax and
// reductions.
#include <algorithm>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "compiler/halo.hpp"
#include "compiler/ops.hpp"
#include "compiler/ops/util.hpp"
#include "compiler/split.hpp"
#include "device/kernels/cpu/winograd.hpp"

namespace loom::compiler {

namespace {

// The ONNX attributes plus those of the fused epilogue (see compiler/passes.hpp).
Status check_conv_attrs(const KernelAttrs& a, bool transpose) {
    if (transpose)
        return a.check_known({"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "output_padding",
                              "output_shape", "activation", "alpha", "min", "max", "residual_after_activation",
                              "x_scale"});
    return a.check_known({"group", "kernel_shape", "strides", "dilations", "pads", "auto_pad", "activation", "alpha",
                          "min", "max", "residual_after_activation", "x_scale", "winograd"});
}

// The Winograd tile edge a conv runs with on the host (0: none): its `winograd` attribute where
// the compiler recorded a measured choice (compiler/measure.hpp), else cpu::winograd_tile_for's
// rule on C and K; either way the same for a window and the frame.
int64_t winograd_edge(const KernelAttrs& a, int64_t c_in, int64_t c_out) {
    const Result<int64_t> attr = a.get_int("winograd", -1);
    const int64_t chosen = attr.ok() ? *attr : -1;
    return chosen >= 0 ? chosen : static_cast<int64_t>(device::cpu::winograd_tile_for(c_in, c_out));
}

Result<std::vector<int64_t>> weight_kernel(const Value* w) {
    std::vector<int64_t> k;
    for (size_t i = 2; i < w->shape.size(); ++i) {
        if (!w->shape[i].known()) return k;  // kernel_shape must say
        k.push_back(w->shape[i].value);
    }
    return k;
}

Status check_rank(const Value* v, size_t min_rank, const char* what) {
    if (v->shape.size() < min_rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "{} '{}' has rank {}, expected at least {}", what, v->name,
                          v->shape.size(), min_rank);
    return {};
}

Status infer_conv(InferContext& c) {
    const Value *x = c.in(0), *w = c.in(1);
    LOOM_TRY(check_rank(x, 3, "input X"));
    if (w->shape.size() != x->shape.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "weights W have rank {}, X has rank {}", w->shape.size(),
                          x->shape.size());
    const size_t spatial = x->shape.size() - 2;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> wk, weight_kernel(w));
    LOOM_ASSIGN_OR_RETURN(opu::Window win, opu::read_window(c.attrs(), spatial, wk));
    LOOM_ASSIGN_OR_RETURN(int64_t group, c.attrs().get_int("group", 1));
    const bool transpose = c.node().op == "ConvTranspose";
    if (group < 1) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'group' = {} (must be >= 1)", group);
    Shape out{x->shape[0], w->shape[0]};
    if (transpose) {
        if (!w->shape[1].known()) {
            out[1] = c.fresh(0, 1);
        } else {
            LOOM_ASSIGN_OR_RETURN(out[1], opu::checked_dim(Checked(w->shape[1].value) * group, "output channels"));
        }
    }
    std::vector<int64_t> out_pad, out_shape;
    if (transpose) {
        LOOM_ASSIGN_OR_RETURN(out_pad, c.attrs().get_ints("output_padding", std::vector<int64_t>(spatial, 0)));
        LOOM_ASSIGN_OR_RETURN(out_shape, c.attrs().get_ints("output_shape", {}));
        if (out_pad.size() != spatial)
            return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'output_padding' has {} values, expected {}",
                              out_pad.size(), spatial);
        if (!out_shape.empty() && out_shape.size() != spatial && out_shape.size() != spatial + 2)
            return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'output_shape' has {} values, expected {}",
                              out_shape.size(), spatial);
    }
    for (size_t i = 0; i < spatial; ++i) {
        const Dim& in = x->shape[i + 2];
        if (!transpose) {
            if (in.known()) LOOM_TRY(opu::resolve_auto_pad(win, i, in.value));
            else if (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER") {
                out.push_back(win.strides[i] == 1 ? in : c.fresh(0, i + 2));
                continue;
            }
            LOOM_ASSIGN_OR_RETURN(Dim d, opu::window_out(in, win.kernel[i], win.strides[i], win.dilations[i], win.pads[i],
                                                         win.pads[i + spatial], false, c.fresh(0, i + 2)));
            out.push_back(std::move(d));
            continue;
        }
        if (!out_shape.empty()) {
            out.push_back(Dim(out_shape[out_shape.size() - spatial + i]));
        } else if (!in.known()) {
            out.push_back(c.fresh(0, i + 2));
        } else if (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER") {
            LOOM_ASSIGN_OR_RETURN(Dim d, opu::checked_dim(Checked(in.value) * win.strides[i], "the output size"));
            out.push_back(std::move(d));
        } else {
            LOOM_ASSIGN_OR_RETURN(Dim d, opu::checked_dim(Checked(win.strides[i]) * (in.value - 1) + out_pad[i] +
                                                              Checked(win.kernel[i] - 1) * win.dilations[i] + 1 -
                                                              win.pads[i] - win.pads[i + spatial],
                                                          "the output size"));
            out.push_back(std::move(d));
        }
    }
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_conv(const Graph&, const Node& n) {
    const bool transpose = n.op == "ConvTranspose";
    LOOM_TRY(check_conv_attrs(n.attrs, transpose));
    Lowered l{transpose ? "conv_transpose" : "conv", n.attrs, n.inputs, false};
    return l;
}

Status infer_matmul(InferContext& c) {
    const Value *a = c.in(0), *b = c.in(1);
    if (a->shape.empty() || b->shape.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "MatMul of a scalar ('{}' {}, '{}' {})", a->name,
                          shape_str(a->shape), b->name, shape_str(b->shape));
    Shape sa = a->shape, sb = b->shape;
    const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
    if (a1) sa.insert(sa.begin(), Dim(1));
    if (b1) sb.push_back(Dim(1));
    const Dim &ka = sa[sa.size() - 1], &kb = sb[sb.size() - 2];
    if (ka.known() && kb.known() && ka.value != kb.value)
        return make_error(StatusCode::INVALID_ARGUMENT, "MatMul inner dims differ: {} x {}", shape_str(a->shape),
                          shape_str(b->shape));
    LOOM_ASSIGN_OR_RETURN(Shape batch, opu::broadcast(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2),
                                                      c.fresh(0, 0)));
    if (!a1) batch.push_back(sa[sa.size() - 2]);
    if (!b1) batch.push_back(sb[sb.size() - 1]);
    c.set(0, a->dtype, std::move(batch));
    return {};
}

Result<Lowered> lower_matmul(const Graph&, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"activation", "alpha", "min", "max", "x_scale"}));
    return Lowered{"matmul", n.attrs, n.inputs, false};
}

Status infer_gemm(InferContext& c) {
    const Value *a = c.in(0), *b = c.in(1);
    if (a->shape.size() != 2 || b->shape.size() != 2)
        return make_error(StatusCode::INVALID_ARGUMENT, "Gemm needs 2-D A and B, got {} and {}", shape_str(a->shape),
                          shape_str(b->shape));
    LOOM_ASSIGN_OR_RETURN(int64_t ta, c.attrs().get_int("transA", 0));
    LOOM_ASSIGN_OR_RETURN(int64_t tb, c.attrs().get_int("transB", 0));
    const Dim &ka = a->shape[ta ? 0 : 1], &kb = b->shape[tb ? 1 : 0];
    if (ka.known() && kb.known() && ka.value != kb.value)
        return make_error(StatusCode::INVALID_ARGUMENT, "Gemm inner dims differ: A{} {} x B{} {}", ta ? "'" : "",
                          shape_str(a->shape), tb ? "'" : "", shape_str(b->shape));
    c.set(0, a->dtype, Shape{a->shape[ta ? 1 : 0], b->shape[tb ? 0 : 1]});
    return {};
}

Result<Lowered> lower_gemm(const Graph&, const Node& n) {
    LOOM_TRY(n.attrs.check_known(
        {"alpha", "beta", "transA", "transB", "activation", "activation_alpha", "min", "max", "x_scale"}));
    return Lowered{"gemm", n.attrs, n.inputs, false};
}

Status infer_same(InferContext& c) {
    c.set(0, c.in(0)->dtype, c.in(0)->shape);
    return {};
}

Result<Lowered> lower_batchnorm(const Graph&, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"epsilon", "momentum", "training_mode", "spatial"}));
    LOOM_ASSIGN_OR_RETURN(int64_t spatial, n.attrs.get_int("spatial", 1));
    if (spatial != 1) return make_error(StatusCode::UNSUPPORTED, "BatchNormalization with spatial = 0");
    Lowered l{"batchnorm", {}, n.inputs, false};
    opu::copy_attrs(n.attrs, l.attrs, {"epsilon", "momentum", "training_mode"});
    return l;
}

Result<Lowered> lower_instancenorm(const Graph&, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"epsilon"}));
    return Lowered{"instancenorm", n.attrs, n.inputs, false};
}

Status infer_pool(InferContext& c) {
    const Value* x = c.in(0);
    LOOM_TRY(check_rank(x, 3, "input X"));
    const size_t spatial = x->shape.size() - 2;
    if (!c.attrs().has("kernel_shape"))
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'kernel_shape' is required");
    LOOM_ASSIGN_OR_RETURN(opu::Window win, opu::read_window(c.attrs(), spatial, {}));
    LOOM_ASSIGN_OR_RETURN(int64_t ceil_mode, c.attrs().get_int("ceil_mode", 0));
    Shape out{x->shape[0], x->shape[1]};
    for (size_t i = 0; i < spatial; ++i) {
        const Dim& in = x->shape[i + 2];
        if (in.known()) LOOM_TRY(opu::resolve_auto_pad(win, i, in.value));
        if (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER") {
            const int64_t stride = win.strides[i];
            out.push_back(in.known() ? Dim(in.value / stride + (in.value % stride != 0)) : c.fresh(0, i + 2));
            continue;
        }
        LOOM_ASSIGN_OR_RETURN(Dim d, opu::window_out(in, win.kernel[i], win.strides[i], win.dilations[i], win.pads[i],
                                                     win.pads[i + spatial], ceil_mode != 0, c.fresh(0, i + 2)));
        out.push_back(std::move(d));
    }
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_pool(const Graph&, const Node& n) {
    const bool max = n.op == "MaxPool";
    if (max) {
        LOOM_TRY(n.attrs.check_known(
            {"kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad", "storage_order"}));
        LOOM_ASSIGN_OR_RETURN(int64_t order, n.attrs.get_int("storage_order", 0));
        if (order != 0) return make_error(StatusCode::UNSUPPORTED, "MaxPool storage_order = 1 (column-major indices)");
    } else {
        LOOM_TRY(n.attrs.check_known({"kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad",
                                      "count_include_pad"}));
    }
    Lowered l{"pool", {}, {n.inputs[0]}, false};
    l.attrs.set("op", max ? "max" : "avg");
    opu::copy_attrs(n.attrs, l.attrs,
                    {"kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad", "count_include_pad"});
    return l;
}

Status infer_global_pool(InferContext& c) {
    const Value* x = c.in(0);
    LOOM_TRY(check_rank(x, 3, "input X"));
    Shape out{x->shape[0], x->shape[1]};
    out.resize(x->shape.size(), Dim(1));
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_global_pool(const Graph&, const Node& n) {
    LOOM_TRY(n.attrs.check_known({}));
    Lowered l{"global_pool", {}, n.inputs, false};
    l.attrs.set("op", n.op == "GlobalMaxPool" ? "max" : "avg");
    return l;
}

Status infer_softmax(InferContext& c) {
    const Value* x = c.in(0);
    if (c.graph().opset < 13) {
        // Opsets 1-12 flatten [axis, rank) into one axis; that equals the per-axis form only
        // on the last axis.
        LOOM_ASSIGN_OR_RETURN(int64_t axis, c.attrs().get_int("axis", 1));
        LOOM_ASSIGN_OR_RETURN(axis, opu::norm_axis(axis, static_cast<int64_t>(x->shape.size()), "attribute 'axis'"));
        if (axis != static_cast<int64_t>(x->shape.size()) - 1)
            return make_error(StatusCode::UNSUPPORTED,
                              "{} of opset {} over the flattened axes {}.. (only the last axis is supported)",
                              c.node().op, c.graph().opset, axis);
    }
    return infer_same(c);
}

Result<Lowered> lower_softmax(const Graph& g, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"axis"}));
    Lowered l{"softmax", {}, n.inputs, false};
    LOOM_ASSIGN_OR_RETURN(int64_t axis, n.attrs.get_int("axis", g.opset < 13 ? 1 : -1));
    l.attrs.set("axis", axis);
    if (n.op == "LogSoftmax") l.attrs.set("log", int64_t{1});
    return l;
}

// Opset 18 moved every reduction's axes to input 1; ReduceSum did so at opset 13.
Result<std::vector<int64_t>> reduce_axes(const Graph& g, const Node& n, bool& present) {
    LOOM_ASSIGN_OR_RETURN(auto axes, opu::ints_from(g, n, 1, "axes"));
    present = axes.has_value();
    return axes ? *axes : std::vector<int64_t>{};
}

Status infer_reduce(InferContext& c) {
    const Value* x = c.in(0);
    bool present = false;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, reduce_axes(c.graph(), c.node(), present));
    LOOM_ASSIGN_OR_RETURN(int64_t keep, c.attrs().get_int("keepdims", 1));
    LOOM_ASSIGN_OR_RETURN(int64_t noop, c.attrs().get_int("noop_with_empty_axes", 0));
    const int64_t rank = static_cast<int64_t>(x->shape.size());
    std::vector<bool> reduced(x->shape.size(), axes.empty() && !noop);
    for (int64_t a : axes) {
        LOOM_ASSIGN_OR_RETURN(int64_t ax, opu::norm_axis(a, rank, "reduction axis"));
        reduced[static_cast<size_t>(ax)] = true;
    }
    Shape out;
    for (size_t i = 0; i < x->shape.size(); ++i) {
        if (!reduced[i]) out.push_back(x->shape[i]);
        else if (keep) out.push_back(Dim(1));
    }
    c.set(0, x->dtype, std::move(out));
    return {};
}

Result<Lowered> lower_reduce(const Graph& g, const Node& n) {
    LOOM_TRY(n.attrs.check_known({"axes", "keepdims", "noop_with_empty_axes"}));
    bool present = false;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, reduce_axes(g, n, present));
    Lowered l{"reduce", {}, {n.inputs[0]}, false};
    std::string op = n.op.substr(6);  // "ReduceMean" -> "Mean"
    std::transform(op.begin(), op.end(), op.begin(), [](char ch) { return static_cast<char>(std::tolower(ch)); });
    l.attrs.set("op", op);
    if (present) l.attrs.set("axes", axes);
    opu::copy_attrs(n.attrs, l.attrs, {"keepdims", "noop_with_empty_axes"});
    return l;
}

// Spatial tiling through a 2-D convolution of any stride, dilation and padding: the window's
// map is the frame's shifted (the stride divides the scale; origins must fall on its grid), and
// the pixels that read zero padding inside the window, or whose inputs did, may differ.
// Winograd F(m x m, 3x3) (device/kernels/conv.cpp, m from cpu::winograd_tile_for, which sees
// only C and K, so a window and the frame agree) groups output pixels in m x m blocks from the
// map's origin: origins must stay multiples of m pixels of this map. Each block is computed from
// its whole (m + 2)^2 input tile, so in floating point an output's bits depend on inputs up to
// m pixels away, not 1; and the window's last block, partial, reads past the window's end where
// the frame's run read pixels.
Status tile_conv(const Graph& g, const Node& n, TileFlow& t) {
    const Value& w = *g.input(n, 1);
    const Value& x = *g.input(n, 0);
    std::vector<int64_t> wk;
    for (size_t i = 2; i < w.shape.size(); ++i) wk.push_back(w.shape[i].value);
    if (wk.size() != 2 || x.shape.size() != 4)
        return make_error(StatusCode::UNSUPPORTED, "it is not a 2-D convolution");
    LOOM_ASSIGN_OR_RETURN(opu::Window win, opu::read_window(n.attrs, 2, wk));
    LOOM_ASSIGN_OR_RETURN(int64_t group, n.attrs.get_int("group", 1));
    if (win.strides[0] != win.strides[1])
        return make_error(StatusCode::UNSUPPORTED, "strides {}x{} (tiling takes the same on H and W)", win.strides[0],
                          win.strides[1]);
    const int64_t st = win.strides[0];
    const int64_t c_in = x.shape[1].value, c_out = w.shape[0].value;
    const int64_t m = winograd_edge(n.attrs, c_in, c_out);
    const bool winograd = win.kernel[0] == 3 && win.kernel[1] == 3 && win.dilations[0] == 1 && win.dilations[1] == 1 &&
                          group == 1 && st == 1 && m > 0;
    int64_t lo = 0, hi = 0;
    for (size_t a = 0; a < 2; ++a) {
        if (!x.shape[a + 2].known()) return make_error(StatusCode::UNSUPPORTED, "its input's size is not known");
        if (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER")
            LOOM_TRY(opu::resolve_auto_pad(win, a, x.shape[a + 2].value));
        const int64_t p_lo = win.pads[a], p_hi = win.pads[a + 2];
        if (winograd) {
            // Whole blocks from the start: clean from the first block past the q_lo outputs that
            // read what differs. At the end, the q_hi outputs that do, and the rest of their
            // block; the window's map is as long as the frame's modulo m (the alignment), so its
            // last block is as partial as the frame's, and a partial one reads past the window.
            const Dim& out = g.value(n.outputs[0]).shape[a + 2];
            if (!out.known()) return make_error(StatusCode::UNSUPPORTED, "its output's size is not known");
            const int64_t q_lo = t.lo + p_lo, q_hi = t.hi + p_hi;
            lo = std::max(lo, (q_lo + m - 1) / m * m);
            hi = std::max(hi, q_hi + (((out.value - q_hi) % m) + m) % m);
        } else {
            lo = std::max(lo, (t.lo + p_lo + st - 1) / st);
            hi = std::max(hi, (t.hi + p_hi + st - 1) / st);
        }
    }
    // The input's origin shift must fall on the stride's grid; Winograd's on its blocks.
    t.align = std::lcm(t.align, origin_multiple(t.num, t.den, st));
    t.den *= st;
    if (winograd) t.align = std::lcm(t.align, origin_multiple(t.num, t.den, m));
    t.lo = lo;
    t.hi = hi;
    return {};
}

// Spatial tiling through a 2-D transposed convolution: the scale times the stride; an output
// pixel near the window's edge may lack a contribution from an input pixel outside the window,
// or from one that differed. A kernel spanning more than one stride and at most three runs on
// the host as a 3x3 conv over the input into one channel per output phase (the sub-pixel form,
// device/kernels/conv_transpose.cpp), on Winograd where the phase channels are many: its blocks
// then need the input's origin on their grid, and its padding and partial blocks spread what
// differs as a padded Winograd conv's do (tile_conv). The direct form taken instead on some
// machines needs neither, so the rule below holds for both.
Status tile_conv_transpose(const Graph& g, const Node& n, TileFlow& t) {
    const Value& w = *g.input(n, 1);
    std::vector<int64_t> wk;
    for (size_t i = 2; i < w.shape.size(); ++i) wk.push_back(w.shape[i].value);
    if (wk.size() != 2) return make_error(StatusCode::UNSUPPORTED, "it is not a 2-D transposed convolution");
    LOOM_ASSIGN_OR_RETURN(opu::Window win, opu::read_window(n.attrs, 2, wk));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> out_shape, n.attrs.get_ints("output_shape", {}));
    if (!out_shape.empty() || (!win.auto_pad.empty() && win.auto_pad != "NOTSET" && win.auto_pad != "VALID"))
        return make_error(StatusCode::UNSUPPORTED, "its output size is set (output_shape or auto_pad)");
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> out_pad, n.attrs.get_ints("output_padding", {0, 0}));
    if (out_pad.size() != 2) return make_error(StatusCode::UNSUPPORTED, "output_padding has {} values", out_pad.size());
    if (win.strides[0] != win.strides[1])
        return make_error(StatusCode::UNSUPPORTED, "strides {}x{} (tiling takes the same on H and W)", win.strides[0],
                          win.strides[1]);
    const int64_t st = win.strides[0];
    LOOM_ASSIGN_OR_RETURN(int64_t group, n.attrs.get_int("group", 1));
    const Value& x = *g.input(n, 0);
    const int64_t c_in = x.shape.size() > 1 ? x.shape[1].value : 0, c_out = w.shape[1].value * group;
    bool sub_pixel = group == 1;
    for (size_t a = 0; a < 2; ++a)
        sub_pixel = sub_pixel && win.dilations[a] == 1 && st < win.kernel[a] && win.kernel[a] <= 3 * st &&
                    win.pads[a] / st <= 2;
    sub_pixel = sub_pixel && 4 * win.kernel[0] * win.kernel[1] > 9 * st * st;
    const int64_t m = sub_pixel ? static_cast<int64_t>(device::cpu::winograd_tile_for(c_in, c_out * st * st)) : 0;
    int64_t lo = 0, hi = 0;
    for (size_t a = 0; a < 2; ++a) {
        const int64_t span = win.dilations[a] * (win.kernel[a] - 1);
        // Output y reads inputs x with x * st + k = y + pad: it is clean when every such x is.
        lo = std::max(lo, (t.lo - 1) * st + span + 1 - win.pads[a]);
        hi = std::max(hi, (t.hi - 1) * st + span + 1 - win.pads[a + 2] + out_pad[a]);
        if (m > 0) {
            // The phase conv's output n (phase q = n + q0, q0 = pad / st) reads inputs n + q0 - 2
            // to n + q0: 2 - q0 pixels of padding before, what passes the input's end after; its
            // blocks as in tile_conv. Output y has phase floor((y + pad) / st).
            const Dim &in_len = x.shape[a + 2], &out_len = g.value(n.outputs[0]).shape[a + 2];
            if (!in_len.known() || !out_len.known())
                return make_error(StatusCode::UNSUPPORTED, "its sizes are not known");
            const int64_t q0 = win.pads[a] / st;
            const int64_t phases = (win.pads[a] + out_len.value - 1) / st + 1 - q0;
            const int64_t q_lo = t.lo + 2 - q0, q_hi = t.hi + std::max<int64_t>(phases + q0 - in_len.value, 0);
            const int64_t lo_q = (q_lo + m - 1) / m * m;
            const int64_t hi_q = q_hi + (((phases - q_hi) % m) + m) % m;
            lo = std::max(lo, (q0 + lo_q) * st - win.pads[a]);
            if (hi_q > 0) hi = std::max(hi, out_len.value + win.pads[a] - (q0 + phases - hi_q) * st);
        }
    }
    if (m > 0) t.align = std::lcm(t.align, origin_multiple(t.num, t.den, m));
    t.num *= st;
    t.lo = std::max<int64_t>(lo, 0);
    t.hi = std::max<int64_t>(hi, 0);
    return {};
}

// A split region's bands through a 2-D convolution of stride 1 along H that keeps rows in place:
// each band gets exactly the rows it needs, its 'pads' rewritten (the frame's zero rows only at the
// map's edges), and starts on Winograd's blocks where the conv runs as Winograd (tile_conv).
Status split_conv(const SplitStepView& s, SplitRule& r) {
    const std::vector<int64_t>& x = s.inputs.at(0);
    const std::vector<int64_t>& w = s.inputs.at(1);
    if (x.size() != 4 || w.size() != 4) return make_error(StatusCode::UNSUPPORTED, "it is not a 2-D convolution");
    LOOM_ASSIGN_OR_RETURN(opu::Window win, opu::read_window(s.step.attrs, 2, {w[2], w[3]}));
    LOOM_ASSIGN_OR_RETURN(int64_t group, s.step.attrs.get_int("group", 1));
    if (win.strides[0] != 1)
        return make_error(StatusCode::UNSUPPORTED, "stride {} along H (bands take stride 1)", win.strides[0]);
    constexpr int64_t kWindowMax = int64_t{1} << 20;  // a file's attributes: keep the spans' products small
    if (std::max({win.kernel[0], win.kernel[1], win.dilations[0], win.dilations[1]}) > kWindowMax)
        return make_error(StatusCode::UNSUPPORTED, "a kernel of {}x{} dilated {}x{}", win.kernel[0], win.kernel[1],
                          win.dilations[0], win.dilations[1]);
    const int64_t span_h = win.dilations[0] * (win.kernel[0] - 1), span_w = win.dilations[1] * (win.kernel[1] - 1);
    int64_t top = win.pads[0], bottom = win.pads[2];
    r.pad_left = win.pads[1], r.pad_right = win.pads[3];
    if (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER") {
        if (span_w % 2 != 0 || win.strides[1] != 1)
            return make_error(StatusCode::UNSUPPORTED, "auto_pad {} with an even span or a stride along W",
                              win.auto_pad);
        top = bottom = span_h / 2;
        r.pad_left = r.pad_right = span_w / 2;
    }
    if (span_h % 2 != 0 || top != span_h / 2 || bottom != span_h / 2)
        return make_error(StatusCode::UNSUPPORTED,
                          "its padding does not keep rows in place (pads along H must be (k - 1) * d / 2)");
    r.radius = span_h / 2;
    r.pads = r.radius > 0;
    // Winograd F(m x m, 3x3) computes m x m blocks from the map's origin (device/kernels/conv.cpp;
    // an int8 conv never takes it, and then the alignment only costs a coarser band).
    const int64_t m = winograd_edge(s.step.attrs, x[1], w[0]);
    if (win.kernel[0] == 3 && win.kernel[1] == 3 && win.dilations[0] == 1 && win.dilations[1] == 1 &&
        win.strides[1] == 1 && group == 1 && m > 0)
        r.align = m;
    r.inputs.assign(s.inputs.size(), BandRole::WHOLE);
    r.inputs[0] = BandRole::SOURCE;
    if (s.inputs.size() > 3 && !s.inputs[3].empty()) r.inputs[3] = BandRole::SAME;  // the fused residual
    return {};
}

Status tile_instancenorm(const Graph&, const Node&, TileFlow&) {
    return make_error(StatusCode::UNSUPPORTED, "it normalises over the whole frame");
}

}  // namespace

// The Cube convolutions: NC1HWC0 maps, an activation / residual epilogue, int8 weights; their
// weights (and BatchNormalization's statistics) are parameters, not maps of the frame.
constexpr OpTrait kCubeConv = OpTrait::LAYOUT_NC1HWC0 | OpTrait::TAKES_EPILOGUE | OpTrait::QUANTIZABLE |
                              OpTrait::PARAMETER_INPUTS;

LOOM_DEFINE_OP(Conv, 2, 6, 1, infer_conv, lower_conv, .traits = kCubeConv, .tile = tile_conv, .split = split_conv)
LOOM_DEFINE_OP(ConvTranspose, 2, 6, 1, infer_conv, lower_conv, .traits = kCubeConv, .tile = tile_conv_transpose)
LOOM_DEFINE_OP(MatMul, 2, 5, 1, infer_matmul, lower_matmul, .traits = OpTrait::TAKES_EPILOGUE | OpTrait::QUANTIZABLE)
LOOM_DEFINE_OP(Gemm, 2, 5, 1, infer_gemm, lower_gemm, .traits = OpTrait::TAKES_EPILOGUE | OpTrait::QUANTIZABLE)
LOOM_DEFINE_OP(BatchNormalization, 5, 5, 1, infer_same, lower_batchnorm,
               .traits = OpTrait::POINTWISE | OpTrait::LAYOUT_AGNOSTIC | OpTrait::PARAMETER_INPUTS)
LOOM_DEFINE_OP(InstanceNormalization, 3, 3, 1, infer_same, lower_instancenorm, .tile = tile_instancenorm)
LOOM_DEFINE_OP(MaxPool, 1, 1, 1, infer_pool, lower_pool, .traits = OpTrait::SPATIAL)
LOOM_DEFINE_OP(AveragePool, 1, 1, 1, infer_pool, lower_pool, .traits = OpTrait::SPATIAL)
LOOM_DEFINE_OP(GlobalAveragePool, 1, 1, 1, infer_global_pool, lower_global_pool, .traits = OpTrait::SPATIAL)
LOOM_DEFINE_OP(GlobalMaxPool, 1, 1, 1, infer_global_pool, lower_global_pool, .traits = OpTrait::SPATIAL)
LOOM_DEFINE_OP(Softmax, 1, 1, 1, infer_softmax, lower_softmax)
LOOM_DEFINE_OP(LogSoftmax, 1, 1, 1, infer_softmax, lower_softmax)
LOOM_DEFINE_OP(ReduceMean, 1, 2, 1, infer_reduce, lower_reduce, .constant_inputs = 0b10)
LOOM_DEFINE_OP(ReduceSum, 1, 2, 1, infer_reduce, lower_reduce, .traits = OpTrait::HOST_WHEN_TINY,
               .constant_inputs = 0b10)
LOOM_DEFINE_OP(ReduceMax, 1, 2, 1, infer_reduce, lower_reduce, .traits = OpTrait::HOST_WHEN_TINY,
               .constant_inputs = 0b10)
LOOM_DEFINE_OP(ReduceMin, 1, 2, 1, infer_reduce, lower_reduce, .traits = OpTrait::HOST_WHEN_TINY,
               .constant_inputs = 0b10)

}  // namespace loom::compiler
