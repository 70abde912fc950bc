// The cost model of device/cost.hpp: Vector and Cube costs, legality, defaults, and the cost of
// a KernelWork (formulas in docs/device-model.md 3-5).
#include "device/cost.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <variant>

#include "common/checked.hpp"
#include "device/kernels/cost_util.hpp"

namespace loom::device::cost {

namespace {

// Vector passes per element to transpose a tile between its GM layout and the lanes' (the
// Vector unit's transposing copy works on 16 x 16 blocks), charged per GM byte-element moved on a
// side whose contiguous axis is not the vectorised one.
constexpr double kTransposePasses = 2;

size_t ix(VectorAxis a) { return static_cast<size_t>(a); }

// The iteration space resolved: extents by VectorAxis, and each side's GM layout as its axes in
// memory order (fastest first).
struct Space {
    std::array<int64_t, kVectorAxisCount> ext{1, 1, 1};
    std::array<VectorAxis, kVectorAxisCount> in_order{}, out_order{};
};

Space space_of(const VectorWork& w) {
    Space sp;
    if (w.elements > 0) {
        const int64_t axis = std::max<int64_t>(w.axis_len, 1);
        const int64_t inner = w.inner > 0 ? w.inner : w.elements / axis;
        LOOM_ASSERT_MSG(inner > 0 && w.elements % (axis * inner) == 0,
                        "VectorWork: {} elements are not outer x {} x {}", w.elements, axis, inner);
        sp.ext = {inner, axis, w.elements / (axis * inner)};
    }
    sp.out_order = {VectorAxis::INNER, VectorAxis::AXIS, VectorAxis::OUTER};
    sp.in_order = w.in_axis_contiguous ? std::array{VectorAxis::AXIS, VectorAxis::INNER, VectorAxis::OUTER}
                                       : sp.out_order;
    return sp;
}

// A side's contiguous axis: the first in its order with more than one element.
VectorAxis contiguous_axis(const Space& sp, const std::array<VectorAxis, kVectorAxisCount>& order) {
    for (VectorAxis a : order)
        if (sp.ext[ix(a)] > 1) return a;
    return order[0];
}

// The two axes other than `v`, in the order a UB tile's rows run along them (fastest first).
std::array<VectorAxis, 2> row_axes(VectorAxis v) {
    switch (v) {
    case VectorAxis::INNER: return {VectorAxis::AXIS, VectorAxis::OUTER};
    case VectorAxis::AXIS: return {VectorAxis::INNER, VectorAxis::OUTER};
    case VectorAxis::OUTER: break;
    }
    return {VectorAxis::INNER, VectorAxis::AXIS};
}

// A legal schedule's tile, resolved.
struct Geometry {
    bool joined = false;
    int64_t rows = 1;                      // UB rows per tile
    int64_t blocks = 1;                    // tiles
    double elems = 0;                      // elements charged per tile (a partial tile costs a full one)
    double repeats = 0;                    // Vector repeats per pass per tile
    double fold = 0;                       // cross-lane fold repeats per tile (a reduction along the vectorised axis)
    double factor_in = 1, factor_out = 1;  // whole-block inflation of each side's GM bytes
    bool strided_in = false, strided_out = false;  // the side needs a transposition in UB
};

// GM bytes per element of each side after fusion.
double gm_in_bytes(const VectorSchedule& v, const VectorWork& w) {
    return std::max(0.0, w.in_bytes - (v.fuse_input ? w.fusable_in_bytes : 0.0));
}
double gm_out_bytes(const VectorSchedule& v, const VectorWork& w) { return v.fuse_output ? 0.0 : w.out_bytes; }

// The first field of a schedule outside its legal range (docs/device-model.md 5.2), in the order
// vector_schedule_check reports them; NONE when the schedule is legal.
enum class VectorFault : uint8_t {
    NONE,
    UB_TILE,
    CORES,
    VECTOR_AXIS,
    VECTOR_TILE,
    JOIN_REDUCE,
    JOIN_CONTIGUOUS,
    ROWS,
    FUSE_INPUT,
    FUSE_OUTPUT,
    FUSE_UB_BUFFERS_RANGE,
    FUSE_UB_BUFFERS_UNFUSED,
    IN_PLACE,
    UB_CAPACITY,
};

// What the legality check derives on the way, for the message and the tile.
struct VectorFacts {
    int64_t eb = 1, block = 1;
    Space sp;
    int64_t e_v = 1, cap = 1;
    VectorAxis c_in = VectorAxis::INNER, c_out = VectorAxis::INNER;
    bool strided = false;  // a per-line tile whose vector axis is not contiguous on a side
    int64_t live = 0, need = 0;
};

// The first fault of `v` for `w` on `s` (no formatting, no allocation); fills `f` up to it.
VectorFault vector_fault(const VectorSchedule& v, const VectorWork& w, const DeviceSpec& s, VectorFacts& f) {
    f.eb = std::max<int64_t>(1, w.elem_bytes);
    f.block = std::max<int64_t>(1, 32 / f.eb);  // UB moves whole 32-byte blocks
    if (v.ub_tile <= 0 || v.ub_tile % f.block) return VectorFault::UB_TILE;
    if (v.cores < 0 || v.cores > s.aicore_count) return VectorFault::CORES;
    const int va = static_cast<int>(v.vector_axis);
    if (va < 0 || va >= kVectorAxisCount) return VectorFault::VECTOR_AXIS;
    f.sp = space_of(w);
    const VectorAxis V = v.vector_axis;
    f.e_v = f.sp.ext[ix(V)];
    f.cap = round_up(f.e_v, f.block);
    if (v.vector_tile < 0 || v.vector_tile % f.block || v.vector_tile > f.cap) return VectorFault::VECTOR_TILE;
    f.c_in = contiguous_axis(f.sp, f.sp.in_order), f.c_out = contiguous_axis(f.sp, f.sp.out_order);
    if (v.vector_tile == 0) {
        if (w.axis_role == AxisRole::REDUCE) return VectorFault::JOIN_REDUCE;
        if (f.c_in != f.c_out || (f.e_v > 1 && V != f.c_in)) return VectorFault::JOIN_CONTIGUOUS;
    } else if (v.ub_tile % v.vector_tile) {
        return VectorFault::ROWS;
    }
    if (v.fuse_input && w.fusable_in_bytes <= 0) return VectorFault::FUSE_INPUT;
    if (v.fuse_output && !w.fusable_out) return VectorFault::FUSE_OUTPUT;
    if (v.fuse_ub_buffers < 0 || v.fuse_ub_buffers > kFuseUbBuffersMax) return VectorFault::FUSE_UB_BUFFERS_RANGE;
    if (v.fuse_ub_buffers > 0 && !v.fuse_input && !v.fuse_output) return VectorFault::FUSE_UB_BUFFERS_UNFUSED;
    const int64_t buffers = std::max<int64_t>(1, w.ub_buffers);
    if (v.in_place && (!w.in_place_ok || buffers < 2)) return VectorFault::IN_PLACE;
    // A transposition writes a second tile; in place saves the output's; fused neighbours add theirs.
    f.strided = v.vector_tile != 0 && (V != f.c_in || V != f.c_out);
    f.live = buffers - (v.in_place ? 1 : 0) + (f.strided ? 1 : 0) + v.fuse_ub_buffers;
    const Checked need = Checked(v.double_buffer ? 2 : 1) * f.live * v.ub_tile * f.eb;
    f.need = need.get().value_or(std::numeric_limits<int64_t>::max());
    if (f.need > s.ub_bytes()) return VectorFault::UB_CAPACITY;
    return VectorFault::NONE;
}

// The message vector_schedule_check gives for fault `fault` (not NONE) of `v`.
Status vector_fault_status(VectorFault fault, const VectorSchedule& v, const VectorFacts& f, const DeviceSpec& s) {
    const VectorAxis V = v.vector_axis;
    switch (fault) {
    case VectorFault::NONE: break;
    case VectorFault::UB_TILE:
        return make_error(StatusCode::INVALID_ARGUMENT, "schedule: ub_tile = {} must be a positive multiple of {}",
                          v.ub_tile, f.block);
    case VectorFault::CORES:
        return make_error(StatusCode::INVALID_ARGUMENT, "schedule: cores = {} outside [0, {}]", v.cores,
                          s.aicore_count);
    case VectorFault::VECTOR_AXIS:
        return make_error(StatusCode::INVALID_ARGUMENT, "schedule: vector_axis = {} is not inner, axis or outer",
                          static_cast<int>(V));
    case VectorFault::VECTOR_TILE:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: vector_tile = {} must be 0 (lines joined) or a positive multiple of {} up to {} "
                          "(vector_axis = {} has {} elements)",
                          v.vector_tile, f.block, f.cap, vector_axis_name(V), f.e_v);
    case VectorFault::JOIN_REDUCE:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: vector_tile = 0 joins lines, which a reduction cannot do");
    case VectorFault::JOIN_CONTIGUOUS:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: vector_tile = 0 joins lines, which needs the vector axis ({}) contiguous in "
                          "GM on both sides",
                          vector_axis_name(V));
    case VectorFault::ROWS:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: ub_tile = {} must be a whole number of rows of vector_tile = {}", v.ub_tile,
                          v.vector_tile);
    case VectorFault::FUSE_INPUT:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: fuse_input: no input of this op can come from a neighbour in UB");
    case VectorFault::FUSE_OUTPUT:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: fuse_output: this op's output cannot stay in UB for a neighbour");
    case VectorFault::FUSE_UB_BUFFERS_RANGE:
        return make_error(StatusCode::INVALID_ARGUMENT, "schedule: fuse_ub_buffers = {} outside [0, {}]",
                          v.fuse_ub_buffers, kFuseUbBuffersMax);
    case VectorFault::FUSE_UB_BUFFERS_UNFUSED:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: fuse_ub_buffers = {} needs fuse_input or fuse_output", v.fuse_ub_buffers);
    case VectorFault::IN_PLACE:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: in_place: this op cannot write its output over an input tile");
    case VectorFault::UB_CAPACITY:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "schedule: UB needs {} bytes for ub_tile = {} ({} live tiles, double buffer {}) but holds {}",
                          f.need, v.ub_tile, f.live, v.double_buffer ? "on" : "off", s.ub_bytes());
    }
    LOOM_ASSERT_MSG(false, "vector_fault_status: no fault");
    return {};
}

