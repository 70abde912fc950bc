// The simulated NPU runtime, in the spirit of AscendCL and the CUDA runtime: device memory,
// pinned host buffers, streams, events, async copies and kernel launches.
//
// Every task really runs (its functional work executes on the host thread pool once its
// stream predecessor and awaited events have run), and is also placed on the simulated
// timeline of its engine at submission: start = the earliest time >= max(host clock, stream
// order, awaited events) at which the engine (for kernels: enough AI cores) is free for the
// task's cost-model duration. Placement happens under one lock in submission order, so the
// simulated timeline depends only on what was submitted and in which order, never on host speed
// or on the pool's thread count (host threads racing to submit do choose an order).
//
// The host has a simulated clock too: a kernel launch advances it by the spec's launch
// overhead, and synchronize advances it to the completion time of what it waited for. A sink
// submission (launch_sink: a whole task list handed to the on-chip scheduler, as Ascend's model
// sink or a CUDA graph launch) costs the host one launch overhead, and each of its kernels waits
// for the scheduler's per-task dispatch time on the device instead.
//
// Errors: submission-time problems (bad sizes, freed buffers) return a Status at once.
// Failures while running (device faults, watchdog timeouts) poison the stream: later tasks on
// it are skipped, each reporting the first error's code and message with a "[task .. skipped]"
// note, until synchronize() reports the error, which also clears it. Skipped tasks keep their
// place on the simulated timeline. An event recorded after a failure carries the error to
// streams that wait for it. Streams and events must not be used after their Device is gone.
//
// Completion without a waiter: Stream::add_callback runs a host function in stream order once
// the work before it has run, with that work's first error; it is not placed in simulated time.
// Event::query polls instead; Event::synchronize and Stream::synchronize block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/status.hpp"
#include "device/faults.hpp"
#include "device/kernel.hpp"
#include "device/media.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::device {

namespace detail {
struct Core;
struct StreamState;
struct EventState;
}  // namespace detail

class Device;

// A typed view of device memory: element count, device address and the host memory that
// backs it in the simulation. Obtained from DeviceBuffer::as<T>(); not owning.
template <typename T>
class DevicePtr {
public:
    DevicePtr() = default;
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }
    uint64_t addr() const { return addr_; }
    // Returns a sub-range [offset, offset + count); aborts when out of range (a program bug).
    DevicePtr slice(size_t offset, size_t count) const {
        LOOM_ASSERT(offset <= count_ && count <= count_ - offset);
        return DevicePtr(host_ + offset, addr_ + offset * sizeof(T), count);
    }
    // Host memory behind the device memory: for kernels and tests, never for the copy path.
    T* host_data() const { return host_; }
    operator DevicePtr<const T>() const { return DevicePtr<const T>(host_, addr_, count_); }  // NOLINT

private:
    template <typename>
    friend class DevicePtr;
    friend class DeviceBuffer;
    DevicePtr(T* host, uint64_t addr, size_t count) : host_(host), addr_(addr), count_(count) {}
    T* host_ = nullptr;
    uint64_t addr_ = 0;
    size_t count_ = 0;
};

// Describes `p` as a tensor of shape `dims` for a kernel launch; the element count must match.
template <typename T>
Result<TensorRef> tensor_ref(DevicePtr<T> p, std::initializer_list<int64_t> dims) {
    TensorRef t;
    t.dtype = dtype_of<std::remove_const_t<T>>();
    if (dims.size() > static_cast<size_t>(kMaxRank))
        return make_error(StatusCode::INVALID_ARGUMENT, "tensor rank {} exceeds {}", dims.size(), kMaxRank);
    int64_t n = 1;
    for (int64_t d : dims) {
        if (d < 0) return make_error(StatusCode::INVALID_ARGUMENT, "tensor dimension {} is negative", d);
        t.dims[static_cast<size_t>(t.rank++)] = d;
        n *= d;
    }
    if (static_cast<size_t>(n) != p.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "tensor shape has {} elements, buffer holds {}", n, p.size());
    t.data = const_cast<std::remove_const_t<T>*>(p.host_data());
    t.device_addr = p.addr();
    return t;
}

