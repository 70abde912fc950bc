// A pipeline stage: one unit of extension, one file (pipeline/stages/NAME.cpp) and one line in
// pipeline/stage_list.hpp. A stage type reads its fields from its TOML table (Fields: typed,
// with file:line:col errors and unknown keys refused), is prepared once when the pipeline is
// built (it opens files, compiles models, allocates its pools, and says what it emits: caps
// negotiation as in GStreamer), then runs on a thread of its own, taking frames from its input
// queue and handing frames on to its output queues until the end of the stream or a stop.
//
// Stages report, the pipeline decides (CONTRIBUTING.md): a stage returns its error and stops its
// work; it never exits the process, and it never retries on its own.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "common/frame.hpp"
#include "common/status.hpp"
#include "device/runtime.hpp"
#include "pipeline/frame_pool.hpp"
#include "pipeline/pipeline.hpp"
#include "pipeline/queue.hpp"
#include "restore/context.hpp"
#include "preprocess/media_io.hpp"

namespace loom::pipeline {

// Typed reading of one TOML table. Every error names file:line:col and the field; finish()
// refuses keys nobody read, listing the known ones.
class Fields {
public:
    Fields(const toml::table& table, std::string file, std::string what);

    Result<std::string> string(std::string_view key, std::string fallback);
    Result<int64_t> integer(std::string_view key, int64_t fallback, int64_t min, int64_t max);
    Result<double> number(std::string_view key, double fallback, double min, double max);
    Result<bool> boolean(std::string_view key, bool fallback);
    // A list of exactly `n` numbers in [min, max].
    Result<std::vector<double>> numbers(std::string_view key, std::vector<double> fallback, size_t n, double min,
                                        double max);
    // A string field that must be one of `allowed`; an unknown value lists them.
    Result<std::string> one_of(std::string_view key, std::string fallback,
                               std::initializer_list<std::string_view> allowed);
    // A field naming one value of an enum, read by `parse` (pixel_format_from_name, say); leaves
    // `out` alone and returns false when absent; an unknown name lists `names`.
    template <typename E>
    Result<bool> choice(std::string_view key, E& out, bool (*parse)(std::string_view, E&), std::string_view names) {
        if (!has(key)) {
            claim(key);
            return false;
        }
        LOOM_ASSIGN_OR_RETURN(std::string v, string(key, ""));
        if (!parse(v, out))
            return make_error(StatusCode::PARSE_ERROR, "{}: {}: {} '{}' ({})", where(key), what_, key, v, names);
        return true;
    }
    // Marks a key read by someone else (the pipeline reads name, type, input and queue).
    void claim(std::string_view key) { used_.insert(std::string(key)); }
    bool has(std::string_view key) const { return table_.contains(key); }
    // "file:line:col" of `key` (of the table when absent; "file (--set ...)" for values set on
    // the command line).
    std::string where(std::string_view key) const;
    // Refuses keys no getter read.
    Status finish() const;

