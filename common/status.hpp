// Two tiers of errors: expected failures travel as Status / Result<T> and name the file, line
// or field at fault; broken invariants abort through LOOM_ASSERT with file:line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace loom {

enum class StatusCode : uint8_t {
    OK = 0,
    INVALID_ARGUMENT,     // a caller passed something malformed (config field, shape, option)
    NOT_FOUND,            // a named file, preset, kernel or tensor does not exist
    PARSE_ERROR,          // a file could not be parsed; the message carries file:line:col
    IO_ERROR,             // the OS refused a read or write
    OUT_OF_DEVICE_MEMORY, // the simulated device arena cannot hold the request
    OUT_OF_RANGE,         // an index or size is outside its legal range
    DEVICE_FAULT,         // a task failed on the device (kernel exception, DMA error, injected)
    DEVICE_TIMEOUT,       // an engine stalled and the watchdog fired
    FAILED_PRECONDITION,  // the object is not in a state that allows the call
    CANCELLED,            // work stopped at a caller's request (a cancelled job or stream)
    UNSUPPORTED,          // a valid request this build does not handle (dtype, op, mode)
    RESOURCE_EXHAUSTED,   // a bounded resource is full (the daemon's job queue): retry later
    INTERNAL,             // a bug surfaced as an error rather than an abort
};

// Returns the UPPER_CASE name of a status code.
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    // Returns a success value.
    static Status ok_status() { return {}; }

    bool ok() const { return code_ == StatusCode::OK; }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    // Returns "CODE: message", or "OK".
    std::string to_string() const;
    // Returns a copy whose message is prefixed with `context: ` (keeps the code).
    Status with_context(std::string_view context) const;

private:
    StatusCode code_ = StatusCode::OK;
    std::string message_;
};

// Builds a failed Status with a fmt-formatted message.
template <typename... Args>
Status make_error(StatusCode code, fmt::format_string<Args...> format, Args&&... args) {
    return Status(code, fmt::format(format, std::forward<Args>(args)...));
}

template <typename T>
class [[nodiscard]] Result {
    static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> makes no sense");

public:
    Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit on purpose, like absl::StatusOr
    Result(Status status) : v_(std::move(status)) {  // NOLINT
        if (std::get<Status>(v_).ok())
            v_ = Status(StatusCode::INTERNAL, "Result constructed from an OK status without a value");
    }

    bool ok() const { return std::holds_alternative<T>(v_); }
    // Returns the error, or OK when a value is held.
    Status status() const { return ok() ? Status() : std::get<Status>(v_); }

    T& value() & { return std::get<T>(v_); }
    const T& value() const& { return std::get<T>(v_); }
    T&& value() && { return std::get<T>(std::move(v_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

private:
    std::variant<T, Status> v_;
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace loom

#define LOOM_CONCAT_INNER(a, b) a##b
#define LOOM_CONCAT(a, b) LOOM_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it failed.
#define LOOM_TRY(expr)                                        \
    do {                                                      \
        ::loom::Status loom_try_status_ = (expr);             \
        if (!loom_try_status_.ok()) return loom_try_status_;  \
    } while (0)

#define LOOM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
    auto tmp = (expr);                             \
    if (!tmp.ok()) return tmp.status();            \
    lhs = std::move(tmp).value()

// Evaluates a Result<T>; on error returns its Status, else assigns the value to `lhs`.
#define LOOM_ASSIGN_OR_RETURN(lhs, expr) \
    LOOM_ASSIGN_OR_RETURN_IMPL(LOOM_CONCAT(loom_result_, __LINE__), lhs, expr)

// Aborts with file:line when a program invariant is broken (never for bad input).
#define LOOM_ASSERT(cond)                                                   \
    do {                                                                    \
        if (!(cond)) [[unlikely]]                                           \
            ::loom::assert_fail(#cond, __FILE__, __LINE__, std::string());  \
    } while (0)

#define LOOM_ASSERT_MSG(cond, ...)                                                    \
    do {                                                                              \
        if (!(cond)) [[unlikely]]                                                     \
            ::loom::assert_fail(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
    } while (0)
