// The knowledge base's SQLite storage. Every write is one BEGIN IMMEDIATE transaction (the
// write lock is taken up front, so two writers never deadlock upgrading a read lock); the file
// is in WAL mode (readers never block the writer, and a process killed mid-write leaves a
// WAL whose uncommitted frames the next opener ignores). No SQLite, JSON or standard exception
// leaves this file: each becomes a Status naming the path.
#include <sqlite3.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "common/file.hpp"
#include "common/sqlite.hpp"
#include "common/json.hpp"
#include "common/text.hpp"
#include "common/version.hpp"
#include "compiler/model_file.hpp"
#include "tuner/kb.hpp"

namespace loom::tuner {

namespace {

// Schema version 1. STRICT tables: SQLite enforces the column types on every write.
constexpr const char* kSchemaSql = R"sql(
CREATE TABLE meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
CREATE TABLE records (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    key_hash TEXT NOT NULL,
    kernel TEXT NOT NULL,
    signature TEXT NOT NULL,
    dims TEXT NOT NULL,
    attrs TEXT NOT NULL,
    spec_hash TEXT NOT NULL,
    spec_name TEXT NOT NULL,
    cost_model_version INTEGER NOT NULL,
    tiling TEXT NOT NULL,
    cost_ns REAL NOT NULL,
    default_cost_ns REAL NOT NULL,
    method TEXT NOT NULL,
    trials INTEGER NOT NULL,
    seconds REAL NOT NULL,
    seed INTEGER NOT NULL,
    loom_version TEXT NOT NULL,
    created_s INTEGER NOT NULL,
    updated_s INTEGER NOT NULL
) STRICT;
CREATE INDEX records_shape ON records (kernel, signature, dims, attrs);
CREATE INDEX records_group ON records (kernel, signature, attrs, spec_hash, cost_model_version);
CREATE INDEX records_hash ON records (key_hash);
)sql";

// The schema's objects (sqlite_schema rows other than SQLite's own), sorted by name.
constexpr std::pair<const char*, const char*> kSchemaObjects[] = {
    {"table", "meta"},         {"table", "records"},       {"index", "records_group"},
    {"index", "records_hash"}, {"index", "records_shape"},
};

// The records columns, in the order kColumns selects them.
constexpr const char* kRecordColumns[] = {"id",      "key",     "key_hash",        "kernel",    "signature",
                                          "dims",    "attrs",   "spec_hash",       "spec_name", "cost_model_version",
                                          "tiling",  "cost_ns", "default_cost_ns", "method",    "trials",
                                          "seconds", "seed",    "loom_version",    "created_s", "updated_s"};
constexpr const char* kColumns =
    "id, key, key_hash, kernel, signature, dims, attrs, spec_hash, spec_name, cost_model_version, tiling, cost_ns, "
    "default_cost_ns, method, trials, seconds, seed, loom_version, created_s, updated_s";

// The export format's version (the JSON form of a record, docs/tuner.md).
constexpr int64_t kJsonVersion = 1;
// A string or row SQLite hands back is at most this long (a hostile file's 1 GiB string is an
// error, not an allocation).
constexpr int kSqlLengthMax = 1 << 20;
// Error lines an import lists before "and N more".
constexpr size_t kImportErrorsShown = 20;

int64_t now_s() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string hex16(uint64_t v) { return fmt::format("{:016x}", v); }

bool parse_hex16(std::string_view s, uint64_t& out) {
    if (s.size() != 16) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
    return ec == std::errc() && end == s.data() + s.size();
}

bool is_hex(std::string_view s) {
    for (char c : s)
        if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

// Errors name the file and say what to do with it when it is locked or damaged.
sqlite::ErrorContext kb_where(const std::string& path, const KnowledgeBase::Busy* busy) {
    return {path, "the knowledge base", "restore a copy or an export, or remove it", busy};
}

// A statement whose errors say it could not read the knowledge base.
class Stmt : public sqlite::Stmt {
public:
    Stmt(sqlite3* db, const std::string& path, const KnowledgeBase::Busy* busy)
        : sqlite::Stmt(db, where_, "cannot read the knowledge base"), where_(kb_where(path, busy)) {}

private:
    sqlite::ErrorContext where_;  // bound by the base before it is built; read only by its calls
};

// Runs statements that return nothing (schema, pragmas).
Status exec(sqlite3* db, const std::string& path, const char* sql, std::string_view what,
            const KnowledgeBase::Busy* busy = nullptr) {
    return sqlite::exec(db, kb_where(path, busy), sql, what);
}

Result<int64_t> pragma_int(sqlite3* db, const std::string& path, const char* sql) {
    Stmt s(db, path, nullptr);
    LOOM_TRY(s.prepare(sql));
    LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
    if (!row || s.type(0) != SQLITE_INTEGER)
        return make_error(StatusCode::PARSE_ERROR, "{}: '{}' returned no integer", path, sql);
    return s.i64(0);
}

Result<std::vector<std::vector<int64_t>>> parse_dims_text(std::string_view text) {
    std::vector<std::vector<int64_t>> out;
    size_t start = 0;
    while (true) {
        const size_t semi = text.find(';', start);
        const std::string_view tensor = text.substr(start, semi == std::string_view::npos ? semi : semi - start);
        if (out.size() >= kKbTensorsMax) return make_error(StatusCode::PARSE_ERROR, "over {} tensors", kKbTensorsMax);
        std::vector<int64_t> dims;
        size_t p = 0;
        while (!tensor.empty()) {
            if (dims.size() >= static_cast<size_t>(device::kMaxRank))
                return make_error(StatusCode::PARSE_ERROR, "a rank over {}", device::kMaxRank);
            const size_t x = tensor.find('x', p);
            const std::string_view d = tensor.substr(p, x == std::string_view::npos ? x : x - p);
            int64_t v = 0;
            const auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), v);
            if (d.empty() || ec != std::errc() || end != d.data() + d.size())
                return make_error(StatusCode::PARSE_ERROR, "'{}' is not a dim", printable(d));
            dims.push_back(v);
            if (x == std::string_view::npos) break;
            p = x + 1;
        }
        out.push_back(std::move(dims));
        if (semi == std::string_view::npos) break;
        start = semi + 1;
    }
    return out;
}

