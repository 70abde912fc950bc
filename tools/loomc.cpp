// loomc: the model compiler's command line: compile, run, benchmark and inspect models, print
// device specs, run the runtime demo, and manage the tuner's knowledge base.
#include <unistd.h>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/cli.hpp"
#include "common/file.hpp"
#include "common/json.hpp"
#include "common/thread_pool.hpp"
#include "compiler/compile.hpp"
#include "compiler/compile_cache.hpp"
#include "compiler/import.hpp"
#include "compiler/import_onnx.hpp"
#include "compiler/model_file.hpp"
#include "compiler/ops.hpp"
#include "compiler/split.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/runtime.hpp"
#include "device/spec.hpp"
#include "executor/executor.hpp"
#include "executor/frame_scheduler.hpp"
#include "executor/tiled.hpp"
#include "restore/engine.hpp"
#include "tools/demo.hpp"
#include "tools/kb_cmd.hpp"
#include "tuner/kb.hpp"
#include "tuner/subgraph.hpp"
#include "tuner/tune.hpp"

namespace {

using namespace loom;

// The host kernels' instruction set (every kernel also computes its result on the host CPU):
// the level in use (after LOOM_ISA), the best this CPU has, and the int8 GEMM's VNNI.
nlohmann::json host_isa_json() {
    namespace cpu = loom::device::cpu;
    const bool vnni = cpu::isa() == cpu::Isa::AVX512 && cpu::isa_has_vnni();
    return {{"isa", cpu::isa_name(cpu::isa())}, {"detected", cpu::isa_name(cpu::isa_detected())}, {"int8_vnni", vnni}};
}

loom::Status device_info(const std::string& device, bool json) {
    LOOM_ASSIGN_OR_RETURN(loom::device::DeviceSpec spec, loom::device::load_device_spec(device));
    nlohmann::json j = spec.to_json();
    j["host_kernels"] = host_isa_json();
    if (json) {
        std::printf("%s\n", dump_json(j, 2).c_str());
        return {};
    }
    std::printf("%s: %s\n", spec.name.c_str(), spec.description.c_str());
    std::printf("  AI cores        %lld x %.2f GHz, peak %.1f TFLOPS fp16, %.1f TOPS int8\n",
                static_cast<long long>(spec.aicore_count), spec.aicore_clock_ghz, spec.peak_fp16_flops() / 1e12,
                spec.peak_fp16_flops() * static_cast<double>(spec.cube_int8_rate) / 1e12);
    std::printf("  per core        L1 %lld KiB, L0A %lld KiB, L0B %lld KiB, L0C %lld KiB, UB %lld KiB\n",
                static_cast<long long>(spec.l1_kib), static_cast<long long>(spec.l0a_kib),
                static_cast<long long>(spec.l0b_kib), static_cast<long long>(spec.l0c_kib),
                static_cast<long long>(spec.ub_kib));
    std::printf("  memory          %lld MiB at %.1f GB/s, L2 %lld MiB at %.0f GB/s\n",
                static_cast<long long>(spec.memory_capacity_mib), spec.memory_bandwidth_gbps,
                static_cast<long long>(spec.l2_capacity_mib), spec.l2_bandwidth_gbps);
    std::printf("  host link       %.1f GB/s pinned, %.1f GB/s pageable, %.1f us latency\n",
                spec.host_link_bandwidth_gbps, spec.host_link_pageable_bandwidth_gbps, spec.host_link_latency_us);
    std::printf("  launch          %.1f us host-scheduled, %.0f ns per sink task\n", spec.launch_overhead_us,
                spec.launch_sink_task_ns);
    std::printf("  spec hash       %016llx\n", static_cast<unsigned long long>(spec.hash()));
    const nlohmann::json h = j["host_kernels"];
    std::printf("  host kernels    %s (this CPU: %s; int8 %s; LOOM_ISA=generic|avx2|avx512 picks a lower one)\n",
                h["isa"].get<std::string>().c_str(), h["detected"].get<std::string>().c_str(),
                h["int8_vnni"].get<bool>() ? "VNNI" : "without VNNI");
    return {};
}

struct CompileArgs {
    std::string model;
    std::vector<std::string> shapes;
    std::string device = "edge";
    std::string precision = "fp32";
    bool no_fuse = false;
    std::string calibrate;  // int8: a folder of input sets
    std::string mode;       // "" (by the input shapes), sink or host
    bool restore = false;   // apply the model's descriptor for the frame (compiler/descriptor.hpp)
    std::string kb;         // tilings from this knowledge base (loomc tune; tuner/kb.hpp)
    std::vector<std::string> splits;  // FIRST..LAST:ROWS split regions (compiler/split.hpp)
    bool measure_host = false;        // time each conv's host algorithms (compiler/measure.hpp)
    std::string output;
    // run, bench: the compile cache for source models (compiler/compile_cache.hpp): --cache-dir,
    // --cache (the default folder), else LOOM_CACHE_DIR when set; --no-cache turns it off.
    std::string cache_dir;
    bool cache = false, no_cache = false;
};

// Reads input_0.pb, input_1.pb, ... from `dir` until one is missing.
Result<std::vector<compiler::HostTensor>> read_input_set(const std::string& dir) {
    std::vector<compiler::HostTensor> inputs;
    for (int i = 0;; ++i) {
        const std::string path = fmt::format("{}/input_{}.pb", dir, i);
        if (!std::filesystem::exists(path)) break;
        LOOM_ASSIGN_OR_RETURN(compiler::HostTensor t, compiler::read_tensor_file(path));
        inputs.push_back(std::move(t));
    }
    return inputs;
}

// Calibration sets: DIR/input_N.pb (one set), or DIR's sub-folders (ONNX's test_data_set_N
// layout), each holding one set.
Result<std::vector<compiler::InputSet>> read_calibration(const std::string& dir) {
    std::vector<compiler::InputSet> sets;
    LOOM_ASSIGN_OR_RETURN(compiler::InputSet top, read_input_set(dir));
    if (!top.empty()) sets.push_back(std::move(top));
    std::error_code ec;
    std::vector<std::string> subdirs;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
        if (e.is_directory()) subdirs.push_back(e.path().string());
    if (ec) return make_error(StatusCode::IO_ERROR, "--calibrate {}: {}", dir, ec.message());
    std::sort(subdirs.begin(), subdirs.end());
    for (const auto& sub : subdirs) {
        LOOM_ASSIGN_OR_RETURN(compiler::InputSet set, read_input_set(sub));
        if (!set.empty()) sets.push_back(std::move(set));
    }
    if (sets.empty())
        return make_error(StatusCode::NOT_FOUND, "--calibrate {}: no input_0.pb there or in its sub-folders", dir);
    return sets;
}

// --mode as given (none: by the input shapes).
Result<std::optional<compiler::ExecMode>> mode_option(const CompileArgs& a) {
    if (a.mode.empty()) return std::optional<compiler::ExecMode>();
    LOOM_ASSIGN_OR_RETURN(const compiler::ExecMode mode, compiler::parse_exec_mode(a.mode));
    return std::optional<compiler::ExecMode>(mode);
}

Result<compiler::CompileOptions> compile_options(const CompileArgs& a, const device::DeviceSpec& spec) {
    compiler::CompileOptions o;
    if (!a.kb.empty()) {
        tuner::KbOptions kb_options;
        kb_options.create = false;
        LOOM_ASSIGN_OR_RETURN(tuner::KnowledgeBase kb, tuner::KnowledgeBase::open(a.kb, kb_options));
        LOOM_ASSIGN_OR_RETURN(o.tiling_source, tuner::KbTilingSource::load(kb, spec));
    }
    LOOM_ASSIGN_OR_RETURN(o.precision, compiler::parse_precision(a.precision));
    o.optimize = !a.no_fuse;
    o.measure_host = a.measure_host;
    LOOM_ASSIGN_OR_RETURN(o.mode, mode_option(a));
    if (!a.calibrate.empty()) {
        LOOM_ASSIGN_OR_RETURN(o.calibration, read_calibration(a.calibrate));
    }
    for (const std::string& text : a.shapes) {
        LOOM_ASSIGN_OR_RETURN(auto shape, compiler::parse_shape_option(text));
        o.shapes.push_back(std::move(shape));
    }
    for (const std::string& text : a.splits) {
        // FIRST..LAST:ROWS (step names as `loomc inspect` lists them).
        const size_t colon = text.rfind(':'), dots = text.find("..");
        compiler::SplitChoice c;
        int64_t rows = 0;
        const char* end = text.data() + text.size();
        if (colon == std::string::npos || dots == std::string::npos || dots > colon ||
            std::from_chars(text.data() + colon + 1, end, rows).ptr != end || rows < 1)
            return make_error(StatusCode::INVALID_ARGUMENT, "--split '{}': expected FIRST..LAST:ROWS", text);
        c.first = text.substr(0, dots);
        c.last = text.substr(dots + 2, colon - dots - 2);
        c.rows = rows;
        o.splits.push_back(std::move(c));
    }
    return o;
}

// --restore: wraps `g` in its descriptor (pad, network, crop, residual) for the frame of the
// 1xCxHxW `dims`, so that the model is run as its own program runs it.
Status restore_graph(compiler::Graph& g, const std::vector<int64_t>& dims, const std::string& path) {
    if (!g.descriptor) {
        std::string why = "no sidecar";
        (void)compiler::recognise_model(g, path, &why);
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: --restore: the model has no descriptor ({}; describe it in {})", path, why,
                          compiler::descriptor_sidecar_path(path));
    }
    if (dims.size() != 4)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: --restore takes a 1xCxHxW frame, not {}", path,
                          fmt::join(dims, "x"));
    return compiler::apply_descriptor(g, dims[2], dims[3]);
}

