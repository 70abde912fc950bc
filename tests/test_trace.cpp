// Chrome trace / Perfetto output (device/trace.cpp, Device::write_trace): well-formed events,
// named lanes, non-overlapping engine slices, matched flow arrows and a memory counter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "device/runtime.hpp"
#include "test_util.hpp"

namespace test_trace {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::StatusCode;
using nlohmann::json;
using namespace loom::device;
using namespace loom::test;

std::unique_ptr<Device> make_device(bool trace, size_t trace_tasks_max = size_t{1} << 20) {
    DeviceOptions o;
    o.trace = trace;
    o.trace_tasks_max = trace_tasks_max;
    return loom::test::make_device(o);
}

json read_json(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return json::parse(f);
}

// Two streams: a producer uploads, runs a 2-core matmul and records an event; a consumer uploads
// a bias, waits for the event, copies the product on the D2D engine, adds the bias on one core
// and reads back. Buffers are freed at the end.
struct TracedRun {
    std::unique_ptr<Device> dev;
    json doc;
    std::vector<float> result;
};

TracedRun traced_run(const std::string& path) {
    TracedRun r;
    r.dev = make_device(true);
    Device& dev = *r.dev;
    const int64_t m = 64, k = 96, n = 64;
    std::mt19937 rng(31);
    std::vector<float> a = random_floats(rng, size_t(m * k)), b = random_floats(rng, size_t(k * n)),
                       bias = random_floats(rng, size_t(m * n));
    r.result.assign(size_t(m * n), 0.0f);
    {
        DeviceBuffer da = alloc(dev, a.size() * 4), db = alloc(dev, b.size() * 4), dc = alloc(dev, r.result.size() * 4),
                     dbias = alloc(dev, bias.size() * 4), dout = alloc(dev, r.result.size() * 4),
                     dcopy = alloc(dev, r.result.size() * 4);
        Stream producer = dev.create_stream(), consumer = dev.create_stream();
        LOOM_ASSERT(producer.copy_h2d(fp(da), pageable(a), "h2d a").ok());
        LOOM_ASSERT(producer.copy_h2d(fp(db), pageable(b), "h2d b").ok());
        LOOM_ASSERT(producer.launch(matmul_kernel(), matmul_launch(da, db, dc, m, k, n), "matmul").ok());
        Event ev = dev.create_event();
        LOOM_ASSERT(producer.record(ev).ok());
        LOOM_ASSERT(consumer.copy_h2d(fp(dbias), pageable(bias), "h2d bias").ok());
        LOOM_ASSERT(consumer.wait(ev).ok());
        LOOM_ASSERT(consumer.copy_d2d(fp(dcopy), cfp(dc), "d2d c").ok());
        VectorSchedule one_core;
        one_core.ub_tile = 1024;
        one_core.cores = 1;
        LOOM_ASSERT(
            consumer.launch(binary_kernel(), binary_launch(dcopy, dbias, dout, m * n, 0, one_core), "add bias").ok());
        LOOM_ASSERT(consumer.copy_d2h(pageable_out(r.result), cfp(dout), "d2h").ok());
        LOOM_ASSERT(dev.synchronize().ok());
    }
    loom::Status st = dev.write_trace(path);
    LOOM_ASSERT_MSG(st.ok(), "{}", st.to_string());
    r.doc = read_json(path);
    return r;
}

const json* find_slice(const json& doc, int pid, const std::string& name) {
    for (const auto& e : doc["traceEvents"])
        if (e["ph"] == "X" && e["pid"] == pid && e["name"] == name) return &e;
    return nullptr;
}

TEST(Trace, WriteTraceWithoutTracingIsFailedPrecondition) {
    auto dev = make_device(false);
    TempDir dir;
    std::string path = dir.file("t.json");
    loom::Status st = dev->write_trace(path);
    EXPECT_EQ(st.code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
    EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Trace, WriteTraceToAnUnwritablePathIsIoError) {
    auto dev = make_device(true);
    TempDir dir;
    EXPECT_EQ(dev->write_trace(dir.file("no_such_dir/t.json")).code(), StatusCode::IO_ERROR);
}

TEST(Trace, FileHasTraceEventsAndNamesTheDevice) {
    TempDir dir;
    TracedRun r = traced_run(dir.file("t.json"));
    ASSERT_TRUE(r.doc.contains("traceEvents"));
    ASSERT_TRUE(r.doc["traceEvents"].is_array());
    EXPECT_FALSE(r.doc["traceEvents"].empty());
    EXPECT_EQ(r.doc["otherData"]["device"], "edge");
    EXPECT_EQ(r.doc["otherData"]["spec_hash"], r.dev->spec().to_json()["derived"]["spec_hash"]);
    EXPECT_EQ(r.doc["otherData"]["tasks_dropped"], 0);
    EXPECT_EQ(r.doc, json::parse(r.dev->trace_json())) << "write_trace writes trace_json()";
}

TEST(Trace, EveryCompleteEventHasNameTimestampDurationPidAndTid) {
    TempDir dir;
    TracedRun r = traced_run(dir.file("t.json"));
    auto xs = events_with_ph(r.doc, "X");
    // 7 tasks on the stream lanes; the matmul covers 2 engine lanes, the rest 1.
    size_t on_streams = 0, on_engines = 0;
    for (const auto& e : xs) {
        ASSERT_TRUE(e.contains("name") && e["name"].is_string()) << e;
        ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e;
        ASSERT_TRUE(e.contains("dur") && e["dur"].is_number()) << e;
        ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer()) << e;
        ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer()) << e;
        EXPECT_GE(e["dur"].get<double>(), 0.0) << e;
        EXPECT_GE(e["ts"].get<double>(), 0.0) << e;
        on_streams += e["pid"] == kPidStreams;
        on_engines += e["pid"] == kPidEngines;
    }
    EXPECT_EQ(on_streams, 7u);
    EXPECT_EQ(on_engines, 8u);
    const json* mm = find_slice(r.doc, kPidStreams, "matmul");
    ASSERT_NE(mm, nullptr);
    EXPECT_GT((*mm)["args"]["cycles"]["total"].get<double>(), 0.0);
    EXPECT_EQ((*mm)["args"]["cycles"]["cores"], 2);
    const json* h2d = find_slice(r.doc, kPidStreams, "h2d a");
    ASSERT_NE(h2d, nullptr);
    EXPECT_EQ((*h2d)["args"]["bytes"], 64 * 96 * 4);
}