// Reads the row `s` holds (kColumns) into a record; a row that does not read back as the record
// it claims to be (types, the key text, the hash) is damage, named by its id.
Result<KbRecord> row_record(const Stmt& s, const std::string& path) {
    const int64_t id = s.type(0) == SQLITE_INTEGER ? s.i64(0) : -1;
    auto damaged = [&](std::string_view what) {
        return make_error(StatusCode::PARSE_ERROR, "{}: record {}: {}; the file is damaged", path, id, what);
    };
    for (int col = 1; col < static_cast<int>(std::size(kRecordColumns)); ++col) {
        const int t = s.type(col);
        const std::string_view name = kRecordColumns[col];
        const bool real = name == "cost_ns" || name == "default_cost_ns" || name == "seconds";
        const bool integer = name == "cost_model_version" || name == "trials" || name == "seed" ||
                             name == "created_s" || name == "updated_s";
        const bool ok = real      ? (t == SQLITE_FLOAT || t == SQLITE_INTEGER)
                        : integer ? t == SQLITE_INTEGER
                                  : t == SQLITE_TEXT;
        if (!ok) return damaged(fmt::format("{} has the wrong type", name));
    }
    KbRecord r;
    const std::string key = s.text(1), key_hash = s.text(2);
    r.key.kernel = s.text(3);
    r.key.signature = s.text(4);
    Result<std::vector<std::vector<int64_t>>> dims = parse_dims_text(s.text(5));
    if (!dims.ok()) return damaged("dims: " + dims.status().message());
    r.key.dims = std::move(dims).value();
    r.key.attrs = s.text(6);
    if (!parse_hex16(s.text(7), r.key.spec_hash)) return damaged("spec_hash is not 16 hex digits");
    r.spec_name = s.text(8);
    r.key.cost_model_version = s.i64(9);
    Result<nlohmann::json> tj = parse_json(s.text(10), "tiling");
    if (!tj.ok()) return damaged(tj.status().message());
    Result<device::Tiling> tiling = compiler::tiling_from_json(*tj);
    if (!tiling.ok()) return damaged(tiling.status().message());
    r.tiling = std::move(tiling).value();
    r.cost_ns = s.f64(11);
    r.default_cost_ns = s.f64(12);
    r.method = s.text(13);
    r.trials = s.i64(14);
    r.seconds = s.f64(15);
    r.seed = static_cast<uint64_t>(s.i64(16));
    r.loom_version = s.text(17);
    r.created_s = s.i64(18);
    r.updated_s = s.i64(19);
    if (Status st = r.check(); !st.ok()) return damaged(st.message());
    if (r.key.text() != key) return damaged("its fields do not match its key");
    if (hex16(r.key.hash()) != key_hash) return damaged("key_hash does not match its key");
    return r;
}