// The one --shape of a --restore compile or bench.
Result<std::vector<int64_t>> restore_dims(const compiler::CompileOptions& o, const std::string& path) {
    if (o.shapes.size() != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: --restore needs one --shape NAME=1xCxHxW (the frame)", path);
    return o.shapes[0].second;
}

// What the compile cache did for a run or bench, for the report (empty when it was off).
struct CacheReport {
    std::string outcome, path;
    double compile_ms = 0;
    nlohmann::json json() const {
        if (outcome.empty()) return nullptr;
        return {{"outcome", outcome}, {"path", path}, {"compile_ms", compile_ms}};
    }
    void print() const {
        if (!outcome.empty())
            std::printf("compile cache: %s %s%s\n", outcome.c_str(), path.c_str(),
                        outcome == "hit" ? "" : fmt::format(" (compiled in {:.1f} ms)", compile_ms).c_str());
    }
};

// The compile cache folder of run and bench: --cache-dir, --cache (the default folder), else
// LOOM_CACHE_DIR unless --no-cache; empty: none.
std::string cache_folder(const CompileArgs& a) {
    std::string dir = a.cache_dir;
    if (dir.empty() && a.cache) dir = compiler::default_cache_dir();
    if (dir.empty() && !a.no_cache)
        if (const char* env = std::getenv("LOOM_CACHE_DIR"); env && *env) dir = env;
    return a.no_cache ? std::string() : dir;
}

// Compiles an imported source model for run and bench, through the compile cache when one is
// on (--cache-dir, or LOOM_CACHE_DIR unless --no-cache).
Result<compiler::CompiledModel> compile_source(compiler::Graph g, const compiler::CompileOptions& o,
                                               const device::DeviceSpec& spec, const CompileArgs& a,
                                               CacheReport& report) {
    const std::string dir = cache_folder(a);
    if (dir.empty()) return compiler::compile_graph(std::move(g), o, spec);
    const compiler::CompileCache cache(dir);
    LOOM_ASSIGN_OR_RETURN(compiler::CacheResult r, cache.compile(std::move(g), o, spec));
    report.outcome = std::string(compiler::cache_outcome_name(r.outcome));
    report.path = r.path;
    report.compile_ms = r.compile_ms;
    return std::move(r.model);
}

// The names of a model's graph inputs or outputs, in order, whatever its mode.
std::vector<std::string> io_names(const compiler::CompiledModel& m, bool outputs) {
    std::vector<std::string> names;
    if (m.mode == compiler::ExecMode::HOST) {
        for (int id : outputs ? m.graph.outputs : m.graph.inputs) names.push_back(m.graph.value(id).name);
    } else {
        for (int id : outputs ? m.outputs : m.inputs) names.push_back(m.tensors[static_cast<size_t>(id)].name);
    }
    return names;
}

// Host mode: the graph kept for run-time lowering, its input shapes with their symbols.
void print_host_summary(const compiler::CompiledModel& m) {
    const compiler::Graph& g = m.graph;
    std::vector<std::string> inputs;
    for (int id : g.inputs) inputs.push_back(fmt::format("{}={}", g.value(id).name, compiler::shape_str(g.value(id).shape)));
    std::printf("%s: %zu nodes imported, %zu graph nodes kept for run-time lowering, %s, host mode\n", m.source.c_str(),
                m.nodes_imported, g.nodes.size(), std::string(compiler::precision_name(m.precision)).c_str());
    for (const auto& p : m.passes)
        std::printf("  %-18s %5zu -> %5zu nodes (%d changed)\n", p.pass.c_str(), p.nodes_before, p.nodes_after, p.changed);
    std::printf("  inputs            %s (shapes bound, lowered and planned per inference)\n",
                fmt::format("{}", fmt::join(inputs, ", ")).c_str());
    std::printf("  weights           %.2f MiB\n", static_cast<double>(m.weights.elements()) / 1048576.0);
}

void print_summary(const compiler::CompiledModel& m) {
    if (m.mode == compiler::ExecMode::HOST) {
        print_host_summary(m);
        return;
    }
    size_t host = 0, alias = 0;
    double ns = 0;
    for (const auto& s : m.steps) {
        host += s.placement == compiler::Placement::HOST;
        alias += s.alias;
        ns += s.cost_ns;
    }
    std::printf("%s: %zu nodes imported, %zu steps (%zu on the host, %zu zero-copy), %s, %s mode\n", m.source.c_str(),
                m.nodes_imported, m.steps.size(), host, alias,
                std::string(compiler::precision_name(m.precision)).c_str(),
                std::string(compiler::exec_mode_name(m.mode)).c_str());
    for (const auto& p : m.passes)
        std::printf("  %-18s %5zu -> %5zu nodes (%d changed)\n", p.pass.c_str(), p.nodes_before, p.nodes_after, p.changed);
    std::printf("  memory plan       %.2f MiB arena (liveness bound %.2f MiB, one buffer per tensor %.2f MiB)\n",
                static_cast<double>(m.arena_bytes) / 1048576.0, static_cast<double>(m.plan_lower_bound) / 1048576.0,
                static_cast<double>(m.plan_naive) / 1048576.0);
    std::printf("  weights           %.2f MiB\n", static_cast<double>(m.weights.elements()) / 1048576.0);
    std::printf("  estimated kernels %.3f ms on %s\n", ns / 1e6, m.spec_name.c_str());
    // A `winograd` attribute's value as the algorithm's name.
    const auto algorithm = [](int64_t w) { return w ? fmt::format("F({},3)", w) : std::string("GEMM"); };
    for (const compiler::MeasuredConv& c : m.measured.convs) {
        std::string times;
        for (const auto& [candidate, ms] : c.ms)
            times += fmt::format("{}{} {:.2f}", times.empty() ? "" : ", ", algorithm(candidate), ms);
        std::printf("  measured          %s: %s ms -> %s (the rule: %s)\n", c.node.c_str(), times.c_str(),
                    algorithm(c.chosen).c_str(), algorithm(c.rule).c_str());
    }
    for (const compiler::SplitRegion& r : m.splits)
        std::printf("  split region      %s (%d steps): bands of %lld rows, %zu band launches\n",
                    compiler::split_label(m, r.first, r.last).c_str(), r.last - r.first + 1,
                    static_cast<long long>(r.rows), r.tilings.size());
    if (m.descriptor)
        std::printf("  descriptor        %s (%s)\n", compiler::descriptor_summary(*m.descriptor).c_str(),
                    m.descriptor->applied ? "applied: the input is the frame" : "not applied");
    if (m.precision == compiler::Precision::INT8)
        std::printf("  int8              %d Cube ops quantized (%d left in float), %d calibration sets; vs fp32: "
                    "max rel err %.3g, PSNR %.1f dB\n",
                    m.int8.nodes_quantized, m.int8.nodes_skipped, m.int8.samples, m.int8.max_rel_error, m.int8.psnr_db);
}

Status compile_cmd(const CompileArgs& a) {
    LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(a.device));
    LOOM_ASSIGN_OR_RETURN(compiler::CompileOptions o, compile_options(a, spec));
    if (o.precision == compiler::Precision::INT8 && o.calibration.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "--precision int8 needs --calibrate DIR (sample input sets)");
    LOOM_ASSIGN_OR_RETURN(compiler::Graph g, compiler::import_model(a.model));
    if (a.restore) {
        LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, restore_dims(o, a.model));
        LOOM_TRY(restore_graph(g, dims, a.model));
    }
    LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel m, compiler::compile_graph(std::move(g), o, spec));
    LOOM_TRY(compiler::save_compiled_model(a.output, m));
    print_summary(m);
    std::printf("  wrote             %s\n", a.output.c_str());
    return {};
}

