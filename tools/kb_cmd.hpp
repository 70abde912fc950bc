// `loomc kb list|show|export|import|prune --kb PATH`: the tuner's knowledge base from the
// command line (tuner/kb.hpp; docs/tuner.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.hpp"

namespace loom::tools {

struct KbArgs {
    std::string kb;                     // --kb PATH
    std::string kernel, spec;           // list, export: filters; prune: --spec NAME|HASH
    bool stale = false;                 // list, export, prune: only stale records
    std::vector<std::string> devices;   // specs known beside the presets (for staleness)
    int64_t current_cost_model = 0;     // the cost model's version records are fresh against
    std::optional<int64_t> cost_model;  // prune: records costed by this version
    std::string older_than;             // prune: records last changed before this date
    std::string key;                    // show: key text or hash prefix
    std::string file;                   // import: the JSON file; export: -o (default stdout)
    bool json = false;
    CLI::App *list = nullptr, *show = nullptr, *export_ = nullptr, *import = nullptr, *prune = nullptr;
};

// Adds `kb` and its subcommands to `app`; returns the `kb` command.
CLI::App* add_kb_command(CLI::App& app, KbArgs& args);
// Runs the kb subcommand that was given.
Status kb_cmd(const KbArgs& args);

}  // namespace loom::tools
