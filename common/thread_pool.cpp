#include "common/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOOM_CPU_RELAX() _mm_pause()
#else
#define LOOM_CPU_RELAX() std::this_thread::yield()
#endif

namespace loom {

namespace {
// How long an idle worker or a waiter spins before it sleeps. Short enough not to steal a core
// for long on a 2-core machine, long enough to catch the next task of a busy stream.
constexpr auto kSpin = std::chrono::microseconds(50);
// How long a non-worker sleeps in wait_until before it looks at its condition unasked: only a
// condition that nobody announces through notify_waiters waits this long.
constexpr auto kWaitFallback = std::chrono::milliseconds(20);
// The pool whose worker the calling thread is (none: a thread of the program's own). Only
// workers compute: the thread count is a promise (LOOM_THREADS=N: at most N threads run jobs).
thread_local const ThreadPool* t_pool = nullptr;
// A worker's time spent in wait_until with nothing to run, ns (busy_ns() leaves it out).
thread_local int64_t t_wait_idle_ns = 0;

int64_t ns_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count();
}
}  // namespace

ThreadPool::ThreadPool(unsigned threads) {
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    busy_ns_ = std::make_unique<std::atomic<int64_t>[]>(threads);
    for (unsigned i = 0; i < threads; ++i) busy_ns_[i].store(0, std::memory_order_relaxed);
    workers_.reserve(threads);
    for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::submit(std::function<void()> job) {
    {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(job));
        queued_.fetch_add(1, std::memory_order_release);
        if (queue_.size() > queue_depth_peak_.load(std::memory_order_relaxed))
            queue_depth_peak_.store(queue_.size(), std::memory_order_relaxed);
    }
    if (sleeping_.load(std::memory_order_acquire) > 0) cv_.notify_one();
}

bool ThreadPool::pop(std::function<void()>& job) {
    if (queued_.load(std::memory_order_acquire) == 0) return false;
    std::lock_guard lock(mutex_);
    if (queue_.empty()) return false;
    job = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_release);
    return true;
}

bool ThreadPool::run_one() {
    std::function<void()> job;
    if (!pop(job)) return false;
    job();
    return true;
}

