// The device memory arena: offsets inside a capacity from the spec, best-fit with coalescing.
// Only bookkeeping lives here; the runtime backs each allocation with host memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "common/status.hpp"

namespace loom::device {

class Arena {
public:
    // `alignment` must be a power of two.
    Arena(uint64_t capacity, uint64_t alignment);

    // Reserves `bytes` (rounded up to the alignment); returns the offset, or
    // OUT_OF_DEVICE_MEMORY naming the request, the free total and the largest free block.
    Result<uint64_t> allocate(uint64_t bytes);
    // Returns the block at `offset` to the free list; aborts on an unknown offset (a bug).
    void release(uint64_t offset);

    uint64_t capacity() const { return capacity_; }
    uint64_t used() const { return used_; }
    uint64_t peak() const { return peak_; }
    uint64_t largest_free() const;
    size_t allocations() const { return live_.size(); }

private:
    uint64_t capacity_;
    uint64_t alignment_;
    uint64_t used_ = 0;
    uint64_t peak_ = 0;
    std::map<uint64_t, uint64_t> free_;              // offset -> size
    std::set<std::pair<uint64_t, uint64_t>> by_size_; // (size, offset) for best fit
    std::map<uint64_t, uint64_t> live_;              // offset -> size
};

}  // namespace loom::device