// The tile of legal schedule `v`, from the facts its check derived.
Geometry geometry(const VectorSchedule& v, const VectorWork& w, const DeviceSpec& s, const VectorFacts& f) {
    Geometry g;
    const Space& sp = f.sp;
    const VectorAxis V = v.vector_axis;
    const int64_t e_v = f.e_v, eb = f.eb;
    g.joined = v.vector_tile == 0;
    const double lanes = static_cast<double>(s.vector_bytes_per_cycle) / 4;  // fp32 lanes per repeat
    const int64_t n = w.elements;
    if (g.joined) {
        // Flat runs of ub_tile consecutive elements: whole blocks, full repeats but the last.
        g.blocks = std::max<int64_t>(1, ceil_div(n, v.ub_tile));
        g.elems = static_cast<double>(v.ub_tile);
        g.repeats = std::ceil(g.elems / lanes);
    } else {
        const int64_t vt = v.vector_tile;
        g.rows = v.ub_tile / vt;
        const int64_t lines = sp.ext[0] * sp.ext[1] * sp.ext[2] / e_v;
        const int64_t v_row = std::min(vt, e_v), rows_used = std::min(g.rows, lines);
        g.blocks = std::max<int64_t>(1, ceil_div(e_v, vt) * ceil_div(lines, g.rows));
        g.elems = static_cast<double>(g.rows * v_row);
        g.repeats = static_cast<double>(g.rows) * std::ceil(static_cast<double>(v_row) / lanes);
        if (w.axis_role == AxisRole::REDUCE && V == VectorAxis::AXIS && e_v > 1)
            g.fold = w.reduce_passes * static_cast<double>(g.rows);
        // The tile's extent along each axis: v_row along V, its rows along the other two.
        std::array<int64_t, kVectorAxisCount> te{1, 1, 1};
        const auto [f1, f2] = row_axes(V);
        te[ix(V)] = v_row;
        te[ix(f1)] = std::min(rows_used, sp.ext[ix(f1)]);
        te[ix(f2)] = rows_used > sp.ext[ix(f1)] ? std::min(ceil_div(rows_used, sp.ext[ix(f1)]), sp.ext[ix(f2)]) : 1;
        // One MTE burst covers the tile's run along the side's contiguous axis, and continues into
        // the next axis when that run is whole, except into UB rows padded past a short line.
        auto factor = [&](const std::array<VectorAxis, kVectorAxisCount>& order) {
            std::array<VectorAxis, kVectorAxisCount> dims{};
            size_t k = 0;
            for (VectorAxis a : order)
                if (sp.ext[ix(a)] > 1) dims[k++] = a;
            if (k == 0) return block_factor(static_cast<double>(eb));
            const VectorAxis c = dims[0];
            int64_t run = te[ix(c)];
            const bool padded = c == V && v_row < vt;
            if (te[ix(c)] == sp.ext[ix(c)] && !padded && k > 1) run *= te[ix(dims[1])];
            return block_factor(static_cast<double>(run * eb));
        };
        g.factor_in = factor(sp.in_order);
        g.factor_out = factor(sp.out_order);
        g.strided_in = V != f.c_in;
        g.strided_out = V != f.c_out;
    }
    return g;
}

