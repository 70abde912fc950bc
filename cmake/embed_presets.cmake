# Writes OUTPUT, a C++ file defining device_presets() from every *.toml in PRESET_DIR.
file(GLOB presets "${PRESET_DIR}/*.toml")
list(SORT presets)
set(body "")
foreach(p IN LISTS presets)
  get_filename_component(name "${p}" NAME_WE)
  file(READ "${p}" text)
  string(APPEND body "    {\"${name}\", R\"loom_preset(${text})loom_preset\"},\n")
endforeach()
file(WRITE "${OUTPUT}.tmp" "// Generated from configs/devices/*.toml; do not edit.
#include \"device/presets.hpp\"

#include <algorithm>

namespace loom::device {

namespace {
const DevicePreset kPresets[] = {
${body}};
}  // namespace

std::span<const DevicePreset> device_presets() { return kPresets; }

const std::string_view* find_device_preset(std::string_view name) {
    for (const auto& p : kPresets)
        if (p.name == name) return &p.toml;
    return nullptr;
}

}  // namespace loom::device
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
