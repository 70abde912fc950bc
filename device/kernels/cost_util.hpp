// Kernel-internal pieces of the NPU cost functions (formulas in docs/device-model.md): integer
// helpers, bandwidth shares and scalar constants. The public cost model (works, tilings, spaces,
// costs, legality) is device/cost.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "common/status.hpp"
#include "device/cost.hpp"
#include "device/kernel.hpp"
#include "device/spec.hpp"

namespace loom::device::cost {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Bytes per core cycle of global-memory bandwidth (HBM or LPDDR) that one of `cores` busy
// cores gets as its fair share. Loads and stores of a core draw on the same share.
inline double memory_share_per_cycle(const DeviceSpec& s, int64_t cores) {
    return s.memory_bandwidth_gbps / s.aicore_clock_ghz / static_cast<double>(cores);
}

// Bytes per core cycle one MTE port moves to or from global memory: the port's own limit or
// the core's memory share, whichever is lower.
inline double gm_bytes_per_cycle(const DeviceSpec& s, int64_t port_bytes_per_cycle, int64_t cores) {
    return std::min(static_cast<double>(port_bytes_per_cycle), memory_share_per_cycle(s, cores));
}

// The same for bytes served from the shared L2.
inline double l2_bytes_per_cycle(const DeviceSpec& s, int64_t port_bytes_per_cycle, int64_t cores) {
    double share = s.l2_bandwidth_gbps / s.aicore_clock_ghz / static_cast<double>(cores);
    return std::min(static_cast<double>(port_bytes_per_cycle), share);
}

// Bytes per core cycle of L2 bandwidth that one of `cores` busy cores gets as its fair share.
inline double l2_share_per_cycle(const DeviceSpec& s, int64_t cores) {
    return s.l2_bandwidth_gbps / s.aicore_clock_ghz / static_cast<double>(cores);
}

// MTE traffic moves whole 32-byte blocks: a contiguous run of `run_bytes` costs
// ceil(run_bytes / 32) blocks. Returns the factor (>= 1) by which that inflates the bytes moved.
inline double block_factor(double run_bytes) {
    if (run_bytes <= 0) return 1.0;
    double blocks = static_cast<double>(static_cast<int64_t>((run_bytes + 31.0) / 32.0));
    return blocks * 32.0 / run_bytes;
}

// Scalar-unit instructions for loop control (divided by the spec's scalar_ops_per_cycle):
// per tile issued, and per kernel set-up (matmul: per round of blocks on a core).
inline constexpr double kScalarInstrPerTile = 16;
inline constexpr double kScalarInstrPerBlock = 200;

// A kernel's work from its VectorWork or CubeWork, with no fixed cost around it.
inline KernelWork vector_work(const VectorWork& w) {
    KernelWork k;
    k.kind = TilingKind::VECTOR;
    k.vector = w;
    return k;
}
inline KernelWork cube_work(const CubeWork& w) {
    KernelWork k;
    k.kind = TilingKind::CUBE;
    k.cube = w;
    return k;
}

// A kernel's cost() from its work(): `work` (the work function's result for the launch) costed
// under `tiling` by cost_of_work, errors naming `kernel`.
inline Result<CycleBreakdown> launch_cost(const Result<KernelWork>& work, const Tiling& tiling, const DeviceSpec& s,
                                          std::string_view kernel) {
    if (!work.ok()) return work.status();
    return cost_of_work(s, *work, tiling, kernel);
}

}  // namespace loom::device::cost