// Checks `v` field by field (errors name the field) and resolves its tile.
Result<Geometry> plan(const VectorSchedule& v, const VectorWork& w, const DeviceSpec& s) {
    VectorFacts f;
    if (const VectorFault fault = vector_fault(v, w, s, f); fault != VectorFault::NONE)
        return vector_fault_status(fault, v, f, s);
    return geometry(v, w, s, f);
}

// The cost of legal schedule `v`, resolved to `g`.
CycleBreakdown schedule_cost(const VectorSchedule& v, const VectorWork& w, const DeviceSpec& s, const Geometry& g) {
    CycleBreakdown cb;
    cb.blocks = g.blocks;
    cb.cores_used = std::min(cb.blocks, v.cores ? v.cores : s.aicore_count);
    cb.rounds = ceil_div(cb.blocks, cb.cores_used);
    const double eb = static_cast<double>(std::max<int64_t>(1, w.elem_bytes));
    // Bytes per element each side moves: from or to global memory, and from or to L2 (an operand
    // resident there: 3.3). Without residency the L2 terms are 0 and nothing changes.
    const double in_moved = gm_in_bytes(v, w), out_moved = gm_out_bytes(v, w);
    const double in_l2 = std::min(in_moved, std::max(0.0, w.l2_in_bytes)), out_l2 = w.l2_out ? out_moved : 0.0;
    const double in_gm = in_moved - in_l2, out_gm = out_moved - out_l2;
    const double bytes_in = g.elems * in_gm * g.factor_in, bytes_out = g.elems * out_gm * g.factor_out;
    const double l2_in = g.elems * in_l2 * g.factor_in, l2_out = g.elems * out_l2 * g.factor_out;
    const double t_in = bytes_in / gm_bytes_per_cycle(s, s.mte_gm_to_ub, cb.cores_used) +
                        l2_in / l2_bytes_per_cycle(s, s.mte_gm_to_ub, cb.cores_used);
    const double t_out = bytes_out / gm_bytes_per_cycle(s, s.mte_ub_to_gm, cb.cores_used) +
                         l2_out / l2_bytes_per_cycle(s, s.mte_ub_to_gm, cb.cores_used);
    // Loads and stores run on separate MTEs but share the core's memory bandwidth (and its L2
    // share for resident operands).
    const double t_mem = (bytes_in + bytes_out) / memory_share_per_cycle(s, cb.cores_used);
    const double t_l2 = (l2_in + l2_out) / l2_share_per_cycle(s, cb.cores_used);
    double passes = w.vector_passes;
    if (g.joined && w.axis_role == AxisRole::BROADCAST) passes += 1;  // the operand expanded across lines
    passes += kTransposePasses * ((g.strided_in ? in_moved : 0) + (g.strided_out ? out_moved : 0)) / eb;
    const double t_vec = passes * g.repeats + g.fold;
    const double rounds = static_cast<double>(cb.rounds);
    cb.mte_in = rounds * t_in;
    cb.mte_out = rounds * t_out;
    cb.vector = rounds * t_vec;
    cb.scalar = (kScalarInstrPerBlock + rounds * kScalarInstrPerTile) / static_cast<double>(s.scalar_ops_per_cycle);
    // Double buffering: the first tile's load and the last tile's store are exposed, every tile
    // in between costs the slowest of load, compute, store and the shared memory bandwidth.
    double body = v.double_buffer ? t_in + t_vec + t_out + (rounds - 1) * std::max({t_in, t_vec, t_out, t_mem, t_l2})
                                  : rounds * (t_in + t_vec + t_out);
    cb.total = body + cb.scalar;
    cb.flops = static_cast<double>(w.elements) * w.flops;
    // Streaming data: every byte (whole blocks) comes from and goes to global memory once, or to
    // and from L2 when resident there.
    cb.l2_miss_bytes = static_cast<double>(w.elements) * (in_gm * g.factor_in + out_gm * g.factor_out);
    cb.l2_hit_bytes = static_cast<double>(w.elements) * (in_l2 * g.factor_in + out_l2 * g.factor_out);
    return cb;
}

