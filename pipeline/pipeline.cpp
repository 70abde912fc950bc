#include "pipeline/pipeline.hpp"

#include "device/kernels/cpu/isa.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/file.hpp"
#include "common/json.hpp"
#include "common/log.hpp"
#include "compiler/compile_cache.hpp"
#include "device/runtime.hpp"
#include "pipeline/stage.hpp"

namespace loom::pipeline {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kStagesMax = 64;
constexpr uint64_t kWarmFrames = 10;

struct StageDecl {
    std::string name, input, where;
    const StageType* type = nullptr;
    size_t depth = 4;
    QueuePolicy policy = QueuePolicy::BLOCK;
    std::unique_ptr<Stage> stage;
};

struct Config {
    std::string file, name = "pipeline", device = "edge";
    toml::table root;
    std::vector<StageDecl> stages;  // in topological order once validated
};

Status parse_error(const std::string& where, std::string_view what) {
    return Status(StatusCode::PARSE_ERROR, fmt::format("{}: {}", where, what));
}

// Applies one --set: "section.field=value" where section is "pipeline" or a stage's name; the
// value is read as TOML (a number, a boolean, a quoted string, a list) or else as a bare string.
Status apply_set(toml::table& root, const std::string& set) {
    const size_t eq = set.find('=');
    const size_t dot = set.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq || dot == 0 || dot + 1 == eq)
        return make_error(StatusCode::INVALID_ARGUMENT, "--set {}: expected SECTION.FIELD=VALUE (e.g. restore.precision=fp32)",
                          set);
    const std::string section = set.substr(0, dot), field = set.substr(dot + 1, eq - dot - 1);
    const std::string text = set.substr(eq + 1);
    toml::table* target = nullptr;
    if (section == "pipeline") {
        if (!root.contains("pipeline")) root.insert("pipeline", toml::table{});
        target = root["pipeline"].as_table();
    } else if (toml::array* stages = root["stage"].as_array()) {
        for (toml::node& n : *stages)
            if (toml::table* t = n.as_table(); t && (*t)["name"].value<std::string>() == section) target = t;
    }
    if (!target)
        return make_error(StatusCode::INVALID_ARGUMENT, "--set {}: no stage named '{}' (nor 'pipeline')", set, section);
    toml::table parsed;
    try {
        parsed = toml::parse("v = " + text, "--set " + set);
    } catch (const toml::parse_error&) {
        parsed = toml::table{{"v", text}};
    }
    // The value's source is named "--set ...": errors on it say so instead of a line.
    toml::node& v = *parsed.get("v");
    target->insert_or_assign(field, std::move(v));
    return {};
}

