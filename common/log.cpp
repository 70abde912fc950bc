#include "common/log.hpp"

#include <atomic>

#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/json.hpp"

namespace loom::log {

namespace {
std::atomic<Format> g_format{Format::TEXT};
std::atomic<Sink> g_sink{nullptr};
std::atomic<spdlog::level::level_enum> g_sink_level{spdlog::level::info};
}  // namespace

void redirect(Sink sink, spdlog::level::level_enum level) {
    g_sink_level.store(level, std::memory_order_relaxed);
    g_sink.store(sink, std::memory_order_release);
}

bool enabled(spdlog::level::level_enum level) {
    if (g_sink.load(std::memory_order_acquire)) return level >= g_sink_level.load(std::memory_order_relaxed);
    return spdlog::should_log(level);
}

Status init(std::string_view level, Format format) {
    auto lvl = spdlog::level::from_str(std::string(level));
    if (lvl == spdlog::level::off && level != "off")
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "--log-level: unknown level '{}' (trace, debug, info, warn, error, off)", level);
    // Logs go to stderr so that --json output on stdout stays machine-readable.
    auto logger = spdlog::stderr_color_mt("loom");
    logger->set_level(lvl);
    logger->set_pattern(format == Format::JSON ? "%v" : "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    spdlog::set_default_logger(logger);
    g_format = format;
    return {};
}

void write(spdlog::level::level_enum level, std::string_view component, std::string_view message) {
    if (const Sink sink = g_sink.load(std::memory_order_acquire)) {
        sink(level, component, message);
        return;
    }
    if (g_format.load(std::memory_order_relaxed) == Format::JSON) {
        nlohmann::json j{{"level", spdlog::level::to_string_view(level).data()},
                         {"component", component},
                         {"msg", message}};
        spdlog::log(level, "{}", dump_json(j));  // a message may quote bytes that are not UTF-8
    } else {
        spdlog::log(level, "{}: {}", component, message);
    }
}

}  // namespace loom::log
