// Executor benchmarks (issue 5): the frame pipeline (executor/frame_scheduler.hpp) on the simulated NPU.
//
// 1. Overlap: Real-ESRGAN animevideov3 x2 (real weights, fp32) at 1x3x480x720, K = 3 frames in
//    flight, on edge and dc. The simulated steady-state frame time against the slowest of the
//    three stages of the first frame (H2D, kernels, D2H, measured from its events on an idle
//    device). Target: within 10% (steady state / slowest <= 1.10). For contrast, a sigmoid over
//    1x16x64x64 on edge, whose three stages are of similar length.
// 2. Sink vs host-scheduled: simulated ms per frame of the same static model compiled in both
//    modes, one frame at a time (Session) and pipelined (K = 3), on a model where launch
//    overhead matters (24 1x1 convs with relu over 1x8x8x8, every kernel shorter than a host
//    launch) and on animevideov3 x2 at 1x3x16x16 for comparison. Target: sink >= 1.5x faster on
//    the small-kernel model.
// 3. Host overhead: the executor's own host work per frame in run 1 on edge (staging copies,
//    submissions, completion bookkeeping and copying outputs out; waits excluded) as a share of
//    the wall time per frame, as wall time and as CPU time. The device's simulated DMA (the
//    copies' memcpy, run on the pool) is reported beside it from the trace. Target: < 1%
//    (wall).
// 4. Batching (no target): simulated ms per frame of a conv chain with a symbolic batch dim,
//    compiled at batch 1 and 4 (compile_for_batch), at three frame sizes.
//
// 5. Host placement (no target; the Ascend graph engine reports 3 ms down to about 10 us): a
//    Shape -> Gather -> Concat -> Reshape chain run on the AI cores vs placed on the host CPU
//    engine, simulated us per inference, with compile-time folding (what static shapes get) for
//    reference.
//
// Usage: loom_bench_executor --models DIR [--frames N] [--threads T] [--json]
//   DIR holds realesr-animevideov3-x2.param/.bin (scripts/fetch-models prints it); when they
//   are missing, parts 1 and 3 are skipped with a message.
// Prints tables and one JSON document; exits 1 when a target is missed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench_util.hpp"
#include "common/thread_pool.hpp"
#include "compiler/compile.hpp"
#include "compiler/import.hpp"
#include "device/runtime.hpp"
#include "executor/executor.hpp"
#include "executor/frame_scheduler.hpp"

namespace {

using namespace loom;
using compiler::CompiledModel;
using compiler::HostTensor;

using bench::unwrap;

// Frame i of `dims`: floats in [0, 1) from seed 20261122 + i.
std::vector<HostTensor> frame(const std::vector<int64_t>& dims, uint32_t i) {
    HostTensor t(device::DType::F32, dims);
    std::mt19937 rng(20261122u + i);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int64_t e = 0; e < t.elements(); ++e) t.as<float>()[e] = u(rng);
    return {std::move(t)};
}

// Compiles `g` for `spec` at input dims `dims`, in `mode`.
std::shared_ptr<CompiledModel> compile(const compiler::Graph& g, const std::vector<int64_t>& dims,
                                       const device::DeviceSpec& spec, compiler::ExecMode mode) {
    compiler::CompileOptions o;
    o.shapes = {{g.value(g.inputs[0]).name, dims}};
    o.mode = mode;
    return std::make_shared<CompiledModel>(unwrap(compiler::compile_graph(g, o, spec)));
}

struct Run {
    executor::PipelineRunReport report;
    double copy_wall_ms_per_frame = 0;  // the simulated DMA's memcpy, from the trace
    size_t memory_peak = 0;
};

