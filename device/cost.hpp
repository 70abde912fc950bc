// The NPU cost model as a tuner sees it (formulas in docs/device-model.md 3-5): the tilings a
// kernel takes (CubeTiling for Cube ops, VectorSchedule for Vector-unit ops), what a launch asks
// of the chip (KernelWork: a CubeWork or a VectorWork and the fixed cost around it), the space of
// tilings of a work, a cheap legality check, the cost of a (work, tiling) pair, the default
// heuristic's choice, and the check of two Vector ops fused in UB. Kernels describe their launches
// with KernelDef::work (device/kernel.hpp); nothing here reads a launch.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"

namespace loom::device {

// Cube tiling: blocks of the output (M x N) staged in L1 with K slices of k_l1, split again
// into L0 tiles that the Cube consumes fractal by fractal. Legal ranges: every L0 size is a
// positive multiple of the fractal, every L1 size a positive multiple of its L0 size, and the
// buffers below must fit (cost::cube_tiling_check names the field, cost::cube_tiling_legal only
// answers; never clamped).
struct CubeTiling {
    int64_t m_l1 = 0, n_l1 = 0, k_l1 = 0;
    int64_t m_l0 = 0, n_l0 = 0, k_l0 = 0;
    bool n_outer = false;       // loop order over L1 blocks: false = M outer, true = N outer
    bool double_buffer = true;  // ping-pong L1 and L0 so MTE overlaps the Cube
    int64_t cores = 0;          // AI cores to spread blocks over; 0 = all

    friend bool operator==(const CubeTiling&, const CubeTiling&) = default;
};

// Which axis of a Vector op's iteration space (outer x axis x inner, row-major, inner contiguous
// in GM; see cost::VectorWork) the Vector unit's lanes run along. AXIS is the op's own axis (the
// one it reduces or broadcasts over); it is contiguous when inner is 1.
enum class VectorAxis : uint8_t { INNER, AXIS, OUTER };
inline constexpr int kVectorAxisCount = 3;

// "inner", "axis", "outer"; "?" for a value outside the enum.
inline const char* vector_axis_name(VectorAxis a) {
    switch (a) {
    case VectorAxis::INNER: return "inner";
    case VectorAxis::AXIS: return "axis";
    case VectorAxis::OUTER: return "outer";
    }
    return "?";
}

// Sets `out` to the axis vector_axis_name calls `name`; returns false (out untouched) otherwise.
inline bool vector_axis_from_name(std::string_view name, VectorAxis& out) {
    for (int i = 0; i < kVectorAxisCount; ++i)
        if (name == vector_axis_name(static_cast<VectorAxis>(i))) {
            out = static_cast<VectorAxis>(i);
            return true;
        }
    return false;
}

// Vector schedule: the iteration space is cut into UB tiles of ub_tile / vector_tile rows, each
// row vector_tile elements of the vectorised axis from one line (the positions of the other two
// axes), or, with vector_tile = 0, into flat runs of ub_tile elements that join lines; tiles are
// dealt round-robin to cores and stream GM -> UB -> Vector -> UB -> GM. Legal ranges (checked by
// cost::vector_schedule_check and cost::vector_schedule_legal, never clamped; docs/device-model.md 5.2):
//   ub_tile      a positive multiple of the 32-byte block and of vector_tile; all live tiles fit UB
//   cores        0 .. aicore_count (0 = all)
//   vector_tile  0 (lines joined: needs the vector axis contiguous in GM and no reduction), or a
//                positive multiple of the block up to the vector axis rounded up to the block
//   fuse_input, fuse_output, in_place: only where the op allows them (VectorWork); a fused pair
//                of neighbours is checked together by cost::check_fused_chain
//   fuse_ub_buffers  0 .. kFuseUbBuffersMax, and 0 unless a side is fused
struct VectorSchedule {
    int64_t ub_tile = 0;                         // elements per UB tile
    bool double_buffer = true;                   // ping-pong UB so MTE2/MTE3 overlap the Vector unit
    int64_t cores = 0;                           // 0 = all
    VectorAxis vector_axis = VectorAxis::INNER;  // the axis in the Vector unit's lanes
    int64_t vector_tile = 0;                     // elements of the vector axis per UB row; 0 = lines joined
    bool fuse_input = false;                     // the op's full-size input arrives in UB from the preceding Vector op
    bool fuse_output = false;                    // the output stays in UB for the following Vector op
    int64_t fuse_ub_buffers = 0;                 // UB tiles (ub_tile elements each) the fused neighbours keep live
    bool in_place = false;                       // the output overwrites an input tile in UB: one live tile fewer