// Runs a SELECT of kColumns and reads every row, keeping those `keep` accepts.
Result<std::vector<KbRecord>> select_records(Stmt& s, const std::string& path,
                                             const std::function<bool(const KbRecord&)>& keep = {}) {
    std::vector<KbRecord> out;
    while (true) {
        LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
        if (!row) break;
        LOOM_ASSIGN_OR_RETURN(KbRecord r, row_record(s, path));
        if (!keep || keep(r)) out.push_back(std::move(r));
    }
    return out;
}

// Bounds every call below: an exception from the standard library or nlohmann-json becomes a
// Status naming the path.
template <typename F>
auto guarded(const std::string& path, F&& body) -> decltype(body()) {
    try {
        return body();
    } catch (const std::exception& e) {
        return make_error(StatusCode::INTERNAL, "{}: {}", path, e.what());
    }
}

// Checks that an opened database is a knowledge base of a schema this build reads.
Status check_schema(sqlite3* db, const std::string& path) {
    LOOM_ASSIGN_OR_RETURN(const int64_t app_id, pragma_int(db, path, "PRAGMA application_id"));
    if (app_id != kKbApplicationId) {
        if (app_id != 0)
            return make_error(
                StatusCode::FAILED_PRECONDITION,
                "{}: a SQLite database of another application (application_id {:#x}), not a Loom knowledge "
                "base; refused, left unchanged",
                path, static_cast<uint32_t>(app_id));
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "{}: a SQLite database that is not a Loom knowledge base (no Loom application_id); refused, "
                          "left unchanged",
                          path);
    }
    LOOM_ASSIGN_OR_RETURN(const int64_t version, pragma_int(db, path, "PRAGMA user_version"));
    if (version > kKbSchemaVersion)
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "{}: knowledge-base schema version {} is newer than this Loom's ({}); use a newer loomc",
                          path, version, kKbSchemaVersion);
    if (version < 1)
        return make_error(StatusCode::PARSE_ERROR, "{}: knowledge-base schema version {}; the file is damaged", path,
                          version);
    {
        Stmt s(db, path, nullptr);
        LOOM_TRY(
            s.prepare("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                      "ORDER BY type DESC, name"));
        size_t i = 0;
        while (true) {
            LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
            if (!row) break;
            const std::string type = s.text(0), name = s.text(1);
            if (i >= std::size(kSchemaObjects) || type != kSchemaObjects[i].first || name != kSchemaObjects[i].second)
                return make_error(StatusCode::PARSE_ERROR,
                                  "{}: the knowledge base holds the {} '{}' that schema version {} does not define; "
                                  "refused, left unchanged",
                                  path, printable(type), printable(name), version);
            ++i;
        }
        if (i != std::size(kSchemaObjects))
            return make_error(StatusCode::PARSE_ERROR, "{}: the knowledge base lacks the {} '{}'; the file is damaged",
                              path, kSchemaObjects[i].first, kSchemaObjects[i].second);
    }
    {
        Stmt s(db, path, nullptr);
        LOOM_TRY(s.prepare("SELECT name FROM pragma_table_info('records') ORDER BY cid"));
        size_t i = 0;
        while (true) {
            LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
            if (!row) break;
            if (i >= std::size(kRecordColumns) || s.text(0) != kRecordColumns[i])
                return make_error(StatusCode::PARSE_ERROR, "{}: the records table's columns are not schema {}'s", path,
                                  version);
            ++i;
        }
        if (i != std::size(kRecordColumns))
            return make_error(StatusCode::PARSE_ERROR, "{}: the records table's columns are not schema {}'s", path,
                              version);
    }
    Stmt s(db, path, nullptr);
    LOOM_TRY(s.prepare("SELECT name, value FROM meta WHERE name IN ('format', 'schema_version') ORDER BY name"));
    std::string format, schema_version;
    while (true) {
        LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
        if (!row) break;
        (s.text(0) == "format" ? format : schema_version) = s.text(1);
    }
    if (format != kKbFormat || schema_version != std::to_string(version))
        return make_error(StatusCode::PARSE_ERROR,
                          "{}: meta says format '{}' schema version '{}', expected '{}' {}; the file is damaged", path,
                          printable(format), printable(schema_version), kKbFormat, version);
    return {};
}

// Creates the schema in an empty database (one transaction; another process that created it
// first wins and this one finds it made).
Status create_schema(sqlite3* db, const std::string& path, const KnowledgeBase::Busy* busy) {
    LOOM_TRY(exec(db, path, "BEGIN IMMEDIATE", "cannot lock the new knowledge base", busy));
    auto body = [&]() -> Status {
        Stmt count(db, path, busy);
        LOOM_TRY(count.prepare("SELECT count(*) FROM sqlite_schema"));
        LOOM_ASSIGN_OR_RETURN(const bool row, count.step());
        if (row && count.i64(0) > 0) return {};  // made meanwhile; check_schema decides
        LOOM_TRY(exec(db, path, kSchemaSql, "cannot create the knowledge base", busy));
        const std::string pragmas = fmt::format("PRAGMA application_id = {}; PRAGMA user_version = {};",
                                                kKbApplicationId, kKbSchemaVersion);
        LOOM_TRY(exec(db, path, pragmas.c_str(), "cannot create the knowledge base", busy));
        Stmt meta(db, path, busy);
        LOOM_TRY(meta.prepare("INSERT INTO meta (name, value) VALUES (?1, ?2)"));
        for (const auto& [name, value] : {std::pair<std::string, std::string>{"format", kKbFormat},
                                          {"schema_version", std::to_string(kKbSchemaVersion)},
                                          {"created_by", fmt::format("loom {} ({})", kVersion, build_id())},
                                          {"created", kb_time_text(now_s())}}) {
            meta.bind(1, name);
            meta.bind(2, value);
            LOOM_TRY(meta.run());
            meta.reset();
        }
        return {};
    };
    if (Status st = body(); !st.ok()) {
        (void)exec(db, path, "ROLLBACK", "rollback");
        return st;
    }
    return exec(db, path, "COMMIT", "cannot create the knowledge base", busy);
}

// Reads up to 16 bytes of `path` to tell a SQLite file from anything else before SQLite opens
// it. Returns the file's size, -1 when it does not exist.
Result<int64_t> probe(const std::string& path) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory)
        return make_error(StatusCode::IO_ERROR, "{}: {}", path, ec.message());
    if (!std::filesystem::exists(status)) return int64_t{-1};
    if (!std::filesystem::is_regular_file(status))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: not a regular file", path);
    const auto size = std::filesystem::file_size(path, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}", path, ec.message());
    if (size == 0) return int64_t{0};
    char header[16] = {};
    std::ifstream f(path, std::ios::binary);
    if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot open", path);
    f.read(header, sizeof header);
    if (f.gcount() != static_cast<std::streamsize>(sizeof header) || std::memcmp(header, "SQLite format 3", 16) != 0)
        return make_error(StatusCode::PARSE_ERROR,
                          "{}: not a SQLite database, so not a Loom knowledge base; refused, left unchanged", path);
    return static_cast<int64_t>(size);
}

}  // namespace

