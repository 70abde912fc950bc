// Runtime contract (device/runtime.hpp, device/memory.hpp): device memory, stream order, events
// across streams and a simulated timeline that depends only on what was submitted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/buffer.hpp"
#include "common/thread_pool.hpp"
#include "compiler/graph.hpp"
#include "device/memory.hpp"
#include "device/runtime.hpp"
#include "test_util.hpp"

namespace test_runtime {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::device;
using namespace loom::test;

PinnedBuffer<float> pinned_copy(const std::vector<float>& v) {
    PinnedBuffer<float> p(v.size());
    std::memcpy(p.data(), v.data(), v.size() * sizeof(float));
    return p;
}

// Max |got - want| over max |want|: the relative error of the whole output.
double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
    double scale = 0, err = 0;
    for (double w : want) scale = std::max(scale, std::abs(w));
    for (size_t i = 0; i < want.size(); ++i) err = std::max(err, std::abs(double(got[i]) - want[i]));
    return err / scale;
}

SimTime kernel_duration(const KernelDef& k, const KernelLaunch& l, const DeviceSpec& s) {
    auto c = k.cost(l, s);
    LOOM_ASSERT_MSG(c.ok(), "{}", c.status().to_string());
    return sim_from_ns(c->total / s.aicore_clock_ghz);
}

SimTime copy_duration(const DeviceSpec& s, size_t bytes, bool pinned) {
    double gbps = pinned ? s.host_link_bandwidth_gbps : s.host_link_pageable_bandwidth_gbps;
    return sim_from_ns(s.host_link_latency_us * 1e3 + static_cast<double>(bytes) / gbps);
}

// One task's simulated interval, recovered in picoseconds from the trace's per-stream slices.
struct Slice {
    SimTime start = 0, end = 0;
    uint32_t stream = 0;
};

std::map<std::string, Slice> slices_by_name(const Device& dev) {
    std::map<std::string, Slice> out;
    for (const auto& e : stream_slices(dev)) {
        Slice s;
        s.start = std::llround(e["args"]["sim_start_us"].get<double>() * 1e6);
        s.end = s.start + std::llround(e["args"]["sim_dur_us"].get<double>() * 1e6);
        s.stream = e["args"]["stream"].get<uint32_t>();
        LOOM_ASSERT_MSG(!out.count(e["name"]), "task name {} is not unique", e["name"].get<std::string>());
        out[e["name"].get<std::string>()] = s;
    }
    return out;
}

DeviceSpec small_memory_spec() {
    auto s = parse_device_spec("base = \"edge\"\n[memory]\ncapacity_mib = 1\n", "small.toml");
    LOOM_ASSERT_MSG(s.ok(), "{}", s.status().to_string());
    return *s;
}

// ---- Arena ----

// Whether the kernel may back the mapping holding `p` with transparent huge pages (the
// "THPeligible" field of /proc/self/smaps); -1 when the mapping or the field is not found.
int thp_eligible(const void* p) {
    std::ifstream smaps("/proc/self/smaps");
    const auto at = reinterpret_cast<uintptr_t>(p);
    std::string line;
    bool inside = false;
    while (std::getline(smaps, line)) {
        unsigned long lo = 0, hi = 0;
        char perms[5] = {};
        if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) == 3) {  // a mapping's first line
            inside = at >= lo && at < hi;
            continue;
        }
        int v = 0;
        if (inside && std::sscanf(line.c_str(), "THPeligible: %d", &v) == 1) return v;
    }
    return -1;
}

// Large buffers (device allocations, host tensors) are 2 MiB aligned and advised for
// transparent huge pages where the kernel gives them on request; small ones stay 64-byte
// aligned and unadvised.
TEST(Buffers, LargeOnesAreAlignedAndAdvisedForHugePages) {
    // The pool's copy: every byte, in runs and a tail, and below the threshold.
    ThreadPool pool(2);
    for (size_t n : {size_t{1000}, (size_t{9} << 20) + 777}) {
        std::vector<uint8_t> from(n), to(n);
        for (size_t i = 0; i < n; ++i) from[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
        loom::copy_buffer(to.data(), from.data(), n, pool);
        EXPECT_EQ(to, from) << n;
    }
    void* small = loom::allocate_buffer(1000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 64, 0u);
    loom::free_buffer(small, 1000);
    auto dev = make_device();
    auto big = dev->malloc(loom::kHugeBufferBytes + 12345, "big");
    ASSERT_TRUE(big.ok()) << big.status().to_string();
    const loom::compiler::HostTensor t(DType::F32, {1, 3, 2048, 2048});  // 48 MiB
    for (const void* p : {static_cast<const void*>(big->as<uint8_t>().host_data()), t.data()}) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (2u << 20), 0u);
        std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
        std::string modes((std::istreambuf_iterator<char>(mode)), {});
        if (modes.find("[never]") != std::string::npos || modes.empty() || kSanitized) continue;
        EXPECT_EQ(thp_eligible(p), 1) << modes;
    }
}

TEST(Arena, AlignmentRoundsEveryRequestUp) {
    Arena a(1 << 16, 512);
    auto x = a.allocate(1);
    auto y = a.allocate(513);
    auto z = a.allocate(0);  // a zero-byte request still gets a distinct block
    ASSERT_TRUE(x.ok() && y.ok() && z.ok());
    EXPECT_EQ(*x % 512, 0u);
    EXPECT_EQ(*y % 512, 0u);
    EXPECT_EQ(*z % 512, 0u);
    EXPECT_NE(*x, *z);
    EXPECT_EQ(a.used(), 512u + 1024u + 512u);
    EXPECT_EQ(a.allocations(), 3u);
}

TEST(Arena, FreeingNeighboursCoalescesIntoOneBlock) {
    Arena a(4096, 256);
    auto x = a.allocate(1024), y = a.allocate(1024), z = a.allocate(1024);
    ASSERT_TRUE(x.ok() && y.ok() && z.ok());
    EXPECT_EQ(a.largest_free(), 1024u);  // the tail after z
    a.release(*y);
    EXPECT_EQ(a.largest_free(), 1024u);  // y's hole and the tail are not adjacent
    a.release(*x);
    EXPECT_EQ(a.largest_free(), 2048u);  // x and y merged
    a.release(*z);
    EXPECT_EQ(a.largest_free(), 4096u);  // everything merged again
    EXPECT_EQ(a.used(), 0u);
    EXPECT_EQ(a.allocations(), 0u);
    auto all = a.allocate(4096);  // the merged block serves a full-capacity request
    ASSERT_TRUE(all.ok());
    EXPECT_EQ(*all, 0u);
}

TEST(Arena, BestFitPicksTheSmallestBlockThatHolds) {
    Arena a(8192, 256);
    auto h1 = a.allocate(2048), k1 = a.allocate(256), h2 = a.allocate(512), k2 = a.allocate(256);
    ASSERT_TRUE(h1.ok() && k1.ok() && h2.ok() && k2.ok());
    a.release(*h1);  // a 2048 hole at the front
    a.release(*h2);  // a 512 hole in the middle; the 5120 tail is free too
    auto r = a.allocate(400);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, *h2);  // the 512 hole, not the first or the largest block
    auto r2 = a.allocate(1500);
    ASSERT_TRUE(r2.ok());
    EXPECT_EQ(*r2, *h1);  // the 2048 hole beats the larger tail
}