// The largest tile (elements) that double-buffers `live` tiles in UB, and that tile capped at one
// core's share of the elements (never below one block).
struct TileSize {
    int64_t fit, share;
};
TileSize tile_size(const VectorWork& w, const DeviceSpec& s, int64_t live, int64_t block) {
    const int64_t eb = std::max<int64_t>(1, w.elem_bytes);
    const int64_t fit = std::max(block, s.ub_bytes() / (2 * live * eb) / block * block);
    const int64_t share = round_up(ceil_div(std::max<int64_t>(w.elements, 1), s.aicore_count), block);
    return {fit, std::min(fit, share)};
}

// Rows of lines along `axis`: about as many tiles as the flat stream would have. With `across`
// (the shape of a transposition) chunks of the axis come first and the rows run across the
// other axes, so that each side moves long runs; otherwise whole lines in rows come first and
// balanced chunks of the lines only when there are too few lines. Then, where the last round
// over the cores would be partial, smaller tiles fill it unless that takes one more round.
VectorSchedule lines_schedule(const VectorWork& w, const DeviceSpec& s, const Space& sp, VectorAxis axis, bool across,
                              int64_t block) {
    const VectorAxis c_in = contiguous_axis(sp, sp.in_order), c_out = contiguous_axis(sp, sp.out_order);
    const bool staging = axis != c_in || axis != c_out;  // a transposition tile
    const TileSize size = tile_size(w, s, std::max<int64_t>(1, w.ub_buffers) + (staging ? 1 : 0), block);
    const int64_t e_v = sp.ext[ix(axis)];
    const int64_t lines = sp.ext[0] * sp.ext[1] * sp.ext[2] / e_v;
    // Chunks no shorter than one repeat of the lanes, where the line is that long.
    const int64_t lanes = std::max<int64_t>(1, s.vector_bytes_per_cycle / 4);
    const int64_t chunks_max = ceil_div(e_v, round_up(lanes, block));
    int64_t chunks = 1, groups = 1, vt = block, rows = 1;
    auto shape = [&](int64_t tiles) {
        if (across) {
            chunks = std::min(chunks_max, tiles);
            groups = std::min(lines, ceil_div(tiles, chunks));
        } else {
            groups = std::min(lines, tiles);
            chunks = std::min(chunks_max, ceil_div(tiles, groups));
        }
        vt = std::min(round_up(ceil_div(e_v, chunks), block), size.fit);
        chunks = ceil_div(e_v, vt);
        rows = std::min(ceil_div(lines, groups), std::max<int64_t>(1, size.fit / vt));
        groups = ceil_div(lines, rows);
    };
    shape(ceil_div(std::max<int64_t>(w.elements, 1), size.share));
    const int64_t rounds = ceil_div(chunks * groups, s.aicore_count);
    const int64_t vt_first = vt, rows_first = rows;
    shape(rounds * s.aicore_count);
    if (ceil_div(chunks * groups, s.aicore_count) > rounds) vt = vt_first, rows = rows_first;
    VectorSchedule v;
    v.vector_axis = axis;
    v.vector_tile = vt;
    v.ub_tile = rows * vt;
    return v;
}

}  // namespace

int64_t vector_axis_extent(const VectorWork& w, VectorAxis axis) {
    const int a = static_cast<int>(axis);
    LOOM_ASSERT(a >= 0 && a < kVectorAxisCount);
    return space_of(w).ext[static_cast<size_t>(a)];
}

VectorSchedule vector_default_schedule(const VectorWork& w, const DeviceSpec& s) {
    const Space sp = space_of(w);
    const int64_t block = std::max<int64_t>(1, 32 / std::max<int64_t>(1, w.elem_bytes));
    const VectorAxis c_in = contiguous_axis(sp, sp.in_order), c_out = contiguous_axis(sp, sp.out_order);
    if (c_in == c_out && w.axis_role != AxisRole::REDUCE) {
        // One flat stream, lines joined: the largest tile that double-buffers every live tile in
        // UB, no larger than one core's share.
        VectorSchedule v;
        v.ub_tile = tile_size(w, s, std::max<int64_t>(1, w.ub_buffers), block).share;
        return v;
    }
    // Two natural shapes, and the cost model keeps the cheaper (the first on a tie). A transpose:
    // lines along either side's contiguous axis, rows across the other. A reduction: lines along
    // the contiguous axis, or, where another axis is longer, lanes across the lines along it (a
    // short contiguous line wastes lanes; across the lines costs a transposition).
    VectorSchedule candidates[2];
    int count = 0;
    if (c_in != c_out) {
        candidates[count++] = lines_schedule(w, s, sp, c_out, true, block);
        candidates[count++] = lines_schedule(w, s, sp, c_in, true, block);
    } else {
        candidates[count++] = lines_schedule(w, s, sp, c_in, false, block);
        VectorAxis longest = c_in;
        for (VectorAxis a : sp.in_order)
            if (sp.ext[ix(a)] > sp.ext[ix(longest)]) longest = a;
        if (longest != c_in) candidates[count++] = lines_schedule(w, s, sp, longest, true, block);
    }
    int best = 0;
    double best_total = 0;
    for (int i = 0; i < count; ++i) {
        auto g = plan(candidates[i], w, s);
        if (!g.ok()) continue;
        const double total = schedule_cost(candidates[i], w, s, *g).total;
        if (i == 0 || total < best_total) best = i, best_total = total;
    }
    return candidates[best];
}

