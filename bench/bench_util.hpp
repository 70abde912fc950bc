// Shared by the benchmark programs: a failed Status ends the run with its message.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "common/status.hpp"

// Exits with status 2, printing where and why, when `expr` (a Status) failed.
#define BENCH_CHECK(expr)                                                                     \
    do {                                                                                      \
        ::loom::Status s_ = (expr);                                                           \
        if (!s_.ok()) {                                                                       \
            std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, s_.to_string().c_str()); \
            std::exit(2);                                                                     \
        }                                                                                     \
    } while (0)

namespace loom::bench {

// The value of `r`, or exit as BENCH_CHECK does.
template <typename T>
T unwrap(Result<T> r) {
    BENCH_CHECK(r.status());
    return std::move(r).value();
}

}  // namespace loom::bench
