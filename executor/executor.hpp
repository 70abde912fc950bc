// The executor: runs compiled models (compiler/compile.hpp) on the simulated NPU. A
// LoadedModel holds one model's weights on a device, uploaded once and shared by every Session
// of that model; a Session owns one activation arena and a stream, and runs inferences on it
// one after another, its inputs and outputs on the host or bound to device buffers of the
// caller's (Session::bind: models that hand values to each other on the device).
//
// Two execution modes (CompiledModel::mode):
//   sink  static shapes: the compiled steps and memory plan; the device steps of an inference go
//         to the device as one sink submission (Stream::launch_sink), so the host pays one launch
//         overhead however many kernels there are. Host-placed steps split the list: each run of
//         device steps between them is one submission.
//   host  symbolic shapes: per inference the host binds the input dims, infers every shape, folds
//         what the shapes make constant, lowers each node, plans memory (plans are cached per
//         input-shape signature) and launches every kernel itself, paying the launch overhead
//         each time, as Ascend's host-scheduled (single-op) execution does.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "compiler/split.hpp"
#include "device/runtime.hpp"

namespace loom::executor {

using compiler::CompiledModel;
using compiler::HostTensor;

// Host mode: the model lowered for one set of input shapes.
struct HostPlan {
    std::vector<std::vector<int64_t>> input_dims;  // the shapes it was built for
    // Tensors, steps (placed, cost-checked) and memory plan for these shapes. Weight offsets
    // below resident_bytes lie in the model's weights; the others in `constants` (values that
    // run-time shape inference folded), at offset - resident_bytes.
    CompiledModel lowered;
    int64_t resident_bytes = 0;
    std::vector<const device::KernelDef*> kernels;  // per step; nullptr for alias steps
    device::DeviceBuffer constants;                 // lowered.weights on the device (maybe empty)
};

// A compiled model resident on a device. Thread-safe to share between sessions.
class LoadedModel {
public:
    // At most this many host-mode plans are kept; the least recently used is dropped first.
    static constexpr size_t kHostPlansMax = 16;

    // Checks the model was built for the device's spec, uploads its weights and resolves every
    // step's kernel; OUT_OF_DEVICE_MEMORY names the model when the weights do not fit.
    static Result<std::shared_ptr<LoadedModel>> load(device::Device& dev, std::shared_ptr<const CompiledModel> model);

    const CompiledModel& model() const { return *model_; }
    bool host_mode() const { return model_->mode == compiler::ExecMode::HOST; }
    device::Device& device() const { return *dev_; }
    const device::DeviceBuffer& weights() const { return weights_; }
    // The kernel of step i of a sink model (nullptr for alias steps).
    const device::KernelDef* kernel(size_t step) const { return kernels_[step]; }
    std::span<const device::KernelDef* const> kernels() const { return kernels_; }
    // A sink model's split regions, planned (compiler/split.hpp), in the order of model().splits.
    std::span<const compiler::SplitPlan> splits() const { return splits_; }

    // Host mode: checks `inputs` against the graph's inputs (count, dtype, rank, fixed dims, one
    // size per symbol; errors name the input and the axis), then returns the plan for their
    // shapes from the cache, or builds and caches it (shape inference, lowering, memory plan,
    // constants uploaded); `cached` says which. Errors fail one inference, not the model.
    Result<std::shared_ptr<const HostPlan>> host_plan(std::span<const HostTensor> inputs, bool* cached = nullptr);
    // Host mode: plans built so far (cache misses), and plans in the cache now.
    size_t host_plans_built() const;
    size_t host_plans_cached() const;

