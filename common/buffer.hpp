// Memory for large buffers: the simulated device's allocations and host tensors.
#pragma once

#include <cstddef>

namespace loom {

class ThreadPool;

// Returns memory for `bytes` (at least 1), aligned to 64 bytes. From kHugeBufferBytes up it is
// aligned to 2 MiB and marked for transparent huge pages (madvise MADV_HUGEPAGE, which Linux
// honours in its default "madvise" mode): a buffer of gigabytes (an activation arena, a frame's
// feature maps) is then faulted in 2 MiB at a time, not 4 KiB, and the kernels' walks over it
// miss the TLB 512 times less often. Throws std::bad_alloc as operator new does.
void* allocate_buffer(std::size_t bytes);
// Frees what allocate_buffer(bytes) returned (the same `bytes`).
void free_buffer(void* p, std::size_t bytes) noexcept;

inline constexpr std::size_t kHugeBufferBytes = std::size_t{32} << 20;

// Copies `bytes` from `src` to `dst` (not overlapping) on the pool's threads, in runs of
// 1 MiB: one thread's memcpy moves a few GB/s, well under the memory's bandwidth, and the
// simulated device's copies of feature maps (hundreds of MB) are otherwise its one serial part.
// Below 4 MiB, one memcpy.
void copy_buffer(void* dst, const void* src, std::size_t bytes, ThreadPool& pool);

}  // namespace loom
