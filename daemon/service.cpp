#include "daemon/service.hpp"

#include <malloc.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "common/json.hpp"
#include "common/log.hpp"
#include "common/version.hpp"
#include "daemon/config.hpp"
#include "daemon/control.hpp"
#include "daemon/jobs.hpp"
#include "daemon/journal.hpp"
#include "restore/context.hpp"

namespace loom::daemon {

namespace {

using nlohmann::json;

double steady_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

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

json device_status(const device::Device& dev) {
    const device::DeviceStats st = dev.stats();
    json engines = json::object();
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

// The request's args, read strictly: every field typed, unknown ones refused by name.
class Args {
public:
    Args(const protocol::Request& r) : args_(r.args), cmd_(r.cmd) {}

    Result<std::string> string(const char* key, bool required, size_t max_bytes = 4096) {
        seen_.push_back(key);
        auto it = args_.find(key);
        if (it == args_.end()) {
            if (required) return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' is missing", cmd_, key);
            return std::string();
        }
        if (!it->is_string())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' must be a string", cmd_, key);
        const std::string& s = it->get_ref<const std::string&>();
        if (s.size() > max_bytes)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' is {} bytes (at most {})", cmd_, key,
                              s.size(), max_bytes);
        return s;
    }
    Result<int64_t> integer(const char* key, bool required, int64_t fallback, int64_t min, int64_t max) {
        seen_.push_back(key);
        auto it = args_.find(key);
        if (it == args_.end()) {
            if (required) return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' is missing", cmd_, key);
            return fallback;
        }
        if (!it->is_number_integer())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' must be an integer", cmd_, key);
        const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX
                                                                                                : it->get<int64_t>();
        if (v < min || v > max)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' = {} is out of range [{}, {}]", cmd_, key, v,
                              min, max);
        return v;
    }
    Result<bool> boolean(const char* key) {
        seen_.push_back(key);
        auto it = args_.find(key);
        if (it == args_.end()) return false;
        if (!it->is_boolean())
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' must be true or false", cmd_, key);
        return it->get<bool>();
    }
    Result<std::vector<std::string>> strings(const char* key, size_t max_count) {
        seen_.push_back(key);
        std::vector<std::string> out;
        auto it = args_.find(key);
        if (it == args_.end()) return out;
        if (!it->is_array() || it->size() > max_count)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' must be a list of at most {} strings", cmd_,
                              key, max_count);
        for (const auto& v : *it) {
            if (!v.is_string() || v.get_ref<const std::string&>().size() > 4096)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: 'args.{}' holds a non-string or a string over "
                                                                "4096 bytes",
                                  cmd_, key);
            out.push_back(v.get<std::string>());
        }
        return out;
    }
    Status finish() const {
        for (auto it = args_.begin(); it != args_.end(); ++it)
            if (std::find(seen_.begin(), seen_.end(), it.key()) == seen_.end())
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: unknown field 'args.{}' (known: {})", cmd_,
                                  it.key(), fmt::join(seen_, ", "));
        return {};
    }

private:
    const json& args_;
    std::string cmd_;
    std::vector<std::string> seen_;
};

std::string topic_of(int64_t id) { return fmt::format("job.{}.", id); }

// systemd's notify protocol; without NOTIFY_SOCKET every call does nothing.
void notify(const std::string& text) { (void)sd_notify(0, text.c_str()); }

