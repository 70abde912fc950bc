#include "daemon/journal.hpp"

#include <chrono>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/json.hpp"

namespace loom::daemon {

namespace {

constexpr int64_t kApplicationId = 0x4c4f4f4a;  // 'LOOJ'
constexpr int64_t kSchemaVersion = 1;
constexpr int kLengthMax = 64 << 20;  // a pipeline's text and a summary fit far below this

constexpr const char* kSchema = R"sql(
CREATE TABLE jobs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id     TEXT,
    pipeline      TEXT NOT NULL,
    pipeline_text TEXT NOT NULL,
    base_dir      TEXT NOT NULL,
    input         TEXT NOT NULL,
    output        TEXT NOT NULL,
    sets          TEXT NOT NULL,
    priority      INTEGER NOT NULL,
    overwrite     INTEGER NOT NULL,
    state         TEXT NOT NULL,
    error         TEXT NOT NULL DEFAULT '',
    submitted_at  REAL NOT NULL,
    started_at    REAL NOT NULL DEFAULT 0,
    finished_at   REAL NOT NULL DEFAULT 0,
    frames_total  INTEGER NOT NULL DEFAULT 0,
    attempts      INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_client_id ON jobs (client_id) WHERE client_id IS NOT NULL;
CREATE TABLE segments (
    job          INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    idx          INTEGER NOT NULL,
    start_frame  INTEGER NOT NULL,
    frame_count  INTEGER NOT NULL,
    done         INTEGER NOT NULL DEFAULT 0,
    frames       INTEGER NOT NULL DEFAULT 0,
    bytes        INTEGER NOT NULL DEFAULT 0,
    wall_s       REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (job, idx)
) WITHOUT ROWID;
)sql";

constexpr const char* kJobColumns =
    "id, client_id, pipeline, pipeline_text, base_dir, input, output, sets, priority, overwrite, state, error, "
    "submitted_at, started_at, finished_at, frames_total, attempts";

}  // namespace

double unix_time_s() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string_view job_state_name(JobState s) {
    switch (s) {
    case JobState::QUEUED: return "queued";
    case JobState::RUNNING: return "running";
    case JobState::DONE: return "done";
    case JobState::FAILED: return "failed";
    case JobState::CANCELLED: return "cancelled";
    }
    return "unknown";
}

bool job_state_from_name(std::string_view name, JobState& out) {
    for (JobState s : {JobState::QUEUED, JobState::RUNNING, JobState::DONE, JobState::FAILED, JobState::CANCELLED})
        if (job_state_name(s) == name) {
            out = s;
            return true;
        }
    return false;
}

