// Static memory plan: one byte offset per intermediate buffer in a single device arena, so that
// buffers live at the same step never share bytes. Steps are the kernels of a compiled model in
// execution order; a buffer is live from the step that writes it to the last step that reads it.
//
// The offsets come from greedy placement (Pisarchyk & Lee 2020, "Efficient Memory Management for
// Deep Neural Net Inference"): buffers are taken in an order and each goes to a free gap among the
// already placed buffers whose lifetimes overlap it. Two orders (largest first; by the widest step
// each buffer is live at; allocation order) and two gap choices (best fit; lowest fit) are tried,
// then, for plans of up to 4096 buffers still above the liveness bound, up to 32 reorderings of
// equal-size buffers with a fixed seed; the plan with the smallest arena is kept. Each try stops
// once a plan reaches the bound. Placement is O(n^2) in the number of buffers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.hpp"

namespace loom::compiler {

struct BufferRequest {
    int64_t bytes = 0;  // > 0
    int first = 0;      // step that writes it (or -1: live from the start, e.g. graph inputs)
    int last = 0;       // last step that reads it, inclusive (steps count for graph outputs: live to the end)
    int alias_of = -1;  // >= 0: this buffer shares the storage of buffer `alias_of` (an in-place op or a
                        // zero-copy reshape); it must fit inside it (bytes <= that buffer's bytes). The planner
                        // extends the target's lifetime to cover the alias (transitively) and gives both the
                        // same offset.
};

struct MemoryPlan {
    std::vector<int64_t> offsets;  // one per request, aligned to `alignment`
    int64_t peak = 0;              // arena bytes needed: max(offset + aligned bytes)
    int64_t lower_bound = 0;       // max over steps of the summed aligned bytes of the buffers live at that step
    int64_t naive = 0;             // sum of every (non-alias) buffer's aligned bytes: one buffer per tensor
};

// Assigns every request an offset and returns the plan with its figures; fails with INVALID_ARGUMENT
// naming the request index on bytes <= 0, first > last, alias_of out of range, alias cycles or an alias
// larger than its target, and on an alignment that is not a power of two; OUT_OF_RANGE when the sizes
// sum past int64.
Result<MemoryPlan> plan_memory(std::span<const BufferRequest> requests, int64_t alignment = 64);

// Checks `plan` against `requests`: one offset per request, each aligned and non-negative, inside
// `peak`, aliases at their target's offset, and no two buffers with overlapping lifetimes sharing
// bytes. The figures lower_bound and naive are not checked (they do not affect safety). Returns OK, or
// the first violation naming the request index (INVALID_ARGUMENT); the requests are validated as
// plan_memory does. O(n log n); used by tests and when loading a compiled model file.
Status check_memory_plan(std::span<const BufferRequest> requests, const MemoryPlan& plan, int64_t alignment = 64);

}  // namespace loom::compiler
