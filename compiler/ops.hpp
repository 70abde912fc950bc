// The compiler's op table: for every ONNX op type Loom accepts, its shape and type inference,
// its lowering to a device kernel (device/kernels/) and what the passes may do with it (its
// traits, its elementwise token and parameters, how spatial tiling follows it). One OpDef per op
// type, defined in a family file under compiler/ops/ and listed once in compiler/ops/op_list.hpp:
// passes ask the op (find_op(n.op)->has(OpTrait::...)), they keep no lists of op names.
//
// Ops accept the opset-17 form and the older attribute forms where ONNX moved an attribute to
// an input (Slice, Split, Squeeze, Unsqueeze, Pad, Clip, ReduceSum, Resize/Upsample scales), so
// importers pass nodes through unchanged. Inputs that decide shapes (Reshape's shape, Slice's
// starts, Resize's scales, ...) must be constants by the time a node is lowered; shape inference
// tolerates them being unknown and then gives symbolic dims.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "compiler/graph.hpp"
#include "device/kernel.hpp"

namespace loom::compiler {

struct ValueType {
    DType dtype = DType::F32;
    Shape shape;
};

// What an op's inference sees of one node: its inputs (types and constant data) and the
// output types it must fill in.
class InferContext {
public:
    InferContext(const Graph& g, const Node& n, std::vector<ValueType>& outputs) : g_(g), n_(n), out_(outputs) {}
    const Graph& graph() const { return g_; }
    const Node& node() const { return n_; }
    const KernelAttrs& attrs() const { return n_.attrs; }
    size_t input_count() const { return n_.inputs.size(); }
    size_t output_count() const { return n_.outputs.size(); }
    // The i-th input, or nullptr when absent.
    const Value* in(size_t i) const { return g_.input(n_, i); }
    // The i-th input's data when it is a constant, else nullptr.
    const HostTensor* constant(size_t i) const {
        const Value* v = in(i);
        return v && v->data ? v->data.get() : nullptr;
    }
    // Sets output i's type.
    void set(size_t i, DType dtype, Shape shape) { out_.at(i) = ValueType{dtype, std::move(shape)}; }
    // Returns a fresh symbol for an output dim that depends on run-time values.
    Dim fresh(size_t output, size_t axis) const;

private:
    const Graph& g_;
    const Node& n_;
    std::vector<ValueType>& out_;
};

// A node lowered to one kernel launch.
struct Lowered {
    std::string kernel;       // device kernel name (device/kernels/kernel_list.hpp)
    KernelAttrs attrs;        // the kernel's attributes
    std::vector<int> inputs;  // value ids in the kernel's input order; -1 = absent (an empty tensor)
    bool alias = false;       // the output may share its input 0's storage (a reshape: no data moves)
};

// What the passes may do with an op (OpDef::traits); flags combine with |.
enum class OpTrait : uint32_t {
    NONE = 0,
    // Each output element depends on the same element of its inputs only (numpy broadcasting,
    // per-channel parameters): spatial tiling (halo.cpp) passes it through with no halo.
    POINTWISE = 1u << 0,
    // Runs in whatever layout its data is in: assign_layouts keeps NC1HWC0 maps in NC1HWC0.
    LAYOUT_AGNOSTIC = 1u << 1,
    // Its kernel reads and writes 4-D maps in NC1HWC0 (the Cube convolutions).
    LAYOUT_NC1HWC0 = 1u << 2,
    // An elementwise op over two data inputs (or more: Sum, Max, Min); its token is a binary op
    // of device/kernels/elementwise.hpp. Without it a token is a unary op on input 0, the other
    // inputs being its parameters (Clip's bounds).
    BINARY = 1u << 3,
    // fuse_elementwise_chains may take it into an EltwiseChain program (by its token).
    CHAIN = 1u << 4,
    // fuse_epilogues may fold it into the Cube op before it as that op's activation (by its
    // token; a BINARY one takes input 1 as per-channel slopes: PRelu).
    EPILOGUE = 1u << 5,
    // Its kernel applies an activation / residual epilogue that fuse_epilogues folds in.
    TAKES_EPILOGUE = 1u << 6,
    // quantize_int8 may give it int8 weights (input 1) with per-channel scales.
    QUANTIZABLE = 1u << 7,
    // Shape arithmetic: placed on the host CPU when its inputs and outputs are tiny.
    HOST_WHEN_TINY = 1u << 8,
    // Reads its inputs' dims, never their data (Shape).
    READS_DIMS_ONLY = 1u << 9,
    // Inputs after the first are parameters (weights, scales, bounds), not data: spatial tiling
    // does not ask them to be constant over H and W.
    PARAMETER_INPUTS = 1u << 10,
    // Moves values within each channel's plane only (along N, H and W: pools, crops, pads,
    // resizes), never across channels: assign_layouts keeps its map in NC1HWC0 when its data
    // input is and the output keeps the input's channels, where each image's C1 planes of
    // H x W x C0 values are cut, padded or pooled as the C planes of ND are. A [N, C, 1, 1]
    // output (the global pools) is written in ND.
    SPATIAL = 1u << 11,
};

constexpr OpTrait operator|(OpTrait a, OpTrait b) {
    return static_cast<OpTrait>(static_cast<uint32_t>(a) | static_cast<uint32_t>(b));
}

// One scalar parameter of an elementwise op (LeakyRelu's alpha, Clip's min and max).
struct OpParam {
    const char* name;   // its attribute name in the unary kernel and the Cube epilogues
    double value;       // read from the node, or the ONNX default
    bool given = true;  // false: an absent optional input (a Clip bound) the unary kernel defaults too
};

struct TileFlow;  // compiler/halo.hpp
struct SplitRule;      // compiler/split.hpp
struct SplitStepView;  // compiler/split.hpp

struct OpDef {
    const char* name;  // ONNX op type
    int inputs_min, inputs_max, outputs_min, outputs_max;
    // Fills in the output types from the inputs' types and constant data.
    Status (*infer)(InferContext& c);
    // Lowers the node (all shapes static, shape-deciding inputs constant) to a kernel launch.
    Result<Lowered> (*lower)(const Graph& g, const Node& n);
    // What the passes may do with it.
    OpTrait traits = OpTrait::NONE;
    // Bit i: input i decides shapes or attributes and must be a constant when the node is
    // lowered (Reshape's shape, Slice's starts, Resize's scales, Clip's bounds, ...).
    uint32_t constant_inputs = 0;
    // Elementwise ops: their name in the device's elementwise tables (device/kernels/
    // elementwise.hpp), which the unary and binary kernels, eltwise_chain programs and the Cube
    // epilogues take ("relu", "leaky_relu", "add", ...).
    const char* token = nullptr;
    // Elementwise ops with scalar parameters: reads them from the node in the order the token
    // takes them (alpha; alpha, beta; min, max), ONNX defaults filled in. Fails on an unknown
    // attribute or a parameter that is not a constant scalar.
    Result<std::vector<OpParam>> (*params)(const Graph& g, const Node& n) = nullptr;
    // Ops spatial tiling can follow that are not POINTWISE: `t` holds on entry the scale and
    // window contamination of the node's map input and the alignment so far, on return the
    // output's and the alignment its result needs (compiler/halo.hpp). Fails (UNSUPPORTED, saying
    // why) when this node cannot be tiled.
    Status (*tile)(const Graph& g, const Node& n, TileFlow& t) = nullptr;
    // Ops a split region (compiler/split.hpp) can run band by band that are not POINTWISE (those
    // take the pointwise rule): fills `rule` from the lowered step: how its output rows follow its
    // inputs' rows, the rows its bands must start on, what each kernel input is to a band. Fails
    // (UNSUPPORTED, saying why) for a step whose bands would not give its whole result bit for bit.
    Status (*split)(const SplitStepView& s, SplitRule& rule) = nullptr;

