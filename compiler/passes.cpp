#include "compiler/passes.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/interpret.hpp"
#include "compiler/ops.hpp"
#include "compiler/ops/util.hpp"

namespace loom::compiler {

namespace {

// Folding stops at outputs above this size (weights-sized results are fine; a folded 4K frame
// would bloat the compiled file).
constexpr int64_t kFoldElementsMax = int64_t{1} << 24;

struct Use {
    int node;
    int slot;
};

// For every value, the node inputs that read it.
std::vector<std::vector<Use>> consumers_of(const Graph& g) {
    std::vector<std::vector<Use>> uses(g.values.size());
    for (size_t i = 0; i < g.nodes.size(); ++i)
        for (size_t s = 0; s < g.nodes[i].inputs.size(); ++s)
            if (g.nodes[i].inputs[s] >= 0)
                uses[static_cast<size_t>(g.nodes[i].inputs[s])].push_back({static_cast<int>(i), static_cast<int>(s)});
    return uses;
}

bool is_graph_output(const Graph& g, int v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); }

void replace_uses(Graph& g, int from, int to) {
    for (Node& n : g.nodes)
        for (int& i : n.inputs)
            if (i == from) i = to;
}

void erase_marked(Graph& g, const std::vector<bool>& dead) {
    std::vector<Node> kept;
    kept.reserve(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i)
        if (!dead[i]) kept.push_back(std::move(g.nodes[i]));
    g.nodes = std::move(kept);
}

const HostTensor* const_of(const Graph& g, int id) {
    if (id < 0) return nullptr;
    return g.value(id).data.get();
}

// The constant as float values when it is f32, else nullopt.
std::optional<std::vector<float>> f32_values(const Graph& g, int id) {
    const HostTensor* t = const_of(g, id);
    if (!t || t->dtype() != DType::F32) return std::nullopt;
    return std::vector<float>(t->as<float>(), t->as<float>() + t->elements());
}

// True when constant `id` holds one value per channel of a [N, K, ...] tensor (shapes [K, 1, 1],
// [1, K, 1, 1], [K] only for rank-2 outputs, or a single value), given the output rank.
bool per_channel(const Graph& g, int id, int64_t k, size_t out_rank) {
    const HostTensor* t = const_of(g, id);
    if (!t || t->dtype() != DType::F32) return false;
    const auto& d = t->dims();
    if (t->elements() == 1) return d.size() <= out_rank;
    if (t->elements() != k || out_rank < 2) return false;
    // Right-aligned against the output, the constant must reach axis 1 and nothing before it.
    if (d.size() > out_rank || d.size() < out_rank - 1) return false;
    return d[d.size() - (out_rank - 1)] == k;
}

template <typename T>
T value_or(const Result<T>& r, T fallback) {
    return r.ok() ? *r : fallback;
}

HostTensor f32_tensor(std::vector<int64_t> dims, const std::vector<float>& v) {
    HostTensor t(DType::F32, std::move(dims));
    std::copy(v.begin(), v.end(), t.as<float>());
    return t;
}

}  // namespace

Status set_input_shapes(Graph& g, const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes) {
    for (const auto& [name, dims] : shapes) {
        const int id = g.find_value(name);
        if (id < 0 || std::find(g.inputs.begin(), g.inputs.end(), id) == g.inputs.end()) {
            std::vector<std::string> names;
            for (int i : g.inputs) names.push_back(g.value(i).name);
            return make_error(StatusCode::INVALID_ARGUMENT, "--shape {}: no graph input of that name (inputs: {})", name,
                              fmt::join(names, ", "));
        }
        Value& v = g.value(id);
        if (v.typed && v.shape.size() != dims.size())
            return make_error(StatusCode::INVALID_ARGUMENT, "--shape {}={}: the model declares rank {} ({})", name,
                              fmt::join(dims, "x"), v.shape.size(), shape_str(v.shape));
        for (size_t i = 0; i < dims.size(); ++i)
            if (v.typed && v.shape[i].known() && v.shape[i].value != dims[i])
                return make_error(StatusCode::INVALID_ARGUMENT, "--shape {}={}: axis {} is fixed at {} by the model", name,
                                  fmt::join(dims, "x"), i, v.shape[i].value);
        v.shape = shape_of(dims);
        v.typed = true;
    }
    reset_types(g);
    return {};
}

void reset_types(Graph& g) {
    std::vector<bool> keep(g.values.size(), false);
    for (int i : g.inputs) keep[static_cast<size_t>(i)] = true;
    for (size_t i = 0; i < g.values.size(); ++i)
        if (!keep[i] && !g.values[i].is_constant()) {
            g.values[i].typed = false;
            g.values[i].shape.clear();
        }
}

