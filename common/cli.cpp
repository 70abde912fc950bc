#include "common/cli.hpp"

#include <cstdio>

#include "common/log.hpp"
#include "common/version.hpp"

namespace loom::cli {

std::string version_string() { return fmt::format("loom {} ({})", kVersion, build_id()); }

void add_common_options(CLI::App& app, CommonOptions& options) {
    app.add_option("--log-level", options.log_level, "trace|debug|info|warn|error|off")
        ->capture_default_str();
    app.add_option("--log-format", options.log_format, "text|json")
        ->check(CLI::IsMember({"text", "json"}))
        ->capture_default_str();
    app.set_version_flag("--version", version_string());
}

int run_main(CLI::App& app, CommonOptions& options, int argc, char** argv,
             const std::function<Status()>& body) {
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e) == 0 ? 0 : 2;
    }
    Status st = log::init(options.log_level, options.log_format == "json" ? log::Format::JSON : log::Format::TEXT);
    if (st.ok()) st = body();
    if (!st.ok()) {
        std::fprintf(stderr, "%s: error: %s\n", app.get_name().c_str(), st.to_string().c_str());
        return st.code() == StatusCode::INVALID_ARGUMENT ? 2 : 1;
    }
    return 0;
}

}  // namespace loom::cli