// Owns one device allocation; frees it on destruction, waiting as cudaFree does for the tasks
// that may still use it: those that named a range inside it (copies, kernels, media tasks, host
// tasks that declared it) and host tasks that declared nothing; not other work. The host clock
// advances to the end of what it waited for. Move-only.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    size_t bytes() const { return bytes_; }
    uint64_t addr() const { return addr_; }
    bool valid() const { return host_ != nullptr; }
    // Returns the memory as `bytes() / sizeof(T)` elements of T.
    template <typename T>
    DevicePtr<T> as() const {
        static_assert(std::is_trivially_copyable_v<T>);
        LOOM_ASSERT(bytes_ % sizeof(T) == 0);
        return DevicePtr<T>(static_cast<T*>(host_), addr_, bytes_ / sizeof(T));
    }
    // Frees now; returns an error if the device is gone.
    void reset();

private:
    friend class Device;
    std::shared_ptr<detail::Core> core_;
    void* host_ = nullptr;
    uint64_t addr_ = 0;
    size_t bytes_ = 0;
};

// Page-locked host memory: copies from it run at the host link's full bandwidth; copies from
// ordinary (pageable) memory are staged and slower, as on real hardware.
template <typename T>
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t count)
        : data_(static_cast<T*>(::operator new(count * sizeof(T), std::align_val_t(64)))), count_(count) {}
    ~PinnedBuffer() { release(); }
    PinnedBuffer(PinnedBuffer&& o) noexcept : data_(o.data_), count_(o.count_) { o.data_ = nullptr; o.count_ = 0; }
    PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
        if (this != &o) {
            release();
            data_ = o.data_; count_ = o.count_;
            o.data_ = nullptr; o.count_ = 0;
        }
        return *this;
    }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    T* data() { return data_; }
    const T* data() const { return data_; }
    size_t size() const { return count_; }
    std::span<T> span() { return {data_, count_}; }
    T& operator[](size_t i) { return data_[i]; }
    const T& operator[](size_t i) const { return data_[i]; }

private:
    void release() {
        if (data_) ::operator delete(data_, std::align_val_t(64));
        data_ = nullptr;
    }
    T* data_ = nullptr;
    size_t count_ = 0;
};

// Host memory handed to a copy; must stay valid until the copy has completed.
template <typename T>
struct HostView {
    T* data = nullptr;
    size_t count = 0;
    bool pinned = false;

    HostView() = default;
    HostView(std::span<T> s) : data(s.data()), count(s.size()) {}  // NOLINT: pageable memory
    template <typename U, typename = std::enable_if_t<std::is_same_v<std::remove_const_t<T>, U>>>
    HostView(PinnedBuffer<U>& b) : data(b.data()), count(b.size()), pinned(true) {}  // NOLINT
    template <typename U, typename = std::enable_if_t<std::is_same_v<std::remove_const_t<T>, U>>>
    HostView(const PinnedBuffer<U>& b) : data(b.data()), count(b.size()), pinned(true) {}  // NOLINT
    HostView(T* d, size_t n, bool is_pinned) : data(d), count(n), pinned(is_pinned) {}
};

// A range of device memory (DevicePtr::addr() / bytes()) that a host task reads or writes.
struct DeviceRange {
    uint64_t addr = 0;
    size_t bytes = 0;
};

// One kernel of a sink submission (Stream::launch_sink).
struct SinkTask {
    const KernelDef* kernel = nullptr;
    KernelLaunch launch;
    std::string name;  // empty: the kernel's name
};

// A kernel launch checked by the kernel's cost function and timed once, for submitting again
// and again (Stream::launch_sink) without redoing that per submission, as a compiled model's
// per-frame sink submissions do. Built by prepare_launch; a submission refers to it in place,
// so it must stay alive and unchanged until the work submitted with it has run.
struct PreparedLaunch {
    const KernelDef* kernel = nullptr;
    KernelLaunch launch;
    std::string name;                 // the task's name (the kernel's when none was given)
    CycleBreakdown cycles;            // the cost function's breakdown
    SimTime duration = 0;             // cycles.total at the spec's AI core clock
    uint64_t bytes = 0;               // tensor bytes read and written
    std::vector<DeviceRange> ranges;  // device memory it touches, range-checked per submission
    uint64_t spec_hash = 0;           // the spec it was timed for
};

