// Spatial tiling analysis: whether a model can run on tiles of a large frame and give exactly
// the untiled result, and how much context (halo) each tile needs. Fully convolutional image
// models (convs, pointwise ops, PixelShuffle, integer nearest upsampling) qualify; anything that
// mixes pixels globally (pooling over the frame, Flatten, Gemm) does not.
#pragma once

#include <cstdint>

#include "common/status.hpp"
#include "compiler/graph.hpp"

namespace loom::compiler {

struct SpatialTiling {
    int64_t scale = 1;  // output pixels per input pixel along H and W (integer upscaling)
    int64_t halo = 0;   // input pixels of context an output pixel needs on each side for its
                        // bits to be the untiled run's (a Winograd F(m,3) conv counts m: compiler/ops/nn.cpp)
    int64_t align = 1;  // tile origins in input pixels must be multiples of this for results to
                        // be bit-identical (Winograd computes m x m output blocks from the origin)
};

// Analyses a typed graph with one NCHW input and NCHW outputs. Fails (UNSUPPORTED) naming the
// first node that is not spatially local, or a stride or scale that is not a whole number.
Result<SpatialTiling> analyse_spatial_tiling(const Graph& g);

}  // namespace loom::compiler
