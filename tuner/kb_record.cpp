// KbKey and KbRecord: their text forms, checks and JSON form (the storage is kb.cpp).
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <tuple>

#include <fmt/format.h>

#include "common/hash.hpp"
#include "common/json.hpp"
#include "common/text.hpp"
#include "compiler/model_file.hpp"
#include "device/types.hpp"
#include "tuner/kb.hpp"

namespace loom::tuner {

namespace {

constexpr size_t kMethodBytesMax = 32;
constexpr int64_t kCoresMax = 65536;
constexpr int64_t kTimeMax = 253402300799;  // 9999-12-31T23:59:59Z

bool known_dtype(std::string_view name) {
    using device::DType;
    for (DType t : {DType::F32, DType::F16, DType::I8, DType::I32, DType::U8, DType::I64})
        if (device::dtype_name(t) == name) return true;
    return false;
}

// Text shown to people and kept on one line: valid UTF-8 without control characters.
bool one_line_text(std::string_view s) {
    if (utf8_invalid_at(s) != std::string_view::npos) return false;
    for (unsigned char c : s)
        if (c < 0x20 || c == 0x7f) return false;
    return true;
}

Status check_name(std::string_view field, std::string_view s, bool allow_empty) {
    if (s.empty() && !allow_empty) return make_error(StatusCode::INVALID_ARGUMENT, "{}: empty", field);
    if (s.size() > kKbNameBytesMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} bytes, over the limit of {}", field, s.size(),
                          kKbNameBytesMax);
    if (!one_line_text(s))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: '{}' is not one line of UTF-8 text", field, printable(s));
    return {};
}

// Counts the tensors of a signature "f16,f16->f16"; -1 when it is not of that form.
int signature_tensors(std::string_view sig) {
    const size_t arrow = sig.find("->");
    if (arrow == std::string_view::npos || sig.find("->", arrow + 2) != std::string_view::npos) return -1;
    int count = 0;
    for (std::string_view side : {sig.substr(0, arrow), sig.substr(arrow + 2)}) {
        if (side.empty()) {
            if (side.data() != sig.data()) return -1;  // no outputs: not a launch
            continue;                                  // no inputs is allowed
        }
        size_t start = 0;
        while (true) {
            const size_t comma = side.find(',', start);
            const std::string_view t = side.substr(start, comma == std::string_view::npos ? comma : comma - start);
            if (!known_dtype(t)) return -1;
            ++count;
            if (comma == std::string_view::npos) break;
            start = comma + 1;
        }
    }
    return count;
}

Status check_tiling(const device::Tiling& t) {
    auto size = [](const char* name, int64_t v, int64_t lo) -> Status {
        if (v < lo || v > kKbDimMax)
            return make_error(StatusCode::INVALID_ARGUMENT, "tiling: {} = {} is outside {}..{}", name, v, lo,
                              kKbDimMax);
        return {};
    };
    if (std::holds_alternative<std::monostate>(t))
        return make_error(StatusCode::INVALID_ARGUMENT, "tiling: null (a record holds a concrete tiling)");
    if (const auto* c = std::get_if<device::CubeTiling>(&t)) {
        LOOM_TRY(size("m_l0", c->m_l0, 1));
        LOOM_TRY(size("n_l0", c->n_l0, 1));
        LOOM_TRY(size("k_l0", c->k_l0, 1));
        LOOM_TRY(size("m_l1", c->m_l1, 1));
        LOOM_TRY(size("n_l1", c->n_l1, 1));
        LOOM_TRY(size("k_l1", c->k_l1, 1));
        for (auto [name, l1, l0] : {std::tuple{"m_l1", c->m_l1, c->m_l0}, std::tuple{"n_l1", c->n_l1, c->n_l0},
                                    std::tuple{"k_l1", c->k_l1, c->k_l0}})
            if (l1 % l0 != 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "tiling: {} = {} is not a multiple of its L0 size {}",
                                  name, l1, l0);
        if (c->cores < 0 || c->cores > kCoresMax)
            return make_error(StatusCode::INVALID_ARGUMENT, "tiling: cores = {} is outside 0..{}", c->cores, kCoresMax);
        return {};
    }
    const auto& v = std::get<device::VectorSchedule>(t);
    LOOM_TRY(size("ub_tile", v.ub_tile, 1));
    LOOM_TRY(size("vector_tile", v.vector_tile, 0));
    if (v.cores < 0 || v.cores > kCoresMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "tiling: cores = {} is outside 0..{}", v.cores, kCoresMax);
    if (v.fuse_ub_buffers < 0 || v.fuse_ub_buffers > device::kFuseUbBuffersMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "tiling: fuse_ub_buffers = {} is outside 0..{}",
                          v.fuse_ub_buffers, device::kFuseUbBuffersMax);
    if (static_cast<int>(v.vector_axis) >= device::kVectorAxisCount)
        return make_error(StatusCode::INVALID_ARGUMENT, "tiling: vector_axis {} is not inner, axis or outer",
                          static_cast<int>(v.vector_axis));
    return {};
}

// ---- JSON fields: each reader names the field it refuses ----

Status missing(const char* name) { return make_error(StatusCode::PARSE_ERROR, "{}: missing", name); }

Status get_string(const nlohmann::json& j, const char* name, std::string& out) {
    const auto it = j.find(name);
    if (it == j.end()) return missing(name);
    if (!it->is_string()) return make_error(StatusCode::PARSE_ERROR, "{}: not a string", name);
    out = it->get<std::string>();
    return {};
}

Status get_int(const nlohmann::json& j, const char* name, int64_t& out) {
    const auto it = j.find(name);
    if (it == j.end()) return missing(name);
    if (!json_fits_int64(*it)) return make_error(StatusCode::PARSE_ERROR, "{}: not an integer", name);
    out = it->get<int64_t>();
    return {};
}

Status get_uint(const nlohmann::json& j, const char* name, uint64_t& out) {
    const auto it = j.find(name);
    if (it == j.end()) return missing(name);
    if (!json_fits_uint64(*it)) return make_error(StatusCode::PARSE_ERROR, "{}: not a non-negative integer", name);
    out = it->get<uint64_t>();
    return {};
}

Status get_number(const nlohmann::json& j, const char* name, double& out) {
    const auto it = j.find(name);
    if (it == j.end()) return missing(name);
    if (!it->is_number()) return make_error(StatusCode::PARSE_ERROR, "{}: not a number", name);
    out = it->get<double>();
    return {};
}

Status get_time(const nlohmann::json& j, const char* name, int64_t& out) {
    std::string text;
    LOOM_TRY(get_string(j, name, text));
    Result<int64_t> t = kb_time_from_text(text);
    if (!t.ok()) return make_error(StatusCode::PARSE_ERROR, "{}: {}", name, t.status().message());
    out = *t;
    return {};
}

Status get_dims(const nlohmann::json& j, std::vector<std::vector<int64_t>>& out) {
    const auto it = j.find("dims");
    if (it == j.end()) return missing("dims");
    if (!it->is_array()) return make_error(StatusCode::PARSE_ERROR, "dims: not an array of arrays");
    if (it->size() > kKbTensorsMax)
        return make_error(StatusCode::PARSE_ERROR, "dims: {} tensors, over the limit of {}", it->size(), kKbTensorsMax);
    for (size_t t = 0; t < it->size(); ++t) {
        const auto& tensor = (*it)[t];
        if (!tensor.is_array()) return make_error(StatusCode::PARSE_ERROR, "dims: tensor {}: not an array", t);
        if (tensor.size() > static_cast<size_t>(device::kMaxRank))
            return make_error(StatusCode::PARSE_ERROR, "dims: tensor {}: rank {} over {}", t, tensor.size(),
                              device::kMaxRank);
        std::vector<int64_t> dims;
        for (size_t d = 0; d < tensor.size(); ++d) {
            const auto& v = tensor[d];
            if (!json_fits_int64(v))
                return make_error(StatusCode::PARSE_ERROR, "dims: tensor {}: dim {}: not an integer", t, d);
            dims.push_back(v.get<int64_t>());
        }
        out.push_back(std::move(dims));
    }
    return {};
}

constexpr const char* kRecordFields[] = {
    "kernel",  "signature",       "dims",   "attrs",  "spec_hash", "spec_name", "cost_model_version", "tiling",
    "cost_ns", "default_cost_ns", "method", "trials", "seconds",   "seed",      "loom_version",       "created",
    "updated"};

}  // namespace

