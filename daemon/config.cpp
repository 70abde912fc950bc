#include "daemon/config.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <toml++/toml.h>

#include "common/file.hpp"
#include "common/protocol.hpp"
#include "pipeline/stage.hpp"

namespace loom::daemon {

namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::string(v) : std::string();
}

std::string home_dir() {
    std::string h = env("HOME");
    return h.empty() ? std::string("/") : h;
}

// "ipc://PATH" -> "ipc://PATH-events"; "tcp://HOST:PORT" -> "tcp://HOST:PORT+1".
std::string events_endpoint_for(const std::string& control) {
    if (control.rfind("tcp://", 0) == 0) {
        const size_t colon = control.rfind(':');
        if (colon != std::string::npos && colon > 5) {
            char* end = nullptr;
            const long port = std::strtol(control.c_str() + colon + 1, &end, 10);
            if (end && *end == '\0' && port > 0 && port < 65535)
                return control.substr(0, colon + 1) + std::to_string(port + 1);
        }
    }
    return control + "-events";
}

std::string absolute_in(const std::string& base, const std::string& p) {
    if (p.empty()) return p;
    std::filesystem::path path(p);
    if (p.rfind("~/", 0) == 0) path = std::filesystem::path(home_dir()) / p.substr(2);
    if (path.is_relative()) path = std::filesystem::path(base) / path;
    return path.lexically_normal().string();
}

}  // namespace

std::string default_pipelines_dir() {
    if (std::string e = env("LOOM_PIPELINES_DIR"); !e.empty()) return e;
    std::error_code ec;
    if (std::filesystem::is_directory(LOOM_PIPELINES_INSTALL_DIR, ec)) return LOOM_PIPELINES_INSTALL_DIR;
    return LOOM_PIPELINES_SOURCE_DIR;
}

DaemonConfig default_config() {
    DaemonConfig c;
    c.control = protocol::default_endpoint();
    c.events = events_endpoint_for(c.control);
    if (std::string s = env("STATE_DIRECTORY"); !s.empty())
        c.state_dir = s.substr(0, s.find(':'));  // systemd's StateDirectory= (the first of a list)
    else if (std::string x = env("XDG_STATE_HOME"); !x.empty())
        c.state_dir = x + "/loom";
    else
        c.state_dir = home_dir() + "/.local/state/loom";
    c.pipelines_dir = default_pipelines_dir();
    c.models_dir = default_models_dir();
    c.allow = {home_dir()};
    return c;
}

