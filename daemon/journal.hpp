// The daemon's job journal: every accepted job and every finished segment of it, in one SQLite
// file (WAL, synchronous=FULL), so that a crash, a kill -9 or a power cut loses nothing that
// was acknowledged. A job is acknowledged only after its row is committed; a segment counts as
// done only once its part file has been renamed into place and its row committed.
//
// Tables (schema version 1, application_id 'LOOJ'):
//   jobs      one row per job: what was asked (pipeline text, input, output, --set values,
//             priority, overwrite, the client's job id), its state and error, its summary
//   segments  the job's plan (frame ranges on keyframes), each row marked done with its
//             frames and bytes once its part is in place
//
// A damaged file, a file that is not a journal, or one of a newer schema is refused whole,
// naming the path (the daemon does not start on it, so nothing in it is silently dropped).
// Finished jobs beyond `keep_finished` are pruned, oldest first: the file does not grow with
// the jobs served.
//
// Thread safety: every call takes the journal's mutex; one connection serves all threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/sqlite.hpp"
#include "common/status.hpp"

namespace loom::daemon {

enum class JobState { QUEUED, RUNNING, DONE, FAILED, CANCELLED };
std::string_view job_state_name(JobState s);
// Now, in Unix seconds: the clock of the journal's times (submitted, started, finished).
double unix_time_s();
bool job_state_from_name(std::string_view name, JobState& out);
inline bool job_finished(JobState s) { return s == JobState::DONE || s == JobState::FAILED || s == JobState::CANCELLED; }

struct SegmentRecord {
    int64_t start_frame = 0;
    int64_t frame_count = 0;
    bool done = false;
    int64_t frames = 0;  // frames written (when done)
    int64_t bytes = 0;   // of the part file (when done)
    double wall_s = 0;
};

struct JobRecord {
    int64_t id = 0;               // assigned by the journal
    std::string client_id;        // the client's own id ("" = none); unique among jobs
    std::string pipeline;         // the pipeline's name (or the file the client sent)
    std::string pipeline_text;    // the TOML, as resolved at submit: a resumed job runs the same
    std::string base_dir;         // relative paths inside the pipeline resolve here
    std::string input, output;    // absolute, checked at submit
    std::vector<std::string> sets;
    int64_t priority = 0;         // higher first; equal: arrival order
    bool overwrite = false;
    JobState state = JobState::QUEUED;
    std::string error;            // "CODE: message" of a failed job
    double submitted_at = 0, started_at = 0, finished_at = 0;  // Unix seconds; 0 = not yet
    int64_t frames_total = 0;     // from the plan (0 before it)
    int64_t attempts = 0;         // times the job was started (a resume counts)
    std::vector<SegmentRecord> segments;  // the plan; empty before the job first starts
};

// Commit latency of the journal's write transactions, as a histogram (for /metrics).
struct CommitLatency {
    static constexpr std::array<double, 10> kBoundsS = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                        0.025,  0.05,  0.1,    0.25,  1.0};
    std::array<uint64_t, kBoundsS.size() + 1> buckets{};  // the last: above the largest bound
    uint64_t count = 0;
    double sum_s = 0;
};

class Journal {
public:
    // Opens (creating when missing) the journal at `path`; its folder must exist. Errors name
    // the path: not writable (IO_ERROR), damaged or not a journal (PARSE_ERROR), a newer
    // schema (UNSUPPORTED).
    static Result<std::unique_ptr<Journal>> open(const std::string& path, int64_t keep_finished = 1000);
    ~Journal();

    // Commits a new job (its id is assigned and returned in `job`). With a client id that a
    // job already has, commits nothing and returns that job instead (`existed` true).
    Status insert(JobRecord& job, bool* existed = nullptr);
    // The plan of a job (its segments, none done) and its frame count, with the job running.
    Status set_plan(int64_t id, const std::vector<SegmentRecord>& segments, int64_t frames_total);
    // Marks segment `index` of job `id` done.
    Status segment_done(int64_t id, size_t index, const SegmentRecord& done);
    // Moves a job to `state` (with its error for FAILED); finished states prune old jobs.
    Status set_state(int64_t id, JobState state, std::string_view error = {});
    // Counts a start of the job (running, started_at set when first).
    Status mark_started(int64_t id);
    // Every job in the journal, oldest first, with their plans. Unfinished jobs are what a
    // restart resumes.
    Result<std::vector<JobRecord>> load();

    const std::string& path() const { return path_; }
    CommitLatency commit_latency() const;

private:
    Journal() = default;
    // Runs `body` in one write transaction; rolls back when it fails.
    template <typename F>
    Status write(std::string_view what, F&& body);
    Status prune_locked();

    std::string path_;
    int64_t keep_finished_ = 1000;
    sqlite::ErrorContext where_;
    sqlite::Busy busy_;
    sqlite::Db db_;
    mutable std::mutex mutex_;
    CommitLatency latency_;  // guarded by mutex_
};

}  // namespace loom::daemon
