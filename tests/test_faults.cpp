// Fault injection and the runtime's error contract (device/faults.hpp, device/runtime.hpp):
// a failure while running poisons its stream until synchronize() reports it, travels through
// events recorded after it, and never hangs the host.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/thread_pool.hpp"
#include "device/runtime.hpp"
#include "test_util.hpp"

namespace test_faults {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::Status;
using loom::StatusCode;
using namespace loom::device;
using namespace loom::test;

std::unique_ptr<Device> make_device(const FaultPlan& faults, bool trace = true) {
    DeviceOptions o;
    o.faults = faults;
    o.trace = trace;
    return loom::test::make_device(o);
}

FaultPlan plan(std::string_view text) {
    FaultPlan p;
    Status st = parse_fault_plan(text, "test", p);
    LOOM_ASSERT_MSG(st.ok(), "{}", st.to_string());
    return p;
}

// Device-side state for one small inference: out = (x + y) * y, two kernels on one stream.
struct Pipeline {
    static constexpr int64_t n = 2048;
    std::vector<float> x, y, result;
    DeviceBuffer dx, dy, dsum, dout;

    Pipeline(Device& dev, uint32_t seed) {
        std::mt19937 rng(seed);
        x = random_floats(rng, n, -2.0f, 2.0f);
        y = random_floats(rng, n, -2.0f, 2.0f);
        result.assign(n, -12345.0f);  // a sentinel no computation produces
        dx = alloc(dev, n * 4);
        dy = alloc(dev, n * 4);
        dsum = alloc(dev, n * 4);
        dout = alloc(dev, n * 4);
    }
    // Submits upload, add, mul and readback; names end in `tag`.
    void submit(Stream& s, const std::string& tag) {
        result.assign(n, -12345.0f);
        ASSERT_TRUE(s.copy_h2d(fp(dx), pageable(x), "h2d x" + tag).ok());
        ASSERT_TRUE(s.copy_h2d(fp(dy), pageable(y), "h2d y" + tag).ok());
        ASSERT_TRUE(s.launch(binary_kernel(), binary_launch(dx, dy, dsum, n, 0), "add" + tag).ok());
        ASSERT_TRUE(s.launch(binary_kernel(), binary_launch(dsum, dy, dout, n, 2), "mul" + tag).ok());
        ASSERT_TRUE(s.copy_d2h(pageable_out(result), cfp(dout), "d2h" + tag).ok());
    }
    bool correct() const {
        for (int64_t i = 0; i < n; ++i)
            if (result[size_t(i)] != (x[size_t(i)] + y[size_t(i)]) * y[size_t(i)]) return false;
        return true;
    }
    bool untouched() const {
        for (float v : result)
            if (v != -12345.0f) return false;
        return true;
    }
};

// Task name -> whether the trace marks it failed.
std::map<std::string, bool> failed_by_name(const Device& dev) {
    std::map<std::string, bool> r;
    for (const auto& e : stream_slices(dev)) r[e["name"].get<std::string>()] = e["args"].value("failed", false);
    return r;
}

// Sets an environment variable for one scope and restores the previous state.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        ::setenv(name, value, 1);
    }
    ~ScopedEnv() {
        if (old_) ::setenv(name_, old_->c_str(), 1);
        else ::unsetenv(name_);
    }

private:
    const char* name_;
    std::optional<std::string> old_;
};

// ---- parse_fault_plan ----

TEST(FaultPlanParse, ReadsEveryKeyAndRoundTripsThroughToString) {
    FaultPlan p;
    ASSERT_TRUE(parse_fault_plan("launch=3,copy=5,alloc=2,stall=aicore:4", "--faults", p).ok());
    EXPECT_EQ(p.fail_launch, 3);
    EXPECT_EQ(p.fail_copy, 5);
    EXPECT_EQ(p.fail_alloc, 2);
    EXPECT_TRUE(p.stall);
    EXPECT_EQ(p.stall_engine, Engine::AICORE);
    EXPECT_EQ(p.stall_task, 4);
    EXPECT_TRUE(p.any());
    EXPECT_EQ(p.to_string(), "launch=3,copy=5,alloc=2,stall=aicore:4");
    FaultPlan q;
    ASSERT_TRUE(parse_fault_plan(p.to_string(), "--faults", q).ok());
    EXPECT_EQ(q.to_string(), p.to_string());
}

TEST(FaultPlanParse, EmptyTextIsNoFaults) {
    FaultPlan p;
    ASSERT_TRUE(parse_fault_plan("", "LOOM_FAULTS", p).ok());
    EXPECT_FALSE(p.any());
    EXPECT_EQ(p.to_string(), "");
    ASSERT_TRUE(parse_fault_plan(",,", "LOOM_FAULTS", p).ok());  // empty items are skipped
    EXPECT_FALSE(p.any());
}

