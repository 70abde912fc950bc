#include "compiler/measure.hpp"

#include <algorithm>
#include <chrono>
#include <random>

#include <fmt/format.h>

#include "common/thread_pool.hpp"
#include "compiler/interpret.hpp"
#include "compiler/ops.hpp"
#include "compiler/ops/util.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/winograd.hpp"
#include "device/kernels/cpu/winograd_i8.hpp"

namespace loom::compiler {

namespace {

constexpr int64_t kRowsMax = 256, kColsMax = 1024;  // the largest window of a map timed

HostTensor random_f32(const std::vector<int64_t>& dims, std::mt19937& rng) {
    HostTensor t(device::DType::F32, dims);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int64_t i = 0; i < t.elements(); ++i) t.as<float>()[i] = u(rng);
    return t;
}

// The static dims of value `id`, or empty when it has none.
std::vector<int64_t> dims_of(const Graph& g, int id) {
    auto d = opu::static_dims(g.value(id));
    return d.ok() ? *d : std::vector<int64_t>{};
}

// The candidates of conv node n on the host, none when it has no choice: a 2-D 3x3 stride-1
// undilated ungrouped conv with static shapes and an fp32 X, and constant weights that are fp32
// (the GEMM and Winograd F(2,3), F(4,3), F(6,3)) or int8 with their scales (the int8 GEMM and the
// integer F(4,3), when the weights keep its sums exact: cpu::winograd_i8_exact).
std::vector<int64_t> candidates(const Graph& g, const Node& n) {
    if (n.op != "Conv" || n.inputs.size() < 2 || n.outputs.size() != 1 || n.attrs.has("winograd")) return {};
    const Value& x = g.value(n.inputs[0]);
    const Value& w = g.value(n.inputs[1]);
    if (x.dtype != device::DType::F32 || !w.data) return {};
    const bool int8 = w.data->dtype() == device::DType::I8;
    if (!int8 && (w.data->dtype() != device::DType::F32 || n.inputs.size() > 5)) return {};  // > 5: W's int8 scales
    const std::vector<int64_t> xd = dims_of(g, n.inputs[0]), wd = dims_of(g, n.inputs[1]);
    if (xd.size() != 4 || wd.size() != 4 || wd[2] != 3 || wd[3] != 3 || dims_of(g, n.outputs[0]).size() != 4) return {};
    auto ints = [&](const char* name, int64_t fallback) {
        auto v = n.attrs.get_ints(name);
        return v.ok() ? *v : std::vector<int64_t>(2, fallback);
    };
    const std::vector<int64_t> strides = ints("strides", 1), dilations = ints("dilations", 1);
    const auto group = n.attrs.get_int("group", 1);
    if (!group.ok() || *group != 1 || strides != std::vector<int64_t>{1, 1} || dilations != std::vector<int64_t>{1, 1})
        return {};
    if (!int8) return {0, 2, 4, 6};
    if (wd[1] != xd[1] || !device::cpu::winograd_i8_exact(w.data->as<int8_t>(), wd[0], wd[1])) return {};
    return {0, 4};
}

}  // namespace

Result<MeasureReport> measure_conv_algorithms(Graph& g, ThreadPool& pool, int reps) {
    const auto t0 = std::chrono::steady_clock::now();
    MeasureReport report;
    const device::KernelDef* kernel = device::find_kernel("conv");
    if (!kernel) return make_error(StatusCode::INTERNAL, "kernel 'conv' is not registered");
    std::mt19937 rng(20261126);
    for (Node& n : g.nodes) {
        const std::vector<int64_t> choices = candidates(g, n);
        if (choices.empty()) continue;
        // Inputs: X and the other maps (the residual) random, constants as they are.
        std::vector<HostTensor> owned;  // the refs point into their storage, which growing the vector leaves in place
        device::KernelLaunch launch;
        LOOM_ASSIGN_OR_RETURN(Lowered l, lower_node(g, n));
        // At most kRowsMax x kColsMax of the maps: enough rows of tiles and blocks along a row for
        // the choice, without a 4K frame's maps in memory twice over. Stride 1: rows and columns
        // cut off the input come off the output (and the residual).
        const std::vector<int64_t> xd = dims_of(g, n.inputs[0]);
        const int64_t cut_h = std::max<int64_t>(0, xd[2] - kRowsMax), cut_w = std::max<int64_t>(0, xd[3] - kColsMax);
        auto cut = [&](std::vector<int64_t> d) {
            if (d.size() == 4) d[2] -= cut_h, d[3] -= cut_w;
            return d;
        };
        bool ok = true;
        for (int id : l.inputs) {
            if (id < 0) {
                launch.inputs.push_back(empty_tensor_ref());
                continue;
            }
            const Value& v = g.value(id);
            if (v.data) {
                if (launch.inputs.size() < 32) launch.constant_inputs |= 1u << launch.inputs.size();
                owned.push_back(*v.data);  // shares the constant's storage
            } else {
                const std::vector<int64_t> d = dims_of(g, id);
                if (d.empty() || v.dtype != device::DType::F32) ok = false;
                owned.push_back(random_f32(d.empty() ? std::vector<int64_t>{1} : cut(d), rng));
            }
            launch.inputs.push_back(host_tensor_ref(owned.back()));
        }
        if (!ok) continue;
        owned.emplace_back(device::DType::F32, cut(dims_of(g, n.outputs[0])));
        launch.outputs.push_back(host_tensor_ref(owned.back()));
        const int64_t C = launch.inputs[0].dim(1), K = launch.inputs[1].dim(0);
        MeasuredConv m;
        m.node = n.name;
        const bool int8 = launch.inputs[1].dtype == device::DType::I8;
        m.rule = int8 ? 4 : static_cast<int64_t>(device::cpu::winograd_tile_for(C, K));
        double best = 0;
        for (int64_t candidate : choices) {
            device::KernelLaunch trial = launch;
            trial.attrs = l.attrs;
            trial.attrs.set("winograd", candidate);
            if (kernel->prepare) {
                auto state = kernel->prepare(trial);
                if (!state.ok()) return state.status().with_context(fmt::format("measuring {}", node_label(n)));
                trial.state = *state;
            }
            double fastest = 0;
            for (int r = 0; r <= reps; ++r) {
                const auto s = std::chrono::steady_clock::now();
                if (Status st = kernel->run(trial, pool); !st.ok())
                    return st.with_context(fmt::format("measuring {} (winograd {})", node_label(n), candidate));
                const double ms =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count();
                if (r > 0 && (fastest == 0 || ms < fastest)) fastest = ms;  // run 0 warms up
            }
            m.ms.emplace_back(candidate, fastest);
            if (best == 0 || fastest < best) best = fastest, m.chosen = candidate;
        }
        n.attrs.set("winograd", m.chosen);
        report.convs.push_back(std::move(m));
    }
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return report;
}

}  // namespace loom::compiler
