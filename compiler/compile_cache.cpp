#include "compiler/compile_cache.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "common/hash.hpp"
#include "common/log.hpp"
#include "common/version.hpp"
#include "compiler/model_file.hpp"
#include "compiler/tuning.hpp"

namespace loom::compiler {

namespace {

void hash_tensor(Hasher& h, const HostTensor& t) {
    h.u64(static_cast<uint64_t>(t.dtype())).u64(t.dims().size());
    for (int64_t d : t.dims()) h.i64(d);
    h.bytes(t.data(), t.bytes());
}

// The input shapes as given, sorted by name so that their order does not matter.
std::vector<std::pair<std::string, std::vector<int64_t>>> sorted_shapes(const CompileOptions& o) {
    auto shapes = o.shapes;
    std::sort(shapes.begin(), shapes.end());
    return shapes;
}

// The options that name an entry: precision, mode, switches, input shapes (in any order), the
// values of inputs specialised to constants and the split regions.
void hash_request(Hasher& h, const Graph& g, const CompileOptions& o) {
    // The names as the options held them before they were enums ("" for a mode left to the
    // shapes), so entries cached then still match.
    h.str(precision_name(o.precision)).str(o.mode ? exec_mode_name(*o.mode) : "");
    h.u64(o.optimize).u64(o.fold).u64(o.host_placement);
    for (const auto& [name, dims] : sorted_shapes(o)) {
        h.str(name).u64(dims.size());
        for (int64_t d : dims) h.i64(d);
    }
    for (const std::string& name : specialised_inputs(g, o)) {
        h.str(name);
        for (const auto& [n, t] : o.input_values)
            if (n == name) hash_tensor(h, t);
    }
    // Split regions (only when asked for, so that other entries keep their names).
    for (const SplitChoice& c : o.splits) h.str("split").str(c.first).str(c.last).i64(c.rows);
    // A measured choice is this machine's; the cache directory is too.
    if (o.measure_host) h.str("measure_host");
}

// What names an entry: the request, not the model's contents.
uint64_t identity_hash(const Graph& g, const CompileOptions& o, const device::DeviceSpec& spec) {
    Hasher h;
    std::error_code ec;
    const std::filesystem::path source = std::filesystem::weakly_canonical(g.source, ec);
    // A graph that did not come from a file is named by its contents.
    if (g.source.empty()) h.str("graph").u64(graph_hash(g));
    else h.str(ec ? g.source : source.string());
    h.str(spec.name);
    hash_request(h, g, o);
    return h.digest();
}

// `text` made safe for a file name: letters, digits, '-' and '_' (others become '_'), at most
// 64 characters, never empty.
std::string file_safe(std::string text) {
    for (char& c : text)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
    if (text.size() > 64) text.resize(64);
    return text.empty() ? std::string("_") : text;
}

std::string model_stem(const Graph& g) {
    if (!g.source.empty()) return file_safe(std::filesystem::path(g.source).stem().string());
    return file_safe(g.name.empty() ? std::string("graph") : g.name);
}

// Why a loaded entry cannot serve this request, or "" when it can.
std::string stale_reason(const CompiledModel& m, uint64_t source_hash, uint64_t options_hash,
                         const device::DeviceSpec& spec) {
    if (m.compiler_version != kVersion || m.compiler_build != build_id())
        return fmt::format("built by loomc {} ({}), this is {} ({})", m.compiler_version,
                           m.compiler_build.empty() ? "no build id" : m.compiler_build, kVersion, build_id());
    if (m.spec_hash != spec.hash())
        return fmt::format("built for device '{}' with spec hash {:016x}, the spec of '{}' now hashes to {:016x}",
                           m.spec_name, m.spec_hash, spec.name, spec.hash());
    if (m.source_hash != source_hash)
        return fmt::format("the model changed since (content hash {:016x}, now {:016x})", m.source_hash, source_hash);
    if (m.options_hash != options_hash)
        return fmt::format("built with other calibration data or tilings (options hash {:016x}, now {:016x})",
                           m.options_hash, options_hash);
    return {};
}

}  // namespace

std::string_view cache_outcome_name(CacheOutcome o) {
    switch (o) {
    case CacheOutcome::HIT: return "hit";
    case CacheOutcome::MISS: return "miss";
    case CacheOutcome::STALE: return "stale";
    }
    return "?";
}

std::string default_cache_dir() {
    if (const char* d = std::getenv("LOOM_CACHE_DIR"); d && *d) return d;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fmt::format("{}/loom/compiled", x);
    if (const char* home = std::getenv("HOME"); home && *home) return fmt::format("{}/.cache/loom/compiled", home);
    return ".loom-cache";
}

uint64_t CompileCache::options_hash(const Graph& g, const CompileOptions& o) {
    Hasher h;
    hash_request(h, g, o);
    h.u64(o.calibration.size());
    for (const InputSet& set : o.calibration) {
        h.u64(set.size());
        for (const HostTensor& t : set) hash_tensor(h, t);
    }
    // Only with a source, so that the hashes of entries built without one stay as they were.
    if (o.tiling_source) h.str("tiling_source").u64(o.tiling_source->content_hash());
    return h.digest();
}

std::string CompileCache::entry_path(const Graph& g, const CompileOptions& o, const device::DeviceSpec& spec) const {
    return fmt::format("{}/{}.{}.{}.{:016x}.loom", dir_, model_stem(g), file_safe(spec.name),
                       file_safe(std::string(precision_name(o.precision))), identity_hash(g, o, spec));
}

Result<CacheResult> CompileCache::compile(Graph g, const CompileOptions& options,
                                          const device::DeviceSpec& spec) const {
    CacheResult r;
    r.path = entry_path(g, options, spec);
    const uint64_t source_hash = graph_hash(g);
    const uint64_t opt_hash = options_hash(g, options);
    std::error_code ec;
    if (std::filesystem::exists(r.path, ec)) {
        Result<CompiledModel> cached = load_compiled_model(r.path);
        if (!cached.ok()) {
            r.reason = fmt::format("unreadable: {}", cached.status().message());
        } else {
            r.reason = stale_reason(*cached, source_hash, opt_hash, spec);
            if (r.reason.empty()) {
                r.model = std::move(*cached);
                r.outcome = CacheOutcome::HIT;
                log::info("compile-cache", "hit path={} source={}", r.path, g.source);
                return r;
            }
        }
        r.outcome = CacheOutcome::STALE;
        log::warn("compile-cache", "stale entry {}: {}; rebuilding", r.path, r.reason);
    }
    const std::string source = g.source;
    const auto t0 = std::chrono::steady_clock::now();
    LOOM_ASSIGN_OR_RETURN(r.model, compile_graph(std::move(g), options, spec));
    r.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.model.source_hash = source_hash;
    r.model.options_hash = opt_hash;
    std::filesystem::create_directories(dir_, ec);
    Status st = ec ? make_error(StatusCode::IO_ERROR, "{}: cannot create the cache folder: {}", dir_, ec.message())
                   : save_compiled_model(r.path, r.model);
    if (!st.ok()) {
        r.stored = false;
        log::warn("compile-cache", "not cached: {}", st.message());
    } else {
        log::info("compile-cache", "{} path={} source={} compile_ms={:.1f}", cache_outcome_name(r.outcome), r.path,
                  source, r.compile_ms);
    }
    return r;
}

}  // namespace loom::compiler