Result<Config> read_config(const PipelineSource& source, const std::vector<std::string>& sets) {
    Config c;
    const std::string& path = source.name;
    c.file = path;
    if (source.text.empty()) {
        std::error_code ec;
        if (!fs::is_regular_file(path, ec))
            return make_error(StatusCode::NOT_FOUND, "{}: pipeline file not found", path);
    }
    try {
        c.root = source.text.empty() ? toml::parse_file(path) : toml::parse(source.text, path);
    } catch (const toml::parse_error& e) {
        return parse_error(toml_where(path, e.source()), e.description());
    }
    for (const std::string& s : sets) LOOM_TRY(apply_set(c.root, s));

    for (const auto& [k, v] : c.root)
        if (k.str() != "pipeline" && k.str() != "stage")
            return parse_error(toml_where(path, k.source()),
                               fmt::format("unknown section '{}' (known: [pipeline], [[stage]])", k.str()));
    size_t depth_default = 4;
    QueuePolicy policy_default = QueuePolicy::BLOCK;
    if (const toml::node* p = c.root.get("pipeline")) {
        if (!p->is_table()) return parse_error(toml_where(path, p->source()), "'pipeline' must be a table");
        Fields f(*p->as_table(), path, "[pipeline]");
        LOOM_ASSIGN_OR_RETURN(c.name, f.string("name", "pipeline"));
        LOOM_ASSIGN_OR_RETURN(c.device, f.string("device", "edge"));
        LOOM_ASSIGN_OR_RETURN(int64_t d, f.integer("queue_depth", 4, 1, static_cast<int64_t>(kQueueDepthMax)));
        depth_default = static_cast<size_t>(d);
        LOOM_TRY(f.choice("queue_policy", policy_default, queue_policy_from_name, "block, drop_oldest, drop_newest")
                     .status());
        LOOM_TRY(f.finish());
    }
    const toml::node* sn = c.root.get("stage");
    if (!sn) return parse_error(path, "no stages: declare them as [[stage]] tables");
    const toml::array* arr = sn->as_array();
    if (!arr || !arr->is_array_of_tables())
        return parse_error(toml_where(path, sn->source()), "'stage' must be an array of tables ([[stage]])");
    if (arr->size() > kStagesMax)
        return parse_error(toml_where(path, sn->source()), fmt::format("{} stages (at most {})", arr->size(), kStagesMax));

    std::map<std::string, size_t> by_name;
    for (const toml::node& n : *arr) {
        const toml::table& t = *n.as_table();
        StageDecl d;
        Fields f(t, path, "stage");
        d.where = toml_where(path, t.source());
        LOOM_ASSIGN_OR_RETURN(d.name, f.string("name", ""));
        if (d.name.empty() || d.name.size() > 64 ||
            !std::all_of(d.name.begin(), d.name.end(), [](char ch) {
                return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
            }))
            return parse_error(f.where("name"), "stage: 'name' is required: 1 to 64 of [a-z0-9_-]");
        if (by_name.count(d.name))
            return parse_error(f.where("name"), fmt::format("stage name '{}' is used twice", d.name));
        const std::string what = fmt::format("stage '{}'", d.name);
        Fields sf(t, path, what);
        LOOM_ASSIGN_OR_RETURN(std::string type, sf.string("type", ""));
        d.type = find_stage_type(type);
        if (!d.type) {
            std::vector<std::string_view> names;
            for (const StageType& st : stage_types()) names.push_back(st.name);
            return parse_error(sf.where("type"), fmt::format("{}: unknown stage type '{}' (known: {})", what, type,
                                                             fmt::join(names, ", ")));
        }
        sf.claim("name");
        // A source takes no stage's frames: `input` is its own field then (decode's file), and
        // refused as unknown by a source type without one.
        if (!d.type->source) {
            LOOM_ASSIGN_OR_RETURN(d.input, sf.string("input", ""));
        }
        if (!d.type->source && d.input.empty())
            return parse_error(sf.where("input"), fmt::format("{}: 'input' is required (the stage whose frames it "
                                                              "takes)", what));
        d.depth = depth_default;
        d.policy = policy_default;
        sf.claim("queue");
        if (const toml::node* q = t.get("queue")) {
            if (d.type->source)
                return parse_error(toml_where(path, q->source()), fmt::format("{}: a source has no input queue", what));
            if (!q->is_table())
                return parse_error(toml_where(path, q->source()),
                                   fmt::format("{}: 'queue' must be a table {{ depth = N, policy = \"...\" }}", what));
            Fields qf(*q->as_table(), path, what + " queue");
            LOOM_ASSIGN_OR_RETURN(int64_t depth,
                                  qf.integer("depth", static_cast<int64_t>(depth_default), 1,
                                             static_cast<int64_t>(kQueueDepthMax)));
            d.depth = static_cast<size_t>(depth);
            LOOM_TRY(qf.choice("policy", d.policy, queue_policy_from_name, "block, drop_oldest, drop_newest").status());
            LOOM_TRY(qf.finish());
        }
        LOOM_ASSIGN_OR_RETURN(d.stage, d.type->create(sf));
        LOOM_TRY(sf.finish());
        by_name[d.name] = c.stages.size();
        c.stages.push_back(std::move(d));
    }

    // The graph: every input names a stage that emits, one consumer per output unless a tee,
    // one source, every emitting stage consumed, no cycle.
    std::vector<int> consumers(c.stages.size(), 0);
    size_t sources = 0;
    for (const StageDecl& d : c.stages) {
        if (d.type->source) {
            ++sources;
            continue;
        }
        auto it = by_name.find(d.input);
        if (it == by_name.end())
            return parse_error(d.where, fmt::format("stage '{}': input '{}' names no stage", d.name, d.input));
        const StageDecl& up = c.stages[it->second];
        if (up.type->sink)
            return parse_error(d.where, fmt::format("stage '{}': input '{}' is a {} stage, which emits nothing", d.name,
                                                    d.input, up.type->name));
        if (++consumers[it->second] > 1 && !up.type->fan_out)
            return parse_error(d.where, fmt::format("stage '{}': the output of '{}' already goes to another stage; "
                                                    "put a tee stage between them to share it",
                                                    d.name, d.input));
    }
    if (sources != 1)
        return parse_error(path, fmt::format("a pipeline has exactly one source stage (decode, testsrc, ...); this one "
                                             "has {}",
                                             sources));
    for (size_t i = 0; i < c.stages.size(); ++i)
        if (!c.stages[i].type->sink && consumers[i] == 0)
            return parse_error(c.stages[i].where,
                               fmt::format("stage '{}': its output goes nowhere (end the branch with encode or "
                                           "null_sink)",
                                           c.stages[i].name));
    // Topological order from the source; a stage not reached sits on a cycle.
    std::vector<StageDecl> ordered;
    std::vector<bool> placed(c.stages.size(), false);
    for (size_t i = 0; i < c.stages.size(); ++i)
        if (c.stages[i].type->source) {
            placed[i] = true;
            ordered.push_back(std::move(c.stages[i]));
        }
    for (size_t head = 0; head < ordered.size(); ++head)
        for (size_t i = 0; i < c.stages.size(); ++i)
            if (!placed[i] && c.stages[i].input == ordered[head].name) {
                placed[i] = true;
                ordered.push_back(std::move(c.stages[i]));
            }
    for (size_t i = 0; i < c.stages.size(); ++i)
        if (!placed[i])
            return parse_error(c.stages[i].where,
                               fmt::format("stage '{}' is not reachable from the source (a cycle through '{}'?)",
                                           c.stages[i].name, c.stages[i].input));
    c.stages = std::move(ordered);
    return c;
}

}  // namespace