Result<int> fold_constants(Graph& g) {
    std::vector<bool> dead(g.nodes.size(), false);
    int folded = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const Node& n = g.nodes[i];
        // Inputs folded above may decide this node's shapes (a Reshape's target): infer again.
        if (folded > 0) LOOM_TRY(infer_node(g, n));
        bool foldable = !n.inputs.empty();
        for (int in : n.inputs)
            if (in >= 0 && !g.value(in).is_constant()) foldable = false;
        for (int o : n.outputs) {
            const Value& v = g.value(o);
            if (!v.typed || !shape_static(v.shape)) foldable = false;
            else if (auto e = shape_elements(v.shape, v.name); !e.ok() || *e > kFoldElementsMax) foldable = false;
        }
        const bool shape_of_static = n.op == "Shape" && g.has_input(n, 0) && shape_static(g.input(n, 0)->shape) &&
                                     g.value(n.outputs[0]).typed;
        if (!foldable && !shape_of_static) continue;
        std::vector<HostTensor> outs;
        if (shape_of_static && !foldable) {
            // Only the input's shape is needed; give the kernel a shape-only stand-in.
            const Value& x = *g.input(n, 0);
            HostTensor stand_in(x.dtype, {0});
            const std::vector<int64_t> dims = shape_dims(x.shape);
            HostTensor shape(DType::I64, {static_cast<int64_t>(dims.size())});
            std::copy(dims.begin(), dims.end(), shape.as<int64_t>());
            const std::vector<int64_t> out_dims = shape_dims(g.value(n.outputs[0]).shape);
            LOOM_ASSIGN_OR_RETURN(int64_t start, n.attrs.get_int("start", 0));
            const int64_t r = static_cast<int64_t>(dims.size());
            if (start < 0) start += r;
            start = std::clamp<int64_t>(start, 0, r);
            HostTensor out(DType::I64, out_dims);
            for (int64_t k = 0; k < out.elements(); ++k) out.as<int64_t>()[k] = dims[static_cast<size_t>(start + k)];
            outs.push_back(std::move(out));
        } else {
            std::vector<const HostTensor*> ins;
            for (int in : n.inputs) ins.push_back(in >= 0 ? g.value(in).data.get() : nullptr);
            LOOM_ASSIGN_OR_RETURN(outs, run_node(g, n, ins));
        }
        for (size_t k = 0; k < n.outputs.size(); ++k)
            g.value(n.outputs[k]).data = std::make_shared<const HostTensor>(std::move(outs[k]));
        dead[i] = true;
        ++folded;
    }
    erase_marked(g, dead);
    return folded;
}

int eliminate_dead_code(Graph& g) {
    std::vector<bool> live(g.values.size(), false);
    for (int o : g.outputs) live[static_cast<size_t>(o)] = true;
    std::vector<bool> dead(g.nodes.size(), true);
    for (size_t i = g.nodes.size(); i-- > 0;) {
        const Node& n = g.nodes[i];
        bool used = false;
        for (int o : n.outputs) used = used || live[static_cast<size_t>(o)];
        if (!used) continue;
        dead[i] = false;
        for (int in : n.inputs)
            if (in >= 0) live[static_cast<size_t>(in)] = true;
    }
    const int removed = static_cast<int>(std::count(dead.begin(), dead.end(), true));
    erase_marked(g, dead);
    return removed;
}

int eliminate_common_subexpressions(Graph& g) {
    int merged = 0;
    // Constants with equal bytes first, so nodes reading them compare equal next.
    std::map<std::tuple<DType, std::vector<int64_t>, std::string>, int> constants;
    for (size_t i = 0; i < g.values.size(); ++i) {
        const Value& v = g.values[i];
        if (!v.data || v.data->bytes() > 4096) continue;  // large weights are never duplicated in practice
        std::string bytes(static_cast<const char*>(v.data->data()), v.data->bytes());
        auto [it, fresh] = constants.emplace(std::make_tuple(v.data->dtype(), v.data->dims(), std::move(bytes)),
                                             static_cast<int>(i));
        if (!fresh && !is_graph_output(g, static_cast<int>(i))) replace_uses(g, static_cast<int>(i), it->second);
    }
    std::unordered_map<std::string, size_t> seen;
    std::vector<bool> dead(g.nodes.size(), false);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const Node& n = g.nodes[i];
        std::string key = fmt::format("{}|{}|{}|", n.op, fmt::join(n.inputs, ","), n.outputs.size());
        auto items = n.attrs.items();
        std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [name, value] : items) key += name + "=" + device::attr_to_string(value) + ";";
        auto [it, fresh] = seen.emplace(std::move(key), i);
        if (fresh) continue;
        const Node& first = g.nodes[it->second];
        bool any_output = false;
        for (int o : n.outputs) any_output = any_output || is_graph_output(g, o);
        if (any_output) continue;
        for (size_t k = 0; k < n.outputs.size(); ++k) replace_uses(g, n.outputs[k], first.outputs[k]);
        dead[i] = true;
        ++merged;
    }
    erase_marked(g, dead);
    return merged;
}

namespace {

// The output channel of each weight element of a Cube op, for folding per-channel affine
// maps into its weights: Conv W [K, C/g, ...] by K; ConvTranspose W [C, K/g, ...] by
// group * K/g + k; Gemm B [K, N] (or [N, K] with transB) by N. Sets `channels`; false when the
// op or its layout is not one this fold handles.
bool weight_channels(const Node& n, const HostTensor& w, int64_t& channels,
                     std::function<int64_t(int64_t)>& channel_of) {
    const auto& d = w.dims();
    if (d.empty()) return false;
    if (n.op == "Conv") {
        const int64_t per = w.elements() / std::max<int64_t>(d[0], 1);
        channels = d[0];
        channel_of = [per](int64_t i) { return i / per; };
        return true;
    }
    if (n.op == "ConvTranspose") {
        const int64_t group = value_or(n.attrs.get_int("group", 1), int64_t{1});
        if (d.size() < 2 || group < 1 || d[0] % group != 0) return false;
        const int64_t kg = d[1], area = w.elements() / std::max<int64_t>(d[0] * d[1], 1), cg = d[0] / group;
        channels = kg * group;
        channel_of = [=](int64_t i) { return (i / (kg * area)) / cg * kg + (i / area) % kg; };
        return true;
    }
    if (n.op == "Gemm" && d.size() == 2) {
        const bool trans = value_or(n.attrs.get_int("transB", 0), int64_t{0}) != 0;
        const int64_t cols = d[1];
        channels = trans ? d[0] : d[1];
        if (trans) channel_of = [cols](int64_t i) { return i / cols; };
        else channel_of = [cols](int64_t i) { return i % cols; };
        return true;
    }
    return false;
}

}  // namespace

