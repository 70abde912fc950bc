// loomctl: the command-line client of loomd's control endpoint.
//
//   loomctl [--control ENDPOINT] [--timeout-ms MS] [--json] COMMAND
//     ping | status [JOB] | device-info | list | cancel JOB | watch JOB
//     submit --pipeline NAME|FILE INPUT OUTPUT [--set K=V]... [--priority N] [--overwrite]
//            [--client-id ID] [--wait]
//
// Relative paths are resolved against loomctl's working directory before they are sent. A
// pipeline given as a file (a path, or a name ending in .toml that exists) is sent as its text,
// so the daemon runs what the user sees; otherwise it is a name from the daemon's folder.
//
// Exit codes: 0 success (with --wait / watch: the job is done); 1 an error (loomd unreachable,
// the request refused); 2 bad usage or an invalid request; 3 the job failed; 4 the job was
// cancelled; 75 the queue is full (try again later).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <zmq.hpp>

#include "clients/control_client.hpp"
#include "common/cli.hpp"
#include "common/file.hpp"
#include "common/json.hpp"
#include "common/protocol.hpp"

namespace {

using namespace loom;
using nlohmann::json;

constexpr int kExitFailed = 3, kExitCancelled = 4, kExitTempFail = 75;

void print_status(const json& s) {
    const auto& d = s.at("device");
    std::printf("loomd %s (%s), pid %lld, up %.1f s, on %s\n", s.at("version").get<std::string>().c_str(),
                s.at("build").get<std::string>().c_str(), static_cast<long long>(json_int(s.at("pid"))),
                s.at("uptime_s").get<double>(), s.at("endpoint").get<std::string>().c_str());
    std::printf("  requests  %llu served, %llu refused\n",
                static_cast<unsigned long long>(json_uint(s.at("requests_served"))),
                static_cast<unsigned long long>(json_uint(s.at("requests_refused"))));
    if (s.contains("jobs")) {
        const auto& j = s.at("jobs");
        std::printf("  jobs      %lld running, %lld queued, %lld done, %lld failed, %lld cancelled; %lld frames\n",
                    static_cast<long long>(json_int(j.at("running"))), static_cast<long long>(json_int(j.at("queued"))),
                    static_cast<long long>(json_int(j.at("done"))), static_cast<long long>(json_int(j.at("failed"))),
                    static_cast<long long>(json_int(j.at("cancelled"))),
                    static_cast<long long>(json_int(j.at("frames"))));
    }
    std::printf("  device    %s (%s), spec hash %s\n", d.at("name").get<std::string>().c_str(),
                d.at("description").get<std::string>().c_str(), d.at("spec_hash").get<std::string>().c_str());
    std::printf("  memory    %.1f MiB used, peak %.1f MiB, of %.0f MiB\n",
                static_cast<double>(json_uint(d.at("memory_used"))) / 1048576.0,
                static_cast<double>(json_uint(d.at("memory_peak"))) / 1048576.0,
                static_cast<double>(json_uint(d.at("memory_capacity"))) / 1048576.0);
    std::printf("  tasks     %llu, simulated clock %.3f us\n", static_cast<unsigned long long>(json_uint(d.at("tasks"))),
                d.at("sim_us").get<double>());
}

std::string frames_text(const json& j) {
    const int64_t total = j.value("frames_total", int64_t{0});
    return fmt::format("{}/{}", j.value("frames_done", int64_t{0}), total > 0 ? std::to_string(total) : "?");
}

void print_job_line(const json& j) {
    std::string line = fmt::format("{:>5}  {:<9}  {:>11} frames  {:>2}/{:<2} seg  {}  {} -> {}", j.value("id", int64_t{0}),
                                   j.value("state", ""), frames_text(j), j.value("segments_done", int64_t{0}),
                                   j.value("segments_total", int64_t{0}), j.value("pipeline", ""), j.value("input", ""),
                                   j.value("output", ""));
    std::printf("%s\n", line.c_str());
    if (!j.value("error", "").empty()) std::printf("       error: %s\n", j.value("error", "").c_str());
}

void print_job(const json& j) {
    std::printf("job %lld: %s\n", static_cast<long long>(j.value("id", int64_t{0})), j.value("state", "").c_str());
    std::printf("  pipeline  %s\n  input     %s\n  output    %s\n", j.value("pipeline", "").c_str(),
                j.value("input", "").c_str(), j.value("output", "").c_str());
    std::printf("  frames    %s, segments %lld/%lld, attempts %lld\n", frames_text(j).c_str(),
                static_cast<long long>(j.value("segments_done", int64_t{0})),
                static_cast<long long>(j.value("segments_total", int64_t{0})),
                static_cast<long long>(j.value("attempts", int64_t{0})));
    if (j.value("state", "") == "running")
        std::printf("  speed     %.2f fps, eta %s\n", j.value("fps", 0.0),
                    j.value("eta_s", -1.0) >= 0 ? fmt::format("{:.0f} s", j.value("eta_s", 0.0)).c_str() : "?");
    if (j.contains("stages"))
        for (const json& s : j["stages"])
            std::printf("  stage     %-12s %8lld frames  queue %lld/%lld  drops %lld  busy %3.0f%%\n",
                        s.value("name", "").c_str(), static_cast<long long>(s.value("frames", int64_t{0})),
                        static_cast<long long>(s.value("queue", int64_t{0})),
                        static_cast<long long>(s.value("queue_capacity", int64_t{0})),
                        static_cast<long long>(s.value("drops", int64_t{0})), 100.0 * s.value("busy", 0.0));
    if (!j.value("error", "").empty()) std::printf("  error     %s\n", j.value("error", "").c_str());
}

int exit_code_of(const json& job) {
    const std::string state = job.value("state", "");
    return state == "done" ? 0 : state == "failed" ? kExitFailed : state == "cancelled" ? kExitCancelled : 0;
}

bool finished(const json& job) {
    const std::string s = job.value("state", "");
    return s == "done" || s == "failed" || s == "cancelled";
}

// Follows a job on the daemon's event socket until it finishes: a bar on a terminal, plain lines
// otherwise, JSON lines with --json. Returns the exit code of its end state.
Result<int> follow(clients::ControlClient& client, int64_t id, bool json_lines) {
    LOOM_ASSIGN_OR_RETURN(json w, client.call("watch", json{{"job", id}}));
    zmq::context_t ctx;
    zmq::socket_t sub(ctx, zmq::socket_type::sub);
    const std::string topic = w.value("topic", "");
    try {
        sub.set(zmq::sockopt::linger, 0);
        sub.set(zmq::sockopt::subscribe, topic);
        sub.connect(w.value("events", ""));
    } catch (const zmq::error_t& e) {
        return make_error(StatusCode::IO_ERROR, "events endpoint '{}': {}", w.value("events", ""), e.what());
    }
    // Subscribed before the snapshot: no change between the two is missed.
    LOOM_ASSIGN_OR_RETURN(json job, client.call("status", json{{"job", id}}));
    const bool tty = ::isatty(STDOUT_FILENO) != 0 && !json_lines;
    auto last_line = std::chrono::steady_clock::now() - std::chrono::hours(1);
    std::string last_state;
    auto show = [&](const json& j, bool state_change) {
        if (json_lines) {
            std::printf("%s\n", dump_json(j).c_str());
        } else if (tty) {
            const int64_t total = j.value("frames_total", int64_t{0}), done = j.value("frames_done", int64_t{0});
            const double frac = total > 0 ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 0;
            std::string bar(static_cast<size_t>(frac * 30), '#');
            bar.resize(30, '.');
            const double eta = j.value("eta_s", -1.0);
            std::printf("\r[%s] %s frames  %.2f fps  %s  job %lld %s   ", bar.c_str(), frames_text(j).c_str(),
                        j.value("fps", 0.0), eta >= 0 ? fmt::format("eta {:.0f}s", eta).c_str() : "eta ?",
                        static_cast<long long>(id), j.value("state", "").c_str());
        } else if (state_change || std::chrono::steady_clock::now() - last_line > std::chrono::seconds(5)) {
            last_line = std::chrono::steady_clock::now();
            std::printf("job %lld %s: %s frames, %.2f fps\n", static_cast<long long>(id), j.value("state", "").c_str(),
                        frames_text(j).c_str(), j.value("fps", 0.0));
        }
        std::fflush(stdout);
    };
    show(job, true);
    last_state = job.value("state", "");
    auto last_poll = std::chrono::steady_clock::now();
    while (!finished(job)) {
        zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
        try {
            zmq::poll(&item, 1, std::chrono::milliseconds(1000));
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR) return make_error(StatusCode::CANCELLED, "interrupted");
            throw;
        }
        if (item.revents & ZMQ_POLLIN) {
            zmq::message_t t, body;
            (void)sub.recv(t);
            if (!sub.get(zmq::sockopt::rcvmore)) continue;
            (void)sub.recv(body);
            json e = json::parse(std::string_view(static_cast<const char*>(body.data()), body.size()), nullptr, false);
            if (!e.is_object() || !e.contains("job")) continue;
            job = e["job"];
        } else if (std::chrono::steady_clock::now() - last_poll > std::chrono::seconds(3)) {
            // Events are best-effort (a restarted daemon, a slow subscriber): a status now and then.
            last_poll = std::chrono::steady_clock::now();
            LOOM_ASSIGN_OR_RETURN(job, client.call("status", json{{"job", id}}));
        } else {
            continue;
        }
        const bool changed = job.value("state", "") != last_state;
        last_state = job.value("state", "");
        show(job, changed);
    }
    if (tty) std::printf("\n");
    if (!json_lines) {
        if (job.value("state", "") == "failed")
            std::fprintf(stderr, "loomctl: job %lld failed: %s\n", static_cast<long long>(id),
                         job.value("error", "").c_str());
        else if (job.value("state", "") == "done")
            std::printf("job %lld done: %s\n", static_cast<long long>(id), job.value("output", "").c_str());
    }
    return exit_code_of(job);
}

