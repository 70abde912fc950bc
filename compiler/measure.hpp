// Per-layer choice of the host algorithm by measurement (issue 16: "made from measurements of the
// host kernels, not fixed rules, and recorded in the compiled model so that a run does not
// re-decide"). A 3x3 stride-1 undilated ungrouped fp32 Conv can run on the host as the im2col
// GEMM or as Winograd F(2x2, 3x3), F(4x4, 3x3) or F(6x6, 3x3) (device/kernels/conv.cpp); the
// rule cpu::winograd_tile_for picks one from C and K alone, measured once on one machine. An
// int8 one (quantized first) runs as the int8 GEMM or the integer F(4x4, 3x3) with the same
// bits, whose rule takes the Winograd whenever its sums are exact. This
// pass times every candidate of every such conv at its own shape, with its own weights and
// epilogue, on this machine's host kernels and thread pool, and records the fastest as the
// node's `winograd` attribute (0: the GEMM; 2, 4, 6: the tile edge), which lowering copies into
// the step and the .loom file keeps: a run takes it as it is. Spatial tiling and split regions
// read the same attribute (compiler/ops/nn.cpp), so a window of a tiled frame runs each conv as
// the frame does and stays bit-identical to it.
#pragma once

#include <string>
#include <vector>

#include "common/status.hpp"
#include "compiler/graph.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::compiler {

struct MeasuredConv {
    std::string node;
    int64_t chosen = 0;                          // the winner: 0 (GEMM), 2, 4 or 6 (int8: 0 or 4)
    int64_t rule = 0;                            // what the kernel's rule would have taken
    std::vector<std::pair<int64_t, double>> ms;  // each candidate and its best time, ms
};

struct MeasureReport {
    std::vector<MeasuredConv> convs;  // in graph order
    double seconds = 0;               // wall time of the whole measurement
};

// Times the candidates of every eligible Conv of `g` (shapes inferred and static, fp32 X, fp32 or
// int8 weights constant) that has no `winograd` attribute yet (a window of a tiled frame keeps the frame's
// choice), `reps` runs each after one warm-up, the best run counted, on random inputs of the
// node's shapes (at most 256 x 1024 pixels of them: a larger map is timed on that window);
// records the fastest. Errors name the node.
Result<MeasureReport> measure_conv_algorithms(Graph& g, ThreadPool& pool, int reps = 2);

}  // namespace loom::compiler
