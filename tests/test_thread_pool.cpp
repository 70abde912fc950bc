// ThreadPool contract (common/thread_pool.hpp): parallel_for covers [0, n) exactly once, is safe
// from inside a pool job, a waiting worker runs queued jobs so that it never deadlocks, and only
// workers run jobs (the thread count is a promise).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "common/thread_pool.hpp"
#include "test_util.hpp"

namespace test_thread_pool {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::ThreadPool;
using loom::test::occupy_worker;

// Runs parallel_for(n, grain) and checks every index was visited once, by chunks in range.
::testing::AssertionResult covers_once(ThreadPool& pool, size_t n, size_t grain) {
    std::vector<std::atomic<int>> hits(n);
    std::atomic<bool> bad_range{false};
    pool.parallel_for(n, grain, [&](size_t b, size_t e) {
        if (b >= e || e > n) bad_range = true;
        for (size_t i = b; i < e && i < n; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    if (bad_range) return ::testing::AssertionFailure() << "a chunk was empty or past n";
    for (size_t i = 0; i < n; ++i)
        if (hits[i].load() != 1)
            return ::testing::AssertionFailure() << "index " << i << " visited " << hits[i].load() << " times";
    return ::testing::AssertionSuccess();
}

TEST(ThreadPool, SizeIsTheRequestedThreadCountAndZeroMeansOnePerCore) {
    ThreadPool three(3);
    EXPECT_EQ(three.size(), 3u);
    ThreadPool per_core(0);
    EXPECT_GE(per_core.size(), 1u);
}

TEST(ThreadPool, ParallelForCoversEachIndexExactlyOnce) {
    const size_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, 4097, 100003};
    const size_t grains[] = {0, 1, 3, 64, 1000, size_t{1} << 20};
    for (unsigned threads : {1u, 2u, 4u}) {
        ThreadPool pool(threads);
        for (size_t n : sizes)
            for (size_t g : grains) EXPECT_TRUE(covers_once(pool, n, g)) << threads << " threads, n " << n << ", grain " << g;
    }
}

TEST(ThreadPool, ParallelForNeverSplitsBelowTheGrain) {
    ThreadPool pool(4);
    const size_t n = 10000, grain = 700;
    std::atomic<size_t> smallest{n};
    std::atomic<int> chunks{0};
    pool.parallel_for(n, grain, [&](size_t b, size_t e) {
        ++chunks;
        if (e != n) {  // only the last chunk may be short
            size_t len = e - b, cur = smallest.load();
            while (len < cur && !smallest.compare_exchange_weak(cur, len)) {
            }
        }
    });
    EXPECT_GE(smallest.load(), grain);
    EXPECT_GT(chunks.load(), 1);
}

TEST(ThreadPool, ParallelForChunksShrinkToTheGrainAtTheEndAndStayFew) {
    // Guided chunks: each claim takes a share of what is left, so the last ones are a grain long
    // (no thread is left with a long chunk while the others idle) and there are still only a
    // few dozen claims for a hundred thousand indices.
    for (unsigned threads : {2u, 4u}) {
        ThreadPool pool(threads);
        for (size_t grain : {size_t{1}, size_t{16}}) {
            const size_t n = 100003;
            std::mutex mu;
            std::vector<std::pair<size_t, size_t>> chunks;
            pool.parallel_for(n, grain, [&](size_t b, size_t e) {
                std::lock_guard lock(mu);
                chunks.emplace_back(b, e);
            });
            std::sort(chunks.begin(), chunks.end());
            ASSERT_FALSE(chunks.empty());
            EXPECT_EQ(chunks.back().second, n);
            EXPECT_LE(chunks.back().second - chunks.back().first, grain) << threads << " threads, grain " << grain;
            EXPECT_GE(chunks.front().second - chunks.front().first, n / (4 * threads)) << threads << " threads";
            EXPECT_LE(chunks.size(), 30 * threads) << threads << " threads, grain " << grain;
        }
    }
}

TEST(ThreadPool, OnlyWorkersComputeParallelForFromAnotherThread) {
    // LOOM_THREADS=N is a promise: a thread of the program's own that splits a loop hands every
    // chunk to the workers, with one worker or several.
    for (unsigned threads : {1u, 3u}) {
        ThreadPool pool(threads);
        const auto caller = std::this_thread::get_id();
        std::atomic<bool> on_caller{false};
        pool.parallel_for(1000, 1, [&](size_t, size_t) {
            if (std::this_thread::get_id() == caller) on_caller = true;
        });
        pool.parallel_for(5, 10, [&](size_t, size_t) {  // one chunk
            if (std::this_thread::get_id() == caller) on_caller = true;
        });
        EXPECT_FALSE(on_caller.load()) << threads << " workers";
        EXPECT_TRUE(covers_once(pool, 1000, 1));
    }
}

TEST(ThreadPool, ParallelForOnOneWorkerRunsInlineOnThatWorker) {
    ThreadPool pool(1);
    std::atomic<bool> elsewhere{false}, done{false};
    pool.submit([&] {
        const auto me = std::this_thread::get_id();
        pool.parallel_for(1000, 1, [&](size_t, size_t) {
            if (std::this_thread::get_id() != me) elsewhere = true;
        });
        done = true;
    });
    pool.wait_until([&] { return done.load(); });
    EXPECT_FALSE(elsewhere.load());
}

// Outer jobs submitted to the pool each run a parallel_for whose body runs another one: every
// index of every level is covered once and nothing deadlocks, even with more jobs than threads.
void nested_from_pool_jobs(unsigned threads) {
    ThreadPool pool(threads);
    const size_t jobs = 8, outer = 24, inner = 50;
    std::vector<std::atomic<int>> hits(jobs * outer * inner);
    std::atomic<size_t> done{0};
    for (size_t j = 0; j < jobs; ++j)
        pool.submit([&, j] {
            pool.parallel_for(outer, 1, [&, j](size_t ob, size_t oe) {
                for (size_t o = ob; o < oe; ++o)
                    pool.parallel_for(inner, 4, [&, j, o](size_t ib, size_t ie) {
                        for (size_t i = ib; i < ie; ++i) hits[(j * outer + o) * inner + i].fetch_add(1);
                    });
            });
            done.fetch_add(1);
        });
    pool.wait_until([&] { return done.load() == jobs; });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
}

TEST(ThreadPool, NestedParallelForFromPoolJobsDoesNotDeadlockWithOneThread) { nested_from_pool_jobs(1); }
TEST(ThreadPool, NestedParallelForFromPoolJobsDoesNotDeadlockWithTwoThreads) { nested_from_pool_jobs(2); }
TEST(ThreadPool, NestedParallelForFromPoolJobsDoesNotDeadlockWithFourThreads) { nested_from_pool_jobs(4); }

TEST(ThreadPool, NestedParallelForFromTheCallerCoversEveryPair) {
    ThreadPool pool(3);
    const size_t rows = 37, cols = 129;
    std::vector<std::atomic<int>> hits(rows * cols);
    pool.parallel_for(rows, 1, [&](size_t rb, size_t re) {
        for (size_t r = rb; r < re; ++r)
            pool.parallel_for(cols, 8, [&, r](size_t cb, size_t ce) {
                for (size_t c = cb; c < ce; ++c) hits[r * cols + c].fetch_add(1);
            });
    });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
}

TEST(ThreadPool, AnotherThreadWaitsAsleepAndWakesWhenNotified) {
    // A thread of the program's own that waits on the pool sleeps until told, instead of waking
    // every few hundred microseconds to look (each look took a core from a worker).
    ThreadPool pool(1);
    std::atomic<bool> flag{false};
    std::atomic<int> looks{0};
    pool.submit([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        flag.store(true);
        pool.notify_waiters();
    });
    const auto t0 = std::chrono::steady_clock::now();
    pool.wait_until([&] {
        // Past the first 50 us of spinning, counted from 5 ms on.
        if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(5)) looks.fetch_add(1);
        return flag.load();
    });
    EXPECT_TRUE(flag.load());
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
    // One look per 20 ms fallback and one when told; polling every 25-200 us looked a thousand
    // times.
    EXPECT_LE(looks.load(), 30) << "looks while waiting 200 ms";

    // A parallel_for from this thread wakes it when its helpers are done.
    std::atomic<int> ran{0};
    pool.parallel_for(4, 1, [&](size_t b, size_t e) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        ran.fetch_add(static_cast<int>(e - b));
    });
    EXPECT_EQ(ran.load(), 4);

    // Woken by the notification, not by the 20 ms fallback: over ten waits the time from the
    // condition turning true to wait_until returning adds up to far less than the fallback's
    // 10 ms a wait on average (100 ms); the same for ten parallel_fors of one 3 ms chunk.
    using clock = std::chrono::steady_clock;
    clock::duration late{0};
    for (int round = 0; round < 10; ++round) {
        std::atomic<bool> set{false};
        clock::time_point at;
        pool.submit([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
            at = clock::now();
            set.store(true);
            pool.notify_waiters();
        });
        pool.wait_until([&] { return set.load(); });
        late += clock::now() - at;
    }
    EXPECT_LT(late, std::chrono::milliseconds(40)) << "from the condition to the waiter's return, ten waits";
    const auto t1 = clock::now();
    for (int round = 0; round < 10; ++round)
        pool.parallel_for(1, 1, [](size_t, size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(3)); });
    EXPECT_LT(clock::now() - t1, std::chrono::milliseconds(30 + 40)) << "ten parallel_fors of a 3 ms chunk";
}