Status vector_schedule_check(const VectorSchedule& v, const VectorWork& w, const DeviceSpec& s) {
    VectorFacts f;
    const VectorFault fault = vector_fault(v, w, s, f);
    return fault == VectorFault::NONE ? Status() : vector_fault_status(fault, v, f, s);
}

bool vector_schedule_legal(const VectorSchedule& v, const VectorWork& w, const DeviceSpec& s) {
    VectorFacts f;
    return vector_fault(v, w, s, f) == VectorFault::NONE;
}

int64_t vector_live_tiles(const VectorSchedule& v, const VectorWork& w) {
    const Space sp = space_of(w);
    const VectorAxis c_in = contiguous_axis(sp, sp.in_order), c_out = contiguous_axis(sp, sp.out_order);
    const bool strided = v.vector_tile != 0 && (v.vector_axis != c_in || v.vector_axis != c_out);
    return std::max<int64_t>(1, w.ub_buffers) - (v.in_place ? 1 : 0) + (strided ? 1 : 0);
}

Result<CycleBreakdown> vector_cost(const DeviceSpec& s, const VectorWork& w, const Tiling& tiling,
                                   std::string_view kernel) {
    VectorSchedule v;
    if (const auto* given = std::get_if<VectorSchedule>(&tiling)) v = *given;
    else if (std::holds_alternative<std::monostate>(tiling)) v = vector_default_schedule(w, s);
    else return make_error(StatusCode::INVALID_ARGUMENT, "{} needs a VectorSchedule, not a CubeTiling", kernel);
    auto g = plan(v, w, s);
    if (!g.ok()) return g.status().with_context(kernel);
    CycleBreakdown cb = schedule_cost(v, w, s, *g);
    cb.tiling = v;
    return cb;
}

int64_t cube_k0(const CubeWork& d, const DeviceSpec& s) {
    return d.int8 ? s.cube_fractal * s.cube_int8_rate : s.cube_fractal;
}

namespace {

// The default heuristic with L0 M tiles of up to `m_cap` rows: one L0 tile per L1 block along M
// and N, K staged in L1 up to four L0 slices; halve M/N blocks until every core has work; then,
// for small buffer configurations, halve K, then M and N, until the tiling fits.
CubeTiling default_tiling(const CubeWork& d, const DeviceSpec& s, int64_t m_cap) {
    int64_t f = s.cube_fractal, k0 = cube_k0(d, s);
    CubeTiling t;
    t.m_l0 = std::min(round_up(d.m, f), round_up(m_cap, f));
    t.n_l0 = std::min(round_up(d.n, f), round_up(128, f));
    t.k_l0 = std::min(round_up(d.k, k0), round_up(d.int8 ? 128 : 64, k0));
    auto blocks = [&] { return ceil_div(d.m, t.m_l0) * ceil_div(d.n, t.n_l0); };
    while (blocks() < s.aicore_count && (t.m_l0 > f || t.n_l0 > f)) {
        if (t.m_l0 >= t.n_l0 && t.m_l0 > f) t.m_l0 = round_up(t.m_l0 / 2, f);
        else t.n_l0 = round_up(t.n_l0 / 2, f);
    }
    auto set_l1 = [&] {
        t.m_l1 = t.m_l0;
        t.n_l1 = t.n_l0;
        t.k_l1 = std::min(round_up(d.k, t.k_l0), 4 * t.k_l0);
    };
    set_l1();
    while (!cube_tiling_legal(t, d, s)) {
        if (t.k_l1 > t.k_l0) t.k_l1 -= t.k_l0;
        else if (t.k_l0 > k0) t.k_l0 = round_up(t.k_l0 / 2, k0);
        else if (t.m_l0 >= t.n_l0 && t.m_l0 > f) t.m_l0 = round_up(t.m_l0 / 2, f);
        else if (t.n_l0 > f) t.n_l0 = round_up(t.n_l0 / 2, f);
        else break;  // one fractal does not fit: cube_tiling_check reports it to the caller
        if (t.m_l1 != t.m_l0 || t.n_l1 != t.n_l0 || t.k_l1 % t.k_l0) set_l1();
    }
    return t;
}

}  // namespace

// Default tiling: L0 tiles of up to 128 x 128 x 64 in whole fractals (see default_tiling). int8
// holds 1-byte elements, so L0 k tiles of 128 fill the bytes fp16's 64 do, and an M tile of 256
// fits too: fewer re-reads of B, but coarser blocks that may leave a tail round; the model's own
// cost picks between the 256- and 128-row tilings.
CubeTiling cube_default_tiling(const CubeWork& d, const DeviceSpec& s) {
    const CubeTiling t = default_tiling(d, s, 128);
    if (!d.int8) return t;
    const CubeTiling tall = default_tiling(d, s, 256);
    if (tall.m_l0 == t.m_l0) return t;
    auto a = cube_cost(s, d, tall, "int8 default tiling"), b = cube_cost(s, d, t, "int8 default tiling");
    return a.ok() && (!b.ok() || a->total < b->total) ? tall : t;
}