// Checks and times `launch` of `kernel` for `spec` as Stream::launch does; an error names the
// kernel ("kernel 'conv1': ...").
Result<PreparedLaunch> prepare_launch(const KernelDef& kernel, KernelLaunch launch, std::string_view name,
                                      const DeviceSpec& spec);

// Runs `kernel`'s prepare hook on `launch` and keeps its state in launch.state (nothing
// without a hook, or when the launch is prepared already); an error names the kernel. For
// launches run without the cost model (host-placed steps); prepare_launch does it itself.
Status prepare_kernel_state(const KernelDef& kernel, KernelLaunch& launch, std::string_view name = {});

// A point in a stream's work. Record it on one stream, wait for it on another, synchronize the
// host on it, or measure the simulated time between two of them.
class Event {
public:
    Event() = default;
    bool valid() const { return state_ != nullptr; }
    // Blocks until the recorded work has run; returns its first error. Advances the host clock.
    Status synchronize();
    // Returns true once the recorded work has run (wall clock; does not move simulated time).
    bool query() const;
    // Returns the simulated completion time of the recorded work, or an error if never recorded.
    Result<SimTime> sim_time() const;
    // Returns the simulated milliseconds from `start` to `end` (both must be recorded).
    static Result<double> elapsed_ms(const Event& start, const Event& end);

private:
    friend class Device;
    friend class Stream;
    std::shared_ptr<detail::EventState> state_;
};

// An in-order queue of device work. Cheap to copy (a handle); the Device owns the state.
class Stream {
public:
    Stream() = default;
    bool valid() const { return state_ != nullptr; }
    uint32_t id() const;

    template <typename T>
    Status copy_h2d(DevicePtr<T> dst, HostView<const T> src, std::string_view name = "h2d") {
        if (src.count != dst.size()) return size_mismatch("copy_h2d", src.count, dst.size());
        return submit_copy(Engine::H2D, dst.host_data(), dst.addr(), src.data, 0, dst.bytes(), src.pinned, name);
    }
    // Copies `rows` rows of `width` bytes from host memory (`src`, rows `src_pitch` bytes apart)
    // to device memory (`dst`, rows `dst_pitch` bytes apart) as one DMA task that gathers the
    // rows, as cudaMemcpy2DAsync does: the link carries width x rows bytes. `src` and `dst` must
    // hold (rows - 1) x pitch + width bytes. For frames whose rows are padded (a decoder's
    // pictures) or planes apart.
    Status copy_h2d_2d(DevicePtr<uint8_t> dst, size_t dst_pitch, HostView<const uint8_t> src, size_t src_pitch,
                       size_t width, size_t rows, std::string_view name = "h2d");
    template <typename T>
    Status copy_d2h(HostView<T> dst, DevicePtr<const T> src, std::string_view name = "d2h") {
        if (src.size() != dst.count) return size_mismatch("copy_d2h", src.size(), dst.count);
        return submit_copy(Engine::D2H, dst.data, 0, src.host_data(), src.addr(), src.bytes(), dst.pinned, name);
    }
    template <typename T>
    Status copy_d2d(DevicePtr<T> dst, DevicePtr<const T> src, std::string_view name = "d2d") {
        if (src.size() != dst.size()) return size_mismatch("copy_d2d", src.size(), dst.size());
        return submit_copy(Engine::D2D, dst.host_data(), dst.addr(), src.host_data(), src.addr(), dst.bytes(), true,
                           name);
    }

    // Launches `kernel` on the AI cores (host-scheduled: costs the spec's launch overhead on the
    // host clock). Checks the launch with the kernel's cost function first.
    Status launch(const KernelDef& kernel, KernelLaunch launch, std::string_view name = {});
    // The same for a launch prepared once (prepare_launch) and run again and again: only range
    // checks, placement and queueing happen here. `p` must outlive the work; one prepared for
    // another spec is refused naming it.
    Status launch(const PreparedLaunch& p);

