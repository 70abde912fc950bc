// Whole-file reads with a size limit checked before anything is allocated.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.hpp"

namespace loom {

// Returns the bytes of `path`; IO_ERROR names the file when it cannot be read, OUT_OF_RANGE
// when it holds more than `limit` bytes.
Result<std::string> read_file(const std::string& path, uint64_t limit);

// The folder scripts/fetch-models fills: $LOOM_MODEL_DIR, else $LOOM_CACHE/models, else
// $XDG_CACHE_HOME/loom/models, else ~/.cache/loom/models.
std::string default_models_dir();

}  // namespace loom