// SQLite answers SQLITE_BUSY without calling the busy handler in a few places, such as a
// schema read while another process switches the new file to WAL: writers racing to create the
// file saw "database is locked" after 0.1 s. So the whole open is retried, with the busy handler's
// growing sleeps, until busy_wait_ms has passed.
Result<KnowledgeBase> KnowledgeBase::open(const std::string& path, const KbOptions& options) {
    const auto start = std::chrono::steady_clock::now();
    for (int n = 0;; ++n) {
        bool busy_error = false;
        Result<KnowledgeBase> kb = open_once(path, options, &busy_error);
        if (kb.ok()) kb->busy_->busy_error = nullptr;  // the flag lives in this loop only
        if (kb.ok() || !busy_error) return kb;
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                                  start);
        if (waited.count() >= options.busy_wait_ms) return kb;
        std::this_thread::sleep_for(std::chrono::milliseconds(int64_t{1} << std::min(n, 6)));
    }
}

Result<KnowledgeBase> KnowledgeBase::open_once(const std::string& path, const KbOptions& options, bool* busy_error) {
    return guarded(path, [&]() -> Result<KnowledgeBase> {
        LOOM_ASSIGN_OR_RETURN(const int64_t size, probe(path));
        if (size < 0 && !options.create) return make_error(StatusCode::NOT_FOUND, "{}: no such knowledge base", path);
        auto busy = std::make_unique<Busy>();
        busy->wait_ms_max = std::max(options.busy_wait_ms, 0);
        busy->busy_error = busy_error;
        sqlite::Db db;
        const Status opened = sqlite::open(path, true, kSqlLengthMax, db, kb_where(path, nullptr));
        sqlite3* raw = db.get();
        // From here the object owns the connection and closes it on every return.
        KnowledgeBase kb(path, db.release(), std::move(busy));
        LOOM_TRY(opened);
        sqlite3_busy_handler(raw, sqlite::busy_handler, kb.busy_.get());
        if (size <= 0) LOOM_TRY(create_schema(raw, path, kb.busy_.get()));
        LOOM_TRY(check_schema(raw, path));
        // WAL once the file is known to be ours (it changes the header). synchronous=NORMAL: a
        // killed process loses nothing committed; a power cut may lose the last commits, never
        // the file.
        if (!sqlite3_db_readonly(raw, "main")) {
            Stmt wal(raw, path, kb.busy_.get());
            LOOM_TRY(wal.prepare("PRAGMA journal_mode = WAL"));
            LOOM_TRY(wal.run());
        }
        LOOM_TRY(exec(raw, path, "PRAGMA synchronous = NORMAL", "cannot configure", kb.busy_.get()));
        return kb;
    });
}

