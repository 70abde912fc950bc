// The pipeline engine's parts: the bounded queue's policies (block loses nothing, drop_newest
// and drop_oldest count what they drop, close drains, abort wakes both ends, an idle end sleeps),
// the frame pool (bounded, recycled, abort), and the config's file:line:col errors.
#include <gtest/gtest.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "pipeline/frame_pool.hpp"
#include "test_util.hpp"
#include "pipeline/pipeline.hpp"
#include "pipeline/queue.hpp"
#include "pipeline/stage.hpp"
#include "restore/engine.hpp"

namespace loom::pipeline::test_pipeline {  // apart from the rest of its unity batch
namespace {

using namespace std::chrono_literals;

std::unique_ptr<FramePool> small_pool(size_t n) {
    auto p = FramePool::create("test", FrameLayout{PixelFormat::YUV420P, 4, 2}, n);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return std::move(*p);
}

FrameRef frame_numbered(FramePool& pool, int64_t i) {
    FrameRef f = pool.acquire();
    EXPECT_TRUE(f);
    f->meta.index = i;
    return f;
}

double thread_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

TEST(PipelineQueue, BlockPolicyDeliversEveryFrameInOrderThroughATinyQueue) {
    auto pool = small_pool(8);
    FrameQueue q(2, QueuePolicy::BLOCK);
    constexpr int kFrames = 5000;
    std::thread producer([&] {
        for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(q.push(frame_numbered(*pool, i)));
        q.close();
    });
    int64_t expect = 0;
    while (FrameRef f = q.pop()) {
        ASSERT_EQ(f->meta.index, expect);
        ++expect;
    }
    producer.join();
    EXPECT_EQ(expect, kFrames);
    EXPECT_EQ(q.drops(), 0u);
    EXPECT_EQ(pool->in_use(), 0u);
}

TEST(PipelineQueue, DropNewestKeepsWhatIsQueuedAndCountsTheRest) {
    auto pool = small_pool(8);
    FrameQueue q(3, QueuePolicy::DROP_NEWEST);
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(q.push(frame_numbered(*pool, i)));
    q.close();
    EXPECT_EQ(q.drops(), 3u);
    std::vector<int64_t> got;
    while (FrameRef f = q.pop()) got.push_back(f->meta.index);
    EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(pool->in_use(), 0u);  // dropped frames went back to the pool
}

TEST(PipelineQueue, DropOldestKeepsTheNewestAndCountsTheRest) {
    auto pool = small_pool(8);
    FrameQueue q(3, QueuePolicy::DROP_OLDEST);
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(q.push(frame_numbered(*pool, i)));
    q.close();
    EXPECT_EQ(q.drops(), 4u);
    std::vector<int64_t> got;
    while (FrameRef f = q.pop()) got.push_back(f->meta.index);
    EXPECT_EQ(got, (std::vector<int64_t>{4, 5, 6}));
    EXPECT_EQ(pool->in_use(), 0u);
}

TEST(PipelineQueue, DropOldestWithAConcurrentConsumerLosesNoFrameTwiceAndCountsExactly) {
    auto pool = small_pool(16);
    FrameQueue q(4, QueuePolicy::DROP_OLDEST);
    constexpr int kFrames = 20000;
    std::thread producer([&] {
        for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(q.push(frame_numbered(*pool, i)));
        q.close();
    });
    uint64_t received = 0;
    int64_t last = -1;
    while (FrameRef f = q.pop()) {
        ASSERT_GT(f->meta.index, last);  // order kept, nothing twice
        last = f->meta.index;
        ++received;
    }
    producer.join();
    EXPECT_EQ(received + q.drops(), static_cast<uint64_t>(kFrames));
    EXPECT_EQ(last, kFrames - 1);  // the newest frame always survives
}

TEST(PipelineQueue, AbortWakesABlockedConsumerAndABlockedProducer) {
    auto pool = small_pool(4);
    FrameQueue empty(1, QueuePolicy::BLOCK), full(1, QueuePolicy::BLOCK);
    ASSERT_TRUE(full.push(frame_numbered(*pool, 0)));
    bool popped = true, pushed = true;
    std::thread consumer([&] { popped = static_cast<bool>(empty.pop()); });
    std::thread producer([&] { pushed = full.push(frame_numbered(*pool, 1)); });
    std::this_thread::sleep_for(50ms);
    empty.abort();
    full.abort();
    consumer.join();
    producer.join();
    EXPECT_FALSE(popped);
    EXPECT_FALSE(pushed);
}

TEST(PipelineQueue, AnIdleConsumerSleepsInsteadOfSpinning) {
    FrameQueue q(4, QueuePolicy::BLOCK);
    double cpu_ms = -1;
    std::thread consumer([&] {
        const double t0 = thread_cpu_ms();
        EXPECT_FALSE(q.pop());  // waits until close()
        cpu_ms = thread_cpu_ms() - t0;
    });
    std::this_thread::sleep_for(300ms);
    q.close();
    consumer.join();
    EXPECT_LT(cpu_ms, 30.0) << "a consumer waiting 300 ms used " << cpu_ms << " ms of CPU";
}

TEST(PipelineFramePool, AcquireWaitsForAReleaseAndRecyclesTheSameBuffers) {
    auto pool = small_pool(2);
    FrameRef a = pool->acquire(), b = pool->acquire();
    uint8_t* first = a->data();
    std::atomic<bool> got{false};
    std::thread waiter([&] {
        FrameRef c = pool->acquire();
        got = static_cast<bool>(c);
        EXPECT_TRUE(c->data() == first);  // the buffer a gave back
    });
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(got.load());
    {
        FrameRef copy = a;  // a second reference keeps the buffer out of the pool
        a.reset();
        std::this_thread::sleep_for(20ms);
        EXPECT_FALSE(got.load());
    }
    waiter.join();
    EXPECT_TRUE(got.load());
    EXPECT_EQ(pool->in_use_max(), 2u);
}

TEST(PipelineFramePool, AbortWakesAWaitingAcquire) {
    auto pool = small_pool(1);
    FrameRef a = pool->acquire();
    bool got = true;
    std::thread waiter([&] { got = static_cast<bool>(pool->acquire()); });
    std::this_thread::sleep_for(30ms);
    pool->abort();
    waiter.join();
    EXPECT_FALSE(got);
}

TEST(PipelineFrame, WaitReadyReturnsTheErrorSetByTheProducer) {
    auto pool = small_pool(1);
    FrameRef f = pool->acquire();
    f->set_pending();
    std::thread producer([&] {
        std::this_thread::sleep_for(20ms);
        f->set_ready(Status(StatusCode::DEVICE_FAULT, "dma"));
    });
    Status st = f->wait_ready();
    producer.join();
    EXPECT_EQ(st.code(), StatusCode::DEVICE_FAULT);
}

class PipelineConfigTest : public ::testing::Test {
protected:
    std::string write(const std::string& text) {
        dir_ = std::filesystem::temp_directory_path() /
               ("loom-config-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(dir_);
        const std::string path = (dir_ / "p.toml").string();
        std::ofstream(path) << text;
        return path;
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }
    // Expects check_config to fail with "PATH:LINE:" and `fragment` in the message.
    void expect_error(const std::string& text, int line, const std::string& fragment,
                      const std::vector<std::string>& sets = {}) {
        const std::string path = write(text);
        auto r = check_config(path, sets);
        ASSERT_FALSE(r.ok()) << "accepted:\n" << text;
        const std::string msg = r.status().message();
        if (line > 0) {
            EXPECT_EQ(msg.rfind(path + ":" + std::to_string(line) + ":", 0), 0u) << msg;
        }
        EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
    }
    std::filesystem::path dir_;
};

constexpr const char* kGood = R"(
[pipeline]
name = "t"

[[stage]]
name = "decode"
type = "decode"

[[stage]]
name = "split"
type = "tee"
input = "decode"

[[stage]]
name = "a"
type = "null_sink"
input = "split"
queue = { depth = 2, policy = "drop_oldest" }

[[stage]]
name = "b"
type = "passthrough"
input = "split"

[[stage]]
name = "c"
type = "null_sink"
input = "b"
)";

TEST_F(PipelineConfigTest, AValidGraphWithATeeIsAccepted) {
    auto r = check_config(write(kGood), {});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, "t");
}

TEST_F(PipelineConfigTest, EachKindOfMistakeIsNamedByFileLineAndColumn) {
    expect_error("[pipeline\n", 1, "");
    expect_error("[pipeline]\nqueue_depth = 0\n[[stage]]\nname = \"d\"\ntype = \"decode\"\n", 2, "queue_depth");
    expect_error("[pipeline]\nqueue_policy = \"lossy\"\n", 2, "queue_policy 'lossy'");
    expect_error("[pipline]\n", 1, "unknown section 'pipline'");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decod\"\n", 3, "unknown stage type 'decod'");
    expect_error("[[stage]]\nname = \"D!\"\ntype = \"decode\"\n", 2, "'name' is required");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\nhwaccel = 3\n", 4, "'hwaccel' must be a string");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\ncrf = 3\n", 4, "unknown field 'crf'");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\nhwaccel = \"opencl\"\n", 4, "hwaccel 'opencl'");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"d\"\ntype = \"null_sink\"\n"
                 "input = \"d\"\n",
                 5, "used twice");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"e\"\ntype = \"null_sink\"\n"
                 "input = \"x\"\n",
                 4, "input 'x' names no stage");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"p\"\ntype = \"passthrough\"\n"
                 "input = \"d\"\n",
                 4, "goes nowhere");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"a\"\ntype = \"null_sink\"\n"
                 "input = \"d\"\n[[stage]]\nname = \"b\"\ntype = \"null_sink\"\ninput = \"d\"\n",
                 8, "put a tee stage");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"a\"\ntype = \"null_sink\"\n"
                 "input = \"d\"\nqueue = { depth = 2, policy = \"sometimes\" }\n",
                 8, "policy 'sometimes'");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"i\"\ntype = \"infer\"\n"
                 "input = \"d\"\nprecision = \"fp8\"\nmodel = \"m\"\n[[stage]]\nname = \"s\"\ntype = \"null_sink\"\n"
                 "input = \"i\"\n",
                 8, "precision 'fp8'");
    expect_error("[[stage]]\nname = \"d\"\ntype = \"decode\"\n[[stage]]\nname = \"i\"\ntype = \"infer\"\n"
                 "input = \"d\"\nmeasure_host = \"yes\"\nmodel = \"m\"\n[[stage]]\nname = \"s\"\ntype = \"null_sink\"\n"
                 "input = \"i\"\n",
                 8, "measure_host");
    expect_error("[[stage]]\nname = \"a\"\ntype = \"passthrough\"\ninput = \"b\"\n[[stage]]\nname = \"b\"\n"
                 "type = \"passthrough\"\ninput = \"a\"\n",
                 0, "exactly one source");
}

