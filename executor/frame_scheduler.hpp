// Pipelined inference across frames: a FrameScheduler keeps up to k inferences of one model in
// flight, each in a slot of its own (a stream, an activation arena from the memory plan, and
// pinned host staging buffers for the inputs and outputs), so that the H2D copy of frame n+1,
// the kernels of frame n and the D2H copy of frame n-1 run at once on the simulated NPU's
// separate H2D, AI-core and D2H engines. Frames of one slot follow each other in stream order;
// slots share only the model's read-only weights, so no event joins them. Events mark each
// inference's stage boundaries for FrameStats.
//
// Everything an inference launches is built when the pipeline is created: per slot, the input
// and output copies between its staging buffers and its arena, and every kernel launch with
// its tensors placed in its arena (sink submissions split by host-placed steps, as Session
// runs them), each sink run checked and timed once (device::prepare_launch). Per frame, submit()
// copies the caller's inputs into the slot's pinned buffer and hands the prepared lists to the
// runtime, which only places and queues them: no look-ups, cost model, shape or placement work,
// and no copies of the lists.
//
// Back-pressure (lossless, blocking): at most k inferences are in flight; a submit() that needs
// a slot while all k are busy blocks until the oldest inference completes. No frame is dropped.
//
// Completion: frames complete in submission order, when something waits for them: a submit()
// that needs the oldest slot, FrameFuture::get(), flush(), or the destructor. Completing an
// inference synchronizes its stream (which reports and clears a device error, so the slot's
// next inference runs), copies each frame's outputs out of the pinned buffer, and resolves its
// future. There is no completion thread on purpose: synchronizing advances the simulated host
// clock, and a thread doing that at moments set by wall-clock timing would make the simulated
// timeline depend on host speed. Submitted back to back (or each after the previous future),
// frames give the same timeline on every run.
//
// Errors: bad inputs are refused by submit() before anything runs. A device error during an
// inference (an injected fault, a watchdog timeout) or a failed submission fails the futures of
// that inference's frames only, with the frame number in the message; the next inferences run.
// Device memory (k arenas) is taken when the pipeline is created, so running out of it fails
// create(), never a frame.
//
// Batching: with options.batch = B > 1, B frames are gathered into one inference of a model
// compiled at batch B (compiler::compile_for_batch): frame b of an inference is row b of dim 0 of every
// input and output. A partial batch (flush(), or get() on a gathered frame) runs padded with
// zero rows whose outputs are dropped.
//
// Host-mode models run at the one set of input shapes given in options.input_dims: the pipeline
// lowers them once (LoadedModel::host_plan) and launches every kernel from the host, paying the
// launch overhead per kernel as Session does in host mode.
//
// Thread safety: every public call may come from any thread. One mutex guards the slots and
// counters; it is released while a thread waits for the device, so a producer can keep
// submitting into free slots while a consumer waits in get(). One thread at a time completes
// the oldest inference; others that need it wait for that thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "executor/executor.hpp"