// The Prometheus text exposition (format 0.0.4) of the daemon's state.
std::string metrics_text(const JobManager& jobs, const restore::DeviceContext& ctx, const ControlServer& control,
                         bool ready, const EventPublisher& events) {
    std::string out;
    auto family = [&](const char* name, const char* type, const char* help) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    };
    const JobCounts c = jobs.counts();
    family("loom_jobs", "gauge", "Jobs in the daemon by state (done, failed, cancelled: since start).");
    for (auto [state, n] : {std::pair{"queued", c.queued}, {"running", c.running}, {"done", c.done},
                            {"failed", c.failed}, {"cancelled", c.cancelled}})
        out += fmt::format("loom_jobs{{state=\"{}\"}} {}\n", state, n);
    family("loom_jobs_submitted_total", "counter", "Jobs accepted since start.");
    out += fmt::format("loom_jobs_submitted_total {}\n", c.submitted);
    family("loom_jobs_refused_total", "counter", "Submits refused since start (bad request, full queue).");
    out += fmt::format("loom_jobs_refused_total {}\n", c.refused);
    family("loom_frames_total", "counter", "Frames restored since start.");
    out += fmt::format("loom_frames_total {}\n", c.frames);
    double fps = 0;
    const json listed = jobs.list();
    for (const auto& j : listed)
        if (j.value("state", "") == "running") fps += j.value("fps", 0.0);
    family("loom_fps", "gauge", "Frames per second of the running jobs, summed.");
    out += fmt::format("loom_fps {}\n", fps);
    // Per stage of each running job (as many series as jobs run at once).
    struct StageFamily {
        const char* name;
        const char* type;
        const char* help;
        const char* field;
    };
    for (const StageFamily& f : {StageFamily{"loom_stage_queue_depth", "gauge", "Frames waiting on the edge into a stage.", "queue"},
                                 StageFamily{"loom_stage_drops_total", "counter", "Frames a stage's input edge dropped.", "drops"},
                                 StageFamily{"loom_stage_busy_ratio", "gauge", "Share of a stage's run not spent waiting.", "busy"}}) {
        family(f.name, f.type, f.help);
        for (const auto& j : listed) {
            if (j.value("state", "") != "running" || !j.contains("stages")) continue;
            for (const auto& s : j["stages"])
                out += fmt::format("{}{{job=\"{}\",stage=\"{}\"}} {}\n", f.name, j.value("id", int64_t{0}),
                                   s.value("name", ""), s[f.field].dump());
        }
    }

    const device::Device& dev = ctx.device();
    const device::DeviceStats st = dev.stats();
    const double sim_s = device::sim_to_us(st.sim_now) * 1e-6;
    family("loom_device_sim_seconds", "counter", "The simulated device's clock.");
    out += fmt::format("loom_device_sim_seconds {}\n", sim_s);
    for (const bool share : {false, true}) {
        if (share)
            family("loom_device_engine_utilisation", "gauge", "Busy share of each engine over the simulated clock.");
        else
            family("loom_device_engine_busy_seconds_total", "counter", "Simulated busy time per engine, summed over lanes.");
        for (size_t e = 0; e < device::kEngineCount; ++e) {
            const auto engine = static_cast<device::Engine>(e);
            const double busy = device::sim_to_us(st.engines[e].busy) * 1e-6;
            const double lanes =
                engine == device::Engine::AICORE ? static_cast<double>(std::max<int64_t>(1, dev.spec().aicore_count)) : 1.0;
            if (share)
                out += fmt::format("loom_device_engine_utilisation{{engine=\"{}\"}} {}\n", device::engine_name(engine),
                                   sim_s > 0 ? busy / (sim_s * lanes) : 0.0);
            else
                out += fmt::format("loom_device_engine_busy_seconds_total{{engine=\"{}\"}} {}\n",
                                   device::engine_name(engine), busy);
        }
    }
    family("loom_device_memory_bytes", "gauge", "Device memory: reserved by engines and buffers, peak, capacity.");
    out += fmt::format("loom_device_memory_bytes{{kind=\"used\"}} {}\n", st.memory_used);
    out += fmt::format("loom_device_memory_bytes{{kind=\"peak\"}} {}\n", st.memory_peak);
    out += fmt::format("loom_device_memory_bytes{{kind=\"capacity\"}} {}\n", st.memory_capacity);
    const restore::ModelCacheStats mc = ctx.model_cache();
    family("loom_models_loaded", "gauge", "Models loaded on the device (shared by the jobs that run them).");
    out += fmt::format("loom_models_loaded {}\n", mc.models_live);

    const CommitLatency lat = jobs.journal().commit_latency();
    family("loom_journal_commit_seconds", "histogram", "Latency of the journal's write transactions.");
    uint64_t cumulative = 0;
    for (size_t b = 0; b < CommitLatency::kBoundsS.size(); ++b) {
        cumulative += lat.buckets[b];
        out += fmt::format("loom_journal_commit_seconds_bucket{{le=\"{}\"}} {}\n", CommitLatency::kBoundsS[b],
                           cumulative);
    }
    out += fmt::format("loom_journal_commit_seconds_bucket{{le=\"+Inf\"}} {}\n", lat.count);
    out += fmt::format("loom_journal_commit_seconds_sum {}\nloom_journal_commit_seconds_count {}\n", lat.sum_s,
                       lat.count);
    family("loom_requests_total", "counter", "Control requests served and refused.");
    out += fmt::format("loom_requests_total{{result=\"served\"}} {}\n", control.requests_served());
    out += fmt::format("loom_requests_total{{result=\"refused\"}} {}\n", control.requests_refused());
    family("loom_events_dropped_total", "counter", "Job events dropped because subscribers were slow.");
    out += fmt::format("loom_events_dropped_total {}\n", events.dropped());
    family("loom_ready", "gauge", "1 when the daemon takes jobs (journal replayed, device up, not draining).");
    out += fmt::format("loom_ready {}\n", ready ? 1 : 0);
    return out;
}