TEST(FaultPlanParse, LaterKeysOverrideEarlierOnesAndThePlansFields) {
    FaultPlan p;
    p.fail_copy = 9;
    p.fail_alloc = 4;
    ASSERT_TRUE(parse_fault_plan("launch=1,launch=7,copy=2,stall=h2d:1,stall=media:3", "x", p).ok());
    EXPECT_EQ(p.fail_launch, 7);
    EXPECT_EQ(p.fail_copy, 2);
    EXPECT_EQ(p.fail_alloc, 4);  // untouched
    EXPECT_EQ(p.stall_engine, Engine::MEDIA);
    EXPECT_EQ(p.stall_task, 3);
}

TEST(FaultPlanParse, ErrorsNameTheSourceAndTheBadItem) {
    struct Case {
        const char* text;
        const char* message;
    } cases[] = {
        {"launch", "LOOM_FAULTS: 'launch' is not key=value (keys: launch, copy, alloc, stall)"},
        {"launch=0", "LOOM_FAULTS: launch=0 needs a positive count"},
        {"copy=-2", "LOOM_FAULTS: copy=-2 needs a positive count"},
        {"alloc=3x", "LOOM_FAULTS: alloc=3x needs a positive count"},
        {"alloc=", "LOOM_FAULTS: alloc= needs a positive count"},
        {"stall=aicore", "LOOM_FAULTS: stall=aicore must be ENGINE:N"},
        {"stall=gpu:1", "LOOM_FAULTS: stall=gpu:1 must be ENGINE:N (engines: h2d, d2h, d2d, aicore, media, vdec, venc, host_cpu)"},
        {"stall=aicore:0", "LOOM_FAULTS: stall=aicore:0 must be ENGINE:N"},
        {"launch=1,crash=2", "LOOM_FAULTS: unknown fault 'crash' (keys: launch, copy, alloc, stall)"},
    };
    for (const Case& c : cases) {
        FaultPlan p;
        Status st = parse_fault_plan(c.text, "LOOM_FAULTS", p);
        EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT) << c.text;
        EXPECT_EQ(st.message().rfind(c.message, 0), 0u) << c.text << " -> " << st.message();
    }
}

// ---- launch=N ----