Result<std::string> check_config(const PipelineSource& source, const std::vector<std::string>& sets) {
    LOOM_ASSIGN_OR_RETURN(Config c, read_config(source, sets));
    return c.name;
}

struct Pipeline::Impl {
    struct Node {
        StageDecl decl;
        std::unique_ptr<FrameQueue> in;  // the edge into this stage (none for the source)
        std::vector<FrameQueue*> outs;
        StageMetrics metrics;
        Caps caps;
        Status status;
        std::thread thread;
        size_t queue_depth_max = 0;
        double queue_depth_sum = 0;
        uint64_t queue_samples = 0;
    };

    // Destroyed last: stages hold device buffers and frames whose callbacks run on it.
    std::shared_ptr<restore::DeviceContext> context;
    std::string file, name;
    Env env;
    RunOptions options;
    std::vector<std::unique_ptr<Node>> nodes;  // topological order, the source first
    std::mutex stop_mutex;  // held for the whole of stop_all()'s sweep
    std::atomic<bool> stopping{false};
    std::atomic<int> running{0};
    mutable std::mutex error_mutex;
    Status first_error;  // guarded by error_mutex
    bool cancelled = false;
    Clock::time_point started{}, ended{};
    double rss_start = 0, rss_end = 0, rss_peak = 0;
    double rss_warm = 0;      // RSS once kWarmFrames frames were through (0: never)
    uint64_t frames_warm = 0;
    bool ran = false;