std::vector<int64_t> ThreadPool::busy_ns() const {
    std::vector<int64_t> out(workers_.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = busy_ns_[i].load(std::memory_order_relaxed);
    return out;
}

void ThreadPool::worker_loop(size_t index) {
    t_pool = this;
    std::function<void()> job;
    for (;;) {
        if (pop(job)) {
            const int64_t idle0 = t_wait_idle_ns;
            const auto t0 = std::chrono::steady_clock::now();
            job();
            job = nullptr;
            const int64_t busy = ns_between(t0, std::chrono::steady_clock::now()) - (t_wait_idle_ns - idle0);
            busy_ns_[index].fetch_add(busy, std::memory_order_relaxed);
            continue;
        }
        auto spin_end = std::chrono::steady_clock::now() + kSpin;
        bool found = false;
        while (std::chrono::steady_clock::now() < spin_end) {
            if (queued_.load(std::memory_order_acquire) > 0) {
                found = true;
                break;
            }
            LOOM_CPU_RELAX();
        }
        if (found) continue;
        std::unique_lock lock(mutex_);
        sleeping_.fetch_add(1, std::memory_order_acq_rel);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        sleeping_.fetch_sub(1, std::memory_order_acq_rel);
        if (stopping_ && queue_.empty()) return;
    }
}

void ThreadPool::wait_until(const std::function<bool()>& done) {
    auto spin_end = std::chrono::steady_clock::now() + kSpin;
    unsigned idle_rounds = 0;
    const bool worker = t_pool == this;  // only a worker runs jobs while it waits
    while (!done()) {
        if (worker && run_one()) {
            spin_end = std::chrono::steady_clock::now() + kSpin;
            continue;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now < spin_end) {
            LOOM_CPU_RELAX();
        } else if (worker) {
            // Past the spin window: back off with growing sleeps, bounded at 200 us, so a long
            // wait costs almost no CPU yet still notices completion promptly. (A worker waits
            // for its own parallel_for's last helpers, on a core it would not give away anyway.)
            idle_rounds = std::min(idle_rounds + 1, 8u);
            std::this_thread::sleep_for(std::chrono::microseconds(25u * idle_rounds));
        } else {
            // Another thread sleeps until the epoch moves (notify_waiters),
            // then looks again. The epoch is read before done(): a change that done() missed
            // moves the epoch after this read, so the wait below returns at once (wait_cv_'s
            // predicate is checked under wait_mutex_, which notify_waiters takes before it wakes
            // anyone); waiters_ is raised before either read, so a notifier that finds it zero
            // changed the state before this thread looked.
            waiters_.fetch_add(1, std::memory_order_seq_cst);
            for (;;) {
                const uint64_t e = epoch_.load(std::memory_order_seq_cst);
                if (done()) break;
                std::unique_lock lock(wait_mutex_);
                wait_cv_.wait_for(lock, kWaitFallback,
                                  [&] { return epoch_.load(std::memory_order_seq_cst) != e; });
            }
            waiters_.fetch_sub(1, std::memory_order_seq_cst);
            return;
        }
        if (worker) t_wait_idle_ns += ns_between(now, std::chrono::steady_clock::now());
    }
}

void ThreadPool::notify_waiters() {
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (waiters_.load(std::memory_order_seq_cst) == 0) return;
    { std::lock_guard lock(wait_mutex_); }  // a waiter between its check and its sleep holds it
    wait_cv_.notify_all();
}

void ThreadPool::parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
    if (n == 0) return;
    grain = std::max<size_t>(grain, 1);
    size_t chunks = (n + grain - 1) / grain;
    const bool worker = t_pool == this;
    if (worker && (chunks == 1 || workers_.size() <= 1)) {
        fn(0, n);
        return;
    }
    // Guided chunks: each claim takes a share of what is left (1 / (2 x computing threads)),
    // never less than `grain`. The first chunks are long, so claims stay few; the last ones
    // shrink towards `grain`, so no thread is left finishing a long chunk while the others idle.
    // (Fixed chunks of n / 12 left the pool's 2 threads idle 10% of an UpConv7 frame: a
    // Winograd conv's 82 blocks went out 7 at a time.)
    const size_t computing = std::max<size_t>(workers_.size(), 1);
    const size_t target = std::min(chunks, computing * 4);  // helpers worth waking

    struct Shared {
        std::atomic<size_t> next{0};
        std::atomic<size_t> helpers_done{0};
    };
    auto shared = std::make_shared<Shared>();
    auto body = [shared, n, grain, computing, &fn] {
        size_t b = shared->next.load(std::memory_order_relaxed);
        for (;;) {
            if (b >= n) break;
            const size_t len = std::min(n - b, std::max(grain, (n - b) / (2 * computing)));
            if (!shared->next.compare_exchange_weak(b, b + len, std::memory_order_relaxed)) continue;
            fn(b, b + len);
            b = shared->next.load(std::memory_order_relaxed);
        }
    };
    // A worker takes chunks itself beside its helpers; another thread hands them all to the
    // workers and only waits, so that no more threads compute than the pool has.
    size_t helpers = worker ? std::min(workers_.size(), target - 1) : std::min(workers_.size(), target);
    for (size_t i = 0; i < helpers; ++i) {
        submit([this, shared, body, worker] {
            body();
            shared->helpers_done.fetch_add(1, std::memory_order_acq_rel);
            if (!worker) notify_waiters();  // the caller sleeps in wait_until
        });
    }
    if (worker) body();
    // A helper that starts late finds no chunk left and returns at once; `fn` stays alive until
    // every helper has finished, because we wait for all of them here.
    wait_until([&] { return shared->helpers_done.load(std::memory_order_acquire) == helpers; });
}

unsigned ThreadPool::threads_from_environment() {
    const char* env = std::getenv("LOOM_THREADS");
    long n = env ? std::strtol(env, nullptr, 10) : 0;
    return n > 0 && n <= 1024 ? static_cast<unsigned>(n) : 0u;
}

ThreadPool& ThreadPool::global() {
    static ThreadPool pool(threads_from_environment());
    return pool;
}

}  // namespace loom
