// The kernel interface. A kernel is one file that defines a KernelDef: a functional
// implementation that really computes its outputs on the host, a work function that describes a
// launch to the cost model (the kind of tiling it takes and the CubeWork or VectorWork that tiling
// cuts up; device/cost.hpp), and a cost function, the cost model applied to that work, that turns
// (shapes, dtype, tiling) into a cycle breakdown on one AI core configuration of the spec.
// Kernels are listed once in device/kernels/kernel_list.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.hpp"
#include "device/cost.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::device {

inline constexpr int kMaxRank = 6;

// A tensor as a kernel sees it: element type, shape (row-major, dense) and the host address of
// its device memory, valid while the task runs.
struct TensorRef {
    DType dtype = DType::F32;
    int rank = 0;
    std::array<int64_t, kMaxRank> dims{};
    void* data = nullptr;
    uint64_t device_addr = 0;

    int64_t elements() const;
    size_t bytes() const { return static_cast<size_t>(elements()) * dtype_size(dtype); }
    int64_t dim(int i) const { return dims[static_cast<size_t>(i)]; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data);
    }
};

// One attribute value: an int, a float, a string, or a list of ints or floats (ONNX's kinds).
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

// Named attributes of one launch (ONNX style: "strides", "alpha", "mode"). Each kernel documents
// what it reads and refuses names it does not know. Getters return an error naming the
// attribute when it is missing (no default given) or of the wrong kind; an int is accepted
// where a float is asked for.
class KernelAttrs {
public:
    KernelAttrs() = default;
    KernelAttrs(std::initializer_list<std::pair<std::string, AttrValue>> items);

    // Sets `name` (replacing an earlier value); returns *this for chaining.
    KernelAttrs& set(std::string_view name, AttrValue value);
    bool has(std::string_view name) const { return find(name) != nullptr; }
    bool empty() const { return items_.empty(); }
    const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }

    Result<int64_t> get_int(std::string_view name) const;
    Result<int64_t> get_int(std::string_view name, int64_t fallback) const;
    Result<double> get_float(std::string_view name) const;
    Result<double> get_float(std::string_view name, double fallback) const;
    Result<std::string> get_string(std::string_view name) const;
    Result<std::string> get_string(std::string_view name, std::string_view fallback) const;
    Result<std::vector<int64_t>> get_ints(std::string_view name) const;
    Result<std::vector<int64_t>> get_ints(std::string_view name, std::vector<int64_t> fallback) const;
    Result<std::vector<double>> get_floats(std::string_view name) const;
    Result<std::vector<double>> get_floats(std::string_view name, std::vector<double> fallback) const;

    // Fails naming the first attribute not in `known`.
    Status check_known(std::initializer_list<std::string_view> known) const;

private:
    const AttrValue* find(std::string_view name) const;
    std::vector<std::pair<std::string, AttrValue>> items_;
};

// Returns a readable form of an attribute value ("3", "[1, 2]", "'linear'").
std::string attr_to_string(const AttrValue& v);

// What a kernel derives once from a launch and reuses on every run of it (ncnn's
// create_pipeline beside forward): e.g. a convolution's weights transformed and packed for
// the path it takes. Each kernel that has a prepare hook defines its own subclass.
struct KernelState {
    virtual ~KernelState() = default;
};

// A banded tensor of a launch: rows [row, row + rows) of a larger NCHW tensor of `height` rows,
// where `rows` is the band's H in its TensorRef (see KernelLaunch::bands).
struct RowBand {
    int64_t height = 0;  // H of the whole tensor; 0: not banded (the TensorRef is the whole tensor)
    int64_t row = 0;     // the band's first row in the whole tensor
    // Outputs only: of the band's rows the kernel computes, [keep_begin, keep_end) are written back
    // (to rows row + keep_begin ..); the rest is context a later band computes again.
    int64_t keep_begin = 0, keep_end = 0;

    bool banded() const { return height > 0; }
};

// The bands of a launch, per input and output (absent or empty: that tensor is not banded).
struct LaunchBands {
    std::vector<RowBand> inputs, outputs;
};

