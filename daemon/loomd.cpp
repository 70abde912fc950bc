// loomd: the pipeline daemon. `loomd --check` validates the configuration (device spec, fault
// plan) and self-tests the simulated NPU: what systemd's ExecStartPre runs. Without --check it
// brings the device up and serves the control protocol (common/protocol.hpp) on its endpoint
// until SIGTERM or SIGINT: ping, status and device-info for now; jobs arrive with the daemon
// issue. `loomd run PIPELINE.toml --input IN --output OUT` runs one pipeline in the foreground;
// `loomd segments` and `loomd join` cut a job into keyframe segments and join their outputs.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/json.hpp"
#include "common/log.hpp"
#include "common/thread_pool.hpp"
#include "common/version.hpp"
#include "daemon/control.hpp"
#include "device/runtime.hpp"
#include "pipeline/pipeline.hpp"
#include "preprocess/media_io.hpp"

namespace {

using namespace loom;

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

// Uploads a pattern, runs two kernels (an add, then a relu in place) and reads the result
// back; fails if any element is wrong.
Status self_test(device::Device& dev) {
    const device::KernelDef* binary = device::find_kernel("binary");
    const device::KernelDef* unary = device::find_kernel("unary");
    LOOM_ASSERT(binary && unary);
    constexpr size_t n = 4096;
    device::PinnedBuffer<float> a(n), b(n), c(n);
    for (size_t i = 0; i < n; ++i) {
        a[i] = static_cast<float>(i % 251) - 125.0f;
        b[i] = static_cast<float>((i * 7) % 113);
    }
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer da, dev.malloc(n * 4, "self-test a"));
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer db, dev.malloc(n * 4, "self-test b"));
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer dc, dev.malloc(n * 4, "self-test c"));
    device::Stream s = dev.create_stream();
    LOOM_TRY(s.copy_h2d(da.as<float>(), device::HostView<const float>(a)));
    LOOM_TRY(s.copy_h2d(db.as<float>(), device::HostView<const float>(b)));
    LOOM_ASSIGN_OR_RETURN(auto ta, device::tensor_ref(da.as<float>(), {int64_t(n)}));
    LOOM_ASSIGN_OR_RETURN(auto tb, device::tensor_ref(db.as<float>(), {int64_t(n)}));
    LOOM_ASSIGN_OR_RETURN(auto tc, device::tensor_ref(dc.as<float>(), {int64_t(n)}));
    device::KernelLaunch add, relu;
    add.inputs = {ta, tb};
    add.outputs = {tc};
    add.attrs = {{"op", std::string("add")}};
    relu.inputs = {tc};
    relu.outputs = {tc};
    relu.attrs = {{"op", std::string("relu")}};
    LOOM_TRY(s.launch(*binary, std::move(add), "self-test add"));
    LOOM_TRY(s.launch(*unary, std::move(relu), "self-test relu"));
    LOOM_TRY(s.copy_d2h(device::HostView<float>(c), device::DevicePtr<const float>(dc.as<float>())));
    LOOM_TRY(s.synchronize().with_context("device self-test"));
    for (size_t i = 0; i < n; ++i)
        if (c[i] != std::max(a[i] + b[i], 0.0f))
            return make_error(StatusCode::INTERNAL, "device self-test: element {} is {}, expected {}", i, c[i],
                              std::max(a[i] + b[i], 0.0f));
    return {};
}

nlohmann::json device_status(const device::Device& dev) {
    const device::DeviceStats st = dev.stats();
    nlohmann::json engines = nlohmann::json::object();
    for (size_t e = 0; e < device::kEngineCount; ++e)
        engines[std::string(device::engine_name(static_cast<device::Engine>(e)))] = st.engines[e].tasks;
    return {{"name", dev.spec().name},
            {"description", dev.spec().description},
            {"spec_hash", fmt::format("{:016x}", dev.spec().hash())},
            {"memory_used", st.memory_used},
            {"memory_peak", st.memory_peak},
            {"memory_capacity", st.memory_capacity},
            {"tasks", st.tasks},
            {"engine_tasks", engines},
            {"sim_us", device::sim_to_us(st.sim_now)}};
}

Status serve(device::Device& dev, const std::string& endpoint) {
    LOOM_ASSIGN_OR_RETURN(auto server, daemon::ControlServer::bind(endpoint));
    const auto started = std::chrono::steady_clock::now();
    server->on("ping", [](const protocol::Request&) -> Result<nlohmann::json> { return nlohmann::json{{"pong", true}}; });
    server->on("status", [&](const protocol::Request&) -> Result<nlohmann::json> {
        const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        return nlohmann::json{{"version", kVersion},
                              {"build", build_id()},
                              {"pid", ::getpid()},
                              {"endpoint", server->endpoint()},
                              {"uptime_s", uptime},
                              {"requests_served", server->requests_served()},
                              {"requests_refused", server->requests_refused()},
                              {"device", device_status(dev)}};
    });
    server->on("device-info", [&](const protocol::Request&) -> Result<nlohmann::json> { return dev.spec().to_json(); });
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    log::info("loomd", "serving endpoint={} device={} pid={}", endpoint, dev.spec().name, ::getpid());
    std::printf("loomd: serving on %s (device '%s')\n", endpoint.c_str(), dev.spec().name.c_str());
    std::fflush(stdout);
    LOOM_TRY(server->serve(g_stop));
    log::info("loomd", "stopping: served={} refused={}", server->requests_served(), server->requests_refused());
    return {};
}

}  // namespace

