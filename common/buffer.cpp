#include "common/buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace loom {

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

std::align_val_t alignment(std::size_t bytes) { return std::align_val_t(bytes >= kHugeBufferBytes ? kHugePage : 64); }

}  // namespace

void* allocate_buffer(std::size_t bytes) {
    bytes = std::max<std::size_t>(bytes, 1);
    void* p = ::operator new(bytes, alignment(bytes));
    // Advice only: without transparent huge pages (or under a sanitizer's allocator) the
    // buffer is the same, in 4 KiB pages.
    if (bytes >= kHugeBufferBytes) ::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
    return p;
}

void free_buffer(void* p, std::size_t bytes) noexcept {
    ::operator delete(p, alignment(std::max<std::size_t>(bytes, 1)));
}

}  // namespace loom