    friend bool operator==(const VectorSchedule&, const VectorSchedule&) = default;
};
inline constexpr int64_t kFuseUbBuffersMax = 64;

using Tiling = std::variant<std::monostate, CubeTiling, VectorSchedule>;

// The kind of tiling a launch takes: none (nothing to tile), a CubeTiling, or a VectorSchedule.
// A kernel may switch per launch (conv: depthwise convs run on the Vector unit).
enum class TilingKind : uint8_t { NONE, CUBE, VECTOR };

// "none", "cube", "vector".
inline const char* tiling_kind_name(TilingKind k) {
    switch (k) {
    case TilingKind::NONE: return "none";
    case TilingKind::CUBE: return "cube";
    case TilingKind::VECTOR: return "vector";
    }
    return "?";
}

// The kind `t` is: NONE for monostate (the default heuristic's, whatever the launch takes).
inline TilingKind tiling_kind_of(const Tiling& t) {
    if (std::holds_alternative<CubeTiling>(t)) return TilingKind::CUBE;
    if (std::holds_alternative<VectorSchedule>(t)) return TilingKind::VECTOR;
    return TilingKind::NONE;
}

// Where the cycles of one kernel go, per core on the critical (most loaded) core.
struct CycleBreakdown {
    double mte_in = 0;   // GM/L2 -> L1/UB and L1 -> L0
    double mte_out = 0;  // L0C/UB -> GM
    double cube = 0;
    double vector = 0;
    double scalar = 0;
    double total = 0;  // after double-buffer overlap; what the timeline uses
    int64_t cores_used = 1;
    int64_t blocks = 1;  // work blocks; the last round over the cores may be partial (tail)
    int64_t rounds = 1;  // ceil(blocks / cores_used)
    double l2_hit_bytes = 0;
    double l2_miss_bytes = 0;
    double flops = 0;  // useful arithmetic, for utilisation figures
    Tiling tiling;     // the tiling costed: the launch's, or the default heuristic's choice
};

}  // namespace loom::device

namespace loom::device::cost {

// The version of the cost formulas. A tuner's knowledge base keys its records on it (with the
// device spec's hash): bump it whenever any formula, constant or default heuristic in the cost
// model or in a kernel's work() changes what a (work, tiling) pair costs or which tilings are
// legal, so that tilings tuned under the old model are reported stale instead of reused.
// Version 2: operands resident in L2 (VectorWork::l2_in_bytes, l2_out; CubeWork::a_l2,
// residual_l2, c_l2), docs/device-model.md 3.3. Version 3: Cube L0 ping-pong runs on across L1
// stages, and MTE2 preloads the next block when K fits one L1 stage (docs/device-model.md 4.6, 4.8).
inline constexpr int kCostModelVersion = 3;

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
    int64_t elements = 0;      // elements of the iteration space (output elements unless stated)
    int64_t elem_bytes = 4;    // storage size of one element (f32 4, f16 2); sets the 32-byte block
    double in_bytes = 0;       // bytes read from GM per element (all inputs together)
    double out_bytes = 0;      // bytes written to GM per element
    double vector_passes = 1;  // Vector-unit passes at fp32 width per element
    double flops = 1;          // useful arithmetic per element (utilisation figures only)
    int64_t ub_buffers = 3;    // tiles live in UB at once (inputs + output), before doubling
    int64_t axis_len = 1;      // extent of the op's own axis (the middle one)
    int64_t inner = 0;         // extent after it; 0 = elements / axis_len
    AxisRole axis_role = AxisRole::NONE;
    bool in_axis_contiguous = false;  // the input's GM layout has the axis contiguous and inner
                                      // strided by axis_len (a transpose); the output's is row-major
    double reduce_passes = 0;         // of vector_passes, those reducing along the axis: each costs a
                                      // cross-lane fold per UB row when the axis is vectorised
    double fusable_in_bytes = 0;      // GM bytes per element of the input a preceding Vector op can
                                      // hand over in UB (0: none can)
    bool fusable_out = false;         // the output can stay in UB for a following Vector op
    bool in_place_ok = false;         // the output may overwrite an input tile in UB
    // L2 residency (docs/device-model.md 3.3): of in_bytes, the bytes per element read from L2
    // (an operand the previous launch left there), and whether the output is written to L2 for
    // the next launch instead of global memory. Both move at the L2 rate, not the memory rate.
    double l2_in_bytes = 0;
    bool l2_out = false;
};