// Runs `frames` frames of `dims` through a pipeline of `m` with `in_flight` slots.
Run run_pipeline(std::shared_ptr<CompiledModel> m, const device::DeviceSpec& spec, const std::vector<int64_t>& dims,
                 size_t in_flight, size_t frames, bool trace, bool reuse_outputs = true) {
    device::DeviceOptions o;
    o.trace = trace;
    auto dev = unwrap(device::Device::create(spec, o));
    auto loaded = unwrap(executor::LoadedModel::load(*dev, m));
    executor::FrameSchedulerOptions po;
    po.in_flight = in_flight;
    if (m->mode == compiler::ExecMode::HOST) po.input_dims = {dims};
    auto pipeline = unwrap(executor::FrameScheduler::create(loaded, po));
    std::vector<std::vector<HostTensor>> inputs;
    for (uint32_t i = 0; i < std::min<size_t>(frames, 4); ++i) inputs.push_back(frame(dims, i));
    Run r;
    r.report = unwrap(executor::run_frames(*pipeline, inputs, frames, reuse_outputs));
    if (r.report.frames_failed)
        BENCH_CHECK(make_error(StatusCode::INTERNAL, "{} frames failed", r.report.frames_failed));
    pipeline.reset();
    r.memory_peak = dev->stats().memory_peak;
    if (trace) {
        double copy_us = 0;
        const nlohmann::json doc = nlohmann::json::parse(dev->trace_json());
        for (const auto& e : doc["traceEvents"])
            if (e["ph"] == "X" && e["pid"] == 2 && (e["cat"] == "h2d" || e["cat"] == "d2h") &&
                std::string(e["name"]).rfind("frame ", 0) == 0)
                copy_us += e["args"]["wall_dur_us"].get<double>();
        r.copy_wall_ms_per_frame = copy_us / 1e3 / static_cast<double>(frames);
    }
    return r;
}