Result<int> fuse_conv_affine(Graph& g) {
    int fused = 0;
    bool changed = true;
    while (changed) {
        changed = false;
        const auto uses = consumers_of(g);
        for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
            Node& conv = g.nodes[i];
            const bool gemm = conv.op == "Gemm";
            if ((conv.op != "Conv" && conv.op != "ConvTranspose" && !gemm) || conv.attrs.has("activation") ||
                conv.inputs.size() > 3 || conv.outputs.size() != 1)
                continue;
            const int y = conv.outputs[0];
            if (uses[static_cast<size_t>(y)].size() != 1 || is_graph_output(g, y)) continue;
            auto w = f32_values(g, conv.inputs[1]);
            if (!w) continue;
            const HostTensor& wt = *const_of(g, conv.inputs[1]);
            int64_t k = 0;
            std::function<int64_t(int64_t)> channel_of;
            if (!weight_channels(conv, wt, k, channel_of)) continue;
            const size_t rank = g.value(y).shape.size();
            // The bias: Conv's B [K]; Gemm's beta * C when C holds one value per column (or none).
            double beta = gemm ? value_or(conv.attrs.get_float("beta", 1.0), 1.0) : 1.0;
            std::vector<float> b(static_cast<size_t>(k), 0.0f);
            if (g.has_input(conv, 2) && beta != 0) {
                auto bv = f32_values(g, conv.inputs[2]);
                if (!bv || static_cast<int64_t>(bv->size()) != k) continue;
                if (gemm && const_of(g, conv.inputs[2])->dims().size() > 1 && const_of(g, conv.inputs[2])->dims()[0] != 1)
                    continue;  // a [M, N] C is no per-column bias
                b = *bv;
                for (float& v : b) v = static_cast<float>(v * beta);
            }
            const Use u = uses[static_cast<size_t>(y)][0];
            Node& next = g.nodes[static_cast<size_t>(u.node)];
            std::vector<float> scale(static_cast<size_t>(k), 1.0f), shift(static_cast<size_t>(k), 0.0f);
            const bool training = next.op == "BatchNormalization" &&
                                  value_or(next.attrs.get_int("training_mode", 0), int64_t{0}) != 0;
            if (next.op == "BatchNormalization" && u.slot == 0 && next.outputs.size() == 1 && !training) {
                auto gamma = f32_values(g, next.inputs[1]), beta_bn = f32_values(g, next.inputs[2]);
                auto mean = f32_values(g, next.inputs[3]), var = f32_values(g, next.inputs[4]);
                auto eps = next.attrs.get_float("epsilon", 1e-5);
                if (!gamma || !beta_bn || !mean || !var || !eps.ok()) continue;
                if (static_cast<int64_t>(gamma->size()) != k || beta_bn->size() != gamma->size() ||
                    mean->size() != gamma->size() || var->size() != gamma->size())
                    continue;
                for (size_t c = 0; c < static_cast<size_t>(k); ++c) {
                    scale[c] = static_cast<float>((*gamma)[c] / std::sqrt(static_cast<double>((*var)[c]) + *eps));
                    shift[c] = static_cast<float>((*beta_bn)[c] - (*mean)[c] * static_cast<double>(scale[c]));
                }
            } else if ((next.op == "Mul" || next.op == "Add") && next.inputs.size() == 2) {
                const int other = next.inputs[static_cast<size_t>(1 - u.slot)];
                if (!per_channel(g, other, k, rank)) continue;
                if (g.value(next.outputs[0]).shape != g.value(y).shape) continue;  // the constant must not broadcast Y
                const auto c = *f32_values(g, other);
                for (size_t ch = 0; ch < static_cast<size_t>(k); ++ch) {
                    const float v = c.size() == 1 ? c[0] : c[ch];
                    (next.op == "Mul" ? scale : shift)[ch] = v;
                }
            } else {
                continue;
            }
            // W' = W scaled per output channel; B' = B * scale + shift.
            std::vector<float> w2 = *w;
            for (int64_t e = 0; e < static_cast<int64_t>(w2.size()); ++e)
                w2[static_cast<size_t>(e)] *= scale[static_cast<size_t>(channel_of(e))];
            for (size_t ch = 0; ch < static_cast<size_t>(k); ++ch) b[ch] = b[ch] * scale[ch] + shift[ch];
            const int wid = g.add_constant(g.unique_name(conv.name + ".w"), f32_tensor(wt.dims(), w2));
            const int bid = g.add_constant(g.unique_name(conv.name + ".b"), f32_tensor({k}, b));
            Node& c2 = g.nodes[i];
            c2.inputs.resize(3, -1);
            c2.inputs[1] = wid;
            c2.inputs[2] = bid;
            if (gemm) c2.attrs.set("beta", 1.0);  // beta is folded into the new C
            Node& n2 = g.nodes[static_cast<size_t>(u.node)];
            c2.fused.push_back(n2.name);
            c2.outputs[0] = n2.outputs[0];
            g.nodes.erase(g.nodes.begin() + u.node);
            ++fused;
            changed = true;
        }
    }
    return fused;
}