    const std::string& file() const { return file_; }
    const std::string& what() const { return what_; }

private:
    const toml::node* get(std::string_view key);
    const toml::table& table_;
    std::string file_, what_;
    std::set<std::string> used_;
};

// Formats the position of a TOML node: "file:line:col", or "file (--set KEY=VALUE)" for a value
// set on the command line.
std::string toml_where(const std::string& file, const toml::source_region& r);

// What flows on an edge, negotiated when the pipeline is built: the frame format, the colour
// contract and the time base of the frames' pts, whatever their source. A source that reads a
// media file also says which (`file`): an encoder copies that file's audio and subtitles.
struct Caps {
    FrameLayout layout;
    ColorInfo color;
    preprocess::Rational time_base{1, 90000};  // of FrameMeta pts and duration
    preprocess::Rational frame_rate{0, 1};     // nominal (0/1: unknown, e.g. variable)
    std::shared_ptr<const preprocess::VideoInfo> file;  // the media file the frames came from, if any
    int64_t frames_expected = 0;                        // 0 = unknown (progress only)
    // A segment of the source (decode's start_frame / frame_count): the source's audio and
    // subtitle packets that belong to it, by pts in the video time base (see
    // preprocess::WriterOptions::copy_from_pts).
    int64_t copy_from_pts = INT64_MIN, copy_to_pts = INT64_MAX;
};

// What every stage can use while it is prepared and while it runs.
struct Env {
    std::shared_ptr<restore::DeviceContext> context;  // the device, its pool and loaded models
    std::string input, output;  // --input, --output (empty: the config's own)
    // RunOptions::segment: a file source reads only these frames.
    std::optional<RunOptions::Segment> segment;
    std::string config_dir;     // relative paths in the config are relative to it
    std::string cache_dir;      // the compile cache; empty: compile without one
    std::string models_dir;     // where model names resolve (scripts/fetch-models' folder)
    // The pipeline's stop flag (RunOptions::stop_flag), or null: a source checks it while it
    // opens its input, before the pipeline can call its stop().
    const std::atomic<bool>* stop = nullptr;
};

// What a pipeline's stages take at least before they run (Stage::estimate).
struct Needs {
    uint64_t device_bytes_min = 0;    // device memory, on a device with nothing else on it
    std::vector<std::string> detail;  // one line per stage that takes some
    // Why the pipeline cannot run a segment of its input (a stage that reads or writes whole
    // streams only, such as the GStreamer back end); empty when it can.
    std::string whole_only;
    // The file sink's check of its output (encode.fidelity: fail, warn, off; empty: no file
    // sink) and whether it copies the source's other streams: what a join of its segments is
    // checked with.
    std::string fidelity;
    bool copy_streams = true;
};

// Per-stage counters. Counters are atomics written by the stage's thread and read by anyone;
// the latency samples are written by the stage's thread and read after it has joined.
struct StageMetrics {
    std::atomic<uint64_t> frames_in{0}, frames_out{0};
    std::atomic<int64_t> wait_ns{0};  // waiting for input, for room downstream or for a pool
    int64_t wall_ns = 0;              // the thread's run, set when it ends
    // The time each frame spent in the stage (taken to handed on), the last kSamples of them.
    static constexpr size_t kSamples = 4096;
    std::vector<float> latency_ms = std::vector<float>(kSamples);
    size_t latency_count = 0;
    void add_latency(double ms) { latency_ms[latency_count++ % kSamples] = static_cast<float>(ms); }
    // With tracing: each frame's time in the stage, in wall microseconds since `origin` (the
    // first kSpansMax frames; written by the stage's thread, read after it joined).
    struct Span {
        int64_t frame;
        double start_us, end_us;
    };
    static constexpr size_t kSpansMax = 100'000;
    bool trace = false;
    std::chrono::steady_clock::time_point origin{};
    std::vector<Span> spans;
    // Returns the q-quantile (0..1) of the latency samples, in ms (0 when none).
    double latency_quantile(double q) const;
};

// A stage's thread-side view: its queues, its metrics and the pipeline's stop flag, with the
// waits timed.
class StageRun {
public:
    using Clock = std::chrono::steady_clock;
    StageRun(FrameQueue* in, std::vector<FrameQueue*> out, StageMetrics& m) : in_(in), out_(std::move(out)), m_(m) {}
    // Takes the next input frame (an empty ref at the end of the stream or on a stop) and
    // starts its latency clock.
    FrameRef take();
    // A source: starts the latency clock of the frame it is about to produce.
    void begin() { taken_ = Clock::now(); }
    // Hands `f` to every output queue (a tee shares it); counts it and its latency. Returns
    // false once the pipeline stopped.
    bool emit(FrameRef f);
    // Counts frame `f` ending here (a sink) and its latency.
    void consumed(const Frame* f);
    // Times a wait that is not for a queue (a pool, the device): use as `auto w = run.waiting();`.
    struct Wait {
        StageMetrics* m;
        Clock::time_point t0;
        ~Wait() { m->wait_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count(); }
    };
    Wait waiting() { return Wait{&m_, Clock::now()}; }
    // Marks the end of the stream on every output queue.
    void close_outputs();

private:
    FrameQueue* in_;
    std::vector<FrameQueue*> out_;
    StageMetrics& m_;
    void record_span(const Frame* f, Clock::time_point end);
    Clock::time_point taken_{};
};

class Stage {
public:
    virtual ~Stage() = default;
    // Prepares for frames described by `in` (nullptr for a source) and returns what the stage
    // emits (a sink returns its input's caps). Errors name the stage's file:line:col where a
    // field is at fault.
    virtual Result<Caps> prepare(const Caps* in, const Env& env) = 0;
    // What prepare() would return for `in`, found without opening an output, compiling or
    // taking device memory (a source probes its input; the infer stage imports its model), and
    // what the stage takes at least, added to `needs`. The default suits a stage that passes
    // its input's frames on and takes no device memory; a source must override it.
    virtual Result<Caps> estimate(const Caps* in, const Env& env, Needs& needs) {
        (void)env;
        (void)needs;
        if (!in) return make_error(StatusCode::UNSUPPORTED, "this source cannot be estimated before it runs");
        return *in;
    }
    // The stage's thread, until the end of the stream (then it closes its outputs, done by the
    // pipeline) or a stop (take() / emit() fail). Returns the stage's error.
    virtual Status run(StageRun& run) = 0;
    // Asks the stage to stop waiting on anything but its queues (pools it owns, say).
    virtual void stop() {}
    // Stage-specific figures for the summary.
    virtual void summarise(nlohmann::json& out) const { (void)out; }
};

// One stage type as the registry lists it.
struct StageType {
    std::string_view name;
    std::string_view summary;
    bool source;   // takes no input
    bool sink;     // emits nothing
    bool fan_out;  // several stages may take its output (tee)
    // Reads the stage's fields (unknown ones are refused by the caller after this returns).
    Result<std::unique_ptr<Stage>> (*create)(Fields& fields);
};

// Returns every stage type, in stage_list.hpp's order.
std::span<const StageType> stage_types();
// Returns the type named `name`, or nullptr.
const StageType* find_stage_type(std::string_view name);

}  // namespace loom::pipeline