    // Submits `tasks` as one device submission run by the on-chip scheduler (sink mode): the
    // host clock pays the launch overhead once; each kernel becomes ready the spec's
    // launch_sink_task_ns after the later of its stream predecessor's end and the host clock.
    // Every launch is checked as launch() checks it and each kernel is still a task of its own
    // (stream order, faults, trace); a submission-time error names the task and places nothing.
    // Empty: a no-op.
    Status launch_sink(std::vector<SinkTask> tasks, std::string_view name = "sink");
    // The same for prepared launches: only range checks, placement and queueing happen here
    // (launches still count for fault injection, the trace and stream order, and the timeline is
    // the same as for the SinkTask form). `tasks` must outlive the work (see PreparedLaunch); a
    // launch prepared for another spec is refused naming it.
    Status launch_sink(std::span<const PreparedLaunch> tasks, std::string_view name = "sink");

    // Runs `fn` on the host CPU engine (an op placed on the host); its simulated duration is
    // task overhead + max(flops / host gflops, bytes / host bandwidth). `fn` may touch any device
    // memory, so freeing any buffer waits for it.
    Status launch_host(std::string_view name, double flops, double bytes, std::function<Status()> fn);
    // As above, for a `fn` that touches only the device memory in `touches` (checked like a
    // copy's ranges; empty: none), so that freeing another buffer does not wait for it.
    Status launch_host(std::string_view name, double flops, double bytes, std::function<Status()> fn,
                       std::span<const DeviceRange> touches);

    // Media engine: bilinear resize of an interleaved 8-bit image (HWC, `channels` per pixel).
    Status media_resize(DevicePtr<uint8_t> dst, int64_t dst_w, int64_t dst_h, DevicePtr<const uint8_t> src,
                        int64_t src_w, int64_t src_h, int64_t channels, std::string_view name = "resize");
    // Media engine: a 4:2:0 frame (`layout`, `color`) to a planar RGB tensor (`tf`), resized when
    // the sizes differ (device/media.hpp says how). Sizes are checked against both buffers.
    Status media_frame_to_tensor(DevicePtr<const uint8_t> frame, const FrameLayout& layout, const ColorInfo& color,
                                 DevicePtr<uint8_t> tensor, const TensorFormat& tf,
                                 std::string_view name = "frame_to_tensor");
    // Media engine: a planar RGB tensor to a 4:2:0 frame of the same size.
    Status media_tensor_to_frame(DevicePtr<const uint8_t> tensor, const TensorFormat& tf, DevicePtr<uint8_t> frame,
                                 const FrameLayout& layout, const ColorInfo& color,
                                 std::string_view name = "tensor_to_frame");
    // Video decoder / encoder lanes (VDEC, VENC): one task of a width x height frame's codec time
    // on the lane. Timing only: FFmpeg decodes and encodes on the host; these put the chip's
    // codec time on the timeline, in stream order.
    Status video_decode(int64_t width, int64_t height, std::string_view name = "vdec");
    Status video_encode(int64_t width, int64_t height, std::string_view name = "venc");

    // Records `event` at the current end of this stream.
    Status record(Event& event);
    // Makes later work on this stream wait for `event`'s recorded work.
    Status wait(const Event& event);
    // Runs `fn` as a pool job once all work submitted to this stream before it has run, passing
    // the first error among that work not yet reported by synchronize() (OK otherwise); the
    // stream host-function of cudaLaunchHostFunc. It takes no simulated time and leaves the
    // timeline, the host clock and the stream's error state as they would be without it. Work
    // submitted after it (and synchronize, query, events recorded after it) waits for it, so
    // callbacks on one stream run one at a time in stream order. `fn` must return soon and must
    // not block on device work (synchronize, an event, a buffer's free): it holds a pool thread
    // and its stream. An exception escaping `fn` aborts. Fails only on an invalid stream or an
    // empty `fn`.
    Status add_callback(std::function<void(Status)> fn);
    // Blocks until all work submitted so far has run; returns (and clears) the first error.
    // Ends the abort() calls made before it began: work submitted after it returns runs again.
    Status synchronize();
    // Abandons the work queued on this stream (any thread): every copy, kernel or host task
    // that has not started when it is reached is skipped and fails with CANCELLED (the stream's
    // error, as a fault's is); a task already running finishes. Callbacks still run, seeing
    // that error, so whatever they release is released. Holds until a synchronize() that began
    // after it returns (one already waiting does not end it).
    void abort();
    // Returns true once all submitted work has run (wall clock).
    bool query() const;
    // The thread pool of the stream's device (Device::pool); the stream must be valid.
    ThreadPool& pool() const;

private:
    friend class Device;
    static Status size_mismatch(const char* op, size_t a, size_t b);
    Status submit_copy(Engine engine, void* dst, uint64_t dst_addr, const void* src, uint64_t src_addr,
                       size_t bytes, bool pinned, std::string_view name);
    std::shared_ptr<detail::StreamState> state_;
};

