// Shared by the fuzz targets: the libFuzzer entry point every target defines, and scratch files
// for the readers that take a path (each target process writes its inputs into a folder of its
// own, so the real entry points, file reading included, are what runs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace loom::fuzz {

// Writes `bytes` to `name` inside this process's scratch folder and returns its path.
std::string scratch_file(const std::string& name, std::string_view bytes);

inline std::string_view as_text(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

}  // namespace loom::fuzz
