#include "common/sqlite.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace loom::sqlite {

StatusCode code_of(int rc) {
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return StatusCode::FAILED_PRECONDITION;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return StatusCode::PARSE_ERROR;
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH: return StatusCode::IO_ERROR;
    case SQLITE_TOOBIG:
    case SQLITE_RANGE: return StatusCode::OUT_OF_RANGE;
    default: return StatusCode::INTERNAL;
    }
}

int busy_handler(void* context, int n) {
    auto* busy = static_cast<Busy*>(context);
    // The sum of the sleeps before call n: 1 + 2 + .. + 2^min(n,6)-1, then 64 each.
    const int64_t before = n <= 6 ? (int64_t{1} << n) - 1 : 63 + int64_t{64} * (n - 6);
    if (before >= busy->wait_ms_max) return 0;
    ++busy->waits;
    std::this_thread::sleep_for(std::chrono::milliseconds(int64_t{1} << std::min(n, 6)));
    return 1;
}

Status error(sqlite3* db, int rc, const ErrorContext& where, std::string_view what) {
    const char* msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    std::string hint;
    if ((rc & 0xff) == SQLITE_BUSY && where.busy && where.busy->busy_error) *where.busy->busy_error = true;
    if ((rc & 0xff) == SQLITE_BUSY)
        hint = fmt::format("; another process held {} locked for over {} ms", where.noun,
                           where.busy ? where.busy->wait_ms_max : 0);
    else if ((rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB)
        hint = fmt::format("; the file is damaged: {}", where.damaged_hint);
    else if ((rc & 0xff) == SQLITE_FULL)
        hint = "; the disk is full";
    else if ((rc & 0xff) == SQLITE_IOERR) {
        // The OS error when SQLite kept one (a short write keeps none): a full disk or a
        // file-size limit is the usual cause of a failed write.
        const int sys = db ? sqlite3_system_errno(db) : 0;
        const int ext = db ? sqlite3_extended_errcode(db) : rc;
        if (sys != 0)
            hint = fmt::format(" ({})", std::strerror(sys));
        else if (ext == SQLITE_IOERR_WRITE || ext == SQLITE_IOERR_FSYNC || ext == SQLITE_IOERR_TRUNCATE)
            hint = "; a write failed: is the disk full, or a file-size limit reached?";
    }
    return make_error(code_of(rc), "{}: {}: {}{}", where.path, what, msg, hint);
}

Db& Db::operator=(Db&& o) noexcept {
    if (this != &o) {
        sqlite3_close_v2(db_);
        db_ = o.release();
    }
    return *this;
}

Status open(const std::string& path, bool create, int length_max, Db& out, const ErrorContext& where) {
    sqlite3* raw = nullptr;
    const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0);
    const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
    out = Db(raw);  // owns the connection on every return
    if (rc != SQLITE_OK) return error(raw, rc, where, "cannot open");
    sqlite3_extended_result_codes(raw, 1);
    // A hostile file must not run anything: no triggers, views or schema functions, no writes
    // to the schema, and no huge strings.
    sqlite3_db_config(raw, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
    sqlite3_db_config(raw, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
    sqlite3_db_config(raw, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, nullptr);
    sqlite3_db_config(raw, SQLITE_DBCONFIG_ENABLE_VIEW, 0, nullptr);
    sqlite3_limit(raw, SQLITE_LIMIT_LENGTH, length_max);
    sqlite3_limit(raw, SQLITE_LIMIT_SQL_LENGTH, length_max);
    return {};
}

Status Stmt::prepare(std::string_view sql) {
    const int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
    if (rc != SQLITE_OK) return error(db_, rc, where_, what_);
    return {};
}

Result<bool> Stmt::step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return error(db_, rc, where_, what_);
}

std::string Stmt::text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}

Status exec(sqlite3* db, const ErrorContext& where, const char* sql, std::string_view what) {
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return error(db, rc, where, what);
    return {};
}

Result<int64_t> query_int(sqlite3* db, const ErrorContext& where, const char* sql, std::string_view what) {
    Stmt s(db, where, what);
    LOOM_TRY(s.prepare(sql));
    LOOM_ASSIGN_OR_RETURN(const bool row, s.step());
    if (!row) return make_error(StatusCode::PARSE_ERROR, "{}: {}: '{}' returned no row", where.path, what, sql);
    return s.i64(0);
}

}  // namespace loom::sqlite