TEST(Trace, MetadataNamesEveryEngineLaneAndStream) {
    TempDir dir;
    TracedRun r = traced_run(dir.file("t.json"));
    std::map<int, std::string> engine_lanes, stream_lanes;
    for (const auto& e : events_with_ph(r.doc, "M")) {
        if (e["name"] != "thread_name") continue;
        auto& lanes = e["pid"] == kPidEngines ? engine_lanes : stream_lanes;
        lanes[e["tid"].get<int>()] = e["args"]["name"];
    }
    std::set<std::string> names;
    for (const auto& [tid, name] : engine_lanes) names.insert(name);
    EXPECT_EQ(names, (std::set<std::string>{"aicore0", "aicore1", "h2d", "d2h", "d2d", "media", "vdec", "venc",
                                              "host_cpu"}));
    EXPECT_EQ(engine_lanes.size(), kEngineCount + 1) << "one lane per AI core plus one per other engine";
    std::set<std::string> streams;
    for (const auto& [tid, name] : stream_lanes) streams.insert(name);
    EXPECT_EQ(streams, (std::set<std::string>{"stream 0", "stream 1"}));
    // Every slice sits on a named lane.
    for (const auto& e : events_with_ph(r.doc, "X")) {
        const auto& lanes = e["pid"] == kPidEngines ? engine_lanes : stream_lanes;
        EXPECT_TRUE(lanes.count(e["tid"].get<int>())) << e;
    }
    // The matmul runs on both AI cores; the one-core add on one of them.
    auto lanes_of = [&](const std::string& task) {
        std::set<std::string> s;
        for (const auto& e : events_with_ph(r.doc, "X"))
            if (e["pid"] == kPidEngines && e["name"] == task) s.insert(engine_lanes[e["tid"].get<int>()]);
        return s;
    };
    EXPECT_EQ(lanes_of("matmul"), (std::set<std::string>{"aicore0", "aicore1"}));
    EXPECT_EQ(lanes_of("add bias").size(), 1u);
    EXPECT_EQ(lanes_of("h2d bias"), (std::set<std::string>{"h2d"}));
    EXPECT_EQ(lanes_of("d2h"), (std::set<std::string>{"d2h"}));
    EXPECT_EQ(lanes_of("d2d c"), (std::set<std::string>{"d2d"}));
}

