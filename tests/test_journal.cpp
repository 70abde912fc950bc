// The daemon's job journal (daemon/journal.hpp) and configuration (daemon/config.hpp): what is
// committed survives a reopen, a retried client id finds its job, finished jobs are pruned, and
// every file the daemon must not trust (damaged, another program's, a newer schema) is refused
// whole, naming the path; configuration mistakes name file:line:col and the field.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "daemon/config.hpp"
#include "daemon/journal.hpp"
#include "test_util.hpp"

namespace loom::daemon::test_journal {  // apart from the rest of its unity batch
namespace {

using loom::test::TempDir;

JobRecord job(const std::string& client_id = {}) {
    JobRecord r;
    r.client_id = client_id;
    r.pipeline = "restore-x2";
    r.pipeline_text = "[pipeline]\nname = \"restore-x2\"\n";
    r.base_dir = "/srv/pipelines";
    r.input = "/srv/in.mp4";
    r.output = "/srv/out.mkv";
    r.sets = {"encode.crf=20", "restore.precision=\"fp16\""};
    r.priority = 5;
    r.overwrite = true;
    return r;
}

TEST(Journal, WhatIsCommittedSurvivesAReopenWithItsPlanAndState) {
    TempDir dir;
    const std::string path = dir.file("journal.db");
    int64_t id = 0;
    {
        auto j = Journal::open(path);
        ASSERT_TRUE(j.ok()) << j.status().to_string();
        JobRecord r = job();
        ASSERT_TRUE((*j)->insert(r).ok());
        id = r.id;
        EXPECT_GT(id, 0);
        EXPECT_GT(r.submitted_at, 0);
        ASSERT_TRUE((*j)->mark_started(id).ok());
        ASSERT_TRUE((*j)->set_plan(id, {{0, 240}, {240, 250}, {490, 10}}, 500).ok());
        SegmentRecord done{0, 240, true, 240, 123456, 1.5};
        ASSERT_TRUE((*j)->segment_done(id, 0, done).ok());
        EXPECT_FALSE((*j)->segment_done(id, 7, done).ok());  // no such segment
        EXPECT_GE((*j)->commit_latency().count, 4u);
    }
    auto j = Journal::open(path);
    ASSERT_TRUE(j.ok()) << j.status().to_string();
    auto jobs = (*j)->load();
    ASSERT_TRUE(jobs.ok()) << jobs.status().to_string();
    ASSERT_EQ(jobs->size(), 1u);
    const JobRecord& r = jobs->front();
    EXPECT_EQ(r.id, id);
    EXPECT_EQ(r.state, JobState::RUNNING);
    EXPECT_EQ(r.attempts, 1);
    EXPECT_EQ(r.sets, job().sets);
    EXPECT_EQ(r.pipeline_text, job().pipeline_text);
    EXPECT_TRUE(r.overwrite);
    EXPECT_EQ(r.priority, 5);
    EXPECT_EQ(r.frames_total, 500);
    ASSERT_EQ(r.segments.size(), 3u);
    EXPECT_TRUE(r.segments[0].done);
    EXPECT_EQ(r.segments[0].bytes, 123456);
    EXPECT_FALSE(r.segments[1].done);
    EXPECT_EQ(r.segments[2].start_frame, 490);
}

// An input that cannot be cut runs as one segment {0, -1} (the whole file): a restart must read
// it back, or the daemon would refuse its own journal.
TEST(Journal, TheWholeFileSegmentOfAnUncutInputReadsBack) {
    TempDir dir;
    const std::string path = dir.file("journal.db");
    int64_t id = 0;
    {
        auto j = Journal::open(path);
        ASSERT_TRUE(j.ok());
        JobRecord r = job();
        ASSERT_TRUE((*j)->insert(r).ok());
        id = r.id;
        ASSERT_TRUE((*j)->set_plan(id, {{0, -1}}, 0).ok());
    }
    auto j = Journal::open(path);
    ASSERT_TRUE(j.ok());
    auto jobs = (*j)->load();
    ASSERT_TRUE(jobs.ok()) << jobs.status().to_string();
    ASSERT_EQ(jobs->size(), 1u);
    ASSERT_EQ((*jobs)[0].segments.size(), 1u);
    EXPECT_EQ((*jobs)[0].segments[0].frame_count, -1);
    // Anywhere else, or beside other segments, a count below 1 is damage.
    ASSERT_TRUE((*j)->set_plan(id, {{0, 10}, {10, -1}}, 0).ok());
    EXPECT_FALSE((*j)->load().ok());
}

TEST(Journal, ARetriedClientIdFindsItsJobAndCommitsNothing) {
    TempDir dir;
    auto j = Journal::open(dir.file("journal.db"));
    ASSERT_TRUE(j.ok());
    JobRecord a = job("client-7"), b = job("client-7"), c = job(), d = job();
    bool existed = true;
    ASSERT_TRUE((*j)->insert(a, &existed).ok());
    EXPECT_FALSE(existed);
    ASSERT_TRUE((*j)->insert(b, &existed).ok());
    EXPECT_TRUE(existed);
    EXPECT_EQ(b.id, a.id);
    // Jobs without a client id never collide.
    ASSERT_TRUE((*j)->insert(c).ok());
    ASSERT_TRUE((*j)->insert(d).ok());
    EXPECT_NE(c.id, d.id);
    EXPECT_EQ((*j)->load()->size(), 3u);
}

TEST(Journal, FinishedJobsBeyondTheLimitArePrunedOldestFirst) {
    TempDir dir;
    auto j = Journal::open(dir.file("journal.db"), 2);
    ASSERT_TRUE(j.ok());
    std::vector<int64_t> ids;
    for (int i = 0; i < 5; ++i) {
        JobRecord r = job();
        ASSERT_TRUE((*j)->insert(r).ok());
        ids.push_back(r.id);
    }
    ASSERT_TRUE((*j)->set_plan(ids[0], {{0, 10}}, 10).ok());
    for (int i = 0; i < 4; ++i) {
        const Status st = (*j)->set_state(ids[i], JobState::DONE);
        ASSERT_TRUE(st.ok()) << st.to_string();
    }
    ASSERT_TRUE((*j)->set_state(ids[3], JobState::FAILED, "IO_ERROR: disk full").ok());
    auto jobs = (*j)->load();
    ASSERT_TRUE(jobs.ok());
    // The queued job and the latest two finished ones remain.
    ASSERT_EQ(jobs->size(), 3u);
    EXPECT_EQ((*jobs)[0].id, ids[2]);
    EXPECT_EQ((*jobs)[1].id, ids[3]);
    EXPECT_EQ((*jobs)[1].state, JobState::FAILED);
    EXPECT_EQ((*jobs)[1].error, "IO_ERROR: disk full");
    EXPECT_GT((*jobs)[1].finished_at, 0);
    EXPECT_EQ((*jobs)[2].id, ids[4]);
    EXPECT_EQ((*jobs)[2].state, JobState::QUEUED);
}

TEST(Journal, FilesItMustNotTrustAreRefusedWholeNamingThePath) {
    TempDir dir;
    // Not a database at all.
    const std::string garbage = dir.write("garbage.db", std::string(8192, 'x')).string();
    auto g = Journal::open(garbage);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::PARSE_ERROR) << g.status().to_string();
    EXPECT_NE(g.status().message().find(garbage), std::string::npos) << g.status().message();
    // Another program's database.
    const std::string other = dir.file("other.db");
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x); INSERT INTO t VALUES (1)", nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
    }
    auto o = Journal::open(other);
    ASSERT_FALSE(o.ok());
    EXPECT_NE(o.status().message().find("not a Loom job journal"), std::string::npos) << o.status().message();
    // A journal of a newer schema.
    const std::string newer = dir.file("newer.db");
    ASSERT_TRUE(Journal::open(newer).ok());
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
    }
    auto n = Journal::open(newer);
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), StatusCode::UNSUPPORTED) << n.status().to_string();
    // A journal whose pages were overwritten in the middle.
    const std::string damaged = dir.file("damaged.db");
    {
        auto j = Journal::open(damaged);
        ASSERT_TRUE(j.ok());
        for (int i = 0; i < 200; ++i) {
            JobRecord r = job();
            r.pipeline_text = std::string(2000, 'p');
            ASSERT_TRUE((*j)->insert(r).ok());
        }
    }
    {
        // Fold the WAL in first, so the damage lands in the main file.
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(damaged.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
        std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(4096 * 3);
        const std::string junk(4096 * 4, '\x5a');
        f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    }
    auto d = Journal::open(damaged);
    Status st = d.ok() ? (*d)->load().status() : d.status();
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(damaged), std::string::npos) << st.message();
    // A folder that does not exist.
    auto missing = Journal::open(dir.file("no/such/folder/journal.db"));
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), StatusCode::IO_ERROR);
    EXPECT_NE(missing.status().message().find("no/such/folder/journal.db"), std::string::npos);
}