std::string KbKey::dims_text() const {
    std::string out;
    for (size_t t = 0; t < dims.size(); ++t) {
        if (t) out += ';';
        for (size_t d = 0; d < dims[t].size(); ++d) {
            if (d) out += 'x';
            out += std::to_string(dims[t][d]);
        }
    }
    return out;
}

std::string KbKey::text() const {
    return fmt::format("{}|{}|{}|{}|{:016x}|{}", kernel, signature, dims_text(), attrs, spec_hash, cost_model_version);
}

uint64_t KbKey::hash() const {
    const std::string t = text();
    return fnv1a(kFnvBasis, t.data(), t.size());
}

Status KbKey::check() const {
    LOOM_TRY(check_name("kernel", kernel, false));
    for (char c : kernel)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
            return make_error(StatusCode::INVALID_ARGUMENT, "kernel: '{}' is not a kernel name ([A-Za-z0-9_.-])",
                              printable(kernel));
    if (signature.size() > kKbNameBytesMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "signature: {} bytes, over the limit of {}", signature.size(),
                          kKbNameBytesMax);
    const int tensors = signature_tensors(signature);
    if (tensors < 0)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "signature: '{}' is not 'dtype,..->dtype,..' with dtypes f32, f16, i8, i32, u8, i64",
                          printable(signature));
    if (dims.size() != static_cast<size_t>(tensors))
        return make_error(StatusCode::INVALID_ARGUMENT, "dims: {} tensors, the signature '{}' has {}", dims.size(),
                          signature, tensors);
    for (size_t t = 0; t < dims.size(); ++t) {
        if (dims[t].size() > static_cast<size_t>(device::kMaxRank))
            return make_error(StatusCode::INVALID_ARGUMENT, "dims: tensor {}: rank {} over {}", t, dims[t].size(),
                              device::kMaxRank);
        for (size_t d = 0; d < dims[t].size(); ++d)
            if (dims[t][d] < 0 || dims[t][d] > kKbDimMax)
                return make_error(StatusCode::INVALID_ARGUMENT, "dims: tensor {}: dim {} = {} is outside 0..{}", t, d,
                                  dims[t][d], kKbDimMax);
    }
    if (attrs.size() > kKbAttrsBytesMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "attrs: {} bytes, over the limit of {}", attrs.size(),
                          kKbAttrsBytesMax);
    if (!one_line_text(attrs))
        return make_error(StatusCode::INVALID_ARGUMENT, "attrs: not one line of UTF-8 text ('{}')", printable(attrs));
    if (cost_model_version < 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "cost_model_version: {} is negative", cost_model_version);
    return {};
}

