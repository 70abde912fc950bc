#include "common/status.hpp"

#include <cstdio>
#include <cstdlib>

namespace loom {

std::string_view status_code_name(StatusCode code) {
    switch (code) {
    case StatusCode::OK: return "OK";
    case StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case StatusCode::NOT_FOUND: return "NOT_FOUND";
    case StatusCode::PARSE_ERROR: return "PARSE_ERROR";
    case StatusCode::IO_ERROR: return "IO_ERROR";
    case StatusCode::OUT_OF_DEVICE_MEMORY: return "OUT_OF_DEVICE_MEMORY";
    case StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case StatusCode::DEVICE_FAULT: return "DEVICE_FAULT";
    case StatusCode::DEVICE_TIMEOUT: return "DEVICE_TIMEOUT";
    case StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case StatusCode::CANCELLED: return "CANCELLED";
    case StatusCode::UNSUPPORTED: return "UNSUPPORTED";
    case StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case StatusCode::INTERNAL: return "INTERNAL";
    }
    return "UNKNOWN";
}

std::string Status::to_string() const {
    if (ok()) return "OK";
    return fmt::format("{}: {}", status_code_name(code_), message_);
}

Status Status::with_context(std::string_view context) const {
    if (ok()) return *this;
    return Status(code_, fmt::format("{}: {}", context, message_));
}

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
    std::fprintf(stderr, "%s:%d: assertion failed: %s%s%s\n", file, line, expr, msg.empty() ? "" : ": ",
                 msg.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace loom
