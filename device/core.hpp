// Internal state of the runtime shared by runtime.cpp and trace.cpp; not a public header.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "device/memory.hpp"
#include "device/runtime.hpp"
#include "device/timeline.hpp"

namespace loom::device::detail {

// CALLBACK is a host function in stream order (Stream::add_callback): it is never placed in
// simulated time and always runs as a pool job.
enum class TaskKind : uint8_t { COPY, KERNEL, MEDIA, HOST, RECORD, WAIT, CALLBACK };

struct Task {
    uint64_t id = 0;
    TaskKind kind = TaskKind::COPY;
    Engine engine = Engine::H2D;
    uint32_t stream = 0;
    std::string name;
    SimTime start = 0, end = 0;
    std::function<Status()> work;  // empty for RECORD / WAIT markers
    std::function<void(Status)> callback;  // CALLBACK only
    Status injected;               // a fault raised instead of running `work`
    size_t record = SIZE_MAX;      // index into Core::records when tracing

    // The stream it belongs to, kept alive while the task is unfinished; released (outside
    // the locks) when it completes, so a finished task held by the stream makes no cycle.
    std::shared_ptr<StreamState> owner;

    // Guarded by Core::graph_mutex.
    std::vector<std::shared_ptr<Task>> successors;
    int pending = 0;   // predecessors not yet done
    Status upstream;   // the first error among predecessors: this task is skipped
    bool linked_done = false;  // finished as far as the graph goes: no successor may link to it now

    // Written by the thread that runs the task before `done` is set (release); read after.
    Status status;
    std::atomic<bool> done{false};
    // A host thread waits on it (Core::wait): its completion wakes the pool's waiters.
    std::atomic<bool> awaited{false};
};

// One task as the trace shows it.
struct TaskRecord {
    uint64_t id;
    std::string name;
    TaskKind kind;
    Engine engine;
    uint32_t stream;
    std::vector<uint16_t> lanes;
    SimTime start, end;
    std::vector<uint64_t> deps;  // ids of tasks on other lanes this one waited for
    std::optional<CycleBreakdown> cycles;
    uint64_t bytes = 0;
    double wall_start_us = 0, wall_end_us = 0;  // filled at completion
    bool failed = false;
    bool sink = false;  // dispatched by the on-chip scheduler (Stream::launch_sink)
};

// Lives while a Stream handle or an unfinished task of the stream holds it (Task::owner); the
// Core keeps only a weak reference, so dropped streams go away.
struct StreamState : std::enable_shared_from_this<StreamState> {
    Core* core = nullptr;
    std::weak_ptr<Core> core_ref;        // to hand an unreported error to the Core when dropped
    uint32_t id = 0;
    // Guarded by Core::submit_mutex.
    std::shared_ptr<Task> last;          // functional predecessor of the next task
    SimTime last_end = 0;                // simulated completion of the last task
    std::vector<uint64_t> flow_from;     // real tasks the next real task depends on (tracing only)
    // Guarded by Core::graph_mutex.
    Status first_error;                  // first failure not yet reported by synchronize()
    // Stream::abort (any thread) counts a request; Stream::synchronize clears the requests made
    // before it began waiting. While one is pending, real tasks that have not started are
    // skipped with CANCELLED.
    std::atomic<uint64_t> aborts_requested{0}, aborts_cleared{0};
    bool aborting() const {
        return aborts_requested.load(std::memory_order_acquire) > aborts_cleared.load(std::memory_order_acquire);
    }

    StreamState() = default;
    StreamState(const StreamState&) = delete;
    StreamState& operator=(const StreamState&) = delete;
    // Passes an unreported error on to Device::synchronize. Never runs with a Core lock held.
    ~StreamState();
};

struct EventState {
    Core* core = nullptr;
    // Guarded by Core::submit_mutex.
    std::shared_ptr<Task> task;          // the RECORD marker
    SimTime time = 0;
    std::vector<uint64_t> flow_from;
    bool recorded = false;
};

struct Allocation {
    uint64_t offset;
    size_t bytes;
    void* host;
    // Guarded by Core::submit_mutex: per stream, the latest task that named a range inside this
    // allocation and may not have finished; freeing waits for these only.
    std::vector<std::shared_ptr<Task>> users = {};
    SimTime users_end = 0;  // the latest simulated end of any task that named it
};

struct Core {
    DeviceSpec spec;
    uint64_t spec_hash;  // spec.hash(), for checking prepared launches
    DeviceOptions options;
    ThreadPool* pool;
    std::chrono::steady_clock::time_point wall_origin = std::chrono::steady_clock::now();

    // submit_mutex guards everything placed in simulated time: host clock, lanes, stream and
    // event state, counters, allocations and trace records. It is never held while waiting.
    mutable std::mutex submit_mutex;
    SimTime host_now = 0;
    SimTime sim_now = 0;
    uint64_t next_task_id = 1;
    uint32_t next_stream_id = 0;
    std::vector<LaneSet> engines;                  // indexed by Engine
    uint64_t engine_tasks[kEngineCount] = {};
    SimTime engine_busy[kEngineCount] = {};
    uint64_t engine_bytes[kEngineCount] = {};
    int64_t launches = 0, copies = 0, allocs = 0;
    Arena arena;
    std::map<uint64_t, Allocation> allocations;    // by device address
    std::vector<std::shared_ptr<Task>> host_any;   // per stream, the latest undeclared host task (may touch anything)
    SimTime host_any_end = 0;                      // the latest simulated end of any undeclared host task
    std::vector<std::weak_ptr<StreamState>> streams;  // pruned of dropped ones by create_stream
    size_t streams_prune_at = 64;
    std::vector<TaskRecord> records;
    uint64_t trace_dropped = 0;
    std::vector<std::pair<SimTime, uint64_t>> memory_counter;  // (host clock, bytes used); tracing only
    uint64_t trace_memory_dropped = 0;

    // graph_mutex guards the functional dependency graph and stream errors.
    std::mutex graph_mutex;
    std::atomic<uint64_t> inflight{0};
    Status dropped_error;  // guarded by graph_mutex: first unreported error of a dropped stream

    Core(const DeviceSpec& s, const DeviceOptions& o);

    // Runs a ready task: inline when it has nothing to compute, else as a pool job.
    void dispatch(std::shared_ptr<Task> task);
    // Runs the task's work (or skips it, or calls its callback); returns its status.
    Status execute(Task& task);
    // Marks `task` done with `status` and dispatches the successors it made ready.
    void complete(std::shared_ptr<Task> task, Status status);
    // Waits (helping the pool) until `task` has run.
    void wait(const std::shared_ptr<Task>& task);
    void wait_all();
    // Checks that [addr, addr + bytes) lies inside one live allocation; the error names the
    // task ("kernel 'fc1'"), formatted only on failure since this runs on every submission.
    Status check_range(uint64_t addr, size_t bytes, std::string_view kind, std::string_view name);
    // Waits for the tasks that may use the allocation at `addr`, then releases it.
    void free(uint64_t addr);
    // Called with submit_mutex held: the allocation holding [addr, addr + bytes), or nullptr.
    Allocation* find_allocation(uint64_t addr, size_t bytes);
    // Called with submit_mutex held: records `task` (stream already set) in `users`, dropping
    // finished tasks and the stream's earlier one.
    void note_use_locked(std::vector<std::shared_ptr<Task>>& users, const std::shared_ptr<Task>& task);
    // Called with submit_mutex held after an allocation or a free: samples the memory counter
    // for the trace (kept only with options.trace, at most trace_tasks_max samples).
    void note_memory_locked();
    double wall_us() const;
};

}  // namespace loom::device::detail
