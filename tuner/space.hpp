// The tuner's view of one kernel launch: its tiling space (device/cost.hpp) as a search Problem
// (tuner/search.hpp), with the decoding from a point back to a tiling.
//
// Cube works: one dimension per CubeTiling field, in the order L0 m, L1 m multiple, L0 n, L1 n
// multiple, L0 k, L1 k multiple, loop order, double buffering, cores (1 .. aicore_count: 0, "all",
// is the same tiling as aicore_count and is not a point of its own). Every point of
// device::cube_space is a point here.
//
// Vector works: vector axis, vector tile, UB tile, double buffering, cores, in place (fusion is
// the subgraph search's business). Where an axis or a tile size has at most kVectorChoicesMax
// candidates, all of them are points; beyond that the candidates are pruned to those that can be
// best (the expert rule of this search): a geometric ladder (steps of 2^(1/4)), the sizes that deal
// the work out in whole rounds over every core count (ceil(lines x chunks / (cores x r)) for r up
// to 16), and the largest. The search therefore covers a space the size of a few thousand points
// where the exhaustive one holds millions, and the benchmark compares both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/cost.hpp"
#include "device/spec.hpp"
#include "tuner/search.hpp"

namespace loom::tuner {

// Candidates per Vector dimension kept whole; longer ranges are pruned (above).
inline constexpr int64_t kVectorChoicesMax = 96;

// A launch's tiling space as a search problem. Holds what the Problem's functions read: keep it
// alive (and unmoved) while they run.
class TilingProblem {
public:
    // Builds the problem for `work` (kind CUBE or VECTOR) on `spec`; the default tiling is its
    // first seed. Returns an error for a NONE work.
    static Result<std::unique_ptr<TilingProblem>> make(const device::KernelWork& work, const device::DeviceSpec& spec);

    const Problem& problem() const { return problem_; }
    device::TilingKind kind() const { return work_.kind; }
    const device::KernelWork& work() const { return work_; }
    // The tiling at `p` (which must be legal).
    device::Tiling decode(const Point& p) const;
    // The point of `t`, or empty when `t` is not in this encoding (another kind, a pruned size).
    Point encode(const device::Tiling& t) const;
    // Adds `t` as a seed when it is a point here (a knowledge-base neighbour's tiling).
    void add_seed(const device::Tiling& t);
    // Cycles of `t` (+inf when illegal).
    double cycles(const device::Tiling& t) const;
    // The number of points of this encoding (saturating), and of the device's whole space.
    int64_t size() const { return space_size(problem_); }
    double device_space_size() const;
    // True when some tile sizes were pruned (a Vector range over kVectorChoicesMax): costing the
    // whole encoding is then not costing the whole device space.
    bool pruned() const { return pruned_; }

private:
    TilingProblem(const device::KernelWork& work, const device::DeviceSpec& spec) : work_(work), spec_(spec) {}
    void build_cube();
    void build_vector();

    device::KernelWork work_;
    device::DeviceSpec spec_;
    Problem problem_;
    bool pruned_ = false;
    // Cube: the device space (its lists are the dimensions' values).
    device::cost::CubeSpace cube_;
    // Vector: per axis, the vector tiles; per (axis, vector tile index), the UB tiles.
    device::cost::VectorSpace vector_;
    std::vector<int64_t> vtiles_[device::kVectorAxisCount];
    std::vector<std::vector<int64_t>> ubtiles_[device::kVectorAxisCount];
};

// The sorted, unique candidate multiples 1 .. count kept for one dimension: all of them up to
// kVectorChoicesMax, else the ladder, the whole-round counts for `units` units of work over
// 1 .. cores_max cores, and count itself (see above).
std::vector<int64_t> pruned_multiples(int64_t count, int64_t units_per_multiple, int64_t units, int64_t cores_max);

}  // namespace loom::tuner