TEST(DaemonConfig, WithoutAFileTheDefaultsServeTheCurrentUser) {
    auto c = load_config("");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->device, "edge");
    EXPECT_EQ(c->jobs_running, 1);
    EXPECT_FALSE(c->control.empty());
    EXPECT_EQ(c->events, c->control + "-events");
    EXPECT_FALSE(c->state_dir.empty());
    ASSERT_EQ(c->allow.size(), 1u);
    EXPECT_TRUE(std::filesystem::path(c->allow[0]).is_absolute());
    EXPECT_TRUE(c->metrics.empty());
}

TEST(DaemonConfig, AFileSetsEveryFieldWithPathsRelativeToIt) {
    TempDir dir;
    const std::string path = dir.write("loomd.toml", R"([device]
preset = "dc"
threads = 4
[control]
endpoint = "tcp://127.0.0.1:5600"
[paths]
state = "state"
pipelines = "/srv/pipelines"
allow = ["media", "/srv/video"]
[limits]
jobs_running = 2
jobs_queued = 8
pixels_per_frame_max = 2073600
[jobs]
segment_seconds = 2.5
keep_finished = 10
[metrics]
address = "127.0.0.1:9464"
)").string();
    auto c = load_config(path);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->device, "dc");
    EXPECT_EQ(c->threads, 4u);
    EXPECT_EQ(c->events, "tcp://127.0.0.1:5601");
    EXPECT_EQ(c->state_dir, dir.file("state"));
    EXPECT_EQ(c->pipelines_dir, "/srv/pipelines");
    EXPECT_EQ(c->allow, (std::vector<std::string>{dir.file("media"), "/srv/video"}));
    EXPECT_EQ(c->jobs_running, 2);
    EXPECT_EQ(c->jobs_queued, 8);
    EXPECT_EQ(c->pixels_per_frame_max, 2073600);
    EXPECT_DOUBLE_EQ(c->segment_seconds, 2.5);
    EXPECT_EQ(c->keep_finished, 10);
    EXPECT_EQ(c->metrics, "127.0.0.1:9464");
    EXPECT_EQ(c->journal_path(), dir.file("state") + "/journal.db");
}

