#include "common/file.hpp"

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

}  // namespace loom
