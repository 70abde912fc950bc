// The small CLI framework shared by loomd, loomc and loomctl: CLI11 plus the options every
// executable has (--log-level, --log-format, --threads), and a main() wrapper that turns a
// failed Status into a message on stderr and exit code 1 (usage errors exit 2).
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/status.hpp"

namespace loom::cli {

struct CommonOptions {
    std::string log_level = "warn";
    std::string log_format = "text";  // text | json
};

// Adds --log-level, --log-format and --version to `app`.
void add_common_options(CLI::App& app, CommonOptions& options);

// Parses argv, applies the common options, then runs `body`; returns the process exit code.
int run_main(CLI::App& app, CommonOptions& options, int argc, char** argv,
             const std::function<Status()>& body);

// Returns "loom <version> (<build id>)".
std::string version_string();

}  // namespace loom::cli