// `loomd run`: one pipeline in the foreground. A progress bar on a terminal (plain lines every
// few seconds otherwise) on stderr, the JSON summary on stdout (or --summary FILE). SIGINT and
// SIGTERM cancel: the run stops within about a frame, and no output file is left behind.
struct RunArgs {
    std::string pipeline;
    pipeline::RunOptions options;
    std::string summary, trace;
    bool check = false;
};

void print_progress(const pipeline::Progress& p, bool tty, double& last_line_s) {
    if (tty) {
        const double frac = p.frames_expected > 0 ? std::min(1.0, static_cast<double>(p.frames_done) /
                                                                      static_cast<double>(p.frames_expected))
                                                  : 0.0;
        constexpr int kWidth = 30;
        const int filled = static_cast<int>(frac * kWidth);
        std::string bar(static_cast<size_t>(filled), '#');
        bar.resize(kWidth, '.');
        std::string eta = p.eta_s >= 0 ? fmt::format(" eta {:.0f}s", p.eta_s) : std::string();
        std::fprintf(stderr, "\r[%s] %lld/%s frames  %.2f fps  %.1fs%s   ", bar.c_str(),
                     static_cast<long long>(p.frames_done),
                     p.frames_expected > 0 ? std::to_string(p.frames_expected).c_str() : "?", p.fps, p.wall_s,
                     eta.c_str());
    } else if (p.wall_s - last_line_s >= 5.0 || p.eta_s == 0) {
        last_line_s = p.wall_s;
        std::fprintf(stderr, "loomd run: %lld/%s frames, %.2f fps, %.1f s\n", static_cast<long long>(p.frames_done),
                     p.frames_expected > 0 ? std::to_string(p.frames_expected).c_str() : "?", p.fps, p.wall_s);
    }
}

Status run_pipeline(const RunArgs& a) {
    if (a.check) {
        LOOM_ASSIGN_OR_RETURN(std::string name, pipeline::check_config(a.pipeline, a.options.sets));
        std::printf("loomd run: %s: pipeline '%s' is valid\n", a.pipeline.c_str(), name.c_str());
        return {};
    }
    // The handlers go in before anything is opened: a signal at any moment from here on
    // cancels (the output's temporary file is removed), never kills the process mid-write.
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) std::signal(sig, on_signal);
    pipeline::RunOptions o = a.options;
    o.trace = !a.trace.empty();
    o.stop_flag = &g_stop;
    if (o.threads == 0) o.threads = ThreadPool::threads_from_environment();
    LOOM_TRY(device::apply_fault_environment(o.faults));
    LOOM_ASSIGN_OR_RETURN(auto p, pipeline::Pipeline::create(a.pipeline, o));
    const bool tty = ::isatty(STDERR_FILENO) != 0;
    double last_line_s = 0;
    Status st = p->run([&](const pipeline::Progress& pr) { print_progress(pr, tty, last_line_s); });
    if (tty) std::fprintf(stderr, "\n");
    // Paths and model names come from outside: invalid UTF-8 in them is replaced, never thrown.
    const std::string summary = dump_json(p->summary(), 2);
    if (a.summary.empty()) {
        std::printf("%s\n", summary.c_str());
    } else {
        std::ofstream f(a.summary);
        f << summary << "\n";
        if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot write the summary", a.summary);
    }
    if (!a.trace.empty()) LOOM_TRY(p->write_trace(a.trace));
    return st;
}

// `loomd segments IN --count N`: cuts a video into N segments on closed keyframes, printing
// for each the fields that run it (decode.start_frame / decode.frame_count).
Status print_segments(const std::string& input, int count, bool json) {
    int64_t total = 0;
    LOOM_ASSIGN_OR_RETURN(auto keys, preprocess::list_keyframes(input, {}, &total));
    const auto plan = preprocess::plan_segments(keys, total, count);
    if (json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& r : plan)
            j.push_back({{"start_frame", r.start_frame}, {"frame_count", r.frame_count}});
        std::printf("%s\n", dump_json(nlohmann::json{{"input", input}, {"frames", total}, {"segments", j}}, 2).c_str());
        return {};
    }
    std::printf("%s: %lld frames, %zu keyframes, %zu segments\n", input.c_str(), static_cast<long long>(total),
                keys.size(), plan.size());
    for (size_t i = 0; i < plan.size(); ++i)
        std::printf("  %zu: --set decode.start_frame=%lld --set decode.frame_count=%lld\n", i,
                    static_cast<long long>(plan[i].start_frame), static_cast<long long>(plan[i].frame_count));
    return {};
}

