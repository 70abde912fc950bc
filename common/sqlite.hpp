// SQLite through its C API, with the habits every Loom database keeps (the tuner's knowledge
// base, the daemon's job journal): errors that name the file and what was being done, with a
// hint for a locked or damaged file; a connection hardened against hostile files (no triggers,
// views or schema functions, bounded strings); a growing back-off while another connection
// holds the lock.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace loom::sqlite {

// SQLite's result code as a Loom status code (busy and locked: FAILED_PRECONDITION; damaged:
// PARSE_ERROR; I/O, full, read-only, permission: IO_ERROR).
StatusCode code_of(int rc);

// Waiting for another connection's lock: busy_handler() sleeps 1, 2, 4 .. 64 ms, up to
// wait_ms_max per lock, and counts its waits.
struct Busy {
    uint64_t waits = 0;
    int wait_ms_max = 0;
    bool* busy_error = nullptr;  // set when an error is SQLITE_BUSY (a caller may retry those)
};
int busy_handler(void* busy, int calls);

// What an error names: "PATH: WHAT: SQLITE'S MESSAGE; HINT".
struct ErrorContext {
    std::string path;
    std::string noun;           // "the knowledge base", "the journal": for the hints
    std::string damaged_hint;   // what to do with a damaged file
    const Busy* busy = nullptr;
};
Status error(sqlite3* db, int rc, const ErrorContext& where, std::string_view what);

// A connection, closed on destruction.
class Db {
public:
    Db() = default;
    explicit Db(sqlite3* db) : db_(db) {}
    Db(Db&& o) noexcept : db_(o.release()) {}
    Db& operator=(Db&& o) noexcept;
    Db(const Db&) = delete;
    Db& operator=(const Db&) = delete;
    ~Db() { sqlite3_close_v2(db_); }
    sqlite3* get() const { return db_; }
    sqlite3* release() { sqlite3* d = db_; db_ = nullptr; return d; }

private:
    sqlite3* db_ = nullptr;
};

// Opens `path` read-write, created when missing (with `create`), extended result codes on,
// hardened: defensive mode, untrusted schema, no triggers or views, strings and statements at
// most `length_max` bytes. The connection is returned even on failure (for its message).
Status open(const std::string& path, bool create, int length_max, Db& out, const ErrorContext& where);

// One prepared statement; errors name the path and `what` it was doing.
class Stmt {
public:
    Stmt(sqlite3* db, const ErrorContext& where, std::string_view what) : db_(db), where_(where), what_(what) {}
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;
    ~Stmt() { sqlite3_finalize(stmt_); }

    Status prepare(std::string_view sql);
    // Text, never NULL (an empty view may carry a null pointer, which SQLite binds as NULL).
    void bind(int i, std::string_view v) {
        sqlite3_bind_text(stmt_, i, v.data() ? v.data() : "", static_cast<int>(v.size()), SQLITE_TRANSIENT);
    }
    void bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
    void bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
    void bind_null(int i) { sqlite3_bind_null(stmt_, i); }
    // True with a row, false when done.
    Result<bool> step();
    Status run() { return step().status(); }
    void reset() {
        sqlite3_reset(stmt_);
        sqlite3_clear_bindings(stmt_);
    }

    int type(int col) const { return sqlite3_column_type(stmt_, col); }
    int64_t i64(int col) const { return sqlite3_column_int64(stmt_, col); }
    double f64(int col) const { return sqlite3_column_double(stmt_, col); }
    std::string text(int col) const;

private:
    sqlite3* db_;
    const ErrorContext& where_;
    std::string_view what_;
    sqlite3_stmt* stmt_ = nullptr;
};

// Runs statements that return nothing (schema, pragmas, BEGIN / COMMIT).
Status exec(sqlite3* db, const ErrorContext& where, const char* sql, std::string_view what);
// The integer a pragma or a one-value query returns.
Result<int64_t> query_int(sqlite3* db, const ErrorContext& where, const char* sql, std::string_view what);

}  // namespace loom::sqlite
