// Runtime contract for a long-lived device serving several jobs at once (device/runtime.hpp):
// completion callbacks without a waiter, bounded bookkeeping over many tasks and streams,
// frees that wait only for the work that may use the buffer, prepared sink submissions.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/thread_pool.hpp"
#include "device/runtime.hpp"
#include "device/timeline.hpp"
#include "test_util.hpp"

namespace test_runtime_lifetime {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::Status;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::device;
using namespace loom::test;

// ---- Stream::add_callback ----

TEST(RuntimeCallback, CallbacksRunInStreamOrderAfterTheWorkBeforeThem) {
    ThreadPool pool(4);
    DeviceOptions o;
    o.pool = &pool;
    auto dev = make_device(o);
    Stream s = dev->create_stream();
    constexpr int kN = 2000;
    std::atomic<int> work_done{0};
    std::mutex m;
    std::vector<int> order, seen_work;
    for (int i = 0; i < kN; ++i) {
        ASSERT_TRUE(s.launch_host("step", 0, 0, [&] {
                         work_done.fetch_add(1);
                         return Status();
                     }).ok());
        ASSERT_TRUE(s.add_callback([&, i](Status st) {
                         EXPECT_TRUE(st.ok()) << st.to_string();
                         std::lock_guard lock(m);
                         order.push_back(i);
                         seen_work.push_back(work_done.load());
                     }).ok());
    }
    ASSERT_TRUE(s.synchronize().ok());  // synchronize also waits for the callbacks
    ASSERT_EQ(order.size(), size_t(kN));
    for (int i = 0; i < kN; ++i) {
        EXPECT_EQ(order[size_t(i)], i);
        // Exactly the i + 1 steps before it have run: none after it (it is in stream order).
        EXPECT_EQ(seen_work[size_t(i)], i + 1);
    }
    EXPECT_FALSE(s.add_callback({}).ok());
    EXPECT_EQ(Stream().add_callback([](Status) {}).code(), StatusCode::FAILED_PRECONDITION);
}

TEST(RuntimeCallback, CallbackReceivesTheInjectedFaultAndSynchronizeStillReportsIt) {
    DeviceOptions o;
    o.faults.fail_copy = 2;
    auto dev = make_device(o);
    DeviceBuffer b = alloc(*dev, 256 * 4);
    std::vector<float> x(256, 1.5f);
    Stream s = dev->create_stream();
    std::vector<Status> got(4);
    std::atomic<int> calls{0};
    auto note = [&](size_t i) {
        return [&, i](Status st) {
            got[i] = st;
            calls.fetch_add(1);
        };
    };
    ASSERT_TRUE(s.copy_h2d(fp(b), pageable(x), "c1").ok());
    ASSERT_TRUE(s.add_callback(note(0)).ok());
    ASSERT_TRUE(s.copy_h2d(fp(b), pageable(x), "c2").ok());  // the injected DMA error
    ASSERT_TRUE(s.add_callback(note(1)).ok());
    ASSERT_TRUE(s.copy_h2d(fp(b), pageable(x), "c3").ok());  // skipped
    ASSERT_TRUE(s.add_callback(note(2)).ok());
    const Status sync = s.synchronize();
    EXPECT_EQ(sync.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(sync.message().find("copy 'c2'"), std::string::npos) << sync.message();
    EXPECT_EQ(calls.load(), 3);
    EXPECT_TRUE(got[0].ok()) << got[0].to_string();
    EXPECT_EQ(got[1].code(), StatusCode::DEVICE_FAULT);
    EXPECT_EQ(got[1].message(), sync.message());  // the first error itself, not a skip note
    EXPECT_EQ(got[2].code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(got[2].message().find("copy 'c2'"), std::string::npos) << got[2].message();
    // Reported: later work and callbacks start clean.
    ASSERT_TRUE(s.copy_h2d(fp(b), pageable(x), "c4").ok());
    ASSERT_TRUE(s.add_callback(note(3)).ok());
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_TRUE(got[3].ok()) << got[3].to_string();
}

// Two streams joined by events: copies, a sink, single launches, host tasks. With `callbacks`,
// a callback follows every submission. Returns what the timeline shows.
struct TimelineSnapshot {
    nlohmann::json events;
    DeviceStats stats;
    std::vector<SimTime> event_times;
};

TimelineSnapshot run_timeline_workload(bool callbacks, std::atomic<int>& fired) {
    DeviceOptions o;
    o.trace = true;
    auto dev = make_device(o);
    constexpr int64_t m = 24, k = 32, n = 16;
    std::mt19937 rng(11);
    const std::vector<float> w = random_floats(rng, size_t(k * n));
    DeviceBuffer dw = alloc(*dev, w.size() * 4);
    Stream ss[2] = {dev->create_stream(), dev->create_stream()};
    auto cb = [&](Stream& s) {
        if (callbacks) LOOM_ASSERT(s.add_callback([&](Status) { fired.fetch_add(1); }).ok());
    };
    LOOM_ASSERT(ss[0].copy_h2d(fp(dw), pageable(w), "w").ok());
    cb(ss[0]);
    std::vector<Event> evs;
    std::vector<std::vector<float>> xs(6), outs(6, std::vector<float>(size_t(m * n)));
    std::vector<DeviceBuffer> dx, dy, dz;
    for (size_t i = 0; i < 6; ++i) {
        Stream& s = ss[i % 2];
        const std::string tag = std::to_string(i);
        xs[i] = random_floats(rng, size_t(m * k));
        dx.push_back(alloc(*dev, xs[i].size() * 4));
        dy.push_back(alloc(*dev, outs[i].size() * 4));
        dz.push_back(alloc(*dev, outs[i].size() * 4));
        cb(s);
        LOOM_ASSERT(s.copy_h2d(fp(dx[i]), pageable(xs[i]), "x " + tag).ok());
        cb(s);
        if (!evs.empty()) LOOM_ASSERT(s.wait(evs.back()).ok());
        cb(s);
        if (i % 3 == 0) {
            std::vector<SinkTask> tasks;
            tasks.push_back({&matmul_kernel(), matmul_launch(dx[i], dw, dy[i], m, k, n), "mm " + tag});
            tasks.push_back({&binary_kernel(), binary_launch(dy[i], dy[i], dz[i], m * n, 2), "sq " + tag});
            LOOM_ASSERT(s.launch_sink(std::move(tasks), "job " + tag).ok());
        } else {
            LOOM_ASSERT(s.launch(matmul_kernel(), matmul_launch(dx[i], dw, dy[i], m, k, n), "mm " + tag).ok());
            cb(s);
            LOOM_ASSERT(s.launch(binary_kernel(), binary_launch(dy[i], dy[i], dz[i], m * n, 2), "sq " + tag).ok());
        }
        cb(s);
        LOOM_ASSERT(s.launch_host("host " + tag, 1e4, 1e3, [] { return Status(); }).ok());
        cb(s);
        LOOM_ASSERT(s.copy_d2h(pageable_out(outs[i]), cfp(dz[i]), "out " + tag).ok());
        cb(s);
        evs.push_back(dev->create_event());
        LOOM_ASSERT(s.record(evs.back()).ok());
        cb(s);
        if (i == 3) LOOM_ASSERT(s.synchronize().ok());
    }
    LOOM_ASSERT(dev->synchronize().ok());
    TimelineSnapshot r;
    r.events = simulated_trace_events(*dev);
    r.stats = dev->stats();
    for (const Event& e : evs) r.event_times.push_back(*e.sim_time());
    return r;
}

TEST(RuntimeCallback, TimelineIsBitIdenticalWithAndWithoutCallbacks) {
    std::atomic<int> fired_without{0}, fired_with{0};
    const TimelineSnapshot a = run_timeline_workload(false, fired_without);
    const TimelineSnapshot b = run_timeline_workload(true, fired_with);
    EXPECT_EQ(fired_without.load(), 0);
    EXPECT_GT(fired_with.load(), 40);
    EXPECT_EQ(a.events, b.events);
    EXPECT_EQ(a.event_times, b.event_times);
    EXPECT_EQ(a.stats.sim_now, b.stats.sim_now);
    EXPECT_EQ(a.stats.host_now, b.stats.host_now);
    EXPECT_EQ(a.stats.tasks, b.stats.tasks);  // callbacks take no task id
    for (size_t e = 0; e < kEngineCount; ++e) {
        EXPECT_EQ(a.stats.engines[e].tasks, b.stats.engines[e].tasks) << e;
        EXPECT_EQ(a.stats.engines[e].busy, b.stats.engines[e].busy) << e;
    }
}

TEST(RuntimeCallback, CallbacksFromManyStreamsAndThreadsFireExactlyOnce) {
    ThreadPool pool(4);
    DeviceOptions o;
    o.pool = &pool;
    auto dev = make_device(o);
    constexpr int kThreads = 8, kPerThread = 500;
    std::vector<std::atomic<int>> fired(kThreads * kPerThread);
    Stream shared = dev->create_stream();  // every thread also adds to one shared stream
    std::atomic<int> shared_fired{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
        threads.emplace_back([&, t] {
            Stream s = dev->create_stream();
            for (int i = 0; i < kPerThread; ++i) {
                LOOM_ASSERT(s.launch_host("w", 0, 0, [] { return Status(); }).ok());
                LOOM_ASSERT(s.add_callback([&fired, idx = t * kPerThread + i](Status st) {
                                 LOOM_ASSERT(st.ok());
                                 fired[size_t(idx)].fetch_add(1);
                             }).ok());
                if (i % 10 == 0) LOOM_ASSERT(shared.add_callback([&](Status) { shared_fired.fetch_add(1); }).ok());
            }
        });
    for (auto& t : threads) t.join();
    ASSERT_TRUE(dev->synchronize().ok());
    for (size_t i = 0; i < fired.size(); ++i) ASSERT_EQ(fired[i].load(), 1) << i;
    EXPECT_EQ(shared_fired.load(), kThreads * kPerThread / 10);
}

// ---- bounded bookkeeping ----

// The most busy intervals all engines may remember: kLaneIntervalsMax per lane.
size_t lane_intervals_max(const DeviceSpec& spec) {
    return (kEngineCount - 1 + static_cast<size_t>(spec.aicore_count)) * kLaneIntervalsMax;
}

TEST(RuntimeBounded, TwoHundredThousandTasksWithoutTracingKeepTheCoreBounded) {
    auto dev = make_device();
    const DeviceSpec& spec = dev->spec();
    constexpr int kTasks = 200000;
    DeviceBuffer a = alloc(*dev, 64 * 4), b = alloc(*dev, 64 * 4), c = alloc(*dev, 64 * 4);
    std::vector<float> x(64, 0.25f);
    Stream ss[3] = {dev->create_stream(), dev->create_stream(), dev->create_stream()};
    Event ev = dev->create_event();
    size_t intervals_peak = 0;
    // Host tasks, copies, markers and frees of idle buffers do not move the host clock, so the
    // work runs ahead of it and the host-clock horizon prunes little.
    for (int i = 0; i < kTasks; ++i) {
        Stream& s = ss[i % 3];
        switch (i % 8) {
        case 0: ASSERT_TRUE(s.copy_h2d(fp(a), pageable(x), "in").ok()); break;
        case 1: ASSERT_TRUE(s.launch(binary_kernel(), binary_launch(a, a, b, 64, 0), "add").ok()); break;
        case 2: ASSERT_TRUE(s.record(ev).ok()); break;
        case 3: ASSERT_TRUE(s.wait(ev).ok()); break;
        case 4: {
            DeviceBuffer t = alloc(*dev, 4096);  // an allocation and a free per "frame"
            ASSERT_TRUE(s.copy_d2d(fp(c), cfp(b), "d2d").ok());
            break;
        }
        default: ASSERT_TRUE(s.launch_host("h", 1e3, 0, [] { return Status(); }, {}).ok());
        }
        if (i % 4096 == 0) intervals_peak = std::max(intervals_peak, dev->stats().lane_intervals);
    }
    const DeviceStats st = dev->stats();
    ASSERT_TRUE(dev->synchronize().ok());
    EXPECT_GE(st.tasks, uint64_t(kTasks) * 3 / 4);
    EXPECT_EQ(st.trace_records, 0u);
    EXPECT_EQ(st.trace_memory_samples, 0u);
    EXPECT_EQ(st.trace_dropped, 0u);
    EXPECT_LE(std::max(intervals_peak, st.lane_intervals), lane_intervals_max(spec));
    EXPECT_GT(st.sim_now, st.host_now + sim_from_ns(1e6));  // the work ran far ahead of the host
}

TEST(RuntimeBounded, TracingKeepsAtMostTraceTasksMaxRecordsAndMemorySamples) {
    DeviceOptions o;
    o.trace = true;
    o.trace_tasks_max = 100;
    auto dev = make_device(o);
    Stream s = dev->create_stream();
    for (int i = 0; i < 1000; ++i) {
        DeviceBuffer t = alloc(*dev, 256);
        ASSERT_TRUE(s.launch_host("h", 1e3, 0, [] { return Status(); }).ok());
    }
    ASSERT_TRUE(s.synchronize().ok());
    const DeviceStats st = dev->stats();
    EXPECT_EQ(st.trace_records, 100u);
    EXPECT_EQ(st.trace_dropped, 900u);
    EXPECT_EQ(st.trace_memory_samples, 100u);
    EXPECT_EQ(nlohmann::json::parse(dev->trace_json())["otherData"]["memory_samples_dropped"], 1900);
}

TEST(RuntimeBounded, LanesForgetOnlyGapsOlderThanTheirLastIntervals) {
    // One lane: kLaneIntervalsMax + 1 tasks of 10 with a gap of 10 after each; the merge closes
    // the gaps between the oldest half only, so a task ready at 0 goes to the oldest gap left.
    LaneSet lanes(1);
    std::vector<uint16_t> out;
    for (size_t i = 0; i <= kLaneIntervalsMax; ++i)
        EXPECT_EQ(lanes.place(SimTime(20 * i), 10, 1, out), SimTime(20 * i));
    EXPECT_LE(lanes.intervals(), kLaneIntervalsMax);
    const SimTime oldest_open = 20 * (kLaneIntervalsMax / 2) - 10;
    EXPECT_EQ(lanes.place(0, 10, 1, out), oldest_open);
    EXPECT_EQ(lanes.place(0, 10, 1, out), oldest_open + 20);
}

// ---- stream lifetime ----

TEST(RuntimeStreamLifetime, HundredThousandDroppedStreamsWithWorkLeaveBoundedState) {
    auto dev = make_device();
    DeviceBuffer a = alloc(*dev, 64 * 4);
    std::vector<float> x(64, 0.5f);
    Stream kept = dev->create_stream();
    std::atomic<int> ran{0};
    size_t live_peak = 0, tracked_peak = 0;
    for (int i = 0; i < 100000; ++i) {
        Stream s = dev->create_stream();
        ASSERT_TRUE(s.copy_h2d(fp(a), pageable(x), "in").ok());
        ASSERT_TRUE(s.launch_host("h", 0, 0, [&] {
                         ran.fetch_add(1);
                         return Status();
                     }).ok());
        if (i % 1000 == 999) {
            // Work in flight keeps a dropped stream alive; synchronize covers it.
            ASSERT_TRUE(dev->synchronize().ok());
            const DeviceStats st = dev->stats();
            live_peak = std::max(live_peak, st.streams_live);
            tracked_peak = std::max(tracked_peak, st.streams_tracked);
        }
    }
    ASSERT_TRUE(dev->synchronize().ok());
    EXPECT_EQ(ran.load(), 100000);
    // `kept` alone, once the worker that ran the last task has let go of the loop's last stream
    // (it may still hold it for a moment after synchronize() returns; on a loaded machine it
    // was seen holding it then).
    DeviceStats st = dev->stats();
    for (int wait = 0; wait < 1000 && st.streams_live != 1u; ++wait) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        st = dev->stats();
    }
    EXPECT_EQ(st.streams_live, 1u);
    // `kept`, the loop's stream, and any a worker has marked done but not yet let go of.
    EXPECT_LE(live_peak, 2u + ThreadPool::global().size());
    EXPECT_LE(tracked_peak, 4096u);  // the list is pruned as streams are created
    EXPECT_EQ(kept.id(), 0u);
}

TEST(RuntimeStreamLifetime, DeviceSynchronizeReportsTheErrorOfADroppedStreamOnce) {
    DeviceOptions o;
    o.faults.fail_copy = 1;
    auto dev = make_device(o);
    DeviceBuffer a = alloc(*dev, 64 * 4);
    std::vector<float> x(64, 0.5f);
    {
        Stream s = dev->create_stream();
        ASSERT_TRUE(s.copy_h2d(fp(a), pageable(x), "doomed").ok());
    }  // dropped with its work (and its error) unreported
    const Status st = dev->synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("copy 'doomed'"), std::string::npos) << st.message();
    EXPECT_TRUE(dev->synchronize().ok());  // reported once
    EXPECT_EQ(dev->stats().streams_live, 0u);
}

// ---- freeing waits only for work that may use the buffer ----

// A host task on `s` that declares no device memory and blocks until `gate` opens; long in
// simulated time (1e9 flops).
void submit_gated(Stream& s, std::latch& gate) {
    ASSERT_TRUE(s.launch_host("gated", 1e9, 0, [&gate] {
                     gate.wait();
                     return Status();
                 }, {}).ok());
}

// Frees `b` on another thread; returns whether that free had returned after `ms` milliseconds,
// then opens `gate` and joins.
bool free_returns_before_gate_opens(DeviceBuffer& b, std::latch& gate, int ms) {
    std::atomic<bool> freed{false};
    std::thread t([&] {
        b.reset();
        freed = true;
    });
    for (int i = 0; i < ms && !freed.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool early = freed.load();
    gate.count_down();
    t.join();
    EXPECT_TRUE(freed.load());
    return early;
}

TEST(RuntimeFree, FreeingReturnsWithoutWaitingForAnotherStreamsWork) {
    ThreadPool pool(2);
    DeviceOptions o;
    o.pool = &pool;
    auto dev = make_device(o);
    DeviceBuffer mine = alloc(*dev, 1024 * 4), theirs = alloc(*dev, 1024 * 4);
    std::vector<float> x(1024, 2.0f);
    Stream job_a = dev->create_stream(), job_b = dev->create_stream();
    std::latch gate(1);
    ASSERT_TRUE(job_a.copy_h2d(fp(theirs), pageable(x), "a in").ok());
    submit_gated(job_a, gate);
    ASSERT_TRUE(job_a.copy_h2d(fp(theirs), pageable(x), "a in again").ok());  // waits behind the gate
    ASSERT_TRUE(job_b.copy_h2d(fp(mine), pageable(x), "b in").ok());
    ASSERT_TRUE(job_b.synchronize().ok());
    const SimTime a_end = dev->stats().sim_now;
    // Job b frees its buffer while job a is stuck: it returns at once (the gate opens only after
    // the free has returned, so waiting for job a would fail the test, not hang it).
    EXPECT_TRUE(free_returns_before_gate_opens(mine, gate, 2000));
    EXPECT_LT(dev->stats().host_now, a_end);  // the host clock did not wait for job a either
    ASSERT_TRUE(dev->synchronize().ok());
}

TEST(RuntimeFree, FreeingWaitsForInFlightWorkThatUsesTheBuffer) {
    ThreadPool pool(2);
    DeviceOptions o;
    o.pool = &pool;
    auto dev = make_device(o);
    DeviceBuffer b = alloc(*dev, 1024 * 4);
    std::vector<float> x(1024, 2.0f), y(1024, 0.0f);
    Stream s = dev->create_stream();
    std::latch gate(1);
    submit_gated(s, gate);
    ASSERT_TRUE(s.copy_h2d(fp(b), pageable(x), "in").ok());
    ASSERT_TRUE(s.copy_d2h(pageable_out(y), cfp(b), "out").ok());
    const SimTime out_end = dev->stats().sim_now;
    EXPECT_FALSE(free_returns_before_gate_opens(b, gate, 100));
    EXPECT_EQ(y, x);  // the copies ran before the memory went
    EXPECT_GE(dev->stats().host_now, out_end);
}

TEST(RuntimeFree, TheHostClockAfterAFreeIsTheLatestEndOfItsUsersWhateverFinishedFirst) {
    auto dev = make_device();
    DeviceBuffer b = alloc(*dev, 1 << 20);
    std::vector<float> big(size_t(1 << 18), 1.0f);
    Stream long_job = dev->create_stream(), short_job = dev->create_stream();
    ASSERT_TRUE(long_job.copy_h2d(fp(b), pageable(big), "long").ok());
    const SimTime long_end = dev->stats().sim_now;
    // Finished in wall time before the next user is submitted (query moves no simulated clock).
    while (!long_job.query()) std::this_thread::yield();
    ASSERT_TRUE(short_job.copy_d2d(b.as<float>().slice(0, 16), cfp(b).slice(16, 16), "short").ok());
    while (!short_job.query()) std::this_thread::yield();
    ASSERT_LT(dev->stats().host_now, long_end);
    b.reset();
    EXPECT_EQ(dev->stats().host_now, long_end);  // not the short copy's earlier end
}

TEST(RuntimeFree, AHostTaskThatDeclaresNothingMakesEveryFreeWait) {
    ThreadPool pool(2);
    DeviceOptions o;
    o.pool = &pool;
    auto dev = make_device(o);
    DeviceBuffer b = alloc(*dev, 1024 * 4);
    Stream s = dev->create_stream();
    std::latch gate(1);
    // It may reach any buffer through host_data(), as the executor's host steps do.
    ASSERT_TRUE(s.launch_host("undeclared", 0, 0, [&gate] {
                     gate.wait();
                     return Status();
                 }).ok());
    EXPECT_FALSE(free_returns_before_gate_opens(b, gate, 100));
    // A declared range outside any allocation is refused like a copy's.
    const DeviceRange bogus{0x10, 4};
    EXPECT_EQ(s.launch_host("bogus", 0, 0, [] { return Status(); }, std::span(&bogus, 1)).code(),
              StatusCode::INVALID_ARGUMENT);
    ASSERT_TRUE(s.synchronize().ok());
}

// ---- the pool's queue ----

TEST(RuntimePoolQueue, TheDeviceQueuesAtMostOneJobPerStreamNotOnePerTask) {
    std::atomic<bool> release{false};  // outlives the pool's worker
    ThreadPool pool(1);
    DeviceOptions o;
    o.pool = &pool;
    auto dev = make_device(o);
    occupy_worker(pool, release);  // the only worker is busy: every ready task stays queued
    constexpr int kStreams = 8, kTasks = 1000;
    std::atomic<int> ran{0};
    std::vector<Stream> streams;
    for (int i = 0; i < kStreams; ++i) streams.push_back(dev->create_stream());
    for (int t = 0; t < kTasks; ++t)
        for (Stream& s : streams) {
            ASSERT_TRUE(s.launch_host("h", 0, 0, [&] {
                             ran.fetch_add(1);
                             return Status();
                         }, {}).ok());
            if (t % 100 == 0) {
                ASSERT_TRUE(s.add_callback([&](Status) { ran.fetch_add(1); }).ok());
            }
        }
    EXPECT_LE(pool.queue_depth_peak(), size_t(kStreams) + 1);  // + the occupying job
    release = true;
    ASSERT_TRUE(dev->synchronize().ok());
    EXPECT_EQ(ran.load(), kStreams * kTasks + kStreams * kTasks / 100);
    EXPECT_LE(pool.queue_depth_peak(), size_t(kStreams) + 1);
}

// The thread count is a promise (LOOM_THREADS=N: at most N threads compute): a thread that
// submits device work and waits for it never runs that work itself, even while every worker is
// busy (before, synchronize ran queued tasks on the waiting thread: N + 1 threads computed).
TEST(RuntimeThreads, OnlyThePoolsWorkersRunDeviceWorkWhileTheCallerWaits) {
    ThreadPool pool(1);
    DeviceOptions o;
    o.pool = &pool;
    auto dev = make_device(o);
    Stream s = dev->create_stream();
    const auto caller = std::this_thread::get_id();
    std::atomic<int> ran{0}, on_caller{0};
    for (int round = 0; round < 5; ++round) {
        std::atomic<bool> release{false};
        occupy_worker(pool, release);
        std::thread releaser([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            release = true;
        });
        for (int i = 0; i < 20; ++i)
            ASSERT_TRUE(s.launch_host("h", 0, 0, [&] {
                             if (std::this_thread::get_id() == caller) on_caller.fetch_add(1);
                             ran.fetch_add(1);
                             return Status();
                         }, {}).ok());
        ASSERT_TRUE(s.synchronize().ok());  // waits while the worker is occupied
        releaser.join();
    }
    EXPECT_EQ(ran.load(), 100);
    EXPECT_EQ(on_caller.load(), 0) << "the waiting thread ran device work";
}

}  // namespace

}  // namespace test_runtime_lifetime