struct KernelLaunch {
    std::vector<TensorRef> inputs;
    std::vector<TensorRef> outputs;
    KernelAttrs attrs;
    Tiling tiling;  // monostate = the kernel's default heuristic
    // Operands resident in L2 (docs/device-model.md 3.3; a split region's tile, compiler/split.hpp):
    // bit i: inputs[i] was left in L2 by an earlier launch; l2_outputs: the outputs are written to
    // L2 for a later one. They change the cost only (kernel_launch_cost), never the results.
    uint32_t l2_inputs = 0;
    bool l2_outputs = false;
    // A launch over bands of rows of larger tensors (a split region's tile): a banded tensor's
    // TensorRef has the band's dims (rank 4, [N, C, rows, W]) and the whole tensor's data and
    // device address. The kernel's cost sees the band; run_kernel_launch gives its run() the band
    // as a dense tensor and writes an output band's kept rows back, as the chip's MTEs would read
    // and write the rows in place. nullptr: nothing banded.
    std::shared_ptr<const LaunchBands> bands;
    // Inputs whose contents do not change between runs of this launch (a compiled model's
    // weights and constants): bit i stands for inputs[i]. Only these may be read by prepare.
    uint32_t constant_inputs = 0;
    // Set by prepare_launch from the kernel's prepare hook (never by hand): run() then reuses
    // it instead of deriving it again. Belongs to this launch's kernel, shapes, attributes and
    // constant inputs; changing any of them after preparing is a bug.
    std::shared_ptr<const KernelState> state;

    bool input_constant(size_t i) const { return i < 32 && ((constant_inputs >> i) & 1u) != 0; }
};

struct KernelDef {
    const char* name;
    // Checks shapes, dtypes and attributes (never the tiling) and describes the launch's work:
    // the kind of tiling it takes, its CubeWork or VectorWork, the fixed cost around it. nullptr
    // for a kernel with nothing to tile (none today).
    Result<KernelWork> (*work)(const KernelLaunch& launch, const DeviceSpec& spec);
    // Checks shapes, dtypes, attributes and the tiling; returns the cycle breakdown. For a kernel
    // with a work function: cost::cost_of_work(spec, work(launch, spec), launch.tiling, name).
    Result<CycleBreakdown> (*cost)(const KernelLaunch& launch, const DeviceSpec& spec);
    // Computes the outputs; parallel loops go through `pool`. Uses launch.state when set; derives
    // what it needs itself otherwise (a launch that was never prepared).
    Status (*run)(const KernelLaunch& launch, ThreadPool& pool);
    // Optional: builds the state run() reuses, once per prepared launch, after the cost function
    // accepted the launch and while its constant inputs hold their data. May return nullptr
    // (nothing worth keeping for this launch).
    Result<std::shared_ptr<const KernelState>> (*prepare)(const KernelLaunch& launch) = nullptr;
};

// The work of `launch` as the chip runs it: kernel.work(launch, spec) with the operands the
// launch keeps in L2 (l2_inputs, l2_outputs) marked in it (docs/device-model.md 3.3: a Cube op's
// input 0 is its A operand, another input with its output's element count its residual; a Vector
// op's resident inputs' bytes per element of its iteration space). Fails for a kernel without a
// work function, or an l2_inputs bit past the launch's inputs.
Result<KernelWork> kernel_launch_work(const KernelDef& kernel, const KernelLaunch& launch, const DeviceSpec& spec);
// The cost of `launch` on the chip: kernel.cost(launch, spec) when it keeps nothing in L2 (so
// bit for bit what it always was), else cost_of_work on kernel_launch_work.
Result<CycleBreakdown> kernel_launch_cost(const KernelDef& kernel, const KernelLaunch& launch, const DeviceSpec& spec);
// Checks launch.bands against the launch (counts, rank-4 banded tensors whose band lies inside
// the whole tensor, kept rows inside the band); errors name the kernel and the tensor.
Status check_launch_bands(const KernelDef& kernel, const KernelLaunch& launch);
// The bytes of tensor `t` of a launch in device memory: the whole tensor's for a banded one.
size_t launch_tensor_bytes(const TensorRef& t, const RowBand* band);
// Runs `launch` (kernel.run), with its banded inputs copied into dense buffers first and the kept
// rows of its banded outputs copied back afterwards (check_launch_bands must have accepted it).
Status run_kernel_launch(const KernelDef& kernel, const KernelLaunch& launch, ThreadPool& pool);

// Returns the kernel named `name`, or nullptr.
const KernelDef* find_kernel(std::string_view name);
// Returns every registered kernel.
std::span<const KernelDef* const> all_kernels();

}  // namespace loom::device