namespace loom::executor {

struct FrameSchedulerOptions {
    size_t in_flight = 3;  // k: inferences in flight at most, one slot each (1..64)
    int64_t batch = 1;     // frames per inference; > 1 needs every input and output to have dim 0 = batch
    // Host-mode models only (required there): the input dims, one per graph input, to lower for.
    std::vector<std::vector<int64_t>> input_dims;
};

// One frame's timing. Simulated times are milliseconds of the device clock since the device was
// created, read from events recorded around the stages of the frame's inference (frames of one
// batch share them); a stage that waited for a busy engine includes the wait.
struct FrameStats {
    uint64_t frame = 0;        // sequence number, from 0 in submission order
    uint64_t inference = 0;    // the inference it ran in, from 0
    size_t slot = 0;           // the slot (stream, arena, staging buffers) that ran it
    size_t batch_row = 0;      // its row in that inference
    size_t batch_frames = 0;   // real frames in that inference (the other rows were padding)
    double sim_start_ms = 0;          // the slot's stream reached the inference
    double sim_input_done_ms = 0;     // inputs copied to the device
    double sim_compute_done_ms = 0;   // kernels (and host-placed steps) done
    double sim_end_ms = 0;            // outputs copied back
    // Host wall time the executor spent on the inference, waits excluded: staging copies and
    // submissions; completion bookkeeping and copying outputs out of the staging buffer.
    double wall_submit_ms = 0;
    double wall_complete_ms = 0;
    double wall_done_ms = 0;  // wall time of its completion, ms since the pipeline was created
};

// Device-side frames (FrameScheduler::submit_device): what the caller's work gets to enqueue on
// the slot's stream around the model. `inputs` and `outputs` are the model's tensors in the
// slot's arena, as bytes (the model's dtype and dims: frame_dims() / output_dims()).
struct SlotIo {
    size_t slot = 0;    // 0 .. in_flight - 1: lets the caller keep per-slot device buffers
    uint64_t frame = 0; // the frame's sequence number
    device::Stream* stream = nullptr;
    std::span<const device::DevicePtr<uint8_t>> inputs, outputs;
};
// Enqueues work on io.stream (never waits for it); an error fails the frame.
using SlotWork = std::function<Status(const SlotIo&)>;

struct FrameSchedulerStats {
    uint64_t frames_submitted = 0;
    uint64_t frames_completed = 0;  // failed ones included
    uint64_t frames_failed = 0;
    uint64_t inferences = 0;        // inferences launched (with batching: fewer than frames)
    size_t in_flight_max = 0;       // most inferences in flight at once; never above in_flight
    uint64_t submits_blocked = 0;   // submit() calls that waited for the oldest inference
    double wall_blocked_ms = 0;     // wall time submit() spent in those waits
    double wall_submit_ms = 0;      // executor wall time in submit(), waits excluded
    double wall_complete_ms = 0;    // executor wall time completing inferences, device waits excluded
    double wall_device_wait_ms = 0; // wall time completion spent waiting for device work
    // The same two as CPU time of the threads doing them (without time they were preempted).
    double cpu_submit_ms = 0;
    double cpu_complete_ms = 0;
};

namespace detail {
struct PipelineCore;
struct FrameState;
}  // namespace detail

// The outputs of one submitted frame, available once it completes (see the header comment for
// when that happens). Cheap to copy; copies share the frame.
class FrameFuture {
public:
    FrameFuture() = default;
    bool valid() const { return state_ != nullptr; }
    // Returns the frame's sequence number (0 for an invalid future).
    uint64_t frame() const;
    // Returns true once the frame has completed; never blocks or completes anything.
    bool done() const;
    // Completes the frame (and every older one) if needed, then returns its outputs (one per
    // model output, dim 0 = 1 row when batched) or its error; `stats` gets its timing. May be
    // called again: the outputs share storage between calls. Valid after the pipeline is gone.
    Result<std::vector<HostTensor>> get(FrameStats* stats = nullptr);

private:
    friend class FrameScheduler;
    std::shared_ptr<detail::PipelineCore> core_;
    std::shared_ptr<detail::FrameState> state_;
};

class FrameScheduler {
public:
    // Builds the slots: k arenas of the model's plan, pinned staging for k inferences, and every
    // launch prebuilt per slot. Refuses a bad option, a batch the model's dims do not carry
    // (naming the input or output), or a host-mode model without input_dims; a host-mode plan
    // that fails, or arenas that do not fit in device memory (OUT_OF_DEVICE_MEMORY, naming the
    // slot and bytes), fail creation.
    static Result<std::unique_ptr<FrameScheduler>> create(std::shared_ptr<LoadedModel> model,
                                                         FrameSchedulerOptions options = {});
    // Completes every frame in flight (running a gathered partial batch), then frees the slots.
    // Futures stay valid.
    ~FrameScheduler();
    FrameScheduler(const FrameScheduler&) = delete;
    FrameScheduler& operator=(const FrameScheduler&) = delete;