bool is_compiled(const std::string& path) { return std::filesystem::path(path).extension() == ".loom"; }

// A .loom file for run or bench; a --mode other than the file's is refused (it applies when
// compiling).
Result<std::shared_ptr<compiler::CompiledModel>> load_for_run(const CompileArgs& a) {
    LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel loaded, compiler::load_compiled_model(a.model));
    LOOM_ASSIGN_OR_RETURN(const std::optional<compiler::ExecMode> mode, mode_option(a));
    if (mode && *mode != loaded.mode)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: a {}-mode model; --mode {} applies when compiling", a.model,
                          compiler::exec_mode_name(loaded.mode), a.mode);
    return std::make_shared<compiler::CompiledModel>(std::move(loaded));
}

struct RunArgs {
    CompileArgs compile;
    std::string inputs_dir, outputs_dir, trace;
    std::string tile;  // --tile N | auto: over tiles of the frame (executor/tiled.hpp)
    int64_t carry_mib = -1;  // --carry-mib: host memory kept between a tiled run's passes
    bool json = false;
};

// loomc run --tile: a source model over tiles of its one input frame, compiled for one window.
Status run_tiled_cmd(const RunArgs& a, const device::DeviceSpec& spec, const std::vector<compiler::HostTensor>& inputs) {
    if (is_compiled(a.compile.model) || !a.compile.shapes.empty() || !a.compile.mode.empty())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: --tile compiles the source model (.onnx or .param) for its windows, in sink mode; "
                          "--shape and --mode do not apply",
                          a.compile.model);
    if (inputs.size() != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "--tile: {} input files in {}, a tiled run takes one frame",
                          inputs.size(), a.inputs_dir);
    executor::TiledOptions o;
    LOOM_ASSIGN_OR_RETURN(o.precision, compiler::parse_precision(a.compile.precision));
    o.restore = a.compile.restore;
    o.optimize = !a.compile.no_fuse;
    o.measure_host = a.compile.measure_host;
    if (a.carry_mib >= 0) o.carry_bytes = a.carry_mib * 1048576;
    if (a.tile != "auto") {
        char* end = nullptr;
        o.tile = std::strtoll(a.tile.c_str(), &end, 10);
        if (*end != '\0' || o.tile <= 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "--tile {}: a size in input pixels, or auto", a.tile);
    }
    device::DeviceOptions dopt;
    dopt.trace = !a.trace.empty();
    LOOM_TRY(device::apply_fault_environment(dopt.faults));
    LOOM_ASSIGN_OR_RETURN(auto dev, device::Device::create(spec, dopt));
    LOOM_ASSIGN_OR_RETURN(compiler::Graph g, compiler::import_model(a.compile.model));
    LOOM_ASSIGN_OR_RETURN(auto runner, executor::TiledRunner::create(*dev, std::move(g), inputs[0].dims(), o));
    executor::TiledStats stats;
    LOOM_ASSIGN_OR_RETURN(std::vector<compiler::HostTensor> outputs, runner->run(inputs[0], &stats));
    std::error_code ec;
    std::filesystem::create_directories(a.outputs_dir, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}", a.outputs_dir, ec.message());
    const std::vector<std::string> output_names = io_names(runner->model(), true);
    for (size_t i = 0; i < outputs.size(); ++i)
        LOOM_TRY(compiler::write_tensor_file(fmt::format("{}/output_{}.pb", a.outputs_dir, i), outputs[i],
                                             output_names[i]));
    if (!a.trace.empty()) LOOM_TRY(dev->write_trace(a.trace));
    const executor::TilePlan& p = runner->plan();
    const compiler::SpatialTiling& t = runner->tiling();
    const double arena_mib = static_cast<double>(runner->model().arena_bytes) / 1048576.0;
    if (a.json) {
        nlohmann::json j = {{"model", runner->model().source},
                            {"device", spec.name},
                            {"outputs", outputs.size()},
                            {"tiles", p.tiles()},
                            {"passes", stats.passes},
                            {"carried_mib", static_cast<double>(runner->carried_bytes()) / 1048576.0},
                            {"carried_on_device", runner->carried_on_device()},
                            {"window", {p.h.window, p.w.window}},
                            {"step", {p.h.step, p.w.step}},
                            {"halo", t.halo},
                            {"align", t.align},
                            {"scale", t.scale},
                            {"shrink", t.shrink},
                            {"arena_mib", arena_mib},
                            {"sim_ms", stats.sim_ms},
                            {"wall_ms", stats.wall_ms},
                            {"launches", stats.launches}};
        std::printf("%s\n", dump_json(j, 2).c_str());
    } else {
        const std::string passes =
            stats.passes == 1 ? std::string("pass")
            : runner->carried()
                ? fmt::format("passes (one per mean over the frame, then the output; {:.0f} MiB handed on in {})",
                              static_cast<double>(runner->carried_bytes()) / 1048576.0,
                              runner->carried_on_device() ? "device memory" : "host memory")
                : std::string("passes (one per mean over the frame, then the output; each from the window)");
        std::printf(
            "%s on %s: %zu outputs written to %s; %zu tiles (%zux%zu) of %lldx%lld-pixel windows (step %lldx%lld, "
            "halo %lld, align %lld, scale %lld, arena %.2f MiB), %zu %s over them, simulated %.3f ms, wall %.3f ms "
            "(%zu launches)\n",
            runner->model().source.c_str(), spec.name.c_str(), outputs.size(), a.outputs_dir.c_str(), p.tiles(),
            p.h.count(), p.w.count(), static_cast<long long>(p.h.window), static_cast<long long>(p.w.window),
            static_cast<long long>(p.h.step), static_cast<long long>(p.w.step), static_cast<long long>(t.halo),
            static_cast<long long>(t.align), static_cast<long long>(t.scale), arena_mib, stats.passes, passes.c_str(),
            stats.sim_ms, stats.wall_ms, stats.launches);
    }
    return {};
}

// True when `loomc run --restore` runs through the restore engine: a source model (file or
// name) at fp32 or fp16, as a restoration job would run it. int8 calibration, --mode, --split,
// --no-fuse, --shape and --tile are compiler experiments that keep the direct path below.
bool restores_through_engine(const RunArgs& a) {
    const CompileArgs& c = a.compile;
    return c.restore && !is_compiled(c.model) && a.tile.empty() && c.mode.empty() && c.splits.empty() &&
           c.calibrate.empty() && !c.no_fuse && c.shapes.empty() && (c.precision == "fp32" || c.precision == "fp16");
}