    // True when the op has every flag of `t`.
    constexpr bool has(OpTrait t) const {
        return (static_cast<uint32_t>(traits) & static_cast<uint32_t>(t)) == static_cast<uint32_t>(t);
    }
};

// Returns the op named `op_type`, or nullptr.
const OpDef* find_op(std::string_view op_type);
// Returns every op, in list order.
std::span<const OpDef* const> all_ops();
// Returns "Abs, Add, ..." for messages and docs.
std::string supported_ops_list();
// True when `op_type` names an op with every flag of `t` (false for an unknown op).
bool op_has(std::string_view op_type, OpTrait t);

// True when input `slot` of an `op_type` node decides shapes or attributes and so must be a
// constant when the node is lowered (Reshape's shape, Slice's starts, Resize's scales, Clip's
// bounds, ...).
bool needs_constant_input(std::string_view op_type, size_t slot);

// Names a node in messages: "node 'conv_3' (Conv)".
std::string node_label(const Node& n);

// The most elements one tensor may hold (4 TiB of fp32: past any device): importers refuse
// larger initializers and shape inference larger values, so byte counts never overflow.
inline constexpr int64_t kTensorElementsMax = int64_t{1} << 40;

// Checks that every name and string the graph carries (graph, values, dim symbols, nodes, ops,
// attribute names and string values) is valid UTF-8: they end up in JSON (the compiled model,
// replies). The error names the graph's source file, the part and the byte.
Status check_graph_utf8(const Graph& g);

// Checks the node's input/output counts against its OpDef, then infers its output types and
// writes them to the graph's values (keeping dims a model declared when inference only knows a
// symbol, and refusing a declared static dim that contradicts an inferred one). Errors name the
// node.
Status infer_node(Graph& g, const Node& n);
// Infers every node in order; graph inputs must be typed. Errors name the graph's source file.
Status infer_shapes(Graph& g);
// Lowers one node (see OpDef::lower); errors name the node.
Result<Lowered> lower_node(const Graph& g, const Node& n);

}  // namespace loom::compiler
