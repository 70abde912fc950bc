// Whole-file reads with a size limit checked before anything is allocated, and whole-file writes
// that readers never see half done.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "common/status.hpp"

namespace loom {

// Returns the bytes of `path`; IO_ERROR names the file when it cannot be read, OUT_OF_RANGE
// when it holds more than `limit` bytes.
Result<std::string> read_file(const std::string& path, uint64_t limit);

// Writes `path` through a temporary file of this process's own beside it, renamed into place, so
// that a reader never sees half a file and two writers never share a temporary; `write` streams
// the contents. IO_ERROR names the file when it cannot be created, written or renamed (the
// temporary is removed).
Status write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// Makes `path` durable: its data flushed to the disk (fsync), then the folder that names it (so
// that a rename into place survives a power cut too). IO_ERROR names the path.
Status sync_to_disk(const std::string& path);

// This process's resident memory and its peak so far, in MiB (/proc/self/status: VmRSS,
// VmHWM); zeros where /proc cannot be read.
struct ResidentMemory {
    double rss_mib = 0, peak_mib = 0;
};
ResidentMemory resident_memory();

// The folder scripts/fetch-models fills: $LOOM_MODEL_DIR, else $LOOM_CACHE/models, else
// $XDG_CACHE_HOME/loom/models, else ~/.cache/loom/models.
std::string default_models_dir();

}  // namespace loom
