#include "tools/kb_cmd.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "common/file.hpp"
#include "common/json.hpp"
#include "compiler/model_file.hpp"
#include "device/cost.hpp"
#include "device/presets.hpp"
#include "device/spec.hpp"
#include "tuner/kb.hpp"

namespace loom::tools {

namespace {

using tuner::KbRecord;

// The cost model's version that records are fresh against by default (--cost-model-current
// overrides it): this build's.
constexpr int64_t kCostModelVersionDefault = device::cost::kCostModelVersion;

// The presets and every --device spec, by name and hash: a record for one of these names with
// another hash was tuned for a spec that has since changed.
Result<tuner::KbCurrent> current_of(const KbArgs& a) {
    tuner::KbCurrent current;
    current.cost_model_version = a.current_cost_model;
    for (const auto& preset : device::device_presets()) {
        LOOM_ASSIGN_OR_RETURN(const device::DeviceSpec spec, device::load_device_spec(preset.name));
        current.specs.emplace_back(spec.name, spec.hash());
    }
    for (const std::string& d : a.devices) {
        LOOM_ASSIGN_OR_RETURN(const device::DeviceSpec spec, device::load_device_spec(d));
        current.specs.emplace_back(spec.name, spec.hash());
    }
    return current;
}

// "f16[1x64x56x56],f16[64x64x3x3]->f16[1x64x56x56]": the signature with each tensor's dims.
std::string shapes_text(const tuner::KbKey& k) {
    std::string out;
    size_t tensor = 0, start = 0;
    const std::string& sig = k.signature;
    while (start <= sig.size()) {
        size_t end = start;
        while (end < sig.size() && sig[end] != ',' && sig[end] != '-') ++end;
        if (end > start) {
            out += sig.substr(start, end - start);
            out += '[';
            if (tensor < k.dims.size())
                for (size_t d = 0; d < k.dims[tensor].size(); ++d)
                    out += fmt::format("{}{}", d ? "x" : "", k.dims[tensor][d]);
            out += ']';
            ++tensor;
        }
        if (end >= sig.size()) break;
        if (sig[end] == ',') {
            out += ',';
            start = end + 1;
        } else {
            out += "->";
            start = end + 2;
        }
    }
    return out;
}

nlohmann::json listed_json(const KbRecord& r, const tuner::KbCurrent& current) {
    nlohmann::json j = tuner::kb_record_json(r);
    j["key"] = r.key.text();
    j["key_hash"] = fmt::format("{:016x}", r.key.hash());
    j["gain"] = r.gain();
    j["stale"] = current.stale(r);
    return j;
}

tuner::KbFilter filter_of(const KbArgs& a, const tuner::KbCurrent& current) {
    tuner::KbFilter f;
    f.kernel = a.kernel;
    f.spec_name = a.spec;
    f.stale_only = a.stale;
    f.current = &current;
    return f;
}

Status list_cmd(tuner::KnowledgeBase& kb, const KbArgs& a, const tuner::KbCurrent& current) {
    LOOM_ASSIGN_OR_RETURN(const std::vector<KbRecord> records, kb.list(filter_of(a, current)));
    if (a.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const KbRecord& r : records) out.push_back(listed_json(r, current));
        std::printf("%s\n", dump_json(out, 2).c_str());
        return {};
    }
    std::printf("%-8s  %-14s %-52s %-8s %12s %12s %6s  %s\n", "hash", "kernel", "shapes", "spec", "cost ns",
                "default ns", "gain", "method");
    size_t stale = 0;
    for (const KbRecord& r : records) {
        const bool is_stale = current.stale(r);
        stale += is_stale ? 1 : 0;
        std::printf("%-8.8s  %-14s %-52s %-8s %12.1f %12.1f %5.2fx  %s%s\n",
                    fmt::format("{:016x}", r.key.hash()).c_str(), r.key.kernel.c_str(), shapes_text(r.key).c_str(),
                    r.spec_name.c_str(), r.cost_ns, r.default_cost_ns, r.gain(), r.method.c_str(),
                    is_stale ? "  (stale)" : "");
    }
    std::printf("%zu records, %zu stale (cost model version %lld)\n", records.size(), stale,
                static_cast<long long>(current.cost_model_version));
    return {};
}

Status show_cmd(tuner::KnowledgeBase& kb, const KbArgs& a, const tuner::KbCurrent& current) {
    LOOM_ASSIGN_OR_RETURN(const std::vector<KbRecord> records, kb.show(a.key));
    if (records.empty())
        return make_error(StatusCode::NOT_FOUND, "{}: no record with the key or hash prefix '{}'", a.kb, a.key);
    if (a.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const KbRecord& r : records) out.push_back(listed_json(r, current));
        std::printf("%s\n", dump_json(out, 2).c_str());
        return {};
    }
    for (const KbRecord& r : records) {
        std::printf("%016llx  %s%s\n", static_cast<unsigned long long>(r.key.hash()), r.key.text().c_str(),
                    current.stale(r) ? "  (stale)" : "");
        std::printf("  kernel        %s\n  shapes        %s\n  attributes    %s\n", r.key.kernel.c_str(),
                    shapes_text(r.key).c_str(), r.key.attrs.c_str());
        std::printf("  spec          %s (%016llx), cost model version %lld\n", r.spec_name.c_str(),
                    static_cast<unsigned long long>(r.key.spec_hash), static_cast<long long>(r.key.cost_model_version));
        std::printf("  tiling        %s\n", dump_json(compiler::tiling_json(r.tiling)).c_str());
        std::printf("  cost          %.1f ns, default heuristic %.1f ns, gain %.2fx\n", r.cost_ns, r.default_cost_ns,
                    r.gain());
        std::printf("  found by      %s: %lld trials in %.2f s, seed %llu, loom %s\n", r.method.c_str(),
                    static_cast<long long>(r.trials), r.seconds, static_cast<unsigned long long>(r.seed),
                    r.loom_version.c_str());
        std::printf("  stored        %s, last improved %s\n", tuner::kb_time_text(r.created_s).c_str(),
                    tuner::kb_time_text(r.updated_s).c_str());
    }
    return {};
}

