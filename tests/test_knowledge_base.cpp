// The tuner's knowledge base (tuner/kb.hpp), clause by clause of issue 15: a round trip through
// put, lookup, export and import; a record is only replaced by a better one; stale records
// (another spec hash or cost-model version) are reported and never returned; nearest shapes
// come in log-distance order; several processes writing at once keep the best of each key and
// a sound file; a writer killed mid-write loses nothing it committed; a corrupt, truncated,
// foreign or future file is refused naming the path and left byte for byte as it was; an
// import with bad records names each record and field and imports nothing.
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "common/version.hpp"
#include "compiler/model_file.hpp"
#include "test_util.hpp"
#include "tuner/kb.hpp"

namespace loom::test_knowledge_base {  // apart from the rest of its unity batch
namespace {

using tuner::KbCurrent;
using tuner::KbFilter;
using tuner::KbKey;
using tuner::KbRecord;
using tuner::KnowledgeBase;

constexpr uint64_t kSpecA = 0x1111222233334444ull;
constexpr uint64_t kSpecB = 0x5555666677778888ull;

// A conv launch of `channels` channels over an h x w image.
KbKey conv_key(int64_t channels, int64_t h, int64_t w, uint64_t spec = kSpecA, int64_t cost_model = 1) {
    KbKey k;
    k.kernel = "conv";
    k.signature = "f16,f16->f16";
    k.dims = {{1, channels, h, w}, {channels, channels, 3, 3}, {1, channels, h, w}};
    k.attrs = "group=1;pads=[1,1,1,1];strides=[1,1]";
    k.spec_hash = spec;
    k.cost_model_version = cost_model;
    return k;
}

KbRecord record(KbKey key, double cost_ns, int64_t m_l0 = 16) {
    KbRecord r;
    r.key = std::move(key);
    r.spec_name = r.key.spec_hash == kSpecB ? "dc" : "edge";
    device::CubeTiling t;
    t.m_l0 = m_l0, t.n_l0 = 16, t.k_l0 = 32;
    t.m_l1 = 4 * m_l0, t.n_l1 = 64, t.k_l1 = 128;
    t.cores = 2;
    r.tiling = t;
    r.cost_ns = cost_ns;
    r.default_cost_ns = 2000;
    r.method = "ga";
    r.trials = 300;
    r.seconds = 1.5;
    r.seed = 0xfedcba9876543210ull;  // over INT64_MAX: the stored bits must come back
    return r;
}

Result<KnowledgeBase> open_kb(const std::string& path) { return KnowledgeBase::open(path); }

std::string file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs `sql` on `path` with SQLite directly (to build foreign and damaged files).
void raw_sql(const std::string& path, const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

TEST(KnowledgeBase, KeyTextHashAndChecks) {
    const KbKey k = conv_key(64, 56, 56);
    EXPECT_EQ(k.text(),
              "conv|f16,f16->f16|1x64x56x56;64x64x3x3;1x64x56x56|group=1;pads=[1,1,1,1];strides=[1,1]|"
              "1111222233334444|1");
    EXPECT_EQ(k.hash(), conv_key(64, 56, 56).hash());
    EXPECT_NE(k.hash(), conv_key(64, 56, 57).hash());
    EXPECT_TRUE(k.check().ok());
    KbKey bad = k;
    bad.signature = "f16,f99->f16";
    EXPECT_TRUE(contains(bad.check().message(), "signature")) << bad.check().message();
    bad = k;
    bad.dims.pop_back();
    EXPECT_TRUE(contains(bad.check().message(), "dims: 2 tensors, the signature 'f16,f16->f16' has 3"));
    bad = k;
    bad.kernel = "conv|2d";
    EXPECT_FALSE(bad.check().ok());
    bad = k;
    bad.dims[0][1] = -1;
    EXPECT_TRUE(contains(bad.check().message(), "tensor 0: dim 1 = -1"));
    KbRecord r = record(k, 100);
    r.tiling = std::monostate{};
    EXPECT_TRUE(contains(r.check().message(), "tiling: null"));
    r = record(k, 100);
    std::get<device::CubeTiling>(r.tiling).m_l1 = 24;
    EXPECT_TRUE(contains(r.check().message(), "m_l1 = 24 is not a multiple of its L0 size 16")) << r.check().message();
    r = record(k, std::nan(""));
    EXPECT_TRUE(contains(r.check().message(), "cost_ns"));
    // Times read back as written; a date alone is its midnight.
    EXPECT_EQ(tuner::kb_time_text(1795615380), "2026-11-25T14:03:00Z");
    EXPECT_EQ(*tuner::kb_time_from_text("2026-11-25T14:03:00Z"), 1795615380);
    EXPECT_EQ(*tuner::kb_time_from_text("2026-11-25"), 1795564800);
    EXPECT_FALSE(tuner::kb_time_from_text("2026-02-30").ok());
    EXPECT_FALSE(tuner::kb_time_from_text("2026-11-25 14:03").ok());
}

TEST(KnowledgeBase, RoundTripPutLookupExportImport) {
    test::TempDir dir;
    auto kb = open_kb(dir.file("a.db"));
    ASSERT_TRUE(kb.ok()) << kb.status().to_string();
    std::vector<KbRecord> put;
    for (int64_t c : {16, 32, 64}) put.push_back(record(conv_key(c, 28, 28), 100.0 * static_cast<double>(c)));
    KbRecord vector = record(conv_key(8, 8, 8), 50);
    vector.key.kernel = "softmax";
    vector.key.signature = "f32->f32";
    vector.key.dims = {{4, 1000}, {4, 1000}};
    vector.key.attrs = "axis=-1";
    device::VectorSchedule v;
    v.ub_tile = 2048, v.cores = 4, v.vector_axis = device::VectorAxis::AXIS, v.vector_tile = 1008;
    v.fuse_output = true, v.fuse_ub_buffers = 2;
    vector.tiling = v;
    vector.method = "mcts";
    put.push_back(vector);
    Result<size_t> changed = kb->put(put);
    ASSERT_TRUE(changed.ok()) << changed.status().to_string();
    EXPECT_EQ(*changed, 4u);

    for (const KbRecord& want : put) {
        Result<tuner::KbLookup> got = kb->lookup(want.key);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        ASSERT_TRUE(got->record.has_value()) << want.key.text();
        EXPECT_EQ(got->stale, 0);
        EXPECT_EQ(got->record->key, want.key);
        EXPECT_EQ(compiler::tiling_json(got->record->tiling), compiler::tiling_json(want.tiling));
        EXPECT_EQ(got->record->cost_ns, want.cost_ns);
        EXPECT_EQ(got->record->seed, want.seed);
        EXPECT_EQ(got->record->method, want.method);
        EXPECT_EQ(got->record->loom_version, kVersion);
        EXPECT_GT(got->record->created_s, 0);
    }
    EXPECT_FALSE(kb->lookup(conv_key(16, 28, 29))->record.has_value());

    // Export, import into an empty file: the same records, field for field.
    Result<std::string> json = kb->export_json();
    ASSERT_TRUE(json.ok()) << json.status().to_string();
    const std::string exported = dir.write("kb.json", *json).string();
    auto other = open_kb(dir.file("b.db"));
    ASSERT_TRUE(other.ok());
    Result<tuner::KbImportReport> report = other->import_file(exported);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    EXPECT_EQ(report->records, 4u);
    EXPECT_EQ(report->inserted, 4u);
    auto a = kb->list(), b = other->list();
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
        nlohmann::json ja = tuner::kb_record_json((*a)[i]), jb = tuner::kb_record_json((*b)[i]);
        ja.erase("updated"), jb.erase("updated");  // the importing file's own change time
        EXPECT_EQ(ja, jb);
    }
    // Importing the same file again changes nothing: equal costs are not better.
    report = other->import_file(exported);
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->kept, 4u);
    EXPECT_EQ(report->inserted + report->replaced, 0u);

