#include "pipeline/queue.hpp"

namespace loom::pipeline {

std::string_view queue_policy_name(QueuePolicy p) {
    switch (p) {
    case QueuePolicy::BLOCK: return "block";
    case QueuePolicy::DROP_OLDEST: return "drop_oldest";
    case QueuePolicy::DROP_NEWEST: return "drop_newest";
    }
    return "?";
}

bool queue_policy_from_name(std::string_view name, QueuePolicy& out) {
    for (QueuePolicy p : {QueuePolicy::BLOCK, QueuePolicy::DROP_OLDEST, QueuePolicy::DROP_NEWEST})
        if (queue_policy_name(p) == name) {
            out = p;
            return true;
        }
    return false;
}

FrameQueue::FrameQueue(size_t depth, QueuePolicy policy) : depth_(depth), policy_(policy) {
    LOOM_ASSERT(depth >= 1 && depth <= kQueueDepthMax);
    if (policy == QueuePolicy::DROP_OLDEST)
        mpmc_ = std::make_unique<boost::lockfree::queue<Frame*, boost::lockfree::fixed_sized<true>>>(depth + 2);
    else
        spsc_ = std::make_unique<boost::lockfree::spsc_queue<Frame*>>(depth);
}

FrameQueue::~FrameQueue() { drain(); }

bool FrameQueue::raw_push(Frame* f) { return spsc_ ? spsc_->push(f) : mpmc_->bounded_push(f); }

bool FrameQueue::raw_pop(Frame*& f) { return spsc_ ? spsc_->pop(f) : mpmc_->pop(f); }

void FrameQueue::drain() {
    Frame* f = nullptr;
    while (raw_pop(f)) {
        size_.fetch_sub(1, std::memory_order_relaxed);
        FrameRef::adopt(f).reset();
    }
}

bool FrameQueue::push(FrameRef ref) {
    for (;;) {
        if (aborted_.load(std::memory_order_acquire)) return false;
        const uint32_t seen = pop_seq_.load(std::memory_order_acquire);
        if (size_.load(std::memory_order_acquire) < depth_) {
            Frame* f = ref.release();
            // Counted before it becomes visible, so a pop never takes size_ below zero.
            size_.fetch_add(1, std::memory_order_acq_rel);
            const bool pushed = raw_push(f);
            LOOM_ASSERT(pushed);  // only this thread adds, and size_ < depth_ left room
            push_seq_.fetch_add(1, std::memory_order_release);
            push_seq_.notify_one();
            return true;
        }
        switch (policy_) {
        case QueuePolicy::DROP_NEWEST:
            drops_.fetch_add(1, std::memory_order_relaxed);
            return true;  // `ref` releases the frame
        case QueuePolicy::DROP_OLDEST: {
            Frame* old = nullptr;
            if (mpmc_->pop(old)) {
                size_.fetch_sub(1, std::memory_order_acq_rel);
                drops_.fetch_add(1, std::memory_order_relaxed);
                FrameRef::adopt(old).reset();
            }
            continue;  // the consumer may have taken one meanwhile: either way there is room
        }
        case QueuePolicy::BLOCK:
            producer_waits_.fetch_add(1, std::memory_order_relaxed);
            pop_seq_.wait(seen, std::memory_order_acquire);
            continue;
        }
    }
}

FrameRef FrameQueue::pop() {
    for (;;) {
        const uint32_t seen = push_seq_.load(std::memory_order_acquire);
        if (aborted_.load(std::memory_order_acquire)) return {};
        Frame* f = nullptr;
        if (raw_pop(f)) {
            size_.fetch_sub(1, std::memory_order_acq_rel);
            pop_seq_.fetch_add(1, std::memory_order_release);
            pop_seq_.notify_one();
            return FrameRef::adopt(f);
        }
        if (closed_.load(std::memory_order_acquire)) {
            // close() follows the producer's last push: one more look settles the race.
            if (raw_pop(f)) {
                size_.fetch_sub(1, std::memory_order_acq_rel);
                return FrameRef::adopt(f);
            }
            return {};
        }
        push_seq_.wait(seen, std::memory_order_acquire);
    }
}

void FrameQueue::close() {
    closed_.store(true, std::memory_order_release);
    push_seq_.fetch_add(1, std::memory_order_release);
    push_seq_.notify_all();
}

void FrameQueue::abort() {
    aborted_.store(true, std::memory_order_release);
    push_seq_.fetch_add(1, std::memory_order_release);
    pop_seq_.fetch_add(1, std::memory_order_release);
    push_seq_.notify_all();
    pop_seq_.notify_all();
}

}  // namespace loom::pipeline
