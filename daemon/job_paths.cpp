#include "daemon/job_paths.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

namespace loom::daemon {

namespace fs = std::filesystem;

namespace {

// The path's form: absolute, no "..". Returns it lexically normalised.
Result<fs::path> check_form(std::string_view field, const std::string& path) {
    if (path.empty()) return make_error(StatusCode::INVALID_ARGUMENT, "{}: empty path", field);
    if (path.find('\0') != std::string::npos)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: the path holds a NUL byte", field);
    const fs::path p(path);
    if (!p.is_absolute())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: {} is relative (send absolute paths: loomctl resolves them against its working "
                          "directory)",
                          field, path);
    for (const fs::path& part : p)
        if (part == "..") return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} holds '..'", field, path);
    return p.lexically_normal();
}

// True when `p` (resolved) is `root` (resolved) or inside it.
bool inside(const fs::path& p, const fs::path& root) {
    auto r = root.begin(), q = p.begin();
    for (; r != root.end(); ++r, ++q) {
        if (r->empty()) continue;  // a trailing separator
        if (q == p.end() || *q != *r) return false;
    }
    return true;
}

// Checks that `resolved` lies inside one of the policy's roots (each resolved too).
Status check_inside(const PathPolicy& policy, std::string_view field, const std::string& path,
                    const fs::path& resolved) {
    for (const std::string& root : policy.roots) {
        std::error_code ec;
        const fs::path r = fs::weakly_canonical(fs::path(root), ec);
        if (!ec && inside(resolved, r)) return {};
    }
    if (policy.roots.empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {}: the daemon allows no folder for jobs", field, path);
    std::string roots;
    for (const std::string& r : policy.roots) roots += (roots.empty() ? "" : ", ") + r;
    return make_error(StatusCode::INVALID_ARGUMENT, "{}: {}{} is outside the folders jobs may use ({})", field, path,
                      resolved.string() == path ? std::string() : fmt::format(" (resolved: {})", resolved.string()),
                      roots);
}

}  // namespace

Result<std::string> check_job_input(const PathPolicy& policy, std::string_view field, const std::string& path) {
    LOOM_ASSIGN_OR_RETURN(const fs::path p, check_form(field, path));
    std::error_code ec;
    if (!fs::exists(p, ec)) return make_error(StatusCode::NOT_FOUND, "{}: {} does not exist", field, path);
    const fs::path resolved = fs::canonical(p, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}: {}", field, path, ec.message());
    LOOM_TRY(check_inside(policy, field, path, resolved));
    const fs::file_status st = fs::status(resolved, ec);
    if (!fs::is_regular_file(st) && !fs::is_fifo(st))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} is not a file", field, path);
    if (::access(resolved.c_str(), R_OK) != 0)
        return make_error(StatusCode::IO_ERROR, "{}: {} is not readable by the daemon", field, path);
    return resolved.string();
}

Result<std::string> check_job_output(const PathPolicy& policy, std::string_view field, const std::string& path,
                                     bool overwrite) {
    LOOM_ASSIGN_OR_RETURN(const fs::path p, check_form(field, path));
    if (!p.has_filename()) return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} names a folder", field, path);
    std::error_code ec;
    const fs::path folder = p.parent_path();
    if (!fs::is_directory(folder, ec))
        return make_error(StatusCode::NOT_FOUND, "{}: the folder {} does not exist", field, folder.string());
    const fs::path resolved_folder = fs::canonical(folder, ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}: {}", field, folder.string(), ec.message());
    // An existing name is judged by what it points to (a link to elsewhere is refused).
    fs::path resolved = resolved_folder / p.filename();
    const fs::file_status link = fs::symlink_status(resolved, ec);
    if (fs::exists(link)) {
        if (fs::is_symlink(link)) {
            resolved = fs::weakly_canonical(resolved, ec);
            if (ec) return make_error(StatusCode::IO_ERROR, "{}: {}: {}", field, path, ec.message());
        }
        LOOM_TRY(check_inside(policy, field, path, resolved));
        if (!fs::is_regular_file(fs::status(resolved, ec)))
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} exists and is not a regular file", field, path);
        if (!overwrite)
            return make_error(StatusCode::FAILED_PRECONDITION, "{}: {} exists (submit with overwrite to replace it)",
                              field, path);
    } else {
        LOOM_TRY(check_inside(policy, field, path, resolved));
    }
    if (::access(resolved_folder.c_str(), W_OK | X_OK) != 0)
        return make_error(StatusCode::IO_ERROR, "{}: the folder {} is not writable by the daemon", field,
                          folder.string());
    return resolved.string();
}

}  // namespace loom::daemon