    // Sink mode: the kernel state of every launch (Program::launches; a conv's transformed and
    // packed weights, ...), kept by the first FrameScheduler of the model so that later ones (on
    // other engines sharing the model) take them instead of preparing them again; empty until
    // then. They depend on shapes, attributes and constant inputs only, which every arena of the
    // program shares. Thread-safe.
    std::vector<std::shared_ptr<const device::KernelState>> sink_kernel_states() const;
    // Keeps `states` unless some are kept already.
    void keep_sink_kernel_states(const std::vector<std::shared_ptr<const device::KernelState>>& states) const;

private:
    LoadedModel() = default;
    Result<std::shared_ptr<HostPlan>> build_host_plan(std::span<const HostTensor> inputs) const;
    device::Device* dev_ = nullptr;
    std::shared_ptr<const CompiledModel> model_;
    device::DeviceBuffer weights_;
    std::vector<const device::KernelDef*> kernels_;
    std::vector<compiler::SplitPlan> splits_;
    mutable std::mutex states_mutex_;  // guards sink_states_
    mutable std::vector<std::shared_ptr<const device::KernelState>> sink_states_;
    // Guarded by plans_mutex_: most recently used first.
    mutable std::mutex plans_mutex_;
    std::list<std::shared_ptr<const HostPlan>> plans_;
    size_t plans_built_ = 0;
};

// One kernel launch of an inference: a step's, or a band launch of a split region's step.
struct ProgramLaunch {
    size_t step = 0;  // index into the program's steps
    device::KernelLaunch launch;
    std::string name;  // the step's name; a band launch's "NAME [band I/N]"
};

// What one inference runs, resolved against the device: a sink model's own steps and memory
// plan, or a host plan's. Session and FrameScheduler (executor/frame_scheduler.hpp) place its arena
// tensors in arenas of their own.
// A tensor of a program placed in a device buffer of the caller's instead of the arena
// (Session::bind): the whole alias group of a bound graph input or output.
struct BoundTensor {
    int tensor = -1;
    const device::DeviceBuffer* buffer = nullptr;
    int64_t offset = 0;
};

struct Program {
    const CompiledModel* m = nullptr;
    std::span<const device::KernelDef* const> kernels;  // per step; nullptr for alias steps
    const device::DeviceBuffer* weights = nullptr;       // the model's weights
    const device::DeviceBuffer* constants = nullptr;     // host plans: weight offsets from resident_bytes on
    int64_t resident_bytes = 0;
    bool sink = false;  // device steps go to the device as sink submissions, else one launch each
    std::span<const compiler::SplitPlan> splits;  // sink: the model's split regions, planned
    std::span<const BoundTensor> bound;           // arena tensors placed elsewhere (Session::bind)

    // Returns the program of a sink model.
    static Program of_sink(const LoadedModel& model);
    // Returns the program of a host plan of `model`; the plan must outlive the program.
    static Program of_host_plan(const LoadedModel& model, const HostPlan& plan);
    // Returns the device bytes of tensor `id`: in `arena`, a bound buffer, the weights or the
    // plan's constants.
    device::DevicePtr<uint8_t> tensor_bytes(int id, const device::DeviceBuffer& arena) const;
    // Returns step `si`'s launch: attributes, tiling and every tensor placed (an absent optional
    // input is a rank-1 empty tensor at the arena's base).
    device::KernelLaunch step_launch(size_t si, const device::DeviceBuffer& arena) const;
    // Returns every launch of one inference in execution order: each step's but alias steps', a
    // split region's steps as its band launches (band by band), each with the tiling the region
    // recorded for it.
    std::vector<ProgramLaunch> launches(const device::DeviceBuffer& arena) const;
};

// The bytes a host-placed step reads and writes, for the host engine's cost (Shape's input is
// not read: only its dims).
double host_step_bytes(const compiler::CompiledStep& s, const device::KernelLaunch& l);

// The name of the host task running `steps`: the step's, or "first .. last (N host steps)".
std::string host_steps_name(std::span<const device::SinkTask> steps);
// Runs consecutive host-placed steps, in order, as one task named `name` on the host CPU engine
// (one task overhead for the run; `flops` and `bytes` are their sums). The task shares `steps`
// (prebuilt ones are not copied per run); launches prepared with device::prepare_kernel_state
// reuse their kernel state.
Status launch_host_steps(device::Stream& stream, std::string_view name,
                         std::shared_ptr<const std::vector<device::SinkTask>> steps, double flops, double bytes);

// A prebuilt piece of an inference's work (see PreparedProgram).
struct ProgramSegment {
    enum class Kind : uint8_t { SINK, HOST_STEP, LAUNCH };
    Kind kind = Kind::SINK;
    std::vector<device::PreparedLaunch> prepared;  // SINK: a run of device steps; LAUNCH: one step
    std::shared_ptr<const std::vector<device::SinkTask>> host;  // HOST_STEP: the steps, kernel states prepared
    double flops = 0, bytes = 0;  // HOST_STEP: what the host engine is charged for
    std::string name;             // HOST_STEP: the host task's name (host_steps_name)
};

// Every launch of one inference of a program against one arena, built once: checked, costed and
// with its kernel state prepared (a conv's transformed and packed weights, ...), grouped as the
// program runs them: runs of device steps as one sink submission each (sink mode) or one launch
// each (host mode), runs of host-placed steps as one host task each. Submitting it then only
// places and queues the work; nothing is looked up, costed or prepared per inference. It points
// into the arena and the model's weights and constants: it lives no longer than they do.
struct PreparedProgram {
    std::vector<ProgramSegment> segments;
    size_t launches = 0;     // kernels run on the AI cores
    size_t host_steps = 0;   // steps run on the host CPU engine
    size_t submissions = 0;  // sink lists and single launches