Result<DaemonConfig> load_config(const std::string& path) {
    DaemonConfig c = default_config();
    if (path.empty()) return c;
    c.source = path;
    toml::table root;
    try {
        root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
        const auto& b = e.source().begin;
        if (b.line == 0) return make_error(StatusCode::IO_ERROR, "{}: {}", path, e.description());
        return make_error(StatusCode::PARSE_ERROR, "{}:{}:{}: {}", path, b.line, b.column, e.description());
    }
    const std::string base = std::filesystem::absolute(path).parent_path().string();
    for (const auto& [key, node] : root) {
        static const char* kSections[] = {"device", "control", "paths", "limits", "jobs", "metrics"};
        bool known = false;
        for (const char* s : kSections) known = known || key.str() == s;
        if (!known)
            return make_error(StatusCode::PARSE_ERROR, "{}: unknown section '{}' (known: device, control, paths, "
                                                       "limits, jobs, metrics)",
                              pipeline::toml_where(path, key.source()), key.str());
        if (!node.is_table())
            return make_error(StatusCode::PARSE_ERROR, "{}: '{}' must be a table ([{}])",
                              pipeline::toml_where(path, node.source()), key.str(), key.str());
    }
    static const toml::table kEmpty;
    auto section = [&](const char* name) -> const toml::table& {
        const toml::node* n = root.get(name);
        return n && n->is_table() ? *n->as_table() : kEmpty;
    };
    {
        pipeline::Fields f(section("device"), path, "[device]");
        LOOM_ASSIGN_OR_RETURN(c.device, f.string("preset", c.device));
        LOOM_ASSIGN_OR_RETURN(const int64_t threads, f.integer("threads", 0, 0, 1024));
        c.threads = static_cast<unsigned>(threads);
        LOOM_TRY(f.finish());
        if (c.device.find('/') != std::string::npos || c.device.ends_with(".toml")) c.device = absolute_in(base, c.device);
    }
    {
        pipeline::Fields f(section("control"), path, "[control]");
        LOOM_ASSIGN_OR_RETURN(c.control, f.string("endpoint", c.control));
        LOOM_ASSIGN_OR_RETURN(c.events, f.string("events", events_endpoint_for(c.control)));
        LOOM_ASSIGN_OR_RETURN(c.message_bytes_max, f.integer("message_bytes_max", c.message_bytes_max, 4096,
                                                             static_cast<int64_t>(protocol::kMaxMessageBytes)));
        LOOM_TRY(f.finish());
        if (c.control == c.events)
            return make_error(StatusCode::PARSE_ERROR, "{}: [control]: 'events' is the control endpoint '{}'",
                              f.where("events"), c.control);
    }
    {
        const toml::table& t = section("paths");
        pipeline::Fields f(t, path, "[paths]");
        LOOM_ASSIGN_OR_RETURN(std::string state, f.string("state", ""));
        LOOM_ASSIGN_OR_RETURN(std::string pipelines, f.string("pipelines", ""));
        LOOM_ASSIGN_OR_RETURN(std::string models, f.string("models", ""));
        LOOM_ASSIGN_OR_RETURN(std::string cache, f.string("cache", ""));
        if (!state.empty()) c.state_dir = absolute_in(base, state);
        if (!pipelines.empty()) c.pipelines_dir = absolute_in(base, pipelines);
        if (!models.empty()) c.models_dir = absolute_in(base, models);
        if (!cache.empty()) c.cache_dir = absolute_in(base, cache);
        f.claim("allow");
        if (const toml::node* n = t.get("allow")) {
            const toml::array* a = n->as_array();
            if (!a)
                return make_error(StatusCode::PARSE_ERROR, "{}: [paths]: 'allow' must be a list of folders",
                                  f.where("allow"));
            c.allow.clear();
            for (const toml::node& e : *a) {
                if (!e.is_string() || e.as_string()->get().empty())
                    return make_error(StatusCode::PARSE_ERROR, "{}: [paths]: 'allow' holds a non-folder",
                                      pipeline::toml_where(path, e.source()));
                c.allow.push_back(absolute_in(base, e.as_string()->get()));
            }
        }
        LOOM_TRY(f.finish());
    }
    {
        pipeline::Fields f(section("limits"), path, "[limits]");
        LOOM_ASSIGN_OR_RETURN(c.jobs_running, f.integer("jobs_running", c.jobs_running, 1, 64));
        LOOM_ASSIGN_OR_RETURN(c.jobs_queued, f.integer("jobs_queued", c.jobs_queued, 0, 100000));
        LOOM_ASSIGN_OR_RETURN(c.pixels_per_frame_max,
                              f.integer("pixels_per_frame_max", c.pixels_per_frame_max, 1, int64_t{1} << 30));
        LOOM_TRY(f.finish());
    }
    {
        pipeline::Fields f(section("jobs"), path, "[jobs]");
        LOOM_ASSIGN_OR_RETURN(c.segment_seconds, f.number("segment_seconds", c.segment_seconds, 0.1, 86400));
        LOOM_ASSIGN_OR_RETURN(c.keep_finished, f.integer("keep_finished", c.keep_finished, 0, 10'000'000));
        LOOM_TRY(f.finish());
    }
    {
        pipeline::Fields f(section("metrics"), path, "[metrics]");
        LOOM_ASSIGN_OR_RETURN(c.metrics, f.string("address", ""));
        LOOM_TRY(f.finish());
        if (!c.metrics.empty()) {
            const size_t colon = c.metrics.rfind(':');
            char* end = nullptr;
            const long port = colon == std::string::npos ? -1 : std::strtol(c.metrics.c_str() + colon + 1, &end, 10);
            if (colon == std::string::npos || colon == 0 || !end || *end != '\0' || port < 0 || port > 65535)
                return make_error(StatusCode::PARSE_ERROR, "{}: [metrics]: address '{}' is not HOST:PORT",
                                  f.where("address"), c.metrics);
        }
    }
    return c;
}

}  // namespace loom::daemon