int main(int argc, char** argv) {
    CLI::App app{"loomd: the Loom pipeline daemon", "loomd"};
    cli::CommonOptions common;
    cli::add_common_options(app, common);
    RunArgs run;
    CLI::App* run_cmd = app.add_subcommand("run", "run one pipeline in the foreground (progress, JSON summary)");
    run_cmd->add_option("pipeline", run.pipeline, "pipeline file (TOML), e.g. configs/pipelines/restore-x2.toml")
        ->required();
    run_cmd->add_option("--input,-i", run.options.input, "input media file (the decode stage's)");
    run_cmd->add_option("--output,-o", run.options.output, "output media file (the encode stage's)");
    run_cmd->add_option("--set", run.options.sets, "override a field: STAGE.FIELD=VALUE or pipeline.FIELD=VALUE")
        ->take_all();
    run_cmd->add_option("--device", run.options.device, "device preset or spec (overrides the file's)");
    run_cmd->add_option("--threads", run.options.threads, "host threads of the device (default: LOOM_THREADS, else one "
                                                          "per core)")
        ->check(CLI::Range(1, 1024));
    run_cmd->add_option("--models", run.options.models_dir, "folder of models (default: LOOM_MODEL_DIR, else the cache)");
    run_cmd->add_option("--cache-dir", run.options.cache_dir, "compile cache folder");
    run_cmd->add_flag("--no-cache", run.options.no_cache, "compile without the compile cache");
    run_cmd->add_option("--summary", run.summary, "write the JSON summary here instead of stdout");
    run_cmd->add_option("--trace", run.trace, "write the simulated device timeline (Perfetto JSON)");
    run_cmd->add_flag("--check", run.check, "validate the pipeline file and exit");
    std::string device_name = "edge", faults, endpoint = protocol::default_endpoint();
    bool check = false;
    app.add_option("--device", device_name, "device preset (edge, dc) or .toml spec")->capture_default_str();
    app.add_option("--faults", faults, "fault plan, e.g. launch=3,copy=5,alloc=2,stall=aicore:4");
    app.add_option("--control", endpoint, "control endpoint (ipc://PATH or tcp://HOST:PORT; default: LOOM_CONTROL, "
                                          "else ipc://$XDG_RUNTIME_DIR/loom-control)")
        ->capture_default_str();
    app.add_flag("--check", check, "validate the configuration, self-test the device, and exit");
    std::string seg_input;
    int seg_count = 2;
    bool seg_json = false;
    CLI::App* seg_cmd = app.add_subcommand("segments", "cut a video into segments on keyframes (for loomd run)");
    seg_cmd->add_option("input", seg_input, "media file")->required();
    seg_cmd->add_option("--count,-n", seg_count, "segments (at most; fewer when keyframes are scarce)")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    seg_cmd->add_flag("--json", seg_json, "print the plan as JSON");
    std::string join_output;
    std::vector<std::string> join_inputs;
    CLI::App* join_cmd = app.add_subcommand("join", "join segment outputs without re-encoding");
    join_cmd->add_option("output", join_output, "the joined file")->required();
    join_cmd->add_option("segments", join_inputs, "segment files, in order")->required();
    return cli::run_main(app, common, argc, argv, [&]() -> Status {
        if (*run_cmd) return run_pipeline(run);
        if (*seg_cmd) return print_segments(seg_input, seg_count, seg_json);
        if (*join_cmd) return preprocess::join_segments(join_inputs, join_output);
        LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(device_name));
        device::DeviceOptions options;
        if (!faults.empty()) LOOM_TRY(device::parse_fault_plan(faults, "--faults", options.faults));
        LOOM_TRY(device::apply_fault_environment(options.faults));  // LOOM_FAULTS over --faults
        LOOM_ASSIGN_OR_RETURN(auto dev, device::Device::create(spec, options));
        LOOM_TRY(self_test(*dev));
        device::DeviceStats st = dev->stats();
        log::info("loomd", "device={} spec_hash={:016x} self_test=ok sim_us={:.3f} wall_us={:.1f}", spec.name,
                  spec.hash(), device::sim_to_us(st.sim_now), st.wall_ms * 1e3);
        if (!check) return serve(*dev, endpoint);
        std::printf("loomd: configuration OK: device '%s' (%s), self-test passed in %.3f us simulated, %.1f us wall\n",
                    spec.name.c_str(), spec.description.c_str(), device::sim_to_us(st.sim_now), st.wall_ms * 1e3);
        return {};
    });
}