TEST(Arena, PeakTracksTheHighWaterMark) {
    Arena a(1 << 20, 512);
    auto x = a.allocate(4096), y = a.allocate(8192);
    ASSERT_TRUE(x.ok() && y.ok());
    a.release(*x);
    a.release(*y);
    auto z = a.allocate(512);
    ASSERT_TRUE(z.ok());
    EXPECT_EQ(a.used(), 512u);
    EXPECT_EQ(a.peak(), 4096u + 8192u);
}

TEST(Arena, OutOfMemoryNamesRequestFreeTotalAndLargestFreeBlock) {
    Arena a(4096, 256);
    auto w = a.allocate(1024), x = a.allocate(1024), y = a.allocate(1024), z = a.allocate(1024);
    ASSERT_TRUE(w.ok() && x.ok() && y.ok() && z.ok());
    a.release(*x);
    a.release(*z);  // 2048 free in two 1024 blocks
    auto r = a.allocate(1500);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_EQ(r.status().message(),
              "out of device memory: request of 1500 bytes, 2048 of 4096 bytes free, largest free block 1024 bytes");
}

TEST(Arena, RequestBeyondCapacityNamesRequestFreeTotalAndLargestFreeBlock) {
    // memory.hpp: OUT_OF_DEVICE_MEMORY names "the request, the free total and the largest free
    // block" -- also when the request exceeds the whole capacity.
    Arena a(4096, 256);
    auto w = a.allocate(1024);
    ASSERT_TRUE(w.ok());
    auto r = a.allocate(10000);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    const std::string m = r.status().message();
    EXPECT_NE(m.find("10000 bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("3072 of 4096 bytes free"), std::string::npos) << m;
    EXPECT_NE(m.find("largest free block 3072 bytes"), std::string::npos) << m;
}

// ---- Device memory ----

TEST(DeviceMemory, MallocBeyondCapacityFailsWithoutAllocatingHostMemory) {
    auto dev = make_device({}, small_memory_spec());
    EXPECT_EQ(dev->stats().memory_capacity, size_t{1} << 20);
    auto r = dev->malloc(size_t{2} << 20, "activations");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_NE(r.status().message().find("activations: "), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(std::to_string(size_t{2} << 20)), std::string::npos) << r.status().message();
    // A petabyte request would throw std::bad_alloc (or abort under ASan) if host memory were
    // reserved before the arena said no.
    auto huge = dev->malloc(size_t{1} << 50);
    ASSERT_FALSE(huge.ok());
    EXPECT_EQ(huge.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_EQ(dev->stats().memory_used, 0u);
}

TEST(DeviceMemory, MallocBeyondCapacityNamesTheLargestFreeBlock) {
    // runtime.hpp, Device::malloc: "OUT_OF_DEVICE_MEMORY names the request, the free total and
    // the largest free block when it does not fit".
    auto dev = make_device({}, small_memory_spec());
    DeviceBuffer keep = alloc(*dev, 256 << 10);
    auto r = dev->malloc(size_t{2} << 20);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("largest free block 786432 bytes"), std::string::npos)
        << r.status().message();
}

TEST(DeviceMemory, FragmentedMallocNamesRequestAndLargestFreeBlock) {
    auto dev = make_device({}, small_memory_spec());
    std::vector<DeviceBuffer> quarters;
    for (int i = 0; i < 4; ++i) quarters.push_back(alloc(*dev, 256 << 10));
    quarters[1].reset();
    quarters[3].reset();
    auto r = dev->malloc(300 << 10, "big");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_EQ(r.status().message(), "big: out of device memory: request of 307200 bytes, 524288 of 1048576 bytes "
                                    "free, largest free block 262144 bytes");
}

TEST(DeviceMemory, FreeingReturnsMemoryAndPeakIsKept) {
    auto dev = make_device({}, small_memory_spec());
    {
        DeviceBuffer small = alloc(*dev, 1000);  // rounded up to the 512-byte alignment
        EXPECT_EQ(dev->stats().memory_used, 1024u);
        small.reset();
        EXPECT_FALSE(small.valid());
        EXPECT_EQ(dev->stats().memory_used, 0u);
        DeviceBuffer a = alloc(*dev, 512 << 10), b = alloc(*dev, 512 << 10);
        EXPECT_EQ(dev->stats().memory_used, size_t{1} << 20);
        EXPECT_EQ(dev->malloc(1).status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
        a.reset();
        EXPECT_EQ(dev->stats().memory_used, 512u << 10);
        DeviceBuffer c = alloc(*dev, 512 << 10);  // fits only because a was returned
        EXPECT_EQ(c.addr(), b.addr() - (512 << 10));
    }
    DeviceStats s = dev->stats();
    EXPECT_EQ(s.memory_used, 0u);
    EXPECT_EQ(s.memory_peak, size_t{1} << 20);
    EXPECT_EQ(s.memory_capacity, size_t{1} << 20);
}

TEST(DeviceMemory, MovedBufferFreesOnceFromItsNewOwner) {
    auto dev = make_device();
    DeviceBuffer a = alloc(*dev, 4096);
    uint64_t addr = a.addr();
    DeviceBuffer b = std::move(a);
    EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
    EXPECT_EQ(b.addr(), addr);
    EXPECT_EQ(dev->stats().memory_used, 4096u);
    b = DeviceBuffer();
    EXPECT_EQ(dev->stats().memory_used, 0u);
}

TEST(DeviceMemory, CopyIntoAFreedBufferIsRejectedAsInvalidArgument) {
    auto dev = make_device();
    Stream s = dev->create_stream();
    DeviceBuffer buf = alloc(*dev, 256 * sizeof(float));
    DevicePtr<float> stale = buf.as<float>();
    buf.reset();
    std::mt19937 rng(11);
    std::vector<float> host = random_floats(rng, 256);
    loom::Status st = s.copy_h2d(stale, pageable(host), "into freed");
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("not inside a live allocation"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("into freed"), std::string::npos) << st.message();
    std::vector<float> back(256);
    st = s.copy_d2h(pageable_out(back), DevicePtr<const float>(stale), "from freed");
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(s.synchronize().ok());  // rejected at submission: nothing poisons the stream
}

TEST(DeviceMemory, KernelOnAFreedBufferIsRejectedAsInvalidArgument) {
    auto dev = make_device();
    Stream s = dev->create_stream();
    DeviceBuffer a = alloc(*dev, 64 * sizeof(float)), b = alloc(*dev, 64 * sizeof(float)),
                 c = alloc(*dev, 64 * sizeof(float));
    KernelLaunch l = binary_launch(a, b, c, 64, 0);
    c.reset();
    loom::Status st = s.launch(binary_kernel(), std::move(l), "stale add");
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("kernel 'stale add'"), std::string::npos) << st.message();
}

TEST(DeviceMemory, CopyOfMismatchedSizesIsRejected) {
    auto dev = make_device();
    Stream s = dev->create_stream();
    DeviceBuffer buf = alloc(*dev, 64 * sizeof(float));
    std::vector<float> host(65, 1.0f);
    EXPECT_EQ(s.copy_h2d(fp(buf), pageable(host)).code(), StatusCode::INVALID_ARGUMENT);
}

// ---- Stream order ----

TEST(StreamOrder, CopyKernelCopyRunInOrderWithoutOverlapAndComputeCorrectly) {
    DeviceOptions o;
    o.trace = true;
    auto dev = make_device(o);
    const int64_t m = 48, k = 80, n = 64;
    std::mt19937 rng(1234);
    std::vector<float> a = random_floats(rng, size_t(m * k)), b = random_floats(rng, size_t(k * n));
    auto pa = pinned_copy(a), pb = pinned_copy(b);
    PinnedBuffer<float> pc(size_t(m * n));
    DeviceBuffer da = alloc(*dev, a.size() * 4), db = alloc(*dev, b.size() * 4), dc = alloc(*dev, pc.size() * 4);
    Stream s = dev->create_stream();
    ASSERT_TRUE(s.copy_h2d(fp(da), HostView<const float>(pa), "h2d a").ok());
    ASSERT_TRUE(s.copy_h2d(fp(db), HostView<const float>(pb), "h2d b").ok());
    ASSERT_TRUE(s.launch(matmul_kernel(), matmul_launch(da, db, dc, m, k, n), "matmul").ok());
    ASSERT_TRUE(s.copy_d2h(HostView<float>(pc), cfp(dc), "d2h c").ok());
    ASSERT_TRUE(s.synchronize().ok());

    auto sl = slices_by_name(*dev);
    const char* order[] = {"h2d a", "h2d b", "matmul", "d2h c"};
    for (size_t i = 0; i < 4; ++i) {
        ASSERT_TRUE(sl.count(order[i])) << order[i];
        EXPECT_GT(sl[order[i]].end, sl[order[i]].start) << order[i];
        if (i > 0) {
            EXPECT_GE(sl[order[i]].start, sl[order[i - 1]].end) << order[i] << " overlaps " << order[i - 1];
        }
    }
    std::vector<float> c(pc.data(), pc.data() + pc.size());
    EXPECT_LT(max_rel_error(c, matmul_reference(a, b, nullptr, m, n, k)), 1e-5);
}

TEST(StreamOrder, PageableCopiesTakeLongerThanPinnedInSimulatedTime) {
    auto dev = make_device();
    const DeviceSpec& spec = dev->spec();
    const size_t count = 256 * 1024;  // 1 MiB
    std::mt19937 rng(7);
    std::vector<float> host = random_floats(rng, count);
    auto pinned = pinned_copy(host);
    DeviceBuffer d = alloc(*dev, count * 4);
    Stream s = dev->create_stream();
    Event e0 = dev->create_event(), e1 = dev->create_event(), e2 = dev->create_event();
    ASSERT_TRUE(s.record(e0).ok());
    ASSERT_TRUE(s.copy_h2d(fp(d), HostView<const float>(pinned), "pinned").ok());
    ASSERT_TRUE(s.record(e1).ok());
    ASSERT_TRUE(s.copy_h2d(fp(d), pageable(host), "pageable").ok());
    ASSERT_TRUE(s.record(e2).ok());
    ASSERT_TRUE(s.synchronize().ok());
    SimTime t0 = *e0.sim_time(), t1 = *e1.sim_time(), t2 = *e2.sim_time();
    EXPECT_EQ(t1 - t0, copy_duration(spec, count * 4, true));
    EXPECT_EQ(t2 - t1, copy_duration(spec, count * 4, false));
    EXPECT_GT(t2 - t1, t1 - t0);
    // The data arrived either way.
    EXPECT_EQ(std::memcmp(d.as<float>().host_data(), host.data(), count * 4), 0);
}

TEST(StreamOrder, PageableReadbackTakesLongerThanPinned) {
    auto dev = make_device();
    const size_t count = 64 * 1024;
    std::mt19937 rng(8);
    std::vector<float> src = random_floats(rng, count);
    DeviceBuffer d = alloc(*dev, count * 4);
    Stream s = dev->create_stream();
    ASSERT_TRUE(s.copy_h2d(fp(d), pageable(src)).ok());
    PinnedBuffer<float> pinned(count);
    std::vector<float> plain(count);
    Event e0 = dev->create_event(), e1 = dev->create_event(), e2 = dev->create_event();
    ASSERT_TRUE(s.record(e0).ok());
    ASSERT_TRUE(s.copy_d2h(HostView<float>(pinned), cfp(d)).ok());
    ASSERT_TRUE(s.record(e1).ok());
    ASSERT_TRUE(s.copy_d2h(pageable_out(plain), cfp(d)).ok());
    ASSERT_TRUE(s.record(e2).ok());
    ASSERT_TRUE(s.synchronize().ok());
    auto pinned_ms = Event::elapsed_ms(e0, e1), pageable_ms = Event::elapsed_ms(e1, e2);
    ASSERT_TRUE(pinned_ms.ok() && pageable_ms.ok());
    EXPECT_GT(*pageable_ms, *pinned_ms);
    EXPECT_EQ(plain, src);
    EXPECT_EQ(std::memcmp(pinned.data(), src.data(), count * 4), 0);
}

TEST(StreamOrder, EachKernelLaunchAdvancesTheHostClockByTheLaunchOverhead) {
    DeviceOptions o;
    o.trace = true;
    auto dev = make_device(o);
    const SimTime overhead = sim_from_ns(dev->spec().launch_overhead_us * 1e3);
    ASSERT_GT(overhead, 0);
    const int64_t n = 4096;
    std::mt19937 rng(3);
    std::vector<float> x = random_floats(rng, n), y = random_floats(rng, n);
    DeviceBuffer a = alloc(*dev, n * 4), b = alloc(*dev, n * 4), c = alloc(*dev, n * 4);
    Stream s = dev->create_stream();
    ASSERT_TRUE(s.copy_h2d(fp(a), pageable(x), "h2d x").ok());
    ASSERT_TRUE(s.copy_h2d(fp(b), pageable(y), "h2d y").ok());
    EXPECT_EQ(dev->stats().host_now, 0);  // copies are queued without host cost
    for (int i = 1; i <= 3; ++i) {
        ASSERT_TRUE(s.launch(binary_kernel(), binary_launch(a, b, c, n, 0), "add " + std::to_string(i)).ok());
        EXPECT_EQ(dev->stats().host_now, i * overhead);
    }
    ASSERT_TRUE(s.synchronize().ok());
    // A kernel cannot start before the host finished launching it.
    auto sl = slices_by_name(*dev);
    for (int i = 1; i <= 3; ++i) EXPECT_GE(sl["add " + std::to_string(i)].start, i * overhead);
    // synchronize moves the host clock to the end of the awaited work.
    EXPECT_EQ(dev->stats().host_now, sl["add 3"].end);
}

TEST(StreamOrder, LaunchWithABadShapeFailsAtSubmissionNamingTheKernel) {
    auto dev = make_device();
    Stream s = dev->create_stream();
    DeviceBuffer a = alloc(*dev, 64 * 4), b = alloc(*dev, 64 * 4), c = alloc(*dev, 32 * 4);
    KernelLaunch l;
    l.inputs = {ref(fp(a), {64}), ref(fp(b), {64})};
    l.outputs = {ref(fp(c), {32})};
    loom::Status st = s.launch(binary_kernel(), std::move(l), "bad add");
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("kernel 'bad add'"), std::string::npos) << st.message();
    EXPECT_EQ(dev->stats().host_now, 0);  // nothing was launched
    EXPECT_TRUE(s.synchronize().ok());
}

// ---- Events across streams ----

struct TwoStreamSetup {
    std::unique_ptr<Device> dev;
    static constexpr int64_t m = 256, k = 512, n = 256;
    DeviceBuffer a, b, c, side;
    std::vector<float> side_host;
};

// A long matmul's inputs are uploaded and synchronized, so the host clock starts past them.
TwoStreamSetup two_stream_setup() {
    TwoStreamSetup t;
    DeviceOptions o;
    o.trace = true;
    t.dev = make_device(o);
    std::mt19937 rng(99);
    std::vector<float> a = random_floats(rng, size_t(t.m * t.k)), b = random_floats(rng, size_t(t.k * t.n));
    t.a = alloc(*t.dev, a.size() * 4);
    t.b = alloc(*t.dev, b.size() * 4);
    t.c = alloc(*t.dev, size_t(t.m * t.n) * 4);
    t.side_host = random_floats(rng, 1024);
    t.side = alloc(*t.dev, t.side_host.size() * 4);
    Stream s = t.dev->create_stream();
    LOOM_ASSERT(s.copy_h2d(fp(t.a), pageable(a), "h2d a").ok());
    LOOM_ASSERT(s.copy_h2d(fp(t.b), pageable(b), "h2d b").ok());
    LOOM_ASSERT(s.synchronize().ok());
    return t;
}

TEST(StreamEvents, WaitingStreamStartsNoEarlierThanTheEventTime) {
    TwoStreamSetup t = two_stream_setup();
    Stream sa = t.dev->create_stream(), sb = t.dev->create_stream();
    Event ev = t.dev->create_event();
    ASSERT_TRUE(sa.launch(matmul_kernel(), matmul_launch(t.a, t.b, t.c, t.m, t.k, t.n), "long matmul").ok());
    ASSERT_TRUE(sa.record(ev).ok());
    ASSERT_TRUE(sb.wait(ev).ok());
    ASSERT_TRUE(sb.copy_h2d(fp(t.side), pageable(t.side_host), "after wait").ok());
    ASSERT_TRUE(t.dev->synchronize().ok());
    auto sl = slices_by_name(*t.dev);
    auto ev_time = ev.sim_time();
    ASSERT_TRUE(ev_time.ok());
    EXPECT_EQ(*ev_time, sl["long matmul"].end);
    EXPECT_GE(sl["after wait"].start, *ev_time);
}

TEST(StreamEvents, WithoutAWaitIndependentWorkOverlapsInSimulatedTime) {
    TwoStreamSetup t = two_stream_setup();
    Stream sa = t.dev->create_stream(), sb = t.dev->create_stream();
    ASSERT_TRUE(sa.launch(matmul_kernel(), matmul_launch(t.a, t.b, t.c, t.m, t.k, t.n), "long matmul").ok());
    ASSERT_TRUE(sb.copy_h2d(fp(t.side), pageable(t.side_host), "independent").ok());
    ASSERT_TRUE(t.dev->synchronize().ok());
    auto sl = slices_by_name(*t.dev);
    EXPECT_LT(sl["independent"].start, sl["long matmul"].end);
    EXPECT_LT(sl["long matmul"].start, sl["independent"].end);
}

TEST(StreamEvents, KernelsOnOneCoreEachOverlapAcrossStreams) {
    auto dev = make_device([] {
        DeviceOptions o;
        o.trace = true;
        return o;
    }());
    const int64_t n = 1 << 16;
    std::mt19937 rng(5);
    std::vector<float> x = random_floats(rng, n), y = random_floats(rng, n);
    DeviceBuffer a = alloc(*dev, n * 4), b = alloc(*dev, n * 4), c1 = alloc(*dev, n * 4), c2 = alloc(*dev, n * 4);
    Stream s0 = dev->create_stream(), s1 = dev->create_stream(), s2 = dev->create_stream();
    ASSERT_TRUE(s0.copy_h2d(fp(a), pageable(x), "h2d x").ok());
    ASSERT_TRUE(s0.copy_h2d(fp(b), pageable(y), "h2d y").ok());
    ASSERT_TRUE(s0.synchronize().ok());
    VectorSchedule one_core;
    one_core.ub_tile = 4096;
    one_core.cores = 1;
    ASSERT_TRUE(s1.launch(binary_kernel(), binary_launch(a, b, c1, n, 0, one_core), "add on s1").ok());
    ASSERT_TRUE(s2.launch(binary_kernel(), binary_launch(a, b, c2, n, 2, one_core), "mul on s2").ok());
    ASSERT_TRUE(dev->synchronize().ok());
    auto sl = slices_by_name(*dev);
    EXPECT_LT(sl["mul on s2"].start, sl["add on s1"].end);  // the second core was free
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(c1.as<float>().host_data()[i], x[size_t(i)] + y[size_t(i)]) << i;
        ASSERT_EQ(c2.as<float>().host_data()[i], x[size_t(i)] * y[size_t(i)]) << i;
    }
}

