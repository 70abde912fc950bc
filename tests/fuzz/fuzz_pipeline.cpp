// A pipeline file (TOML) through `loomd run --check`: parse, stages, fields; nothing is opened.
#include "pipeline/pipeline.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace loom;
    (void)pipeline::check_config(fuzz::scratch_file("pipeline.toml", fuzz::as_text(data, size)), {});
    return 0;
}
