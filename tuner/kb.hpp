// The tuner's knowledge base (Ascend AOE's): the best tiling found for each kernel launch,
// keyed by what decides a tiling's cost (kernel, dtypes, shapes, attributes, device spec, cost
// model), so that a shape tuned once is tuned instantly afterwards. Stored in SQLite (Debian's
// libsqlite3, which the daemon's job journal uses too): one file, safe against a process
// killed mid-write and shared by several `loomc tune` processes at once. docs/tuner.md
// describes the schema, the staleness rules and the JSON exchange format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/sqlite.hpp"
#include "common/status.hpp"
#include "device/kernel.hpp"


namespace loom::tuner {

// What meta.format holds and what an exported JSON file's "format" names.
inline constexpr const char* kKbFormat = "loom-kb";
// The schema this build writes and the newest it reads; a file from a newer Loom is refused.
inline constexpr int kKbSchemaVersion = 1;
// SQLite's header application_id of a knowledge base ("LMKB"): `file` names it, and a SQLite
// file with another id is another application's and is never touched.
inline constexpr int32_t kKbApplicationId = 0x4c4d4b42;
// An import file larger than this is refused before it is read (about 100 000 records).
inline constexpr uint64_t kKbImportBytesMax = uint64_t{64} << 20;
inline constexpr size_t kKbImportRecordsMax = 1u << 20;
// Limits on one key's parts (a key longer than these is not a kernel launch but bad input).
inline constexpr size_t kKbNameBytesMax = 128;          // kernel, signature, method, versions
inline constexpr size_t kKbAttrsBytesMax = 16384;       // the attributes' text
inline constexpr size_t kKbTensorsMax = 64;             // tensors per launch
inline constexpr int64_t kKbDimMax = int64_t{1} << 40;  // any dim, and any tiling size

// What identifies a kernel launch for tuning. The tuner's StepKey converts to it.
struct KbKey {
    std::string kernel;                      // the device kernel ("conv")
    std::string signature;                   // dtypes of the inputs, "->", of the outputs: "f16,f16->f16"
    std::vector<std::vector<int64_t>> dims;  // each tensor's dims, in signature order
    std::string attrs;                       // the attributes in canonical (sorted) text form
    uint64_t spec_hash = 0;                  // device::DeviceSpec::hash() of the spec tuned for
    int64_t cost_model_version = 0;          // the cost model's version when the cost was computed

    // "conv|f16,f16->f16|1x64x56x56;64x64x3x3|group=1|0123456789abcdef|1": unique per key
    // (kernel, signature and dims hold no '|'; the last two fields are fixed-form). A rank-0
    // tensor's dims are empty.
    std::string text() const;
    // FNV-1a 64 of text(); shown as 16 hex digits, whose prefix `loomc kb show` accepts.
    uint64_t hash() const;
    // The dims part of text(): "1x64x56x56;64x64x3x3".
    std::string dims_text() const;
    // OK, or INVALID_ARGUMENT naming the first part that is malformed (kernel or signature not
    // of the documented form or with unknown dtypes, dims not matching the signature's tensors,
    // a rank over device::kMaxRank, a dim outside 0..kKbDimMax, text over its limit or not UTF-8).
    Status check() const;

    friend bool operator==(const KbKey&, const KbKey&) = default;
};

// One tuned launch: the best tiling found and how it was found.
struct KbRecord {
    KbKey key;
    std::string spec_name;       // the spec's name ("edge"), for people and for staleness
    device::Tiling tiling;       // never monostate: a record names a concrete tiling
    double cost_ns = 0;          // simulated time of one launch with `tiling`, ns
    double default_cost_ns = 0;  // the same with the default heuristic's tiling
    std::string method;          // how it was found: "ga", "mcts", "exhaustive", "subgraph"..
    int64_t trials = 0;          // candidates costed
    double seconds = 0;          // wall time the search took
    uint64_t seed = 0;           // the search's seed
    std::string loom_version;    // the Loom that found it; put() fills an empty one
    int64_t created_s = 0;       // Unix seconds: first stored (put() sets it)
    int64_t updated_s = 0;       // Unix seconds: last replaced by a better one (put() sets it)