    // show by key text and by hash prefix; filters.
    auto shown = kb->show(put[0].key.text());
    ASSERT_TRUE(shown.ok());
    ASSERT_EQ(shown->size(), 1u);
    shown = kb->show(fmt::format("{:016x}", put[1].key.hash()).substr(0, 8));
    ASSERT_TRUE(shown.ok());
    ASSERT_GE(shown->size(), 1u);
    EXPECT_EQ((*shown)[0].key, put[1].key);
    KbFilter softmax;
    softmax.kernel = "softmax";
    EXPECT_EQ(kb->list(softmax)->size(), 1u);
    EXPECT_TRUE(kb->integrity_check().ok());
}

TEST(KnowledgeBase, OnlyABetterRecordReplaces) {
    test::TempDir dir;
    auto kb = open_kb(dir.file("kb.db"));
    ASSERT_TRUE(kb.ok());
    const KbKey k = conv_key(32, 14, 14);
    EXPECT_TRUE(*kb->put(record(k, 500, 16)));
    EXPECT_FALSE(*kb->put(record(k, 600, 32)));  // worse
    EXPECT_FALSE(*kb->put(record(k, 500, 32)));  // equal
    EXPECT_EQ(std::get<device::CubeTiling>(kb->lookup(k)->record->tiling).m_l0, 16);
    EXPECT_TRUE(*kb->put(record(k, 400, 48)));  // better
    const auto got = kb->lookup(k)->record;
    EXPECT_EQ(got->cost_ns, 400);
    EXPECT_EQ(std::get<device::CubeTiling>(got->tiling).m_l0, 48);
    EXPECT_EQ(kb->list()->size(), 1u);
    // A batch is one transaction: a bad record refuses all of it.
    std::vector<KbRecord> batch = {record(conv_key(8, 8, 8), 10), record(conv_key(8, 8, 9), -1)};
    Result<size_t> r = kb->put(batch);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.status().message(), "put: record 1: cost_ns")) << r.status().message();
    EXPECT_EQ(kb->list()->size(), 1u);
}