    // Builds the program's launches against `arena` for `spec`. `states`, when given, holds one
    // kernel state per launch (Program::launches): empty, it is filled with the states prepared
    // here; filled, its states are taken instead of preparing them again (they depend on shapes,
    // attributes and constant inputs only, which every arena of a program shares).
    static Result<PreparedProgram> build(const Program& p, const device::DeviceBuffer& arena,
                                         const device::DeviceSpec& spec,
                                         std::vector<std::shared_ptr<const device::KernelState>>* states = nullptr);
    // Queues the segments on `stream` in order; `sink_name` names the sink submissions.
    Status submit(device::Stream& stream, std::string_view sink_name) const;
};

struct RunStats {
    compiler::ExecMode mode = compiler::ExecMode::SINK;
    double sim_ms = 0;         // simulated device time from the first copy in to the last copy out
    double wall_ms = 0;        // host wall time of run() (host mode: with shape inference and planning)
    size_t launches = 0;       // kernels run on the AI cores
    size_t host_steps = 0;     // steps run on the host CPU engine
    size_t submissions = 0;    // kernel submissions the host made: sink lists, or single launches
    bool plan_cached = false;  // host mode: the plan for these input shapes came from the cache
    // The launches (checked, costed, kernel states such as packed weights prepared) came from an
    // earlier inference of the session: false on its first, after the arena grew and, in host
    // mode, after a run of other shapes.
    bool launches_cached = false;
};

// Where a graph input or output of a sink model lives when it is bound (Session::bind): a
// device buffer of the caller's instead of the session's arena, as ONNX Runtime's IoBinding
// keeps values on the device. A bound input is read where it lies (no copy in), a bound output
// written there (no copy out, unless to_host). Models that hand values to each other on the
// device bind one's output and the next one's input to the same bytes.
struct DeviceTensor {
    const device::DeviceBuffer* buffer = nullptr;  // null: the host's (copied in or out as usual)
    int64_t offset = 0;    // a multiple of 64; the tensor's device bytes (its layout's) must fit after it
    bool to_host = false;  // an output: copied out to the host as well
};

class Session;

// A session's launches with graph inputs and outputs bound to device buffers (Session::bind),
// built once and run as often as wanted while the session and the buffers live.
class BoundLaunches {
public:
    BoundLaunches() = default;
    const std::vector<DeviceTensor>& inputs() const { return inputs_; }
    const std::vector<DeviceTensor>& outputs() const { return outputs_; }

private:
    friend class Session;
    const Session* session_ = nullptr;
    std::vector<DeviceTensor> inputs_, outputs_;
    std::vector<BoundTensor> bound_;  // every arena tensor placed in a bound buffer
    std::optional<PreparedProgram> prepared_;
};

// One inference context: an activation arena and a stream. Not thread-safe; use one per thread.
class Session {
public:
    // Allocates the arena (host mode: on the first inference, grown as input shapes need);
    // OUT_OF_DEVICE_MEMORY names the model and the bytes needed. With `arena` (sink mode), the
    // session runs in that buffer instead, which must hold the model's arena_bytes: sessions that
    // never run at once (the tiled runner's passes, each waited for) share one.
    static Result<std::unique_ptr<Session>> create(std::shared_ptr<LoadedModel> model,
                                                   std::shared_ptr<device::DeviceBuffer> arena = nullptr);