struct DeviceOptions {
    ThreadPool* pool = nullptr;       // nullptr = ThreadPool::global()
    bool trace = false;               // keep per-task records for write_trace()
    size_t trace_tasks_max = 1 << 20; // records kept at most; later ones are counted, not kept
    FaultPlan faults;                 // this device's (device::apply_fault_environment adds LOOM_FAULTS)
};

struct EngineStats {
    uint64_t tasks = 0;
    SimTime busy = 0;    // summed over lanes
    uint64_t bytes = 0;  // moved (copies) or read and written (kernels, host tasks)
};

struct DeviceStats {
    SimTime sim_now = 0;       // latest simulated completion time of any task
    SimTime host_now = 0;      // the host's simulated clock
    double wall_ms = 0;        // wall time since the device was created
    uint64_t tasks = 0;
    EngineStats engines[kEngineCount];
    size_t memory_used = 0;
    size_t memory_peak = 0;
    size_t memory_capacity = 0;
    uint64_t trace_dropped = 0;
    // Bookkeeping the device keeps, for checking that a long run stays bounded.
    size_t streams_live = 0;          // stream states alive: held by a Stream handle or an unfinished task
    size_t streams_tracked = 0;       // entries in the device's stream list (dropped ones pruned on create)
    size_t trace_records = 0;         // task records kept for the trace (0 without options.trace)
    size_t trace_memory_samples = 0;  // device-memory counter samples kept (0 without options.trace)
    size_t lane_intervals = 0;        // busy intervals the engines remember for placement
};

class Device {
public:
    // Creates a device from `spec` with options.faults (the environment is not read).
    static Result<std::unique_ptr<Device>> create(const DeviceSpec& spec, DeviceOptions options = {});
    // Waits for all work, then releases the device (buffers may outlive it; they free nothing).
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    const DeviceSpec& spec() const;
    // The thread pool the device computes on (DeviceOptions::pool): kernels, copies and host
    // tasks; host work done for the device's users (a host-placed step) belongs there too.
    ThreadPool& pool() const;
    // True when the device keeps task records for a trace (DeviceOptions::trace): callers format
    // per-task names only then.
    bool tracing() const;

    // Allocates `bytes` of device memory from the arena; OUT_OF_DEVICE_MEMORY names the request,
    // the free total and the largest free block when it does not fit.
    Result<DeviceBuffer> malloc(size_t bytes, std::string_view name = {});
    // Allocates page-locked host memory.
    template <typename T>
    PinnedBuffer<T> malloc_host(size_t count) {
        return PinnedBuffer<T>(count);
    }

    // Creates a stream; its state goes away once every handle to it is dropped and its work has
    // run (an unreported error is then returned by Device::synchronize).
    Stream create_stream();
    Event create_event();

    // Blocks until all work on all live streams has run; returns the first error not yet
    // reported, including one left by a dropped stream.
    Status synchronize();

    // Returns counters and both clocks.
    DeviceStats stats() const;
    // Writes a Chrome trace / Perfetto JSON of every recorded task (needs options.trace).
    Status write_trace(const std::string& path) const;
    // Returns the trace as a JSON string.
    std::string trace_json() const;

private:
    explicit Device(std::shared_ptr<detail::Core> core);
    std::shared_ptr<detail::Core> core_;
};

}  // namespace loom::device