TEST(Trace, SlicesOnOneEngineLaneNeverOverlap) {
    TempDir dir;
    TracedRun r = traced_run(dir.file("t.json"));
    std::map<int, std::vector<std::pair<double, double>>> by_lane;
    for (const auto& e : events_with_ph(r.doc, "X"))
        if (e["pid"] == kPidEngines)
            by_lane[e["tid"].get<int>()].emplace_back(e["ts"].get<double>(), e["dur"].get<double>());
    EXPECT_GE(by_lane.size(), 4u);
    for (auto& [tid, slices] : by_lane) {
        std::sort(slices.begin(), slices.end());
        for (size_t i = 1; i < slices.size(); ++i)
            EXPECT_GE(slices[i].first, slices[i - 1].first + slices[i - 1].second - 1e-6)
                << "lane " << tid << " slice " << i;
    }
}

TEST(Trace, EveryFlowStartHasAMatchingFinish) {
    TempDir dir;
    TracedRun r = traced_run(dir.file("t.json"));
    std::map<uint64_t, int> starts, finishes;
    for (const auto& e : events_with_ph(r.doc, "s")) ++starts[e["id"].get<uint64_t>()];
    for (const auto& e : events_with_ph(r.doc, "f")) ++finishes[e["id"].get<uint64_t>()];
    EXPECT_FALSE(starts.empty());
    EXPECT_EQ(starts, finishes);
    for (const auto& [id, n] : starts) EXPECT_EQ(n, 1) << "flow id " << id << " is reused";
}

TEST(Trace, CrossStreamEventWaitProducesAFlowFromProducerToConsumer) {
    TempDir dir;
    TracedRun r = traced_run(dir.file("t.json"));
    const json* mm = find_slice(r.doc, kPidStreams, "matmul");
    const json* copy = find_slice(r.doc, kPidStreams, "d2d c");
    ASSERT_TRUE(mm && copy);
    EXPECT_NE((*mm)["tid"], (*copy)["tid"]) << "producer and consumer are on different streams";
    std::set<int> mm_lanes;
    int copy_lane = -1;
    for (const auto& e : events_with_ph(r.doc, "X")) {
        if (e["pid"] != kPidEngines) continue;
        if (e["name"] == "matmul") mm_lanes.insert(e["tid"].get<int>());
        if (e["name"] == "d2d c") copy_lane = e["tid"];
    }
    std::map<uint64_t, json> starts;
    for (const auto& e : events_with_ph(r.doc, "s")) starts[e["id"].get<uint64_t>()] = e;
    bool found = false;
    for (const auto& f : events_with_ph(r.doc, "f")) {
        if (f["tid"] != copy_lane || f["ts"] != (*copy)["ts"]) continue;
        const json& s = starts[f["id"].get<uint64_t>()];
        // The arrow starts inside the matmul's slice, on one of its lanes.
        if (mm_lanes.count(s["tid"].get<int>()) && s["ts"] == (*mm)["ts"]) found = true;
    }
    EXPECT_TRUE(found) << "no flow from the matmul (stream 0) to the copy that waited for it (stream 1)";
    EXPECT_GE((*copy)["ts"].get<double>(), (*mm)["ts"].get<double>() + (*mm)["dur"].get<double>() - 1e-6);
}

