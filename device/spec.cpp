#include "device/spec.hpp"

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "device/presets.hpp"

namespace loom::device {

namespace {

using IntField = int64_t DeviceSpec::*;
using RealField = double DeviceSpec::*;
using StrField = std::string DeviceSpec::*;

struct FieldDef {
    const char* table;  // TOML table, "" for the root
    const char* key;
    std::variant<IntField, RealField, StrField> member;
    double min;  // inclusive legal range (numbers only)
    double max;
};

constexpr double kBig = 1e15;

// The one list of spec fields: parsing, validation, hashing and JSON output all walk it.
const FieldDef kFields[] = {
    {"", "name", &DeviceSpec::name, 0, 0},
    {"", "description", &DeviceSpec::description, 0, 0},
    {"aicore", "count", &DeviceSpec::aicore_count, 1, 1024},
    {"aicore", "clock_ghz", &DeviceSpec::aicore_clock_ghz, 0.01, 10},
    {"aicore", "cube_fractal", &DeviceSpec::cube_fractal, 1, 256},
    {"aicore", "cube_int8_rate", &DeviceSpec::cube_int8_rate, 1, 16},
    {"aicore", "vector_bytes_per_cycle", &DeviceSpec::vector_bytes_per_cycle, 1, 65536},
    {"aicore", "scalar_ops_per_cycle", &DeviceSpec::scalar_ops_per_cycle, 1, 64},
    {"aicore", "l1_kib", &DeviceSpec::l1_kib, 1, 1 << 20},
    {"aicore", "l0a_kib", &DeviceSpec::l0a_kib, 1, 1 << 20},
    {"aicore", "l0b_kib", &DeviceSpec::l0b_kib, 1, 1 << 20},
    {"aicore", "l0c_kib", &DeviceSpec::l0c_kib, 1, 1 << 20},
    {"aicore", "ub_kib", &DeviceSpec::ub_kib, 1, 1 << 20},
    {"aicore.mte", "gm_to_l1", &DeviceSpec::mte_gm_to_l1, 1, 65536},
    {"aicore.mte", "gm_to_ub", &DeviceSpec::mte_gm_to_ub, 1, 65536},
    {"aicore.mte", "l1_to_l0", &DeviceSpec::mte_l1_to_l0, 1, 65536},
    {"aicore.mte", "l0c_to_ub", &DeviceSpec::mte_l0c_to_ub, 1, 65536},
    {"aicore.mte", "ub_to_gm", &DeviceSpec::mte_ub_to_gm, 1, 65536},
    {"memory", "capacity_mib", &DeviceSpec::memory_capacity_mib, 1, 1 << 24},
    {"memory", "bandwidth_gbps", &DeviceSpec::memory_bandwidth_gbps, 0.1, 1e5},
    {"memory", "alignment_bytes", &DeviceSpec::memory_alignment_bytes, 1, 1 << 20},
    {"l2", "capacity_mib", &DeviceSpec::l2_capacity_mib, 0, 1 << 16},
    {"l2", "bandwidth_gbps", &DeviceSpec::l2_bandwidth_gbps, 0.1, 1e6},
    {"host_link", "bandwidth_gbps", &DeviceSpec::host_link_bandwidth_gbps, 0.01, 1e4},
    {"host_link", "pageable_bandwidth_gbps", &DeviceSpec::host_link_pageable_bandwidth_gbps, 0.01, 1e4},
    {"host_link", "latency_us", &DeviceSpec::host_link_latency_us, 0, 1e6},
    {"launch", "overhead_us", &DeviceSpec::launch_overhead_us, 0, 1e6},
    {"launch", "sink_task_ns", &DeviceSpec::launch_sink_task_ns, 0, 1e9},
    {"media", "throughput_mpix_s", &DeviceSpec::media_throughput_mpix_s, 0.01, 1e6},
    {"media", "task_overhead_us", &DeviceSpec::media_task_overhead_us, 0, 1e6},
    {"media", "vdec_throughput_mpix_s", &DeviceSpec::media_vdec_throughput_mpix_s, 0.01, 1e6},
    {"media", "vdec_frame_overhead_us", &DeviceSpec::media_vdec_frame_overhead_us, 0, 1e6},
    {"media", "venc_throughput_mpix_s", &DeviceSpec::media_venc_throughput_mpix_s, 0.01, 1e6},
    {"media", "venc_frame_overhead_us", &DeviceSpec::media_venc_frame_overhead_us, 0, 1e6},
    {"host_cpu", "gflops", &DeviceSpec::host_cpu_gflops, 0.01, 1e6},
    {"host_cpu", "bandwidth_gbps", &DeviceSpec::host_cpu_bandwidth_gbps, 0.01, 1e5},
    {"host_cpu", "task_overhead_us", &DeviceSpec::host_cpu_task_overhead_us, 0, 1e6},
    {"watchdog", "timeout_ms", &DeviceSpec::watchdog_ms, 0.001, kBig},
};
constexpr size_t kFieldCount = sizeof(kFields) / sizeof(kFields[0]);
// One entry per DeviceSpec member: adding a member means adding a row above.
static_assert(kFieldCount == 38, "every DeviceSpec field needs a row in kFields");

std::string dotted(const FieldDef& f) {
    return *f.table ? std::string(f.table) + "." + f.key : std::string(f.key);
}

std::string where(std::string_view source, const toml::source_region& r) {
    return fmt::format("{}:{}:{}", source, r.begin.line, r.begin.column);
}

const toml::node* lookup(const toml::table& root, const FieldDef& f) {
    const toml::table* t = &root;
    std::string_view rest = f.table;
    while (!rest.empty()) {
        size_t dot = rest.find('.');
        std::string part(rest.substr(0, dot));
        const toml::node* n = t->get(part);
        if (!n || !n->is_table()) return nullptr;
        t = n->as_table();
        rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
    }
    return t->get(f.key);
}

// Reports keys that no field (or table of fields) claims, so a typo never passes silently.
Status check_unknown_keys(const toml::table& t, const std::string& prefix, std::string_view source) {
    static const std::set<std::string> known = [] {
        std::set<std::string> s{"base"};
        for (const auto& f : kFields) {
            std::string path = f.table;
            while (!path.empty()) {  // every enclosing table is known too
                s.insert(path);
                size_t dot = path.rfind('.');
                path = dot == std::string::npos ? std::string() : path.substr(0, dot);
            }
            s.insert(dotted(f));
        }
        return s;
    }();
    for (const auto& [k, v] : t) {
        std::string path = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
        if (!known.count(path))
            return make_error(StatusCode::PARSE_ERROR, "{}: unknown key '{}'", where(source, k.source()), path);
        if (v.is_table()) LOOM_TRY(check_unknown_keys(*v.as_table(), path, source));
    }
    return {};
}

Status read_field(const toml::table& root, const FieldDef& f, DeviceSpec& spec, bool required,
                  std::string_view source) {
    const toml::node* n = lookup(root, f);
    if (!n) {
        if (!required) return {};
        return make_error(StatusCode::PARSE_ERROR, "{}: missing required key '{}'", source, dotted(f));
    }
    std::string at = where(source, n->source());
    return std::visit(
        [&](auto member) -> Status {
            using M = std::remove_reference_t<decltype(spec.*member)>;
            if constexpr (std::is_same_v<M, std::string>) {
                if (!n->is_string())
                    return make_error(StatusCode::PARSE_ERROR, "{}: '{}' must be a string", at, dotted(f));
                spec.*member = n->as_string()->get();
                return {};
            } else {
                double v;
                if constexpr (std::is_same_v<M, int64_t>) {
                    if (!n->is_integer())
                        return make_error(StatusCode::PARSE_ERROR, "{}: '{}' must be an integer", at, dotted(f));
                    v = static_cast<double>(n->as_integer()->get());
                    spec.*member = n->as_integer()->get();
                } else {
                    if (!n->is_number())
                        return make_error(StatusCode::PARSE_ERROR, "{}: '{}' must be a number", at, dotted(f));
                    v = n->is_integer() ? static_cast<double>(n->as_integer()->get()) : n->as_floating_point()->get();
                    if (!std::isfinite(v))
                        return make_error(StatusCode::PARSE_ERROR, "{}: '{}' must be finite", at, dotted(f));
                    spec.*member = v;
                }
                if (v < f.min || v > f.max)
                    return make_error(StatusCode::PARSE_ERROR, "{}: '{}' = {} is outside [{}, {}]", at, dotted(f), v,
                                      f.min, f.max);
                return {};
            }
        },
        f.member);
}

// Cross-field rules that a range check per field cannot express.
Status check_consistency(const DeviceSpec& s, std::string_view source) {
    if (s.name.empty()) return make_error(StatusCode::PARSE_ERROR, "{}: 'name' must not be empty", source);
    int64_t frac = s.cube_fractal * s.cube_fractal * 2;  // one fp16 fractal
    if (s.l0a_bytes() < 2 * frac || s.l0b_bytes() < 2 * frac)
        return make_error(StatusCode::PARSE_ERROR,
                          "{}: aicore.l0a_kib / l0b_kib must hold two {}x{} fp16 fractals (double buffering)", source,
                          s.cube_fractal, s.cube_fractal);
    if (s.l0c_bytes() < 2 * frac * 2)
        return make_error(StatusCode::PARSE_ERROR, "{}: aicore.l0c_kib must hold two fp32 fractals", source);
    if ((s.memory_alignment_bytes & (s.memory_alignment_bytes - 1)) != 0)
        return make_error(StatusCode::PARSE_ERROR, "{}: memory.alignment_bytes = {} must be a power of two", source,
                          s.memory_alignment_bytes);
    if (s.host_link_pageable_bandwidth_gbps > s.host_link_bandwidth_gbps)
        return make_error(StatusCode::PARSE_ERROR,
                          "{}: host_link.pageable_bandwidth_gbps exceeds bandwidth_gbps (staging cannot be faster)",
                          source);
    return {};
}

Result<DeviceSpec> parse_impl(std::string_view text, std::string_view source, int depth) {
    toml::table root;
    try {
        root = toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        return make_error(StatusCode::PARSE_ERROR, "{}: {}", where(source, e.source()), e.description());
    }
    LOOM_TRY(check_unknown_keys(root, "", source));
    DeviceSpec spec;
    bool has_base = false;
    if (const toml::node* b = root.get("base")) {
        if (!b->is_string())
            return make_error(StatusCode::PARSE_ERROR, "{}: 'base' must be a preset name", where(source, b->source()));
        if (depth > 0)
            return make_error(StatusCode::PARSE_ERROR, "{}: presets cannot have a base", where(source, b->source()));
        std::string base = b->as_string()->get();
        const std::string_view* preset = find_device_preset(base);
        if (!preset)
            return make_error(StatusCode::PARSE_ERROR, "{}: unknown base preset '{}'", where(source, b->source()), base);
        LOOM_ASSIGN_OR_RETURN(spec, parse_impl(*preset, "preset:" + base, depth + 1));
        has_base = true;
    }
    for (const auto& f : kFields) LOOM_TRY(read_field(root, f, spec, !has_base, source));
    LOOM_TRY(check_consistency(spec, source));
    return spec;
}

}  // namespace

double DeviceSpec::peak_fp16_flops() const {
    double macs_per_cycle = static_cast<double>(cube_fractal * cube_fractal * cube_fractal);
    return 2.0 * macs_per_cycle * static_cast<double>(aicore_count) * aicore_clock_ghz * 1e9;
}

uint64_t DeviceSpec::hash() const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](std::string_view s) {
        for (unsigned char c : s) {
            h ^= c;
            h *= 1099511628211ull;
        }
    };
    for (const auto& f : kFields) {
        mix(dotted(f));
        mix("=");
        std::visit(
            [&](auto member) {
                using M = std::remove_reference_t<decltype(this->*member)>;
                if constexpr (std::is_same_v<M, std::string>) mix(this->*member);
                else mix(fmt::format("{}", this->*member));  // shortest round-trip form
            },
            f.member);
        mix(";");
    }
    return h;
}

