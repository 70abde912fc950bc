#include "common/file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace loom {

Result<std::string> read_file(const std::string& path, uint64_t limit) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}", path, ec.message());
    if (size > limit)
        return make_error(StatusCode::OUT_OF_RANGE, "{}: {} bytes exceeds the limit of {}", path, size, limit);
    std::ifstream f(path, std::ios::binary);
    if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot open", path);
    std::string data(static_cast<size_t>(size), '\0');
    if (!f.read(data.data(), static_cast<std::streamsize>(size)))
        return make_error(StatusCode::IO_ERROR, "{}: read failed", path);
    return data;
}

Status write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
    static std::atomic<uint64_t> serial{0};
    const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), serial++);
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot create", tmp);
        write(f);
        if (!f.flush()) {
            f.close();
            std::error_code ignored;
            std::filesystem::remove(tmp, ignored);
            return make_error(StatusCode::IO_ERROR, "{}: write failed", tmp);
        }
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::error_code ignored;
        std::filesystem::remove(tmp, ignored);
        return make_error(StatusCode::IO_ERROR, "{}: cannot rename into place: {}", path, ec.message());
    }
    return {};
}

namespace {
Status fsync_path(const std::string& path, bool folder) {
    const int fd = ::open(path.c_str(), (folder ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) return make_error(StatusCode::IO_ERROR, "{}: cannot open to sync: {}", path, std::strerror(errno));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return make_error(StatusCode::IO_ERROR, "{}: cannot sync to the disk: {}", path, std::strerror(err));
    return {};
}
}  // namespace

Status sync_to_disk(const std::string& path) {
    LOOM_TRY(fsync_path(path, false));
    std::string folder = std::filesystem::path(path).parent_path().string();
    return fsync_path(folder.empty() ? std::string(".") : folder, true);
}

ResidentMemory resident_memory() {
    std::ifstream f("/proc/self/status");
    std::string line;
    ResidentMemory m;
    while (std::getline(f, line)) {
        if (line.rfind("VmRSS:", 0) == 0) m.rss_mib = std::atof(line.c_str() + 6) / 1024.0;
        if (line.rfind("VmHWM:", 0) == 0) m.peak_mib = std::atof(line.c_str() + 6) / 1024.0;
    }
    return m;
}

std::string default_models_dir() {
    if (const char* e = std::getenv("LOOM_MODEL_DIR"); e && *e) return e;
    std::string cache;
    if (const char* e = std::getenv("LOOM_CACHE"); e && *e)
        cache = e;
    else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
        cache = std::string(x) + "/loom";
    else if (const char* h = std::getenv("HOME"); h && *h)
        cache = std::string(h) + "/.cache/loom";
    else
        cache = ".cache/loom";
    return cache + "/models";
}

}  // namespace loom
