#include "device/faults.hpp"

#include <charconv>
#include <cstdlib>

namespace loom::device {

namespace {
bool parse_count(std::string_view s, int64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && out >= 1;
}
}  // namespace

std::string FaultPlan::to_string() const {
    std::string s;
    auto add = [&s](const std::string& part) { s += (s.empty() ? "" : ",") + part; };
    if (fail_launch) add(fmt::format("launch={}", fail_launch));
    if (fail_copy) add(fmt::format("copy={}", fail_copy));
    if (fail_alloc) add(fmt::format("alloc={}", fail_alloc));
    if (stall) add(fmt::format("stall={}:{}", engine_name(stall_engine), stall_task));
    return s;
}

Status parse_fault_plan(std::string_view text, std::string_view source, FaultPlan& plan) {
    size_t pos = 0;
    while (pos < text.size()) {
        size_t comma = text.find(',', pos);
        std::string_view item = text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
        pos = comma == std::string_view::npos ? text.size() : comma + 1;
        if (item.empty()) continue;
        size_t eq = item.find('=');
        if (eq == std::string_view::npos)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: '{}' is not key=value (keys: launch, copy, alloc, stall)",
                              source, item);
        std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
        int64_t n = 0;
        if (key == "launch" || key == "copy" || key == "alloc") {
            if (!parse_count(value, n))
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: {}={} needs a positive count", source, key, value);
            (key == "launch" ? plan.fail_launch : key == "copy" ? plan.fail_copy : plan.fail_alloc) = n;
        } else if (key == "stall") {
            size_t colon = value.find(':');
            Engine e{};
            if (colon == std::string_view::npos || !engine_from_name(value.substr(0, colon), e) ||
                !parse_count(value.substr(colon + 1), n))
            {
                std::string names;
                for (size_t i = 0; i < kEngineCount; ++i)
                    names += fmt::format("{}{}", i ? ", " : "", engine_name(static_cast<Engine>(i)));
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: stall={} must be ENGINE:N (engines: {})", source,
                                  value, names);
            }
            plan.stall = true;
            plan.stall_engine = e;
            plan.stall_task = n;
        } else {
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: unknown fault '{}' (keys: launch, copy, alloc, stall)",
                              source, key);
        }
    }
    return {};
}

Status apply_fault_environment(FaultPlan& plan) {
    if (const char* env = std::getenv("LOOM_FAULTS")) return parse_fault_plan(env, "LOOM_FAULTS", plan);
    return {};
}

}  // namespace loom::device