namespace {

// Channels of the epilogue's per-channel vectors: K for convs (axis 1), N (last) for GEMMs.
int64_t epilogue_channels(const Graph& g, const Node& n) {
    const Shape& s = g.value(n.outputs[0]).shape;
    if (n.op == "Conv" || n.op == "ConvTranspose") return s.size() > 1 && s[1].known() ? s[1].value : -1;
    return !s.empty() && s.back().known() ? s.back().value : -1;
}

// Moves activation node `act` (an EPILOGUE op) into `n`'s attributes; false when it cannot be
// expressed.
bool take_activation(const Graph& g, Node& n, const Node& act, int& slopes) {
    const OpDef* op = find_op(act.op);
    slopes = -1;
    if (!op || !op->has(OpTrait::EPILOGUE)) return false;
    if (op->has(OpTrait::BINARY)) {  // PRelu: input 1 holds the slopes
        const int64_t k = epilogue_channels(g, n);
        const HostTensor* s = const_of(g, act.inputs[1]);
        if (!s || k < 0 || (s->elements() != 1 && s->elements() != k)) return false;
        // The slope must broadcast per channel only.
        const size_t rank = g.value(n.outputs[0]).shape.size();
        if (n.op == "Conv" || n.op == "ConvTranspose") {
            if (!per_channel(g, act.inputs[1], k, rank)) return false;
        } else if (s->elements() != 1 && s->dims().back() != k) {
            return false;
        }
        n.attrs.set("activation", std::string(op->token));
        slopes = act.inputs[1];
        return true;
    }
    std::vector<OpParam> params;
    if (op->params) {
        auto p = op->params(g, act);
        if (!p.ok()) return false;
        params = std::move(*p);
    }
    n.attrs.set("activation", std::string(op->token));
    // Gemm has an alpha of its own: the activation's is activation_alpha there.
    const bool gemm = n.op == "Gemm";
    for (const OpParam& p : params)
        n.attrs.set(gemm && std::string_view(p.name) == "alpha" ? "activation_alpha" : p.name, p.value);
    return true;
}

}  // namespace

int fuse_epilogues(Graph& g) {
    int fused = 0;
    bool changed = true;
    while (changed) {
        changed = false;
        const auto uses = consumers_of(g);
        for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
            Node& n = g.nodes[i];
            if (!op_has(n.op, OpTrait::TAKES_EPILOGUE) || n.outputs.size() != 1) continue;
            const int y = n.outputs[0];
            if (uses[static_cast<size_t>(y)].size() != 1 || is_graph_output(g, y)) continue;
            const Use u = uses[static_cast<size_t>(y)][0];
            const Node& next = g.nodes[static_cast<size_t>(u.node)];
            if (next.outputs.size() != 1) continue;
            const bool conv = n.op == "Conv" || n.op == "ConvTranspose";
            const bool shuffle = n.op == "DepthToSpace";  // takes a residual only (the upsampled skip)
            const bool has_act = n.attrs.has("activation");
            const bool has_res = (conv && n.inputs.size() > 3 && n.inputs[3] >= 0) || (shuffle && n.inputs.size() > 1);
            const size_t slope_slot = conv ? 4 : 3;
            Node fused_node = n;
            if (next.op == "Add" && next.inputs.size() == 2) {
                const int other = next.inputs[static_cast<size_t>(1 - u.slot)];
                const Value& o = g.value(other);
                const Value& yv = g.value(y);
                const bool same = o.typed && o.shape == yv.shape && o.dtype == yv.dtype &&
                                  g.value(next.outputs[0]).shape == yv.shape && other != y;
                if (shuffle && !has_res && same && (yv.dtype == DType::F32 || yv.dtype == DType::F16)) {
                    fused_node.inputs.push_back(other);
                } else if (conv && !has_res && same) {
                    fused_node.inputs.resize(5, -1);
                    fused_node.inputs[3] = other;
                    fused_node.attrs.set("residual_after_activation", int64_t{has_act ? 1 : 0});
                } else if (n.op == "MatMul" && !has_act && (n.inputs.size() < 3 || n.inputs[2] < 0) && o.data &&
                           o.data->elements() == epilogue_channels(g, n) && o.shape.size() <= 2 &&
                           o.shape.back() == yv.shape.back() &&  // [N, 1] adds per row, not per column
                           g.value(n.inputs[1]).shape.size() >= 2 &&  // a 1-D B leaves no N axis
                           g.value(next.outputs[0]).shape == yv.shape) {
                    fused_node.inputs.resize(3, -1);
                    fused_node.inputs[2] = other;
                } else {
                    continue;
                }
            } else {
                if (has_act || shuffle) continue;
                // After a residual added after the activation nothing more can join.
                if (has_res) {
                    auto after = n.attrs.get_int("residual_after_activation", 0);
                    if (!after.ok() || *after != 0) continue;
                }
                if (u.slot != 0) continue;
                int slopes = -1;
                if (!take_activation(g, fused_node, next, slopes)) continue;
                if (slopes >= 0) {
                    fused_node.inputs.resize(slope_slot + 1, -1);
                    fused_node.inputs[slope_slot] = slopes;
                }
            }
            fused_node.fused.push_back(next.name);
            fused_node.outputs[0] = next.outputs[0];
            g.nodes[i] = std::move(fused_node);
            g.nodes.erase(g.nodes.begin() + u.node);
            ++fused;
            changed = true;
        }
    }
    if (fused) {
        Status s = g.topo_sort();  // a residual may come from a node placed after the conv
        LOOM_ASSERT_MSG(s.ok(), "fusion broke the graph order: {}", s.to_string());
    }
    return fused;
}

