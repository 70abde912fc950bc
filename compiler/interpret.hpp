// Host execution of graph nodes through their device kernels' functional code, without the
// simulated device: constant folding uses it, and tests use the whole-graph interpreter as the
// reference that optimised and compiled forms must match.
#pragma once

#include <span>
#include <vector>

#include "common/status.hpp"
#include "compiler/graph.hpp"

namespace loom::compiler {

// A kernel operand over a host tensor's storage (the kernel may write it: outputs), and the
// empty operand that stands for an absent optional input.
device::TensorRef host_tensor_ref(const HostTensor& t);
device::TensorRef empty_tensor_ref();

// Computes node `n`'s outputs from `inputs` (one per node input; nullptr for an absent one),
// whose dtypes and dims must match the graph's inferred types; outputs get the inferred types.
Result<std::vector<HostTensor>> run_node(const Graph& g, const Node& n, std::span<const HostTensor* const> inputs);

// Runs the whole (typed, static-shaped) graph on `inputs` (one per graph input, in order);
// returns the graph outputs in order.
Result<std::vector<HostTensor>> interpret(const Graph& g, std::span<const HostTensor> inputs);

}  // namespace loom::compiler
