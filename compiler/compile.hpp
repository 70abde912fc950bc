// The compiler driver and the compiled model: import (ONNX or ncnn), shapes, optimisation,
// lowering of every node to a kernel launch checked by its cost function, placement (device or
// host), the static memory plan and the weights blob. A CompiledModel is what the compiled-model
// file (compiler/model_file.hpp) stores and what the executor runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "compiler/graph.hpp"
#include "compiler/measure.hpp"
#include "compiler/memory_plan.hpp"
#include "compiler/passes.hpp"
#include "compiler/quantize.hpp"
#include "device/kernel.hpp"
#include "device/spec.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::compiler {

// The numbers a model computes in: fp32; fp16 (the Cube's fp16-in, fp32-accumulate numerics);
// int8 weights and activations with per-channel scales from calibration.
enum class Precision : uint8_t { FP32, FP16, INT8 };
// How a compiled model runs. SINK: static shapes, the steps and memory plan compiled, one device
// submission per inference. HOST: the optimised graph kept, lowered per input shape at run time,
// each op launched by the host.
enum class ExecMode : uint8_t { SINK, HOST };

// The names CLI flags, config files and the .loom file use: "fp32", "fp16", "int8".
std::string_view precision_name(Precision p);
// Parses a precision name; the error lists the valid ones.
Result<Precision> parse_precision(std::string_view text);
// "sink" or "host".
std::string_view exec_mode_name(ExecMode m);
// Parses an execution mode name; the error lists the valid ones.
Result<ExecMode> parse_exec_mode(std::string_view text);

class TilingSource;  // compiler/tuning.hpp

enum class Placement : uint8_t { DEVICE, HOST };
enum class Storage : uint8_t { ARENA, WEIGHTS };

// One tensor of the compiled model: in the activation arena (inputs, outputs, intermediates)
// or in the weights blob.
struct CompiledTensor {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> dims;
    Storage storage = Storage::ARENA;
    Layout layout = Layout::ND;  // in device memory (the data itself stays in logical order)
    int64_t offset = 0;          // bytes into the arena or the weights blob; -1: a weight nothing reads (not stored)
    int64_t bytes = 0;           // the logical tensor's bytes (what copies move)

    // The bytes it occupies in device memory: NC1HWC0 pads the channels to 16.
    int64_t device_bytes() const { return layout_bytes(layout, dtype, dims); }
};

// One kernel launch, in execution order.
struct CompiledStep {
    std::string name;          // the graph node's name
    std::string op;            // its ONNX op type
    std::string kernel;        // the device kernel
    KernelAttrs attrs;         // the kernel's attributes
    std::vector<int> inputs;   // tensor ids in the kernel's order; -1 = absent
    std::vector<int> outputs;  // tensor ids
    bool alias = false;        // output 0 shares input 0's bytes: nothing to run
    Placement placement = Placement::DEVICE;
    device::Tiling tiling;           // monostate: the kernel's default heuristic
    std::vector<std::string> fused;  // nodes folded into this one
    double cost_ns = 0;              // the cost model's estimate for one launch
    double flops = 0;
};

// A split region (compiler/split.hpp): steps [first, last] run band by band over bands of `rows`
// rows of the last step's output, their intermediates kept in L2.
struct SplitRegion {
    int first = 0, last = 0;
    int64_t rows = 0;
    // The tiling of each band launch, in the plan's order (plan_split): the default heuristic's or
    // a tiling source's, as the cost model checked it.
    std::vector<device::Tiling> tilings;
};

// A split region asked for by name (CompileOptions::splits): the first and last steps' names
// (their graph nodes') and the rows of the last step's output per band.
struct SplitChoice {
    std::string first, last;
    int64_t rows = 0;
};

