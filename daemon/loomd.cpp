// loomd: the pipeline daemon.
//   loomd serve [--config FILE]      the service: restoration jobs that survive a crash, on one
//                                    shared device (daemon/service.hpp); `--check` validates the
//                                    configuration and self-tests the device (ExecStartPre)
//   loomd run PIPELINE.toml -i IN -o OUT   one pipeline in the foreground
//   loomd segments IN / loomd join OUT SEGMENTS...   cut a job into keyframe segments, join them
// `loomd` alone is `loomd serve`.
#include <unistd.h>

#include <algorithm>
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
#include "daemon/service.hpp"
#include "device/runtime.hpp"
#include "pipeline/pipeline.hpp"
#include "preprocess/media_io.hpp"

namespace {

using namespace loom;

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
extern "C" void on_signal(int) { g_stop.store(true); }

extern "C" void on_reload(int) { g_reload.store(true); }

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

// `loomd segments IN --count N`: cuts a video into N segments on keyframes, printing for each
// the fields that run it (decode.start_frame / decode.frame_count), and how many keyframes close
// their group and how many a segment can start on.
Status print_segments(const std::string& input, int count, bool json) {
    int64_t total = 0;
    LOOM_ASSIGN_OR_RETURN(auto keys, preprocess::list_keyframes(input, {}, &total));
    const auto plan = preprocess::plan_segments(keys, total, count);
    const auto closed = std::count_if(keys.begin(), keys.end(), [](const auto& k) { return k.closed; });
    const auto starts = std::count_if(keys.begin(), keys.end(), [](const auto& k) { return k.segment_start; });
    if (json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& r : plan)
            j.push_back({{"start_frame", r.start_frame}, {"frame_count", r.frame_count}});
        std::printf("%s\n", dump_json(nlohmann::json{{"input", input},
                                                     {"frames", total},
                                                     {"keyframes", keys.size()},
                                                     {"closed", closed},
                                                     {"segment_starts", starts},
                                                     {"segments", j}},
                                      2)
                                .c_str());
        return {};
    }
    std::printf("%s: %lld frames, %zu keyframes (%lld closed, %lld where a segment can start), %zu segments\n",
                input.c_str(), static_cast<long long>(total), keys.size(), static_cast<long long>(closed),
                static_cast<long long>(starts), plan.size());
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
    daemon::ServeOptions serve;
    std::string faults;
    bool check = false;
    auto add_serve_options = [&](CLI::App* a) {
        a->add_option("--config,-c", serve.config, "configuration file (TOML; default: embedded defaults)");
        a->add_option("--device", serve.device, "device preset (edge, dc) or .toml spec (over the file's)");
        a->add_option("--faults", faults, "fault plan, e.g. launch=3,copy=5,alloc=2,stall=aicore:4");
        a->add_option("--control", serve.control, "control endpoint (ipc://PATH or tcp://HOST:PORT; over the file's; "
                                                  "default: LOOM_CONTROL, else ipc://$XDG_RUNTIME_DIR/loom-control)");
        a->add_flag("--check", check, "validate the configuration, self-test the device, and exit");
    };
    add_serve_options(&app);
    CLI::App* serve_cmd = app.add_subcommand("serve", "run the service: restoration jobs on the control endpoint");
    add_serve_options(serve_cmd);
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
        (void)serve_cmd;
        if (!faults.empty()) LOOM_TRY(device::parse_fault_plan(faults, "--faults", serve.faults));
        LOOM_TRY(device::apply_fault_environment(serve.faults));  // LOOM_FAULTS over --faults
        if (check) return daemon::check_service(serve);
        // SIGTERM and SIGINT drain and stop; SIGHUP re-reads the configuration.
        std::signal(SIGTERM, on_signal);
        std::signal(SIGINT, on_signal);
        std::signal(SIGHUP, on_reload);
        // A file-size limit (RLIMIT_FSIZE, systemd's LimitFSIZE=) fails the write with EFBIG, which
        // fails that job naming its file; it must not kill the daemon and every other job.
        std::signal(SIGXFSZ, SIG_IGN);
        return daemon::serve(serve, {&g_stop, &g_reload});
    });
}
