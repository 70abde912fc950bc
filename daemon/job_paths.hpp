// Where a daemon job may read and write: the input and output of a job are absolute paths (the
// client resolves relative ones against its own working directory before sending them) inside
// the folders the daemon's configuration allows. Checked when a job is submitted, so that a job
// that could never write its output is refused at once, not after an hour of work.
//
// Rules, each refusal naming the field and the path:
// - absolute paths only; no ".." component at all (even one that stays inside);
// - the path, with every symbolic link along it resolved, lies inside one of the allowed roots
//   (also resolved): a link that points out of them is refused, one that stays inside is fine;
// - input: an existing regular file, or a named pipe (a live source), readable;
// - output: its folder exists and is writable by the daemon; an existing output is refused
//   unless the job says overwrite, and an existing output that is not a regular file always.
//
// Thread safety: pure functions of the file system; callable from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace loom::daemon {

struct PathPolicy {
    std::vector<std::string> roots;  // allowed folders (absolute); empty: every path is refused
};

// Returns the input path resolved (symbolic links followed) when `policy` allows reading it.
// Errors name `field` and the path: INVALID_ARGUMENT (relative, "..", outside the roots, not a
// file), NOT_FOUND, IO_ERROR (not readable).
Result<std::string> check_job_input(const PathPolicy& policy, std::string_view field, const std::string& path);
// Returns the output path (its folder resolved) when `policy` allows writing it. Errors as
// above, NOT_FOUND for a missing folder, IO_ERROR for one not writable, FAILED_PRECONDITION for
// an existing output without `overwrite`.
Result<std::string> check_job_output(const PathPolicy& policy, std::string_view field, const std::string& path,
                                     bool overwrite);

}  // namespace loom::daemon
