// Tiling spaces and the check of fused Vector neighbours (device/cost.hpp; docs/device-model.md,
// "Tuning interface"). Bounds come from the legality checks themselves: every capacity constraint
// grows with each size, so a size is kept when its smallest completion (every other field at its
// smallest, single-buffered) is legal, which is exactly when some completion is.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "common/checked.hpp"
#include "device/cost.hpp"
#include "device/kernels/cost_util.hpp"

namespace loom::device::cost {

namespace {

// The largest i in [1, hi] with ok(i), for ok true up to some point and false after it; 0 when
// ok(1) is false.
template <typename Ok>
int64_t last_ok(int64_t hi, Ok&& ok) {
    if (hi < 1 || !ok(1)) return 0;
    int64_t lo = 1;  // ok(lo) holds
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (ok(mid)) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The smallest CubeTiling: one granule per L0 size, L1 = L0, single-buffered, all cores.
CubeTiling smallest_cube(const CubeWork& w, const DeviceSpec& s) {
    CubeTiling t;
    t.m_l0 = t.m_l1 = t.n_l0 = t.n_l1 = s.cube_fractal;
    t.k_l0 = t.k_l1 = cube_k0(w, s);
    t.double_buffer = false;
    return t;
}

// The candidate L0 sizes along one dimension of `extent` (granule `g`), and per candidate its
// L1 multiples; `set` puts an L0 size and an L1 multiple into a tiling.
template <typename Set>
void cube_axis(const CubeWork& w, const DeviceSpec& s, int64_t extent, int64_t g, Set&& set, std::vector<int64_t>& l0,
               std::vector<int64_t>& l1_count) {
    const CubeTiling base = smallest_cube(w, s);
    const int64_t granules = ceil_div(std::max<int64_t>(extent, 1), g);
    auto legal = [&](int64_t size, int64_t multiple) {
        CubeTiling t = base;
        set(t, size, size * multiple);
        return cube_tiling_legal(t, w, s);
    };
    const int64_t top = last_ok(granules, [&](int64_t i) { return legal(i * g, 1); });
    for (int64_t i = 1; i <= top; ++i) {
        const int64_t size = i * g;
        l0.push_back(size);
        l1_count.push_back(
            last_ok(ceil_div(std::max<int64_t>(extent, 1), size), [&](int64_t j) { return legal(size, j); }));
    }
}

}  // namespace

CubeSpace cube_space(const CubeWork& w, const DeviceSpec& s) {
    CubeSpace sp;
    sp.m = w.m, sp.n = w.n, sp.k = w.k;
    sp.cores_max = s.aicore_count;
    const int64_t f = s.cube_fractal, k0 = cube_k0(w, s);
    cube_axis(
        w, s, w.m, f, [](CubeTiling& t, int64_t l0, int64_t l1) { t.m_l0 = l0, t.m_l1 = l1; }, sp.m_l0, sp.m_l1_count);
    cube_axis(
        w, s, w.n, f, [](CubeTiling& t, int64_t l0, int64_t l1) { t.n_l0 = l0, t.n_l1 = l1; }, sp.n_l0, sp.n_l1_count);
    cube_axis(
        w, s, w.k, k0, [](CubeTiling& t, int64_t l0, int64_t l1) { t.k_l0 = l0, t.k_l1 = l1; }, sp.k_l0, sp.k_l1_count);
    return sp;
}

bool CubeSpace::contains(const CubeTiling& t) const {
    auto in = [](int64_t l0, int64_t l1, int64_t multiples) {
        return multiples > 0 && l1 > 0 && l1 % l0 == 0 && l1 / l0 <= multiples;
    };
    return in(t.m_l0, t.m_l1, m_l1_multiples(t.m_l0)) && in(t.n_l0, t.n_l1, n_l1_multiples(t.n_l0)) &&
           in(t.k_l0, t.k_l1, k_l1_multiples(t.k_l0)) && t.cores >= 0 && t.cores <= cores_max;
}

double CubeSpace::size() const {
    auto sum = [](const std::vector<int64_t>& counts) {
        double total = 0;
        for (int64_t c : counts) total += static_cast<double>(c);
        return total;
    };
    return sum(m_l1_count) * sum(n_l1_count) * sum(k_l1_count) * 4.0 * static_cast<double>(cores_max + 1);
}

int64_t VectorSpace::lines(VectorAxis a) const {
    return std::max<int64_t>(1, elements / extent[static_cast<size_t>(a)]);
}

int64_t VectorSpace::vector_tile_count(VectorAxis a) const { return ceil_div(extent[static_cast<size_t>(a)], block); }

int64_t VectorSpace::ub_tile_count(VectorAxis a, int64_t vector_tile) const {
    const auto ai = static_cast<size_t>(a);
    if (vector_tile == 0)
        return joinable[ai] ? std::min(ceil_div(std::max<int64_t>(elements, 1), block), joined_tile_max / block) : 0;
    if (vector_tile < 0) return 0;
    return std::min(lines(a), lines_tile_max[ai] / vector_tile);
}

bool VectorSpace::contains(const VectorSchedule& v) const {
    const int ai = static_cast<int>(v.vector_axis);
    if (ai < 0 || ai >= kVectorAxisCount) return false;
    const VectorAxis a = v.vector_axis;
    if (v.vector_tile < 0 || v.vector_tile % block || v.vector_tile / block > vector_tile_count(a)) return false;
    const int64_t unit = v.vector_tile ? v.vector_tile : block;
    if (v.ub_tile <= 0 || v.ub_tile % unit || v.ub_tile / unit > ub_tile_count(a, v.vector_tile)) return false;
    if (v.cores < 0 || v.cores > cores_max) return false;
    if ((v.in_place && !in_place) || (v.fuse_input && !fuse_input) || (v.fuse_output && !fuse_output)) return false;
    const int64_t fub_max = v.fuse_input || v.fuse_output ? kFuseUbBuffersMax : 0;
    return v.fuse_ub_buffers >= 0 && v.fuse_ub_buffers <= fub_max;
}

double VectorSpace::size() const {
    double tiles = 0;  // (vector_axis, vector_tile, ub_tile) triples
    for (int ai = 0; ai < kVectorAxisCount; ++ai) {
        const auto a = static_cast<VectorAxis>(ai);
        tiles += static_cast<double>(ub_tile_count(a, 0));
        for (int64_t i = 1; i <= vector_tile_count(a); ++i) tiles += static_cast<double>(ub_tile_count(a, i * block));
    }
    const double fused_sides = (fuse_input ? 1.0 : 0.0) + (fuse_output ? 1.0 : 0.0) +
                               (fuse_input && fuse_output ? 1.0 : 0.0);
    const double fusion = 1.0 + fused_sides * static_cast<double>(kFuseUbBuffersMax + 1);
    return tiles * 2.0 * static_cast<double>(cores_max + 1) * (in_place ? 2.0 : 1.0) * fusion;
}

VectorSpace vector_space(const VectorWork& w, const DeviceSpec& s, bool with_fusion) {
    VectorSpace sp;
    sp.elements = w.elements;
    sp.block = std::max<int64_t>(1, 32 / std::max<int64_t>(1, w.elem_bytes));
    sp.cores_max = s.aicore_count;
    sp.in_place = w.in_place_ok && std::max<int64_t>(1, w.ub_buffers) >= 2;
    sp.fuse_input = with_fusion && w.fusable_in_bytes > 0;
    sp.fuse_output = with_fusion && w.fusable_out;
    // The smallest completion: single-buffered, in place where allowed, nothing fused.
    VectorSchedule base;
    base.double_buffer = false;
    base.in_place = sp.in_place;
    const int64_t blocks_max = ceil_div(s.ub_bytes(), sp.block) + 1;  // past any tile UB can hold
    for (int ai = 0; ai < kVectorAxisCount; ++ai) {
        const auto a = static_cast<VectorAxis>(ai);
        const auto i = static_cast<size_t>(ai);
        sp.extent[i] = vector_axis_extent(w, a);
        VectorSchedule v = base;
        v.vector_axis = a;
        // Capacity depends on the vector tile only through whole rows: the largest tile of
        // one-block rows bounds every row length.
        v.vector_tile = sp.block;
        sp.lines_tile_max[i] = sp.block * last_ok(blocks_max, [&](int64_t b) {
                                   v.ub_tile = b * sp.block;
                                   return vector_schedule_legal(v, w, s);
                               });
        v.vector_tile = 0;
        const int64_t joined = last_ok(blocks_max, [&](int64_t b) {
            v.ub_tile = b * sp.block;
            return vector_schedule_legal(v, w, s);
        });
        sp.joinable[i] = joined > 0;
        sp.joined_tile_max = std::max(sp.joined_tile_max, sp.block * joined);
    }
    return sp;
}

Status check_fused_chain(std::span<const FusedOp> chain, const DeviceSpec& s) {
    LOOM_ASSERT(!chain.empty());
    const size_t n = chain.size();
    for (size_t i = 0; i < n; ++i) {
        const VectorSchedule& v = *chain[i].schedule;
        if (Status st = vector_schedule_check(v, *chain[i].work, s); !st.ok())
            return st.with_context(fmt::format("fused op {}", i));
        if (i > 0 && !v.fuse_input)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "fused op {}: fuse_input is off but the op before hands its output over in UB", i);
        if (i + 1 < n && !v.fuse_output)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "fused op {}: fuse_output is off but the op after takes its input in UB", i);
        if (i == 0 && v.fuse_input)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "fused op {}: fuse_input is on but no op before it is fused", i);
        if (i + 1 == n && v.fuse_output)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "fused op {}: fuse_output is on but no op after it is fused", i);
    }
    const VectorSchedule& v0 = *chain[0].schedule;
    const VectorWork& w0 = *chain[0].work;
    for (size_t i = 1; i < n; ++i) {
        const VectorSchedule& v = *chain[i].schedule;
        const VectorWork& w = *chain[i].work;
        if (v.ub_tile != v0.ub_tile || v.vector_tile != v0.vector_tile || v.vector_axis != v0.vector_axis ||
            v.cores != v0.cores || v.double_buffer != v0.double_buffer)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "fused op {} has the tile ub_tile = {}, vector_tile = {}, vector_axis = {}, cores = {}, "
                              "double buffer {}; op 0 has ub_tile = {}, vector_tile = {}, vector_axis = {}, cores = "
                              "{}, double buffer {}: fused ops share their tiles",
                              i, v.ub_tile, v.vector_tile, vector_axis_name(v.vector_axis), v.cores,
                              v.double_buffer ? "on" : "off", v0.ub_tile, v0.vector_tile,
                              vector_axis_name(v0.vector_axis), v0.cores, v0.double_buffer ? "on" : "off");
        if (w.elements != w0.elements)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "fused op {} iterates over {} elements, op 0 over {}: fused ops share their tiles", i,
                              w.elements, w0.elements);
        if (v0.vector_tile != 0)
            for (int ai = 0; ai < kVectorAxisCount; ++ai) {
                const auto a = static_cast<VectorAxis>(ai);
                if (vector_axis_extent(w, a) != vector_axis_extent(w0, a))
                    return make_error(StatusCode::INVALID_ARGUMENT,
                                      "fused op {} has {} elements along its {} axis, op 0 has {}: tiles of lines "
                                      "need the same iteration space",
                                      i, vector_axis_extent(w, a), vector_axis_name(a), vector_axis_extent(w0, a));
            }
    }
    // UB: each op's own live tiles, the tile every link hands over counted once (at the larger
    // element size of its two sides).
    int64_t tiles = 0;
    Checked bytes = 0;
    for (size_t i = 0; i < n; ++i) {
        const int64_t own = vector_live_tiles(*chain[i].schedule, *chain[i].work);
        tiles += own - (i > 0 ? 1 : 0);
        bytes = bytes + Checked(own) * std::max<int64_t>(1, chain[i].work->elem_bytes);
        if (i > 0)
            bytes = bytes - std::min(std::max<int64_t>(1, chain[i - 1].work->elem_bytes),
                                     std::max<int64_t>(1, chain[i].work->elem_bytes));
    }
    for (size_t i = 0; i < n; ++i) {
        const int64_t others = tiles - vector_live_tiles(*chain[i].schedule, *chain[i].work);
        if (chain[i].schedule->fuse_ub_buffers < others)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "fused op {}: fuse_ub_buffers = {}, but the other ops of the chain keep {} tiles live "
                              "in UB",
                              i, chain[i].schedule->fuse_ub_buffers, others);
    }
    const Checked need = bytes * (v0.double_buffer ? 2 : 1) * v0.ub_tile;
    const int64_t need_bytes = need.get().value_or(std::numeric_limits<int64_t>::max());
    if (need_bytes > s.ub_bytes())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "fused ops 0 .. {}: UB needs {} bytes for {} live tiles of ub_tile = {} (double buffer {}) "
                          "but holds {}",
                          n - 1, need_bytes, tiles, v0.ub_tile, v0.double_buffer ? "on" : "off", s.ub_bytes());
    return {};
}

Status check_fused_pair(const VectorSchedule& producer, const VectorWork& pw, const VectorSchedule& consumer,
                        const VectorWork& cw, const DeviceSpec& s) {
    const FusedOp chain[2] = {{&producer, &pw}, {&consumer, &cw}};
    return check_fused_chain(chain, s);
}

}  // namespace loom::device::cost