Status export_cmd(tuner::KnowledgeBase& kb, const KbArgs& a, const tuner::KbCurrent& current) {
    LOOM_ASSIGN_OR_RETURN(const std::string text, kb.export_json(filter_of(a, current)));
    if (a.file.empty() || a.file == "-") {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return {};
    }
    LOOM_TRY(write_file_atomically(a.file, [&](std::ostream& f) { f << text; }));
    std::fprintf(stderr, "%s: exported to %s\n", a.kb.c_str(), a.file.c_str());
    return {};
}

Status import_cmd(tuner::KnowledgeBase& kb, const KbArgs& a) {
    LOOM_ASSIGN_OR_RETURN(const tuner::KbImportReport r, kb.import_file(a.file));
    if (a.json) {
        const nlohmann::json j = {
            {"records", r.records}, {"inserted", r.inserted}, {"replaced", r.replaced}, {"kept", r.kept}};
        std::printf("%s\n", dump_json(j, 2).c_str());
    } else {
        std::printf("%s: %zu records: %zu new, %zu replaced by better ones, %zu not better than the record held\n",
                    a.file.c_str(), r.records, r.inserted, r.replaced, r.kept);
    }
    return {};
}

Status prune_cmd(tuner::KnowledgeBase& kb, const KbArgs& a, const tuner::KbCurrent& current) {
    tuner::KbPrune what;
    if (a.stale) what.stale = &current;
    if (!a.spec.empty()) what.spec = a.spec;
    what.cost_model_version = a.cost_model;
    if (!a.older_than.empty()) {
        Result<int64_t> t = tuner::kb_time_from_text(a.older_than);
        if (!t.ok()) return t.status().with_context("--older-than");
        what.updated_before_s = *t;
    }
    if (!what.stale && !what.spec && !what.cost_model_version && !what.updated_before_s)
        return make_error(
            StatusCode::INVALID_ARGUMENT,
            "kb prune: give --stale, --spec, --cost-model or --older-than (records matching all are removed)");
    LOOM_ASSIGN_OR_RETURN(const size_t removed, kb.prune(what));
    if (a.json) std::printf("%s\n", dump_json(nlohmann::json{{"removed", removed}}, 2).c_str());
    else std::printf("%s: removed %zu records\n", a.kb.c_str(), removed);
    return {};
}

