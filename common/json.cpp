#include "common/json.hpp"

#include <fmt/format.h>

#include "common/text.hpp"

namespace loom {

namespace {

// The offset of the first bracket that opens level depth_max + 1, or npos. Strings are skipped
// (a bracket inside one is text); malformed text is left to the parser to report.
size_t too_deep_at(std::string_view text, int depth_max) {
    int depth = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char ch = text[i];
        if (in_string) {
            if (ch == '\\') ++i;
            else if (ch == '"') in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if (ch == '[' || ch == '{') {
            if (++depth > depth_max) return i;
        } else if (ch == ']' || ch == '}') {
            --depth;
        }
    }
    return std::string_view::npos;
}

std::string pointer_token(std::string_view key) {
    std::string out;
    for (const char ch : key) {
        if (ch == '~') out += "~0";
        else if (ch == '/') out += "~1";
        else out += ch;
    }
    return out;
}

bool find_invalid(const nlohmann::json& j, std::string& path) {
    if (j.is_string()) return utf8_invalid_at(j.get_ref<const std::string&>()) != std::string_view::npos;
    if (j.is_array()) {
        for (size_t i = 0; i < j.size(); ++i) {
            if (find_invalid(j[i], path)) {
                path = fmt::format("/{}{}", i, path);  // fmt, not operator+: GCC 12 warns falsely (-Wrestrict)
                return true;
            }
        }
    } else if (j.is_object()) {
        for (const auto& [key, value] : j.items()) {
            const bool bad_key = utf8_invalid_at(key) != std::string_view::npos;
            if (bad_key || find_invalid(value, path)) {
                // A bad key names itself with its bytes replaced, so the message stays printable.
                path = fmt::format("/{}{}", pointer_token(bad_key ? dump_json(key) : key), path);
                return true;
            }
        }
    }
    return false;
}

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, std::string_view what, int depth_max) {
    if (const size_t at = too_deep_at(text, depth_max); at != std::string_view::npos)
        return make_error(StatusCode::PARSE_ERROR, "{}: byte {}: nesting deeper than {} levels", what, at, depth_max);
    try {
        return nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        return make_error(StatusCode::PARSE_ERROR, "{}: not JSON: byte {}: {}", what, e.byte, e.what());
    } catch (const nlohmann::json::exception& e) {  // out_of_range: a number such as 1e400
        return make_error(StatusCode::PARSE_ERROR, "{}: not JSON: {}", what, e.what());
    }
}

std::string json_invalid_utf8_at(const nlohmann::json& j) {
    std::string path;
    if (!find_invalid(j, path)) return "";
    return path.empty() ? "/" : path;
}

std::string dump_json(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool json_fits_int64(const nlohmann::json& v) {
    return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX});
}

bool json_fits_uint64(const nlohmann::json& v) {
    return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

int64_t json_int(const nlohmann::json& v) {
    if (json_fits_int64(v)) return v.get<int64_t>();
    throw nlohmann::json::type_error::create(
        302, std::string("type must be an integer that fits 64 bits, but is ") + v.dump(), &v);
}

uint64_t json_uint(const nlohmann::json& v) {
    if (json_fits_uint64(v)) return v.get<uint64_t>();
    throw nlohmann::json::type_error::create(
        302, std::string("type must be a non-negative integer, but is ") + v.dump(), &v);
}

std::vector<int64_t> json_ints(const nlohmann::json& v) { return json_ints_as<int64_t>(v); }

}  // namespace loom
