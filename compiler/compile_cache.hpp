// The on-disk compile cache. Running a source model (.onnx, .param) compiles it first; with a
// cache the compiled model is stored as a .loom file and reused, so a restart does not
// recompile. An entry is named by what the caller asks for (the model's path, device preset,
// input shapes, precision, mode, fusion, inputs specialised to values) and records what it was
// built from: the model's content hash (compiler::graph_hash), the device spec's hash, the
// compiler's version and build, and a hash of every compile option (calibration data and the
// tiling source's contents included).
// When any of those differs, or the file does not load, the entry is stale: it is rebuilt and
// replaced, with a warning saying why. Entries are written atomically, so concurrent users of
// one cache folder see either the old or the new file.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "device/spec.hpp"

namespace loom::compiler {

enum class CacheOutcome : uint8_t {
    HIT,    // a valid entry was loaded; nothing compiled
    MISS,   // no entry: compiled and stored
    STALE,  // an entry built from something else (or unreadable): rebuilt and replaced
};
std::string_view cache_outcome_name(CacheOutcome o);

struct CacheResult {
    CompiledModel model;
    CacheOutcome outcome = CacheOutcome::MISS;
    std::string path;       // the entry's file
    std::string reason;     // STALE: why the entry was rebuilt
    bool stored = true;     // false when the entry could not be written (warned; the model is fine)
    double compile_ms = 0;  // wall time compiling (0 on a hit)
};

// The cache folder used when none is given: $LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom/compiled,
// else $HOME/.cache/loom/compiled.
std::string default_cache_dir();

class CompileCache {
public:
    explicit CompileCache(std::string dir) : dir_(std::move(dir)) {}
    const std::string& dir() const { return dir_; }

    // Returns `g` (as imported from g.source) compiled with `options` for `spec`, from the cache
    // when a valid entry exists, else compiled and stored. Compile errors are returned as they
    // are; a cache folder that cannot be written only costs the store (warned).
    Result<CacheResult> compile(Graph g, const CompileOptions& options, const device::DeviceSpec& spec) const;

    // The entry file for this request, whether or not it exists.
    std::string entry_path(const Graph& g, const CompileOptions& options, const device::DeviceSpec& spec) const;
    // The hash of every compile option that shapes the result (stored in the entry).
    static uint64_t options_hash(const Graph& g, const CompileOptions& options);

private:
    std::string dir_;
};

}  // namespace loom::compiler
