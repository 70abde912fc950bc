// Split regions (issue 15, subgraph tuning): a run of consecutive steps of a sink model executed
// band by band, over horizontal bands of rows of the maps they compute, so that the intermediates
// a band hands from one step to the next stay in L2 (docs/device-model.md 3.3) instead of going
// to global memory and back. The result is the unsplit run's, bit for bit.
//
// Bands follow each other top to bottom, and each step computes every row of its output once
// (no recomputation): in band t, step k computes output rows [P_k(t-1), P_k(t)), where P_k(t) is
// what the steps after it need by the end of band t (their rows in band t widened by their
// context), rounded up to the rows step k's own bands must start on (Winograd computes 4x4
// blocks from the map's origin). The last step's bands are `rows` rows each. A step's band reads
// exactly the input rows it needs: rows an earlier band of its producer wrote (the context above)
// and rows the producer has just written; a convolution's band gets the frame's zero padding only
// at the map's edges (its "pads" rewritten per band), and an op that cannot be cut so (a resize
// reads clamped rows at its input's edges) computes its band from input widened by its context
// and keeps the middle. The execution order is band-major (each band through the whole region,
// then the next); the other order, step-major, is the unsplit model.
//
// What the L2 must hold: for every map the region touches, the rows live over one band (from the
// lowest row any step still reads to the highest written), plus the operands every band reads
// whole (the weights): the region's L2 footprint, which the compiler checks against the device's
// L2 (docs/compiler.md, "Split regions").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "device/kernel.hpp"
#include "device/spec.hpp"

namespace loom::compiler {

class TilingSource;  // compiler/tuning.hpp

// What a kernel input is to a band (SplitRule::inputs).
enum class BandRole : uint8_t {
    WHOLE,   // read whole by every band: weights, biases, per-channel and scalar operands
    SOURCE,  // the map the output is computed from: rows out / scale, widened by the radius
    SAME,    // a map at the output's rows (a residual, an elementwise op's other operand)
};

// How a step's output rows follow its inputs' rows (OpDef::split, or the POINTWISE trait).
struct SplitRule {
    int64_t scale = 1;   // output rows per SOURCE row (a whole upscaling; 1 otherwise)
    int64_t radius = 0;  // SOURCE rows of context an output row needs on each side
    int64_t align = 1;   // a band's first output row must be a multiple of this (besides scale)
    // With radius > 0: true, the kernel's 'pads' attribute ([top, left, bottom, right]) is
    // rewritten per band so that it gets exactly the rows it needs (the frame's padding only at
    // the map's edges; scale must be 1); false, the band's input is widened by the radius and its
    // output cut to the rows kept.
    bool pads = false;
    int64_t pad_left = 0, pad_right = 0;  // with pads: the W padding every band keeps
    std::vector<BandRole> inputs;         // per kernel input
};

// A lowered step as a split hook sees it.
struct SplitStepView {
    const CompiledStep& step;
    std::vector<std::vector<int64_t>> inputs, outputs;  // dims per kernel input (absent: none) and output
};

// The pointwise rule: every 4-D input at the output's N, H and W is SAME, every input constant
// over H (a bias, a per-channel or scalar operand) WHOLE; fails for any other input. Ops with the
// POINTWISE trait take it, and a split hook may (TransData: pointwise in space, not in layout).
Status pointwise_split_rule(const SplitStepView& s, SplitRule& rule);

// The rule of step `si` of sink model `m`: its op's split hook, or the POINTWISE rule (every 4-D
// input at the output's rows is SAME, every input constant over H and W is WHOLE). Fails
// (UNSUPPORTED, naming the step and why) for a step that cannot run band by band.
Result<SplitRule> split_rule(const CompiledModel& m, size_t si);

// One tensor of a band launch: its band (height 0: not banded) and the band's rows.
struct TensorBand {
    device::RowBand band;
    int64_t rows = 0;
};

// One launch of a region: step `step` run on band `band`.
struct BandLaunch {
    int step = 0;
    int64_t band = 0;
    std::vector<TensorBand> inputs, outputs;   // per kernel input and output
    std::optional<std::vector<int64_t>> pads;  // the rewritten 'pads' attribute (SplitRule::pads)
    uint32_t l2_inputs = 0;                    // inputs a step of the region wrote this band or before
    bool l2_outputs = false;                   // the output is read by the region's later steps
};

// The most bands a region may have, and the most steps x bands (a file asking for more is refused).
inline constexpr int64_t kSplitBandsMax = 4096;
inline constexpr int64_t kSplitLaunchesMax = int64_t{1} << 18;

// A region planned: its launches in execution order (band by band, the region's steps in order
// within a band; a step with no rows in a band has no launch there) and its L2 footprint.
struct SplitPlan {
    int first = 0, last = 0;
    int64_t rows = 0;   // the last step's output rows per band
    int64_t bands = 0;  // ceil(its output's H / rows)
    std::vector<BandLaunch> launches;
    int64_t l2_bytes = 0;  // L2 the region keeps live (see the file comment)
};

// Plans steps [first, last] of sink model `m` over bands of `rows` rows of the last step's output.
// Refuses, naming the step and why, a region that cannot give the unsplit result bit for bit (or
// whose costs would not hold): an alias or host-placed step, one whose schedule fuses it with a
// neighbour in UB, one whose op has no split rule, maps whose rows do not line up, an
// intermediate read after the region or read whole inside it, a graph output inside it, `rows`
// off the last step's alignment, more than kSplitBandsMax bands or kSplitLaunchesMax launches. Does not check the L2
// (see check_split).
Result<SplitPlan> plan_split(const CompiledModel& m, int first, int last, int64_t rows);

// Checks a plan against a device: its L2 footprint must fit the device's L2 (else the marks of
// its launches would be false). The error names the region's steps and both sizes.
Status check_split_fits(const CompiledModel& m, const SplitPlan& p, const device::DeviceSpec& spec);

// Sets `launch` (step `l.step`'s whole launch: lower_graph's or the executor's) up as band launch
// `l`: banded tensors get the band's rows, the bands and the L2 marks are set, 'pads' rewritten.
void apply_band(const BandLaunch& l, device::KernelLaunch& launch);

// "Conv_2 .. Conv_8" for messages about a region.
std::string split_label(const CompiledModel& m, int first, int last);

// Resolves `choices` (CompileOptions::splits: first and last step by name) against lowered sink
// model `m`, plans each, checks it fits `spec`'s L2, costs every band launch (its tiling from
// `tiling_source` by its StepKey, else the default heuristic's) and records the regions in
// m.splits, in step order; each step of a region gets the sum of its band launches' costs as its
// cost_ns. Errors name the choice and the step: an unknown or misordered name, overlapping
// regions, an illegal split, a tiling the cost model refuses.
Status apply_splits(CompiledModel& m, const std::vector<SplitChoice>& choices, const device::DeviceSpec& spec,
                    const TilingSource* tiling_source);

// The launch of band launch `p.launches[i]` as lower_graph costs it (shapes, constants from `m`'s
// weights, no activation data), with the region's recorded tiling.
device::KernelLaunch band_cost_launch(const CompiledModel& m, const SplitRegion& r, const SplitPlan& p, size_t i);

}  // namespace loom::compiler