TEST(KnowledgeBase, StaleRecordsAreReportedAndNeverUsed) {
    test::TempDir dir;
    auto kb = open_kb(dir.file("kb.db"));
    ASSERT_TRUE(kb.ok());
    // Tuned under cost model 1 for spec A, and for spec B.
    ASSERT_TRUE(*kb->put(record(conv_key(64, 56, 56, kSpecA, 1), 900)));
    ASSERT_TRUE(*kb->put(record(conv_key(64, 56, 56, kSpecB, 1), 700)));
    // The cost model moved to version 2: both are stale for a version-2 lookup, and reported.
    Result<tuner::KbLookup> got = kb->lookup(conv_key(64, 56, 56, kSpecA, 2));
    ASSERT_TRUE(got.ok());
    EXPECT_FALSE(got->record.has_value());
    EXPECT_EQ(got->stale, 2);
    // Nor does nearest() offer them as seeds.
    EXPECT_TRUE(kb->nearest(conv_key(64, 56, 56, kSpecA, 2), 5)->empty());
    // Under version 1, spec A's record is the one returned; spec B's is reported.
    got = kb->lookup(conv_key(64, 56, 56, kSpecA, 1));
    ASSERT_TRUE(got->record.has_value());
    EXPECT_EQ(got->record->cost_ns, 900);
    EXPECT_EQ(got->stale, 1);

    // list --stale and prune --stale against version 2, edge = spec A: every record is stale;
    // against version 1 with edge's hash changed, only the edge record is.
    KbCurrent v1{1, {{"edge", 0x99}, {"dc", kSpecB}}};
    KbFilter stale;
    stale.stale_only = true;
    stale.current = &v1;
    auto listed = kb->list(stale);
    ASSERT_TRUE(listed.ok());
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ(listed->front().spec_name, "edge");
    tuner::KbPrune prune;
    prune.stale = &v1;
    EXPECT_EQ(*kb->prune(prune), 1u);
    EXPECT_FALSE(kb->lookup(conv_key(64, 56, 56, kSpecA, 1))->record.has_value());
    EXPECT_TRUE(kb->lookup(conv_key(64, 56, 56, kSpecB, 1))->record.has_value());
    // prune by spec name, and by date.
    ASSERT_TRUE(*kb->put(record(conv_key(32, 56, 56, kSpecA, 1), 300)));
    tuner::KbPrune by_date;
    by_date.updated_before_s = 0;
    EXPECT_EQ(*kb->prune(by_date), 0u);
    by_date.updated_before_s = *tuner::kb_time_from_text("9999-01-01");
    by_date.spec = "dc";
    EXPECT_EQ(*kb->prune(by_date), 1u);
    EXPECT_EQ(kb->list()->size(), 1u);
    EXPECT_FALSE(kb->prune({}).ok());  // no criterion: refused, not "everything"
}