TEST(ThreadPool, WaitUntilOnAWorkerRunsQueuedJobsAndElsewhereRunsNothing) {
    std::atomic<bool> release{false};  // outlives the pool's worker
    ThreadPool pool(1);
    occupy_worker(pool, release);
    // The only worker is stuck: a thread of the program's own waits without running the job.
    std::atomic<bool> ran{false};
    std::thread::id ran_on;
    pool.submit([&] {
        ran_on = std::this_thread::get_id();
        ran = true;
    });
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    pool.wait_until([&] { return std::chrono::steady_clock::now() >= until; });
    EXPECT_FALSE(ran.load()) << "a thread outside the pool ran a job";
    release = true;
    pool.wait_until([&] { return ran.load(); });
    EXPECT_NE(ran_on, std::this_thread::get_id());
    // A worker waiting on a job queued behind it runs it itself (one worker: no deadlock).
    std::atomic<bool> inner{false}, outer{false};
    pool.submit([&] {
        pool.submit([&] { inner = true; });
        pool.wait_until([&] { return inner.load(); });
        outer = true;
    });
    pool.wait_until([&] { return outer.load(); });
    EXPECT_TRUE(inner.load());
}

TEST(ThreadPool, RunOneRunsAQueuedJobOrReportsAnEmptyQueue) {
    std::atomic<bool> release{false};  // outlives the pool's worker
    ThreadPool pool(1);
    occupy_worker(pool, release);
    EXPECT_FALSE(pool.run_one());
    int value = 0;
    pool.submit([&] { value = 42; });
    EXPECT_TRUE(pool.run_one());
    EXPECT_EQ(value, 42);
    EXPECT_FALSE(pool.run_one());
    release = true;
}