    // default_cost_ns / cost_ns (1.25 = the tuned tiling is 25% faster).
    double gain() const { return cost_ns > 0 ? default_cost_ns / cost_ns : 0; }
    // OK, or INVALID_ARGUMENT naming the first field out of range (the key's check(); a
    // monostate tiling or one whose sizes are not positive, not multiples where
    // device::CubeTiling requires them, or over kKbDimMax; costs not finite and positive; an
    // empty or non-[a-z0-9_-] method; negative trials or seconds).
    Status check() const;
};

// What lookup() found for a key.
struct KbLookup {
    std::optional<KbRecord> record;  // the fresh record: same key, spec hash and cost model
    // Records of the same kernel, signature, dims and attributes for another spec hash or cost
    // model version: reported so the caller can say so, never returned.
    int64_t stale = 0;
};

// A record nearest() found, with its distance from the key asked for.
struct KbNeighbour {
    KbRecord record;
    double distance = 0;  // sum over every dim of |log2(max(a, 1)) - log2(max(b, 1))|
};

// What a record is fresh against: the cost model's current version and the specs known by
// name (the presets, and any spec file the command was given).
struct KbCurrent {
    int64_t cost_model_version = 0;
    std::vector<std::pair<std::string, uint64_t>> specs;  // name, hash

    // True when `r` was costed by another cost-model version, or for a spec whose name is known
    // here with another hash. A record for a spec name not known here is not stale.
    bool stale(const KbRecord& r) const;
};

struct KbFilter {
    std::string kernel;       // "" = any
    std::string spec_name;    // "" = any
    bool stale_only = false;  // only the records `current` calls stale (requires `current`)
    const KbCurrent* current = nullptr;
};

// Which records prune() deletes: those matching every criterion given (at least one).
struct KbPrune {
    const KbCurrent* stale = nullptr;           // stale against this
    std::optional<std::string> spec;            // spec name, or spec hash in hex
    std::optional<int64_t> cost_model_version;  // exactly this version
    std::optional<int64_t> updated_before_s;    // last changed before this Unix time
};

struct KbImportReport {
    size_t records = 0;   // in the file
    size_t inserted = 0;  // new keys
    size_t replaced = 0;  // better than the record held
    size_t kept = 0;      // not better than the record held: the held one stays
};

struct KbOptions {
    // Create an empty knowledge base when the file does not exist (else NOT_FOUND).
    bool create = true;
    // How long a write waits for another process's transaction in total, ms; a busy database
    // past this is an error that says how long it waited.
    int busy_wait_ms = 30000;
};

// A knowledge-base file opened for reading and writing. One thread uses an object at a time;
// any number of objects, in any number of processes, may share one file.
class KnowledgeBase {
public:
    // Opens `path`, creating an empty knowledge base when it does not exist (options.create) or
    // is empty.
    // Refuses, naming the path and changing nothing: a file that is not SQLite, a SQLite
    // database of another application, a Loom schema from a newer Loom, or a knowledge base
    // whose tables are not the ones this schema defines.
    static Result<KnowledgeBase> open(const std::string& path, const KbOptions& options = {});

    KnowledgeBase(KnowledgeBase&& other) noexcept;
    KnowledgeBase& operator=(KnowledgeBase&& other) noexcept;
    KnowledgeBase(const KnowledgeBase&) = delete;
    KnowledgeBase& operator=(const KnowledgeBase&) = delete;
    ~KnowledgeBase();

    const std::string& path() const { return path_; }

