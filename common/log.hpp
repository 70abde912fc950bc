// Structured logging on spdlog: every line carries a component and key=value fields, as text
// for people or as JSON lines for journald/log shippers (`--log-format json`).
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/status.hpp"

namespace loom::log {

enum class Format : uint8_t { TEXT, JSON };

// Configures the process logger; level is trace|debug|info|warn|error|off.
Status init(std::string_view level, Format format = Format::TEXT);

// Emits one line: `component: message` in text, {"component":..,"msg":..} in JSON; or hands it
// to the redirect's sink.
void write(spdlog::level::level_enum level, std::string_view component, std::string_view message);

// Where a library loaded into another program (the GStreamer plugin) sends Loom's lines: to the
// host's own log instead of spdlog's default logger, which belongs to the host. `level` is the
// most detailed level the sink takes. A null sink sends the lines back to spdlog.
using Sink = void (*)(spdlog::level::level_enum level, std::string_view component, std::string_view message);
void redirect(Sink sink, spdlog::level::level_enum level);
// True when a line at `level` goes anywhere.
bool enabled(spdlog::level::level_enum level);

template <typename... Args>
void info(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(spdlog::level::info))
        write(spdlog::level::info, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(spdlog::level::warn))
        write(spdlog::level::warn, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void error(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(spdlog::level::err))
        write(spdlog::level::err, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void debug(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
    if (enabled(spdlog::level::debug))
        write(spdlog::level::debug, component, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace loom::log