    ~Impl() {
        stop_all();
        for (auto& n : nodes)
            if (n->thread.joinable()) n->thread.join();
        // The queues first (frames go back to their pools), then the stages, sinks first: a
        // stage's engine completes the frames still on the device (their completions release
        // frames of the stages above it) before its pools go.
        for (auto& n : nodes) n->in.reset();
        for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) (*it)->decl.stage.reset();
    }

    // Sinks first: a sink knows it was stopped before any stage above it can end its stream
    // (a source stopped while it waits returns as at the end of its input).
    // A caller that finds the sweep started waits until it is done: fail() relies on every
    // stage being stopped when this returns.
    void stop_all() {
        std::lock_guard lock(stop_mutex);
        if (stopping.exchange(true)) return;
        for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
            Node& n = **it;
            if (n.decl.stage) n.decl.stage->stop();
            if (n.in) n.in->abort();
        }
    }

    void fail(const Node& n, const Status& st) {
        {
            std::lock_guard lock(error_mutex);
            // A stage that saw the cancellation (its frames abandoned, its read interrupted by the
            // stop flag before the run loop saw the flag) reports it, not a failure.
            const bool stop_asked = options.stop_flag && options.stop_flag->load();
            if (st.code() == StatusCode::CANCELLED && (cancelled || stop_asked)) {
                if (first_error.ok()) cancelled = true;
            } else if (first_error.ok()) {
                first_error = st.with_context(fmt::format("stage '{}' ({})", n.decl.name, n.decl.type->name));
            }
        }
        stop_all();
    }
};

namespace {
// The environment the stages of `source` are prepared in (the context set by the caller).
Env make_env(const PipelineSource& source, const RunOptions& options) {
    Env env;
    env.input = options.input;
    env.output = options.output;
    env.segment = options.segment;
    env.stop = options.stop_flag;
    std::error_code ec;
    env.config_dir = !source.base_dir.empty() ? source.base_dir
                     : source.text.empty()    ? fs::absolute(source.name).parent_path().string()
                                              : fs::current_path(ec).string();
    env.cache_dir = options.no_cache ? "" : options.cache_dir.empty() ? compiler::default_cache_dir() : options.cache_dir;
    env.models_dir = options.models_dir.empty() ? default_models_dir() : options.models_dir;
    return env;
}
}  // namespace