TEST(StreamEvents, ElapsedBetweenTwoRecordsIsTheSumOfTheDurationsBetween) {
    auto dev = make_device();
    const DeviceSpec& spec = dev->spec();
    const int64_t m = 128, k = 512, n = 128, len = 1 << 16;
    std::mt19937 rng(21);
    std::vector<float> a = random_floats(rng, size_t(m * k)), b = random_floats(rng, size_t(k * n)),
                       x = random_floats(rng, size_t(len));
    DeviceBuffer da = alloc(*dev, a.size() * 4), db = alloc(*dev, b.size() * 4), dc = alloc(*dev, size_t(m * n) * 4),
                 dx = alloc(*dev, x.size() * 4), dy = alloc(*dev, x.size() * 4);
    Stream s = dev->create_stream();
    ASSERT_TRUE(s.copy_h2d(fp(da), pageable(a)).ok());
    ASSERT_TRUE(s.copy_h2d(fp(db), pageable(b)).ok());
    // A long kernel before the first record keeps the stream ahead of the host clock, so no
    // launch overhead opens a gap between the tasks measured below.
    ASSERT_TRUE(s.launch(matmul_kernel(), matmul_launch(da, db, dc, m, k, n), "warm-up").ok());
    Event start = dev->create_event(), end = dev->create_event();
    ASSERT_TRUE(s.record(start).ok());
    KernelLaunch k1 = matmul_launch(da, db, dc, m, k, n);
    KernelLaunch k2 = binary_launch(dx, dx, dy, len, 2);
    SimTime expected = kernel_duration(matmul_kernel(), k1, spec) + copy_duration(spec, x.size() * 4, false) +
                       kernel_duration(binary_kernel(), k2, spec);
    ASSERT_GT(kernel_duration(matmul_kernel(), k1, spec), 2 * sim_from_ns(spec.launch_overhead_us * 1e3));
    ASSERT_TRUE(s.launch(matmul_kernel(), std::move(k1), "k1").ok());
    ASSERT_TRUE(s.copy_h2d(fp(dx), pageable(x), "x").ok());
    ASSERT_TRUE(s.launch(binary_kernel(), std::move(k2), "k2").ok());
    ASSERT_TRUE(s.record(end).ok());
    ASSERT_TRUE(end.synchronize().ok());
    auto ms = Event::elapsed_ms(start, end);
    ASSERT_TRUE(ms.ok());
    EXPECT_EQ(*ms, sim_to_ms(expected));
    EXPECT_EQ(*end.sim_time() - *start.sim_time(), expected);
    EXPECT_EQ(dev->stats().host_now, *end.sim_time()) << "Event::synchronize moves the host clock to the event";
}

