// JSON read from or written for other programs (control messages, compiled-model files): the
// nlohmann-json exceptions stop here and become a Status, nesting is bounded before anything
// recursive runs, and text that is not UTF-8 is found and named instead of thrown.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.hpp"

namespace loom {

// Nesting deeper than this is refused unparsed (copies and dumps of a value recurse).
inline constexpr int kJsonDepthMax = 64;

// Parses `text`; PARSE_ERROR names `what` and the byte offset for bad syntax, a number out of
// range (1e400) or nesting deeper than `depth_max` arrays and objects.
Result<nlohmann::json> parse_json(std::string_view text, std::string_view what, int depth_max = kJsonDepthMax);

// The JSON pointer ("/steps/3/name") of the first string, key or value, in `j` that is not
// valid UTF-8, or "" when every string is.
std::string json_invalid_utf8_at(const nlohmann::json& j);

// Serialises `j` compactly (indent < 0) or indented; invalid UTF-8 in strings becomes U+FFFD
// instead of throwing (for replies and reports that quote what a client or file supplied).
std::string dump_json(const nlohmann::json& j, int indent = -1);

// `v` as a signed or unsigned 64-bit integer, for values read from outside. nlohmann's
// get<int64_t>() converts a float with a cast, which is undefined past the integer's range
// (5e100); these take only integers that fit and otherwise throw nlohmann's type_error, as get<>()
// does for a string, so the caller's catch of nlohmann::json::exception makes it a Status.
int64_t json_int(const nlohmann::json& v);
// Whether `v` is such an integer (the test json_int and json_uint make), for readers that report
// a field of the wrong kind as a Status of their own instead of an exception.
bool json_fits_int64(const nlohmann::json& v);
bool json_fits_uint64(const nlohmann::json& v);
uint64_t json_uint(const nlohmann::json& v);
// An array of such integers.
std::vector<int64_t> json_ints(const nlohmann::json& v);

// `v` as the integer type T (ids, counts) when it is an integer in T's range; else nlohmann's
// type_error or out_of_range, as json_int.
template <typename T>
T json_int_as(const nlohmann::json& v) {
    static_assert(std::is_integral_v<T>);
    if constexpr (std::is_signed_v<T>) {
        const int64_t x = json_int(v);
        if (x >= std::numeric_limits<T>::min() && x <= std::numeric_limits<T>::max()) return static_cast<T>(x);
    } else {
        const uint64_t x = json_uint(v);
        if (x <= std::numeric_limits<T>::max()) return static_cast<T>(x);
    }
    throw nlohmann::json::out_of_range::create(406, "integer " + v.dump() + " out of range", &v);
}
// An array of them.
template <typename T>
std::vector<T> json_ints_as(const nlohmann::json& v) {
    if (!v.is_array())
        throw nlohmann::json::type_error::create(302, std::string("type must be an array, but is ") + v.type_name(), &v);
    std::vector<T> out;
    out.reserve(v.size());
    for (const auto& e : v) out.push_back(json_int_as<T>(e));
    return out;
}

}  // namespace loom