struct CompiledModel {
    std::string compiler_version;
    std::string compiler_build;  // loom::build_id() of the compiler that built it
    std::string source;          // the model file it came from
    std::string name;
    // How the model's program runs it (compiler/descriptor.hpp); applied: the steps pad, crop
    // and add the residual, so the input is the frame and the output scale x the frame.
    std::optional<ModelDescriptor> descriptor;
    std::string spec_name;  // the device spec it was built for
    uint64_t spec_hash = 0;
    Precision precision = Precision::FP32;
    QuantizeReport int8;  // with int8: what the quantization did and cost
    MeasureReport measured;  // with measure_host: each conv's candidates and times (not saved)
    // SINK: the steps and memory plan below. HOST: `graph` below, lowered per input shape.
    ExecMode mode = ExecMode::SINK;
    std::vector<CompiledTensor> tensors;
    std::vector<int> inputs, outputs;  // tensor ids
    std::vector<CompiledStep> steps;
    // Sink mode: runs of steps executed band by band (compiler/split.hpp), in step order, disjoint.
    // Their steps' tilings are the unsplit launches'; what runs is each region's band launches.
    std::vector<SplitRegion> splits;
    int64_t arena_bytes = 0;       // the memory plan's peak
    int64_t plan_lower_bound = 0;  // the liveness lower bound
    int64_t plan_naive = 0;        // one buffer per tensor
    HostTensor weights;            // U8 blob, 64-byte aligned pieces
    size_t nodes_imported = 0;
    std::vector<PassCount> passes;
    // Host mode only (tensors, steps and plan stay empty): the optimised graph, its shapes
    // symbolic where the inputs' are, and per value the offset of a constant's bytes in
    // `weights` (-1 for values that are not constants).
    Graph graph;
    std::vector<int64_t> graph_offsets;
    // Set by the compile cache (compiler/compile_cache.hpp), 0 otherwise: the hashes of the
    // imported model and of the compile options it was built from.
    uint64_t source_hash = 0;
    uint64_t options_hash = 0;
    // CompileOptions::fold and host_placement as compiled (host mode applies them per plan).
    bool fold = true;
    bool host_placement = true;
};

struct CompileOptions {
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;  // graph input shapes
    Precision precision = Precision::FP32;
    std::vector<InputSet> calibration;  // int8: sample input sets (static shapes as compiled)
    bool optimize = true;               // run the fusion passes
    // For comparisons: fold = false keeps ops whose inputs are all constant (Shape of a static
    // input, say) as steps; host_placement = false runs tiny shape ops on the device too.
    bool fold = true;
    bool host_placement = true;
    // Values of graph inputs known at compile time. An input that feeds a slot which must be
    // constant (a Reshape's shape, a Resize's scales, ...) is specialised to its value and
    // leaves the compiled model's inputs, as TensorRT does with shape tensors.
    std::vector<std::pair<std::string, HostTensor>> input_values;
    // Execution mode: none = SINK when every input shape is static, else HOST; HOST forces host
    // mode; SINK refuses an input that keeps a symbolic dim (naming it).
    std::optional<ExecMode> mode;
    // Where tilings come from instead of the default heuristic (a tuner's knowledge base;
    // compiler/tuning.hpp): asked once per device step that takes a tiling when a sink model is
    // lowered. A tiling it gives is checked by the kernel's cost function and recorded; an illegal
    // one fails the compile naming the step. Host-mode models lower per input shape at run time
    // and do not ask it. Null: the default heuristic everywhere.
    std::shared_ptr<const TilingSource> tiling_source;
    // Runs of steps to execute band by band (compiler/split.hpp; a tuner's choice, tuner/subgraph.hpp),
    // sink mode only: each is planned, checked against the device's L2 and costed per band launch
    // (tilings from tiling_source where it has them); an illegal one fails the compile naming the
    // step. Empty: no step is split.
    std::vector<SplitChoice> splits;
    // Sink mode: choose each eligible conv's host algorithm by timing the candidates on this
    // machine (compiler/measure.hpp) and record it in the steps; false: the rule on C and K.
    bool measure_host = false;
    // The pool measure_host times on (the device context's); null: ThreadPool::global(), for
    // programs that make no context. Not part of the result (the cache's options hash skips it).
    ThreadPool* pool = nullptr;
};

// The graph inputs compile_graph specialises to their options.input_values: those given a value
// that feed a slot which must be constant.
std::vector<std::string> specialised_inputs(const Graph& g, const CompileOptions& options);
// Compiles an imported graph for `spec`.
Result<CompiledModel> compile_graph(Graph g, const CompileOptions& options, const device::DeviceSpec& spec);
// Parses "NAME=1x3x240x320" (a --shape option).
Result<std::pair<std::string, std::vector<int64_t>>> parse_shape_option(const std::string& text);

