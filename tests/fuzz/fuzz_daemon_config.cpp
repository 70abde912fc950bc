// loomd serve's configuration file (TOML) through load_config, as `loomd serve --config` and a
// SIGHUP reload read it: every input ends in a configuration or a file:line:col error.
#include "daemon/config.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace loom;
    const std::string path = fuzz::scratch_file("loomd.toml", fuzz::as_text(data, size));
    Result<daemon::DaemonConfig> c = daemon::load_config(path);
    if (c.ok()) (void)c->journal_path();
    return 0;
}