// `loomc run MODEL --restore`: the frame (input_0.pb, 1x3xHxW) through the restore engine, the
// one every face of Loom restores with: the model found by name or path, its descriptor applied,
// compiled through the compile cache, tiled when the whole frame does not fit the device.
Status run_restore_cmd(const RunArgs& a, const std::vector<compiler::HostTensor>& inputs) {
    const CompileArgs& c = a.compile;
    if (inputs.size() != 1 || inputs[0].dims().size() != 4 || inputs[0].dims()[0] != 1 || inputs[0].dims()[1] != 3)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: --restore takes one 1x3xHxW frame (input_0.pb in {})",
                          c.model, a.inputs_dir);
    restore::ContextOptions co;
    co.device = c.device;
    co.threads = ThreadPool::threads_from_environment();
    co.trace = !a.trace.empty();
    LOOM_TRY(device::apply_fault_environment(co.faults));
    LOOM_ASSIGN_OR_RETURN(auto ctx, restore::DeviceContext::create(co));
    restore::EngineOptions o;
    o.model.model = c.model;
    o.model.where = c.model;
    o.model.models_dir = default_models_dir();
    o.model.cache_dir = cache_folder(c);
    o.model.kb = c.kb;
    o.model.where_kb = "--kb";
    o.model.measure_host = c.measure_host;
    LOOM_ASSIGN_OR_RETURN(o.model.precision, compiler::parse_precision(c.precision));
    o.in_flight = 1;
    const FrameLayout layout{PixelFormat::YUV420P, inputs[0].dims()[3], inputs[0].dims()[2]};
    const auto t0 = std::chrono::steady_clock::now();
    LOOM_ASSIGN_OR_RETURN(auto engine, restore::Engine::create(ctx, o, {layout, {}}));
    double sim_ms = 0;
    const auto t1 = std::chrono::steady_clock::now();
    LOOM_ASSIGN_OR_RETURN(compiler::HostTensor out, engine->restore_tensor(inputs[0], &sim_ms));
    const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    const double prepare_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    std::error_code ec;
    std::filesystem::create_directories(a.outputs_dir, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}", a.outputs_dir, ec.message());
    LOOM_TRY(compiler::write_tensor_file(fmt::format("{}/output_0.pb", a.outputs_dir), out, engine->output_name()));
    if (!a.trace.empty()) LOOM_TRY(ctx->device().write_trace(a.trace));
    const nlohmann::json d = engine->describe();
    const std::string how = engine->tiled() ? fmt::format("{} tiles", d["tiles"].get<size_t>()) : "whole frame";
    if (a.json) {
        nlohmann::json j = {{"model", d["model"]}, {"device", ctx->device().spec().name}, {"outputs", 1},
                            {"mode", engine->tiled() ? "tiled" : "sink"}, {"sim_ms", sim_ms}, {"wall_ms", wall_ms},
                            {"prepare_ms", prepare_ms}, {"restore", d}};
        std::printf("%s\n", dump_json(j, 2).c_str());
    } else {
        std::printf("%s on %s: restored %lldx%lld -> %lldx%lld (%s; compile cache %s), written to %s/output_0.pb; "
                    "simulated %.3f ms, wall %.3f ms (prepared in %.1f ms)\n",
                    d["model"].get<std::string>().c_str(), ctx->device().spec().name.c_str(),
                    static_cast<long long>(layout.width), static_cast<long long>(layout.height),
                    static_cast<long long>(out.dims()[3]), static_cast<long long>(out.dims()[2]), how.c_str(),
                    d["compile_cache"].get<std::string>().c_str(), a.outputs_dir.c_str(), sim_ms, wall_ms, prepare_ms);
    }
    return {};
}

Status run_cmd(const RunArgs& a) {
    LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(a.compile.device));
    // Inputs: input_0.pb, input_1.pb, ... until one is missing.
    std::vector<compiler::HostTensor> inputs;
    std::vector<std::string> names;
    LOOM_ASSIGN_OR_RETURN(inputs, read_input_set(a.inputs_dir));
    if (restores_through_engine(a)) return run_restore_cmd(a, inputs);
    if (!a.tile.empty()) return run_tiled_cmd(a, spec, inputs);
    std::shared_ptr<compiler::CompiledModel> m;
    CacheReport cache;
    if (is_compiled(a.compile.model)) {
        LOOM_ASSIGN_OR_RETURN(m, load_for_run(a.compile));
    } else {
        LOOM_ASSIGN_OR_RETURN(compiler::Graph g, compiler::import_model(a.compile.model));
        LOOM_ASSIGN_OR_RETURN(compiler::CompileOptions o, compile_options(a.compile, spec));
        if (inputs.size() != g.inputs.size())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} input files in {}, the model has {} inputs",
                              a.compile.model, inputs.size(), a.inputs_dir, g.inputs.size());
        if (a.compile.restore) LOOM_TRY(restore_graph(g, inputs[0].dims(), a.compile.model));
        // Without --shape, the input files give the shapes (sink mode; --mode host keeps the
        // model's symbols); inputs that decide shapes are specialised to their values.
        for (size_t i = 0; i < inputs.size(); ++i) {
            const std::string& name = g.value(g.inputs[i]).name;
            names.push_back(name);
            if (a.compile.shapes.empty() && o.mode != compiler::ExecMode::HOST)
                o.shapes.emplace_back(name, inputs[i].dims());
            o.input_values.emplace_back(name, inputs[i]);
        }
        // int8 without --calibrate calibrates on the inputs being run.
        if (o.precision == compiler::Precision::INT8 && o.calibration.empty()) o.calibration.push_back(inputs);
        LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel c, compile_source(std::move(g), o, spec, a.compile, cache));
        m = std::make_shared<compiler::CompiledModel>(std::move(c));
        // Keep the input files of the inputs the compiled model still takes.
        std::vector<compiler::HostTensor> kept;
        for (const std::string& name : io_names(*m, false)) {
            const auto it = std::find(names.begin(), names.end(), name);
            kept.push_back(inputs[static_cast<size_t>(it - names.begin())]);
        }
        inputs = std::move(kept);
    }
    device::DeviceOptions dopt;
    dopt.trace = !a.trace.empty();
    LOOM_TRY(device::apply_fault_environment(dopt.faults));
    LOOM_ASSIGN_OR_RETURN(auto dev, device::Device::create(spec, dopt));
    LOOM_ASSIGN_OR_RETURN(auto loaded, executor::LoadedModel::load(*dev, m));
    LOOM_ASSIGN_OR_RETURN(auto session, executor::Session::create(loaded));
    executor::RunStats stats;
    LOOM_ASSIGN_OR_RETURN(std::vector<compiler::HostTensor> outputs, session->run(inputs, &stats));
    std::error_code ec;
    std::filesystem::create_directories(a.outputs_dir, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}", a.outputs_dir, ec.message());
    const std::vector<std::string> output_names = io_names(*m, true);
    for (size_t i = 0; i < outputs.size(); ++i)
        LOOM_TRY(compiler::write_tensor_file(fmt::format("{}/output_{}.pb", a.outputs_dir, i), outputs[i],
                                             output_names[i]));
    if (!a.trace.empty()) LOOM_TRY(dev->write_trace(a.trace));
    const std::string mode(compiler::exec_mode_name(stats.mode));
    if (a.json) {
        nlohmann::json j = {{"model", m->source}, {"device", spec.name}, {"outputs", outputs.size()},
                            {"mode", mode}, {"sim_ms", stats.sim_ms}, {"wall_ms", stats.wall_ms},
                            {"launches", stats.launches}, {"submissions", stats.submissions},
                            {"host_steps", stats.host_steps}, {"compile_cache", cache.json()}};
        std::printf("%s\n", dump_json(j, 2).c_str());
    } else {
        cache.print();
        std::printf("%s on %s: %zu outputs written to %s; %s mode, simulated %.3f ms, wall %.3f ms (%zu launches in "
                    "%zu submissions, %zu on the host)\n",
                    m->source.c_str(), spec.name.c_str(), outputs.size(), a.outputs_dir.c_str(), mode.c_str(),
                    stats.sim_ms, stats.wall_ms, stats.launches, stats.submissions, stats.host_steps);
    }
    return {};
}

// Per worker, the busy ms between two ThreadPool::busy_ns() snapshots.
std::vector<double> thread_busy_ms(const std::vector<int64_t>& before, const std::vector<int64_t>& after) {
    std::vector<double> ms;
    for (size_t i = 0; i < after.size() && i < before.size(); ++i)
        ms.push_back(static_cast<double>(after[i] - before[i]) / 1e6);
    return ms;
}

struct BenchArgs {
    CompileArgs compile;
    size_t frames = 16;
    size_t in_flight = 3;
    int64_t batch = 1;
    unsigned threads = 0;  // 0: LOOM_THREADS or one per core
    bool json = false;
};