TEST(Trace, TheWaitedForComputationIsCorrect) {
    TempDir dir;
    TracedRun r = traced_run(dir.file("t.json"));
    // Same seed and order as traced_run: result = A x B + bias.
    const int64_t m = 64, k = 96, n = 64;
    std::mt19937 rng(31);
    std::vector<float> a = random_floats(rng, size_t(m * k)), b = random_floats(rng, size_t(k * n)),
                       bias = random_floats(rng, size_t(m * n));
    std::vector<double> want = matmul_reference(a, b, nullptr, m, n, k);
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(want[i] + bias[i] - r.result[i]));
    EXPECT_LT(err, 1e-4);
}

TEST(Trace, DeviceMemoryCounterRisesAndFallsWithMallocAndFree) {
    auto dev = make_device(true);
    {
        DeviceBuffer a = alloc(*dev, 4096);
        DeviceBuffer b = alloc(*dev, 8192);
        a.reset();
        DeviceBuffer c = alloc(*dev, 1000);  // rounded to 1024
    }
    json doc = json::parse(dev->trace_json());
    std::vector<uint64_t> used;
    double last_ts = -1;
    for (const auto& e : doc["traceEvents"]) {
        if (e["ph"] != "C" || e["name"] != "device memory") continue;
        EXPECT_GE(e["ts"].get<double>(), last_ts);
        last_ts = e["ts"];
        used.push_back(e["args"]["used_bytes"]);
    }
    EXPECT_EQ(used, (std::vector<uint64_t>{4096, 12288, 8192, 9216, 8192, 0}));
}

TEST(Trace, RecordsBeyondTheLimitAreCountedNotKept) {
    auto dev = make_device(true, 3);
    std::mt19937 rng(2);
    std::vector<float> x = random_floats(rng, 256);
    DeviceBuffer d = alloc(*dev, x.size() * 4);
    Stream s = dev->create_stream();
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(s.copy_h2d(fp(d), pageable(x), "copy " + std::to_string(i)).ok());
    ASSERT_TRUE(s.synchronize().ok());
    EXPECT_EQ(dev->stats().trace_dropped, 2u);
    json doc = json::parse(dev->trace_json());
    EXPECT_EQ(doc["otherData"]["tasks_dropped"], 2);
    size_t kept = 0;
    for (const auto& e : events_with_ph(doc, "X")) kept += e["pid"] == kPidStreams;
    EXPECT_EQ(kept, 3u);
    EXPECT_NE(find_slice(doc, kPidStreams, "copy 2"), nullptr);
    EXPECT_EQ(find_slice(doc, kPidStreams, "copy 3"), nullptr);
}

TEST(Trace, FailedTasksAreMarkedFailed) {
    DeviceOptions o;
    o.trace = true;
    ASSERT_TRUE(parse_fault_plan("copy=2", "test", o.faults).ok());
    auto dev = Device::create(preset_spec("edge"), o);
    ASSERT_TRUE(dev.ok());
    std::mt19937 rng(3);
    std::vector<float> x = random_floats(rng, 256);
    DeviceBuffer d = alloc(**dev, x.size() * 4);
    Stream s = (*dev)->create_stream();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.copy_h2d(fp(d), pageable(x), "copy " + std::to_string(i)).ok());
    EXPECT_EQ(s.synchronize().code(), StatusCode::DEVICE_FAULT);
    json doc = json::parse((*dev)->trace_json());
    EXPECT_FALSE((*find_slice(doc, kPidStreams, "copy 0"))["args"].contains("failed"));
    EXPECT_EQ((*find_slice(doc, kPidStreams, "copy 1"))["args"]["failed"], true);
    EXPECT_EQ((*find_slice(doc, kPidStreams, "copy 2"))["args"]["failed"], true);
}

}  // namespace

}  // namespace test_trace