TEST(DaemonConfig, MistakesNameTheFileLineAndField) {
    TempDir dir;
    auto refused = [&](const std::string& text, const std::string& needle) {
        const std::string path = dir.write("bad.toml", text).string();
        auto c = load_config(path);
        ASSERT_FALSE(c.ok()) << text;
        EXPECT_EQ(c.status().code(), StatusCode::PARSE_ERROR) << c.status().to_string();
        EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().message();
        EXPECT_EQ(c.status().message().rfind(path, 0), 0u) << c.status().message();
    };
    refused("[limits]\njobs_running = \"two\"\n", "bad.toml:2:16: [limits]: 'jobs_running' must be an integer");
    refused("[limits]\njobs_running = 0\n", "out of range");
    refused("[limits]\njobs_runing = 1\n", "unknown field 'jobs_runing'");
    refused("[metric]\naddress = \"x\"\n", "bad.toml:1:2: unknown section 'metric'");
    refused("device = \"edge\"\n", "'device' must be a table");
    refused("[metrics]\naddress = \"localhost\"\n", "is not HOST:PORT");
    refused("[paths]\nallow = \"/srv\"\n", "'allow' must be a list of folders");
    refused("[paths]\nallow = [\"/srv\", 3]\n", "bad.toml:2:18: [paths]: 'allow' holds a non-folder");
    refused("[control]\nendpoint = \"ipc:///tmp/x\"\nevents = \"ipc:///tmp/x\"\n", "is the control endpoint");
    refused("[limits\n", "bad.toml:1:");
    auto missing = load_config(dir.file("none.toml"));
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.status().message().find("none.toml"), std::string::npos);
}

}  // namespace
}  // namespace loom::daemon::test_journal