KnowledgeBase::KnowledgeBase(std::string path, sqlite3* db, std::unique_ptr<Busy> busy)
    : path_(std::move(path)), db_(db), busy_(std::move(busy)) {}

KnowledgeBase::KnowledgeBase(KnowledgeBase&& other) noexcept
    : path_(std::move(other.path_)), db_(std::exchange(other.db_, nullptr)), busy_(std::move(other.busy_)) {}

KnowledgeBase& KnowledgeBase::operator=(KnowledgeBase&& other) noexcept {
    if (this != &other) {
        sqlite3_close_v2(db_);
        path_ = std::move(other.path_);
        db_ = std::exchange(other.db_, nullptr);
        busy_ = std::move(other.busy_);
    }
    return *this;
}

KnowledgeBase::~KnowledgeBase() { sqlite3_close_v2(db_); }

Status KnowledgeBase::write_transaction(const std::function<Status()>& body) {
    LOOM_TRY(exec(db_, path_, "BEGIN IMMEDIATE", "cannot lock for writing", busy_.get()));
    Status st = body();
    if (st.ok()) st = exec(db_, path_, "COMMIT", "cannot commit", busy_.get());
    if (!st.ok()) (void)exec(db_, path_, "ROLLBACK", "rollback");
    return st;
}

Result<KbLookup> KnowledgeBase::lookup(const KbKey& key) {
    return guarded(path_, [&]() -> Result<KbLookup> {
        if (Status st = key.check(); !st.ok()) return st.with_context(path_ + ": lookup");
        KbLookup out;
        Stmt s(db_, path_, busy_.get());
        LOOM_TRY(s.prepare(fmt::format("SELECT {} FROM records WHERE key = ?1", kColumns)));
        s.bind(1, key.text());
        LOOM_ASSIGN_OR_RETURN(std::vector<KbRecord> found, select_records(s, path_));
        if (!found.empty()) out.record = std::move(found.front());
        Stmt stale(db_, path_, busy_.get());
        LOOM_TRY(
            stale.prepare("SELECT count(*) FROM records WHERE kernel = ?1 AND signature = ?2 AND dims = ?3 AND "
                          "attrs = ?4 AND NOT (spec_hash = ?5 AND cost_model_version = ?6)"));
        stale.bind(1, key.kernel);
        stale.bind(2, key.signature);
        stale.bind(3, key.dims_text());
        stale.bind(4, key.attrs);
        stale.bind(5, hex16(key.spec_hash));
        stale.bind(6, key.cost_model_version);
        LOOM_ASSIGN_OR_RETURN(const bool row, stale.step());
        out.stale = row ? stale.i64(0) : 0;
        return out;
    });
}

