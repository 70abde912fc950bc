// A pipeline: a graph of stages declared in a TOML file, validated whole before anything runs,
// built (every stage prepared, caps negotiated from the source down), run with one thread per
// stage and a bounded queue per edge, and summarised.
//
//   [pipeline]
//   name = "restore-x2"
//   device = "edge"              # device preset or spec file
//   queue_depth = 4              # default edge depth
//   queue_policy = "block"       # default edge policy: block | drop_oldest | drop_newest
//
//   [[stage]]
//   name = "decode"              # unique; [a-z0-9_-]
//   type = "decode"              # a type from pipeline/stage_list.hpp
//   ...                          # the type's own fields
//
//   [[stage]]
//   name = "restore"
//   type = "infer"
//   input = "decode"             # the stage whose frames it takes (none for a source)
//   queue = { depth = 4, policy = "block" }   # the edge into this stage (optional)
//
// Every mistake is reported as `file:line:col: message` naming the field: unknown keys, wrong
// types, out-of-range values, unknown stage types, duplicate names, an input naming no stage,
// a stage taking input from a sink, two stages taking one output without a tee, an output that
// goes nowhere, cycles, more or less than one source.
//
// Running: run() starts the stages (source last, so every queue has its consumer), reports
// progress while they work, and returns when the last has ended. End of stream flows down
// (each stage closes its output queues when it returns). A stage that fails stops the
// pipeline with its error ("stage 'restore' (infer): ..."); cancel() stops it with CANCELLED.
// Either way every thread is joined and the device drained before run() returns.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.hpp"

namespace loom::pipeline {

struct RunOptions {
    std::string input, output;        // override the decode / encode stages' files
    std::vector<std::string> sets;    // "stage.field=value" or "pipeline.field=value" (TOML values)
    std::string device;               // overrides [pipeline] device when set
    std::string cache_dir;            // compile cache folder ("" = compiler::default_cache_dir())
    bool no_cache = false;
    std::string models_dir;           // "" = $LOOM_MODEL_DIR, else the cache's models folder
    bool trace = false;               // keep the device trace (write_trace)
};

struct Progress {
    int64_t frames_done = 0;      // frames through the last stage
    int64_t frames_expected = 0;  // 0 = unknown
    double wall_s = 0;
    double fps = 0;
    double eta_s = -1;            // -1 = unknown
};

// Reads and validates a pipeline file with the --set overrides applied; nothing is opened.
// Returns the pipeline's name.
Result<std::string> check_config(const std::string& path, const std::vector<std::string>& sets);

class Pipeline {
public:
    // Validates the file, creates the device, prepares every stage (opens the input, compiles
    // the model, opens the output under a temporary name). Errors name the file and field, or
    // the stage.
    static Result<std::unique_ptr<Pipeline>> create(const std::string& path, const RunOptions& options);
    ~Pipeline();
    Pipeline(const Pipeline&) = delete;
    Pipeline& operator=(const Pipeline&) = delete;

    // Runs to the end of the stream, calling `on_progress` about every `progress_ms` from the
    // calling thread. Returns the first stage error, or CANCELLED after cancel().
    Status run(const std::function<void(const Progress&)>& on_progress = {}, int progress_ms = 200);
    // Stops the run: safe from any thread (not from a signal handler: set a flag there and call
    // this from a thread, as `loomd run` does with `stop_flag`).
    void cancel();
    // A flag run() polls with its progress: setting it (from a signal handler too) cancels.
    void set_stop_flag(const std::atomic<bool>* flag) { stop_flag_ = flag; }

    // The summary of the run: frames, wall time, fps, per-stage metrics, device utilisation in
    // simulated time, host-link bytes, memory.
    nlohmann::json summary() const;
    // Writes the simulated device timeline as a Perfetto trace, with the host stages as lanes
    // beside the engines (needs RunOptions::trace).
    Status write_trace(const std::string& path) const;

    struct Impl;

private:
    explicit Pipeline(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
    const std::atomic<bool>* stop_flag_ = nullptr;
};

}  // namespace loom::pipeline
