// int8 post-training quantization of the Cube ops (Conv, ConvTranspose, MatMul, Gemm), as
// TensorRT and Ascend's AMCT do it: symmetric per-channel int8 weights (scale = max|w| / 127
// per output channel), and a per-tensor activation scale from calibration: the sample inputs run
// through the fp32 graph, and the clipping threshold (50% to 100% of max |x|) that minimises the
// quantization error of the observed activations gives scale = threshold / 127. Each quantized node keeps float activations in
// memory; its kernel quantizes them on the fly and accumulates int8 x int8 in int32 (see
// device/kernels/conv.cpp), so the graph's interface and the other ops are unchanged.
#pragma once

#include <span>
#include <vector>

#include "common/status.hpp"
#include "compiler/graph.hpp"

namespace loom::compiler {

// One set of graph inputs (one tensor per graph input, in order).
using InputSet = std::vector<HostTensor>;

struct QuantizeReport {
    int nodes_quantized = 0;
    int nodes_skipped = 0;     // Cube ops left in float (dynamic weights, an all-zero activation)
    int samples = 0;           // calibration input sets
    double max_rel_error = 0;  // max |int8 - fp32| / max |fp32| over every output and sample
    double psnr_db = 0;        // the worst output's PSNR against fp32, peak = its value range
};

// Quantizes every Cube op whose weights are f32 constants; `calibration` must hold at least one
// input set for the typed, static-shaped graph. Afterwards runs the quantized graph on the same
// sets and reports its error against fp32. Errors name the input set that does not fit.
Result<QuantizeReport> quantize_int8(Graph& g, std::span<const InputSet> calibration);

}  // namespace loom::compiler