// Simulated ms per frame of one frame at a time through a Session (median of `frames`).
double session_sim_ms(std::shared_ptr<CompiledModel> m, const device::DeviceSpec& spec,
                      const std::vector<int64_t>& dims, size_t frames) {
    auto dev = unwrap(device::Device::create(spec));
    auto session = unwrap(executor::Session::create(unwrap(executor::LoadedModel::load(*dev, m))));
    std::vector<double> ms;
    for (uint32_t i = 0; i < frames; ++i) {
        executor::RunStats st;
        unwrap(session->run(frame(dims, i), &st));
        ms.push_back(st.sim_ms);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// 24 1x1 convs (8 -> 8 channels) with relu: kernels of about a microsecond each on edge.
compiler::Graph small_kernel_chain(int layers) {
    compiler::Graph g;
    g.source = "conv1x1_chain";
    const int x = g.add_value("x");
    g.value(x).shape = {1, 8, compiler::Dim::sym("H"), compiler::Dim::sym("W")};
    g.value(x).typed = true;
    g.inputs.push_back(x);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-0.4f, 0.4f);
    int prev = x;
    for (int i = 0; i < layers; ++i) {
        HostTensor w(device::DType::F32, {8, 8, 1, 1}), b(device::DType::F32, {8});
        for (int64_t e = 0; e < w.elements(); ++e) w.as<float>()[e] = u(rng);
        for (int64_t e = 0; e < b.elements(); ++e) b.as<float>()[e] = 0.05f + 0.1f * u(rng);
        const std::string id = std::to_string(i);
        const int wi = g.add_constant("w" + id, std::move(w)), bi = g.add_constant("b" + id, std::move(b));
        const int c = g.add_value("c" + id), r = g.add_value("r" + id);
        g.nodes.push_back({"Conv", "c" + id, {prev, wi, bi}, {c}, {}, {}});
        g.nodes.push_back({"Relu", "r" + id, {c}, {r}, {}, {}});
        prev = r;
    }
    g.outputs.push_back(prev);
    BENCH_CHECK(g.topo_sort());
    return g;
}

// `layers` 3x3 convs (16 -> 16 channels) with relu over Nx16xHxW, N symbolic: a model that
// batches.
compiler::Graph batchable_chain(int layers) {
    compiler::Graph g;
    g.source = "conv3x3_chain";
    const int x = g.add_value("x");
    g.value(x).shape = {compiler::Dim::sym("N"), 16, compiler::Dim::sym("H"), compiler::Dim::sym("W")};
    g.value(x).typed = true;
    g.inputs.push_back(x);
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-0.1f, 0.1f);
    int prev = x;
    for (int i = 0; i < layers; ++i) {
        HostTensor w(device::DType::F32, {16, 16, 3, 3}), b(device::DType::F32, {16});
        for (int64_t e = 0; e < w.elements(); ++e) w.as<float>()[e] = u(rng);
        for (int64_t e = 0; e < b.elements(); ++e) b.as<float>()[e] = u(rng);
        const std::string id = std::to_string(i);
        const int wi = g.add_constant("w" + id, std::move(w)), bi = g.add_constant("b" + id, std::move(b));
        const int c = g.add_value("c" + id), r = g.add_value("r" + id);
        device::KernelAttrs attrs{{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                                  {"kernel_shape", std::vector<int64_t>{3, 3}}};
        g.nodes.push_back({"Conv", "c" + id, {prev, wi, bi}, {c}, std::move(attrs), {}});
        g.nodes.push_back({"Relu", "r" + id, {c}, {r}, {}, {}});
        prev = r;
    }
    g.outputs.push_back(prev);
    BENCH_CHECK(g.topo_sort());
    return g;
}

// One sigmoid over 1x16xHxW: at 64x64 on edge a kernel about as long as each copy, so all three
// stages matter.
compiler::Graph sigmoid_graph() {
    compiler::Graph g;
    g.source = "sigmoid";
    const int x = g.add_value("x"), y = g.add_value("y");
    g.value(x).shape = {1, 16, compiler::Dim::sym("H"), compiler::Dim::sym("W")};
    g.value(x).typed = true;
    g.inputs.push_back(x);
    g.nodes.push_back({"Sigmoid", "y", {x}, {y}, {}, {}});
    g.outputs.push_back(y);
    return g;
}

// The shape chain of part 5: target = Reshape(Concat(Gather(Shape(x), [0, 1]), [-1]), [1, 3]),
// the shape a dynamic-shape model computes and hands on, beside y = Relu(x) for x of
// 1 x C x H x W. Every op of the chain reads and writes at most four integers.
compiler::Graph shape_chain_graph() {
    compiler::Graph g;
    g.source = "shape-chain";
    auto i64 = [](std::vector<int64_t> v) {
        HostTensor t(device::DType::I64, {static_cast<int64_t>(v.size())});
        std::copy(v.begin(), v.end(), t.as<int64_t>());
        return t;
    };
    const int x = g.add_value("x");
    g.value(x).shape = {1, compiler::Dim::sym("C"), compiler::Dim::sym("H"), compiler::Dim::sym("W")};
    g.value(x).typed = true;
    g.inputs.push_back(x);
    const int idx = g.add_constant("nc_axes", i64({0, 1})), rest = g.add_constant("rest", i64({-1}));
    const int row = g.add_constant("row", i64({1, 3}));
    const int shape = g.add_value("shape"), nc = g.add_value("nc"), flat = g.add_value("flat_shape");
    const int target = g.add_value("target"), y = g.add_value("y");
    g.nodes.push_back({"Shape", "shape", {x}, {shape}, {}, {}});
    g.nodes.push_back({"Gather", "nc", {shape, idx}, {nc}, {{"axis", int64_t{0}}}, {}});
    g.nodes.push_back({"Concat", "flat_shape", {nc, rest}, {flat}, {{"axis", int64_t{0}}}, {}});
    g.nodes.push_back({"Reshape", "target", {flat, row}, {target}, {}, {}});
    g.nodes.push_back({"Relu", "y", {x}, {y}, {}, {}});
    g.outputs = {y, target};
    return g;
}

std::string dims_str(const std::vector<int64_t>& d) {
    std::string s;
    for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Executor benchmarks: frame pipeline overlap, sink vs host-scheduled, host overhead"};
    std::string models;
    size_t frames = 8;
    unsigned threads = 0;
    bool json_only = false;
    app.add_option("--models", models, "folder with realesr-animevideov3-x2.param/.bin (scripts/fetch-models)");
    app.add_option("--frames", frames, "frames per pipelined run at 480x720")
        ->check(CLI::Range(2, 1000))
        ->capture_default_str();
    app.add_option("--threads", threads, "host pool threads (default: LOOM_THREADS or one per core)");
    app.add_flag("--json", json_only, "print only the JSON document");
    CLI11_PARSE(app, argc, argv);
    if (threads) ::setenv("LOOM_THREADS", std::to_string(threads).c_str(), 1);
    auto say = [&](auto... args) {
        if (!json_only) std::printf(args...);
    };
    bool ok = true;
    nlohmann::json report;
    report["threads"] = ThreadPool::global().size();

    const std::string param = models + "/realesr-animevideov3-x2.param";
    const bool have_model = !models.empty() && std::filesystem::exists(param) &&
                            std::filesystem::exists(models + "/realesr-animevideov3-x2.bin");
    compiler::Graph x2;
    if (have_model) x2 = unwrap(compiler::import_model(param));
    else say("animevideov3 x2 not found in '%s' (scripts/fetch-models): skipping parts 1 and 3\n", models.c_str());

    // 1. Overlap at 480x720, K = 3; 3. host overhead from the edge run.
    say("1. Overlap: K = 3 in flight, %u threads; stages of the first frame, steady state after the first 3\n",
        ThreadPool::global().size());
    say("%-28s %9s %11s %9s %12s %11s %8s %8s %9s\n", "model, frame, device", "H2D ms", "compute ms", "D2H ms",
        "steady ms/fr", "vs slowest", "overlap", "hidden", "peak MiB");
    auto overlap_row = [&](const std::string& label, const executor::PipelineRunReport& r, size_t peak) {
        const bool pass = r.steady_over_slowest <= 1.10;
        say("%-28s %9.4f %11.4f %9.4f %12.4f %10.3f%s %8.3f %7.1f%% %9.1f\n", label.c_str(), r.stage_h2d_ms,
            r.stage_compute_ms, r.stage_d2h_ms, r.sim_ms_per_frame, r.steady_over_slowest, pass ? " " : "!", r.overlap,
            100 * r.copies_hidden, static_cast<double>(peak) / 1048576.0);
        report["overlap"][label] = {{"h2d_ms", r.stage_h2d_ms},
                                    {"compute_ms", r.stage_compute_ms},
                                    {"d2h_ms", r.stage_d2h_ms},
                                    {"steady_ms_per_frame", r.sim_ms_per_frame},
                                    {"steady_over_slowest", r.steady_over_slowest},
                                    {"overlap", r.overlap},
                                    {"copies_hidden", r.copies_hidden},
                                    {"sim_latency_ms", r.sim_latency_ms},
                                    {"memory_peak_bytes", peak},
                                    {"wall_ms_per_frame", r.wall_ms_per_frame},
                                    {"pass", pass}};
        return pass;
    };
    if (have_model) {
        const std::vector<int64_t> dims{1, 3, 480, 720};
        for (const char* name : {"edge", "dc"}) {
            const device::DeviceSpec spec = unwrap(device::load_device_spec(name));
            const bool edge = std::string(name) == "edge";
            const Run run = run_pipeline(compile(x2, dims, spec, compiler::ExecMode::SINK), spec, dims, 3, frames,
                                         edge);
            const auto& r = run.report;
            ok &= overlap_row(fmt::format("animevideov3 x2 {} {}", dims_str(dims), name), r, run.memory_peak);
            if (!edge) continue;
            const double per_frame_wall = r.wall_ms / static_cast<double>(r.frames);
            const double fraction = r.executor_ms_per_frame / per_frame_wall;
            const bool pass3 = fraction < 0.01;
            ok &= pass3;
            // The same run with every frame's outputs allocated afresh by the pipeline.
            const Run fresh = run_pipeline(compile(x2, dims, spec, compiler::ExecMode::SINK), spec, dims, 3, frames,
                                           false, false);
            const auto& f = fresh.report;
            const double fresh_wall = f.wall_ms / static_cast<double>(f.frames);
            report["host_overhead"] = {{"wall_ms_per_frame", per_frame_wall},
                                       {"executor_ms_per_frame", r.executor_ms_per_frame},
                                       {"executor_fraction", fraction},
                                       {"executor_cpu_ms_per_frame", r.executor_cpu_ms_per_frame},
                                       {"executor_cpu_fraction", r.executor_cpu_ms_per_frame / per_frame_wall},
                                       {"submit_ms", r.pipeline.wall_submit_ms},
                                       {"complete_ms", r.pipeline.wall_complete_ms},
                                       {"simulated_dma_memcpy_ms_per_frame", run.copy_wall_ms_per_frame},
                                       {"fresh_outputs_wall_ms_per_frame", fresh_wall},
                                       {"fresh_outputs_executor_ms_per_frame", f.executor_ms_per_frame},
                                       {"fresh_outputs_executor_fraction", f.executor_ms_per_frame / fresh_wall},
                                       {"fresh_outputs_executor_cpu_ms_per_frame", f.executor_cpu_ms_per_frame},
                                       {"pass", pass3}};
            say("3. Host overhead (edge, frames given recycled output buffers): %.1f ms wall per frame; executor "
                "%.3f ms = %.3f%% %s (CPU time %.3f ms = %.3f%%); simulated DMA memcpy on the pool %.3f ms = %.3f%%\n",
                per_frame_wall, r.executor_ms_per_frame, 100 * fraction, pass3 ? "(< 1%)" : "(target 1% MISSED)",
                r.executor_cpu_ms_per_frame, 100 * r.executor_cpu_ms_per_frame / per_frame_wall,
                run.copy_wall_ms_per_frame, 100 * run.copy_wall_ms_per_frame / per_frame_wall);
            say("   with outputs allocated afresh per frame: %.1f ms wall per frame; executor %.3f ms = %.3f%% (CPU "
                "time %.3f ms = %.3f%%)\n",
                fresh_wall, f.executor_ms_per_frame, 100 * f.executor_ms_per_frame / fresh_wall,
                f.executor_cpu_ms_per_frame, 100 * f.executor_cpu_ms_per_frame / fresh_wall);
        }
    }

    {
        // For contrast: three stages of similar length, where overlap is what sets the frame time.
        const std::vector<int64_t> dims{1, 16, 64, 64};
        const device::DeviceSpec spec = unwrap(device::load_device_spec("edge"));
        const Run run = run_pipeline(compile(sigmoid_graph(), dims, spec, compiler::ExecMode::SINK), spec, dims, 3, 24,
                                     false);
        ok &= overlap_row(fmt::format("sigmoid {} edge", dims_str(dims)), run.report, run.memory_peak);
    }

    // 2. Sink vs host-scheduled.
    {
        const device::DeviceSpec spec = unwrap(device::load_device_spec("edge"));
        struct Case {
            std::string name;
            compiler::Graph g;
            std::vector<int64_t> dims;
            bool target;
        };
        std::vector<Case> cases;
        cases.push_back({"conv1x1 x24", small_kernel_chain(24), {1, 8, 8, 8}, true});
        if (have_model) cases.push_back({"animevideov3 x2", x2, {1, 3, 16, 16}, false});
        say("2. Sink vs host-scheduled on edge, simulated ms per frame (one at a time: Session, median of 8; "
            "pipelined: K = 3, steady state of 24)\n");
        say("%-16s %-10s %11s %11s %8s %11s %11s %8s\n", "model", "frame", "sink 1x", "host 1x", "ratio", "sink K=3",
            "host K=3", "ratio");
        for (Case& c : cases) {
            auto sink = compile(c.g, c.dims, spec, compiler::ExecMode::SINK);
            auto host = compile(c.g, c.dims, spec, compiler::ExecMode::HOST);
            const double s1 = session_sim_ms(sink, spec, c.dims, 8), h1 = session_sim_ms(host, spec, c.dims, 8);
            const double s3 = run_pipeline(sink, spec, c.dims, 3, 24, false).report.sim_ms_per_frame;
            const double h3 = run_pipeline(host, spec, c.dims, 3, 24, false).report.sim_ms_per_frame;
            const bool pass = !c.target || (h1 / s1 >= 1.5 && h3 / s3 >= 1.5);
            ok &= pass;
            say("%-16s %-10s %11.4f %11.4f %7.2fx %11.4f %11.4f %7.2fx%s\n", c.name.c_str(), dims_str(c.dims).c_str(),
                s1, h1, h1 / s1, s3, h3, h3 / s3,
                c.target ? (pass ? "  (target 1.5x met)" : "  (target 1.5x MISSED)") : "");
            report["sink_vs_host"][c.name] = {{"dims", c.dims},         {"kernels", sink->steps.size()},
                                              {"sink_ms", s1},           {"host_ms", h1},
                                              {"ratio", h1 / s1},        {"sink_pipelined_ms", s3},
                                              {"host_pipelined_ms", h3}, {"ratio_pipelined", h3 / s3},
                                              {"target", c.target},      {"pass", pass}};
        }
    }
    // 4. Batching: B frames gathered into one inference of the model compiled at batch B.
    {
        const device::DeviceSpec spec = unwrap(device::load_device_spec("edge"));
        const compiler::Graph g = batchable_chain(4);
        say("4. Batching: 4 3x3 convs (16 channels) with symbolic N, edge, K = 3, 24 frames, simulated ms per frame\n");
        say("%-10s %10s %10s %7s %14s %14s\n", "frame", "batch 1", "batch 4", "gain", "latency b=1", "latency b=4");
        for (int64_t hw : {8, 32, 64}) {
            executor::PipelineRunReport r[2];
            for (int i = 0; i < 2; ++i) {
                const int64_t batch = i ? 4 : 1;
                compiler::CompileOptions o;
                o.shapes = {{"x", {1, 16, hw, hw}}};
                auto m = std::make_shared<CompiledModel>(unwrap(compiler::compile_for_batch(g, batch, o, spec)));
                auto dev = unwrap(device::Device::create(spec));
                executor::FrameSchedulerOptions po;
                po.batch = batch;
                auto p = unwrap(executor::FrameScheduler::create(unwrap(executor::LoadedModel::load(*dev, m)), po));
                std::vector<std::vector<HostTensor>> in{frame({1, 16, hw, hw}, 0), frame({1, 16, hw, hw}, 1)};
                r[i] = unwrap(executor::run_frames(*p, in, 24));
            }
            const std::string f = dims_str({1, 16, hw, hw});
            say("%-10s %10.4f %10.4f %6.2fx %14.4f %14.4f\n", f.c_str(), r[0].sim_ms_per_frame, r[1].sim_ms_per_frame,
                r[0].sim_ms_per_frame / r[1].sim_ms_per_frame, r[0].sim_latency_ms, r[1].sim_latency_ms);
            report["batching"][f] = {{"batch1_ms_per_frame", r[0].sim_ms_per_frame},
                                     {"batch4_ms_per_frame", r[1].sim_ms_per_frame},
                                     {"batch1_latency_ms", r[0].sim_latency_ms},
                                     {"batch4_latency_ms", r[1].sim_latency_ms}};
        }
    }
    // 5. Host placement of a small shape chain (Shape -> Gather -> Concat -> Reshape, its result an
    //    output) beside one Relu. In host-scheduled mode (dynamic shapes, Ascend's single-op
    //    execution) each op on the AI cores is one host launch; placed on the host CPU engine it
    //    is a host task; by default the host plan folds the chain once per input shape, since
    //    run-time shape inference already knows its value. Sink mode for contrast: there the
    //    device runs the chain inside the one submission.
    {
        const device::DeviceSpec spec = unwrap(device::load_device_spec("edge"));
        const compiler::Graph g = shape_chain_graph();
        const std::vector<int64_t> dims{1, 16, 32, 32};
        say("5. Shape -> Gather -> Concat -> Reshape chain beside a Relu over %s, edge, simulated us per inference "
            "(Session, median of 8); chain = total - the Relu alone\n",
            dims_str(dims).c_str());
        auto sim_us = [&](const compiler::Graph& graph, bool fold, bool host_placement, compiler::ExecMode mode) {
            compiler::CompileOptions o;
            o.shapes = {{"x", dims}};
            o.fold = fold;
            o.host_placement = host_placement;
            o.mode = mode;
            auto m = std::make_shared<CompiledModel>(unwrap(compiler::compile_graph(graph, o, spec)));
            return session_sim_ms(m, spec, dims, 8) * 1e3;
        };
        compiler::Graph relu = sigmoid_graph();
        relu.nodes[0].op = "Relu";
        say("%-10s %-44s %12s %10s\n", "mode", "chain", "us/inference", "chain us");
        nlohmann::json j;
        for (const compiler::ExecMode exec : {compiler::ExecMode::HOST, compiler::ExecMode::SINK}) {
            const std::string name(compiler::exec_mode_name(exec));
            const char* mode = name.c_str();
            const double alone = sim_us(relu, true, true, exec);
            const double device_us = sim_us(g, false, false, exec), host_us = sim_us(g, false, true, exec);
            const double folded_us = sim_us(g, true, true, exec);
            say("%-10s %-44s %12.2f %10.2f\n", mode, "on the AI cores", device_us, device_us - alone);
            say("%-10s %-44s %12.2f %10.2f\n", mode, "placed on the host CPU engine", host_us, host_us - alone);
            say("%-10s %-44s %12.2f %10.2f\n", mode,
                exec == compiler::ExecMode::HOST ? "folded by the host plan (default)"
                                                 : "folded at compile time (default)",
                folded_us, folded_us - alone);
            say("%-10s %-44s %12.2f %10s\n", mode, "(the Relu alone)", alone, "-");
            j[mode] = {{"relu_alone_us", alone},
                       {"device_us", device_us},
                       {"host_placed_us", host_us},
                       {"folded_us", folded_us},
                       {"chain_device_us", device_us - alone},
                       {"chain_host_placed_us", host_us - alone},
                       {"chain_folded_us", folded_us - alone}};
        }
        const double dev = j["host"]["chain_device_us"], placed = j["host"]["chain_host_placed_us"];
        say("   host-scheduled: the chain costs %.2f us on the host engine vs %.2f us on the AI cores (%.1fx); "
            "folded by the plan %.2f us\n",
            placed, dev, dev / std::max(placed, 1e-9), j["host"]["chain_folded_us"].get<double>());
        j["dims"] = dims;
        report["shape_chain"] = j;
    }
    report["pass"] = ok;
    std::printf("%s\n", report.dump().c_str());
    return ok ? 0 : 1;
}
