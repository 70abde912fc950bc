// Graph passes. Each takes a typed graph (infer_shapes has run), keeps it typed and in
// topological order, and returns how many nodes it removed or rewrote, so `loomc inspect` and
// the tests can report node counts before and after each one.
//
// Fused forms (what the kernels' epilogues compute, see device/kernels/conv.cpp, gemm.cpp,
// matmul.cpp):
//   Conv / ConvTranspose: inputs X, W, B, R, S; attributes activation (relu, leaky_relu + alpha,
//     prelu with slopes S, clip + min/max, sigmoid, hard_swish) and residual_after_activation
//     (0: Y = act(conv + B + R), 1: Y = act(conv + B) + R).
//   MatMul: inputs A, B, bias, S; Gemm: A, B, C, S (its leaky slope is activation_alpha).
//   DepthToSpace: inputs X, R: Y = depth_to_space(X) + R (an SR network's upsampled skip).
//   EltwiseChain: inputs X0..Xn and a postfix `program` (device/kernels/eltwise_chain.cpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "compiler/graph.hpp"

namespace loom::compiler {

// Gives graph inputs new shapes ("input" = 1x3x240x320); every other inferred type is reset,
// so infer_shapes must run next. Errors name an unknown input or a rank change.
Status set_input_shapes(Graph& g, const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes);
// Forgets the inferred types of every value that is not a graph input or a constant.
void reset_types(Graph& g);

// Replaces nodes whose inputs are all constants (and Shape of a static shape) by their
// computed results, inferring the nodes after a fold again (a Reshape whose target was folded
// gets static dims); returns the nodes folded.
Result<int> fold_constants(Graph& g);
// Removes nodes none of whose outputs reach a graph output; returns the count.
int eliminate_dead_code(Graph& g);
// Merges nodes with the same op, inputs and attributes, and constants with the same bytes;
// returns the nodes merged.
int eliminate_common_subexpressions(Graph& g);
// Folds BatchNormalization, and per-channel Mul/Add by constants, into the weights and bias of
// a preceding Conv, ConvTranspose or Gemm (per output channel / column); returns the nodes
// folded away.
Result<int> fuse_conv_affine(Graph& g);
// Fuses activations and residual Adds into the preceding Conv / ConvTranspose / MatMul / Gemm
// epilogue, bias Adds into MatMul, and a residual Add into DepthToSpace; returns the nodes
// fused away.
int fuse_epilogues(Graph& g);
// Collapses chains of elementwise nodes (each output used once) into EltwiseChain nodes;
// returns the nodes fused away.
int fuse_elementwise_chains(Graph& g);
// Converts every f32 value to f16 (constants converted, casts inserted at graph inputs and
// outputs so the interface stays f32); returns the casts inserted.
int convert_to_f16(Graph& g);
// Assigns device layouts: Conv / ConvTranspose read and write NC1HWC0 (Value::layout), layout-
// agnostic ops (elementwise, BatchNormalization) keep the layout of their data, spatial ops
// (pools, Slice, Pad, Resize that keep the channels) read a 5HD map as it is and write their map
// in 5HD, their [N, C, 1, 1] vector in ND; channel vectors broadcast over a 5HD map are read as
// they are (OpTrait::SPATIAL, LAYOUT_AGNOSTIC); all other ops and the graph's inputs and
// outputs use the logical layout. A TransData node is inserted
// once per value and layout where they differ; a TransData that undoes another is cancelled
// (its readers take the original). Returns the TransData nodes inserted; `cancelled` gets the
// pairs cancelled. Run it last (after fusion and quantization, which it would hinder).
int assign_layouts(Graph& g, int* cancelled = nullptr);
// Drops values no node or graph output uses and renumbers the rest.
void compact(Graph& g);

struct PassCount {
    std::string pass;
    size_t nodes_before = 0, nodes_after = 0;
    int changed = 0;
};

struct OptimizeOptions {
    bool fold = true;
    bool fuse = true;
    bool f16 = false;
};
// Runs the passes in order (fold, spatial means as GlobalAveragePool, DCE, CSE, affine fusion,
// epilogue fusion, elementwise chains, precision) and returns what each did.
Result<std::vector<PassCount>> optimize(Graph& g, const OptimizeOptions& options);

}  // namespace loom::compiler