// Random inputs for `dims` (dtypes from `dtypes`), from a generator seeded with `seed`: floats
// in [0, 1); other dtypes are refused, naming the input.
Result<std::vector<compiler::HostTensor>> bench_inputs(const std::vector<std::vector<int64_t>>& dims,
                                                       const std::vector<device::DType>& dtypes,
                                                       const std::vector<std::string>& names, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    std::vector<compiler::HostTensor> in;
    for (size_t i = 0; i < dims.size(); ++i) {
        compiler::HostTensor t(dtypes[i], dims[i]);
        if (dtypes[i] == device::DType::F32) {
            for (int64_t e = 0; e < t.elements(); ++e) t.as<float>()[e] = uniform(rng);
        } else if (dtypes[i] == device::DType::F16) {
            for (int64_t e = 0; e < t.elements(); ++e) t.as<device::f16>()[e] = device::f32_to_f16(uniform(rng));
        } else {
            return make_error(StatusCode::UNSUPPORTED, "bench generates float inputs; input '{}' is {}", names[i],
                              device::dtype_name(dtypes[i]));
        }
        in.push_back(std::move(t));
    }
    return in;
}

Status bench_cmd(const BenchArgs& a) {
    // Before anything starts the global pool.
    if (a.threads) ::setenv("LOOM_THREADS", std::to_string(a.threads).c_str(), 1);
    LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(a.compile.device));
    std::shared_ptr<compiler::CompiledModel> m;
    CacheReport cache;
    if (is_compiled(a.compile.model)) {
        LOOM_ASSIGN_OR_RETURN(m, load_for_run(a.compile));
    } else {
        LOOM_ASSIGN_OR_RETURN(compiler::Graph g, compiler::import_model(a.compile.model));
        LOOM_ASSIGN_OR_RETURN(compiler::CompileOptions o, compile_options(a.compile, spec));
        if (a.compile.restore) {
            LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, restore_dims(o, a.compile.model));
            LOOM_TRY(restore_graph(g, dims, a.compile.model));
        }
        if (o.precision == compiler::Precision::INT8 && o.calibration.empty())
            return make_error(StatusCode::INVALID_ARGUMENT, "--precision int8 needs --calibrate DIR (sample input sets)");
        compiler::CompiledModel c;
        if (a.batch > 1) {
            LOOM_ASSIGN_OR_RETURN(c, compiler::compile_for_batch(std::move(g), a.batch, o, spec));
        } else {
            LOOM_ASSIGN_OR_RETURN(c, compile_source(std::move(g), o, spec, a.compile, cache));
        }
        m = std::make_shared<compiler::CompiledModel>(std::move(c));
    }
    executor::FrameSchedulerOptions po;
    po.in_flight = a.in_flight;
    po.batch = a.batch;
    const std::vector<std::string> names = io_names(*m, false);
    if (m->mode == compiler::ExecMode::HOST) {
        // One shape per pipeline: --shape, or the graph's own static shapes.
        for (size_t i = 0; i < m->graph.inputs.size(); ++i) {
            const compiler::Value& v = m->graph.value(m->graph.inputs[i]);
            std::vector<int64_t> dims;
            for (const std::string& text : a.compile.shapes) {
                LOOM_ASSIGN_OR_RETURN(auto shape, compiler::parse_shape_option(text));
                if (shape.first == v.name) dims = shape.second;
            }
            if (dims.empty() && compiler::shape_static(v.shape)) dims = compiler::shape_dims(v.shape);
            if (dims.empty())
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: host-mode input '{}' is {}: give --shape {}=...",
                                  a.compile.model, v.name, compiler::shape_str(v.shape), v.name);
            po.input_dims.push_back(std::move(dims));
        }
    }
    device::DeviceOptions dopt;
    LOOM_TRY(device::apply_fault_environment(dopt.faults));
    LOOM_ASSIGN_OR_RETURN(auto dev, device::Device::create(spec, dopt));
    LOOM_ASSIGN_OR_RETURN(auto loaded, executor::LoadedModel::load(*dev, m));
    LOOM_ASSIGN_OR_RETURN(auto pipeline, executor::FrameScheduler::create(loaded, po));
    std::vector<device::DType> dtypes;
    if (m->mode == compiler::ExecMode::HOST) {
        for (int id : m->graph.inputs) dtypes.push_back(m->graph.value(id).dtype);
    } else {
        for (int id : m->inputs) dtypes.push_back(m->tensors[static_cast<size_t>(id)].dtype);
    }
    // A few distinct frames (fixed seeds), cycled.
    std::vector<std::vector<compiler::HostTensor>> inputs;
    for (size_t i = 0; i < std::min<size_t>(a.frames, 4); ++i) {
        LOOM_ASSIGN_OR_RETURN(auto in, bench_inputs(pipeline->frame_dims(), dtypes, names,
                                                     20261122u + static_cast<uint32_t>(i)));
        inputs.push_back(std::move(in));
    }
    const std::vector<int64_t> busy0 = ThreadPool::global().busy_ns();
    LOOM_ASSIGN_OR_RETURN(executor::PipelineRunReport r, executor::run_frames(*pipeline, inputs, a.frames));
    // Each worker's busy time over the run, and its share of the run's wall time: how well the
    // frames in flight kept the cores busy.
    std::vector<double> busy_ms = thread_busy_ms(busy0, ThreadPool::global().busy_ns());
    std::vector<double> busy_share;
    for (double b : busy_ms) busy_share.push_back(r.wall_ms > 0 ? b / r.wall_ms : 0.0);
    // Throughput as frames over the whole run's wall time, beside the steady-state median.
    const double fps_wall = r.wall_ms > 0 ? 1000.0 * static_cast<double>(r.frames) / r.wall_ms : 0.0;
    pipeline.reset();
    const device::DeviceStats ds = dev->stats();
    const unsigned threads = ThreadPool::global().size();
    if (r.frames_failed)
        return make_error(StatusCode::DEVICE_FAULT, "{}: {} of {} frames failed", m->source, r.frames_failed, r.frames);
    const std::string mode(compiler::exec_mode_name(m->mode)), precision(compiler::precision_name(m->precision));
    if (a.json) {
        nlohmann::json j = {{"model", m->source}, {"device", spec.name}, {"mode", mode},
                            {"precision", precision}, {"frames", r.frames}, {"in_flight", a.in_flight},
                            {"batch", a.batch}, {"threads", threads}, {"inferences", r.inferences},
                            {"wall_ms", r.wall_ms}, {"wall_ms_per_frame", r.wall_ms_per_frame},
                            {"fps_wall", fps_wall}, {"thread_busy_ms", busy_ms}, {"thread_busy_share", busy_share},
                            {"sim_ms_per_frame", r.sim_ms_per_frame}, {"sim_fps", r.sim_fps},
                            {"sim_latency_ms", r.sim_latency_ms}, {"sim_makespan_ms", r.sim_makespan_ms},
                            {"stage_h2d_ms", r.stage_h2d_ms}, {"stage_compute_ms", r.stage_compute_ms},
                            {"stage_d2h_ms", r.stage_d2h_ms}, {"steady_over_slowest", r.steady_over_slowest},
                            {"overlap", r.overlap}, {"copies_hidden", r.copies_hidden},
                            {"memory_peak_bytes", ds.memory_peak}, {"memory_capacity_bytes", ds.memory_capacity},
                            {"executor_ms_per_frame", r.executor_ms_per_frame},
                            {"executor_fraction", r.executor_fraction},
                            {"executor_cpu_ms_per_frame", r.executor_cpu_ms_per_frame},
                            {"executor_cpu_fraction", r.executor_cpu_fraction},
                            {"executor_submit_ms", r.pipeline.wall_submit_ms},
                            {"executor_complete_ms", r.pipeline.wall_complete_ms},
                            {"executor_submit_cpu_ms", r.pipeline.cpu_submit_ms},
                            {"executor_complete_cpu_ms", r.pipeline.cpu_complete_ms},
                            {"device_wait_ms", r.pipeline.wall_device_wait_ms},
                            {"submits_blocked", r.pipeline.submits_blocked},
                            {"in_flight_max", r.pipeline.in_flight_max}, {"compile_cache", cache.json()},
                            {"host_kernels", host_isa_json()}};
        std::printf("%s\n", dump_json(j, 2).c_str());
        return {};
    }
    cache.print();
    std::printf("%s on %s: %zu frames, %s mode, %s, %zu in flight, batch %lld, %u threads, host kernels %s\n",
                m->source.c_str(), spec.name.c_str(), r.frames, mode.c_str(), precision.c_str(), a.in_flight,
                static_cast<long long>(a.batch), threads, std::string(device::cpu::isa_name(device::cpu::isa())).c_str());
    std::printf("  wall        %.1f ms for %zu frames = %.2f frames/s; %.3f ms/frame at steady state (median)\n",
                r.wall_ms, r.frames, fps_wall, r.wall_ms_per_frame);
    std::string busy_line;
    for (double b : busy_share) busy_line += fmt::format("{}{:.1f}%", busy_line.empty() ? "" : " ", 100 * b);
    std::printf("  threads     busy %s of the wall time\n", busy_line.c_str());
    std::printf("  simulated   %10.4f ms/frame at steady state = %.1f frames/s; latency %.4f ms (median)\n",
                r.sim_ms_per_frame, r.sim_fps, r.sim_latency_ms);
    std::printf("  stages      H2D %.4f ms, compute %.4f ms, D2H %.4f ms (first inference); steady state / slowest "
                "%.3f\n",
                r.stage_h2d_ms, r.stage_compute_ms, r.stage_d2h_ms, r.steady_over_slowest);
    std::printf("  overlap     %.3f (stage time per period), copies hidden %.1f%%\n", r.overlap, 100 * r.copies_hidden);
    std::printf("  memory      peak %.1f MiB of %.0f MiB\n", static_cast<double>(ds.memory_peak) / 1048576.0,
                static_cast<double>(ds.memory_capacity) / 1048576.0);
    std::printf("  executor    %.3f ms/frame of host work, %.3f%% of wall (CPU time %.3f ms, %.3f%%): staging, "
                "submission, completion\n",
                r.executor_ms_per_frame, 100 * r.executor_fraction, r.executor_cpu_ms_per_frame,
                100 * r.executor_cpu_fraction);
    return {};
}

