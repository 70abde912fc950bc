#include "device/memory.hpp"

namespace loom::device {

Arena::Arena(uint64_t capacity, uint64_t alignment) : capacity_(capacity), alignment_(alignment) {
    LOOM_ASSERT(alignment_ > 0 && (alignment_ & (alignment_ - 1)) == 0);
    if (capacity_ > 0) {
        free_[0] = capacity_;
        by_size_.insert({capacity_, 0});
    }
}

uint64_t Arena::largest_free() const { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }

Result<uint64_t> Arena::allocate(uint64_t bytes) {
    if (bytes == 0) bytes = 1;
    // Rounding is done only below the capacity, where it cannot overflow.
    uint64_t size = bytes <= capacity_ ? (bytes + alignment_ - 1) & ~(alignment_ - 1) : bytes;
    auto it = size <= capacity_ ? by_size_.lower_bound({size, 0}) : by_size_.end();
    if (it == by_size_.end())
        return make_error(StatusCode::OUT_OF_DEVICE_MEMORY,
                          "out of device memory: request of {} bytes, {} of {} bytes free, largest free block {} bytes",
                          bytes, capacity_ - used_, capacity_, largest_free());
    auto [block_size, offset] = *it;
    by_size_.erase(it);
    free_.erase(offset);
    if (block_size > size) {
        free_[offset + size] = block_size - size;
        by_size_.insert({block_size - size, offset + size});
    }
    live_[offset] = size;
    used_ += size;
    if (used_ > peak_) peak_ = used_;
    return offset;
}

void Arena::release(uint64_t offset) {
    auto live = live_.find(offset);
    LOOM_ASSERT_MSG(live != live_.end(), "release of unknown device offset {}", offset);
    uint64_t size = live->second;
    live_.erase(live);
    used_ -= size;
    // Coalesce with the free neighbours on both sides.
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + size == next->first) {
        by_size_.erase({next->second, next->first});
        size += next->second;
        next = free_.erase(next);
    }
    if (next != free_.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == offset) {
            by_size_.erase({prev->second, prev->first});
            offset = prev->first;
            size += prev->second;
            free_.erase(prev);
        }
    }
    free_[offset] = size;
    by_size_.insert({size, offset});
}

}  // namespace loom::device