    // Returns the record for exactly `key` (spec hash and cost model included), and how many
    // stale records of the same launch were ignored.
    Result<KbLookup> lookup(const KbKey& key);
    // Returns up to `n` records of the same kernel, signature, attributes, spec hash and cost
    // model version with the same number of tensors and ranks, nearest first (distance, then
    // key text); `key` itself is among them, at distance 0, when it is stored.
    Result<std::vector<KbNeighbour>> nearest(const KbKey& key, size_t n);
    // Stores `r` (after r.check()) unless a record of its key with a cost as low or lower is
    // held: returns true when the file changed. One transaction.
    Result<bool> put(const KbRecord& r);
    // The same for many records in one transaction (all or none); returns how many changed.
    Result<size_t> put(std::span<const KbRecord> records);

    // Returns the records that pass `filter`, ordered by key text.
    Result<std::vector<KbRecord>> list(const KbFilter& filter = {});
    // Returns the records whose key text is `key_or_hash`, or whose hash (16 hex digits) starts
    // with it (at least 4 digits).
    Result<std::vector<KbRecord>> show(std::string_view key_or_hash);
    // Deletes the records `what` selects, in one transaction; returns how many.
    Result<size_t> prune(const KbPrune& what);

    // The records that pass `filter` as JSON text (docs/tuner.md: {"format": "loom-kb",
    // "version": 1, "records": [..]}).
    Result<std::string> export_json(const KbFilter& filter = {});
    // Merges the records of exported JSON `text`; `source` names it in messages. Every record
    // is checked first: any error refuses the whole import (PARSE_ERROR listing each bad
    // record as "source: record N: field: problem") and changes nothing; otherwise one
    // transaction applies the "only better replaces" rule of put(). `check` may refuse a record
    // further (the tuner's legality check of its tiling against its kernel).
    Result<KbImportReport> import_json(std::string_view text, std::string_view source,
                                       const std::function<Status(const KbRecord&)>& check = {});
    // The same for a file; one over kKbImportBytesMax is refused before it is read.
    Result<KbImportReport> import_file(const std::string& path,
                                       const std::function<Status(const KbRecord&)>& check = {});

    // Runs SQLite's PRAGMA integrity_check; an error quotes its first findings.
    Status integrity_check();
    // How many times a write found the file locked by another process and waited.
    uint64_t busy_waits() const { return busy_->waits; }

    // Per-connection busy accounting; internal (the busy handler's context), heap-held so a
    // moved object keeps it.
    using Busy = sqlite::Busy;

private:
    KnowledgeBase(std::string path, sqlite3* db, std::unique_ptr<Busy> busy);
    // One attempt of open(), which retries it while another process holds the file busy
    // (*busy_error set when it failed with SQLITE_BUSY).
    static Result<KnowledgeBase> open_once(const std::string& path, const KbOptions& options, bool* busy_error);
    // Runs `body` inside BEGIN IMMEDIATE .. COMMIT (ROLLBACK when it fails).
    Status write_transaction(const std::function<Status()>& body);
    enum class PutOutcome : uint8_t { KEPT, INSERTED, REPLACED };
    // put() inside a write transaction; an import keeps the record's created time.
    Result<PutOutcome> put_locked(const KbRecord& r, int64_t now_s, bool keep_created);

    std::string path_;
    sqlite3* db_ = nullptr;
    std::unique_ptr<Busy> busy_;
};

// The JSON form of one record, as export_json writes it.
nlohmann::json kb_record_json(const KbRecord& r);
// Reads one record of an export; PARSE_ERROR naming the field ("cost_ns: not a number").
Result<KbRecord> kb_record_from_json(const nlohmann::json& j);
// "2026-11-25T14:03:00Z" for a Unix time, and back (INVALID_ARGUMENT for another form);
// a plain date "2026-11-25" reads as its midnight UTC.
std::string kb_time_text(int64_t unix_s);
Result<int64_t> kb_time_from_text(std::string_view text);

}  // namespace loom::tuner