namespace {

// The postfix program of one CHAIN node over its inputs' programs, or "" when it cannot be
// written as one (wrong arity, a parameter that is not a constant scalar).
std::string chain_step(const Graph& g, const Node& n, const OpDef& op, const std::vector<std::string>& args) {
    if (op.has(OpTrait::BINARY)) return args.size() == 2 ? fmt::format("{} {} {}", args[0], args[1], op.token) : "";
    if (args.size() != 1) return "";
    std::string step = args[0];
    if (op.params) {
        auto params = op.params(g, n);
        if (!params.ok()) return "";
        for (const OpParam& p : *params)
            step += " " +
                    (std::isinf(p.value) ? std::string(p.value < 0 ? "-inf" : "inf") : fmt::format("{}", p.value));
    }
    return step + " " + op.token;
}

}  // namespace

int fuse_elementwise_chains(Graph& g) {
    const auto uses = consumers_of(g);
    const std::vector<int> producer = g.producers();
    // For each node taken into a chain: its program over the chain's inputs and those inputs.
    struct Chain {
        std::string program;     // uses $0.. over `inputs`
        std::vector<int> inputs;
        int ops = 0;
    };
    std::vector<std::optional<Chain>> chains(g.nodes.size());
    std::vector<bool> dead(g.nodes.size(), false);
    int fused = 0;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const Node& n = g.nodes[i];
        const OpDef* op = find_op(n.op);
        if (!op || !op->has(OpTrait::CHAIN) || n.outputs.size() != 1) continue;
        const Value& y = g.value(n.outputs[0]);
        if (!y.typed || (y.dtype != DType::F32 && y.dtype != DType::F16)) continue;
        Chain c;
        std::vector<std::string> args;
        bool ok = true;
        const size_t data_inputs = op->has(OpTrait::BINARY) ? n.inputs.size() : 1;  // Clip's bounds are parameters
        std::vector<bool> absorbed(data_inputs, false);
        for (size_t s = 0; s < data_inputs && ok; ++s) {
            const int in = n.inputs[s];
            if (in < 0) { ok = false; break; }
            const Value& v = g.value(in);
            // A scalar f32 constant becomes a number in the program, unless its rank (all 1s)
            // raises the output's: the kernel wants Y to be its inputs' broadcast.
            size_t other_rank = 0;
            for (size_t t = 0; t < data_inputs; ++t)
                if (t != s && n.inputs[t] >= 0) other_rank = std::max(other_rank, g.value(n.inputs[t]).shape.size());
            if (v.data && v.data->elements() == 1 && v.data->dtype() == DType::F32 && n.op != "PRelu" &&
                v.data->dims().size() <= other_rank) {
                args.push_back(fmt::format("{}", static_cast<double>(*v.data->as<float>())));
                continue;
            }
            const int p = producer[static_cast<size_t>(in)];
            if (p >= 0 && chains[static_cast<size_t>(p)] && uses[static_cast<size_t>(in)].size() == 1 &&
                !is_graph_output(g, in)) {
                // Inline the producer's chain, renumbering its inputs after ours.
                const Chain& pc = *chains[static_cast<size_t>(p)];
                std::string prog;
                size_t pos = 0;
                const std::string& src = pc.program;
                while (pos < src.size()) {
                    if (src[pos] == '$') {
                        size_t end = pos + 1;
                        while (end < src.size() && std::isdigit(static_cast<unsigned char>(src[end]))) ++end;
                        const int idx = std::stoi(src.substr(pos + 1, end - pos - 1));
                        const int id = pc.inputs[static_cast<size_t>(idx)];
                        auto it = std::find(c.inputs.begin(), c.inputs.end(), id);
                        if (it == c.inputs.end()) {
                            c.inputs.push_back(id);
                            it = c.inputs.end() - 1;
                        }
                        prog += fmt::format("${}", it - c.inputs.begin());
                        pos = end;
                    } else {
                        prog += src[pos++];
                    }
                }
                args.push_back(prog);
                c.ops += pc.ops;
                absorbed[s] = true;
                continue;
            }
            auto it = std::find(c.inputs.begin(), c.inputs.end(), in);
            if (it == c.inputs.end()) {
                c.inputs.push_back(in);
                it = c.inputs.end() - 1;
            }
            args.push_back(fmt::format("${}", it - c.inputs.begin()));
        }
        if (!ok) continue;
        c.program = chain_step(g, n, *op, args);
        if (c.program.empty() || c.inputs.size() > 16 || c.inputs.empty()) continue;
        c.ops += 1;
        // Mark the absorbed producers dead now that this node takes their work.
        for (size_t s = 0; s < data_inputs; ++s)
            if (absorbed[s]) {
                const int p = producer[static_cast<size_t>(n.inputs[s])];
                dead[static_cast<size_t>(p)] = true;
                ++fused;
            }
        chains[i] = std::move(c);
    }
    // Rewrite every surviving chain of two or more ops as one EltwiseChain node.
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (dead[i] || !chains[i] || chains[i]->ops < 2) continue;
        Node& n = g.nodes[i];
        n.op = "EltwiseChain";
        n.attrs = KernelAttrs{};
        n.attrs.set("program", chains[i]->program);
        n.inputs = chains[i]->inputs;
    }
    // Dead producers of chains with fewer than two ops cannot exist: a dead producer implies
    // its consumer has at least two ops.
    for (size_t i = 0; i < g.nodes.size(); ++i)
        if (dead[i]) {
            // Record what was absorbed in the node that absorbed it.
            const int out = g.nodes[i].outputs[0];
            for (const Use& u : uses[static_cast<size_t>(out)]) g.nodes[static_cast<size_t>(u.node)].fused.push_back(g.nodes[i].name);
        }
    erase_marked(g, dead);
    return fused;
}

