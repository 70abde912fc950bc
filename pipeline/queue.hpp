// The edge between two stages: a bounded queue of frame references with a stated policy when
// full:
//   BLOCK        the producer waits for room (file jobs: lossless)
//   DROP_NEWEST  the frame being pushed is dropped (live streams: keep what is queued)
//   DROP_OLDEST  the oldest queued frame is dropped to make room (live streams: keep latency low)
// Drops are counted and exported.
//
// One producer thread and one consumer thread. BLOCK and DROP_NEWEST run on Boost.Lockfree's
// wait-free spsc_queue; DROP_OLDEST needs the producer to take from the queue too, so it runs on
// Boost.Lockfree's lock-free MPMC queue (the producer is then a second consumer). Idle threads
// sleep on a futex (C++20 atomic wait) and cost no CPU: the consumer on the push counter, a
// blocked producer on the pop counter.
//
// End of stream: the producer calls close(); the consumer drains what is queued, then pop()
// returns an empty ref. Cancellation: abort() makes every wait return at once (pop() returns
// an empty ref, push() false) and the queued frames are released.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/spsc_queue.hpp>

#include "pipeline/frame_pool.hpp"

namespace loom::pipeline {

enum class QueuePolicy : uint8_t { BLOCK, DROP_OLDEST, DROP_NEWEST };

std::string_view queue_policy_name(QueuePolicy p);  // "block", "drop_oldest", "drop_newest"
bool queue_policy_from_name(std::string_view name, QueuePolicy& out);

inline constexpr size_t kQueueDepthMax = 1024;

class FrameQueue {
public:
    // depth: frames queued at most (1 .. kQueueDepthMax; checked by the config).
    FrameQueue(size_t depth, QueuePolicy policy);
    ~FrameQueue();  // releases what is still queued
    FrameQueue(const FrameQueue&) = delete;
    FrameQueue& operator=(const FrameQueue&) = delete;

    // Producer: queues `f` by the policy. Returns false once aborted (the frame is released).
    bool push(FrameRef f);
    // Consumer: returns the next frame, waiting while the queue is empty; an empty ref at the
    // end of the stream (closed and drained) or once aborted.
    FrameRef pop();
    // Producer: no more frames will come.
    void close();
    // Anyone: wakes both ends for good; later pushes and pops fail at once.
    void abort();

    size_t depth_max() const { return depth_; }
    QueuePolicy policy() const { return policy_; }
    // Frames queued now (may lag by one while a push or pop is under way).
    size_t size() const { return size_.load(std::memory_order_relaxed); }
    uint64_t drops() const { return drops_.load(std::memory_order_relaxed); }
    uint64_t producer_waits() const { return producer_waits_.load(std::memory_order_relaxed); }

private:
    bool raw_push(Frame* f);
    bool raw_pop(Frame*& f);
    void drain();

    const size_t depth_;
    const QueuePolicy policy_;
    std::unique_ptr<boost::lockfree::spsc_queue<Frame*>> spsc_;
    std::unique_ptr<boost::lockfree::queue<Frame*, boost::lockfree::fixed_sized<true>>> mpmc_;
    std::atomic<size_t> size_{0};
    // Futex words: bumped (and notified) by every push / pop, and by close() and abort().
    std::atomic<uint32_t> push_seq_{0}, pop_seq_{0};
    std::atomic<bool> closed_{false}, aborted_{false};
    std::atomic<uint64_t> drops_{0}, producer_waits_{0};
};

}  // namespace loom::pipeline