Result<std::vector<KbNeighbour>> KnowledgeBase::nearest(const KbKey& key, size_t n) {
    return guarded(path_, [&]() -> Result<std::vector<KbNeighbour>> {
        if (Status st = key.check(); !st.ok()) return st.with_context(path_ + ": nearest");
        Stmt s(db_, path_, busy_.get());
        LOOM_TRY(
            s.prepare(fmt::format("SELECT {} FROM records WHERE kernel = ?1 AND signature = ?2 AND attrs = ?3 AND "
                                  "spec_hash = ?4 AND cost_model_version = ?5",
                                  kColumns)));
        s.bind(1, key.kernel);
        s.bind(2, key.signature);
        s.bind(3, key.attrs);
        s.bind(4, hex16(key.spec_hash));
        s.bind(5, key.cost_model_version);
        // Same tensors and ranks only: a distance between shapes of different ranks means nothing.
        auto same_form = [&](const KbRecord& r) {
            if (r.key.dims.size() != key.dims.size()) return false;
            for (size_t t = 0; t < key.dims.size(); ++t)
                if (r.key.dims[t].size() != key.dims[t].size()) return false;
            return true;
        };
        LOOM_ASSIGN_OR_RETURN(std::vector<KbRecord> found, select_records(s, path_, same_form));
        std::vector<KbNeighbour> out;
        out.reserve(found.size());
        for (KbRecord& r : found) {
            double d = 0;
            for (size_t t = 0; t < key.dims.size(); ++t)
                for (size_t i = 0; i < key.dims[t].size(); ++i)
                    d += std::abs(std::log2(static_cast<double>(std::max<int64_t>(r.key.dims[t][i], 1))) -
                                  std::log2(static_cast<double>(std::max<int64_t>(key.dims[t][i], 1))));
            out.push_back({std::move(r), d});
        }
        std::sort(out.begin(), out.end(), [](const KbNeighbour& a, const KbNeighbour& b) {
            if (a.distance != b.distance) return a.distance < b.distance;
            return a.record.key.text() < b.record.key.text();
        });
        if (out.size() > n) out.resize(n);
        return out;
    });
}

Result<KnowledgeBase::PutOutcome> KnowledgeBase::put_locked(const KbRecord& r, int64_t now, bool keep_created) {
    const std::string key = r.key.text();
    Stmt find(db_, path_, busy_.get());
    LOOM_TRY(find.prepare("SELECT id, cost_ns, created_s FROM records WHERE key = ?1"));
    find.bind(1, key);
    LOOM_ASSIGN_OR_RETURN(const bool exists, find.step());
    // The schema is STRICT and checked at open: the held row's types are the declared ones.
    if (exists && find.f64(1) <= r.cost_ns) return PutOutcome::KEPT;
    const int64_t created = exists ? find.i64(2) : keep_created && r.created_s > 0 ? r.created_s : now;
    Stmt write(db_, path_, busy_.get());
    LOOM_TRY(
        write.prepare(fmt::format("INSERT OR REPLACE INTO records ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                                  "?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
                                  kColumns)));
    if (exists) write.bind(1, find.i64(0));
    write.bind(2, key);
    write.bind(3, hex16(r.key.hash()));
    write.bind(4, r.key.kernel);
    write.bind(5, r.key.signature);
    write.bind(6, r.key.dims_text());
    write.bind(7, r.key.attrs);
    write.bind(8, hex16(r.key.spec_hash));
    write.bind(9, r.spec_name);
    write.bind(10, r.key.cost_model_version);
    write.bind(11, dump_json(compiler::tiling_json(r.tiling)));
    write.bind(12, r.cost_ns);
    write.bind(13, r.default_cost_ns);
    write.bind(14, r.method);
    write.bind(15, r.trials);
    write.bind(16, r.seconds);
    write.bind(17, static_cast<int64_t>(r.seed));
    write.bind(18, std::string_view(r.loom_version.empty() ? kVersion : r.loom_version));
    write.bind(19, created);
    write.bind(20, now);
    LOOM_TRY(write.run());
    return exists ? PutOutcome::REPLACED : PutOutcome::INSERTED;
}

Result<bool> KnowledgeBase::put(const KbRecord& r) {
    LOOM_ASSIGN_OR_RETURN(const size_t changed, put(std::span<const KbRecord>(&r, 1)));
    return changed > 0;
}

Result<size_t> KnowledgeBase::put(std::span<const KbRecord> records) {
    return guarded(path_, [&]() -> Result<size_t> {
        for (size_t i = 0; i < records.size(); ++i)
            if (Status st = records[i].check(); !st.ok())
                return st.with_context(records.size() == 1 ? path_ + ": put"
                                                           : fmt::format("{}: put: record {}", path_, i));
        size_t changed = 0;
        const int64_t now = now_s();
        LOOM_TRY(write_transaction([&]() -> Status {
            for (const KbRecord& r : records) {
                LOOM_ASSIGN_OR_RETURN(const PutOutcome outcome, put_locked(r, now, false));
                changed += outcome != PutOutcome::KEPT ? 1 : 0;
            }
            return {};
        }));
        return changed;
    });
}