TEST(KnowledgeBase, NearestShapesComeInLogDistanceOrder) {
    test::TempDir dir;
    auto kb = open_kb(dir.file("kb.db"));
    ASSERT_TRUE(kb.ok());
    // Same kernel, attributes, spec and model at several sizes; plus records nearest() must skip.
    for (int64_t hw : {7, 14, 28, 56, 112}) ASSERT_TRUE(*kb->put(record(conv_key(64, hw, hw), 100)));
    ASSERT_TRUE(*kb->put(record(conv_key(64, 28, 28, kSpecB), 100)));     // another spec
    ASSERT_TRUE(*kb->put(record(conv_key(64, 28, 28, kSpecA, 2), 100)));  // another cost model
    KbRecord other_attrs = record(conv_key(64, 28, 28), 100);
    other_attrs.key.attrs = "group=64";
    ASSERT_TRUE(*kb->put(other_attrs));
    KbRecord other_rank = record(conv_key(64, 28, 28), 100);
    other_rank.key.dims[0] = {64, 28, 28};
    ASSERT_TRUE(*kb->put(other_rank));

    // 30x30 sits between 28 and 56: distance over the four spatial dims (input and output
    // h and w) is 4 |log2(30/28)| = 0.398 for 28, 4 log2(56/30) = 3.60 for 56, then 14, 112, 7.
    auto near = kb->nearest(conv_key(64, 30, 30), 10);
    ASSERT_TRUE(near.ok()) << near.status().to_string();
    std::vector<int64_t> order;
    for (const auto& n : *near) order.push_back(n.record.key.dims[0][2]);
    EXPECT_EQ(order, (std::vector<int64_t>{28, 56, 14, 112, 7}));
    EXPECT_NEAR((*near)[0].distance, 4 * std::log2(30.0 / 28.0), 1e-12);
    for (size_t i = 1; i < near->size(); ++i) EXPECT_LE((*near)[i - 1].distance, (*near)[i].distance);
    // n bounds the answer; the key itself comes first at distance 0.
    near = kb->nearest(conv_key(64, 56, 56), 2);
    ASSERT_EQ(near->size(), 2u);
    EXPECT_EQ((*near)[0].distance, 0);
    EXPECT_EQ((*near)[0].record.key, conv_key(64, 56, 56));
}

// Writer p's i-th put: 50 keys shared by all writers, a cost that differs per writer.
KbRecord concurrent_record(int p, int i) {
    const int k = (i * 7 + p * 13) % 50;
    return record(conv_key(16, 8 + k, 8), 1000.0 + static_cast<double>((p * 31 + i * 17) % 101));
}

TEST(KnowledgeBase, ConcurrentWritersKeepTheBestOfEachKey) {
    test::TempDir dir;
    const std::string path = dir.file("kb.db");
    constexpr int kWriters = 4, kPuts = 200;
    std::vector<pid_t> children;
    for (int p = 0; p < kWriters; ++p) {
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            // The writers also race to create the file.
            auto kb = open_kb(path);
            if (!kb.ok()) {
                std::fprintf(stderr, "writer %d: %s\n", p, kb.status().to_string().c_str());
                ::_exit(2);
            }
            for (int i = 0; i < kPuts; ++i) {
                Result<bool> r = kb->put(concurrent_record(p, i));
                if (!r.ok()) {
                    std::fprintf(stderr, "writer %d put %d: %s\n", p, i, r.status().to_string().c_str());
                    ::_exit(1);
                }
            }
            ::_exit(0);
        }
        children.push_back(pid);
    }
    for (pid_t pid : children) {
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer status " << status;
    }
    std::map<std::string, double> best;
    for (int p = 0; p < kWriters; ++p)
        for (int i = 0; i < kPuts; ++i) {
            const KbRecord r = concurrent_record(p, i);
            auto [it, inserted] = best.emplace(r.key.text(), r.cost_ns);
            if (!inserted) it->second = std::min(it->second, r.cost_ns);
        }
    auto kb = open_kb(path);
    ASSERT_TRUE(kb.ok()) << kb.status().to_string();
    EXPECT_TRUE(kb->integrity_check().ok());
    auto all = kb->list();
    ASSERT_TRUE(all.ok());
    ASSERT_EQ(all->size(), best.size());
    for (const KbRecord& r : *all) EXPECT_EQ(r.cost_ns, best.at(r.key.text())) << r.key.text();
}