// An exclusive lock on STATE/loomd.lock (flock) for the daemon's life, with the holder's pid in
// the file for the message a second daemon gets. The kernel drops the lock when the process
// dies, so a killed daemon leaves nothing to clean up.
class StateLock {
public:
    static Result<StateLock> take(const std::string& folder) {
        const std::string path = folder + "/loomd.lock";
        StateLock l;
        l.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (l.fd_ < 0)
            return make_error(StatusCode::IO_ERROR, "{}: cannot open the state folder's lock: {} ([paths] state)", path,
                              std::strerror(errno));
        if (::flock(l.fd_, LOCK_EX | LOCK_NB) != 0) {
            char pid[32] = {};
            const ssize_t n = ::pread(l.fd_, pid, sizeof(pid) - 1, 0);
            return make_error(StatusCode::FAILED_PRECONDITION,
                              "state folder {}: in use by another loomd (pid {}); one daemon per state folder",
                              folder, n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string("?"));
        }
        const std::string pid = std::to_string(::getpid());
        if (::ftruncate(l.fd_, 0) != 0 || ::pwrite(l.fd_, pid.data(), pid.size(), 0) < 0)
            log::warn("loomd", "{}: cannot write the pid: {}", path, std::strerror(errno));
        return l;
    }
    StateLock(StateLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    StateLock& operator=(StateLock&&) = delete;
    ~StateLock() {
        if (fd_ >= 0) ::close(fd_);  // releases the lock
    }

private:
    StateLock() = default;
    int fd_ = -1;
};

// The HTTP face: /metrics, /healthz, /readyz on its own thread.
class MetricsServer {
public:
    static Result<std::unique_ptr<MetricsServer>> start(const std::string& address,
                                                        std::function<std::string()> metrics,
                                                        std::function<bool()> ready) {
        std::unique_ptr<MetricsServer> m(new MetricsServer());
        const size_t colon = address.rfind(':');
        const std::string host = address.substr(0, colon);
        const int port = std::atoi(address.c_str() + colon + 1);
        m->http_.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
            res.set_content(metrics(), "text/plain; version=0.0.4; charset=utf-8");
        });
        m->http_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
            res.set_content("ok\n", "text/plain");
        });
        m->http_.Get("/readyz", [ready](const httplib::Request&, httplib::Response& res) {
            const bool r = ready();
            res.status = r ? 200 : 503;
            res.set_content(r ? "ready\n" : "not ready\n", "text/plain");
        });
        m->http_.set_keep_alive_max_count(10);
        m->http_.set_payload_max_length(64 * 1024);
        m->port_ = port == 0 ? m->http_.bind_to_any_port(host) : (m->http_.bind_to_port(host, port) ? port : -1);
        if (m->port_ < 0)
            return make_error(StatusCode::IO_ERROR, "metrics address '{}': cannot bind (in use, or not an address of "
                                                    "this machine)",
                              address);
        m->thread_ = std::thread([p = m.get()] { p->http_.listen_after_bind(); });
        return m;
    }
    ~MetricsServer() {
        http_.stop();
        if (thread_.joinable()) thread_.join();
    }
    int port() const { return port_; }

