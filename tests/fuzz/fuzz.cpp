#include "tests/fuzz/fuzz.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/status.hpp"

namespace loom::fuzz {

namespace {

// Removed when the process exits normally (a crash leaves it for the post-mortem).
struct ScratchDir {
    std::string path;
    ScratchDir() {
        std::string base = std::filesystem::temp_directory_path().string() + "/loom-fuzz.XXXXXX";
        LOOM_ASSERT_MSG(::mkdtemp(base.data()) != nullptr, "cannot create a scratch folder under {}", base);
        path = base;
    }
    ~ScratchDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

}  // namespace

std::string scratch_file(const std::string& name, std::string_view bytes) {
    static ScratchDir dir;
    const std::string path = dir.path + "/" + name;
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    LOOM_ASSERT_MSG(f.flush(), "cannot write {}", path);
    return path;
}

}  // namespace loom::fuzz