Result<std::vector<KbRecord>> KnowledgeBase::list(const KbFilter& filter) {
    return guarded(path_, [&]() -> Result<std::vector<KbRecord>> {
        if (filter.stale_only && !filter.current)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: listing stale records needs the current versions",
                              path_);
        Stmt s(db_, path_, busy_.get());
        LOOM_TRY(
            s.prepare(fmt::format("SELECT {} FROM records WHERE (?1 = '' OR kernel = ?1) AND (?2 = '' OR spec_name = "
                                  "?2) ORDER BY key",
                                  kColumns)));
        s.bind(1, filter.kernel);
        s.bind(2, filter.spec_name);
        return select_records(s, path_,
                              [&](const KbRecord& r) { return !filter.stale_only || filter.current->stale(r); });
    });
}

Result<std::vector<KbRecord>> KnowledgeBase::show(std::string_view key_or_hash) {
    return guarded(path_, [&]() -> Result<std::vector<KbRecord>> {
        Stmt s(db_, path_, busy_.get());
        if (key_or_hash.size() >= 4 && key_or_hash.size() <= 16 && is_hex(key_or_hash)) {
            std::string prefix(key_or_hash);
            std::transform(prefix.begin(), prefix.end(), prefix.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
            LOOM_TRY(s.prepare(
                fmt::format("SELECT {} FROM records WHERE key_hash >= ?1 AND key_hash < ?2 ORDER BY key", kColumns)));
            s.bind(1, prefix);
            s.bind(2, prefix + "g");  // past every hex digit
        } else {
            LOOM_TRY(s.prepare(fmt::format("SELECT {} FROM records WHERE key = ?1", kColumns)));
            s.bind(1, key_or_hash);
        }
        return select_records(s, path_);
    });
}

Result<size_t> KnowledgeBase::prune(const KbPrune& what) {
    return guarded(path_, [&]() -> Result<size_t> {
        if (!what.stale && !what.spec && !what.cost_model_version && !what.updated_before_s)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: prune needs a criterion (stale, a spec, a cost-model version or a date)", path_);
        size_t removed = 0;
        LOOM_TRY(write_transaction([&]() -> Status {
            Stmt s(db_, path_, busy_.get());
            LOOM_TRY(s.prepare("SELECT id, spec_name, spec_hash, cost_model_version, updated_s FROM records"));
            std::vector<int64_t> ids;
            while (true) {
                LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
                if (!row) break;
                KbRecord r;  // the fields the criteria read
                r.spec_name = s.text(1);
                const std::string hash = s.text(2);
                if (!parse_hex16(hash, r.key.spec_hash)) continue;
                r.key.cost_model_version = s.i64(3);
                r.updated_s = s.i64(4);
                bool match = true;
                if (what.stale) match = match && what.stale->stale(r);
                if (what.spec) match = match && (r.spec_name == *what.spec || hash == *what.spec);
                if (what.cost_model_version) match = match && r.key.cost_model_version == *what.cost_model_version;
                if (what.updated_before_s) match = match && r.updated_s < *what.updated_before_s;
                if (match) ids.push_back(s.i64(0));
            }
            Stmt del(db_, path_, busy_.get());
            LOOM_TRY(del.prepare("DELETE FROM records WHERE id = ?1"));
            for (int64_t id : ids) {
                del.bind(1, id);
                LOOM_TRY(del.run());
                del.reset();
            }
            removed = ids.size();
            return {};
        }));
        return removed;
    });
}

Result<std::string> KnowledgeBase::export_json(const KbFilter& filter) {
    LOOM_ASSIGN_OR_RETURN(std::vector<KbRecord> records, list(filter));
    return guarded(path_, [&]() -> Result<std::string> {
        // One record a line: a shared export diffs and merges line by line.
        const nlohmann::json head = {{"format", kKbFormat},
                                     {"version", kJsonVersion},
                                     {"loom_version", kVersion},
                                     {"exported", kb_time_text(now_s())}};
        std::string out = dump_json(head);
        out.pop_back();  // the closing brace
        out += ",\"records\":[";
        for (size_t i = 0; i < records.size(); ++i) out += (i ? ",\n" : "\n") + dump_json(kb_record_json(records[i]));
        out += "\n]}\n";
        return out;
    });
}

Result<KbImportReport> KnowledgeBase::import_json(std::string_view text, std::string_view source,
                                                  const std::function<Status(const KbRecord&)>& check) {
    return guarded(path_, [&]() -> Result<KbImportReport> {
        if (text.size() > kKbImportBytesMax)
            return make_error(StatusCode::OUT_OF_RANGE, "{}: {} bytes exceeds the import limit of {}", source,
                              text.size(), kKbImportBytesMax);
        LOOM_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json(text, source));
        if (!j.is_object()) return make_error(StatusCode::PARSE_ERROR, "{}: not a JSON object", source);
        const auto format = j.find("format");
        if (format == j.end() || !format->is_string() || format->get<std::string>() != kKbFormat)
            return make_error(StatusCode::PARSE_ERROR, "{}: format: not '{}' (not a Loom knowledge-base export)",
                              source, kKbFormat);
        const auto version = j.find("version");
        if (version == j.end() || !version->is_number_integer())
            return make_error(StatusCode::PARSE_ERROR, "{}: version: missing or not an integer", source);
        if (version->get<int64_t>() < 1 || version->get<int64_t>() > kJsonVersion)
            return make_error(StatusCode::FAILED_PRECONDITION,
                              "{}: export format version {} (this Loom reads 1 to {}); use a newer loomc", source,
                              version->dump(), kJsonVersion);
        const auto list = j.find("records");
        if (list == j.end() || !list->is_array())
            return make_error(StatusCode::PARSE_ERROR, "{}: records: missing or not an array", source);
        if (list->size() > kKbImportRecordsMax)
            return make_error(StatusCode::OUT_OF_RANGE, "{}: {} records, over the import limit of {}", source,
                              list->size(), kKbImportRecordsMax);
        std::vector<KbRecord> records;
        records.reserve(list->size());
        std::vector<std::string> errors;
        size_t error_count = 0;
        for (size_t i = 0; i < list->size(); ++i) {
            Result<KbRecord> r = kb_record_from_json((*list)[i]);
            Status st = r.status();
            if (st.ok()) st = r->check();
            if (st.ok() && check) st = check(*r);
            if (!st.ok()) {
                if (++error_count <= kImportErrorsShown)
                    errors.push_back(fmt::format("{}: record {}: {}", source, i, st.message()));
                continue;
            }
            records.push_back(std::move(r).value());
        }
        if (error_count > 0) {
            std::string message = fmt::format("{}: {} of {} records refused; nothing imported:\n{}", source,
                                              error_count, list->size(), fmt::join(errors, "\n"));
            if (error_count > errors.size()) message += fmt::format("\n... and {} more", error_count - errors.size());
            return Status(StatusCode::PARSE_ERROR, message);
        }
        KbImportReport report;
        report.records = records.size();
        const int64_t now = now_s();
        LOOM_TRY(write_transaction([&]() -> Status {
            for (const KbRecord& r : records) {
                LOOM_ASSIGN_OR_RETURN(const PutOutcome outcome, put_locked(r, now, true));
                ++(outcome == PutOutcome::KEPT       ? report.kept
                   : outcome == PutOutcome::REPLACED ? report.replaced
                                                     : report.inserted);
            }
            return {};
        }));
        return report;
    });
}

Result<KbImportReport> KnowledgeBase::import_file(const std::string& path,
                                                  const std::function<Status(const KbRecord&)>& check) {
    LOOM_ASSIGN_OR_RETURN(const std::string text, guarded(path, [&] { return read_file(path, kKbImportBytesMax); }));
    return import_json(text, path, check);
}

Status KnowledgeBase::integrity_check() {
    return guarded(path_, [&]() -> Status {
        Stmt s(db_, path_, busy_.get());
        LOOM_TRY(s.prepare("PRAGMA integrity_check(10)"));
        std::vector<std::string> findings;
        while (true) {
            LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
            if (!row) break;
            findings.push_back(s.text(0));
        }
        if (findings.size() == 1 && findings[0] == "ok") return {};
        return make_error(StatusCode::PARSE_ERROR, "{}: integrity check failed: {}", path_,
                          printable(fmt::format("{}", fmt::join(findings, "; "))));
    });
}

}  // namespace loom::tuner
