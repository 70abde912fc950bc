// Frames as the pipeline's stages hand them on: pooled, reference-counted buffers of page-locked
// host memory, each holding one 4:2:0 frame (common/frame.hpp) with its timing.
//
// A FramePool owns a fixed number of buffers of one size, allocated when the pipeline is built;
// acquire() blocks while all are in use, so the pool's size bounds the pipeline's memory and a
// slow consumer holds back its producers (lossless back-pressure). A buffer returns to its pool
// when the last FrameRef to it goes, from whichever thread drops it; nothing is allocated per
// frame in steady state.
//
// Device completion: a frame written by device work (the infer stage's download) is pending
// until that work has run; a stream callback marks it ready or failed, and consumers wait for
// that with wait_ready() (a futex wait on the frame's state: no polling, no simulated-clock
// movement).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/frame.hpp"
#include "common/status.hpp"
#include "device/runtime.hpp"
#include "preprocess/media_io.hpp"

namespace loom::pipeline {

class FramePool;

struct Frame {
    FrameLayout layout;
    ColorInfo color;
    preprocess::FrameMeta meta;
    // The pooled buffer (tight rows); empty in a pool made without buffers.
    uint8_t* data() { return buffer.data(); }
    size_t bytes() const { return layout.bytes(); }
    // The frame's pixels wherever they are: `external` when set, else the pooled buffer.
    FrameView view() const;

    // Waits until the device work writing this frame has run; returns its error, if any.
    Status wait_ready();
    // Called once by the producer of a pending frame: sets the result and wakes waiters.
    void set_ready(Status st);
    // Marks the frame pending (before device work is enqueued to write it).
    void set_pending() { state_.store(kPending, std::memory_order_relaxed); }

    device::PinnedBuffer<uint8_t> buffer;  // capacity: the pool's frame bytes
    // Memory the frame views in place instead of its buffer (a decoder's picture, kept alive by
    // the view's owner until the frame returns to its pool).
    FrameView external;

private:
    friend class FramePool;
    friend class FrameRef;
    static constexpr uint32_t kReady = 0, kPending = 1, kFailed = 2;
    std::atomic<uint32_t> state_{kReady};
    Status error_;  // written before state_ becomes kFailed
    std::atomic<uint32_t> refs_{0};
    FramePool* pool_ = nullptr;
};

// A counted reference to a pooled frame; the last one returns the buffer to its pool.
class FrameRef {
public:
    FrameRef() = default;
    ~FrameRef() { reset(); }
    FrameRef(const FrameRef& o) : f_(o.f_) {
        if (f_) f_->refs_.fetch_add(1, std::memory_order_relaxed);
    }
    FrameRef(FrameRef&& o) noexcept : f_(o.f_) { o.f_ = nullptr; }
    FrameRef& operator=(FrameRef o) noexcept {
        std::swap(f_, o.f_);
        return *this;
    }
    Frame* get() const { return f_; }
    Frame* operator->() const { return f_; }
    Frame& operator*() const { return *f_; }
    explicit operator bool() const { return f_ != nullptr; }
    void reset();
    // Gives up ownership of the reference (for lock-free queues that carry raw pointers).
    Frame* release() {
        Frame* f = f_;
        f_ = nullptr;
        return f;
    }
    // Takes over a reference given up by release().
    static FrameRef adopt(Frame* f) {
        FrameRef r;
        r.f_ = f;
        return r;
    }

private:
    friend class FramePool;
    Frame* f_ = nullptr;
};

// Page-locked host memory for producers that allocate frames themselves (a decoder's pictures,
// ReaderOptions::frame_memory): the same memory as a pool's buffers, 64-byte aligned.
void* pinned_frame_alloc(size_t bytes);
void pinned_frame_free(void* block);

class FramePool {
public:
    // Allocates `count` buffers of `layout.bytes()` bytes each (page-locked host memory); with
    // `buffers` false, `count` frames without buffers, for producers that hand on memory of
    // their own (Frame::external): the pool then bounds the frames in flight, not the bytes.
    static Result<std::unique_ptr<FramePool>> create(std::string name, const FrameLayout& layout, size_t count,
                                                     bool buffers = true);
    ~FramePool();  // every FrameRef must be gone (asserted)

    // Returns a free frame (layout set, meta cleared, ready), waiting while none is free.
    // Returns an empty ref once abort() was called.
    FrameRef acquire();
    // Wakes every acquire() for good (cancellation).
    void abort();

    const std::string& name() const { return name_; }
    size_t count() const { return frames_.size(); }
    size_t in_use() const;
    size_t in_use_max() const;

private:
    friend class FrameRef;
    FramePool() = default;
    void give_back(Frame* f);
    std::string name_;
    FrameLayout layout_;
    std::vector<std::unique_ptr<Frame>> frames_;
    mutable std::mutex mutex_;  // guards free_, aborted_, in_use_max_
    std::condition_variable cv_;
    std::vector<Frame*> free_;
    size_t in_use_max_ = 0;
    bool aborted_ = false;
};

}  // namespace loom::pipeline
