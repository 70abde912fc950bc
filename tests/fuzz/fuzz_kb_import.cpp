// A knowledge-base export (JSON) through `loomc kb import`: the checks of every record and the
// merge. What an import accepts must export and import again into an empty knowledge base as
// the same records (each knowledge base is SQLite's in-memory database, fresh per input).
#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz.hpp"
#include "tuner/kb.hpp"

namespace {

using namespace loom;

tuner::KnowledgeBase open_memory() {
    Result<tuner::KnowledgeBase> kb = tuner::KnowledgeBase::open(":memory:");
    LOOM_ASSERT_MSG(kb.ok(), "{}", kb.status().to_string());
    return std::move(kb).value();
}

// The records of `kb` as JSON, without the times an import sets.
nlohmann::json records_of(tuner::KnowledgeBase& kb) {
    Result<std::vector<tuner::KbRecord>> all = kb.list();
    LOOM_ASSERT_MSG(all.ok(), "{}", all.status().to_string());
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : *all) {
        nlohmann::json j = tuner::kb_record_json(r);
        j.erase("updated");
        out.push_back(std::move(j));
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    tuner::KnowledgeBase kb = open_memory();
    Result<tuner::KbImportReport> report = kb.import_json(fuzz::as_text(data, size), "fuzz.json");
    if (!report.ok()) {
        LOOM_ASSERT_MSG(kb.list()->empty(), "a refused import left records");
        return 0;
    }
    Result<std::string> exported = kb.export_json();
    LOOM_ASSERT_MSG(exported.ok(), "{}", exported.status().to_string());
    tuner::KnowledgeBase again = open_memory();
    Result<tuner::KbImportReport> back = again.import_json(*exported, "export");
    LOOM_ASSERT_MSG(back.ok(), "an export did not import: {}", back.status().to_string());
    LOOM_ASSERT(back->inserted == report->inserted);
    LOOM_ASSERT(records_of(kb) == records_of(again));
    Result<std::vector<tuner::KbRecord>> all = kb.list();
    for (const auto& r : *all) {
        Result<tuner::KbLookup> found = again.lookup(r.key);
        LOOM_ASSERT(found.ok() && found->record.has_value() && found->record->cost_ns == r.cost_ns);
    }
    return 0;
}
