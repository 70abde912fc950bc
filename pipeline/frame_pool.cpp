#include "pipeline/frame_pool.hpp"

#include <algorithm>
#include <new>

namespace loom::pipeline {

Status Frame::wait_ready() {
    uint32_t s = state_.load(std::memory_order_acquire);
    while (s == kPending) {
        state_.wait(kPending, std::memory_order_acquire);
        s = state_.load(std::memory_order_acquire);
    }
    return s == kFailed ? error_ : Status();
}

void Frame::set_ready(Status st) {
    if (st.ok()) {
        state_.store(kReady, std::memory_order_release);
    } else {
        error_ = std::move(st);
        state_.store(kFailed, std::memory_order_release);
    }
    state_.notify_all();
}

void FrameRef::reset() {
    if (f_ && f_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) f_->pool_->give_back(f_);
    f_ = nullptr;
}

FrameView Frame::view() const {
    if (external.plane[0]) return external;
    return FrameView::tight(layout, buffer.data(), true);
}

void* pinned_frame_alloc(size_t bytes) { return ::operator new(bytes, std::align_val_t(64), std::nothrow); }
void pinned_frame_free(void* block) { ::operator delete(block, std::align_val_t(64)); }

Result<std::unique_ptr<FramePool>> FramePool::create(std::string name, const FrameLayout& layout, size_t count,
                                                     bool buffers) {
    LOOM_TRY(layout.check().with_context(name));
    if (count < 1 || count > 1024)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: a pool of {} frames (1 to 1024)", name, count);
    std::unique_ptr<FramePool> p(new FramePool());
    p->name_ = std::move(name);
    p->layout_ = layout;
    for (size_t i = 0; i < count; ++i) {
        auto f = std::make_unique<Frame>();
        if (buffers) f->buffer = device::PinnedBuffer<uint8_t>(layout.bytes());
        f->layout = layout;
        f->pool_ = p.get();
        p->free_.push_back(f.get());
        p->frames_.push_back(std::move(f));
    }
    return p;
}

FramePool::~FramePool() {
    std::lock_guard lock(mutex_);
    LOOM_ASSERT_MSG(free_.size() == frames_.size(), "frame pool '{}' destroyed with {} frames still referenced", name_,
                    frames_.size() - free_.size());
}

FrameRef FramePool::acquire() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return aborted_ || !free_.empty(); });
    if (aborted_) return {};
    Frame* f = free_.back();
    free_.pop_back();
    in_use_max_ = std::max(in_use_max_, frames_.size() - free_.size());
    lock.unlock();
    f->layout = layout_;
    f->color = {};
    f->meta = {};
    f->state_.store(Frame::kReady, std::memory_order_relaxed);
    f->error_ = Status();
    f->refs_.store(1, std::memory_order_relaxed);
    FrameRef r;
    r.f_ = f;
    return r;
}

void FramePool::abort() {
    {
        std::lock_guard lock(mutex_);
        aborted_ = true;
    }
    cv_.notify_all();
}

size_t FramePool::in_use() const {
    std::lock_guard lock(mutex_);
    return frames_.size() - free_.size();
}

size_t FramePool::in_use_max() const {
    std::lock_guard lock(mutex_);
    return in_use_max_;
}

void FramePool::give_back(Frame* f) {
    f->external = FrameView();  // lets go of the memory it viewed (e.g. a decoder's picture)
    {
        std::lock_guard lock(mutex_);
        free_.push_back(f);
    }
    cv_.notify_one();
}

}  // namespace loom::pipeline
