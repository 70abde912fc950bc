// Tuning a compiled model (Loom's AOE, `loomc tune`): every distinct kernel launch of a sink
// model is looked up in the knowledge base and, when it is not there, searched (Cube launches by
// the genetic algorithm, Vector launches by Monte-Carlo tree search; tuner/search.hpp), seeded
// with the default heuristic's tiling and the knowledge base's nearest shapes. The result is a
// table of tilings that lowering takes (compiler::TilingSource): recompiling with it gives the
// tuned model, whose outputs are those of the untuned one (a tiling changes time, never results).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "compiler/tuning.hpp"
#include "device/spec.hpp"
#include "tuner/kb.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::tuner {

struct TuneOptions {
    uint64_t seed = 1;
    // The most candidates costed per distinct launch; 0 = automatic: 5% of the encoded space,
    // at least 500 and at most 20000 (at 300 000 to 500 000 evaluations a second per thread).
    int64_t trials = 0;
    // Wall-time budget for the whole model, seconds (0 = none): each search gets its share and
    // stops between batches when it is spent (then the result depends on the machine's speed).
    double budget_s = 0;
    ThreadPool* pool = nullptr;   // distinct launches are searched in parallel on it
    KnowledgeBase* kb = nullptr;  // looked up before searching, and given what was found
    bool search_known = false;    // search launches the knowledge base knows too (a better
                                  // tiling replaces its record)
    // Called after each distinct launch is done (from the calling thread, in order).
    std::function<void(size_t done, size_t total)> progress;
};

// One distinct launch (steps with equal keys share it).
struct TunedLaunch {
    compiler::StepKey key;
    std::string kernel;
    std::vector<std::string> steps;  // the compiled steps that run it
    device::TilingKind kind = device::TilingKind::NONE;
    device::Tiling tiling;  // the tiling chosen
    double default_ns = 0;  // simulated time of one launch, default heuristic
    double tuned_ns = 0;    // the same with `tiling`
    double roofline = 0;    // Cube launches: useful flops / (tuned time x the chip's peak)
    std::string source;     // "kb", "ga", "mcts", "exhaustive" or "default" (nothing better)
    int64_t trials = 0;     // candidates costed
    double space = 0;       // points of the device's tiling space
    int64_t stale = 0;      // stale knowledge-base records of this launch (ignored)
    double seconds = 0;
};

struct TuneReport {
    std::string model, spec;
    std::vector<TunedLaunch> launches;  // in the order of their first step
    double default_ns = 0;              // every step of the model (tuned or not), default tilings
    double tuned_ns = 0;                // the same with the tuned tilings
    int64_t kb_hits = 0, kb_stale = 0, searched = 0, trials = 0;
    double seconds = 0;
    double evaluations_per_s = 0;                  // candidates costed per second of search (all threads)
    std::shared_ptr<compiler::TilingTable> table;  // every tuned tiling, by key

    double speedup() const { return tuned_ns > 0 ? default_ns / tuned_ns : 0; }
    nlohmann::json to_json() const;
};

// Tunes every distinct launch of sink model `m` compiled for `spec`. Knowledge-base records
// found or improved are written back (one transaction) when options.kb is set.
Result<TuneReport> tune_model(const compiler::CompiledModel& m, const device::DeviceSpec& spec,
                              const TuneOptions& options);

// The knowledge-base key of a launch (StepKey's fields in the knowledge base's form).
KbKey kb_key(const compiler::StepKey& key);

// A TilingSource reading a knowledge base: fresh records only, each checked against the launch
// by the compiler (an illegal one fails the compile naming the step). The records are read when
// it is made, so the source is a fixed table (content_hash covers it) and the file may change
// afterwards without affecting a compile in progress.
class KbTilingSource final : public compiler::TilingSource {
public:
    // Reads every fresh record for `spec` and the current cost model from `kb`.
    static Result<std::shared_ptr<KbTilingSource>> load(KnowledgeBase& kb, const device::DeviceSpec& spec);
    std::optional<device::Tiling> tiling_for(const compiler::StepKey& key) const override;
    uint64_t content_hash() const override { return hash_; }
    // The number of records it holds.
    size_t size() const { return size_; }

private:
    std::map<std::string, device::Tiling> by_kb_key_;  // by KbKey::text()
    size_t size_ = 0;
    uint64_t spec_hash_ = 0;
    uint64_t hash_ = 0;
};

}  // namespace loom::tuner