// One Cube op as GEMMs: `batch` independent products of an m x k and a k x n operand (conv:
// m = output pixels, n = output channels per group, k = input channels per group x kernel
// area, batch = images x groups). Formulas in docs/device-model.md ("Cube ops").
struct CubeWork {
    int64_t m = 0, n = 0, k = 0;
    int64_t batch = 1;
    DType dtype = DType::F32;  // storage of A, B (unless int8) and C; f32 runs the Cube at half rate
    // int8 Cube: B (the weights) is i8 in GM; A (X) stays `dtype` in GM, MTE2 reads it as such
    // and the Vector unit quantizes each of its elements once (one pass, +1 to widen f16) on the
    // way into L1; L1/L0A/L0B hold 1-byte elements and the fractal is f x (f * cube_int8_rate) x
    // f (k0 = 32 on the presets): cube_int8_rate x the fp16 MACs per cycle. C accumulates int32
    // (4 bytes, as fp32) and leaves as `dtype` (the dequantize pass is the kernel's, in
    // epilogue_passes).
    bool int8 = false;
    double a_gm_scale = 1;         // GM bytes fetched per byte of the A operand (img2col in L1: < 1)
    double epilogue_passes = 0;    // Vector passes per output element (bias, activation, residual, cast)
    double epilogue_in_bytes = 0;  // extra GM bytes read per output element (a residual tensor)
    // L2 residency (docs/device-model.md 3.3): A (the activation) was left in L2 by the previous
    // launch, so its first reads hit; the residual is read from L2; C is written to L2 for the next
    // launch instead of global memory.
    bool a_l2 = false;
    bool residual_l2 = false;
    bool c_l2 = false;
};

// Cycles and bytes a kernel adds around its tiled part whatever the tiling (reduce's outputs,
// written after the streamed input). cost_of_work adds each field to the tiled part's breakdown,
// `total` included: nothing overlaps it.
struct FixedCost {
    double mte_in = 0, mte_out = 0, cube = 0, vector = 0, scalar = 0;
    double total = 0;
    double l2_hit_bytes = 0, l2_miss_bytes = 0;
    double flops = 0;
};

}  // namespace loom::device::cost

namespace loom::device {

// What one launch asks of the chip, independently of its tiling: the kind of tiling it takes,
// the work that tiling cuts up (`cube` for CUBE, `vector` for VECTOR; the other is unused), and
// the fixed cost around it. KernelDef::work returns it; KernelDef::cost is cost_of_work on it.
struct KernelWork {
    TilingKind kind = TilingKind::NONE;
    cost::CubeWork cube;
    cost::VectorWork vector;
    cost::FixedCost fixed;
};

}  // namespace loom::device