    // Copies `inputs` (one per graph input: in sink mode of the compiled dtype and dims, in host
    // mode of any dims the model allows) to the device, runs every step in order (see the modes
    // above; host-placed steps on the host engine), copies the outputs back and waits. A bad
    // input, a device error or a full device memory fails this inference only; the session
    // stays usable.
    Result<std::vector<HostTensor>> run(std::span<const HostTensor> inputs, RunStats* stats = nullptr);
    // As above, into `outputs`: an entry of its output's dtype and dims that shares its data with
    // no other tensor is written in place (no allocation, for callers that recycle buffers); any
    // other entry is replaced by a new tensor.
    Status run(std::span<const HostTensor> inputs, std::vector<HostTensor>& outputs, RunStats* stats = nullptr);

    // Binds a sink model's graph inputs and outputs (one entry per input and per output, in the
    // model's order; an entry with no buffer stays on the host) to device buffers, and builds the
    // launches for them: the kernel states (packed weights, ...) are prepared by the first call
    // and shared by the later ones. Every tensor that shares bytes with a bound one in the model
    // (an alias step's, a reshape's) moves with it. INVALID_ARGUMENT, naming the tensor, for a
    // host-mode model, a wrong count, an offset off 64 bytes or a tensor that runs past its
    // buffer, two bound tensors that share bytes, and two bindings for tensors the model keeps
    // in the same bytes.
    Result<BoundLaunches> bind(std::span<const DeviceTensor> inputs, std::span<const DeviceTensor> outputs);
    // As run(inputs, outputs, stats) with `bound`'s bindings (made by this session): a bound
    // input's entry in `inputs` is not read (it may be empty); a bound output's entry in
    // `outputs` is left as it is, unless to_host (then as run() writes it).
    Status run(const BoundLaunches& bound, std::span<const HostTensor> inputs, std::vector<HostTensor>& outputs,
               RunStats* stats = nullptr);

    // The activation arena's size now (host mode: the largest plan run so far).
    size_t arena_bytes() const { return arena_ ? arena_->bytes() : 0; }

private:
    Session() = default;
    Status check_sink_inputs(std::span<const HostTensor> inputs, const BoundLaunches* bound = nullptr) const;
    Status ensure_arena(int64_t bytes);
    Status submit(const Program& p, const PreparedProgram& prepared, std::span<const HostTensor> inputs,
                  std::vector<HostTensor>& outputs, const BoundLaunches* bound = nullptr);
    // Drains the stream after a submission and fills `stats` (run's common end).
    Status finish(Status submitted, const std::chrono::steady_clock::time_point& t0, RunStats& local, RunStats* stats);
    std::shared_ptr<LoadedModel> model_;
    std::shared_ptr<device::DeviceBuffer> arena_;  // its own, or one shared (create)
    bool shared_arena_ = false;
    // The launches of the last program run, built against arena_ (host mode: for plan_, which
    // it points into), reused while both stay the same (ensure_arena drops it with the arena).
    std::shared_ptr<const HostPlan> plan_;
    std::optional<PreparedProgram> prepared_;
    // The kernel state of every launch of the sink program, prepared by the first bind() and
    // taken by the later ones.
    std::vector<std::shared_ptr<const device::KernelState>> bound_states_;
    device::Stream stream_;
    device::Event start_, end_;
};

}  // namespace loom::executor
