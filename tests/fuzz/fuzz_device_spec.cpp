// A device spec (TOML) through its parser and validation.
#include <nlohmann/json.hpp>

#include "device/spec.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace loom;
    Result<device::DeviceSpec> spec = device::parse_device_spec(fuzz::as_text(data, size), "fuzz.toml");
    if (spec.ok()) (void)spec->to_json();
    return 0;
}
