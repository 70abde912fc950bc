// The compiler's graph IR. Importers (ONNX, ncnn) produce a Graph whose nodes use ONNX op types
// and ONNX attribute names (opset 17 semantics: optional inputs are inputs, not attributes), so
// every later pass and the op table (compiler/ops.hpp) deal with one vocabulary. Loom's fused
// forms keep their base op type and add Loom attributes (Conv with "activation", a residual
// input, ...); each fusion records the nodes it absorbed in Node::fused.
//
// Values are numbered; a node refers to its inputs and outputs by value id, -1 for an absent
// optional input. Constants (initializers, folded results) carry their data on the host.
// Nodes are kept in a topological order: importers sort (and refuse cycles), passes keep it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.hpp"
#include "compiler/descriptor.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"

namespace loom::compiler {

using device::AttrValue;
using device::DType;
using device::KernelAttrs;

// One dimension of a shape: a known size (>= 0) or a named symbol ("N", "H") whose size is
// known only at run time. A symbol's name is what the model called it, or a name the shape
// inference made up ("conv_3.out.h") for an expression over symbols.
struct Dim {
    int64_t value = -1;  // >= 0 when known
    std::string symbol;  // set when value < 0

    Dim() = default;
    Dim(int64_t v) : value(v) {}  // NOLINT: sizes read naturally as dims
    static Dim sym(std::string name) {
        Dim d;
        d.symbol = std::move(name);
        return d;
    }
    bool known() const { return value >= 0; }
    bool operator==(const Dim& o) const { return value == o.value && (value >= 0 || symbol == o.symbol); }
};
using Shape = std::vector<Dim>;

// Returns "1x3xHx320" ("scalar" for rank 0).
std::string shape_str(const Shape& s);
// Returns true when every dim is known.
bool shape_static(const Shape& s);
// Returns the known dims of a static shape (asserts shape_static).
std::vector<int64_t> shape_dims(const Shape& s);
// Returns a static Shape from dims.
Shape shape_of(std::span<const int64_t> dims);
// Returns the element count of a static shape; an error names `what` on overflow past 2^62.
Result<int64_t> shape_elements(const Shape& s, std::string_view what);

// A dense row-major tensor on the host: initializers, folded constants, run inputs and outputs.
// The data is shared between copies (immutable once built by convention; copy-on-write is the
// caller's job). Its storage is 64-byte aligned.
class HostTensor {
public:
    HostTensor() = default;
    // Allocates zeroed storage for `dims` of `dtype`.
    HostTensor(DType dtype, std::vector<int64_t> dims);

    DType dtype() const { return dtype_; }
    const std::vector<int64_t>& dims() const { return dims_; }
    int64_t elements() const;
    size_t bytes() const { return static_cast<size_t>(elements()) * device::dtype_size(dtype_); }
    void* data() { return storage_ ? storage_.get() : nullptr; }
    const void* data() const { return storage_ ? storage_.get() : nullptr; }
    template <typename T>
    T* as() { return static_cast<T*>(data()); }
    template <typename T>
    const T* as() const { return static_cast<const T*>(data()); }
    // Returns the values as int64 (from i64, i32, i8, u8); for shape-like inputs.
    Result<std::vector<int64_t>> to_ints() const;
    // Returns the values as double (from any dtype).
    std::vector<double> to_doubles() const;
    // Returns a tensor with the same bytes under other dims (same element count).
    HostTensor reshaped(std::vector<int64_t> dims) const;
    // True when another tensor shares this one's data (a copy, a reshaped view).
    bool shared() const { return storage_ && storage_.use_count() > 1; }

private:
    DType dtype_ = DType::F32;
    std::vector<int64_t> dims_;
    std::shared_ptr<std::byte[]> storage_;
};

// A tensor's layout in device memory. Functional data is always in logical (NCHW) order; the
// layout decides the simulated device's bytes and the TransData steps between layouts.
enum class Layout : uint8_t {
    ND,       // as the shape says (NCHW for 4-D maps): the host's layout and every non-Cube op's
    NC1HWC0,  // "5HD": channels in blocks of 16, padded; what the Cube ops read and write
};
// Returns "ND" or "NC1HWC0".
std::string_view layout_name(Layout l);
// Returns the bytes a tensor of `dims` and `dtype` takes in device memory in layout `l`.
int64_t layout_bytes(Layout l, DType dtype, std::span<const int64_t> dims);

struct Value {
    std::string name;
    DType dtype = DType::F32;
    Layout layout = Layout::ND;
    Shape shape;
    bool typed = false;                      // dtype and shape are set (import or inference)
    std::shared_ptr<const HostTensor> data;  // set for constants
    bool is_constant() const { return data != nullptr; }
};

struct Node {
    std::string op;    // ONNX op type ("Conv"), opset-17 semantics
    std::string name;  // unique within the graph; importers name unnamed nodes
    std::vector<int> inputs;
    std::vector<int> outputs;
    KernelAttrs attrs;
    std::vector<std::string> fused;  // names of nodes a fusion folded into this one
};

class Graph {
public:
    std::string name;
    std::string source;  // the file it came from, for messages
    int64_t opset = 17;  // the default-domain opset the model was written for
    std::vector<Value> values;
    std::vector<Node> nodes;
    std::vector<int> inputs;   // non-constant graph inputs, in order
    std::vector<int> outputs;  // graph outputs, in order
    // How the model's own program runs it (compiler/descriptor.hpp): set on import for a known
    // family or a model with a sidecar; nullopt for any other model.
    std::optional<ModelDescriptor> descriptor;

    // Adds a value named `name` (must be new) and returns its id.
    int add_value(std::string name);
    // Adds a constant value and returns its id.
    int add_constant(std::string name, HostTensor t);
    // Returns the id of the value named `name`, or -1.
    int find_value(std::string_view name) const;
    // Returns a name not yet used, built from `base`.
    std::string unique_name(std::string_view base);

    Value& value(int id) { return values.at(static_cast<size_t>(id)); }
    const Value& value(int id) const { return values.at(static_cast<size_t>(id)); }
    // The value of a node's i-th input, or nullptr when absent (id -1 or i past the end).
    const Value* input(const Node& n, size_t i) const;
    bool has_input(const Node& n, size_t i) const { return input(n, i) != nullptr; }

    // Rebuilds the name index after values were edited in place.
    void reindex();
    // Sorts nodes topologically (stable: keeps the given order where it is free); fails naming
    // a node on a cycle, a value used before any node produces it, or one produced twice.
    Status topo_sort();
    // Checks structural invariants (ids in range, single producer, order); for tests and after
    // each pass in debug runs.
    Status validate() const;
    // Returns, for every value, the index of the node producing it (-1: input or constant).
    std::vector<int> producers() const;
    // Returns, for every value, how many node inputs and graph outputs use it.
    std::vector<int> use_counts() const;

private:
    std::unordered_map<std::string, int> index_;
};

// A hash of everything that defines the model: opset, values (names, types, shapes, every
// constant's bytes), nodes (ops, names, attributes, wiring), inputs and outputs; not the file
// it came from. Equal graphs hash equal; the compile cache keys entries on it.
uint64_t graph_hash(const Graph& g);

}  // namespace loom::compiler