namespace {

// The first field of a CubeTiling outside its legal range (docs/device-model.md 4.1), in the order
// cube_tiling_check reports them; NONE when the tiling is legal. The buffers are checked in the
// order of CubeNeeds::buffer.
enum class CubeFault : uint8_t { NONE, L0_SIZES, L1_SIZES, CORES, BUFFER };

// Bytes each on-chip buffer needs for a tiling whose sizes are positive (saturating at the
// int64 maximum: a tiling read from a file may hold any size).
struct CubeNeeds {
    static constexpr int kBuffers = 5;
    static constexpr const char* buffer[kBuffers] = {"L1", "L0A", "L0B", "L0C", "UB"};
    std::array<int64_t, kBuffers> need{}, have{};
};

int64_t saturated(const Checked& c) { return c.get().value_or(std::numeric_limits<int64_t>::max()); }

CubeNeeds cube_needs(const CubeTiling& t, const CubeWork& d, const DeviceSpec& s) {
    // L1 and L0 hold int8 operands as 1-byte elements.
    const int64_t in = d.int8 ? 1 : static_cast<int64_t>(dtype_size(d.dtype));
    const Checked db = t.double_buffer ? 2 : 1;
    CubeNeeds n;
    n.need = {
        saturated(db * (Checked(t.m_l1) * t.k_l1 + Checked(t.k_l1) * t.n_l1) * in),
        saturated(db * t.m_l0 * t.k_l0 * in),
        saturated(db * t.k_l0 * t.n_l0 * in),
        // Every L0 output tile of an L1 block accumulates across all K stages, so L0C holds
        // the whole block in fp32 (twice with double buffering, so the epilogue drains one).
        saturated(db * t.m_l1 * t.n_l1 * 4),
        // One fp32 L0C tile and a bias row (int8: and a row of dequantize factors).
        saturated(Checked(t.m_l0) * t.n_l0 * 4 + Checked(t.n_l0) * 4 * (d.int8 ? 2 : 1)),
    };
    n.have = {s.l1_bytes(), s.l0a_bytes(), s.l0b_bytes(), s.l0c_bytes(), s.ub_bytes()};
    return n;
}

// The first fault of `t` for `d` on `s`; with BUFFER, `buffer` is the first buffer that overflows.
CubeFault cube_fault(const CubeTiling& t, const CubeWork& d, const DeviceSpec& s, int& buffer) {
    const int64_t f = s.cube_fractal, k0 = cube_k0(d, s);
    if (t.m_l0 <= 0 || t.n_l0 <= 0 || t.k_l0 <= 0 || t.m_l0 % f || t.n_l0 % f || t.k_l0 % k0)
        return CubeFault::L0_SIZES;
    if (t.m_l1 <= 0 || t.n_l1 <= 0 || t.k_l1 <= 0 || t.m_l1 % t.m_l0 || t.n_l1 % t.n_l0 || t.k_l1 % t.k_l0)
        return CubeFault::L1_SIZES;
    if (t.cores < 0 || t.cores > s.aicore_count) return CubeFault::CORES;
    const CubeNeeds n = cube_needs(t, d, s);
    for (buffer = 0; buffer < CubeNeeds::kBuffers; ++buffer)
        if (n.need[static_cast<size_t>(buffer)] > n.have[static_cast<size_t>(buffer)]) return CubeFault::BUFFER;
    return CubeFault::NONE;
}

}  // namespace

Status cube_tiling_check(const CubeTiling& t, const CubeWork& d, const DeviceSpec& s) {
    int buffer = 0;
    const CubeFault fault = cube_fault(t, d, s, buffer);
    const int64_t f = s.cube_fractal, k0 = cube_k0(d, s);
    switch (fault) {
    case CubeFault::NONE: return {};
    case CubeFault::L0_SIZES:
        if (k0 == f)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "tiling: L0 sizes {}x{}x{} must be positive multiples of {}", t.m_l0, t.n_l0, t.k_l0, f);
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "tiling: L0 sizes {}x{}x{} must be positive multiples of the int8 fractal {}x{}x{}", t.m_l0,
                          t.n_l0, t.k_l0, f, f, k0);
    case CubeFault::L1_SIZES:
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "tiling: L1 sizes {}x{}x{} must be positive multiples of the L0 sizes {}x{}x{}", t.m_l1,
                          t.n_l1, t.k_l1, t.m_l0, t.n_l0, t.k_l0);
    case CubeFault::CORES:
        return make_error(StatusCode::INVALID_ARGUMENT, "tiling: cores = {} outside [0, {}]", t.cores, s.aicore_count);
    case CubeFault::BUFFER: break;
    }
    const CubeNeeds n = cube_needs(t, d, s);
    const auto b = static_cast<size_t>(buffer);
    return make_error(StatusCode::INVALID_ARGUMENT,
                      "tiling: {} needs {} bytes but holds {} (L1 {}x{}x{}, L0 {}x{}x{}, double buffer {})",
                      CubeNeeds::buffer[b], n.need[b], n.have[b], t.m_l1, t.n_l1, t.k_l1, t.m_l0, t.n_l0, t.k_l0,
                      t.double_buffer ? "on" : "off");
}

bool cube_tiling_legal(const CubeTiling& t, const CubeWork& d, const DeviceSpec& s) {
    int buffer = 0;
    return cube_fault(t, d, s, buffer) == CubeFault::NONE;
}

