#include "pipeline/stage.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "pipeline/stage_list.hpp"

namespace loom::pipeline {

#define LOOM_X(name) extern const StageType kStage_##name;
LOOM_STAGE_LIST(LOOM_X)
#undef LOOM_X

namespace {
#define LOOM_X(name) +1
constexpr size_t kStageTypeCount = 0 LOOM_STAGE_LIST(LOOM_X);
#undef LOOM_X
const std::array<const StageType*, kStageTypeCount>& registry() {
#define LOOM_X(name) &kStage_##name,
    static const std::array<const StageType*, kStageTypeCount> types{LOOM_STAGE_LIST(LOOM_X)};
#undef LOOM_X
    return types;
}
}  // namespace

std::span<const StageType> stage_types() {
    static const std::vector<StageType> list = [] {
        std::vector<StageType> v;
        for (const StageType* t : registry()) v.push_back(*t);
        return v;
    }();
    return list;
}

const StageType* find_stage_type(std::string_view name) {
    for (const StageType* t : registry())
        if (t->name == name) return t;
    return nullptr;
}

std::string toml_where(const std::string& file, const toml::source_region& r) {
    if (r.path && r.path->rfind("--set ", 0) == 0) return fmt::format("{} ({})", file, *r.path);
    if (r.begin.line == 0) return fmt::format("{} (--set)", file);
    return fmt::format("{}:{}:{}", file, r.begin.line, r.begin.column);
}

Fields::Fields(const toml::table& table, std::string file, std::string what)
    : table_(table), file_(std::move(file)), what_(std::move(what)) {}

const toml::node* Fields::get(std::string_view key) {
    used_.insert(std::string(key));
    return table_.get(key);
}

std::string Fields::where(std::string_view key) const {
    if (const toml::node* n = table_.get(key)) return toml_where(file_, n->source());
    return toml_where(file_, table_.source());
}

Result<std::string> Fields::string(std::string_view key, std::string fallback) {
    const toml::node* n = get(key);
    if (!n) return fallback;
    if (!n->is_string())
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' must be a string", where(key), what_, key);
    return n->as_string()->get();
}

Result<std::string> Fields::one_of(std::string_view key, std::string fallback,
                                   std::initializer_list<std::string_view> allowed) {
    LOOM_ASSIGN_OR_RETURN(std::string v, string(key, std::move(fallback)));
    if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: {} '{}' ({})", where(key), what_, key, v,
                          fmt::join(allowed, ", "));
    return v;
}

Result<int64_t> Fields::integer(std::string_view key, int64_t fallback, int64_t min, int64_t max) {
    const toml::node* n = get(key);
    if (!n) return fallback;
    if (!n->is_integer())
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' must be an integer", where(key), what_, key);
    const int64_t v = n->as_integer()->get();
    if (v < min || v > max)
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' = {} is out of range [{}, {}]", where(key), what_, key,
                          v, min, max);
    return v;
}

Result<double> Fields::number(std::string_view key, double fallback, double min, double max) {
    const toml::node* n = get(key);
    if (!n) return fallback;
    if (!n->is_number())
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' must be a number", where(key), what_, key);
    const double v = n->is_integer() ? static_cast<double>(n->as_integer()->get()) : n->as_floating_point()->get();
    if (!(v >= min && v <= max))
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' = {} is out of range [{}, {}]", where(key), what_, key,
                          v, min, max);
    return v;
}

Result<bool> Fields::boolean(std::string_view key, bool fallback) {
    const toml::node* n = get(key);
    if (!n) return fallback;
    if (!n->is_boolean())
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' must be true or false", where(key), what_, key);
    return n->as_boolean()->get();
}

Result<std::vector<double>> Fields::numbers(std::string_view key, std::vector<double> fallback, size_t n, double min,
                                            double max) {
    const toml::node* node = get(key);
    if (!node) return fallback;
    const toml::array* a = node->as_array();
    if (!a || a->size() != n)
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' must be a list of {} numbers", where(key), what_, key,
                          n);
    std::vector<double> v;
    for (const toml::node& e : *a) {
        if (!e.is_number())
            return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' must be a list of {} numbers",
                              toml_where(file_, e.source()), what_, key, n);
        const double x = e.is_integer() ? static_cast<double>(e.as_integer()->get()) : e.as_floating_point()->get();
        if (!(x >= min && x <= max))
            return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' holds {}, out of range [{}, {}]",
                              toml_where(file_, e.source()), what_, key, x, min, max);
        v.push_back(x);
    }
    return v;
}

Status Fields::finish() const {
    for (const auto& [k, v] : table_) {
        if (used_.count(std::string(k.str()))) continue;
        std::vector<std::string> known(used_.begin(), used_.end());
        return make_error(StatusCode::PARSE_ERROR, "{}: {}: unknown field '{}' (known: {})",
                          toml_where(file_, k.source()), what_, k.str(), fmt::join(known, ", "));
    }
    return {};
}

double StageMetrics::latency_quantile(double q) const {
    const size_t n = std::min(latency_count, kSamples);
    if (n == 0) return 0;
    std::vector<float> v(latency_ms.begin(), latency_ms.begin() + static_cast<std::ptrdiff_t>(n));
    const size_t k = std::min(n - 1, static_cast<size_t>(std::floor(q * static_cast<double>(n - 1) + 0.5)));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
}

FrameRef StageRun::take() {
    const auto t0 = Clock::now();
    FrameRef f = in_->pop();
    taken_ = Clock::now();
    m_.wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(taken_ - t0).count();
    if (f) m_.frames_in.fetch_add(1, std::memory_order_relaxed);
    return f;
}

void StageRun::record_span(const Frame* f, Clock::time_point end) {
    if (!m_.trace || m_.spans.size() >= StageMetrics::kSpansMax || taken_ == Clock::time_point{}) return;
    auto us = [&](Clock::time_point t) { return std::chrono::duration<double, std::micro>(t - m_.origin).count(); };
    m_.spans.push_back({f ? f->meta.index : -1, us(taken_), us(end)});
}

bool StageRun::emit(FrameRef f) {
    const auto t0 = Clock::now();
    if (taken_ != Clock::time_point{}) m_.add_latency(std::chrono::duration<double, std::milli>(t0 - taken_).count());
    record_span(f.get(), t0);
    bool ok = true;
    for (size_t i = 0; i < out_.size(); ++i) ok = (i + 1 == out_.size() ? out_[i]->push(std::move(f)) : out_[i]->push(f)) && ok;
    m_.wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    if (ok) m_.frames_out.fetch_add(1, std::memory_order_relaxed);
    return ok;
}

void StageRun::consumed(const Frame* f) {
    const auto t0 = Clock::now();
    if (taken_ != Clock::time_point{}) m_.add_latency(std::chrono::duration<double, std::milli>(t0 - taken_).count());
    record_span(f, t0);
    m_.frames_out.fetch_add(1, std::memory_order_relaxed);
}

void StageRun::close_outputs() {
    for (FrameQueue* q : out_) q->close();
}

}  // namespace loom::pipeline