void add_kb_path(CLI::App* cmd, KbArgs& a) {
    cmd->add_option("--kb", a.kb, "the knowledge-base file (SQLite)")->required();
}

void add_current(CLI::App* cmd, KbArgs& a) {
    cmd->add_option("--device", a.devices,
                    "a spec (preset name or .toml) known beside the presets, for staleness (repeatable)");
    cmd->add_option("--cost-model-current", a.current_cost_model, "the cost model's version records are fresh against")
        ->capture_default_str();
}

void add_filters(CLI::App* cmd, KbArgs& a) {
    cmd->add_option("--kernel", a.kernel, "only this kernel");
    cmd->add_option("--spec", a.spec, "only this spec name");
    cmd->add_flag("--stale", a.stale, "only stale records (another cost model, or a changed spec)");
    add_current(cmd, a);
}

}  // namespace

CLI::App* add_kb_command(CLI::App& app, KbArgs& a) {
    a.current_cost_model = kCostModelVersionDefault;
    auto* kb = app.add_subcommand("kb", "the tuner's knowledge base: list, show, export, import, prune");
    kb->require_subcommand(1);

    a.list = kb->add_subcommand(
        "list", "list records: kernel, shapes, spec, cost, default heuristic's cost, gain, method; stale ones marked");
    add_kb_path(a.list, a);
    add_filters(a.list, a);
    a.list->add_flag("--json", a.json, "print JSON");

    a.show = kb->add_subcommand("show", "show the records of a key, or of a key hash prefix (at least 4 hex digits)");
    add_kb_path(a.show, a);
    a.show->add_option("key", a.key, "key text or hash prefix")->required();
    add_current(a.show, a);
    a.show->add_flag("--json", a.json, "print JSON");

    a.export_ = kb->add_subcommand("export", "write the records as JSON (docs/tuner.md) to share them");
    add_kb_path(a.export_, a);
    a.export_->add_option("-o,--output", a.file, "the JSON file to write (default: stdout)");
    add_filters(a.export_, a);

    a.import = kb->add_subcommand(
        "import", "merge an export: a record replaces the one held only when better; any bad record refuses the file");
    add_kb_path(a.import, a);
    a.import->add_option("file", a.file, "the JSON file an export wrote")->required();
    a.import->add_flag("--json", a.json, "print the report as JSON");

    a.prune = kb->add_subcommand("prune", "remove the records matching every criterion given");
    add_kb_path(a.prune, a);
    a.prune->add_flag("--stale", a.stale, "stale records (another cost model, or a changed spec)");
    a.prune->add_option("--spec", a.spec, "records of this spec name or spec hash (16 hex digits)");
    a.prune->add_option("--cost-model", a.cost_model, "records costed by this cost-model version");
    a.prune->add_option("--older-than", a.older_than, "records last changed before this UTC date (2026-11-25)");
    add_current(a.prune, a);
    a.prune->add_flag("--json", a.json, "print JSON");
    return kb;
}

Status kb_cmd(const KbArgs& a) {
    LOOM_ASSIGN_OR_RETURN(tuner::KbCurrent current, current_of(a));
    tuner::KbOptions options;
    options.create = a.import->parsed();  // only an import starts a new file; a mistyped path is an error
    LOOM_ASSIGN_OR_RETURN(tuner::KnowledgeBase kb, tuner::KnowledgeBase::open(a.kb, options));
    if (*a.list) return list_cmd(kb, a, current);
    if (*a.show) return show_cmd(kb, a, current);
    if (*a.export_) return export_cmd(kb, a, current);
    if (*a.import) return import_cmd(kb, a);
    if (*a.prune) return prune_cmd(kb, a, current);
    return {};
}

}  // namespace loom::tools