    // Copies `inputs` (one per model input, of frame_dims()) into a slot's pinned buffer and,
    // once the slot holds `batch` frames, launches the inference; blocks first while all k slots
    // are in flight (completing the oldest). `outputs` is empty (completion allocates the
    // frame's outputs) or one tensor per model output of output_dims() that completion copies
    // the outputs into (they share storage with the caller's, so a caller can reuse a set of
    // buffers; a set must not be given to two frames in flight at once). Returns the frame's
    // future; INVALID_ARGUMENT for inputs or outputs of the wrong count, dtype or dims, before
    // anything runs.
    Result<FrameFuture> submit(std::span<const HostTensor> inputs, std::span<HostTensor> outputs = {});
    // A frame whose inputs and outputs stay on the device (batch 1 only): takes a slot as
    // submit() does (blocking while all k are in flight), then enqueues on the slot's stream
    // `before` (which must fill every model input, e.g. an upload of a YUV frame and the media
    // engine's conversion), the model's prebuilt launches, and `after` (which consumes the
    // outputs, e.g. a conversion back and a download into the caller's pinned memory). Nothing
    // is staged or copied by the pipeline; the future resolves to no tensors. The caller learns
    // of completion without waiting on the host's simulated clock by adding a stream callback
    // in `after` (Stream::add_callback). An error from `before` or `after` fails this frame.
    Result<FrameFuture> submit_device(const SlotWork& before, const SlotWork& after);
    // Launches a gathered partial batch, then completes every inference in flight.
    void flush();

    // The dims of one frame's inputs and outputs (the model's, with dim 0 = 1 when batched).
    const std::vector<std::vector<int64_t>>& frame_dims() const;
    const std::vector<std::vector<int64_t>>& output_dims() const;
    // Returns a new set of zeroed output tensors for one frame (for submit's `outputs`).
    std::vector<HostTensor> make_outputs() const;
    const FrameSchedulerOptions& options() const;
    // Returns the counters so far.
    FrameSchedulerStats stats() const;

private:
    explicit FrameScheduler(std::shared_ptr<detail::PipelineCore> core) : core_(std::move(core)) {}
    std::shared_ptr<detail::PipelineCore> core_;
};

// What a run of frames through a pipeline measured (run_frames; `loomc bench`,
// bench/bench_executor.cpp). Simulated figures come from the inferences' events; "steady state"
// leaves out the first in_flight inferences (the pipeline filling up) when there are enough.
struct PipelineRunReport {
    size_t frames = 0, inferences = 0, frames_failed = 0;
    double wall_ms = 0;                  // submitting the first frame to completing the last
    double wall_ms_per_frame = 0;        // median over inferences i >= k of (done_i - done_i-k) / k, per frame
    double sim_ms_per_frame = 0;         // steady-state period between inference ends, per frame
    double sim_fps = 0;                  // 1000 / sim_ms_per_frame
    double sim_latency_ms = 0;           // median inference latency, start to end
    double sim_makespan_ms = 0;          // first start to last end
    // The first inference's stages, on an idle device: its H2D copies, kernels, D2H copies.
    double stage_h2d_ms = 0, stage_compute_ms = 0, stage_d2h_ms = 0;
    double steady_over_slowest = 0;      // steady-state period / the slowest stage (1 = ideal)
    // Overlap: stage time per period, (h2d + compute + d2h) / period: 1 when nothing overlaps,
    // up to 3 for three equal stages; copies hidden: the share of the copy time (h2d + d2h)
    // that the period does not pay, clamp((h2d + compute + d2h - period) / (h2d + d2h), 0, 1).
    double overlap = 0;
    double copies_hidden = 0;
    // The executor's own host work (FrameSchedulerStats: submit and completion, waits excluded),
    // as wall time and as CPU time of the threads doing it.
    double executor_ms_per_frame = 0;
    double executor_fraction = 0;        // of wall_ms
    double executor_cpu_ms_per_frame = 0;
    double executor_cpu_fraction = 0;    // of wall_ms
    FrameSchedulerStats pipeline;
};

// Submits `frames` frames back to back, cycling through `inputs` (each one frame's inputs),
// takes each frame's outputs once it has completed, and summarises; fails on the first bad
// input. Device errors count in frames_failed. With `reuse_outputs`, frames are given output
// buffers from a pool that taken frames return to, as a consumer that recycles its buffers
// does; without, completion allocates every frame's outputs afresh (for large outputs the page
// faults of new memory then dominate the executor's host time).
Result<PipelineRunReport> run_frames(FrameScheduler& pipeline, std::span<const std::vector<HostTensor>> inputs,
                                     size_t frames, bool reuse_outputs = true);

}  // namespace loom::executor