Result<PipelineNeeds> estimate_needs(const PipelineSource& source, const RunOptions& options) {
    LOOM_ASSIGN_OR_RETURN(Config c, read_config(source, options.sets));
    const Env env = make_env(source, options);
    PipelineNeeds out;
    Needs needs;
    std::map<std::string, Caps> caps;  // by stage name
    for (StageDecl& d : c.stages) {
        const Caps* in = d.type->source ? nullptr : &caps.at(d.input);
        Result<Caps> got = d.stage->estimate(in, env, needs);
        if (!got.ok()) return got.status().with_context(fmt::format("{}: stage '{}' ({})", d.where, d.name, d.type->name));
        if (d.type->source) {
            out.source = got->layout;
            out.frames_expected = got->frames_expected;
        }
        caps[d.name] = std::move(*got);
    }
    out.device_bytes_min = needs.device_bytes_min;
    out.detail = std::move(needs.detail);
    out.whole_only = std::move(needs.whole_only);
    out.fidelity = std::move(needs.fidelity);
    out.copy_streams = needs.copy_streams;
    return out;
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

Result<std::unique_ptr<Pipeline>> Pipeline::create(const PipelineSource& source, const RunOptions& options) {
    LOOM_ASSIGN_OR_RETURN(Config c, read_config(source, options.sets));
    const std::string& path = source.name;
    auto impl = std::make_unique<Impl>();
    impl->file = path;
    impl->name = c.name;
    impl->options = options;
    if (options.context) {
        impl->context = options.context;
        if (!options.device.empty() && options.device != options.context->options().device)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: device '{}' asked for, but the pipeline runs on the "
                                                            "shared device '{}'",
                              path, options.device, options.context->options().device);
    } else {
        restore::ContextOptions co;
        co.device = options.device.empty() ? c.device : options.device;
        co.threads = options.threads;
        co.faults = options.faults;
        co.trace = options.trace;
        LOOM_ASSIGN_OR_RETURN(impl->context, restore::DeviceContext::create(co));
    }
    Env& env = impl->env;
    env = make_env(source, options);
    env.context = impl->context;

    std::map<std::string, Impl::Node*> by_name;
    for (StageDecl& d : c.stages) {
        auto n = std::make_unique<Impl::Node>();
        n->decl = std::move(d);
        by_name[n->decl.name] = n.get();
        impl->nodes.push_back(std::move(n));
    }
    // Caps flow from the source down: each stage is prepared for what its input emits.
    for (auto& n : impl->nodes) {
        const Caps* in = nullptr;
        if (!n->decl.type->source) {
            Impl::Node* up = by_name.at(n->decl.input);
            in = &up->caps;
            n->in = std::make_unique<FrameQueue>(n->decl.depth, n->decl.policy);
            up->outs.push_back(n->in.get());
        }
        auto caps = n->decl.stage->prepare(in, env);
        if (!caps.ok())
            return caps.status().with_context(fmt::format("{}: stage '{}' ({})", n->decl.where, n->decl.name,
                                                          n->decl.type->name));
        n->caps = std::move(*caps);
    }
    return std::unique_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

namespace {
// Each stage's live figures, from its atomics (the stage threads write them as they go).
void stage_progress(const Pipeline::Impl& p, Progress& pr) {
    const double wall_ns = std::chrono::duration<double, std::nano>(Clock::now() - p.started).count();
    pr.stages.clear();
    for (const auto& n : p.nodes) {
        StageProgress s;
        s.name = n->decl.name;
        s.frames_out = n->metrics.frames_out.load(std::memory_order_relaxed);
        if (n->in) {
            s.queue_depth = n->in->size();
            s.queue_capacity = n->in->depth_max();
            s.drops = n->in->drops();
        }
        s.wait_share = wall_ns > 0 ? std::clamp(static_cast<double>(n->metrics.wait_ns.load()) / wall_ns, 0.0, 1.0) : 0;
        pr.stages.push_back(std::move(s));
    }
}
}  // namespace

Status Pipeline::run(const std::function<void(const Progress&)>& on_progress, int progress_ms) {
    Impl& p = *impl_;
    if (p.ran) return make_error(StatusCode::FAILED_PRECONDITION, "{}: a pipeline runs once", p.file);
    p.ran = true;
    p.rss_start = resident_memory().rss_mib;
    p.started = Clock::now();
    const bool tracing = p.context->device().tracing();
    for (auto& n : p.nodes) {
        n->metrics.trace = tracing;
        n->metrics.origin = p.started;
        if (tracing) n->metrics.spans.reserve(1024);
    }
    p.running = static_cast<int>(p.nodes.size());
    // Sinks first, so that every queue has its consumer before frames arrive.
    for (auto it = p.nodes.rbegin(); it != p.nodes.rend(); ++it) {
        Impl::Node* n = it->get();
        n->thread = std::thread([&p, n] {
            const auto t0 = Clock::now();
            StageRun r(n->in.get(), n->outs, n->metrics);
            Status st;
            try {
                st = n->decl.stage->run(r);
            } catch (const std::exception& e) {
                st = make_error(StatusCode::INTERNAL, "threw: {}", e.what());
            }
            // A failure stops every stage (sinks first) before the end of this stage's stream
            // reaches them: a sink must never take a failed job's end for the end of its input.
            if (!st.ok()) p.fail(*n, st);
            r.close_outputs();
            n->metrics.wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
            n->status = st;
            p.running.fetch_sub(1);
        });
    }
    const Impl::Node& last = *p.nodes.back();
    const int64_t expected = p.nodes.front()->caps.frames_expected;
    auto next_report = Clock::now();
    while (p.running.load() > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (p.options.stop_flag && p.options.stop_flag->load() && !p.stopping.load()) cancel();
        for (auto& n : p.nodes)
            if (n->in) {
                const size_t d = n->in->size();
                n->queue_depth_max = std::max(n->queue_depth_max, d);
                n->queue_depth_sum += static_cast<double>(d);
                ++n->queue_samples;
            }
        const double rss = resident_memory().rss_mib;
        p.rss_peak = std::max(p.rss_peak, rss);
        // Halfway through (or after kWarmFrames frames when the length is unknown), every pool,
        // arena and cache is warm and the allocator has settled: growth over the second half
        // would grow with the job.
        const uint64_t warm_at = expected > 0 ? std::max<uint64_t>(kWarmFrames, static_cast<uint64_t>(expected) / 2)
                                              : kWarmFrames;
        if (p.rss_warm == 0 && last.metrics.frames_out.load() >= warm_at) {
            p.rss_warm = rss;
            p.frames_warm = last.metrics.frames_out.load();
        }
        if (on_progress && Clock::now() >= next_report) {
            next_report = Clock::now() + std::chrono::milliseconds(progress_ms);
            Progress pr;
            pr.frames_done = static_cast<int64_t>(last.metrics.frames_out.load());
            pr.frames_expected = expected;
            pr.wall_s = std::chrono::duration<double>(Clock::now() - p.started).count();
            pr.fps = pr.wall_s > 0 ? static_cast<double>(pr.frames_done) / pr.wall_s : 0;
            if (expected > 0 && pr.fps > 0)
                pr.eta_s = static_cast<double>(std::max<int64_t>(expected - pr.frames_done, 0)) / pr.fps;
            stage_progress(p, pr);
            on_progress(pr);
        }
    }
    for (auto& n : p.nodes) n->thread.join();
    p.ended = Clock::now();
    const ResidentMemory mem = resident_memory();
    p.rss_end = mem.rss_mib;
    p.rss_peak = std::max(p.rss_peak, mem.peak_mib);
    if (on_progress) {
        Progress pr;
        pr.frames_done = static_cast<int64_t>(last.metrics.frames_out.load());
        pr.frames_expected = expected;
        pr.wall_s = std::chrono::duration<double>(p.ended - p.started).count();
        pr.fps = pr.wall_s > 0 ? static_cast<double>(pr.frames_done) / pr.wall_s : 0;
        pr.eta_s = 0;
        stage_progress(p, pr);
        on_progress(pr);
    }
    std::lock_guard lock(p.error_mutex);
    if (!p.first_error.ok()) return p.first_error;
    if (p.cancelled) return make_error(StatusCode::CANCELLED, "{}: cancelled after {} frames", p.name,
                                       last.metrics.frames_out.load());
    return {};
}

void Pipeline::cancel() {
    {
        std::lock_guard lock(impl_->error_mutex);
        if (impl_->first_error.ok()) impl_->cancelled = true;
    }
    impl_->stop_all();
}

nlohmann::json Pipeline::summary() const {
    const Impl& p = *impl_;
    using nlohmann::json;
    const double wall_s = std::chrono::duration<double>(p.ended - p.started).count();
    const Impl::Node& last = *p.nodes.back();
    const uint64_t frames = last.metrics.frames_out.load();
    json j;
    j["pipeline"] = p.name;
    j["config"] = p.file;
    {
        std::lock_guard lock(p.error_mutex);
        j["status"] = p.first_error.ok() ? (p.cancelled ? "cancelled" : "ok") : p.first_error.to_string();
    }
    j["frames"] = frames;
    j["wall_s"] = wall_s;
    j["fps"] = wall_s > 0 ? static_cast<double>(frames) / wall_s : 0.0;
    json stages = json::array();
    for (const auto& n : p.nodes) {
        const StageMetrics& m = n->metrics;
        const double sw = static_cast<double>(m.wall_ns) / 1e9;
        json s;
        s["name"] = n->decl.name;
        s["type"] = n->decl.type->name;
        s["frames_in"] = m.frames_in.load();
        s["frames_out"] = m.frames_out.load();
        s["fps"] = sw > 0 ? static_cast<double>(m.frames_out.load()) / sw : 0.0;
        s["latency_ms_p50"] = m.latency_quantile(0.5);
        s["latency_ms_p99"] = m.latency_quantile(0.99);
        s["busy"] = m.wall_ns > 0 ? std::clamp(1.0 - static_cast<double>(m.wait_ns.load()) / static_cast<double>(m.wall_ns), 0.0, 1.0)
                                  : 0.0;
        if (n->in) {
            s["queue"] = {{"depth", n->in->depth_max()},
                          {"policy", queue_policy_name(n->in->policy())},
                          {"depth_max_seen", n->queue_depth_max},
                          {"depth_mean", n->queue_samples ? n->queue_depth_sum / static_cast<double>(n->queue_samples) : 0.0},
                          {"drops", n->in->drops()},
                          {"producer_waits", n->in->producer_waits()}};
        }
        if (!n->status.ok()) s["error"] = n->status.to_string();
        n->decl.stage->summarise(s);
        stages.push_back(std::move(s));
    }
    j["stages"] = std::move(stages);
    const device::Device& dev = p.context->device();
    const device::DeviceStats ds = dev.stats();
    const device::DeviceSpec& spec = dev.spec();
    json engines = json::object();
    const double sim_ms = device::sim_to_ms(ds.sim_now);
    for (size_t e = 0; e < device::kEngineCount; ++e) {
        const auto eng = static_cast<device::Engine>(e);
        const double lanes = eng == device::Engine::AICORE ? static_cast<double>(spec.aicore_count) : 1.0;
        const double busy_ms = device::sim_to_ms(ds.engines[e].busy);
        engines[std::string(device::engine_name(eng))] = {
            {"tasks", ds.engines[e].tasks},
            {"busy_ms", busy_ms},
            {"utilisation", sim_ms > 0 ? busy_ms / lanes / sim_ms : 0.0}};
    }
    const restore::ModelCacheStats mc = p.context->model_cache();
    j["device"] = {{"preset", spec.name},
                   {"host_isa", std::string(device::cpu::isa_name(device::cpu::isa()))},  // the host kernels' ISA
                   {"shared", p.options.context != nullptr},  // with other pipelines: figures include theirs
                   {"models", {{"loads", mc.loads}, {"reuses", mc.reuses}, {"weight_bytes_saved", mc.weight_bytes_saved}}},
                   {"sim_ms", sim_ms},
                   {"sim_fps", sim_ms > 0 ? static_cast<double>(frames) * 1e3 / sim_ms : 0.0},
                   {"memory_peak", ds.memory_peak},
                   {"engines", engines}};
    j["memory"] = {{"rss_start_mib", p.rss_start},
                   {"rss_end_mib", p.rss_end},
                   {"rss_peak_mib", p.rss_peak},
                   {"rss_warm_mib", p.rss_warm},
                   {"frames_at_warm", p.frames_warm},
                   {"rss_growth_after_warm_mib", p.rss_warm > 0 ? p.rss_end - p.rss_warm : 0.0}};
    return j;
}

Status Pipeline::write_trace(const std::string& path) const {
    const Impl& p = *impl_;
    // The device's timeline (simulated microseconds), plus a process whose lanes are the host
    // stages: each frame's time in each stage, in wall microseconds since the run started.
    if (!p.context->device().tracing())
        return make_error(StatusCode::FAILED_PRECONDITION, "{}: the pipeline was built without tracing", path);
    nlohmann::json trace = nlohmann::json::parse(p.context->device().trace_json(), nullptr, false);
    if (trace.is_discarded()) return make_error(StatusCode::INTERNAL, "{}: the device trace is not JSON", path);
    nlohmann::json& events = trace.is_array() ? trace : trace["traceEvents"];
    constexpr int kPidStages = 3;
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", kPidStages},
                      {"args", {{"name", "host stages (wall clock)"}}}});
    for (size_t i = 0; i < p.nodes.size(); ++i) {
        const Impl::Node& n = *p.nodes[i];
        const int tid = static_cast<int>(i) + 1;
        events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", kPidStages}, {"tid", tid},
                          {"args", {{"name", fmt::format("{} ({})", n.decl.name, n.decl.type->name)}}}});
        for (const StageMetrics::Span& s : n.metrics.spans)
            events.push_back({{"ph", "X"}, {"name", fmt::format("frame {}", s.frame)}, {"pid", kPidStages}, {"tid", tid},
                              {"ts", s.start_us}, {"dur", std::max(0.0, s.end_us - s.start_us)}});
    }
    std::ofstream f(path);
    f << dump_json(trace);
    if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot write the trace", path);
    return {};
}

}  // namespace loom::pipeline