TEST(ThreadPool, DestructorRunsEveryQueuedJob) {
    std::atomic<int> ran{0};
    {
        ThreadPool pool(2);
        for (int i = 0; i < 500; ++i)
            pool.submit([&] { ran.fetch_add(1); });
    }
    EXPECT_EQ(ran.load(), 500);
}

TEST(ThreadPool, ManySmallParallelForsFromSeveralThreadsAtOnce) {
    ThreadPool pool(2);
    std::atomic<size_t> total{0};
    std::vector<std::thread> callers;
    for (int t = 0; t < 3; ++t)
        callers.emplace_back([&] {
            for (int rep = 0; rep < 200; ++rep)
                pool.parallel_for(97, 5, [&](size_t b, size_t e) { total.fetch_add(e - b); });
        });
    for (auto& c : callers) c.join();
    EXPECT_EQ(total.load(), size_t{3} * 200 * 97);
}

TEST(ThreadPool, ParallelForQueuesAtMostOneHelperPerWorker) {
    std::atomic<bool> release{false};  // outlives the pool: a worker may start an occupying job late
    ThreadPool pool(3);
    for (unsigned i = 0; i < pool.size(); ++i) occupy_worker(pool, release);  // nobody pops helpers
    std::thread releaser([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        release = true;
    });
    std::atomic<size_t> covered{0};
    pool.parallel_for(100000, 1, [&](size_t b, size_t e) { covered += e - b; });
    releaser.join();
    EXPECT_EQ(covered.load(), 100000u);
    // The helpers queued number at most size(), plus one occupying job at a time before a
    // worker took it.
    EXPECT_LE(pool.queue_depth_peak(), size_t(pool.size()) + 1);
}

TEST(ThreadPool, BusyTimeCountsJobsAndLeavesOutWaitingWithNothingToRun) {
    // One job works 40 ms (a sleep stands for it: it holds the worker); another waits 400 ms in
    // wait_until for a flag with nothing queued to run. Busy time counts the first, not the wait.
    std::atomic<bool> release{false};
    int64_t total = 0;
    {
        ThreadPool pool(2);
        EXPECT_EQ(pool.busy_ns(), (std::vector<int64_t>{0, 0}));
        std::atomic<int> done{0};
        pool.submit([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(40));
            ++done;
        });
        pool.submit([&] {
            pool.wait_until([&] { return release.load(); });
            ++done;
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
        release = true;
        pool.wait_until([&] { return done.load() == 2; });
        for (int64_t b : pool.busy_ns()) total += b;
    }
    EXPECT_GE(total, 40'000'000);
    EXPECT_LT(total, 300'000'000);
}

}  // namespace

}  // namespace test_thread_pool
