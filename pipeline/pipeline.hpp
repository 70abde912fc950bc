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
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/frame.hpp"
#include "common/status.hpp"
#include "preprocess/media_io.hpp"
#include "restore/context.hpp"

namespace loom::pipeline {

struct RunOptions {
    std::string input, output;        // override the decode / encode stages' files
    std::vector<std::string> sets;    // "stage.field=value" or "pipeline.field=value" (TOML values)
    // A segment of the source file (frames in presentation order; the first must be a closed
    // keyframe's): the decode stage's start_frame / frame_count, whatever the stage is named.
    // A daemon job runs its segments so. A source that reads no file refuses it.
    struct Segment {
        int64_t start_frame = 0;
        int64_t frame_count = -1;  // -1: to the end
        // The segment's bounds when a plan of the file gave them (preprocess::SegmentRange's
        // copy_from_pts / copy_to_pts): the source then seeks and the encoder copies by them,
        // and nothing scans the file. Without them each scans it once.
        std::optional<preprocess::ReaderOptions::SegmentPts> pts;
    };
    std::optional<Segment> segment;
    // The device context the pipeline runs on, shared with other pipelines and engines of the
    // process (one device, its memory and the models loaded on it). Null: the pipeline makes its
    // own from `device` (else [pipeline] device), `threads`, `faults` and `trace`. With a
    // context given, those are the context's, and [pipeline] device is ignored.
    std::shared_ptr<restore::DeviceContext> context;
    std::string device;               // overrides [pipeline] device when set (no context given)
    unsigned threads = 0;             // the own context's thread pool (0: one per core)
    device::FaultPlan faults;         // the own context's device fault plan
    std::string cache_dir;            // compile cache folder ("" = compiler::default_cache_dir())
    bool no_cache = false;
    std::string models_dir;           // "" = $LOOM_MODEL_DIR, else the cache's models folder
    bool trace = false;               // keep the device trace (write_trace; own context only)
    // Checked while the pipeline is built and run (a signal handler may set it): set, it cancels
    // as cancel() does, and interrupts a source blocked opening or reading its input.
    const std::atomic<bool>* stop_flag = nullptr;
};

// A pipeline description: a file, or TOML text already in memory (a daemon's request).
struct PipelineSource {
    std::string name;      // the file to read, or the name errors give the text
    std::string text;      // the TOML itself; empty: read the file `name`
    std::string base_dir;  // relative paths inside; empty: the file's folder, or the working directory
    static PipelineSource file(std::string path) { return {std::move(path), {}, {}}; }
    static PipelineSource from_text(std::string name, std::string text, std::string base_dir = {}) {
        return {std::move(name), std::move(text), std::move(base_dir)};
    }
};

// One stage while the pipeline runs (read from its counters; no lock taken).
struct StageProgress {
    std::string name;
    uint64_t frames_out = 0;
    size_t queue_depth = 0;      // frames waiting on the edge into it now (0 for the source)
    size_t queue_capacity = 0;
    uint64_t drops = 0;          // frames its input edge dropped (drop_* policies)
    double wait_share = 0;       // share of its run spent waiting (input, room downstream, a pool)
};

struct Progress {
    int64_t frames_done = 0;      // frames through the last stage
    int64_t frames_expected = 0;  // 0 = unknown
    double wall_s = 0;
    double fps = 0;
    double eta_s = -1;            // -1 = unknown
    std::vector<StageProgress> stages;  // in the pipeline's order, the source first
};

// Reads and validates a pipeline with the --set overrides applied; nothing is opened. Returns
// the pipeline's name.
Result<std::string> check_config(const PipelineSource& source, const std::vector<std::string>& sets);
inline Result<std::string> check_config(const std::string& path, const std::vector<std::string>& sets) {
    return check_config(PipelineSource::file(path), sets);
}

// What a pipeline needs, found before it is built: its source's input probed, its models
// imported (not compiled), nothing opened for writing and no device memory taken. A daemon
// refuses at submit a job whose device_bytes_min is above its device's capacity.
struct PipelineNeeds {
    FrameLayout source;                // the source's frames
    int64_t frames_expected = 0;       // 0 = unknown
    uint64_t device_bytes_min = 0;     // the least device memory its stages take together
    std::vector<std::string> detail;   // one line per stage that takes device memory
    std::string whole_only;            // why it cannot run segments of its input; empty: it can
    std::string fidelity;              // the file sink's output check (Needs::fidelity)
    bool copy_streams = true;          // the file sink copies the source's other streams
};
// Reads the pipeline with options.sets and options.input / segment applied (the context,
// device and output are not used). Errors name the file and field, or the stage.
Result<PipelineNeeds> estimate_needs(const PipelineSource& source, const RunOptions& options);

class Pipeline {
public:
    // Validates the description, takes the device context (or makes one), prepares every stage
    // (opens the input, prepares the restore engine, opens the output under a temporary name).
    // Errors name the file (or the text's name) and field, or the stage.
    static Result<std::unique_ptr<Pipeline>> create(const PipelineSource& source, const RunOptions& options);
    static Result<std::unique_ptr<Pipeline>> create(const std::string& path, const RunOptions& options) {
        return create(PipelineSource::file(path), options);
    }
    ~Pipeline();
    Pipeline(const Pipeline&) = delete;
    Pipeline& operator=(const Pipeline&) = delete;

    // Runs to the end of the stream on the calling thread (any thread the caller owns), calling
    // `on_progress` about every `progress_ms` from it. Returns the first stage error, or
    // CANCELLED after cancel(). Once: a pipeline runs one stream.
    Status run(const std::function<void(const Progress&)>& on_progress = {}, int progress_ms = 200);
    // Stops the run from any thread (not from a signal handler: set RunOptions::stop_flag
    // there): the source stops reading (a blocked read is interrupted), frames in flight on the
    // device are abandoned, not finished, and run() returns CANCELLED within about one frame's
    // time; no output is left under its final name. Before run(), the run ends at once.
    void cancel();

    // The summary of the run: frames, wall time, fps, per-stage metrics, device utilisation in
    // simulated time, host-link bytes, memory. Call it after run() has returned (it reads what
    // the stage threads wrote), from any thread.
    nlohmann::json summary() const;
    // Writes the simulated device timeline as a Perfetto trace, with the host stages as lanes
    // beside the engines (needs tracing: RunOptions::trace, or a context made with it). After
    // run() has returned, from any thread.
    Status write_trace(const std::string& path) const;

    struct Impl;

private:
    explicit Pipeline(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace loom::pipeline