nlohmann::json DeviceSpec::to_json() const {
    nlohmann::json j;
    for (const auto& f : kFields) {
        nlohmann::json* t = &j;
        std::string_view rest = f.table;
        while (!rest.empty()) {
            size_t dot = rest.find('.');
            t = &(*t)[std::string(rest.substr(0, dot))];
            rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
        }
        std::visit([&](auto member) { (*t)[f.key] = this->*member; }, f.member);
    }
    j["derived"] = {
        {"peak_fp16_tflops", peak_fp16_flops() / 1e12},
        {"peak_int8_tops", peak_fp16_flops() * static_cast<double>(cube_int8_rate) / 1e12},
        {"memory_bytes", memory_bytes()},
        {"spec_hash", fmt::format("{:016x}", hash())},
    };
    return j;
}

Result<DeviceSpec> parse_device_spec(std::string_view toml_text, std::string_view source) {
    return parse_impl(toml_text, source, 0);
}

Result<DeviceSpec> load_device_spec(std::string_view name_or_path) {
    bool is_path = name_or_path.find('/') != std::string_view::npos ||
                   (name_or_path.size() > 5 && name_or_path.substr(name_or_path.size() - 5) == ".toml");
    if (!is_path) {
        const std::string_view* preset = find_device_preset(name_or_path);
        if (!preset) {
            std::string names;
            for (const auto& n : device_preset_names()) names += (names.empty() ? "" : ", ") + n;
            return make_error(StatusCode::NOT_FOUND, "--device: unknown preset '{}' (presets: {}; or a path to a .toml)",
                              name_or_path, names);
        }
        return parse_impl(*preset, fmt::format("preset:{}", name_or_path), 0);
    }
    std::string path(name_or_path);
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(StatusCode::NOT_FOUND, "{}: cannot open device spec", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (ss.str().size() > (1u << 20))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: device spec larger than 1 MiB", path);
    return parse_impl(ss.str(), path, 0);
}

std::vector<std::string> device_preset_names() {
    std::vector<std::string> names;
    for (const auto& p : device_presets()) names.emplace_back(p.name);
    return names;
}

}  // namespace loom::device