TEST_F(PipelineConfigTest, SetOverridesAFieldAndItsMistakesSayItCameFromTheCommandLine) {
    auto r = check_config(write(kGood), {"pipeline.name=renamed", "b.delay_ms=5"});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(*r, "renamed");
    expect_error(kGood, 0, "(--set b.delay_ms=-5): stage 'b': 'delay_ms' = -5 is out of range", {"b.delay_ms=-5"});
    expect_error(kGood, 0, "no stage named 'nosuch'", {"nosuch.x=1"});
    expect_error(kGood, 0, "expected SECTION.FIELD=VALUE", {"novalue"});
}

// Hostile pipeline files: 3000 mutations of a valid one (bytes flipped, inserted, deleted,
// lines duplicated) are each accepted or refused with a PARSE_ERROR / NOT_FOUND naming the
// file; none crashes or throws.
TEST_F(PipelineConfigTest, MutatedFilesAreAcceptedOrRefusedNamingTheFileNeverCrash) {
    const std::string good = kGood;
    std::mt19937 rng(20261125);
    size_t refused = 0;
    for (int i = 0; i < 3000; ++i) {
        std::string text = good;
        const int edits = 1 + static_cast<int>(rng() % 4);
        for (int e = 0; e < edits && !text.empty(); ++e) {
            const size_t at = rng() % text.size();
            switch (rng() % 4) {
            case 0: text[at] = static_cast<char>(rng() % 256); break;
            case 1: text.insert(at, 1, "[]{}=\"\n,.#'"[rng() % 12]); break;
            case 2: text.erase(at, 1 + rng() % 8); break;
            default: {
                const size_t end = text.find('\n', at);
                text.insert(at, text.substr(at, end == std::string::npos ? std::string::npos : end - at + 1));
            }
            }
        }
        const std::string path = write(text);
        auto r = check_config(path, {});
        if (r.ok()) continue;
        ++refused;
        const StatusCode c = r.status().code();
        EXPECT_TRUE(c == StatusCode::PARSE_ERROR || c == StatusCode::NOT_FOUND) << r.status().to_string();
        EXPECT_EQ(r.status().message().rfind(path, 0), 0u) << r.status().message();
    }
    EXPECT_GT(refused, 1000u);  // the mutations do break files
}