TEST(KnowledgeBase, AKilledWriterLosesNothingItCommitted) {
    test::TempDir dir;
    const std::string path = dir.file("kb.db");
    constexpr int kBatch = 20;
    int next_batch = 0;  // batches 0 .. next_batch-1 were acknowledged as committed
    // Three writers, each killed while writing batches of 20 records as fast as it can.
    for (int round = 0; round < 3; ++round) {
        int fds[2];
        ASSERT_EQ(::pipe(fds), 0);
        const int first = next_batch;
        const pid_t pid = ::fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            ::close(fds[0]);
            auto kb = open_kb(path);
            if (!kb.ok()) ::_exit(2);
            for (int b = first;; ++b) {
                std::vector<KbRecord> batch;
                for (int i = 0; i < kBatch; ++i) batch.push_back(record(conv_key(8, 1 + b, 1 + i), 100.0 + i));
                if (!kb->put(batch).ok()) ::_exit(1);
                if (::write(fds[1], &b, sizeof b) != static_cast<ssize_t>(sizeof b)) ::_exit(3);
            }
        }
        ::close(fds[1]);
        int acked = -1, b = 0;
        while (acked < first + 30 && ::read(fds[0], &b, sizeof b) == static_cast<ssize_t>(sizeof b)) acked = b;
        ASSERT_EQ(::kill(pid, SIGKILL), 0);
        int status = 0;
        ASSERT_EQ(::waitpid(pid, &status, 0), pid);
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "writer status " << status;
        while (::read(fds[0], &b, sizeof b) == static_cast<ssize_t>(sizeof b)) acked = b;
        ::close(fds[0]);
        ASSERT_GE(acked, first + 30);

        auto kb = open_kb(path);
        ASSERT_TRUE(kb.ok()) << kb.status().to_string();
        ASSERT_TRUE(kb->integrity_check().ok());
        for (int batch = 0; batch <= acked; ++batch)
            for (int i = 0; i < kBatch; i += 7) {
                auto got = kb->lookup(conv_key(8, 1 + batch, 1 + i));
                ASSERT_TRUE(got.ok() && got->record.has_value()) << "batch " << batch << " record " << i;
                EXPECT_EQ(got->record->cost_ns, 100.0 + i);
            }
        // A batch is all there or not at all: the kill never leaves half of one.
        auto all = kb->list();
        ASSERT_TRUE(all.ok());
        EXPECT_EQ(all->size() % kBatch, 0u);
        EXPECT_GE(all->size(), static_cast<size_t>(acked + 1) * kBatch);
        next_batch = static_cast<int>(all->size()) / kBatch;
    }
}

TEST(KnowledgeBase, AWriterWaitsForTheLockABoundedTimeAndSaysSo) {
    test::TempDir dir;
    const std::string path = dir.file("kb.db");
    tuner::KbOptions options;
    options.busy_wait_ms = 100;
    auto kb = KnowledgeBase::open(path, options);
    ASSERT_TRUE(kb.ok());
    // Another connection holds the write lock (as another loomc tune would, mid-transaction).
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    Result<bool> r = kb->put(record(conv_key(8, 8, 8), 10));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_TRUE(contains(r.status().message(), path + ": cannot lock for writing")) << r.status().message();
    EXPECT_TRUE(contains(r.status().message(), "locked for over 100 ms")) << r.status().message();
    EXPECT_GT(kb->busy_waits(), 0u);
    // Readers are not blocked meanwhile, and once the lock is released the write goes through.
    EXPECT_TRUE(kb->lookup(conv_key(8, 8, 8)).ok());
    ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(other);
    EXPECT_TRUE(*kb->put(record(conv_key(8, 8, 8), 10)));
}

// Opens `path`, expecting a refusal that names it and contains `why`; the file must be left
// byte for byte.
void expect_refused(const std::string& path, std::string_view why) {
    const std::string before = file_bytes(path);
    auto kb = open_kb(path);
    ASSERT_FALSE(kb.ok());
    EXPECT_TRUE(contains(kb.status().message(), path)) << kb.status().message();
    EXPECT_TRUE(contains(kb.status().message(), why)) << kb.status().message();
    EXPECT_EQ(file_bytes(path), before);
}

