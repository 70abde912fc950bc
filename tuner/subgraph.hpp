// Subgraph tuning (issue 15, `loomc tune --mode subgraph|all`): which runs of a sink model's steps
// to execute band by band (compiler/split.hpp), so that the intermediates they hand on stay in L2,
// and with bands of how many rows.
//
// The search, per maximal chain of consecutive steps that can run band by band (every step has a
// split rule): a dynamic programme over the chain's steps whose choices are "this step runs whole"
// or "steps i..j form a region with bands of T rows", for every region of two steps or more whose
// intermediates overflow L2 when run whole (some step's banded inputs and output together exceed
// the device's L2: elsewhere the unsplit run would keep them in L2 too, and a gain priced by
// marking only the split's launches resident would be the model's artefact), and every T (the
// last step's output rows per band, on its alignment) whose L2 footprint fits, tried in full from
// the smallest to the largest that fits. A region is priced as its band launches under the
// tilings given (the default heuristic's, or a table's) plus the sink dispatch of every launch it
// adds (DeviceSpec::launch_sink_task_ns); a step run whole as its compiled cost. The result is
// deterministic.
//
// With op tuning (`--mode all`, tune_subgraphs) the regions found are compiled in, every launch of
// the split model (band launches included: they key on their L2 marks) is tuned as op tuning tunes
// a model, and a region is kept only where its tuned band launches beat its steps op-tuned whole.
//
// The choice is not stored in the knowledge base: a record there is one launch's tiling (its
// schema has no place for a run of steps), and the band launches the split makes are stored as
// ordinary launch records (their keys carry their L2 marks), so a second tuning finds them; the
// split search itself takes well under a second on the cost model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "compiler/tuning.hpp"
#include "device/spec.hpp"
#include "tuner/tune.hpp"

namespace loom::tuner {

struct SplitSearchOptions {
    // Prices launches with these tilings where it has them (null: the default heuristic's).
    const compiler::TilingSource* tilings = nullptr;
};

// One region: its steps, bands, footprint and the figures it was chosen on.
struct RegionReport {
    compiler::SplitChoice choice;  // first and last step by name, rows per band
    int first = 0, last = 0;       // step indices
    int64_t bands = 0, launches = 0;
    int64_t l2_bytes = 0;        // the footprint of its bands (fits the device's L2)
    int64_t overflow_bytes = 0;  // the largest working set of one of its steps run whole (over L2)
    double whole_ns = 0;         // its steps as compiled whole, with one dispatch each
    double split_ns = 0;         // its band launches, with one dispatch each
    // With op tuning (tune_subgraphs): the same steps op-tuned whole, and the band launches tuned.
    double op_whole_ns = 0, op_split_ns = 0;
    bool kept = true;  // with op tuning: false when the tuned split lost to the op-tuned steps
};

struct SplitSearchReport {
    std::vector<RegionReport> regions;           // chosen, in step order
    std::vector<compiler::SplitChoice> choices;  // for CompileOptions::splits
    int64_t chains = 0;                          // maximal runs of steps with split rules (two or more)
    int64_t candidates = 0;                      // (region, rows) pairs priced
    double whole_ns = 0, split_ns = 0;           // the model's kernels and dispatches, without and with the regions
    double seconds = 0;
};

// Chooses the regions of sink model `m` (compiled for `spec`, without splits) as described above.
Result<SplitSearchReport> choose_splits(const compiler::CompiledModel& m, const device::DeviceSpec& spec,
                                        const SplitSearchOptions& options = {});

// `loomc tune --mode subgraph` (op_tuning false) and `--mode all` (true), given a way to compile the
// model with options (the graph is the caller's): compiles it as `base` asks (without splits or a
// tiling source), chooses the regions, and with op tuning tunes the model whole and split and keeps
// the regions that win after tuning. `options` drives the op tuning (its knowledge base, seed,
// trials, threads).
struct SubgraphTuneReport {
    std::string model, spec;
    bool op_tuning = false;
    SplitSearchReport search;                // regions with their figures (op figures with op tuning)
    double default_ns = 0;                   // kernels and dispatches, default tilings, no regions
    double op_ns = 0;                        // with op tuning: op-tuned, no regions
    double final_ns = 0;                     // the regions kept (op-tuned with op tuning)
    TuneReport op, split_op;                 // with op tuning: the two tunings
    compiler::CompileOptions final_options;  // base with the regions kept (and the tuned tilings)
    double seconds = 0;

    nlohmann::json to_json() const;
};
using CompileFn = std::function<Result<compiler::CompiledModel>(const compiler::CompileOptions&)>;
Result<SubgraphTuneReport> tune_subgraphs(const CompileFn& compile, const compiler::CompileOptions& base,
                                          const device::DeviceSpec& spec, bool op_tuning, const TuneOptions& options);

// The simulated time of a compiled sink model's kernels plus one sink dispatch per launch (a split
// region's band launches each): what loomc tune compares.
double model_kernels_ns(const compiler::CompiledModel& m, const device::DeviceSpec& spec);

}  // namespace loom::tuner