// The models under `dir` (every .param and .onnx, recursively, sorted) with their descriptors.
Status models_cmd(std::string dir, bool json) {
    if (dir.empty()) dir = default_models_dir();
    std::vector<std::string> paths;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec); !ec && it != decltype(it)(); it.increment(ec)) {
        const std::string ext = it->path().extension().string();
        if (it->is_regular_file(ec) && (ext == ".param" || ext == ".onnx")) paths.push_back(it->path().string());
    }
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {} (scripts/fetch-models fills the model cache)", dir, ec.message());
    std::sort(paths.begin(), paths.end());
    nlohmann::json out = nlohmann::json::array();
    size_t described = 0;
    for (const std::string& path : paths) {
        const std::string rel = std::filesystem::relative(path, dir, ec).string();
        auto g = compiler::import_model(path);
        nlohmann::json j = {{"model", rel}};
        std::string line;
        if (!g.ok()) {
            j["error"] = g.status().message();
            line = "error: " + g.status().message();
        } else if (g->descriptor) {
            ++described;
            j["descriptor"] = compiler::descriptor_json(*g->descriptor);
            line = compiler::descriptor_summary(*g->descriptor);
        } else {
            std::string why;
            (void)compiler::recognise_model(*g, path, &why);
            j["descriptor"] = nullptr;
            j["why"] = why;
            line = "no descriptor: " + why;
        }
        out.push_back(std::move(j));
        if (!json) std::printf("%-72s %s\n", rel.c_str(), line.c_str());
    }
    if (json) std::printf("%s\n", dump_json(out, 2).c_str());
    else std::printf("%zu models in %s, %zu with a descriptor\n", paths.size(), dir.c_str(), described);
    return {};
}

Status inspect_cmd(const std::string& path, bool json) {
    LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel m, compiler::load_compiled_model(path));
    if (json) {
        nlohmann::json j = compiler::compiled_model_json(m);
        // Nodes before and after fusion, per op type.
        std::map<std::string, int> after;
        for (const auto& s : m.steps) ++after[s.op];
        for (const auto& n : m.graph.nodes) ++after[n.op];
        j["nodes_after"] = after;
        j["nodes_before"] = m.nodes_imported;
        std::printf("%s\n", dump_json(j, 2).c_str());
        return {};
    }
    print_summary(m);
    for (const auto& n : m.graph.nodes) {
        std::vector<std::string> outs;
        for (int id : n.outputs)
            outs.push_back(fmt::format("{} {}", m.graph.value(id).name, compiler::shape_str(m.graph.value(id).shape)));
        std::printf("  %-28s %-14s -> %s%s\n", n.name.c_str(), n.op.c_str(), fmt::format("{}", fmt::join(outs, ", ")).c_str(),
                    n.fused.empty() ? "" : fmt::format(" fused: {}", fmt::join(n.fused, ", ")).c_str());
    }
    for (const auto& s : m.steps)
        std::printf("  %-28s %-14s %-14s %-6s %10.1f ns%s%s\n", s.name.c_str(), s.op.c_str(), s.kernel.c_str(),
                    s.placement == compiler::Placement::HOST ? "host" : "device", s.cost_ns, s.alias ? " (alias)" : "",
                    s.fused.empty() ? "" : fmt::format(" fused: {}", fmt::join(s.fused, ", ")).c_str());
    return {};
}

struct TuneArgs {
    CompileArgs compile;
    std::string kb;
    double budget_s = 0;
    int64_t trials = 0;
    uint64_t seed = 1;
    std::string mode = "op";
    unsigned threads = 0;
    bool search_known = false;
    bool json = false;
};

void print_tune_report(const tuner::TuneReport& r) {
    std::printf("%s on %s: %zu distinct launches, %lld from the knowledge base (%lld stale records ignored), "
                "%lld searched\n",
                r.model.c_str(), r.spec.c_str(), r.launches.size(), static_cast<long long>(r.kb_hits),
                static_cast<long long>(r.kb_stale), static_cast<long long>(r.searched));
    std::printf("  %-16s %5s %12s %12s %6s %9s %-10s %7s %9s\n", "kernel", "steps", "default us", "tuned us", "gain",
                "roofline", "source", "trials", "space");
    for (const tuner::TunedLaunch& l : r.launches) {
        const std::string roof = l.kind == device::TilingKind::CUBE ? fmt::format("{:.1f}%", 100 * l.roofline) : "-";
        const std::string space = l.space > 0 ? fmt::format("{:.3g}", l.space) : "-";
        std::printf("  %-16s %5zu %12.2f %12.2f %5.2fx %9s %-10s %7lld %9s\n", l.kernel.c_str(), l.steps.size(),
                    l.default_ns / 1e3, l.tuned_ns / 1e3, l.tuned_ns > 0 ? l.default_ns / l.tuned_ns : 0.0, roof.c_str(),
                    l.source.c_str(), static_cast<long long>(l.trials), space.c_str());
    }
    std::printf("  model           %.3f ms -> %.3f ms simulated (%.2fx), %lld candidates costed in %.2f s "
                "(%.0f evaluations/s)\n",
                r.default_ns / 1e6, r.tuned_ns / 1e6, r.speedup(), static_cast<long long>(r.trials), r.seconds,
                r.evaluations_per_s);
}

void print_subgraph_report(const tuner::SubgraphTuneReport& r) {
    const bool op = r.op_tuning;
    std::printf(
        "%s on %s: %lld chains of steps that can run band by band, %zu regions chosen (%lld candidates "
        "priced in %.2f s)\n",
        r.model.c_str(), r.spec.c_str(), static_cast<long long>(r.search.chains), r.search.regions.size(),
        static_cast<long long>(r.search.candidates), r.search.seconds);
    if (!r.search.regions.empty()) {
        std::printf("  %-34s %5s %5s %6s %9s %9s %10s %10s", "region", "steps", "rows", "bands", "L2 MiB", "whole MiB",
                    "default ms", "split ms");
        if (op) std::printf(" %10s %10s %s", "op ms", "all ms", "kept");
        std::printf("\n");
    }
    for (const tuner::RegionReport& g : r.search.regions) {
        const std::string name = fmt::format("{} .. {}", g.choice.first, g.choice.last);
        std::printf("  %-34s %5d %5lld %6lld %9.2f %9.2f %10.3f %10.3f", name.c_str(), g.last - g.first + 1,
                    static_cast<long long>(g.choice.rows), static_cast<long long>(g.bands),
                    static_cast<double>(g.l2_bytes) / (1 << 20), static_cast<double>(g.overflow_bytes) / (1 << 20),
                    g.whole_ns / 1e6, g.split_ns / 1e6);
        if (op) std::printf(" %10.3f %10.3f %s", g.op_whole_ns / 1e6, g.op_split_ns / 1e6, g.kept ? "yes" : "no");
        std::printf("\n");
    }
    if (op)
        std::printf(
            "  model           default %.3f ms, op-tuned %.3f ms (%.2fx), op-tuned and split %.3f ms (%.2fx, "
            "%.2fx over op) simulated kernels and dispatches, in %.2f s\n",
            r.default_ns / 1e6, r.op_ns / 1e6, r.default_ns / r.op_ns, r.final_ns / 1e6, r.default_ns / r.final_ns,
            r.op_ns / r.final_ns, r.seconds);
    else
        std::printf(
            "  model           default %.3f ms, split %.3f ms (%.2fx) simulated kernels and dispatches, in %.2f s\n",
            r.default_ns / 1e6, r.final_ns / 1e6, r.default_ns / r.final_ns, r.seconds);
}