namespace {

// A Cast node named after `base` from value `in` to value `out`, ONNX data type `to`.
Node cast_node(Graph& g, const std::string& base, int in, int out, int64_t to) {
    Node c;
    c.op = "Cast";
    c.name = g.unique_name(base);
    c.inputs = {in};
    c.outputs = {out};
    c.attrs.set("to", to);
    return c;
}

}  // namespace

int convert_to_f16(Graph& g) {
    const size_t count = g.values.size();
    for (size_t i = 0; i < count; ++i) {
        if (!g.values[i].data || g.values[i].data->dtype() != DType::F32) continue;
        const HostTensor& src = *g.values[i].data;
        HostTensor t(DType::F16, src.dims());
        for (int64_t k = 0; k < t.elements(); ++k) t.as<device::f16>()[k] = device::f32_to_f16(src.as<float>()[k]);
        if (is_graph_output(g, static_cast<int>(i))) {
            // A constant graph output keeps the f32 interface; nodes read an f16 copy.
            const int copy = g.add_constant(g.unique_name(g.values[i].name + ".f16"), std::move(t));
            replace_uses(g, static_cast<int>(i), copy);
            continue;
        }
        g.values[i].data = std::make_shared<const HostTensor>(std::move(t));
        g.values[i].dtype = DType::F16;
    }
    for (Node& n : g.nodes)
        if (n.op == "Cast" && value_or(n.attrs.get_int("to", 0), int64_t{0}) == 1) n.attrs.set("to", int64_t{10});
    int casts = 0;
    std::vector<Node> prologue, epilogue;
    for (int in : std::vector<int>(g.inputs)) {
        if (g.value(in).dtype != DType::F32) continue;
        const int h = g.add_value(g.unique_name(g.value(in).name + ".f16"));
        replace_uses(g, in, h);
        prologue.push_back(cast_node(g, "cast_in_" + g.value(in).name, in, h, 10));
        ++casts;
    }
    std::vector<int> cast_outputs;
    for (int& out : g.outputs) {
        const Value& v = g.value(out);
        if (v.dtype != DType::F32 || v.is_constant()) continue;
        if (std::find(cast_outputs.begin(), cast_outputs.end(), out) != cast_outputs.end()) continue;  // listed twice
        cast_outputs.push_back(out);
        if (std::find(g.inputs.begin(), g.inputs.end(), out) != g.inputs.end()) continue;
        // The producer writes an f16 copy; a Cast restores the f32 output under its name.
        const int h = g.add_value(g.unique_name(v.name + ".f16"));
        for (Node& n : g.nodes)
            for (int& o : n.outputs)
                if (o == out) o = h;
        replace_uses(g, out, h);
        epilogue.push_back(cast_node(g, "cast_out_" + g.value(out).name, h, out, 1));
        ++casts;
    }
    g.nodes.insert(g.nodes.begin(), std::make_move_iterator(prologue.begin()), std::make_move_iterator(prologue.end()));
    g.nodes.insert(g.nodes.end(), std::make_move_iterator(epilogue.begin()), std::make_move_iterator(epilogue.end()));
    reset_types(g);
    return casts;
}

namespace {

Node trans_data_node(Graph& g, int from, int to, Layout src, Layout dst) {
    Node t;
    t.op = "TransData";
    t.name = g.unique_name("trans_data_" + g.value(from).name);
    t.inputs = {from};
    t.outputs = {to};
    auto fmt_name = [](Layout l) { return std::string(l == Layout::NC1HWC0 ? "NC1HWC0" : "NCHW"); };
    t.attrs.set("src", fmt_name(src)).set("dst", fmt_name(dst));
    return t;
}

}  // namespace

// ReduceMean over exactly H and W of a 4-D map, keeping them (opu::is_spatial_mean), becomes
// GlobalAveragePool: the same values, its sum exact and in any order (so a tiled run's means
// over the frame equal it: executor/tiled.hpp), one kernel. Returns the nodes rewritten.
namespace {
int rewrite_spatial_means(Graph& g) {
    int n = 0;
    for (Node& node : g.nodes) {
        if (!opu::is_spatial_mean(g, node)) continue;
        node.op = "GlobalAveragePool";
        node.inputs.resize(1);
        node.attrs = KernelAttrs();
        ++n;
    }
    return n;
}
}  // namespace

