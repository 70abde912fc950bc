// Spatial tiling analysis: whether a model can run on windows of a large frame and give exactly
// the untiled result, and what a window needs for that. Fully convolutional image models
// qualify: convolutions of any stride and padding (padded ones and "valid" ones that consume
// their borders), transposed convolutions, crops by fixed offsets (U-Net skip connections),
// pointwise ops, PixelShuffle, Resize by whole factors. Means over the whole frame
// (GlobalAveragePool: squeeze-and-excitation) are allowed too: the analysis lists them, and a
// tiled run computes each over every window before the windows run with it (executor/tiled.hpp).
// Anything else that mixes pixels globally (Flatten of a map, Gemm on a map, InstanceNorm) does
// not qualify.
//
// The model: run on the window [o, o + w) of the input (per axis), every map v of the network is
// the frame's run's map shifted: window pixel j of v is the frame's pixel j + o * s_v, where s_v
// (a fraction: a stride-2 conv halves it, a transposed one doubles it) is v's pixels per input
// pixel, provided o * s_v is whole for every map (and on Winograd's block grid, below). That
// holds except for `lo` pixels at the window's start and `hi` at its end, which read the zero
// padding of a conv inside the window where the frame's run read pixels; where the window's
// edge is the frame's, the frame's run read the same padding, and nothing differs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "compiler/graph.hpp"

namespace loom::compiler {

// One map of the frame as the analysis follows it through a node (both axes alike).
struct TileFlow {
    int64_t num = 1, den = 1;  // the map's pixels per input pixel: num / den, reduced
    int64_t lo = 0, hi = 0;    // map pixels at a window's start and end that may differ from the frame's run
    int64_t align = 1;         // graph-wide: window origins, in input pixels, must be multiples of this
};

// A mean over the whole frame of a map (GlobalAveragePool), in the order a run needs them.
struct FrameReduction {
    std::string node;                          // the node's name
    std::string input;                         // the map averaged (a value name)
    std::string output;                        // the N x C x 1 x 1 mean
    int64_t num = 1, den = 1, lo = 0, hi = 0;  // the map's TileFlow
    int64_t frame_h = 0, frame_w = 0;          // the map's size for the whole frame
};

struct SpatialTiling {
    int64_t scale = 1;  // output pixels per input pixel along H and W (integer upscaling)
    int64_t halo = 0;   // input pixels of context an output pixel needs on each side for its
                        // bits to be the untiled run's (a Winograd F(m,3) conv counts m: compiler/ops/nn.cpp):
                        // the larger of the two below
    int64_t lead = 0;   // of it, before the pixel (towards the window's start)
    int64_t trail = 0;  // and after it (a valid Winograd conv's partial last block reaches only there)
    int64_t align = 1;  // tile origins in input pixels must be multiples of this for results to
                        // be bit-identical (strides; Winograd computes m x m output blocks from the origin)
    // Per axis (H, W): output pixels the network consumes at the borders: a w-pixel window gives
    // scale * w - shrink (valid convolutions and crops; 0 for padded networks).
    std::array<int64_t, 2> shrink{};
    // Per axis: input pixels a window must exceed its core step by for every reduction's map to
    // be covered by the windows' clean pixels (0 without reductions).
    std::array<int64_t, 2> overlap{};
    std::vector<FrameReduction> reductions;  // in topological order
};

// Analyses a typed graph with one NCHW input (of static H and W) and NCHW outputs. Fails
// (UNSUPPORTED) naming the first node that is not spatially local, a map at a scale that is not
// whole at the output, or a network whose border loss differs between H and W.
Result<SpatialTiling> analyse_spatial_tiling(const Graph& g);

// The smallest multiple of input pixels o for which o * num / den is a multiple of m.
int64_t origin_multiple(int64_t num, int64_t den, int64_t m);

}  // namespace loom::compiler