TEST(StreamEvents, WaitingOnANeverRecordedEventIsFailedPrecondition) {
    auto dev = make_device();
    Stream s = dev->create_stream();
    Event ev = dev->create_event();
    EXPECT_EQ(s.wait(ev).code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(ev.synchronize().code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(ev.sim_time().status().code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_FALSE(ev.query());
    Event recorded = dev->create_event();
    ASSERT_TRUE(s.record(recorded).ok());
    EXPECT_EQ(Event::elapsed_ms(recorded, ev).status().code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(Event::elapsed_ms(ev, recorded).status().code(), StatusCode::FAILED_PRECONDITION);
    Event none;  // not created by a device
    EXPECT_EQ(s.wait(none).code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(none.synchronize().code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_TRUE(s.synchronize().ok());
}

TEST(StreamEvents, EventsOfAnotherDeviceAreRejected) {
    auto dev1 = make_device(), dev2 = make_device();
    Stream s1 = dev1->create_stream(), s2 = dev2->create_stream();
    Event ev2 = dev2->create_event();
    ASSERT_TRUE(s2.record(ev2).ok());
    EXPECT_EQ(s1.wait(ev2).code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s1.record(ev2).code(), StatusCode::INVALID_ARGUMENT);
}

TEST(StreamEvents, ConsumerStreamReadsWhatTheProducerStreamWroteEveryIteration) {
    auto dev = make_device();
    const int64_t m = 64, k = 128, n = 64, iters = 48;
    std::mt19937 rng(4242);
    std::vector<float> w = random_floats(rng, size_t(k * n)), bias = random_floats(rng, size_t(m * n));
    DeviceBuffer dw = alloc(*dev, w.size() * 4), dbias = alloc(*dev, bias.size() * 4);
    Stream producer = dev->create_stream(), consumer = dev->create_stream();
    ASSERT_TRUE(producer.copy_h2d(fp(dw), pageable(w)).ok());
    ASSERT_TRUE(producer.copy_h2d(fp(dbias), pageable(bias)).ok());
    struct Iter {
        std::vector<float> x, out;
        DeviceBuffer dx, dy, dz;
        Event ready;
    };
    std::vector<Iter> it(iters);
    // Everything is queued before anything is awaited, so only the event orders the streams.
    for (auto& i : it) {
        i.x = random_floats(rng, size_t(m * k));
        i.out.assign(size_t(m * n), 0.0f);
        i.dx = alloc(*dev, i.x.size() * 4);
        i.dy = alloc(*dev, i.out.size() * 4);
        i.dz = alloc(*dev, i.out.size() * 4);
        i.ready = dev->create_event();
        ASSERT_TRUE(producer.copy_h2d(fp(i.dx), pageable(i.x)).ok());
        ASSERT_TRUE(producer.launch(matmul_kernel(), matmul_launch(i.dx, dw, i.dy, m, k, n)).ok());
        ASSERT_TRUE(producer.record(i.ready).ok());
        ASSERT_TRUE(consumer.wait(i.ready).ok());
        ASSERT_TRUE(consumer.launch(binary_kernel(), binary_launch(i.dy, dbias, i.dz, m * n, 0)).ok());
        ASSERT_TRUE(consumer.copy_d2h(pageable_out(i.out), cfp(i.dz)).ok());
    }
    ASSERT_TRUE(consumer.synchronize().ok());
    ASSERT_TRUE(producer.synchronize().ok());
    for (int64_t t = 0; t < iters; ++t) {
        std::vector<double> want = matmul_reference(it[size_t(t)].x, w, nullptr, m, n, k);
        for (size_t j = 0; j < want.size(); ++j) want[j] += bias[j];
        EXPECT_LT(max_rel_error(it[size_t(t)].out, want), 1e-5) << "iteration " << t;
    }
}

// ---- Determinism ----

struct WorkloadResult {
    nlohmann::json events;  // traceEvents without wall-clock fields
    std::vector<std::vector<float>> outputs;
    SimTime sim_now = 0, host_now = 0;
};

WorkloadResult run_workload(ThreadPool& pool) {
    DeviceOptions o;
    o.pool = &pool;
    o.trace = true;
    auto dev = make_device(o);
    std::mt19937 rng(777);
    const int64_t k = 64, n = 96;
    std::vector<float> w = random_floats(rng, size_t(k * n));
    std::vector<Stream> ss;
    for (int i = 0; i < 3; ++i) ss.push_back(dev->create_stream());
    DeviceBuffer dw = alloc(*dev, w.size() * 4, "w");
    LOOM_ASSERT(ss[0].copy_h2d(fp(dw), pageable(w), "upload w").ok());
    Event w_ready = dev->create_event();
    LOOM_ASSERT(ss[0].record(w_ready).ok());
    LOOM_ASSERT(ss[1].wait(w_ready).ok());
    LOOM_ASSERT(ss[2].wait(w_ready).ok());

    struct Job {
        std::vector<float> x;
        PinnedBuffer<float> pinned_x, pinned_out;
        std::vector<float> out;
        DeviceBuffer dx, dy, dz, dcopy;
        int64_t m;
    };
    std::vector<Job> jobs(12);
    std::vector<Event> events;
    for (size_t i = 0; i < jobs.size(); ++i) {
        Job& j = jobs[i];
        Stream& s = ss[i % 3];
        j.m = 16 * int64_t(1 + i % 4) + int64_t(i % 3) * 5;  // 16..79 rows, not all multiples of 16
        j.x = random_floats(rng, size_t(j.m * k));
        j.pinned_x = pinned_copy(j.x);
        j.out.assign(size_t(j.m * n), 0.0f);
        j.pinned_out = PinnedBuffer<float>(j.out.size());
        j.dx = alloc(*dev, j.x.size() * 4);
        j.dy = alloc(*dev, j.out.size() * 4);
        j.dz = alloc(*dev, j.out.size() * 4);
        j.dcopy = alloc(*dev, j.out.size() * 4);
        std::string tag = std::to_string(i);
        if (i % 2) LOOM_ASSERT(s.copy_h2d(fp(j.dx), HostView<const float>(j.pinned_x), "h2d " + tag).ok());
        else LOOM_ASSERT(s.copy_h2d(fp(j.dx), pageable(j.x), "h2d " + tag).ok());
        if (i % 4 == 3) LOOM_ASSERT(s.wait(events.back()).ok());  // join the previous stream's work
        KernelLaunch mm = matmul_launch(j.dx, dw, j.dy, j.m, k, n);
        mm.attrs = {{"activation", std::string("relu")}};
        LOOM_ASSERT(s.launch(matmul_kernel(), std::move(mm), "matmul " + tag).ok());
        LOOM_ASSERT(s.launch(binary_kernel(), binary_launch(j.dy, j.dy, j.dz, j.m * n, 2), "square " + tag).ok());
        LOOM_ASSERT(s.copy_d2d(fp(j.dcopy), cfp(j.dz), "d2d " + tag).ok());
        float* out = j.pinned_out.data();
        const float* dcopy = j.dcopy.as<float>().host_data();
        size_t count = j.out.size();
        LOOM_ASSERT(s.launch_host("host scale " + tag, double(count), double(count * 8), [out, dcopy, count] {
                         for (size_t e = 0; e < count; ++e) out[e] = 0.5f * dcopy[e];
                         return loom::Status();
                     }).ok());
        LOOM_ASSERT(s.copy_d2h(pageable_out(j.out), cfp(j.dz), "d2h " + tag).ok());
        events.push_back(dev->create_event());
        LOOM_ASSERT(s.record(events.back()).ok());
        if (i == 5) LOOM_ASSERT(ss[1].synchronize().ok());  // a host sync point mid-way
    }
    LOOM_ASSERT(dev->synchronize().ok());

    WorkloadResult r;
    r.events = simulated_trace_events(*dev);
    for (auto& j : jobs) {
        r.outputs.push_back(j.out);
        r.outputs.emplace_back(j.pinned_out.data(), j.pinned_out.data() + j.pinned_out.size());
    }
    DeviceStats st = dev->stats();
    r.sim_now = st.sim_now;
    r.host_now = st.host_now;
    return r;
}

TEST(Determinism, TimelineAndOutputsAreIdenticalWithOneAndFourThreads) {
    ThreadPool one(1), four(4);
    WorkloadResult a = run_workload(one);
    WorkloadResult b = run_workload(four);
    WorkloadResult c = run_workload(four);
    size_t slices = 0;
    for (const auto& e : a.events) slices += e["ph"] == "X";
    EXPECT_GE(slices, 12u * 6u);
    ASSERT_EQ(a.events.size(), b.events.size());
    for (size_t i = 0; i < a.events.size(); ++i) ASSERT_EQ(a.events[i], b.events[i]) << "trace event " << i;
    EXPECT_EQ(b.events, c.events);
    EXPECT_EQ(a.sim_now, b.sim_now);
    EXPECT_EQ(a.host_now, b.host_now);
    ASSERT_EQ(a.outputs.size(), b.outputs.size());
    for (size_t i = 0; i < a.outputs.size(); ++i) EXPECT_EQ(a.outputs[i], b.outputs[i]) << "output " << i;
    EXPECT_EQ(b.outputs, c.outputs);
    // The outputs are real: relu(x W)^2 is non-negative and not all zero, and the host op halves it.
    for (size_t i = 0; i < a.outputs.size(); i += 2) {
        float mx = 0;
        for (size_t e = 0; e < a.outputs[i].size(); ++e) {
            ASSERT_GE(a.outputs[i][e], 0.0f);
            ASSERT_EQ(a.outputs[i + 1][e], 0.5f * a.outputs[i][e]);
            mx = std::max(mx, a.outputs[i][e]);
        }
        EXPECT_GT(mx, 0.0f);
    }
}

// ---- Sink submission (Stream::launch_sink) ----

// A chain of `count` tiny kernels over three buffers: task i reads buf[i % 3] and b and writes
// buf[(i + 1) % 3] with add, sub or mul in turn, so every result depends on the order.
struct SinkChain {
    static constexpr int64_t n = 256;
    std::unique_ptr<Device> dev;
    DeviceBuffer b;
    DeviceBuffer buf[3];
    std::vector<float> x, y;
};

SinkChain sink_chain(DeviceOptions o = {}) {
    SinkChain t;
    t.dev = make_device(std::move(o));
    std::mt19937 rng(31);
    t.x = random_floats(rng, SinkChain::n, 0.5f, 1.5f);
    t.y = random_floats(rng, SinkChain::n, 0.5f, 1.5f);
    t.b = alloc(*t.dev, SinkChain::n * 4, "b");
    for (auto& d : t.buf) d = alloc(*t.dev, SinkChain::n * 4, "buf");
    Stream s = t.dev->create_stream();
    LOOM_ASSERT(s.copy_h2d(fp(t.buf[0]), pageable(t.x), "x").ok());
    LOOM_ASSERT(s.copy_h2d(fp(t.b), pageable(t.y), "y").ok());
    for (int i = 1; i < 3; ++i) std::fill_n(t.buf[i].as<float>().host_data(), SinkChain::n, -7.0f);  // sentinels
    LOOM_ASSERT(s.synchronize().ok());
    return t;
}

std::vector<SinkTask> sink_tasks(SinkChain& t, int count) {
    std::vector<SinkTask> tasks;
    for (int i = 0; i < count; ++i)
        tasks.push_back({&binary_kernel(),
                         binary_launch(t.buf[i % 3], t.b, t.buf[(i + 1) % 3], SinkChain::n, i % 3),
                         fmt::format("k{}", i)});
    return tasks;
}

std::vector<float> host_floats(const DeviceBuffer& d) {
    const float* p = d.as<float>().host_data();
    return std::vector<float>(p, p + d.bytes() / 4);
}

TEST(SinkSubmission, HostPaysOneLaunchOverheadAndEachTaskTheOnChipDispatch) {
    constexpr int kTasks = 12;
    SinkChain launched = sink_chain(), sunk = sink_chain();
    const DeviceSpec& spec = sunk.dev->spec();
    const SimTime overhead = sim_from_ns(spec.launch_overhead_us * 1e3);
    const SimTime dispatch = sim_from_ns(spec.launch_sink_task_ns);
    const SimTime dur = kernel_duration(binary_kernel(), sink_tasks(sunk, 1)[0].launch, spec);
    ASSERT_GT(dispatch, 0);
    ASSERT_LT(dur, overhead);  // tiny kernels: host-scheduled launching is the bottleneck
    const SimTime h0 = launched.dev->stats().host_now;
    ASSERT_EQ(sunk.dev->stats().host_now, h0);  // both set up identically

    Stream a = launched.dev->create_stream();
    for (SinkTask& t : sink_tasks(launched, kTasks)) ASSERT_TRUE(a.launch(*t.kernel, std::move(t.launch), t.name).ok());
    EXPECT_EQ(launched.dev->stats().host_now, h0 + kTasks * overhead);
    ASSERT_TRUE(a.synchronize().ok());

    Stream b = sunk.dev->create_stream();
    ASSERT_TRUE(b.launch_sink(sink_tasks(sunk, kTasks), "chain").ok());
    EXPECT_EQ(sunk.dev->stats().host_now, h0 + overhead);  // one submission
    ASSERT_TRUE(b.synchronize().ok());

    // Launched: each kernel waits for its own launch; the last ends one duration after it.
    const SimTime host_scheduled = launched.dev->stats().host_now - h0;
    const SimTime sink = sunk.dev->stats().host_now - h0;
    EXPECT_EQ(host_scheduled, kTasks * overhead + dur);
    // Sunk: one overhead, then per task its dispatch and its run.
    EXPECT_EQ(sink, overhead + kTasks * (dispatch + dur));
    std::printf("%d tiny kernels on %s: %.2f us launched one by one, %.2f us as one sink submission\n", kTasks,
                spec.name.c_str(), sim_to_us(host_scheduled), sim_to_us(sink));
    EXPECT_GT(static_cast<double>(host_scheduled) / static_cast<double>(sink), 3.0);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(host_floats(launched.buf[i]), host_floats(sunk.buf[i])) << "buffer " << i;
    const auto sunk_out = host_floats(sunk.buf[kTasks % 3]);
    EXPECT_TRUE(std::any_of(sunk_out.begin(), sunk_out.end(), [](float v) { return v != -7.0f && v != 0.0f; }));
    EXPECT_EQ(sunk.dev->stats().engines[static_cast<size_t>(Engine::AICORE)].tasks, static_cast<uint64_t>(kTasks));
}

TEST(SinkSubmission, EachTaskHasItsSliceOnTheAicoreLanesOneDispatchAfterItsPredecessor) {
    DeviceOptions o;
    o.trace = true;
    SinkChain t = sink_chain(o);
    Stream s = t.dev->create_stream();
    ASSERT_TRUE(s.launch_sink(sink_tasks(t, 5), "chain").ok());
    ASSERT_TRUE(s.synchronize().ok());
    const SimTime dispatch = sim_from_ns(t.dev->spec().launch_sink_task_ns);
    auto sl = slices_by_name(*t.dev);
    for (int i = 1; i < 5; ++i)
        EXPECT_EQ(sl[fmt::format("k{}", i)].start, sl[fmt::format("k{}", i - 1)].end + dispatch) << i;
    const auto doc = nlohmann::json::parse(t.dev->trace_json());
    size_t on_cores = 0;
    for (const auto& e : events_with_ph(doc, "X")) {
        if (e["name"].get<std::string>().rfind('k', 0) != 0) continue;
        EXPECT_EQ(e["args"]["dispatch"], "sink");
        EXPECT_EQ(e["args"]["engine"], "aicore");
        on_cores += e["pid"] == kPidEngines;
    }
    EXPECT_GE(on_cores, 5u);
}

TEST(SinkSubmission, AFaultInTaskKPoisonsTheRestAndSynchronizeReportsIt) {
    DeviceOptions o;
    o.trace = true;
    o.faults.fail_launch = 3;  // the third kernel launch on the device: task k2
    SinkChain t = sink_chain(o);
    Stream s = t.dev->create_stream();
    ASSERT_TRUE(s.launch_sink(sink_tasks(t, 5), "chain").ok());
    const loom::Status st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("kernel 'k2'"), std::string::npos) << st.message();
    std::map<std::string, bool> failed;
    for (const auto& e : stream_slices(*t.dev)) failed[e["name"]] = e["args"].value("failed", false);
    EXPECT_FALSE(failed["k0"]);
    EXPECT_FALSE(failed["k1"]);
    for (const char* k : {"k2", "k3", "k4"}) EXPECT_TRUE(failed[k]) << k;
    // k2 and k3 would have overwritten buf[0] and buf[1]: x and k0's x + y are still there.
    EXPECT_EQ(host_floats(t.buf[0]), t.x);
    const auto k0 = host_floats(t.buf[1]);
    for (size_t i = 0; i < k0.size(); ++i) ASSERT_EQ(k0[i], t.x[i] + t.y[i]) << i;
    // The stream works again after the error was reported.
    ASSERT_TRUE(s.launch_sink(sink_tasks(t, 2), "again").ok());
    EXPECT_TRUE(s.synchronize().ok());
}

TEST(SinkSubmission, AnIllegalTaskFailsTheSubmissionNamingItAndPlacesNothing) {
    SinkChain t = sink_chain();
    const SimTime h0 = t.dev->stats().host_now;
    Stream s = t.dev->create_stream();
    std::vector<SinkTask> tasks = sink_tasks(t, 4);
    tasks[2].launch.outputs[0].dims[0] = SinkChain::n / 2;  // shape mismatch: the cost check refuses it
    loom::Status st = s.launch_sink(std::move(tasks), "chain");
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("sink 'chain' task 2"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("kernel 'k2'"), std::string::npos) << st.message();
    // A task on freed memory is refused by the range check, after every cost check passed.
    DeviceBuffer gone = alloc(*t.dev, SinkChain::n * 4);
    tasks = sink_tasks(t, 4);
    tasks[3].launch.outputs[0] = ref(fp(gone), {SinkChain::n});
    gone.reset();
    st = s.launch_sink(std::move(tasks), "chain");
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("sink 'chain' task 3"), std::string::npos) << st.message();
    EXPECT_EQ(t.dev->stats().engines[static_cast<size_t>(Engine::AICORE)].tasks, 0u);
    EXPECT_EQ(t.dev->stats().host_now, h0);  // no launch overhead was charged
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_TRUE(s.launch_sink(std::vector<SinkTask>{}, "empty").ok());  // nothing to submit costs nothing
    EXPECT_EQ(t.dev->stats().engines[static_cast<size_t>(Engine::AICORE)].tasks, 0u);
}

// Returns `tasks` prepared for `spec`; aborts on a refusal.
std::vector<PreparedLaunch> prepared(std::vector<SinkTask> tasks, const DeviceSpec& spec) {
    std::vector<PreparedLaunch> out;
    for (SinkTask& t : tasks) {
        auto p = prepare_launch(*t.kernel, std::move(t.launch), t.name, spec);
        LOOM_ASSERT_MSG(p.ok(), "{}", p.status().to_string());
        out.push_back(std::move(*p));
    }
    return out;
}

TEST(SinkSubmission, PreparedLaunchesGiveTheSameTimelineTraceAndOutputs) {
    DeviceOptions o;
    o.trace = true;
    SinkChain plain = sink_chain(o), prep = sink_chain(o);
    Stream a = plain.dev->create_stream(), b = prep.dev->create_stream();
    const std::vector<PreparedLaunch> once = prepared(sink_tasks(prep, 12), prep.dev->spec());
    for (int round = 0; round < 3; ++round) {  // prepared once, submitted three times
        ASSERT_TRUE(a.launch_sink(sink_tasks(plain, 12), "chain").ok());
        ASSERT_TRUE(b.launch_sink(once, "chain").ok());
    }
    ASSERT_TRUE(a.synchronize().ok());
    ASSERT_TRUE(b.synchronize().ok());
    EXPECT_EQ(simulated_trace_events(*plain.dev), simulated_trace_events(*prep.dev));
    const DeviceStats sa = plain.dev->stats(), sb = prep.dev->stats();
    EXPECT_EQ(sa.sim_now, sb.sim_now);
    EXPECT_EQ(sa.host_now, sb.host_now);
    EXPECT_EQ(sa.tasks, sb.tasks);
    EXPECT_EQ(sb.engines[static_cast<size_t>(Engine::AICORE)].tasks, 36u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(host_floats(plain.buf[i]), host_floats(prep.buf[i])) << "buffer " << i;
}

TEST(SinkSubmission, PreparedLaunchesCountForFaultInjectionAndAreRangeAndSpecChecked) {
    DeviceOptions o;
    o.faults.fail_launch = 3;
    SinkChain t = sink_chain(o);
    Stream s = t.dev->create_stream();
    const std::vector<PreparedLaunch> p = prepared(sink_tasks(t, 5), t.dev->spec());
    ASSERT_TRUE(s.launch_sink(p, "chain").ok());
    const loom::Status st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
    EXPECT_NE(st.message().find("kernel 'k2'"), std::string::npos) << st.message();
    // Prepared for another spec: refused, naming the task.
    const std::vector<PreparedLaunch> dc = prepared(sink_tasks(t, 2), preset_spec("dc"));
    loom::Status refused = s.launch_sink(dc, "chain");
    EXPECT_EQ(refused.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(refused.message().find("sink 'chain' task 0"), std::string::npos) << refused.message();
    // Ranges are checked at every submission: a freed buffer is refused.
    DeviceBuffer gone = alloc(*t.dev, SinkChain::n * 4);
    std::vector<SinkTask> tasks = sink_tasks(t, 2);
    tasks[1].launch.outputs[0] = ref(fp(gone), {SinkChain::n});
    const std::vector<PreparedLaunch> stale = prepared(std::move(tasks), t.dev->spec());
    gone.reset();
    refused = s.launch_sink(stale, "chain");
    EXPECT_EQ(refused.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(refused.message().find("sink 'chain' task 1"), std::string::npos) << refused.message();
    EXPECT_TRUE(s.synchronize().ok());
}

// Two streams, each a copy in, a sink of matmul + eltwise, a copy out; the second waits for
// the first's event halfway.
struct SinkWorkload {
    nlohmann::json events;
    std::vector<std::vector<float>> outputs;
    SimTime sim_now = 0, host_now = 0;
};

SinkWorkload run_sink_workload(ThreadPool& pool) {
    DeviceOptions o;
    o.pool = &pool;
    o.trace = true;
    auto dev = make_device(o);
    constexpr int64_t m = 40, k = 64, n = 48;
    std::mt19937 rng(77);
    const std::vector<float> w = random_floats(rng, size_t(k * n));
    DeviceBuffer dw = alloc(*dev, w.size() * 4);
    Stream ss[2] = {dev->create_stream(), dev->create_stream()};
    LOOM_ASSERT(ss[0].copy_h2d(fp(dw), pageable(w), "w").ok());
    LOOM_ASSERT(ss[0].synchronize().ok());
    std::vector<std::vector<float>> xs(4), outs(4, std::vector<float>(size_t(m * n)));
    std::vector<DeviceBuffer> dx, dy, dz;
    Event ev = dev->create_event();
    for (size_t i = 0; i < 4; ++i) {
        Stream& s = ss[i % 2];
        xs[i] = random_floats(rng, size_t(m * k));
        dx.push_back(alloc(*dev, xs[i].size() * 4));
        dy.push_back(alloc(*dev, outs[i].size() * 4));
        dz.push_back(alloc(*dev, outs[i].size() * 4));
        const std::string tag = std::to_string(i);
        LOOM_ASSERT(s.copy_h2d(fp(dx[i]), pageable(xs[i]), "x " + tag).ok());
        if (i == 3) LOOM_ASSERT(s.wait(ev).ok());
        std::vector<SinkTask> tasks;
        tasks.push_back({&matmul_kernel(), matmul_launch(dx[i], dw, dy[i], m, k, n), "mm " + tag});
        tasks.push_back({&binary_kernel(), binary_launch(dy[i], dy[i], dz[i], m * n, 2), "sq " + tag});
        LOOM_ASSERT(s.launch_sink(std::move(tasks), "job " + tag).ok());
        LOOM_ASSERT(s.copy_d2h(pageable_out(outs[i]), cfp(dz[i]), "out " + tag).ok());
        if (i == 2) LOOM_ASSERT(s.record(ev).ok());
    }
    LOOM_ASSERT(dev->synchronize().ok());
    SinkWorkload r;
    r.events = simulated_trace_events(*dev);
    r.outputs = std::move(outs);
    r.sim_now = dev->stats().sim_now;
    r.host_now = dev->stats().host_now;
    return r;
}

TEST(SinkSubmission, TimelineAndOutputsAreIdenticalWithOneAndFourThreads) {
    ThreadPool one(1), four(4);
    const SinkWorkload a = run_sink_workload(one), b = run_sink_workload(four);
    EXPECT_EQ(a.events, b.events);
    EXPECT_EQ(a.sim_now, b.sim_now);
    EXPECT_EQ(a.host_now, b.host_now);
    EXPECT_EQ(a.outputs, b.outputs);
    for (const auto& out : a.outputs) EXPECT_GT(*std::max_element(out.begin(), out.end()), 0.0f);
}

// Host tasks for the abort tests: one that holds the stream until `release`, and ones that
// count their runs.
struct Blocker {
    std::atomic<bool> started{false}, release{false};
    std::atomic<int> ran{0};
    void hold(Stream& s) {
        ASSERT_TRUE(s.launch_host("blocker", 1, 1, [this] {
                         started = true;
                         while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                         return loom::Status();
                     }).ok());
    }
    void count(Stream& s, const std::string& name) {
        ASSERT_TRUE(s.launch_host(name, 1, 1, [this] {
                         ++ran;
                         return loom::Status();
                     }).ok());
    }
    void wait_started() const {
        while (!started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
};

// Stream::abort: the work queued behind a running task is skipped with CANCELLED (its effect
// never happens), the running task finishes, callbacks still run and see the error, and once
// synchronize() has reported it the stream runs new work again.
TEST(StreamAbort, QueuedWorkIsSkippedCallbacksRunAndSynchronizeClearsIt) {
    auto dev = make_device();
    Stream s = dev->create_stream();
    Blocker b;
    b.hold(s);
    for (int i = 0; i < 5; ++i) b.count(s, "queued " + std::to_string(i));
    loom::Status seen;
    std::atomic<bool> called{false};
    ASSERT_TRUE(s.add_callback([&](loom::Status st) {
                     seen = st;
                     called = true;
                 }).ok());
    b.wait_started();
    s.abort();
    b.release = true;
    const loom::Status st = s.synchronize();
    EXPECT_EQ(st.code(), StatusCode::CANCELLED) << st.to_string();
    EXPECT_NE(st.message().find("'queued 0'"), std::string::npos) << st.message();
    EXPECT_EQ(b.ran.load(), 0);  // the blocker finished; nothing queued behind it ran
    EXPECT_TRUE(called.load());
    EXPECT_EQ(seen.code(), StatusCode::CANCELLED);
    b.count(s, "after");
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_EQ(b.ran.load(), 1);
}

// An abort that comes while another thread waits in synchronize() is not ended by that wait:
// work queued after it is still skipped, until a synchronize() that began after the abort.
TEST(StreamAbort, AnAbortDuringAWaitOutlivesThatWait) {
    auto dev = make_device();
    Stream s = dev->create_stream();
    Blocker b;
    b.hold(s);
    b.wait_started();
    loom::Status waited;
    std::thread waiter([&] { waited = s.synchronize(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the waiter is in its wait by now
    s.abort();
    b.release = true;
    waiter.join();
    EXPECT_TRUE(waited.ok()) << waited.to_string();  // the blocker had started: it finished
    b.count(s, "after the abort");
    EXPECT_EQ(s.synchronize().code(), StatusCode::CANCELLED);
    EXPECT_EQ(b.ran.load(), 0);
    b.count(s, "after the second wait");
    EXPECT_TRUE(s.synchronize().ok());
    EXPECT_EQ(b.ran.load(), 1);
}

}  // namespace

}  // namespace test_runtime
