// The kernel interface. A kernel is one file that defines a KernelDef: a functional
// implementation that really computes its outputs on the host, and a cost function that turns
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
    T* as() const { return static_cast<T*>(data); }
};

// Cube tiling: blocks of the output (M x N) staged in L1 with K slices of k_l1, split again
// into L0 tiles that the Cube consumes fractal by fractal. Legal ranges: every L0 size is a
// positive multiple of the fractal, every L1 size a positive multiple of its L0 size, and the
// buffers below must fit (checked by cube_tiling_check, never clamped).
struct CubeTiling {
    int64_t m_l1 = 0, n_l1 = 0, k_l1 = 0;
    int64_t m_l0 = 0, n_l0 = 0, k_l0 = 0;
    bool n_outer = false;       // loop order over L1 blocks: false = M outer, true = N outer
    bool double_buffer = true;  // ping-pong L1 and L0 so MTE overlaps the Cube
    int64_t cores = 0;          // AI cores to spread blocks over; 0 = all
};

// Which axis of a Vector op's iteration space (outer x axis x inner, row-major, inner contiguous
// in GM; see cost::VectorWork) the Vector unit's lanes run along. AXIS is the op's own axis (the
// one it reduces or broadcasts over); it is contiguous when inner is 1.
enum class VectorAxis : uint8_t { INNER, AXIS, OUTER };
inline constexpr int kVectorAxisCount = 3;

// "inner", "axis", "outer"; "?" for a value outside the enum.
inline const char* vector_axis_name(VectorAxis a) {
    switch (a) {
    case VectorAxis::INNER: return "inner";
    case VectorAxis::AXIS: return "axis";
    case VectorAxis::OUTER: return "outer";
    }
    return "?";
}

// Sets `out` to the axis vector_axis_name calls `name`; returns false (out untouched) otherwise.
inline bool vector_axis_from_name(std::string_view name, VectorAxis& out) {
    for (int i = 0; i < kVectorAxisCount; ++i)
        if (name == vector_axis_name(static_cast<VectorAxis>(i))) {
            out = static_cast<VectorAxis>(i);
            return true;
        }
    return false;
}

// Vector schedule: the iteration space is cut into UB tiles of ub_tile / vector_tile rows, each
// row vector_tile elements of the vectorised axis from one line (the positions of the other two
// axes), or, with vector_tile = 0, into flat runs of ub_tile elements that join lines; tiles are
// dealt round-robin to cores and stream GM -> UB -> Vector -> UB -> GM. Legal ranges (checked by
// cost::vector_schedule_check, never clamped; docs/device-model.md 5.2):
//   ub_tile      a positive multiple of the 32-byte block and of vector_tile; all live tiles fit UB
//   cores        0 .. aicore_count (0 = all)
//   vector_tile  0 (lines joined: needs the vector axis contiguous in GM and no reduction), or a
//                positive multiple of the block up to the vector axis rounded up to the block
//   fuse_input, fuse_output, in_place: only where the op allows them (VectorWork)
//   fuse_ub_buffers  0 .. kFuseUbBuffersMax, and 0 unless a side is fused
struct VectorSchedule {
    int64_t ub_tile = 0;        // elements per UB tile
    bool double_buffer = true;  // ping-pong UB so MTE2/MTE3 overlap the Vector unit
    int64_t cores = 0;          // 0 = all
    VectorAxis vector_axis = VectorAxis::INNER;  // the axis in the Vector unit's lanes
    int64_t vector_tile = 0;    // elements of the vector axis per UB row; 0 = lines joined
    bool fuse_input = false;    // the op's full-size input arrives in UB from the preceding Vector op
    bool fuse_output = false;   // the output stays in UB for the following Vector op
    int64_t fuse_ub_buffers = 0;  // UB tiles (ub_tile elements each) the fused neighbours keep live
    bool in_place = false;      // the output overwrites an input tile in UB: one live tile fewer

    friend bool operator==(const VectorSchedule&, const VectorSchedule&) = default;
};
inline constexpr int64_t kFuseUbBuffersMax = 64;

using Tiling = std::variant<std::monostate, CubeTiling, VectorSchedule>;

// Where the cycles of one kernel go, per core on the critical (most loaded) core.
struct CycleBreakdown {
    double mte_in = 0;    // GM/L2 -> L1/UB and L1 -> L0
    double mte_out = 0;   // L0C/UB -> GM
    double cube = 0;
    double vector = 0;
    double scalar = 0;
    double total = 0;     // after double-buffer overlap; what the timeline uses
    int64_t cores_used = 1;
    int64_t blocks = 1;   // work blocks; the last round over the cores may be partial (tail)
    int64_t rounds = 1;   // ceil(blocks / cores_used)
    double l2_hit_bytes = 0;
    double l2_miss_bytes = 0;
    double flops = 0;     // useful arithmetic, for utilisation figures
    Tiling tiling;        // the tiling costed: the launch's, or the default heuristic's choice
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

struct KernelLaunch {
    std::vector<TensorRef> inputs;
    std::vector<TensorRef> outputs;
    KernelAttrs attrs;
    Tiling tiling;  // monostate = the kernel's default heuristic
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
    // Checks shapes, dtypes, attributes and the tiling; returns the cycle breakdown.
    Result<CycleBreakdown> (*cost)(const KernelLaunch& launch, const DeviceSpec& spec);
    // Computes the outputs; parallel loops go through `pool`. Uses launch.state when set; derives
    // what it needs itself otherwise (a launch that was never prepared).
    Status (*run)(const KernelLaunch& launch, ThreadPool& pool);
    // Optional: builds the state run() reuses, once per prepared launch, after the cost function
    // accepted the launch and while its constant inputs hold their data. May return nullptr
    // (nothing worth keeping for this launch).
    Result<std::shared_ptr<const KernelState>> (*prepare)(const KernelLaunch& launch) = nullptr;
};

// Returns the kernel named `name`, or nullptr.
const KernelDef* find_kernel(std::string_view name);
// Returns every registered kernel.
std::span<const KernelDef* const> all_kernels();

}  // namespace loom::device
