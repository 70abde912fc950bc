// Helpers shared by the op family files: axis normalisation, broadcasting over symbolic dims,
// and reading shape-deciding inputs that older opsets passed as attributes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/checked.hpp"
#include "common/status.hpp"
#include "compiler/graph.hpp"
#include "compiler/ops.hpp"

// Defines `const OpDef op_NAME` (declared extern so compiler/ops.cpp's list can name it). The
// optional rest are OpDef's later fields as designated initializers, in declaration order:
// LOOM_DEFINE_OP(Relu, 1, 1, 1, infer_same, lower_unary, .traits = ..., .token = "relu").
#define LOOM_DEFINE_OP(NAME, INPUTS_MIN, INPUTS_MAX, OUTPUTS_MAX, INFER, LOWER, ...) \
    extern const OpDef op_##NAME;                                                    \
    const OpDef op_##NAME{.name = #NAME,                                             \
                          .inputs_min = INPUTS_MIN,                                  \
                          .inputs_max = INPUTS_MAX,                                  \
                          .outputs_min = 1,                                          \
                          .outputs_max = OUTPUTS_MAX,                                \
                          .infer = INFER,                                            \
                          .lower = LOWER __VA_OPT__(, ) __VA_ARGS__};

namespace loom::compiler::opu {

// Returns axis in [0, rank) for an ONNX axis in [-rank, rank) (none for a scalar); errors name
// `what`.
Result<int64_t> norm_axis(int64_t axis, int64_t rank, std::string_view what);

// Numpy broadcasting of two shapes with symbolic dims (a symbol against 1 keeps the symbol, a
// symbol against a known size > 1 takes the size, two different symbols give `fresh`).
Result<Shape> broadcast(const Shape& a, const Shape& b, const Dim& fresh);

// Reads an int list given either as constant input `input` (newer opsets) or attribute `attr`
// (older ones). Returns nullopt when neither is present; an error when the input is present
// but not constant (`c` is null when called from lowering: then that is an error too).
Result<std::optional<std::vector<int64_t>>> ints_from(const Graph& g, const Node& n, size_t input,
                                                      std::string_view attr);
// Whether `n` is a ReduceMean over exactly H and W of a typed 4-D map that keeps them (axes
// {2, 3} or {-2, -1}, keepdims 1, from an attribute or a constant input): a squeeze-and-
// excitation mean as PyTorch exports x.mean((2, 3), keepdim=True), GlobalAveragePool's values.
bool is_spatial_mean(const Graph& g, const Node& n);
// The same for float lists.
Result<std::optional<std::vector<double>>> floats_from(const Graph& g, const Node& n, size_t input,
                                                       std::string_view attr);

// Static dims of a typed value (an error naming it when a dim is symbolic).
Result<std::vector<int64_t>> static_dims(const Value& v);

// Shape arithmetic: every size a shape function computes from dims and attributes (which a
// model file supplies, so any int64 is possible) is a Checked expression, turned into a value
// here; an overflow is an error naming `what` instead of undefined behaviour.
Result<int64_t> checked_value(Checked v, std::string_view what);
// The same as a Dim (a negative result is left for infer_node to report with its axis).
Result<Dim> checked_dim(Checked v, std::string_view what);

// One output dim of a sliding window (conv, pool): floor or ceil of
// (in + pad_begin + pad_end - dilation * (kernel - 1) - 1) / stride + 1 (a ceil-mode window
// must start before in + pad_begin); keeps a symbol when the window preserves the size, else
// `fresh`; an error when the arithmetic overflows.
Result<Dim> window_out(const Dim& in, int64_t kernel, int64_t stride, int64_t dilation, int64_t pad_begin, int64_t pad_end,
               bool ceil_mode, const Dim& fresh);

// Resolved window geometry of a Conv / ConvTranspose / pool node over `spatial` axes.
struct Window {
    std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
    std::string auto_pad;
};
// Reads kernel_shape (or takes `weight_kernel` when absent), strides, dilations, pads and
// auto_pad with ONNX defaults; checks their lengths and signs.
Result<Window> read_window(const KernelAttrs& a, size_t spatial, const std::vector<int64_t>& weight_kernel);
// For SAME_UPPER/SAME_LOWER on a known input size: the pads that auto_pad implies.
Status resolve_auto_pad(Window& w, size_t axis, int64_t in);

// Copies the attributes named in `names` (when set) from `from` to `to`.
void copy_attrs(const KernelAttrs& from, KernelAttrs& to, std::initializer_list<std::string_view> names);

}  // namespace loom::compiler::opu
