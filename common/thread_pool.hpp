// A host thread pool: a device's engines run their functional work on it and kernels split
// their loops over it, so a device never runs more busy threads than the pool has. A process
// normally has one, in its device context (restore/context.hpp). The thread
// count is a promise: only the pool's workers run jobs (LOOM_THREADS=N: at most N threads
// compute); a thread of the program's own that waits on the pool or splits a loop over it
// hands the work to the workers and sleeps.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace loom {

class ThreadPool {
public:
    // Starts `threads` workers; 0 means one per hardware core.
    explicit ThreadPool(unsigned threads = 0);
    // Runs every queued job to completion, then joins the workers.
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    // Returns the number of worker threads.
    unsigned size() const { return static_cast<unsigned>(workers_.size()); }

    // Queues `job` to run on a worker; never blocks and never refuses. The queue has no limit of
    // its own because its users bound it: the device queues a task only once its stream
    // predecessor has run, so at most one job per stream with ready work (never one per task
    // submitted), and parallel_for queues at most size() helpers per call in progress. Blocking
    // here instead would deadlock (submitters include the workers themselves, completing tasks).
    void submit(std::function<void()> job);

    // Returns the most jobs that were ever queued at once (for checking the bound above).
    size_t queue_depth_peak() const { return queue_depth_peak_.load(std::memory_order_relaxed); }

    // Returns each worker's busy time so far, ns: the wall time it has spent running jobs, less
    // the time a job spent waiting in wait_until with nothing to run (a job that waits on others
    // runs them meanwhile, and those count once). Spinning and sleeping between jobs is idle.
    // Benchmarks difference two calls to report how busy each thread kept its core.
    std::vector<int64_t> busy_ns() const;

    // Runs fn(begin, end) over [0, n) in chunks of at least `grain`, on the workers (and the
    // calling thread when it is one of them); returns when every chunk is done. Safe to call
    // from inside a pool job.
    void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

    // Blocks until done() returns true. A worker runs queued jobs meanwhile, so that it never
    // idles a core the pool needs (and a job waiting on another job cannot deadlock); any other
    // thread spins briefly, then sleeps, running nothing, until notify_waiters() is called
    // (parallel_for calls it for a caller of its own; the device runtime when a task that a
    // host thread waits on finishes), and checks done() again; a condition that nobody
    // announces is still seen within 20 ms. It does not poll: a waiter that woke every 25-200 us
    // to look took a core from the workers it waited for (7-10% of an UpConv7 frame on 2
    // cores: every wake-up preempted a worker), and one woken at every job's end still did
    // 90 times a frame.
    void wait_until(const std::function<bool()>& done);

    // Wakes the threads sleeping in wait_until so they check their conditions again: call it
    // after making a condition true that such a thread may wait on. Cheap when nobody waits:
    // one atomic increment and one load.
    void notify_waiters();

    // Runs one queued job on the calling thread, whichever it is (outside the thread count);
    // returns false when the queue was empty.
    bool run_one();

    // Returns the process-wide pool, created on first use with LOOM_THREADS threads (default:
    // one per core): for programs and benchmarks that make no device context. The libraries
    // take their pool from the context they are given (restore::DeviceContext, Device::pool).
    static ThreadPool& global();
    // Returns LOOM_THREADS when it holds a count in [1, 1024], else 0 (one per core): for
    // programs, which read the environment; the libraries never do.
    static unsigned threads_from_environment();

private:
    void worker_loop(size_t index);
    bool pop(std::function<void()>& job);

    std::mutex mutex_;                  // guards queue_ and stopping_
    std::condition_variable cv_;        // workers sleep here when the queue stays empty
    std::deque<std::function<void()>> queue_;
    bool stopping_ = false;
    std::atomic<size_t> queued_{0};     // mirror of queue_.size() read without the lock
    std::atomic<size_t> queue_depth_peak_{0};  // written under mutex_, read without it
    std::atomic<unsigned> sleeping_{0}; // workers blocked in cv_.wait; skip notify when 0
    std::unique_ptr<std::atomic<int64_t>[]> busy_ns_;  // per worker, see busy_ns()
    // Non-workers asleep in wait_until: they sleep on wait_cv_ until epoch_ moves
    // (notify_waiters moves it).
    std::mutex wait_mutex_;
    std::condition_variable wait_cv_;
    std::atomic<uint64_t> epoch_{0};
    std::atomic<unsigned> waiters_{0};
    std::vector<std::thread> workers_;
};

}  // namespace loom