// Besides the rules in passes.hpp: a graph input or output whose Value::layout is preset to
// NC1HWC0 is handed between models on the device (the tiled passes, executor/tiled.hpp), not to
// the host: the input is read in NC1HWC0 as it lies, the output left in whichever layout its
// producer wrote; neither gets a TransData.
int assign_layouts(Graph& g, int* cancelled) {
    int inserted = 0, cancels = 0;
    std::map<std::pair<int, Layout>, int> converted;  // (value, layout) -> the value in that layout
    std::vector<int> trans_source(g.values.size(), -1);  // for a TransData output: its input
    std::vector<Node> out;
    out.reserve(g.nodes.size());
    const auto is_4d_map = [&](int id) {
        const Value& v = g.value(id);
        return v.typed && v.shape.size() == 4 && !v.is_constant();
    };
    // A [N or 1, C, 1, 1] value of a [N, C, H, W] map (squeeze-and-excitation scales, global
    // pools): value (n, c) sits at n x C + c in ND and n x C1 x C0 + c in 5HD, so a kernel that
    // broadcasts it over a map's channels reads it in either layout with that image stride, and
    // a converted copy would buy nothing.
    const auto channel_vector_of = [&](int id, const Shape& map) {
        const Value& v = g.value(id);
        return is_4d_map(id) && map.size() == 4 && (map[2] != 1 || map[3] != 1) && v.shape[1] == map[1] &&
               (v.shape[0] == 1 || v.shape[0] == map[0]) && v.shape[2] == 1 && v.shape[3] == 1;
    };
    // Whether node n reads a 4-D map in 5HD as input 0 and writes one output of the same channels.
    const auto keeps_5hd_channels = [&](const Node& n) {
        if (n.outputs.size() != 1 || n.inputs.empty() || n.inputs[0] < 0 || !is_4d_map(n.inputs[0])) return false;
        const Value &x = g.value(n.inputs[0]), &y = g.value(n.outputs[0]);
        return x.layout == Layout::NC1HWC0 && y.typed && y.shape.size() == 4 && y.shape[1] == x.shape[1];
    };
    // Returns `id` in layout `l`: itself, a cached conversion, the source of a TransData that
    // goes the other way (the pair cancels), or a new TransData appended to `out`.
    auto convert = [&](int id, Layout l) -> int {
        if (g.value(id).layout == l) return id;
        if (auto it = converted.find({id, l}); it != converted.end()) return it->second;
        const int src = static_cast<size_t>(id) < trans_source.size() ? trans_source[static_cast<size_t>(id)] : -1;
        if (src >= 0 && g.value(src).layout == l) {
            ++cancels;
            return src;
        }
        const Value v = g.value(id);
        const int to = g.add_value(g.unique_name(v.name + (l == Layout::NC1HWC0 ? ".5hd" : ".nd")));
        Value& nv = g.value(to);
        nv.dtype = v.dtype;
        nv.shape = v.shape;
        nv.typed = true;
        nv.layout = l;
        trans_source.resize(g.values.size(), -1);
        trans_source[static_cast<size_t>(to)] = id;
        out.push_back(trans_data_node(g, id, to, v.layout, l));
        converted[{id, l}] = to;
        ++inserted;
        return to;
    };
    // A graph input or output preset to NC1HWC0 is handed to or from another model on the
    // device, not the host: an input is read as it is, an output stays in its producer's layout.
    std::vector<bool> keeps_layout(g.values.size(), false);
    for (int o : g.outputs) keeps_layout[static_cast<size_t>(o)] = g.value(o).layout == Layout::NC1HWC0;
    for (Node& n : g.nodes) {
        if (n.op == "TransData" && n.inputs.size() == 1 && n.outputs.size() == 1) {
            // An existing one (a graph laid out before): keep it, remember what it undoes.
            trans_source.resize(g.values.size(), -1);
            trans_source[static_cast<size_t>(n.outputs[0])] = n.inputs[0];
            const Layout to = g.value(n.inputs[0]).layout == Layout::NC1HWC0 ? Layout::ND : Layout::NC1HWC0;
            if (trans_source[static_cast<size_t>(n.inputs[0])] >= 0 &&
                g.value(trans_source[static_cast<size_t>(n.inputs[0])]).layout == to) {
                // A -> B -> A: the second one goes; its readers take the original.
                replace_uses(g, n.outputs[0], trans_source[static_cast<size_t>(n.inputs[0])]);
                ++cancels;
                continue;
            }
            g.value(n.outputs[0]).layout = to;
            out.push_back(std::move(n));
            continue;
        }
        const bool one_map_out = n.outputs.size() == 1 && is_4d_map(n.outputs[0]);
        Layout want = Layout::ND;
        if (op_has(n.op, OpTrait::LAYOUT_NC1HWC0) && one_map_out) {
            want = Layout::NC1HWC0;
        } else if (op_has(n.op, OpTrait::LAYOUT_AGNOSTIC) && one_map_out) {
            // Stays in 5HD when some data input is, and every data input is a same-shaped map or
            // a channel vector of it (per-channel constants broadcast either way).
            const Shape& shape = g.value(n.outputs[0]).shape;
            bool any_5hd = false, same = true;
            for (int id : n.inputs) {
                if (id < 0 || g.value(id).is_constant() || channel_vector_of(id, shape)) continue;
                any_5hd = any_5hd || g.value(id).layout == Layout::NC1HWC0;
                same = same && is_4d_map(id) && g.value(id).shape == shape;
            }
            if (any_5hd && same) want = Layout::NC1HWC0;
        } else if (op_has(n.op, OpTrait::SPATIAL) && keeps_5hd_channels(n)) {
            // Within each channel's plane: reads its map in 5HD; writes a map in 5HD and a
            // channel vector (the global pools) in ND.
            want = Layout::NC1HWC0;
        }
        // A copy: convert() adds values, which moves g.values.
        const std::optional<Shape> out_shape =
            n.outputs.size() == 1 ? std::optional<Shape>(g.value(n.outputs[0]).shape) : std::nullopt;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
            const int id = n.inputs[i];
            if (id < 0 || g.value(id).is_constant()) continue;
            // A Cube op's data inputs are X and the residual R; its weights are constants. An
            // agnostic op reads a channel vector in the layout it is in.
            if (want == Layout::NC1HWC0 && out_shape && channel_vector_of(id, *out_shape) &&
                !op_has(n.op, OpTrait::LAYOUT_NC1HWC0))
                continue;
            const Layout l = want == Layout::NC1HWC0 && is_4d_map(id) ? Layout::NC1HWC0 : Layout::ND;
            n.inputs[i] = convert(id, l);
        }
        const int in0 = n.inputs.empty() ? -1 : n.inputs[0];
        for (int o : n.outputs) {
            const bool vector_out = in0 >= 0 && channel_vector_of(o, g.value(in0).shape);
            g.value(o).layout = want == Layout::NC1HWC0 && is_4d_map(o) && !vector_out ? want : Layout::ND;
        }
        out.push_back(std::move(n));
    }
    // The graph's outputs are read by the host, in the logical layout and under their names:
    // the producer writes a 5HD copy that a last TransData turns back. One preset to NC1HWC0
    // keeps whichever layout its producer wrote.
    for (int o : g.outputs) {
        if (g.value(o).layout == Layout::ND || keeps_layout[static_cast<size_t>(o)]) continue;
        const int o5 = g.add_value(g.unique_name(g.value(o).name + ".5hd"));
        Value& v5 = g.value(o5);
        const Value& v = g.value(o);
        v5.dtype = v.dtype;
        v5.shape = v.shape;
        v5.typed = true;
        v5.layout = Layout::NC1HWC0;
        for (Node& n : out) {
            for (int& id : n.inputs)
                if (id == o) id = o5;
            for (int& id : n.outputs)
                if (id == o) id = o5;
        }
        g.value(o).layout = Layout::ND;
        out.push_back(trans_data_node(g, o5, o, Layout::NC1HWC0, Layout::ND));
        ++inserted;
    }
    g.nodes = std::move(out);
    if (cancelled) *cancelled = cancels;
    return inserted;
}