Status tune_cmd(const TuneArgs& a) {
    LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(a.compile.device));
    LOOM_ASSIGN_OR_RETURN(compiler::CompileOptions o, compile_options(a.compile, spec));
    if (o.precision == compiler::Precision::INT8 && o.calibration.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "--precision int8 needs --calibrate DIR (sample input sets)");
    if (a.mode != "op" && !o.splits.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "--split with --mode {}: the search chooses the splits",
                          a.mode);
    LOOM_ASSIGN_OR_RETURN(compiler::Graph g, compiler::import_model(a.compile.model));
    if (a.compile.restore) {
        LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dims, restore_dims(o, a.compile.model));
        LOOM_TRY(restore_graph(g, dims, a.compile.model));
    }
    // The untuned model: what every launch is tuned from (a --kb on the command line would
    // already give it tuned tilings, which the tuner then takes from the knowledge base anyway).
    compiler::CompileOptions untuned = o;
    untuned.tiling_source = nullptr;
    LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel m, compiler::compile_graph(g, untuned, spec));
    if (m.mode != compiler::ExecMode::SINK)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: a host-mode model is lowered per input shape at run time; give every input a static "
                          "--shape to tune it",
                          a.compile.model);
    std::optional<tuner::KnowledgeBase> kb;
    if (!a.kb.empty()) {
        LOOM_ASSIGN_OR_RETURN(tuner::KnowledgeBase opened, tuner::KnowledgeBase::open(a.kb));
        kb.emplace(std::move(opened));
    }
    ThreadPool pool(a.threads);
    tuner::TuneOptions t;
    t.seed = a.seed;
    t.trials = a.trials;
    t.budget_s = a.budget_s;
    t.pool = &pool;
    t.kb = kb ? &*kb : nullptr;
    t.search_known = a.search_known;
    const bool tty = ::isatty(STDERR_FILENO) != 0 && !a.json;
    if (tty)
        t.progress = [](size_t done, size_t total) {
            const int width = 30, filled = static_cast<int>(width * done / std::max<size_t>(total, 1));
            std::fprintf(stderr, "\rtuning [%s%s] %zu/%zu launches", std::string(static_cast<size_t>(filled), '#').c_str(),
                         std::string(static_cast<size_t>(width - filled), '.').c_str(), done, total);
            if (done == total) std::fprintf(stderr, "\n");
        };
    if (a.mode != "op") {
        // Subgraph tuning: regions of steps run band by band (tuner/subgraph.hpp), with op tuning
        // on top for --mode all.
        auto compile = [&](const compiler::CompileOptions& co) { return compiler::compile_graph(g, co, spec); };
        LOOM_ASSIGN_OR_RETURN(tuner::SubgraphTuneReport sr,
                              tuner::tune_subgraphs(compile, untuned, spec, a.mode == "all", t));
        nlohmann::json out = sr.to_json();
        if (!a.compile.output.empty()) {
            LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel tm, compile(sr.final_options));
            LOOM_TRY(compiler::save_compiled_model(a.compile.output, tm));
            out["output"] = {{"path", a.compile.output}, {"kernels_ms", tuner::model_kernels_ns(tm, spec) / 1e6}};
            if (!a.json)
                std::printf("wrote %s: %zu split regions, kernels and dispatches %.3f ms on %s\n",
                            a.compile.output.c_str(), tm.splits.size(), tuner::model_kernels_ns(tm, spec) / 1e6,
                            spec.name.c_str());
        }
        if (a.json) std::printf("%s\n", dump_json(out, 2).c_str());
        else print_subgraph_report(sr);
        return {};
    }
    LOOM_ASSIGN_OR_RETURN(tuner::TuneReport report, tuner::tune_model(m, spec, t));
    nlohmann::json out = report.to_json();
    if (!a.compile.output.empty()) {
        compiler::CompileOptions tuned = o;
        tuned.tiling_source = report.table;
        LOOM_ASSIGN_OR_RETURN(compiler::CompiledModel tm, compiler::compile_graph(std::move(g), tuned, spec));
        double ns = 0;
        for (const compiler::CompiledStep& s : tm.steps) ns += s.cost_ns;
        LOOM_TRY(compiler::save_compiled_model(a.compile.output, tm));
        out["output"] = {{"path", a.compile.output}, {"kernels_ms", ns / 1e6}};
        if (!a.json) std::printf("wrote %s: kernels %.3f ms on %s\n", a.compile.output.c_str(), ns / 1e6, spec.name.c_str());
    }
    if (a.json) std::printf("%s\n", dump_json(out, 2).c_str());
    else print_tune_report(report);
    return {};
}

void add_compile_args(CLI::App* cmd, CompileArgs& a) {
    cmd->add_option("--shape", a.shapes, "input shape, NAME=1x3x240x320 (repeatable)");
    cmd->add_option("--device", a.device, "preset name (edge, dc) or path to a .toml spec")->capture_default_str();
    cmd->add_option("--precision", a.precision, "fp32|fp16")->check(CLI::IsMember({"fp32", "fp16", "int8"}))->capture_default_str();
    cmd->add_flag("--no-fuse", a.no_fuse, "skip the fusion passes (for comparisons)");
    cmd->add_option("--split", a.splits,
                    "run steps FIRST..LAST band by band, ROWS rows of LAST's output per band, their intermediates "
                    "in L2 (FIRST..LAST:ROWS, repeatable; loomc tune --mode subgraph chooses them)");
    cmd->add_flag("--restore", a.restore,
                  "run the model as its own program does (its descriptor: pad the frame, run, crop, add the "
                  "residual): the input is the frame, the output scale x the frame");
    cmd->add_option("--mode", a.mode,
                    "sink|host (default: sink for static input shapes, host when an input keeps a symbolic dim)")
        ->check(CLI::IsMember({"sink", "host"}));
    cmd->add_option("--calibrate", a.calibrate,
                    "int8: folder of sample inputs (input_N.pb, or sub-folders of them); run defaults to its inputs");
    cmd->add_option("--kb", a.kb,
                    "take the tilings a knowledge base holds for this device (loomc tune) instead of the default "
                    "heuristic's");
    cmd->add_flag("--measure-host", a.measure_host,
                  "sink mode: time each 3x3 conv's host algorithms (GEMM, Winograd F(2,3), F(4,3), F(6,3)) on this "
                  "machine at its shape and record the fastest in the compiled model, instead of the rule on its "
                  "channels");
}