TEST(KnowledgeBase, RandomBytesAreRefusedAndLeftAsTheyWere) {
    test::TempDir dir;
    std::mt19937 rng(15);
    std::string noise(8192, '\0');
    for (char& c : noise) c = static_cast<char>(rng());
    expect_refused(dir.write("noise.db", noise).string(), "not a SQLite database");
    // Text that starts like a SQLite header but is not one.
    expect_refused(dir.write("short.db", "SQLite format").string(), "not a SQLite database");
    // A folder is not a file.
    std::filesystem::create_directories(dir.file("folder.db"));
    auto kb = open_kb(dir.file("folder.db"));
    ASSERT_FALSE(kb.ok());
    EXPECT_TRUE(contains(kb.status().message(), "not a regular file"));
}

TEST(KnowledgeBase, ATruncatedFileIsReportedNamingItAndLeftAsItWas) {
    test::TempDir dir;
    const std::string path = dir.file("kb.db");
    {
        auto kb = open_kb(path);
        ASSERT_TRUE(kb.ok());
        std::vector<KbRecord> many;
        for (int i = 0; i < 400; ++i) many.push_back(record(conv_key(4 + i, 9, 9), 10.0 + i));
        ASSERT_TRUE(kb->put(many).ok());
    }  // closing the last connection checkpoints the WAL into the file
    ASSERT_FALSE(std::filesystem::exists(path + "-wal"));
    const auto size = std::filesystem::file_size(path);
    ASSERT_GT(size, 16384u);
    std::filesystem::resize_file(path, size / 2);
    const std::string before = file_bytes(path);
    // Either the open or a read of a lost page fails; every message names the file.
    auto kb = open_kb(path);
    if (kb.ok()) {
        Status check = kb->integrity_check();
        EXPECT_FALSE(check.ok());
        EXPECT_TRUE(contains(check.message(), path)) << check.message();
        auto all = kb->list();
        ASSERT_FALSE(all.ok());
        EXPECT_TRUE(contains(all.status().message(), path)) << all.status().message();
        EXPECT_TRUE(contains(all.status().message(), "damaged")) << all.status().message();
    } else {
        EXPECT_TRUE(contains(kb.status().message(), path)) << kb.status().message();
    }
    kb = Status(StatusCode::CANCELLED, "closed");
    EXPECT_EQ(file_bytes(path), before);
}

TEST(KnowledgeBase, ForeignAndFutureFilesAreRefusedUnchanged) {
    test::TempDir dir;
    // Another application's database.
    const std::string app = dir.file("app.db");
    raw_sql(app, "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('ada');");
    expect_refused(app, "not a Loom knowledge base");
    // One that even has a meta table, under its own application id.
    const std::string other = dir.file("other.db");
    raw_sql(other, "PRAGMA application_id = 1234; CREATE TABLE meta (name TEXT, value TEXT);");
    expect_refused(other, "another application (application_id 0x4d2)");
    // A knowledge base from a newer Loom.
    const std::string future = dir.file("future.db");
    ASSERT_TRUE(open_kb(future).ok());
    raw_sql(future, "PRAGMA user_version = 99; UPDATE meta SET value = '99' WHERE name = 'schema_version';");
    expect_refused(future, "schema version 99 is newer than this Loom's (1)");
    // A knowledge base someone added a trigger to: not the schema, not run.
    const std::string trigger = dir.file("trigger.db");
    ASSERT_TRUE(open_kb(trigger).ok());
    raw_sql(trigger, "CREATE TRIGGER wipe AFTER INSERT ON records BEGIN DELETE FROM meta; END;");
    expect_refused(trigger, "holds the trigger 'wipe'");
    // A row whose fields disagree with its key is damage, named by its id; the other rows read.
    const std::string forged = dir.file("forged.db");
    {
        auto kb = open_kb(forged);
        ASSERT_TRUE(kb.ok());
        ASSERT_TRUE(*kb->put(record(conv_key(16, 8, 8), 50)));
        ASSERT_TRUE(*kb->put(record(conv_key(32, 8, 8), 50)));
    }
    raw_sql(forged, "UPDATE records SET dims = '1x16x9x9;16x16x3x3;1x16x8x8' WHERE id = 1;");
    auto kb = open_kb(forged);
    ASSERT_TRUE(kb.ok());
    auto got = kb->lookup(conv_key(16, 8, 8));
    ASSERT_FALSE(got.ok());
    EXPECT_TRUE(contains(got.status().message(), forged + ": record 1: its fields do not match its key"))
        << got.status().message();
    EXPECT_TRUE(kb->lookup(conv_key(32, 8, 8))->record.has_value());
}

