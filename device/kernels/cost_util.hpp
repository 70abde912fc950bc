// Shared pieces of the NPU cost functions (formulas in docs/device-model.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "common/status.hpp"
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

// What a Vector op's own axis (VectorWork::axis_len) is to it.
enum class AxisRole : uint8_t {
    NONE,       // nothing: the op is elementwise, lines may be joined freely
    REDUCE,     // values along the axis are combined (reduce, softmax and norm statistics, pools)
    BROADCAST,  // an operand is constant along the axis: joined lines need it expanded (+1 pass)
};

// What one Vector-unit op does per element of its iteration space, for vector_cost(). Every
// vector kernel streams its data GM -> UB -> Vector -> UB -> GM in tiles of the VectorSchedule.
// The iteration space is elements = outer x axis_len x inner, row-major in GM with inner
// contiguous (the input's layout may differ: in_axis_contiguous); by default it is flat, one
// contiguous line of `elements`.
struct VectorWork {
    int64_t elements = 0;         // elements of the iteration space (output elements unless stated)
    int64_t elem_bytes = 4;       // storage size of one element (f32 4, f16 2); sets the 32-byte block
    double in_bytes = 0;          // bytes read from GM per element (all inputs together)
    double out_bytes = 0;         // bytes written to GM per element
    double vector_passes = 1;     // Vector-unit passes at fp32 width per element
    double flops = 1;             // useful arithmetic per element (utilisation figures only)
    int64_t ub_buffers = 3;       // tiles live in UB at once (inputs + output), before doubling
    int64_t axis_len = 1;         // extent of the op's own axis (the middle one)
    int64_t inner = 0;            // extent after it; 0 = elements / axis_len
    AxisRole axis_role = AxisRole::NONE;
    bool in_axis_contiguous = false;  // the input's GM layout has the axis contiguous and inner
                                      // strided by axis_len (a transpose); the output's is row-major
    double reduce_passes = 0;     // of vector_passes, those reducing along the axis: each costs a
                                  // cross-lane fold per UB row when the axis is vectorised
    double fusable_in_bytes = 0;  // GM bytes per element of the input a preceding Vector op can
                                  // hand over in UB (0: none can)
    bool fusable_out = false;     // the output can stay in UB for a following Vector op
    bool in_place_ok = false;     // the output may overwrite an input tile in UB
};

// Extent of `axis` in w's iteration space (1 for every axis of an empty one).
int64_t vector_axis_extent(const VectorWork& w, VectorAxis axis);

// Default schedule (docs/device-model.md 5.3): the largest tile that double-buffers every live
// tile in UB, no larger than one core's share; lines joined along the contiguous axis where the
// op allows it (the flat stream), else rows of the input's contiguous axis (a transpose: the
// longer of its two contiguous axes) in balanced chunks.
VectorSchedule vector_default_schedule(const VectorWork& w, const DeviceSpec& s);
// Checks every field of `v` against its legal range for `w` on `s`, naming the field; never
// clamps.
Status vector_schedule_check(const VectorSchedule& v, const VectorWork& w, const DeviceSpec& s);

// Cost of a streaming Vector op under schedule `tiling` (monostate = vector_default_schedule).
// Refuses a CubeTiling and any schedule vector_schedule_check refuses. Formulas in
// docs/device-model.md ("Vector ops").
Result<CycleBreakdown> vector_cost(const DeviceSpec& s, const VectorWork& w, const Tiling& tiling,
                                   std::string_view kernel);

// One Cube op as GEMMs: `batch` independent products of an m x k and a k x n operand (conv:
// m = output pixels, n = output channels per group, k = input channels per group x kernel
// area, batch = images x groups). Formulas in docs/device-model.md ("Cube ops").
struct CubeWork {
    int64_t m = 0, n = 0, k = 0;
    int64_t batch = 1;
    DType dtype = DType::F32;    // storage of A, B (unless int8) and C; f32 runs the Cube at half rate
    // int8 Cube: B (the weights) is i8 in GM; A (X) stays `dtype` in GM, MTE2 reads it as such
    // and the Vector unit quantizes each of its elements once (one pass, +1 to widen f16) on the
    // way into L1; L1/L0A/L0B hold 1-byte elements and the fractal is f x (f * cube_int8_rate) x
    // f (k0 = 32 on the presets): cube_int8_rate x the fp16 MACs per cycle. C accumulates int32
    // (4 bytes, as fp32) and leaves as `dtype` (the dequantize pass is the kernel's, in
    // epilogue_passes).
    bool int8 = false;
    double a_gm_scale = 1;       // GM bytes fetched per byte of the A operand (img2col in L1: < 1)
    double epilogue_passes = 0;  // Vector passes per output element (bias, activation, residual, cast)
    double epilogue_in_bytes = 0;  // extra GM bytes read per output element (a residual tensor)
};

// The fractal's K size: f, or f * cube_int8_rate for int8 (the int8 fractal is f x 2f x f on
// Ascend); L0 k sizes are multiples of it.
int64_t cube_k0(const CubeWork& w, const DeviceSpec& s);

// Default tiling: L0 tiles of up to 128 x 128 x 64 in whole fractals, one L0 tile per L1 block, K
// staged in L1 up to four L0 slices, shrunk until every core has work and the buffers fit. int8:
// k tiles of up to 128 (the L0A bytes of fp16's 64), and M tiles of 256 or 128 rows, whichever
// the cost model finds cheaper.
CubeTiling cube_default_tiling(const CubeWork& w, const DeviceSpec& s);
// Checks a tiling's legal ranges (L0 m, n multiples of f, k of cube_k0) and buffer capacities
// (L1, L0A, L0B, L0C, UB); never clamps.
Status cube_tiling_check(const CubeTiling& t, const CubeWork& w, const DeviceSpec& s);
// Cost of `w` under `tiling` (monostate = cube_default_tiling); refuses a VectorSchedule.
Result<CycleBreakdown> cube_cost(const DeviceSpec& s, const CubeWork& w, const Tiling& tiling,
                                 std::string_view kernel);

}  // namespace loom::device::cost
