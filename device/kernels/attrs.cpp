// KernelAttrs: named launch attributes with typed getters whose errors name the attribute.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "device/kernel.hpp"

namespace loom::device {

namespace {

std::string_view kind_name(const AttrValue& v) {
    switch (v.index()) {
    case 0: return "int";
    case 1: return "float";
    case 2: return "string";
    case 3: return "list of ints";
    case 4: return "list of floats";
    }
    return "?";
}

Status wrong_kind(std::string_view name, std::string_view want, const AttrValue& v) {
    return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' must be {}, got {} {}", name, want,
                      kind_name(v), attr_to_string(v));
}

Status missing(std::string_view name) {
    return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' is required", name);
}

}  // namespace

KernelAttrs::KernelAttrs(std::initializer_list<std::pair<std::string, AttrValue>> items) {
    for (const auto& [name, value] : items) set(name, value);
}

KernelAttrs& KernelAttrs::set(std::string_view name, AttrValue value) {
    for (auto& [n, v] : items_)
        if (n == name) {
            v = std::move(value);
            return *this;
        }
    items_.emplace_back(std::string(name), std::move(value));
    return *this;
}

const AttrValue* KernelAttrs::find(std::string_view name) const {
    for (const auto& [n, v] : items_)
        if (n == name) return &v;
    return nullptr;
}

Result<int64_t> KernelAttrs::get_int(std::string_view name) const {
    const AttrValue* v = find(name);
    if (!v) return missing(name);
    if (const auto* i = std::get_if<int64_t>(v)) return *i;
    return wrong_kind(name, "an int", *v);
}

Result<int64_t> KernelAttrs::get_int(std::string_view name, int64_t fallback) const {
    return has(name) ? get_int(name) : Result<int64_t>(fallback);
}

Result<double> KernelAttrs::get_float(std::string_view name) const {
    const AttrValue* v = find(name);
    if (!v) return missing(name);
    if (const auto* d = std::get_if<double>(v)) return *d;
    if (const auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
    return wrong_kind(name, "a float", *v);
}

Result<double> KernelAttrs::get_float(std::string_view name, double fallback) const {
    return has(name) ? get_float(name) : Result<double>(fallback);
}

Result<std::string> KernelAttrs::get_string(std::string_view name) const {
    const AttrValue* v = find(name);
    if (!v) return missing(name);
    if (const auto* s = std::get_if<std::string>(v)) return *s;
    return wrong_kind(name, "a string", *v);
}

Result<std::string> KernelAttrs::get_string(std::string_view name, std::string_view fallback) const {
    return has(name) ? get_string(name) : Result<std::string>(std::string(fallback));
}

Result<std::vector<int64_t>> KernelAttrs::get_ints(std::string_view name) const {
    const AttrValue* v = find(name);
    if (!v) return missing(name);
    if (const auto* l = std::get_if<std::vector<int64_t>>(v)) return *l;
    return wrong_kind(name, "a list of ints", *v);
}

Result<std::vector<int64_t>> KernelAttrs::get_ints(std::string_view name, std::vector<int64_t> fallback) const {
    return has(name) ? get_ints(name) : Result<std::vector<int64_t>>(std::move(fallback));
}

Result<std::vector<double>> KernelAttrs::get_floats(std::string_view name) const {
    const AttrValue* v = find(name);
    if (!v) return missing(name);
    if (const auto* l = std::get_if<std::vector<double>>(v)) return *l;
    if (const auto* l = std::get_if<std::vector<int64_t>>(v)) return std::vector<double>(l->begin(), l->end());
    return wrong_kind(name, "a list of floats", *v);
}

Result<std::vector<double>> KernelAttrs::get_floats(std::string_view name, std::vector<double> fallback) const {
    return has(name) ? get_floats(name) : Result<std::vector<double>>(std::move(fallback));
}

Status KernelAttrs::check_known(std::initializer_list<std::string_view> known) const {
    for (const auto& [n, v] : items_) {
        bool ok = false;
        for (std::string_view k : known) ok = ok || n == k;
        if (!ok)
            return make_error(StatusCode::INVALID_ARGUMENT, "unknown attribute '{}' (known: {})", n,
                              fmt::join(known, ", "));
    }
    return {};
}

std::string attr_to_string(const AttrValue& v) {
    switch (v.index()) {
    case 0: return fmt::format("{}", std::get<int64_t>(v));
    case 1: return fmt::format("{}", std::get<double>(v));
    case 2: return fmt::format("'{}'", std::get<std::string>(v));
    case 3: return fmt::format("[{}]", fmt::join(std::get<std::vector<int64_t>>(v), ", "));
    case 4: return fmt::format("[{}]", fmt::join(std::get<std::vector<double>>(v), ", "));
    }
    return "?";
}

}  // namespace loom::device