TEST(KnowledgeBase, AnImportWithBadRecordsNamesEachAndImportsNothing) {
    test::TempDir dir;
    auto kb = open_kb(dir.file("kb.db"));
    ASSERT_TRUE(kb.ok());
    ASSERT_TRUE(*kb->put(record(conv_key(16, 8, 8), 50)));
    nlohmann::json good = tuner::kb_record_json(record(conv_key(64, 8, 8), 70));
    nlohmann::json no_cost = good, bad_tiling = good, bad_dims = good, bad_time = good, extra = good;
    no_cost.erase("cost_ns");
    bad_tiling["tiling"]["kind"] = "sphere";
    bad_dims["dims"] = {{1, 64, 8, 8}, {64, 64, 3, 3}};
    bad_time["created"] = "yesterday";
    extra["colour"] = "blue";
    nlohmann::json file = {
        {"format", "loom-kb"}, {"version", 1}, {"records", {good, no_cost, bad_tiling, bad_dims, bad_time, extra, 42}}};
    Result<tuner::KbImportReport> r = kb->import_json(file.dump(), "team.json");
    ASSERT_FALSE(r.ok());
    const std::string m = r.status().message();
    EXPECT_TRUE(contains(m, "team.json: 6 of 7 records refused; nothing imported")) << m;
    EXPECT_TRUE(contains(m, "team.json: record 1: cost_ns: missing")) << m;
    EXPECT_TRUE(contains(m, "team.json: record 2: tiling: unknown kind 'sphere'")) << m;
    EXPECT_TRUE(contains(m, "team.json: record 3: dims: 2 tensors")) << m;
    EXPECT_TRUE(contains(m, "team.json: record 4: created: 'yesterday' is not a UTC time")) << m;
    EXPECT_TRUE(contains(m, "team.json: record 5: colour: unknown field")) << m;
    EXPECT_TRUE(contains(m, "team.json: record 6: not an object")) << m;
    EXPECT_EQ(kb->list()->size(), 1u);  // record 0 was valid, and still not imported
    // A caller's check refuses what the file's form allows.
    file["records"] = nlohmann::json::array({good});  // not {good}: clang reads that as a copy of good
    r = kb->import_json(file.dump(), "team.json", [](const KbRecord& rec) {
        return rec.key.kernel == "conv" ? make_error(StatusCode::INVALID_ARGUMENT, "tiling: illegal for the kernel")
                                        : Status();
    });
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.status().message(), "record 0: tiling: illegal for the kernel"));
    // Whole-file problems.
    for (auto [text, why] : {std::pair<std::string, std::string>{"{\"format\": ", "team.json"},
                             {R"({"format": "other", "version": 1, "records": []})", "format: not 'loom-kb'"},
                             {R"({"format": "loom-kb", "version": 7, "records": []})", "export format version 7"},
                             {R"({"format": "loom-kb", "version": 1})", "records: missing"},
                             {"[1, 2]", "not a JSON object"}}) {
        r = kb->import_json(text, "team.json");
        ASSERT_FALSE(r.ok()) << text;
        EXPECT_TRUE(contains(r.status().message(), why)) << r.status().message();
    }
    // A file over the limit is refused from its size, unread.
    const std::string big = dir.file("big.json");
    { std::ofstream(big) << " "; }
    std::filesystem::resize_file(big, tuner::kKbImportBytesMax + 1);
    r = kb->import_file(big);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(contains(r.status().message(), "exceeds the limit")) << r.status().message();
    EXPECT_EQ(kb->list()->size(), 1u);
}

}  // namespace
}  // namespace loom::test_knowledge_base