Status KbRecord::check() const {
    LOOM_TRY(key.check());
    LOOM_TRY(check_name("spec_name", spec_name, false));
    LOOM_TRY(check_tiling(tiling));
    if (!std::isfinite(cost_ns) || cost_ns <= 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "cost_ns: {} is not a positive time", cost_ns);
    if (!std::isfinite(default_cost_ns) || default_cost_ns <= 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "default_cost_ns: {} is not a positive time", default_cost_ns);
    if (method.empty() || method.size() > kMethodBytesMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "method: '{}' is not 1 to {} characters", printable(method),
                          kMethodBytesMax);
    for (char c : method)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return make_error(StatusCode::INVALID_ARGUMENT, "method: '{}' is not [a-z0-9_-]", printable(method));
    if (trials < 0) return make_error(StatusCode::INVALID_ARGUMENT, "trials: {} is negative", trials);
    if (!std::isfinite(seconds) || seconds < 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "seconds: {} is not a duration", seconds);
    LOOM_TRY(check_name("loom_version", loom_version, true));
    if (created_s < 0 || created_s > kTimeMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "created: {} is outside 1970..9999", created_s);
    if (updated_s < 0 || updated_s > kTimeMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "updated: {} is outside 1970..9999", updated_s);
    return {};
}

bool KbCurrent::stale(const KbRecord& r) const {
    if (r.key.cost_model_version != cost_model_version) return true;
    bool name_known = false, hash_known = false;
    for (const auto& [name, hash] : specs)
        if (name == r.spec_name) {
            name_known = true;
            hash_known = hash_known || hash == r.key.spec_hash;
        }
    return name_known && !hash_known;
}

nlohmann::json kb_record_json(const KbRecord& r) {
    nlohmann::json dims = nlohmann::json::array();
    for (const auto& t : r.key.dims) dims.push_back(t);
    return {{"kernel", r.key.kernel},
            {"signature", r.key.signature},
            {"dims", dims},
            {"attrs", r.key.attrs},
            {"spec_hash", fmt::format("{:016x}", r.key.spec_hash)},
            {"spec_name", r.spec_name},
            {"cost_model_version", r.key.cost_model_version},
            {"tiling", compiler::tiling_json(r.tiling)},
            {"cost_ns", r.cost_ns},
            {"default_cost_ns", r.default_cost_ns},
            {"method", r.method},
            {"trials", r.trials},
            {"seconds", r.seconds},
            {"seed", r.seed},
            {"loom_version", r.loom_version},
            {"created", kb_time_text(r.created_s)},
            {"updated", kb_time_text(r.updated_s)}};
}