namespace loom::device::cost {

// ---- the cost of a (work, tiling) pair ------------------------------------------------------

// Cost of `work` under `tiling` (monostate = the default heuristic's): cube_cost or vector_cost
// by work.kind, plus work.fixed; a NONE work costs work.fixed and takes only monostate. Errors
// (a tiling of the wrong kind, an illegal one) name `kernel` and the field. Bit-identical to the
// kernel's cost() for the launch the work describes.
Result<CycleBreakdown> cost_of_work(const DeviceSpec& s, const KernelWork& work, const Tiling& tiling,
                                    std::string_view kernel);
// The total cycles of `work` under `tiling` for a search: as cost_of_work(...).total, or
// +infinity when the tiling is illegal or of the wrong kind; formats no message.
double work_cycles(const DeviceSpec& s, const KernelWork& work, const Tiling& tiling);
// The default heuristic's tiling for `work` (monostate for a NONE work).
Tiling default_tiling(const KernelWork& work, const DeviceSpec& s);
// True when `tiling` is of work.kind and legal for it (monostate: only for a NONE work).
bool tiling_legal(const Tiling& tiling, const KernelWork& work, const DeviceSpec& s);

// ---- Vector ops ---------------------------------------------------------------------------

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
// True exactly when vector_schedule_check accepts; no formatting, no allocation.
bool vector_schedule_legal(const VectorSchedule& v, const VectorWork& w, const DeviceSpec& s);
// Tiles of v.ub_tile elements that `w` keeps live in UB under `v`, before double buffering and
// not counting v.fuse_ub_buffers: ub_buffers, less one in place, plus one for a transposition
// (docs/device-model.md 5.2). `v` must be legal for `w`.
int64_t vector_live_tiles(const VectorSchedule& v, const VectorWork& w);

// Cost of a streaming Vector op under schedule `tiling` (monostate = vector_default_schedule).
// Refuses a CubeTiling and any schedule vector_schedule_check refuses. Formulas in
// docs/device-model.md ("Vector ops").
Result<CycleBreakdown> vector_cost(const DeviceSpec& s, const VectorWork& w, const Tiling& tiling,
                                   std::string_view kernel);

// ---- Cube ops -----------------------------------------------------------------------------

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
// True exactly when cube_tiling_check accepts; no formatting, no allocation.
bool cube_tiling_legal(const CubeTiling& t, const CubeWork& w, const DeviceSpec& s);
// Cost of `w` under `tiling` (monostate = cube_default_tiling); refuses a VectorSchedule.
Result<CycleBreakdown> cube_cost(const DeviceSpec& s, const CubeWork& w, const Tiling& tiling, std::string_view kernel);

// ---- tiling spaces (docs/device-model.md, "Tuning interface") -------------------------------

// The CubeTiling space of one work: every field's finite list of candidates. L0 sizes are the
// multiples of their granule (f for m and n, cube_k0 for k) from one granule up to the problem
// rounded up to the granule, without those no completion of the other fields can fit in the
// buffers. L1 sizes are an L0 size times 1 .. l1_count(...): up to the problem rounded up to the
// L0 size, without multiples no completion can fit. Then both loop orders, double buffering on
// and off, and cores 0 .. aicore_count. Every legal tiling whose L0 and L1 sizes do not exceed
// the problem rounded up to them is in the space; larger ones are legal but never cheaper (the
// padding is charged), so only the first size past the problem is kept. Most points of the
// space are illegal in combination (the buffers bound products of fields): cube_tiling_legal
// decides.
struct CubeSpace {
    int64_t m = 0, n = 0, k = 0;                              // the problem (CubeWork::m, n, k)
    std::vector<int64_t> m_l0, n_l0, k_l0;                    // candidate L0 sizes, ascending
    std::vector<int64_t> m_l1_count, n_l1_count, k_l1_count;  // per L0 candidate: its L1 multiples 1 .. count
    int64_t cores_max = 0;                                    // cores: 0 .. cores_max