TEST(FaultLaunch, FailsExactlyTheNthLaunchReportedBySynchronizeNamingTheKernel) {
    auto dev = make_device(plan("launch=2"));
    Pipeline p(*dev, 1);
    Stream s = dev->create_stream();
    p.submit(s, "");  // launch #1 is "add", #2 is "mul"
    Status st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("kernel 'mul'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("launch #2"), std::string::npos) << st.message();
    // "add" ran: its output is the real sum.
    for (int64_t i = 0; i < Pipeline::n; ++i)
        ASSERT_EQ(p.dsum.as<float>().host_data()[i], p.x[size_t(i)] + p.y[size_t(i)]) << i;
    auto failed = failed_by_name(*dev);
    EXPECT_FALSE(failed["add"]);
    EXPECT_TRUE(failed["mul"]);
}

TEST(FaultLaunch, LaterTasksOnTheStreamAreSkippedAndReported) {
    auto dev = make_device(plan("launch=1"));
    Pipeline p(*dev, 2);
    Stream s = dev->create_stream();
    p.submit(s, "");
    EXPECT_EQ(s.synchronize().code(), StatusCode::DEVICE_FAULT);
    EXPECT_TRUE(p.untouched()) << "the readback after the failed kernel must not run";
    auto failed = failed_by_name(*dev);
    EXPECT_FALSE(failed["h2d x"]);
    EXPECT_FALSE(failed["h2d y"]);
    EXPECT_TRUE(failed["add"]);
    EXPECT_TRUE(failed["mul"]);  // skipped
    EXPECT_TRUE(failed["d2h"]);  // skipped
}

TEST(FaultLaunch, AfterSynchronizeReportedTheErrorTheStreamWorksAgain) {
    auto dev = make_device(plan("launch=1"));
    Pipeline p(*dev, 3);
    Stream s = dev->create_stream();
    p.submit(s, " #1");
    Status first = s.synchronize();
    EXPECT_EQ(first.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(first.message().find("kernel 'add #1'"), std::string::npos) << first.message();
    EXPECT_TRUE(s.synchronize().ok()) << "the error is reported once";
    p.submit(s, " #2");
    Status second = s.synchronize();
    EXPECT_TRUE(second.ok()) << second.to_string();
    EXPECT_TRUE(p.correct());
    EXPECT_TRUE(dev->synchronize().ok());
}

TEST(FaultLaunch, DeviceSynchronizeReportsTheErrorOnceAndClearsIt) {
    auto dev = make_device(plan("launch=3"));
    Pipeline p(*dev, 4);
    Stream a = dev->create_stream(), b = dev->create_stream();
    p.submit(a, "");  // launches 1, 2
    Pipeline q(*dev, 5);
    q.submit(b, " on b");  // launches 3 (fails), 4
    Status st = dev->synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("kernel 'add on b'"), std::string::npos) << st.message();
    EXPECT_TRUE(dev->synchronize().ok());
    EXPECT_TRUE(p.correct());
}

TEST(FaultLaunch, OtherStreamsAreUnaffected) {
    auto dev = make_device(plan("launch=1"));
    Pipeline bad(*dev, 6), good(*dev, 7);
    Stream a = dev->create_stream(), b = dev->create_stream();
    bad.submit(a, " a");
    good.submit(b, " b");
    EXPECT_TRUE(b.synchronize().ok());
    EXPECT_TRUE(good.correct());
    EXPECT_EQ(a.synchronize().code(), StatusCode::DEVICE_FAULT);
}

TEST(FaultLaunch, AnEventRecordedBeforeTheFailureDoesNotCarryIt) {
    auto dev = make_device(plan("launch=2"));
    Pipeline p(*dev, 8), q(*dev, 9);
    Stream a = dev->create_stream(), b = dev->create_stream();
    Event before = dev->create_event();
    ASSERT_TRUE(a.copy_h2d(fp(p.dx), pageable(p.x)).ok());
    ASSERT_TRUE(a.launch(binary_kernel(), binary_launch(p.dx, p.dx, p.dsum, Pipeline::n, 0), "ok kernel").ok());
    ASSERT_TRUE(a.record(before).ok());
    ASSERT_TRUE(a.launch(binary_kernel(), binary_launch(p.dx, p.dx, p.dout, Pipeline::n, 2), "bad kernel").ok());
    ASSERT_TRUE(b.wait(before).ok());
    q.submit(b, " b");  // launches 3 and 4
    EXPECT_TRUE(b.synchronize().ok());
    EXPECT_TRUE(q.correct());
    EXPECT_TRUE(before.synchronize().ok());
    EXPECT_EQ(a.synchronize().code(), StatusCode::DEVICE_FAULT);
}

TEST(FaultLaunch, AnEventRecordedAfterTheFailureCarriesItToWaitingStreams) {
    auto dev = make_device(plan("launch=1"));
    Pipeline p(*dev, 10), q(*dev, 11), r(*dev, 12);
    Stream a = dev->create_stream(), b = dev->create_stream(), c = dev->create_stream();
    p.submit(a, " a");
    Event after = dev->create_event();
    ASSERT_TRUE(a.record(after).ok());
    ASSERT_TRUE(b.wait(after).ok());
    q.submit(b, " b");
    r.submit(c, " c");  // does not wait: unaffected
    Status sb = b.synchronize();
    EXPECT_FALSE(sb.ok());
    EXPECT_NE(sb.message().find("kernel 'add a'"), std::string::npos) << sb.message();
    EXPECT_TRUE(q.untouched()) << "b's work must be skipped, not run on inputs that never arrived";
    EXPECT_TRUE(c.synchronize().ok());
    EXPECT_TRUE(r.correct());
    Status se = after.synchronize();
    EXPECT_EQ(se.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(se.message().find("kernel 'add a'"), std::string::npos) << se.message();
    EXPECT_EQ(a.synchronize().code(), StatusCode::DEVICE_FAULT);
    // Both streams recover once they reported.
    q.submit(b, " b again");
    EXPECT_TRUE(b.synchronize().ok());
    EXPECT_TRUE(q.correct());
}

// Runs a failing kernel on stream a, records an event after it and makes stream b wait for it;
// `failure_ran_first` lets the failure complete before b waits. Returns b's synchronize status.
Status waiter_status(bool failure_ran_first) {
    // One worker. Early: kept busy until b's wait is submitted, so the failure cannot have
    // completed before it; late: the test waits for the failure first.
    std::atomic<bool> release{false};  // outlives the pool's worker
    loom::ThreadPool pool(1);
    if (!failure_ran_first) occupy_worker(pool, release);
    DeviceOptions o;
    o.pool = &pool;
    o.faults = plan("launch=1");
    auto dev = Device::create(preset_spec("edge"), o);
    LOOM_ASSERT(dev.ok());
    Status sb;
    {
        Pipeline p(**dev, 22);
        Stream a = (*dev)->create_stream(), b = (*dev)->create_stream();
        p.submit(a, " a");
        Event after = (*dev)->create_event();
        LOOM_ASSERT(a.record(after).ok());
        if (failure_ran_first) LOOM_ASSERT(!after.synchronize().ok());
        LOOM_ASSERT(b.wait(after).ok());
        release = true;
        sb = b.synchronize();
        (void)a.synchronize();
    }
    release = true;
    return sb;
}

TEST(FaultLaunch, AWaitingStreamGetsTheSameErrorWhetherOrNotTheFailureHadRunYet) {
    // runtime.hpp: "An event recorded after a failure carries it to waiting streams." What the
    // waiting stream reports must not depend on host timing.
    Status early = waiter_status(false), late = waiter_status(true);
    EXPECT_EQ(early.code(), StatusCode::DEVICE_FAULT) << early.to_string();
    EXPECT_EQ(late.code(), StatusCode::DEVICE_FAULT) << late.to_string();
    EXPECT_NE(early.message().find("kernel 'add a'"), std::string::npos) << early.message();
    EXPECT_NE(late.message().find("kernel 'add a'"), std::string::npos) << late.message();
    EXPECT_EQ(early.message(), late.message());
}

// ---- copy=N, alloc=N ----

TEST(FaultCopy, FailsExactlyTheNthCopyInAnyDirectionNamingIt) {
    auto dev = make_device(plan("copy=3"));
    Pipeline p(*dev, 15);
    Stream s = dev->create_stream();
    p.submit(s, "");  // copies: h2d x (1), h2d y (2), d2h (3)
    Status st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("DMA error in d2h copy 'd2h'"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("copy #3"), std::string::npos) << st.message();
    EXPECT_TRUE(p.untouched());
    // The kernels before the failed copy ran.
    for (int64_t i = 0; i < Pipeline::n; ++i) {
        float want = (p.x[size_t(i)] + p.y[size_t(i)]) * p.y[size_t(i)];
        ASSERT_EQ(p.dout.as<float>().host_data()[i], want) << i;
    }
    p.submit(s, " again");
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_TRUE(p.correct());
}

TEST(FaultAlloc, TheNthAllocationFailsAtOnceAsInjectedOutOfMemory) {
    auto dev = make_device(plan("alloc=2"), false);
    auto first = dev->malloc(4096, "first");
    ASSERT_TRUE(first.ok());
    auto second = dev->malloc(4096, "second");
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_NE(second.status().message().find("injected"), std::string::npos) << second.status().message();
    EXPECT_NE(second.status().message().find("#2"), std::string::npos) << second.status().message();
    EXPECT_NE(second.status().message().find("second"), std::string::npos) << second.status().message();
    EXPECT_EQ(dev->stats().memory_used, 4096u);
    auto third = dev->malloc(4096, "third");
    EXPECT_TRUE(third.ok());
    EXPECT_TRUE(dev->synchronize().ok()) << "an allocation failure poisons no stream";
}

// ---- stall=ENGINE:N ----

TEST(FaultStall, StalledKernelTimesOutPromptlyAndHoldsTheEngineForTheWatchdog) {
    auto dev = make_device(plan("stall=aicore:2"));
    const SimTime watchdog = sim_from_ns(dev->spec().watchdog_ms * 1e6);
    Pipeline p(*dev, 16), q(*dev, 17);
    Stream a = dev->create_stream(), b = dev->create_stream();
    auto wall0 = std::chrono::steady_clock::now();
    p.submit(a, " a");  // aicore task #2 is "mul a"
    Event stalled_end = dev->create_event();
    ASSERT_TRUE(a.record(stalled_end).ok());
    q.submit(b, " b");  // independent, but needs the AI cores "mul a" holds
    Status st = a.synchronize();
    double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    EXPECT_LT(wall_s, 5.0) << "a stalled engine must not hang the host";
    EXPECT_EQ(st.code(), StatusCode::DEVICE_TIMEOUT);
    EXPECT_NE(st.message().find("watchdog"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("'mul a'"), std::string::npos) << st.message();
    EXPECT_TRUE(p.untouched());
    EXPECT_TRUE(b.synchronize().ok());
    EXPECT_TRUE(q.correct());

    double mul_start = -1, mul_dur = -1, b_add_start = -1;
    for (const auto& e : stream_slices(*dev)) {
        if (e["name"] == "mul a") mul_start = e["ts"], mul_dur = e["dur"];
        if (e["name"] == "add b") b_add_start = e["ts"];
    }
    EXPECT_NEAR(mul_dur, sim_to_us(watchdog), 1e-6);
    // "mul a" holds every core it needs for the whole watchdog period; "add b" needs all of
    // them too (it is the same shape), so it starts after the stall.
    EXPECT_GE(b_add_start, mul_start + mul_dur - 1e-6);
    EXPECT_GE(dev->stats().engines[size_t(Engine::AICORE)].busy, watchdog);
    EXPECT_GE(dev->stats().host_now, watchdog);
    // The stream works again once the timeout was reported.
    p.submit(a, " a again");
    EXPECT_TRUE(a.synchronize().ok());
    EXPECT_TRUE(p.correct());
}

TEST(FaultStall, StalledCopyEngineTimesOut) {
    auto dev = make_device(plan("stall=h2d:1"));
    Pipeline p(*dev, 18);
    Stream s = dev->create_stream();
    p.submit(s, "");
    Status st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_TIMEOUT);
    EXPECT_NE(st.message().find("engine h2d stalled on task 'h2d x'"), std::string::npos) << st.message();
    EXPECT_TRUE(p.untouched());
}

// ---- LOOM_FAULTS ----

TEST(FaultEnv, LoomFaultsIsAppliedOnTopOfTheOptions) {
    ScopedEnv env("LOOM_FAULTS", "launch=1");
    DeviceOptions o;
    o.faults.fail_copy = 5;  // merged with the environment: both apply
    ASSERT_TRUE(apply_fault_environment(o.faults).ok());
    auto dev = Device::create(preset_spec("edge"), o);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    Pipeline p(**dev, 19);
    Stream s = (*dev)->create_stream();
    p.submit(s, " #1");  // copies 1-3, launches 1-2
    Status st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("kernel 'add #1'"), std::string::npos) << st.message();
    p.submit(s, " #2");  // copies 4-6
    st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("copy 'h2d y #2'"), std::string::npos) << st.message();
    p.submit(s, " #3");
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_TRUE(p.correct());
}