TEST(PipelineStages, TheRegistryListsEveryTypeOnceWithItsRole) {
    std::set<std::string_view> names;
    size_t sources = 0;
    for (const StageType& t : stage_types()) {
        EXPECT_TRUE(names.insert(t.name).second) << t.name;
        ASSERT_NE(find_stage_type(t.name), nullptr);
        EXPECT_EQ(find_stage_type(t.name)->name, t.name);
        EXPECT_FALSE(t.summary.empty()) << t.name;
        EXPECT_FALSE(t.source && t.sink) << t.name;
        sources += t.source;
        ASSERT_NE(t.create, nullptr);
    }
    EXPECT_GE(sources, 1u);
    for (const char* required : {"decode", "testsrc", "infer", "encode", "passthrough", "tee", "null_sink"})
        EXPECT_TRUE(names.count(required)) << required;
}

}  // namespace
}  // namespace loom::pipeline::test_pipeline

namespace loom::pipeline::test_pipeline {  // apart from the rest of its unity batch
namespace {

uint64_t h2d_bytes(const loom::device::Device& dev) {
    return dev.stats().engines[static_cast<size_t>(loom::device::Engine::H2D)].bytes;
}

// upload_frame: a view with padded rows and planes apart lands in device memory as the tight
// frame (one 2-D copy per plane); a tight view is one plain copy; bad views and short
// destinations are refused naming the upload.
TEST(FrameUpload, PaddedViewArrivesTightAndBadViewsAreRefused) {
    auto dev = loom::test::make_device();
    for (PixelFormat format : {PixelFormat::YUV420P, PixelFormat::NV12, PixelFormat::P010}) {
        SCOPED_TRACE(std::string(loom::pixel_format_name(format)));
        const FrameLayout l{format, 7, 5};
        std::vector<uint8_t> tight(l.bytes());
        for (size_t i = 0; i < tight.size(); ++i) tight[i] = static_cast<uint8_t>(i * 13 + 5);
        const loom::FrameView t = loom::FrameView::tight(l, tight.data());
        // Each plane copied into rows of 64 bytes, in buffers of their own.
        std::vector<std::vector<uint8_t>> planes;
        loom::FrameView padded;
        padded.layout = l;
        for (int p = 0; p < t.planes(); ++p) {
            const auto i = static_cast<size_t>(p);
            planes.emplace_back(64 * static_cast<size_t>(t.plane_rows(p)), uint8_t{0xAB});
            for (int64_t r = 0; r < t.plane_rows(p); ++r)
                std::memcpy(planes.back().data() + 64 * r, t.plane[i] + r * t.stride[i], t.plane_row_bytes(p));
            padded.plane[i] = planes.back().data();
            padded.stride[i] = 64;
        }
        for (const loom::FrameView* v : std::initializer_list<const loom::FrameView*>{&t, &padded}) {
            auto buf = loom::test::alloc(*dev, l.bytes(), "frame");
            std::memset(buf.as<uint8_t>().host_data(), 0, l.bytes());
            loom::device::Stream st = dev->create_stream();
            const uint64_t h2d_before = h2d_bytes(*dev);
            ASSERT_TRUE(restore::upload_frame(st, *v, buf.as<uint8_t>(), "frame in").ok());
            ASSERT_TRUE(st.synchronize().ok());
            EXPECT_EQ(0, std::memcmp(buf.as<uint8_t>().host_data(), tight.data(), l.bytes()));
            EXPECT_EQ(h2d_bytes(*dev) - h2d_before, l.bytes()) << "the link carries the pixels only";
        }
    }
    const FrameLayout l{PixelFormat::YUV420P, 8, 8};
    std::vector<uint8_t> data(l.bytes());
    auto small = loom::test::alloc(*dev, l.bytes() - 1, "small");
    loom::device::Stream st = dev->create_stream();
    Status s = restore::upload_frame(st, loom::FrameView::tight(l, data.data()), small.as<uint8_t>(), "frame in");
    EXPECT_NE(s.to_string().find("upload 'frame in'"), std::string::npos) << s.to_string();
    loom::FrameView bad = loom::FrameView::tight(l, data.data());
    bad.stride[0] = 3;
    EXPECT_FALSE(restore::upload_frame(st, bad, small.as<uint8_t>()).ok());
    // The 2-D copy itself refuses rows wider than a pitch and spans past either side.
    auto big = loom::test::alloc(*dev, 64, "big");
    using HV = loom::device::HostView<const uint8_t>;
    EXPECT_FALSE(st.copy_h2d_2d(big.as<uint8_t>(), 4, HV(data.data(), data.size(), false), 8, 8, 2).ok());
    EXPECT_FALSE(st.copy_h2d_2d(big.as<uint8_t>(), 40, HV(data.data(), data.size(), false), 8, 8, 3).ok());
    EXPECT_FALSE(st.copy_h2d_2d(big.as<uint8_t>(), 8, HV(data.data(), 20, false), 16, 8, 3).ok());
    EXPECT_TRUE(st.synchronize().ok());
}

}  // namespace
}  // namespace loom::pipeline::test_pipeline