Result<KbRecord> kb_record_from_json(const nlohmann::json& j) {
    if (!j.is_object()) return make_error(StatusCode::PARSE_ERROR, "not an object");
    for (const auto& item : j.items()) {
        bool known = false;
        for (const char* f : kRecordFields) known = known || item.key() == f;
        if (!known) return make_error(StatusCode::PARSE_ERROR, "{}: unknown field", printable(item.key()));
    }
    KbRecord r;
    LOOM_TRY(get_string(j, "kernel", r.key.kernel));
    LOOM_TRY(get_string(j, "signature", r.key.signature));
    LOOM_TRY(get_dims(j, r.key.dims));
    LOOM_TRY(get_string(j, "attrs", r.key.attrs));
    std::string spec_hash;
    LOOM_TRY(get_string(j, "spec_hash", spec_hash));
    const auto [end, ec] = std::from_chars(spec_hash.data(), spec_hash.data() + spec_hash.size(), r.key.spec_hash, 16);
    if (spec_hash.size() != 16 || ec != std::errc() || end != spec_hash.data() + spec_hash.size())
        return make_error(StatusCode::PARSE_ERROR, "spec_hash: '{}' is not 16 hex digits", printable(spec_hash));
    LOOM_TRY(get_string(j, "spec_name", r.spec_name));
    LOOM_TRY(get_int(j, "cost_model_version", r.key.cost_model_version));
    if (!j.contains("tiling")) return missing("tiling");
    Result<device::Tiling> tiling = compiler::tiling_from_json(j.at("tiling"));
    if (!tiling.ok()) return tiling.status();
    r.tiling = std::move(tiling).value();
    LOOM_TRY(get_number(j, "cost_ns", r.cost_ns));
    LOOM_TRY(get_number(j, "default_cost_ns", r.default_cost_ns));
    LOOM_TRY(get_string(j, "method", r.method));
    LOOM_TRY(get_int(j, "trials", r.trials));
    LOOM_TRY(get_number(j, "seconds", r.seconds));
    LOOM_TRY(get_uint(j, "seed", r.seed));
    LOOM_TRY(get_string(j, "loom_version", r.loom_version));
    LOOM_TRY(get_time(j, "created", r.created_s));
    LOOM_TRY(get_time(j, "updated", r.updated_s));
    return r;
}

std::string kb_time_text(int64_t unix_s) {
    using namespace std::chrono;
    if (unix_s < 0 || unix_s > kTimeMax) return std::to_string(unix_s);
    const sys_seconds t{seconds{unix_s}};
    const sys_days day = floor<days>(t);
    const year_month_day ymd{day};
    const hh_mm_ss hms{t - day};
    return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", static_cast<int>(ymd.year()),
                       static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), hms.hours().count(),
                       hms.minutes().count(), hms.seconds().count());
}

Result<int64_t> kb_time_from_text(std::string_view text) {
    using namespace std::chrono;
    auto bad = [&] {
        return make_error(StatusCode::INVALID_ARGUMENT, "'{}' is not a UTC time (2026-11-25T14:03:00Z or 2026-11-25)",
                          printable(text));
    };
    // Fixed-width digits at `pos`; -1 when any is not a digit.
    auto digits = [&](size_t pos, size_t n) -> int {
        int v = 0;
        for (size_t i = pos; i < pos + n; ++i) {
            if (text[i] < '0' || text[i] > '9') return -1;
            v = v * 10 + (text[i] - '0');
        }
        return v;
    };
    if (text.size() != 10 && text.size() != 20) return bad();
    if (text[4] != '-' || text[7] != '-') return bad();
    const int y = digits(0, 4), mo = digits(5, 2), d = digits(8, 2);
    int h = 0, mi = 0, s = 0;
    if (text.size() == 20) {
        if (text[10] != 'T' || text[13] != ':' || text[16] != ':' || text[19] != 'Z') return bad();
        h = digits(11, 2), mi = digits(14, 2), s = digits(17, 2);
    }
    if (y < 1970 || mo < 1 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || s < 0 || s > 59) return bad();
    const year_month_day ymd{year{y}, month{static_cast<unsigned>(mo)}, day{static_cast<unsigned>(d)}};
    if (!ymd.ok()) return bad();
    return static_cast<int64_t>(sys_days{ymd}.time_since_epoch().count()) * 86400 + h * 3600 + mi * 60 + s;
}

}  // namespace loom::tuner
