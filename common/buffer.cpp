#include "common/buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "common/thread_pool.hpp"

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

void copy_buffer(void* dst, const void* src, std::size_t bytes, ThreadPool& pool) {
    constexpr std::size_t kRun = std::size_t{1} << 20;
    if (bytes < 4 * kRun) {
        if (bytes) std::memcpy(dst, src, bytes);
        return;
    }
    pool.parallel_for((bytes + kRun - 1) / kRun, 1, [&](std::size_t first, std::size_t last) {
        const std::size_t begin = first * kRun, end = std::min(bytes, last * kRun);
        std::memcpy(static_cast<std::byte*>(dst) + begin, static_cast<const std::byte*>(src) + begin, end - begin);
    });
}

}  // namespace loom