Result<CycleBreakdown> cube_cost(const DeviceSpec& s, const CubeWork& d, const Tiling& tiling,
                                 std::string_view kernel) {
    CubeTiling t;
    if (const auto* given = std::get_if<CubeTiling>(&tiling)) t = *given;
    else if (std::holds_alternative<std::monostate>(tiling)) t = cube_default_tiling(d, s);
    else return make_error(StatusCode::INVALID_ARGUMENT, "{} needs a CubeTiling, not a VectorSchedule", kernel);
    LOOM_TRY(cube_tiling_check(t, d, s).with_context(kernel));

    // Bytes per element: A (X) and C in GM are `dtype`; B in GM and both operands in L1/L0 are
    // 1 byte for int8 (the Vector unit quantizes A on its way in).
    const double out = static_cast<double>(dtype_size(d.dtype)), a_in = out;
    const double b_in = d.int8 ? 1.0 : out, l_in = d.int8 ? 1.0 : out;
    const int64_t f = s.cube_fractal, k0 = cube_k0(d, s);
    const int64_t blocks_m = ceil_div(d.m, t.m_l1), blocks_n = ceil_div(d.n, t.n_l1);
    CycleBreakdown cb;
    const double batch = static_cast<double>(d.batch);
    cb.blocks = d.batch * blocks_m * blocks_n;
    // An empty product (a batch, M or N of 0: a conv over zero images) has no block and costs
    // nothing; without this its cores and rounds would divide by zero.
    if (cb.blocks == 0) return cb;
    cb.cores_used = std::min(cb.blocks, t.cores ? t.cores : s.aicore_count);
    cb.rounds = ceil_div(cb.blocks, cb.cores_used);

    // L2: each byte of A and B misses once; re-reads hit when the operand re-read across the
    // inner loop fits in L2 next to the other operand's panel, and miss again otherwise.
    const double a_bytes = static_cast<double>(d.m * d.k) * a_in * d.a_gm_scale,
                 b_bytes = static_cast<double>(d.k * d.n) * b_in;
    const double a_reads = a_bytes * static_cast<double>(blocks_n), b_reads = b_bytes * static_cast<double>(blocks_m);
    const double l2 = static_cast<double>(s.l2_bytes());
    double refetch = 0;
    if (!t.n_outer) {  // M outer: B is swept once per M block
        double panel = static_cast<double>(t.m_l1 * d.k) * a_in;
        if (b_bytes + panel > l2) refetch = b_reads - b_bytes;
    } else {
        double panel = static_cast<double>(t.n_l1 * d.k) * b_in;
        if (a_bytes + panel > l2) refetch = a_reads - a_bytes;
    }
    // A resident in L2 (3.3): its first reads hit too.
    const double a_miss = d.a_l2 ? 0.0 : a_bytes;
    const double reads = a_reads + b_reads;
    cb.l2_miss_bytes = batch * (a_miss + b_bytes + refetch);
    cb.l2_hit_bytes = batch * reads - cb.l2_miss_bytes;
    const double miss_frac = (a_miss + b_bytes + refetch) / reads;

    // One L1 stage: MTE2 brings the A and B slices; MTE1 feeds every L0 tile pair; the Cube
    // runs (m_l0/f) x (n_l0/f) x (k_l0/k0) fractals per L0 tile (f32 at half rate).
    const double gm_bpc = gm_bytes_per_cycle(s, s.mte_gm_to_l1, cb.cores_used);
    const double l2_bpc = l2_bytes_per_cycle(s, s.mte_gm_to_l1, cb.cores_used);
    const double stage_bytes = static_cast<double>(t.m_l1 * t.k_l1) * d.a_gm_scale * a_in +
                               static_cast<double>(t.k_l1 * t.n_l1) * b_in;
    const double t_mte2 = stage_bytes * (miss_frac / gm_bpc + (1 - miss_frac) / l2_bpc);
    const double l0_tiles = static_cast<double>((t.m_l1 / t.m_l0) * (t.n_l1 / t.n_l0) * (t.k_l1 / t.k_l0));
    const double t_mte1 = l0_tiles * static_cast<double>(t.m_l0 * t.k_l0 + t.k_l0 * t.n_l0) * l_in /
                          static_cast<double>(s.mte_l1_to_l0);
    const double rate = d.dtype == DType::F32 && !d.int8 ? 2.0 : 1.0;
    const double t_cube = l0_tiles * static_cast<double>((t.m_l0 / f) * (t.n_l0 / f) * (t.k_l0 / k0)) * rate;
    const double steps = static_cast<double>(ceil_div(d.k, t.k_l1));
    const double rounds = static_cast<double>(cb.rounds);
    // int8: the Vector unit quantizes every element of the raw A (X) once (one pass at fp32
    // width, +1 to widen f16); the critical core's share is spread evenly over its stages.
    double t_quant = 0;
    if (d.int8) {
        const double x_elems = batch * static_cast<double>(d.m * d.k) * d.a_gm_scale;
        const double passes = d.dtype == DType::F16 ? 2.0 : 1.0;
        const double core_share = std::ceil(x_elems / static_cast<double>(cb.cores_used));
        t_quant = core_share * passes * 4 / static_cast<double>(s.vector_bytes_per_cycle) / (rounds * steps);
    }
    // Double buffering pipelines MTE1 with the Cube tile by tile (L0A/L0B ping-pong), and on
    // across the block's L1 stages: the first L0 tile of stage s+1 loads while the Cube runs the
    // last of stage s (its L1 data came in meanwhile), so a stage costs its tiles at the slower
    // unit's pace and the block pays the other unit's share of one tile once (`fill`). MTE2 and
    // the quantize pass pipeline with that across stages (L1 ping-pong): every stage pays once,
    // then each further stage costs only the bottleneck.
    const double load = t_mte1 / l0_tiles, mma = t_cube / l0_tiles;
    const double pace = l0_tiles * std::max(load, mma), fill = std::min(load, mma);
    double main;
    if (t.double_buffer) main = t_mte2 + t_quant + fill + pace + (steps - 1) * std::max({t_mte2, t_quant, pace});
    else main = steps * (t_mte2 + t_quant + t_mte1 + t_cube);

    // Epilogue per block: L0C -> UB (fp32), bias + activation + cast on the Vector unit, UB -> GM.
    const double c_elems = static_cast<double>(t.m_l1 * t.n_l1);
    const double t_fix = c_elems * 4 / static_cast<double>(s.mte_l0c_to_ub);
    // Vector passes (bias add, activation, residual add, the fp32 -> f16 cast), given by the kernel.
    const double t_vec = d.epilogue_passes * c_elems * 4 / static_cast<double>(s.vector_bytes_per_cycle);
    // C written to L2 and a residual read from it move at the L2 rate (3.3).
    const double t_out = c_elems * out /
                         (d.c_l2 ? l2_bytes_per_cycle(s, s.mte_ub_to_gm, cb.cores_used)
                                 : gm_bytes_per_cycle(s, s.mte_ub_to_gm, cb.cores_used));
    const double t_res = c_elems * d.epilogue_in_bytes /
                         (d.residual_l2 ? l2_bytes_per_cycle(s, s.mte_gm_to_ub, cb.cores_used)
                                        : gm_bytes_per_cycle(s, s.mte_gm_to_ub, cb.cores_used));
    const double epi = t_fix + t_vec + t_out + t_res;

    cb.mte_in = rounds * (t_mte2 + t_mte1) * steps;
    cb.cube = rounds * t_cube * steps;
    cb.vector = rounds * (t_vec + steps * t_quant);
    cb.mte_in += rounds * t_res;
    cb.mte_out = rounds * (t_fix + t_out);
    cb.scalar = rounds * (kScalarInstrPerBlock + steps * l0_tiles * kScalarInstrPerTile) /
                static_cast<double>(s.scalar_ops_per_cycle);
    // With double buffering a block's epilogue overlaps the next block's main loop (L0C
    // ping-pong). When all of K fits one L1 stage, the other L1 buffer takes the next block's
    // operands during this block (MTE2 preload), so blocks stream through MTE2, the quantize
    // pass, MTE1 + Cube and the epilogue like stages: the first block pays every unit, each
    // further block only the bottleneck. Otherwise a block's loads start after the previous
    // block's Cube work (docs/device-model.md 4.6, 4.8).
    double body;
    if (!t.double_buffer) body = rounds * (main + epi);
    else if (steps == 1) body = main + epi + (rounds - 1) * std::max({t_mte2, t_quant, pace, epi});
    else body = rounds * std::max(main, epi) + std::min(main, epi);
    // Overlap cannot beat the bandwidth: the core's loads that miss L2 and its stores share its
    // memory share; its L2 hits share its L2 share.
    const double c_gm = (d.c_l2 ? 0.0 : out) + (d.residual_l2 ? 0.0 : d.epilogue_in_bytes);
    const double c_l2 = (d.c_l2 ? out : 0.0) + (d.residual_l2 ? d.epilogue_in_bytes : 0.0);
    const double gm_bytes = rounds * (steps * stage_bytes * miss_frac + c_elems * c_gm);
    const double l2_bytes = rounds * steps * stage_bytes * (1 - miss_frac) + rounds * c_elems * c_l2;
    body = std::max({body, gm_bytes / memory_share_per_cycle(s, cb.cores_used),
                     l2_bytes * s.aicore_clock_ghz * static_cast<double>(cb.cores_used) / s.l2_bandwidth_gbps});
    cb.total = body + cb.scalar;
    cb.flops = 2.0 * batch * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
    cb.tiling = t;
    return cb;
}