    // The number of L1 multiples of L0 size `l0` along m, n or k (0 when l0 is not a candidate).
    int64_t m_l1_multiples(int64_t l0) const { return lookup(m_l0, m_l1_count, l0); }
    int64_t n_l1_multiples(int64_t l0) const { return lookup(n_l0, n_l1_count, l0); }
    int64_t k_l1_multiples(int64_t l0) const { return lookup(k_l0, k_l1_count, l0); }
    // True when `t` is a point of the space (legal or not).
    bool contains(const CubeTiling& t) const;
    // The number of points (a double: real spaces exceed 2^64 in principle, 1e12 in practice).
    double size() const;
    // Calls fn(const CubeTiling&) for every point in a fixed order (L0 m, L1 m, L0 n, L1 n, L0 k,
    // L1 k, n_outer, double_buffer, cores; each ascending) until fn returns false. Returns false
    // when stopped. For small spaces: the points number size().
    template <typename F>
    bool for_each(F&& fn) const;

private:
    static int64_t lookup(const std::vector<int64_t>& values, const std::vector<int64_t>& counts, int64_t v) {
        const auto it = std::lower_bound(values.begin(), values.end(), v);
        return it != values.end() && *it == v ? counts[static_cast<size_t>(it - values.begin())] : 0;
    }
};
CubeSpace cube_space(const CubeWork& w, const DeviceSpec& s);

// The VectorSchedule space of one work. Per vector axis a: vector_tile 0 where joining lines is
// legal along a, and block x 1 .. ceil_div(extent(a), block) (the legal range exactly); then
// ub_tile, which depends on both: joined, block x 1 .. ub_tile_count(a, 0) (up to the elements
// rounded up to the block); per line, vector_tile x 1 .. ub_tile_count(a, vector_tile) rows (up to
// one row per line); both without sizes whose live tiles cannot fit UB even single-buffered and
// in place. Then double buffering on and off, cores 0 .. aicore_count, in place off and (where the
// op allows it) on. With fusion (vector_space(..., true)) also fuse_input and fuse_output where
// the op allows them and, when a side is fused, fuse_ub_buffers 0 .. kFuseUbBuffersMax. Every
// legal schedule whose tile does not exceed the problem as above is in the space; larger tiles
// are legal but never cheaper (a partial tile is charged whole). vector_schedule_legal decides
// the rest (the UB bound on combinations).
struct VectorSpace {
    int64_t elements = 0;
    int64_t block = 1;  // elements per 32-byte block: the granule of ub_tile and vector_tile
    std::array<int64_t, kVectorAxisCount> extent{1, 1, 1};   // by VectorAxis
    std::array<bool, kVectorAxisCount> joinable{};           // vector_tile = 0 is legal along the axis
    int64_t joined_tile_max = 0;                             // elements: largest joined ub_tile that can fit
    std::array<int64_t, kVectorAxisCount> lines_tile_max{};  // elements: largest per-line ub_tile that can fit
    int64_t cores_max = 0;
    bool in_place = false;     // in_place = true is in the space
    bool fuse_input = false;   // with fusion: fuse_input = true is in the space
    bool fuse_output = false;  // with fusion: fuse_output = true is in the space

