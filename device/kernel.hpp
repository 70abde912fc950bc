// The kernel interface. A kernel is one file that defines a KernelDef: a functional
// implementation that really computes its outputs on the host, and a cost function that turns
// (shapes, dtype, tiling) into a cycle breakdown on one AI core configuration of the spec.
// Kernels are listed once in device/kernels/kernel_list.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/status.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::device {

inline constexpr int kMaxRank = 6;

// A tensor as a kernel sees it: element type, shape (row-major, dense) and the host address of
// its device memory, valid while the task runs.
struct TensorRef {
    DType dtype = DType::F32;
    int rank = 0;
    std::array<int64_t, kMaxRank> dims{};
    void* data = nullptr;
    uint64_t device_addr = 0;

    int64_t elements() const;
    size_t bytes() const { return static_cast<size_t>(elements()) * dtype_size(dtype); }
    int64_t dim(int i) const { return dims[static_cast<size_t>(i)]; }
    template <typename T>
    T* as() const { return static_cast<T*>(data); }
};

// Cube tiling: blocks of the output (M x N) staged in L1 with K slices of k_l1, split again
// into L0 tiles that the Cube consumes fractal by fractal. Legal ranges: every L0 size is a
// positive multiple of the fractal, every L1 size a positive multiple of its L0 size, and the
// buffers below must fit (checked by cube_tiling_check, never clamped).
struct CubeTiling {
    int64_t m_l1 = 0, n_l1 = 0, k_l1 = 0;
    int64_t m_l0 = 0, n_l0 = 0, k_l0 = 0;
    bool n_outer = false;       // loop order over L1 blocks: false = M outer, true = N outer
    bool double_buffer = true;  // ping-pong L1 and L0 so MTE overlaps the Cube
    int64_t cores = 0;          // AI cores to spread blocks over; 0 = all
};

// Vector schedule: the flattened elements are split over cores, then streamed through the
// Unified Buffer in tiles of ub_tile elements.
struct VectorSchedule {
    int64_t ub_tile = 0;        // elements per UB tile; a multiple of one 32-byte block
    bool double_buffer = true;  // ping-pong UB so MTE2/MTE3 overlap the Vector unit
    int64_t cores = 0;          // 0 = all
};

using Tiling = std::variant<std::monostate, CubeTiling, VectorSchedule>;

// Where the cycles of one kernel go, per core on the critical (most loaded) core.
struct CycleBreakdown {
    double mte_in = 0;    // GM/L2 -> L1/UB and L1 -> L0
    double mte_out = 0;   // L0C/UB -> GM
    double cube = 0;
    double vector = 0;
    double scalar = 0;
    double total = 0;     // after double-buffer overlap; what the timeline uses
    int64_t cores_used = 1;
    int64_t blocks = 1;   // work blocks; the last round over the cores may be partial (tail)
    int64_t rounds = 1;   // ceil(blocks / cores_used)
    double l2_hit_bytes = 0;
    double l2_miss_bytes = 0;
    double flops = 0;     // useful arithmetic, for utilisation figures
};

// Scalar attributes of one launch; each kernel documents what it reads.
struct KernelAttrs {
    std::vector<int64_t> ints;
    std::vector<float> floats;
};

struct KernelLaunch {
    std::vector<TensorRef> inputs;
    std::vector<TensorRef> outputs;
    KernelAttrs attrs;
    Tiling tiling;  // monostate = the kernel's default heuristic
};

struct KernelDef {
    const char* name;
    // Checks shapes, dtypes, attributes and the tiling; returns the cycle breakdown.
    Result<CycleBreakdown> (*cost)(const KernelLaunch& launch, const DeviceSpec& spec);
    // Computes the outputs; parallel loops go through `pool`.
    Status (*run)(const KernelLaunch& launch, ThreadPool& pool);
};

// Returns the kernel named `name`, or nullptr.
const KernelDef* find_kernel(std::string_view name);
// Returns every registered kernel.
std::span<const KernelDef* const> all_kernels();

}  // namespace loom::device