TEST(FaultEnv, LoomFaultsOverridesTheSameKeyInTheOptions) {
    ScopedEnv env("LOOM_FAULTS", "launch=2");
    DeviceOptions o;
    o.faults.fail_launch = 1;
    ASSERT_TRUE(apply_fault_environment(o.faults).ok());
    auto dev = Device::create(preset_spec("edge"), o);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    Pipeline p(**dev, 20);
    Stream s = (*dev)->create_stream();
    p.submit(s, "");
    Status st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("kernel 'mul'"), std::string::npos) << st.message();
}

TEST(FaultEnv, MalformedLoomFaultsIsInvalidArgumentNamingTheVariable) {
    ScopedEnv env("LOOM_FAULTS", "launch=soon");
    FaultPlan plan;
    Status st = apply_fault_environment(plan);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("LOOM_FAULTS"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("launch=soon"), std::string::npos) << st.message();
}

// The library reads no environment: a device's fault plan is the one it was given, so two
// devices in one process keep their own (the programs apply LOOM_FAULTS themselves).
TEST(FaultEnv, DeviceCreateIgnoresLoomFaultsAndEachDeviceKeepsItsOwnPlan) {
    ScopedEnv env("LOOM_FAULTS", "launch=1");
    DeviceOptions faulty;
    faulty.faults.fail_launch = 2;
    auto a = Device::create(preset_spec("edge"), faulty);
    auto b = Device::create(preset_spec("edge"), {});
    ASSERT_TRUE(a.ok() && b.ok());
    Pipeline pa(**a, 22), pb(**b, 23);
    Stream sa = (*a)->create_stream(), sb = (*b)->create_stream();
    pa.submit(sa, "");
    pb.submit(sb, "");
    Status st = sa.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("kernel 'mul'"), std::string::npos) << st.message();  // the 2nd, not the env's 1st
    EXPECT_TRUE(sb.synchronize().ok());
    EXPECT_TRUE(pb.correct());
}

TEST(FaultEnv, UnsetLoomFaultsInjectsNothing) {
    ScopedEnv env("LOOM_FAULTS", "");
    ::unsetenv("LOOM_FAULTS");
    FaultPlan plan;
    ASSERT_TRUE(apply_fault_environment(plan).ok());
    EXPECT_FALSE(plan.any());
    auto dev = Device::create(preset_spec("edge"), {});
    ASSERT_TRUE(dev.ok());
    Pipeline p(**dev, 21);
    Stream s = (*dev)->create_stream();
    p.submit(s, "");
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_TRUE(p.correct());
}

}  // namespace

}  // namespace test_faults
