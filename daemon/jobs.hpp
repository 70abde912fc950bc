// The daemon's jobs: admission, a bounded priority queue, a configured number of jobs running
// at once on the shared device context, and the durable run of each job through the journal.
//
// A job is cut into keyframe segments (about [jobs] segment_seconds each). Each segment is
// restored into a part file in the job's work folder (STATE/jobs/ID/part-NNNN.EXT; the writer
// renames it into place only once it is complete) and then recorded in the journal. When every
// segment is recorded, the parts are joined without re-encoding into the output (a temporary
// name, renamed at the end), the job is marked done and its work folder removed. A restart
// replays the journal and resumes every unfinished job at its first unrecorded segment; a part
// file that is there but not recorded is redone, never trusted.
//
// The service faces (the control protocol today; frame streams and a fleet of daemons next)
// drive this class: they submit, query and cancel, and receive every state change and progress
// report through the EventSink. Admission (paths, pipeline, frame size, queue room) and the
// scheduling here are theirs to reuse.
//
// Memory: the jobs held in memory are the unfinished ones and the last kFinishedKept finished
// ones; nothing grows with the jobs served.
//
// Crash tests: LOOM_JOB_CRASH=POINT kills the daemon (SIGKILL) where a job reaches POINT, as
// LOOM_FAULTS injects device faults: `submitted` (the job committed, the reply not yet sent),
// `mid-segment:N` (segment N has restored frames), `part-renamed:N` (segment N's part is in
// place, not yet recorded), `recorded:N`, `joining` (every part recorded, the join not begun),
// `joined` (the output in place, the job not yet marked done).
//
// Thread safety: every public call may come from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.hpp"
#include "daemon/config.hpp"
#include "daemon/journal.hpp"
#include "restore/context.hpp"

namespace loom::daemon {

struct SubmitRequest {
    std::string pipeline;       // a name from the pipelines folder, or the name of pipeline_text
    std::string pipeline_text;  // TOML sent by the client (empty: resolve `pipeline` by name)
    std::string base_dir;       // where relative paths in pipeline_text resolve (absolute)
    std::string input, output;  // absolute
    std::vector<std::string> sets;
    int64_t priority = 0;
    bool overwrite = false;
    std::string client_id;
};

// Job counts by state, frames and the like (STATUS=, /metrics).
struct JobCounts {
    int64_t queued = 0, running = 0, done = 0, failed = 0, cancelled = 0;  // done..cancelled: since start
    int64_t submitted = 0, refused = 0;
    int64_t frames = 0;  // frames restored since start
};

class JobManager {
public:
    // Called for every state change and progress report of a job, from the job's thread or the
    // caller's: `event` is "state" or "progress", `job` the job as status() describes it.
    using EventSink = std::function<void(int64_t id, std::string_view event, const nlohmann::json& job)>;
    static constexpr size_t kFinishedKept = 256;

    // Takes the journal, replays it (every unfinished job queued again, in priority and
    // arrival order) and starts serving jobs on `context`.
    static Result<std::unique_ptr<JobManager>> start(const DaemonConfig& config,
                                                     std::shared_ptr<restore::DeviceContext> context,
                                                     std::unique_ptr<Journal> journal, EventSink sink);
    // Drains (see drain()).
    ~JobManager();

    // Admits a job: checks the pipeline (name or text, with the --set values), the paths, the
    // input's frame size and the queue's room, then commits it; returns the job. A client id
    // that a job already has returns that job, committing nothing. Errors are typed and name the
    // field: INVALID_ARGUMENT / NOT_FOUND / PARSE_ERROR / FAILED_PRECONDITION, and
    // RESOURCE_EXHAUSTED when the queue is full.
    Result<nlohmann::json> submit(const SubmitRequest& request);
    Result<nlohmann::json> status(int64_t id) const;
    // Jobs in memory (unfinished, then the latest finished), oldest first.
    nlohmann::json list() const;
    // Cancels a queued job (at once) or a running one (it stops within about a frame); its part
    // files go. A finished job is FAILED_PRECONDITION.
    Result<nlohmann::json> cancel(int64_t id);
    // New settings for jobs admitted from now on (SIGHUP); running jobs keep theirs.
    void reconfigure(const DaemonConfig& config);
    // Stops taking jobs and stops the running ones at a point they resume from (their current
    // segment is redone); returns when every job thread has ended. The journal keeps them.
    void drain();

    JobCounts counts() const;
    // True when a running job's frames have not moved for `window_s` while its pipeline runs (a
    // stalled stage). Planning, preparing a segment's pipeline and joining are not stalls.
    bool stalled(double window_s) const;
    const Journal& journal() const { return *journal_; }

    struct Job;

private:
    JobManager() = default;
    void worker();
    void run(Job& job);
    Status run_segments(Job& job);
    Status plan(Job& job);
    // The joined output of a job of several segments read back and compared with its source
    // (preprocess::check_output, as the encode stage's encode.fidelity says).
    Status check_join(const Job& job, const std::vector<std::string>& parts, int64_t frames);
    void find_ranges(Job& job);
    nlohmann::json describe_locked(const Job& job) const;
    void publish(Job& job, std::string_view event);
    void finish(Job& job, JobState state, const Status& error);
    void evict_locked();
    void crash_point(std::string_view point, int64_t segment) const;

    mutable std::mutex mutex_;
    std::condition_variable wake_;
    DaemonConfig config_;  // guarded by mutex_
    std::shared_ptr<restore::DeviceContext> context_;
    std::unique_ptr<Journal> journal_;
    EventSink sink_;
    std::map<int64_t, std::shared_ptr<Job>> jobs_;  // guarded by mutex_
    std::vector<std::thread> workers_;
    int64_t running_ = 0;                  // guarded by mutex_
    bool draining_ = false;                // guarded by mutex_
    bool memory_wait_ = false;             // a job did not fit: start nothing until one ends
    JobCounts counts_;                     // guarded by mutex_ (queued / running computed)
    uint64_t jobs_ended_ = 0;              // guarded: attempts ended since start
    int64_t memory_waiter_ = 0;            // guarded: the job that set memory_wait_
    std::string crash_;  // LOOM_JOB_CRASH
};

}  // namespace loom::daemon