// The memory-plan requests of a compiled model's arena tensors (steps in order; graph inputs
// live from the start, outputs to the end, alias steps share their input's buffer, and every
// tensor a split region's step reads or writes live over the whole region), with the tensor id of
// each request in `tensor_of`. Fails naming a step that reads an arena tensor nothing has written.
Result<std::vector<BufferRequest>> plan_requests(const CompiledModel& m, std::vector<int>& tensor_of);
// Plans m's arena from plan_requests: every arena tensor's offset, arena_bytes and the plan's
// bounds.
Status plan_arena(CompiledModel& m);

// The tensor of one compiled tensor's bytes inside a host copy of the weights blob.
device::TensorRef tensor_ref_of(const CompiledTensor& t, void* base, uint64_t base_addr);

// Where step `s` runs: shape-computing ops (Shape, Gather, Concat, Reshape, Cast, small integer
// arithmetic, ...) whose inputs and outputs hold fewer than 8 elements go to the host CPU engine,
// as the Ascend graph engine places them; everything else to the device.
// Shape's input counts as read by neither (it only reads dims).
Placement placement_of(const CompiledStep& s, std::span<const CompiledTensor> tensors);
// True for ops that read their inputs' dims but not their data (Shape).
bool reads_dims_only(std::string_view op);

// Lowers a typed, optimised graph whose shapes are all static into m's tensors (one per value,
// same ids), steps (placed), weights blob and memory plan, checking every launch with its
// kernel's cost function; errors name the graph's source and the node. Compiling a sink model
// and running a host-mode one per input shape both go through here. A constant with
// resident[id] >= 0 is already on the device at that offset of a weights blob of
// `resident_bytes` (a multiple of 64): it is not copied, and the constants that are get offsets
// from resident_bytes on (m.weights holds their bytes from its start).
// With host_placement off every step runs on the device (for comparisons). With a tiling source,
// each device step that takes a tiling uses the one the source gives for its StepKey, if any
// (an illegal one is an error naming the step and the source). Finally every step whose
// VectorSchedule fuses a side must be the matching neighbour of the next or previous step (the
// producer's output read by that consumer only, and not a graph output) and every fused chain
// must pass device::cost::check_fused_chain; errors name the steps.
Status lower_graph(const Graph& g, const device::DeviceSpec& spec, CompiledModel& m,
                   std::span<const int64_t> resident = {}, int64_t resident_bytes = 0, bool host_placement = true,
                   const TilingSource* tiling_source = nullptr);

// lower_graph's check of fused steps (see there) on a compiled sink model, for a model read from a
// file: nothing to do unless a step's VectorSchedule fuses a side. Errors name the model's source
// and the steps.
Status check_fused_steps(const CompiledModel& m, const device::DeviceSpec& spec);

// The launch lower_graph costs step `s` with: every tensor's dtype and dims (no device
// addresses: offsets from 0), `constant_data(id)` as the data of each input that is a weight
// (nullptr for activations and absent inputs, which are empty rank-1 tensors), the step's
// attributes and tiling. `tensors` are the model's (CompiledModel::tensors).
device::KernelLaunch step_cost_launch(std::span<const CompiledTensor> tensors, const CompiledStep& s,
                                      const std::function<const void*(int id)>& constant_data);

// Compiles `g` for inferences of `batch` frames (then run with executor::FrameSchedulerOptions::batch):
// every graph input's dim 0 must be one symbol shared by all inputs (an ONNX model's 'N'), and
// shape inference must carry that symbol to dim 0 of every output, so that frame b is row b of
// each input and output. options.shapes may give an input's other dims (its dim 0 is replaced
// by `batch`). Refuses, naming the input or output: a model that fixes dim 0 (ncnn models
// import with N = 1), inputs with different batch symbols, an output whose dim 0 is not the
// batch symbol. Not detectable from shapes: an op that mixes rows and keeps the shape
// (Softmax over axis 0); such a model batches wrongly.
inline constexpr int64_t kCompileBatchMax = 4096;
Result<CompiledModel> compile_for_batch(Graph g, int64_t batch, CompileOptions options, const device::DeviceSpec& spec);

}  // namespace loom::compiler
