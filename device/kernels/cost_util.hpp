// Shared pieces of the NPU cost functions (formulas in docs/device-model.md).
#pragma once

#include <algorithm>
#include <cstdint>

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

// Scalar-unit instructions for loop control (divided by the spec's scalar_ops_per_cycle):
// per tile issued, and per kernel set-up (matmul: per round of blocks on a core).
inline constexpr double kScalarInstrPerTile = 16;
inline constexpr double kScalarInstrPerBlock = 200;

}  // namespace loom::device::cost