    // Lines along axis a (the positions of the other two axes).
    int64_t lines(VectorAxis a) const;
    // Candidate vector tiles along a other than 0: block x 1 .. this.
    int64_t vector_tile_count(VectorAxis a) const;
    // Candidate ub tiles for (a, vector_tile): (vector_tile, or block when 0) x 1 .. this; 0 when
    // vector_tile = 0 is not joinable along a.
    int64_t ub_tile_count(VectorAxis a, int64_t vector_tile) const;
    bool contains(const VectorSchedule& v) const;
    double size() const;
    // Calls fn(const VectorSchedule&) for every point in a fixed order (vector_axis, vector_tile
    // from 0, ub_tile, double_buffer, cores, in_place, fuse_input, fuse_output, fuse_ub_buffers;
    // each ascending) until fn returns false. Returns false when stopped.
    template <typename F>
    bool for_each(F&& fn) const;
};
// `with_fusion`: include the fusion fields (a single op's search leaves them to the pair check).
VectorSpace vector_space(const VectorWork& w, const DeviceSpec& s, bool with_fusion = false);

// ---- fused neighbours ---------------------------------------------------------------------

// One op of a fused chain: its schedule and its work.
struct FusedOp {
    const VectorSchedule* schedule = nullptr;
    const VectorWork* work = nullptr;
};

// Checks a chain of Vector ops, each handing its output to the next in UB (docs/device-model.md
// 5.2 and "Tuning interface"): every op but the last fuses its output and every op but the first
// its input, the first takes its input from GM and the last writes to GM; every schedule is legal
// for its work; all share the tile geometry (ub_tile, vector_tile, vector_axis, cores,
// double_buffer) over the same iteration space (element count, and per axis with lines not
// joined); each op's fuse_ub_buffers covers the tiles the others keep live (the chain's live
// tiles, one shared per link, less its own); and UB holds them all. Errors name the ops by their
// index in the chain and the field.
Status check_fused_chain(std::span<const FusedOp> chain, const DeviceSpec& s);
// check_fused_chain on the two ops producer -> consumer (a chain of two: neither fused further).
Status check_fused_pair(const VectorSchedule& producer, const VectorWork& pw, const VectorSchedule& consumer,
                        const VectorWork& cw, const DeviceSpec& s);

// ---- space enumeration (templates) ----------------------------------------------------------

template <typename F>
bool CubeSpace::for_each(F&& fn) const {
    CubeTiling t;
    for (size_t a = 0; a < m_l0.size(); ++a)
        for (int64_t ma = 1; ma <= m_l1_count[a]; ++ma)
            for (size_t b = 0; b < n_l0.size(); ++b)
                for (int64_t nb = 1; nb <= n_l1_count[b]; ++nb)
                    for (size_t c = 0; c < k_l0.size(); ++c)
                        for (int64_t kc = 1; kc <= k_l1_count[c]; ++kc)
                            for (bool n_outer : {false, true})
                                for (bool db : {false, true})
                                    for (int64_t cores = 0; cores <= cores_max; ++cores) {
                                        t.m_l0 = m_l0[a], t.m_l1 = m_l0[a] * ma;
                                        t.n_l0 = n_l0[b], t.n_l1 = n_l0[b] * nb;
                                        t.k_l0 = k_l0[c], t.k_l1 = k_l0[c] * kc;
                                        t.n_outer = n_outer, t.double_buffer = db, t.cores = cores;
                                        if (!fn(static_cast<const CubeTiling&>(t))) return false;
                                    }
    return true;
}

template <typename F>
bool VectorSpace::for_each(F&& fn) const {
    VectorSchedule v;
    for (int ai = 0; ai < kVectorAxisCount; ++ai) {
        const auto a = static_cast<VectorAxis>(ai);
        for (int64_t ti = joinable[static_cast<size_t>(ai)] ? 0 : 1; ti <= vector_tile_count(a); ++ti) {
            const int64_t vt = ti * block, unit = vt ? vt : block;
            for (int64_t ui = 1; ui <= ub_tile_count(a, vt); ++ui)
                for (bool db : {false, true})
                    for (int64_t cores = 0; cores <= cores_max; ++cores)
                        for (int ip = 0; ip <= (in_place ? 1 : 0); ++ip)
                            for (int fi = 0; fi <= (fuse_input ? 1 : 0); ++fi)
                                for (int fo = 0; fo <= (fuse_output ? 1 : 0); ++fo)
                                    for (int64_t fb = 0; fb <= (fi || fo ? kFuseUbBuffersMax : 0); ++fb) {
                                        v.vector_axis = a, v.vector_tile = vt, v.ub_tile = unit * ui;
                                        v.double_buffer = db, v.cores = cores, v.in_place = ip != 0;
                                        v.fuse_input = fi != 0, v.fuse_output = fo != 0, v.fuse_ub_buffers = fb;
                                        if (!fn(static_cast<const VectorSchedule&>(v))) return false;
                                    }
        }
    }
    return true;
}

}  // namespace loom::device::cost