Result<std::unique_ptr<Journal>> Journal::open(const std::string& path, int64_t keep_finished) {
    std::unique_ptr<Journal> j(new Journal());
    j->path_ = path;
    j->keep_finished_ = keep_finished;
    j->busy_.wait_ms_max = 5000;
    j->where_ = {path, "the journal",
                 "move it aside (the daemon starts with an empty journal) and resubmit the jobs it held", &j->busy_};
    std::error_code ec;
    const bool existed = std::filesystem::exists(path, ec);
    LOOM_TRY(sqlite::open(path, true, kLengthMax, j->db_, j->where_));
    sqlite3* db = j->db_.get();
    sqlite3_busy_handler(db, sqlite::busy_handler, &j->busy_);
    // Reading the header checks the file is a database at all (a damaged one fails here).
    LOOM_ASSIGN_OR_RETURN(const int64_t app_id,
                          sqlite::query_int(db, j->where_, "PRAGMA application_id", "cannot read the journal"));
    LOOM_ASSIGN_OR_RETURN(const int64_t tables,
                          sqlite::query_int(db, j->where_, "SELECT count(*) FROM sqlite_schema",
                                            "cannot read the journal"));
    if (tables == 0 && app_id == 0) {
        LOOM_TRY(sqlite::exec(db, j->where_, "BEGIN IMMEDIATE", "cannot create the journal"));
        Status st = sqlite::exec(db, j->where_, kSchema, "cannot create the journal");
        if (st.ok())
            st = sqlite::exec(db, j->where_,
                              fmt::format("PRAGMA application_id = {}; PRAGMA user_version = {}", kApplicationId,
                                          kSchemaVersion)
                                  .c_str(),
                              "cannot create the journal");
        if (st.ok()) st = sqlite::exec(db, j->where_, "COMMIT", "cannot create the journal");
        if (!st.ok()) {
            (void)sqlite::exec(db, j->where_, "ROLLBACK", "rollback");
            return st;
        }
    } else if (app_id != kApplicationId) {
        return make_error(StatusCode::PARSE_ERROR, "{}: not a Loom job journal (application_id {:#x}{})", path, app_id,
                          existed ? "; another program's database? point [paths] state elsewhere" : "");
    } else {
        LOOM_ASSIGN_OR_RETURN(const int64_t version,
                              sqlite::query_int(db, j->where_, "PRAGMA user_version", "cannot read the journal"));
        if (version > kSchemaVersion)
            return make_error(StatusCode::UNSUPPORTED, "{}: journal schema {} is newer than this loomd's ({})", path,
                              version, kSchemaVersion);
    }
    // quick_check returns the text "ok" on an intact file; anything else names the damage.
    {
        sqlite::Stmt check(db, j->where_, "cannot check the journal");
        LOOM_TRY(check.prepare("PRAGMA quick_check"));
        LOOM_ASSIGN_OR_RETURN(const bool row, check.step());
        if (!row || check.text(0) != "ok")
            return make_error(StatusCode::PARSE_ERROR, "{}: the journal is damaged ({}): {}", path,
                              row ? check.text(0) : std::string("no result"), j->where_.damaged_hint);
    }
    // WAL: a writer never blocks the readers, and a commit is one append. synchronous=FULL: a
    // committed job survives a power cut, not only a killed process.
    {
        sqlite::Stmt wal(db, j->where_, "cannot configure the journal");
        LOOM_TRY(wal.prepare("PRAGMA journal_mode = WAL"));
        LOOM_ASSIGN_OR_RETURN(const bool row, wal.step());
        if (!row || wal.text(0) != "wal")
            return make_error(StatusCode::IO_ERROR, "{}: the journal cannot use write-ahead logging (mode '{}')", path,
                              row ? wal.text(0) : std::string());
    }
    // journal_size_limit: the write-ahead log is truncated back to 4 MiB after a checkpoint, so
    // the files do not keep their largest size for the daemon's life.
    LOOM_TRY(sqlite::exec(db, j->where_,
                          "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON; PRAGMA journal_size_limit = 4194304",
                          "cannot configure the journal"));
    return j;
}

Journal::~Journal() = default;