void compact(Graph& g) {
    std::vector<bool> used(g.values.size(), false);
    for (int i : g.inputs) used[static_cast<size_t>(i)] = true;
    for (int o : g.outputs) used[static_cast<size_t>(o)] = true;
    for (const Node& n : g.nodes) {
        for (int i : n.inputs)
            if (i >= 0) used[static_cast<size_t>(i)] = true;
        for (int o : n.outputs) used[static_cast<size_t>(o)] = true;
    }
    std::vector<int> remap(g.values.size(), -1);
    std::vector<Value> kept;
    for (size_t i = 0; i < g.values.size(); ++i) {
        if (!used[i]) continue;
        remap[i] = static_cast<int>(kept.size());
        kept.push_back(std::move(g.values[i]));
    }
    g.values = std::move(kept);
    auto fix = [&](int& id) {
        if (id >= 0) id = remap[static_cast<size_t>(id)];
    };
    for (int& i : g.inputs) fix(i);
    for (int& o : g.outputs) fix(o);
    for (Node& n : g.nodes) {
        for (int& i : n.inputs) fix(i);
        for (int& o : n.outputs) fix(o);
    }
    g.reindex();
}

Result<std::vector<PassCount>> optimize(Graph& g, const OptimizeOptions& options) {
    std::vector<PassCount> report;
    auto step = [&](const char* name, auto&& fn) -> Status {
        PassCount p{name, g.nodes.size(), 0, 0};
        auto r = fn();
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, int>) {
            p.changed = r;
        } else {
            if (!r.ok()) return r.status().with_context(name);
            p.changed = *r;
        }
        p.nodes_after = g.nodes.size();
        report.push_back(p);
        return {};
    };
    if (options.fold) LOOM_TRY(step("fold_constants", [&] { return fold_constants(g); }));
    LOOM_TRY(step("spatial_means", [&] { return rewrite_spatial_means(g); }));
    LOOM_TRY(step("dead_code", [&] { return eliminate_dead_code(g); }));
    LOOM_TRY(step("cse", [&] { return eliminate_common_subexpressions(g); }));
    LOOM_TRY(step("dead_code", [&] { return eliminate_dead_code(g); }));
    if (options.fuse) {
        LOOM_TRY(step("fuse_conv_affine", [&] { return fuse_conv_affine(g); }));
        LOOM_TRY(step("fuse_epilogues", [&] { return fuse_epilogues(g); }));
        LOOM_TRY(step("fuse_elementwise", [&] { return fuse_elementwise_chains(g); }));
    }
    if (options.f16) {
        LOOM_TRY(step("precision_f16", [&] { return convert_to_f16(g); }));
        LOOM_TRY(infer_shapes(g).with_context("precision_f16"));
    }
    compact(g);
    LOOM_TRY(g.validate().with_context("after optimisation"));
    return report;
}

}  // namespace loom::compiler