std::string absolute(const std::string& p) {
    if (p.empty()) return p;
    std::error_code ec;
    std::filesystem::path a = std::filesystem::absolute(p, ec);
    return (ec ? std::filesystem::path(p) : a).lexically_normal().string();
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"loomctl: talk to loomd", "loomctl"};
    cli::CommonOptions common;
    cli::add_common_options(app, common);
    std::string endpoint = protocol::default_endpoint();
    int timeout_ms = 2000;
    bool json_out = false;
    app.add_option("--control", endpoint, "loomd's control endpoint (default: LOOM_CONTROL, else "
                                          "ipc://$XDG_RUNTIME_DIR/loom-control)")
        ->capture_default_str();
    app.add_option("--timeout-ms", timeout_ms, "give up when loomd does not answer within this")
        ->check(CLI::Range(1, 3600000))
        ->capture_default_str();
    app.add_flag("--json", json_out, "print the daemon's replies as JSON (watch: one line per event)");
    app.require_subcommand(1);
    app.fallthrough();  // the options above also after the command: `loomctl status --json`
    auto* ping = app.add_subcommand("ping", "check that loomd answers");
    int64_t status_job = 0;
    auto* status = app.add_subcommand("status", "loomd's state, or one job's");
    status->add_option("job", status_job, "a job id");
    auto* info = app.add_subcommand("device-info", "the device spec loomd runs");
    auto* list = app.add_subcommand("list", "the jobs loomd holds: unfinished, then the latest finished");
    int64_t job_id = 0;
    auto* cancel = app.add_subcommand("cancel", "cancel a queued or running job (its partial work is removed)");
    cancel->add_option("job", job_id, "the job id")->required();
    auto* watch = app.add_subcommand("watch", "follow a job until it ends (progress, state changes)");
    watch->add_option("job", job_id, "the job id")->required();
    std::string pipeline, input, output, client_id;
    std::vector<std::string> sets;
    int64_t priority = 0;
    bool overwrite = false, wait = false;
    auto* submit = app.add_subcommand("submit", "submit a restoration job");
    submit->add_option("--pipeline,-p", pipeline, "a pipeline name (loomd's folder) or a pipeline file (sent)")
        ->required();
    submit->add_option("input", input, "the input video")->required();
    submit->add_option("output", output, "the output file (its extension names the container)")->required();
    submit->add_option("--set", sets, "override a field: STAGE.FIELD=VALUE")->take_all();
    submit->add_option("--priority", priority, "higher runs first (-1000..1000)")->check(CLI::Range(-1000, 1000));
    submit->add_flag("--overwrite", overwrite, "replace an existing output");
    submit->add_option("--client-id", client_id, "your id for the job: a retried submit returns the same job");
    submit->add_flag("--wait", wait, "follow the job until it ends (a progress bar on a terminal)");
    int exit_code = 0;
    const int rc = cli::run_main(app, common, argc, argv, [&]() -> Status {
        LOOM_ASSIGN_OR_RETURN(auto client, clients::ControlClient::connect(endpoint, timeout_ms));
        auto refused = [&](const Status& st) -> Status {
            if (st.code() != StatusCode::RESOURCE_EXHAUSTED) return st;
            std::fprintf(stderr, "loomctl: %s\n", st.to_string().c_str());
            exit_code = kExitTempFail;
            return {};
        };
        if (*submit) {
            json args = {{"input", absolute(input)}, {"output", absolute(output)}, {"sets", sets},
                         {"priority", priority}, {"overwrite", overwrite}};
            if (!client_id.empty()) args["client_id"] = client_id;
            std::error_code ec;
            const bool is_file = pipeline.find('/') != std::string::npos ||
                                 (pipeline.ends_with(".toml") && std::filesystem::is_regular_file(pipeline, ec));
            if (is_file) {
                LOOM_ASSIGN_OR_RETURN(std::string text, read_file(pipeline, 256 * 1024));
                args["pipeline"] = std::filesystem::path(pipeline).stem().string();
                args["pipeline_text"] = std::move(text);
                args["base_dir"] = std::filesystem::path(absolute(pipeline)).parent_path().string();
            } else {
                args["pipeline"] = pipeline;
            }
            Result<json> job = client->call("submit", args);
            if (!job.ok()) return refused(job.status());
            const int64_t id = job->value("id", int64_t{0});
            if (json_out && !wait)
                std::printf("%s\n", dump_json(*job, 2).c_str());
            else if (!json_out)
                std::printf("job %lld %s\n", static_cast<long long>(id), job->value("state", "").c_str());
            if (!wait) return {};
            LOOM_ASSIGN_OR_RETURN(exit_code, follow(*client, id, json_out));
            return {};
        }
        if (*watch) {
            LOOM_ASSIGN_OR_RETURN(exit_code, follow(*client, job_id, json_out));
            return {};
        }
        const std::string cmd = *ping ? "ping" : *status ? "status" : *list ? "list" : *cancel ? "cancel" : "device-info";
        (void)info;
        json args = json::object();
        if (*status && status_job > 0) args["job"] = status_job;
        if (*cancel) args["job"] = job_id;
        LOOM_ASSIGN_OR_RETURN(json result, client->call(cmd, args));
        if (json_out || cmd == "device-info") {
            std::printf("%s\n", dump_json(result, 2).c_str());
            return {};
        }
        try {
            if (cmd == "ping") {
                std::printf("loomd at %s: pong\n", endpoint.c_str());
            } else if (cmd == "status" && status_job > 0) {
                print_job(result);
                exit_code = finished(result) ? exit_code_of(result) : 0;
            } else if (cmd == "status") {
                print_status(result);
            } else if (cmd == "list") {
                if (result.at("jobs").empty()) std::printf("no jobs\n");
                for (const json& j : result.at("jobs")) print_job_line(j);
            } else if (cmd == "cancel") {
                const std::string state = result.value("state", "");
                std::printf("job %lld %s\n", static_cast<long long>(result.value("id", int64_t{0})),
                            state == "running" ? "cancelling (it stops within about a frame)" : state.c_str());
            }
        } catch (const json::exception& e) {
            return make_error(StatusCode::PARSE_ERROR, "control endpoint '{}': malformed {} reply: {}", endpoint, cmd,
                              e.what());
        }
        return {};
    });
    return rc != 0 ? rc : exit_code;
}