private:
    MetricsServer() = default;
    httplib::Server http_;
    std::thread thread_;
    int port_ = -1;
};

}  // namespace

void register_commands(ControlServer& server, const ServiceParts& p) {
    server.on("ping", [](const protocol::Request&) -> Result<json> { return json{{"pong", true}}; });
    server.on("status", [&server, p](const protocol::Request& r) -> Result<json> {
        Args a(r);
        LOOM_ASSIGN_OR_RETURN(const int64_t id, a.integer("job", false, 0, 1, INT64_MAX));
        LOOM_TRY(a.finish());
        if (id > 0) return p.jobs->status(id);
        const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.started).count();
        const JobCounts c = p.jobs->counts();
        return json{{"version", kVersion},
                    {"build", build_id()},
                    {"pid", ::getpid()},
                    {"endpoint", server.endpoint()},
                    {"events", p.events->endpoint()},
                    {"metrics", p.metrics_address},
                    {"uptime_s", uptime},
                    {"ready", p.ready->load()},
                    {"requests_served", server.requests_served()},
                    {"requests_refused", server.requests_refused()},
                    {"jobs",
                     {{"queued", c.queued},
                      {"running", c.running},
                      {"done", c.done},
                      {"failed", c.failed},
                      {"cancelled", c.cancelled},
                      {"frames", c.frames}}},
                    {"device", device_status(p.context->device())}};
    });
    server.on("device-info", [p](const protocol::Request&) -> Result<json> {
        return p.context->device().spec().to_json();
    });
    server.on("submit", [p](const protocol::Request& r) -> Result<json> {
        Args a(r);
        SubmitRequest q;
        LOOM_ASSIGN_OR_RETURN(q.pipeline, a.string("pipeline", false, 256));
        LOOM_ASSIGN_OR_RETURN(q.pipeline_text, a.string("pipeline_text", false, 256 * 1024));
        LOOM_ASSIGN_OR_RETURN(q.base_dir, a.string("base_dir", false));
        LOOM_ASSIGN_OR_RETURN(q.input, a.string("input", true));
        LOOM_ASSIGN_OR_RETURN(q.output, a.string("output", true));
        LOOM_ASSIGN_OR_RETURN(q.sets, a.strings("sets", 256));
        LOOM_ASSIGN_OR_RETURN(q.priority, a.integer("priority", false, 0, -1000, 1000));
        LOOM_ASSIGN_OR_RETURN(q.overwrite, a.boolean("overwrite"));
        LOOM_ASSIGN_OR_RETURN(q.client_id, a.string("client_id", false, 128));
        LOOM_TRY(a.finish());
        if (q.pipeline.empty() && q.pipeline_text.empty())
            return make_error(StatusCode::INVALID_ARGUMENT, "submit: 'args.pipeline' (a name) or "
                                                            "'args.pipeline_text' (a file's TOML) is needed");
        return p.jobs->submit(q);
    });
    server.on("list", [p](const protocol::Request& r) -> Result<json> {
        Args a(r);
        LOOM_TRY(a.finish());
        return json{{"jobs", p.jobs->list()}};
    });
    server.on("cancel", [p](const protocol::Request& r) -> Result<json> {
        Args a(r);
        LOOM_ASSIGN_OR_RETURN(const int64_t id, a.integer("job", true, 0, 1, INT64_MAX));
        LOOM_TRY(a.finish());
        return p.jobs->cancel(id);
    });
    server.on("watch", [p](const protocol::Request& r) -> Result<json> {
        Args a(r);
        LOOM_ASSIGN_OR_RETURN(const int64_t id, a.integer("job", false, 0, 1, INT64_MAX));
        LOOM_TRY(a.finish());
        json out = {{"events", p.events->endpoint()}, {"topic", id > 0 ? topic_of(id) : std::string("job.")}};
        if (id > 0) {
            LOOM_ASSIGN_OR_RETURN(out["job"], p.jobs->status(id));
        }
        return out;
    });

}