void add_cache_args(CLI::App* cmd, CompileArgs& a) {
    auto* dir = cmd->add_option(
        "--cache-dir", a.cache_dir, "compile cache folder for .onnx / .param models (default: LOOM_CACHE_DIR when set, else no cache)");
    auto* on = cmd->add_flag("--cache", a.cache,
                             "use the compile cache in its default folder (LOOM_CACHE_DIR, else "
                             "$XDG_CACHE_HOME/loom/compiled, else ~/.cache/loom/compiled)");
    cmd->add_flag("--no-cache", a.no_cache, "compile without the cache even when LOOM_CACHE_DIR is set")->excludes(dir, on);
    on->excludes(dir);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"loomc: compile, tune and run models on the simulated NPU", "loomc"};
    loom::cli::CommonOptions common;
    loom::cli::add_common_options(app, common);
    app.require_subcommand(1);

    std::string device = "edge";
    bool json = false;
    auto* info = app.add_subcommand("device-info", "print the resolved device spec");
    info->add_option("--device", device, "preset name (edge, dc) or path to a .toml spec")->capture_default_str();
    info->add_flag("--json", json, "print JSON");

    loom::compiler::DemoOptions demo;
    auto* demo_cmd = app.add_subcommand("demo", "run a small model on the simulated NPU, print both clocks");
    demo_cmd->add_option("--device", demo.device, "preset name or .toml path")->capture_default_str();
    demo_cmd->add_option("--frames", demo.frames, "frames to run")->check(CLI::Range(1, 100000))->capture_default_str();
    demo_cmd->add_option("--streams", demo.streams, "streams (frames in flight)")->check(CLI::Range(1, 64))->capture_default_str();
    std::string demo_precision = "fp32";
    demo_cmd->add_option("--precision", demo_precision, "fp32|fp16")->check(CLI::IsMember({"fp32", "fp16"}))->capture_default_str();
    demo_cmd->add_option("--trace", demo.trace_path, "write a Perfetto / Chrome trace JSON here");
    demo_cmd->add_option("--faults", demo.faults, "fault plan, e.g. launch=3,copy=5,alloc=2,stall=aicore:4");
    demo_cmd->add_flag("--json", demo.json, "print the report as JSON");

    CompileArgs compile;
    auto* compile_cmd_ = app.add_subcommand("compile", "compile an ONNX or ncnn model into a .loom file");
    compile_cmd_->add_option("model", compile.model, "model.onnx or model.param (with model.bin beside it)")->required();
    add_compile_args(compile_cmd_, compile);
    compile_cmd_->add_option("-o,--output", compile.output, "the .loom file to write")->required();

    RunArgs run;
    auto* run_cmd_ = app.add_subcommand("run", "run a model on input_N.pb files, write output_N.pb files");
    run_cmd_->add_option("model", run.compile.model, "model.onnx, model.param or model.loom")->required();
    add_compile_args(run_cmd_, run.compile);
    run_cmd_->add_option("--inputs", run.inputs_dir, "folder with input_0.pb, input_1.pb, ...")->required();
    run_cmd_->add_option("--outputs", run.outputs_dir, "folder for output_0.pb, ...")->required();
    run_cmd_->add_option("--trace", run.trace, "write a Perfetto / Chrome trace JSON here");
    run_cmd_->add_flag("--json", run.json, "print the report as JSON");
    add_cache_args(run_cmd_, run.compile);
    run_cmd_->add_option("--tile", run.tile,
                         "run over tiles of N input pixels with a halo (auto: the largest that fits in device memory); "
                         "the output is the untiled run's, bit for bit");
    run_cmd_
        ->add_option("--carry-mib", run.carry_mib,
                     "with --tile, a model with means over the frame (squeeze-and-excitation): host MiB the "
                     "passes over the tiles may keep to hand values on (default: half the available memory; "
                     "0: every pass runs from the window)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));

    BenchArgs bench;
    auto* bench_cmd_ = app.add_subcommand(
        "bench",
        "run generated frames (fixed seeds, floats in [0, 1)) through a frame pipeline; report wall ms per frame "
        "(median gap between completions), simulated ms per frame and frames/s at steady state (after the first "
        "K inferences), the first inference's H2D / compute / D2H stages and steady state / slowest stage, overlap "
        "= (H2D + compute + D2H) / period (1 = none, 3 = three equal stages fully overlapped), copies hidden = "
        "(H2D + compute + D2H - period) / (H2D + D2H) clamped to [0, 1], the device memory peak and the executor's "
        "own host time per frame");
    bench_cmd_->add_option("model", bench.compile.model, "model.onnx, model.param or model.loom")->required();
    add_compile_args(bench_cmd_, bench.compile);
    bench_cmd_->add_option("--frames", bench.frames, "frames to run")->check(CLI::Range(1, 100000))->capture_default_str();
    bench_cmd_->add_option("--in-flight", bench.in_flight, "inferences in flight (K)")->check(CLI::Range(1, 64))->capture_default_str();
    bench_cmd_->add_option("--batch", bench.batch, "frames per inference; > 1 compiles at that batch (symbolic N needed)")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    bench_cmd_->add_option("--threads", bench.threads, "host pool threads (default: LOOM_THREADS or one per core)")
        ->check(CLI::Range(1, 1024));
    bench_cmd_->add_flag("--json", bench.json, "print the report as JSON");
    add_cache_args(bench_cmd_, bench.compile);

    auto* ops_cmd_ = app.add_subcommand("ops", "list the ONNX operators loomc compiles, one per line");

    std::string models_dir;
    bool models_json = false;
    auto* models_cmd_ = app.add_subcommand(
        "models", "list the models in a folder (default: the model cache) with their descriptors (scale, noise, "
                  "padding, crop, alignment, colours)");
    models_cmd_->add_option("dir", models_dir, "folder searched for .param and .onnx files, recursively");
    models_cmd_->add_flag("--json", models_json, "print JSON");

    std::string inspect_path;
    bool inspect_json = false;
    auto* inspect_cmd_ = app.add_subcommand("inspect", "describe a compiled model");
    inspect_cmd_->add_option("model", inspect_path, "model.loom")->required();
    inspect_cmd_->add_flag("--json", inspect_json, "print JSON");

    TuneArgs tune;
    auto* tune_cmd_ = app.add_subcommand(
        "tune", "tune a model's kernel tilings for a device (genetic search for Cube ops, tree search for Vector ops, "
                "a knowledge base of what was found); reports each distinct launch's simulated time before and after");
    tune_cmd_->add_option("model", tune.compile.model, "model.onnx or model.param")->required();
    add_compile_args(tune_cmd_, tune.compile);
    // Tuning needs a sink model (its own --mode is what to tune) and takes its --kb its own way.
    tune_cmd_->remove_option(tune_cmd_->get_option("--kb"));
    tune_cmd_->remove_option(tune_cmd_->get_option("--mode"));
    tune_cmd_->add_option("--kb", tune.kb, "knowledge base file (SQLite; created when missing): known launches are "
                                           "taken from it, and what is found is stored in it");
    tune_cmd_->add_option("--budget-s", tune.budget_s, "wall-time budget for the whole model, seconds (0: none)")
        ->check(CLI::Range(0.0, 1e6));
    tune_cmd_->add_option("--trials", tune.trials, "candidates costed per distinct launch (0: 5% of its space, 500 to 20000)")
        ->check(CLI::Range(int64_t{0}, int64_t{100000000}));
    tune_cmd_->add_option("--seed", tune.seed, "the searches' seed (same seed and trials: same result)")->capture_default_str();
    tune_cmd_
        ->add_option("--mode", tune.mode,
                     "op (each launch on its own), subgraph (runs of steps band by band, their intermediates in "
                     "L2, default tilings) or all (subgraph with op tuning on top)")
        ->check(CLI::IsMember({"op", "subgraph", "all"}))
        ->capture_default_str();
    tune_cmd_->add_option("--threads", tune.threads, "threads searching (default: LOOM_THREADS or one per core)")
        ->check(CLI::Range(1, 1024));
    tune_cmd_->add_flag("--search-known", tune.search_known,
                        "search launches the knowledge base already knows too (a better tiling replaces its record)");
    tune_cmd_->add_option("-o,--output", tune.compile.output, "also write the tuned model as a .loom file");
    tune_cmd_->add_flag("--json", tune.json, "print the report as JSON");

    loom::tools::KbArgs kb;
    auto* kb_cmd_ = loom::tools::add_kb_command(app, kb);

    return loom::cli::run_main(app, common, argc, argv, [&]() -> loom::Status {
        if (*info) return device_info(device, json);
        if (*compile_cmd_) return compile_cmd(compile);
        if (*run_cmd_) return run_cmd(run);
        if (*bench_cmd_) return bench_cmd(bench);
        if (*inspect_cmd_) return inspect_cmd(inspect_path, inspect_json);
        if (*models_cmd_) return models_cmd(models_dir, models_json);
        if (*kb_cmd_) return loom::tools::kb_cmd(kb);
        if (*tune_cmd_) return tune_cmd(tune);
        if (*ops_cmd_) {
            std::vector<std::string> names;
            for (const auto* op : compiler::all_ops()) names.emplace_back(op->name);
            std::sort(names.begin(), names.end());
            for (const auto& n : names) std::printf("%s\n", n.c_str());
            return {};
        }
        if (*demo_cmd) {
            LOOM_ASSIGN_OR_RETURN(demo.precision, compiler::parse_precision(demo_precision));
            return loom::compiler::run_demo(demo);
        }
        return {};
    });
}
