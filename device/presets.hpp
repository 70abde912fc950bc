// Device presets from configs/devices/*.toml, embedded at build time (cmake/embed_presets.cmake)
// so that `--device edge` works from any working directory.
#pragma once

#include <span>
#include <string_view>

namespace loom::device {

struct DevicePreset {
    std::string_view name;
    std::string_view toml;
};

// Returns every embedded preset, sorted by name.
std::span<const DevicePreset> device_presets();

// Returns the TOML text of preset `name`, or nullptr.
const std::string_view* find_device_preset(std::string_view name);

}  // namespace loom::device