template <typename F>
Status Journal::write(std::string_view what, F&& body) {
    sqlite3* db = db_.get();
    const auto t0 = std::chrono::steady_clock::now();
    LOOM_TRY(sqlite::exec(db, where_, "BEGIN IMMEDIATE", what));
    Status st = body(db);
    if (st.ok()) st = sqlite::exec(db, where_, "COMMIT", what);
    if (!st.ok()) {
        (void)sqlite::exec(db, where_, "ROLLBACK", "rollback");
        return st;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    size_t b = 0;
    while (b < CommitLatency::kBoundsS.size() && s > CommitLatency::kBoundsS[b]) ++b;
    ++latency_.buckets[b];
    ++latency_.count;
    latency_.sum_s += s;
    return {};
}

CommitLatency Journal::commit_latency() const {
    std::lock_guard lock(mutex_);
    return latency_;
}

Status Journal::insert(JobRecord& job, bool* existed) {
    std::lock_guard lock(mutex_);
    if (existed) *existed = false;
    if (!job.client_id.empty()) {
        sqlite::Stmt find(db_.get(), where_, "cannot read the journal");
        LOOM_TRY(find.prepare("SELECT id FROM jobs WHERE client_id = ?1"));
        find.bind(1, job.client_id);
        LOOM_ASSIGN_OR_RETURN(const bool row, find.step());
        if (row) {
            const int64_t id = find.i64(0);
            if (existed) *existed = true;
            job.id = id;
            return {};
        }
    }
    job.submitted_at = unix_time_s();
    job.state = JobState::QUEUED;
    return write("cannot record the job", [&](sqlite3* db) -> Status {
        sqlite::Stmt s(db, where_, "cannot record the job");
        LOOM_TRY(s.prepare("INSERT INTO jobs (client_id, pipeline, pipeline_text, base_dir, input, output, sets, "
                           "priority, overwrite, state, submitted_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                           "?10, ?11)"));
        if (job.client_id.empty())
            s.bind_null(1);
        else
            s.bind(1, job.client_id);
        s.bind(2, job.pipeline);
        s.bind(3, job.pipeline_text);
        s.bind(4, job.base_dir);
        s.bind(5, job.input);
        s.bind(6, job.output);
        s.bind(7, dump_json(nlohmann::json(job.sets)));
        s.bind(8, job.priority);
        s.bind(9, int64_t{job.overwrite ? 1 : 0});
        s.bind(10, job_state_name(job.state));
        s.bind(11, job.submitted_at);
        LOOM_TRY(s.run());
        job.id = sqlite3_last_insert_rowid(db);
        return {};
    });
}

Status Journal::set_plan(int64_t id, const std::vector<SegmentRecord>& segments, int64_t frames_total) {
    std::lock_guard lock(mutex_);
    return write("cannot record the job's plan", [&](sqlite3* db) -> Status {
        sqlite::Stmt del(db, where_, "cannot record the job's plan");
        LOOM_TRY(del.prepare("DELETE FROM segments WHERE job = ?1"));
        del.bind(1, id);
        LOOM_TRY(del.run());
        sqlite::Stmt ins(db, where_, "cannot record the job's plan");
        LOOM_TRY(ins.prepare("INSERT INTO segments (job, idx, start_frame, frame_count) VALUES (?1, ?2, ?3, ?4)"));
        for (size_t i = 0; i < segments.size(); ++i) {
            ins.reset();
            ins.bind(1, id);
            ins.bind(2, static_cast<int64_t>(i));
            ins.bind(3, segments[i].start_frame);
            ins.bind(4, segments[i].frame_count);
            LOOM_TRY(ins.run());
        }
        sqlite::Stmt up(db, where_, "cannot record the job's plan");
        LOOM_TRY(up.prepare("UPDATE jobs SET frames_total = ?2 WHERE id = ?1"));
        up.bind(1, id);
        up.bind(2, frames_total);
        return up.run();
    });
}

Status Journal::segment_done(int64_t id, size_t index, const SegmentRecord& done) {
    std::lock_guard lock(mutex_);
    return write("cannot record a finished segment", [&](sqlite3* db) -> Status {
        sqlite::Stmt s(db, where_, "cannot record a finished segment");
        LOOM_TRY(s.prepare("UPDATE segments SET done = 1, frames = ?3, bytes = ?4, wall_s = ?5 WHERE job = ?1 AND "
                           "idx = ?2"));
        s.bind(1, id);
        s.bind(2, static_cast<int64_t>(index));
        s.bind(3, done.frames);
        s.bind(4, done.bytes);
        s.bind(5, done.wall_s);
        LOOM_TRY(s.run());
        if (sqlite3_changes(db) != 1)
            return make_error(StatusCode::INTERNAL, "{}: job {} has no segment {}", path_, id, index);
        return {};
    });
}

Status Journal::set_state(int64_t id, JobState state, std::string_view error) {
    std::lock_guard lock(mutex_);
    return write("cannot record the job's state", [&](sqlite3* db) -> Status {
        sqlite::Stmt s(db, where_, "cannot record the job's state");
        LOOM_TRY(s.prepare("UPDATE jobs SET state = ?2, error = ?3, finished_at = ?4 WHERE id = ?1"));
        s.bind(1, id);
        s.bind(2, job_state_name(state));
        s.bind(3, error);
        s.bind(4, job_finished(state) ? unix_time_s() : 0.0);
        LOOM_TRY(s.run());
        if (job_finished(state)) {
            // A finished job's plan is no longer needed.
            sqlite::Stmt del(db, where_, "cannot record the job's state");
            LOOM_TRY(del.prepare("DELETE FROM segments WHERE job = ?1"));
            del.bind(1, id);
            LOOM_TRY(del.run());
            LOOM_TRY(prune_locked());
        }
        return {};
    });
}

Status Journal::mark_started(int64_t id) {
    std::lock_guard lock(mutex_);
    return write("cannot record the job's start", [&](sqlite3* db) -> Status {
        sqlite::Stmt s(db, where_, "cannot record the job's start");
        LOOM_TRY(s.prepare("UPDATE jobs SET state = 'running', attempts = attempts + 1, started_at = CASE WHEN "
                           "started_at = 0 THEN ?2 ELSE started_at END WHERE id = ?1"));
        s.bind(1, id);
        s.bind(2, unix_time_s());
        return s.run();
    });
}

Status Journal::prune_locked() {
    sqlite::Stmt s(db_.get(), where_, "cannot prune finished jobs");
    LOOM_TRY(s.prepare("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state IN ('done', 'failed', "
                       "'cancelled') ORDER BY id DESC LIMIT -1 OFFSET ?1)"));
    s.bind(1, keep_finished_);
    return s.run();
}

Result<std::vector<JobRecord>> Journal::load() {
    std::lock_guard lock(mutex_);
    std::vector<JobRecord> jobs;
    sqlite::Stmt s(db_.get(), where_, "cannot read the journal");
    LOOM_TRY(s.prepare(fmt::format("SELECT {} FROM jobs ORDER BY id", kJobColumns)));
    for (;;) {
        LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
        if (!row) break;
        JobRecord j;
        j.id = s.i64(0);
        j.client_id = s.text(1);
        j.pipeline = s.text(2);
        j.pipeline_text = s.text(3);
        j.base_dir = s.text(4);
        j.input = s.text(5);
        j.output = s.text(6);
        const std::string sets = s.text(7);
        j.priority = s.i64(8);
        j.overwrite = s.i64(9) != 0;
        const std::string state = s.text(10);
        j.error = s.text(11);
        j.submitted_at = s.f64(12);
        j.started_at = s.f64(13);
        j.finished_at = s.f64(14);
        j.frames_total = s.i64(15);
        j.attempts = s.i64(16);
        // A row that does not read is refused whole: the daemon does not run, or drop, a job it
        // cannot read.
        if (!job_state_from_name(state, j.state))
            return make_error(StatusCode::PARSE_ERROR, "{}: job {}: unknown state '{}'", path_, j.id, state);
        nlohmann::json sj = nlohmann::json::parse(sets, nullptr, false);
        if (!sj.is_array())
            return make_error(StatusCode::PARSE_ERROR, "{}: job {}: 'sets' is not a JSON array", path_, j.id);
        for (const auto& v : sj) {
            if (!v.is_string())
                return make_error(StatusCode::PARSE_ERROR, "{}: job {}: 'sets' holds a non-string", path_, j.id);
            j.sets.push_back(v.get<std::string>());
        }
        jobs.push_back(std::move(j));
    }
    sqlite::Stmt seg(db_.get(), where_, "cannot read the journal");
    LOOM_TRY(seg.prepare("SELECT idx, start_frame, frame_count, done, frames, bytes, wall_s FROM segments WHERE job "
                         "= ?1 ORDER BY idx"));
    for (JobRecord& j : jobs) {
        if (job_finished(j.state)) continue;
        seg.reset();
        seg.bind(1, j.id);
        for (;;) {
            LOOM_ASSIGN_OR_RETURN(const bool row, seg.step());
            if (!row) break;
            if (seg.i64(0) != static_cast<int64_t>(j.segments.size()))
                return make_error(StatusCode::PARSE_ERROR, "{}: job {}: segment {} is missing", path_, j.id,
                                  j.segments.size());
            SegmentRecord r;
            r.start_frame = seg.i64(1);
            r.frame_count = seg.i64(2);
            r.done = seg.i64(3) != 0;
            r.frames = seg.i64(4);
            r.bytes = seg.i64(5);
            r.wall_s = seg.f64(6);
            // {0, -1}: the whole file, the one segment of an input that cannot be cut.
            const bool whole = r.start_frame == 0 && r.frame_count == -1 && j.segments.empty();
            if (!whole && (r.start_frame < 0 || r.frame_count < 1))
                return make_error(StatusCode::PARSE_ERROR, "{}: job {}: segment {} has frames [{}, +{})", path_, j.id,
                                  j.segments.size(), r.start_frame, r.frame_count);
            j.segments.push_back(r);
        }
    }
    return jobs;
}

}  // namespace loom::daemon