Status check_service(const ServeOptions& options) {
    Result<DaemonConfig> config = load_config(options.config);
    if (!config.ok()) return Status(StatusCode::INVALID_ARGUMENT, config.status().message());
    DaemonConfig& c = *config;
    if (!options.device.empty()) c.device = options.device;
    LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(c.device));
    LOOM_ASSIGN_OR_RETURN(auto dev, device::Device::create(spec, {.faults = options.faults}));
    LOOM_TRY(self_test(*dev));
    std::printf("loomd: configuration OK (%s): device '%s', control %s, events %s, state %s, pipelines %s, "
                "%lld job(s) at once, %lld queued at most\n",
                c.source.c_str(), spec.name.c_str(), (options.control.empty() ? c.control : options.control).c_str(),
                c.events.c_str(), c.state_dir.c_str(), c.pipelines_dir.c_str(),
                static_cast<long long>(c.jobs_running), static_cast<long long>(c.jobs_queued));
    return {};
}

Status serve(const ServeOptions& options, const ServeSignals& signals) {
    // glibc gives new threads allocator arenas of their own, up to eight per core, and every job
    // brings new threads (its stages', its encoder's): each arena keeps some freed memory, so the
    // daemon's RSS crept up job after job (+16 MiB over 250 jobs on 2 cores, more with more
    // cores). Four arenas, and a trim after each job (JobManager), keep it flat; the hot paths
    // allocate from pools, not malloc. MALLOC_ARENA_MAX in the environment still wins.
    if (std::getenv("MALLOC_ARENA_MAX") == nullptr) ::mallopt(M_ARENA_MAX, 4);
    // A join opens every part of a job at once, and jobs run side by side: the soft limit on
    // open files (1024 under systemd) is raised to the hard one.
    if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        (void)::setrlimit(RLIMIT_NOFILE, &files);
    }
    Result<DaemonConfig> loaded = load_config(options.config);
    if (!loaded.ok()) return Status(StatusCode::INVALID_ARGUMENT, loaded.status().message());
    DaemonConfig config = std::move(*loaded);
    auto apply_overrides = [&](DaemonConfig& c) {
        if (!options.control.empty() && options.control != c.control) {
            c.control = options.control;
            if (options.config.empty()) c.events = c.control + "-events";
        }
        if (!options.device.empty()) c.device = options.device;
    };
    apply_overrides(config);
    std::error_code ec;
    std::filesystem::create_directories(config.state_dir, ec);
    if (ec)
        return make_error(StatusCode::IO_ERROR, "state folder {}: cannot create it: {} ([paths] state)",
                          config.state_dir, ec.message());
    // One daemon per state folder: two would resume the same jobs into the same part files.
    LOOM_ASSIGN_OR_RETURN(StateLock state_lock, StateLock::take(config.state_dir));
    // The journal first: a damaged one stops the daemon before it takes any job.
    LOOM_ASSIGN_OR_RETURN(auto journal, Journal::open(config.journal_path(), config.keep_finished));
    restore::ContextOptions co;
    co.device = config.device;
    co.threads = config.threads;
    co.faults = options.faults;
    LOOM_ASSIGN_OR_RETURN(auto context, restore::DeviceContext::create(co));
    LOOM_TRY(self_test(context->device()));
    LOOM_ASSIGN_OR_RETURN(auto events, EventPublisher::bind(config.events));
    LOOM_ASSIGN_OR_RETURN(auto server,
                          ControlServer::bind(config.control, static_cast<size_t>(config.message_bytes_max)));
    EventPublisher* pub = events.get();
    LOOM_ASSIGN_OR_RETURN(auto jobs, JobManager::start(config, context, std::move(journal),
                                                       [pub](int64_t id, std::string_view event, const json& job) {
                                                           pub->publish(topic_of(id),
                                                                        dump_json(json{{"event", event}, {"job", job}}),
                                                                        event == "progress");
                                                       }));
    std::atomic<bool> ready{false};
    std::unique_ptr<MetricsServer> metrics;
    std::string metrics_address;  // as bound (port 0 in the file: the port the system chose)
    if (!config.metrics.empty()) {
        LOOM_ASSIGN_OR_RETURN(metrics, MetricsServer::start(
                                           config.metrics,
                                           [&] { return metrics_text(*jobs, *context, *server, ready.load(), *events); },
                                           [&] { return ready.load(); }));
        metrics_address = fmt::format("{}:{}", config.metrics.substr(0, config.metrics.rfind(':')), metrics->port());
    }

    ServiceParts parts{jobs.get(), context.get(), events.get(), metrics_address, &ready, std::chrono::steady_clock::now()};
    register_commands(*server, parts);

    ready = true;
    log::info("loomd", "serving endpoint={} events={} metrics={} device={} state={} pid={}", config.control,
              config.events, metrics_address.empty() ? "off" : metrics_address, context->device().spec().name,
              config.state_dir, ::getpid());
    std::printf("loomd: serving on %s (device '%s', state %s)\n", config.control.c_str(),
                context->device().spec().name.c_str(), config.state_dir.c_str());
    std::fflush(stdout);
    notify("READY=1\nSTATUS=ready: 0 running, 0 queued");

    uint64_t watchdog_us = 0;
    const bool watchdog = sd_watchdog_enabled(0, &watchdog_us) > 0 && watchdog_us > 0;
    double last_watchdog = 0, last_status = 0;
    std::string last_status_text;
    auto tick = [&] {
        const double now = steady_s();
        if (signals.reload && signals.reload->exchange(false)) {
            notify(fmt::format("RELOADING=1\nMONOTONIC_USEC={}",
                               std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count()));
            Result<DaemonConfig> fresh = load_config(options.config);
            if (fresh.ok()) apply_overrides(*fresh);
            // What the running daemon has bound or opened cannot change without a restart: a
            // file that changes it is refused whole, like one with a mistake.
            std::string fixed;
            if (fresh.ok()) {
                if (fresh->state_dir != config.state_dir) fixed = "[paths] state";
                else if (fresh->control != config.control) fixed = "[control] endpoint";
                else if (fresh->events != config.events) fixed = "[control] events";
                else if (fresh->metrics != config.metrics) fixed = "[metrics] address";
                else if (fresh->device != config.device || fresh->threads != config.threads) fixed = "[device]";
            }
            if (fresh.ok() && fixed.empty()) {
                jobs->reconfigure(*fresh);
                log::info("loomd", "reloaded {}: new jobs use it", fresh->source);
            } else if (fresh.ok()) {
                log::error("loomd", "reload refused, the old configuration stays: {}: {} changes only with a restart",
                           fresh->source, fixed);
            } else {
                log::error("loomd", "reload refused, the old configuration stays: {}", fresh.status().message());
            }
            notify("READY=1");
        }
        if (now - last_status >= 1.0) {
            last_status = now;
            const JobCounts c = jobs->counts();
            std::string text = fmt::format("STATUS={} running, {} queued, {} done, {} failed", c.running, c.queued,
                                           c.done, c.failed);
            if (text != last_status_text) {
                notify(text);
                last_status_text = std::move(text);
            }
        }
        if (watchdog && now - last_watchdog >= static_cast<double>(watchdog_us) * 1e-6 / 2) {
            // Alive means: no running job's frames have stood still for the interval while its
            // pipeline runs (planning, preparing and joining do not count as stalls).
            if (!jobs->stalled(static_cast<double>(watchdog_us) * 1e-6)) {
                notify("WATCHDOG=1");
                last_watchdog = now;
            }
        }
    };
    Status st = server->serve(*signals.stop, 50, tick);
    ready = false;
    notify("STOPPING=1\nSTATUS=draining: running jobs stop where they resume from");
    log::info("loomd", "stopping: draining jobs; served={} refused={}", server->requests_served(),
              server->requests_refused());
    jobs->drain();
    return st;
}

}  // namespace loom::daemon
