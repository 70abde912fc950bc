#include "compiler/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "compiler/interpret.hpp"
#include "compiler/ops.hpp"

namespace loom::compiler {

namespace {

struct Candidate {
    size_t node;
    int activation;  // value id of X / A
    int weight;      // value id of W / B
    size_t ws_slot;  // the kernel input that takes the weight scales
};

// The weight-scale slot of each Cube op (device/kernels/conv.cpp, matmul.cpp, gemm.cpp).
size_t scale_slot(const std::string& op) { return op == "Conv" || op == "ConvTranspose" ? 5 : 4; }

// Element index of (channel c, j-th element of that channel) for the op's weight layout.
struct ChannelMap {
    int64_t channels = 0;
    int64_t per_channel = 0;
    std::function<int64_t(int64_t c, int64_t j)> index;
};

Result<ChannelMap> channel_map(const Node& n, const HostTensor& w) {
    const auto& d = w.dims();
    ChannelMap m;
    if (n.op == "Conv") {
        // [K, C/g, kh, kw]: channel k is one contiguous block.
        m.channels = d[0];
        m.per_channel = w.elements() / std::max<int64_t>(d[0], 1);
        const int64_t per = m.per_channel;
        m.index = [per](int64_t c, int64_t j) { return c * per + j; };
    } else if (n.op == "ConvTranspose") {
        // [C, K/g, kh, kw]; output channel k = group * (K/g) + kk reads rows of its group only.
        LOOM_ASSIGN_OR_RETURN(int64_t group, n.attrs.get_int("group", 1));
        const int64_t c_in = d[0], kg = d[1], area = w.elements() / std::max<int64_t>(c_in * kg, 1);
        const int64_t cg = c_in / group;
        m.channels = kg * group;
        m.per_channel = cg * area;
        m.index = [=](int64_t k, int64_t j) {
            const int64_t gi = k / kg, kk = k % kg, ci = gi * cg + j / area, a = j % area;
            return (ci * kg + kk) * area + a;
        };
    } else if (n.op == "MatMul" || n.op == "Gemm") {
        // MatMul B [K, N] (2-D only); Gemm B [K, N] or, with transB, [N, K].
        if (d.size() != 2) return make_error(StatusCode::UNSUPPORTED, "int8 {} needs a 2-D weight", n.op);
        const bool trans = n.op == "Gemm" && n.attrs.get_int("transB", 0).ok() && *n.attrs.get_int("transB", 0) == 1;
        const int64_t rows = d[0], cols = d[1];
        m.channels = trans ? rows : cols;
        m.per_channel = trans ? cols : rows;
        if (trans) m.index = [cols](int64_t c, int64_t j) { return c * cols + j; };
        else m.index = [cols](int64_t c, int64_t j) { return j * cols + c; };
    } else {
        return make_error(StatusCode::INTERNAL, "{} is QUANTIZABLE but its weight layout is not known here", n.op);
    }
    return m;
}

// Calibration keeps at most this many activation values per tensor (an even subsample).
constexpr size_t kSamplesMax = size_t{1} << 20;

// Appends an even subsample of |t| to `out`, at most kSamplesMax / sets values.
void sample_abs(const HostTensor& t, size_t sets, std::vector<float>& out) {
    const std::vector<double> v = t.to_doubles();
    const size_t budget = std::max<size_t>(kSamplesMax / std::max<size_t>(sets, 1), 1);
    const size_t step = std::max<size_t>(v.size() / budget, 1);
    for (size_t i = 0; i < v.size(); i += step) out.push_back(static_cast<float>(std::abs(v[i])));
}

// The clipping threshold that minimises the int8 quantization error of the sampled values, as
// Ascend's AMCT (IFMR) and TensorRT's calibrators search for it: candidates from 50% to 100% of
// the largest value; clipping the rare largest values buys finer steps for all the others.
double search_clip(std::vector<float>& a) {
    if (a.empty()) return 0;
    const double amax = *std::max_element(a.begin(), a.end());
    if (!(amax > 0) || !std::isfinite(amax)) return amax;
    double best = amax, best_err = -1;
    for (int pct = 50; pct <= 100; ++pct) {
        const double clip = amax * pct / 100.0, step = clip / 127.0;
        double err = 0;
        for (float x : a) {
            const double q = std::min(std::nearbyint(x / step), 127.0) * step;
            err += (q - x) * (q - x);
        }
        if (best_err < 0 || err < best_err) {
            best_err = err;
            best = clip;
        }
    }
    return best;
}

}  // namespace

Result<QuantizeReport> quantize_int8(Graph& g, std::span<const InputSet> calibration) {
    if (calibration.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: int8 needs at least one calibration input set", g.source);
    QuantizeReport report;
    report.samples = static_cast<int>(calibration.size());

    // Candidates: Cube ops with f32 constant weights and f32 activations, not yet quantized.
    std::vector<Candidate> cands;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
        const Node& n = g.nodes[i];
        if (!op_has(n.op, OpTrait::QUANTIZABLE)) continue;
        const Value* x = g.input(n, 0);
        const Value* w = g.input(n, 1);
        if (!x || !w || n.attrs.has("x_scale")) continue;
        if (!w->data || w->data->dtype() != DType::F32 || x->dtype != DType::F32 ||
            (n.op == "Gemm" && n.attrs.get_int("transA", 0).ok() && *n.attrs.get_int("transA", 0) != 0) ||
            (n.op == "MatMul" && w->shape.size() != 2)) {
            ++report.nodes_skipped;
            continue;
        }
        cands.push_back({i, n.inputs[0], n.inputs[1], scale_slot(n.op)});
    }

    // Calibrate: run the fp32 graph with every candidate's activation as an extra output.
    Graph probe = g;
    const size_t real_outputs = g.outputs.size();
    for (const Candidate& c : cands) probe.outputs.push_back(c.activation);
    std::vector<std::vector<float>> samples(cands.size());
    std::vector<std::vector<HostTensor>> reference;
    for (size_t s = 0; s < calibration.size(); ++s) {
        auto r = interpret(probe, calibration[s]);
        if (!r.ok()) return r.status().with_context(fmt::format("{}: calibration set {}", g.source, s));
        for (size_t k = 0; k < cands.size(); ++k) sample_abs((*r)[real_outputs + k], calibration.size(), samples[k]);
        reference.emplace_back(r->begin(), r->begin() + static_cast<std::ptrdiff_t>(real_outputs));
    }
    std::vector<double> amax(cands.size());
    for (size_t k = 0; k < cands.size(); ++k) amax[k] = search_clip(samples[k]);

    for (size_t k = 0; k < cands.size(); ++k) {
        Node& n = g.nodes[cands[k].node];
        if (!(amax[k] > 0) || !std::isfinite(amax[k])) {
            ++report.nodes_skipped;  // a constant-zero (or non-finite) activation has no scale
            continue;
        }
        const HostTensor& w = *g.value(cands[k].weight).data;
        LOOM_ASSIGN_OR_RETURN(ChannelMap cm, channel_map(n, w));
        HostTensor wq(DType::I8, w.dims());
        HostTensor ws(DType::F32, {cm.channels});
        const float* wf = w.as<float>();
        for (int64_t c = 0; c < cm.channels; ++c) {
            double m = 0;
            for (int64_t j = 0; j < cm.per_channel; ++j) m = std::max(m, std::abs(static_cast<double>(wf[cm.index(c, j)])));
            const float scale = m > 0 ? static_cast<float>(m / 127.0) : 1.0f;
            ws.as<float>()[c] = scale;
            for (int64_t j = 0; j < cm.per_channel; ++j) {
                const int64_t at = cm.index(c, j);
                const float q = std::nearbyint(wf[at] / scale);
                wq.as<int8_t>()[at] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
            }
        }
        const int wid = g.add_constant(g.unique_name(g.value(cands[k].weight).name + ".int8"), std::move(wq));
        const int sid = g.add_constant(g.unique_name(g.value(cands[k].weight).name + ".scales"), std::move(ws));
        Node& node = g.nodes[cands[k].node];
        node.inputs[1] = wid;
        node.inputs.resize(std::max(node.inputs.size(), cands[k].ws_slot + 1), -1);
        node.inputs[cands[k].ws_slot] = sid;
        node.attrs.set("x_scale", amax[k] / 127.0);
        ++report.nodes_quantized;
    }

    // The error the quantization costs, on the calibration sets.
    for (size_t s = 0; s < calibration.size(); ++s) {
        auto r = interpret(g, calibration[s]);
        if (!r.ok()) return r.status().with_context(fmt::format("{}: int8 graph on calibration set {}", g.source, s));
        for (size_t o = 0; o < real_outputs; ++o) {
            const auto y = (*r)[o].to_doubles(), ref = reference[s][o].to_doubles();
            double scale = 0, lo = 0, hi = 0, diff = 0, sq = 0;
            for (size_t i = 0; i < ref.size(); ++i) {
                scale = std::max(scale, std::abs(ref[i]));
                lo = std::min(lo, ref[i]);
                hi = std::max(hi, ref[i]);
                diff = std::max(diff, std::abs(y[i] - ref[i]));
                sq += (y[i] - ref[i]) * (y[i] - ref[i]);
            }
            if (scale > 0) report.max_rel_error = std::max(report.max_rel_error, diff / scale);
            const double mse = ref.empty() ? 0 : sq / static_cast<double>(ref.size());
            const double psnr = mse > 0 && hi > lo ? 10 * std::log10((hi - lo) * (hi - lo) / mse) : 999.0;
            report.psnr_db = s == 0 && o == 0 ? psnr : std::min(report.psnr_db, psnr);
        }
    }
    return report;
}

}  // namespace loom::compiler