Result<CycleBreakdown> cost_of_work(const DeviceSpec& s, const KernelWork& work, const Tiling& tiling,
                                    std::string_view kernel) {
    CycleBreakdown cb;
    if (work.kind == TilingKind::CUBE) {
        LOOM_ASSIGN_OR_RETURN(cb, cube_cost(s, work.cube, tiling, kernel));
    } else if (work.kind == TilingKind::VECTOR) {
        LOOM_ASSIGN_OR_RETURN(cb, vector_cost(s, work.vector, tiling, kernel));
    } else if (!std::holds_alternative<std::monostate>(tiling)) {
        return make_error(StatusCode::INVALID_ARGUMENT, "{} takes no tiling, not a {}", kernel,
                          tiling_kind_name(tiling_kind_of(tiling)));
    }
    const FixedCost& x = work.fixed;
    cb.mte_in += x.mte_in;
    cb.mte_out += x.mte_out;
    cb.cube += x.cube;
    cb.vector += x.vector;
    cb.scalar += x.scalar;
    cb.total += x.total;
    cb.l2_hit_bytes += x.l2_hit_bytes;
    cb.l2_miss_bytes += x.l2_miss_bytes;
    cb.flops += x.flops;
    return cb;
}

double work_cycles(const DeviceSpec& s, const KernelWork& work, const Tiling& tiling) {
    if (!std::holds_alternative<std::monostate>(tiling) && !tiling_legal(tiling, work, s))
        return std::numeric_limits<double>::infinity();
    auto cb = cost_of_work(s, work, tiling, "work_cycles");
    return cb.ok() ? cb->total : std::numeric_limits<double>::infinity();
}

Tiling default_tiling(const KernelWork& work, const DeviceSpec& s) {
    switch (work.kind) {
    case TilingKind::CUBE: return cube_default_tiling(work.cube, s);
    case TilingKind::VECTOR: return vector_default_schedule(work.vector, s);
    case TilingKind::NONE: break;
    }
    return std::monostate{};
}

bool tiling_legal(const Tiling& tiling, const KernelWork& work, const DeviceSpec& s) {
    switch (work.kind) {
    case TilingKind::CUBE: {
        const auto* t = std::get_if<CubeTiling>(&tiling);
        return t && cube_tiling_legal(*t, work.cube, s);
    }
    case TilingKind::VECTOR: {
        const auto* v = std::get_if<VectorSchedule>(&tiling);
        return v && vector_schedule_legal(*v, work.vector, s);
    }
    case TilingKind::NONE: break;
    }
    return std::holds_alternative<std::monostate>(tiling);
}

}  // namespace loom::device::cost
