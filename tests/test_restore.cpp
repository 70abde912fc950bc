// The restore engine (restore/engine.hpp) and the device context (restore/context.hpp), alone and
// under pipelines: frames pushed from a test come back in order, equal to the infer stage's;
// two pipelines on one context share the model's weights and each gives what it gives alone;
// cancelling interrupts a blocked read and abandons the frames in flight, leaving no file; a
// pipeline is built from text in memory with a source that is not a file; two contexts in one
// process keep their own pools and fault plans. The model is a tiny x2 network written here as
// ncnn files (a 3x3 conv to 12 channels, then a pixel shuffle), so every check runs in
// milliseconds and needs no download.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "common/file.hpp"
#include "compiler/import.hpp"
#include "compiler/model_file.hpp"
#include "pipeline/pipeline.hpp"
#include "preprocess/av_util.hpp"
#include "preprocess/media_io.hpp"
#include "restore/context.hpp"
#include "restore/engine.hpp"
#include "test_util.hpp"
#include "tiny_model.hpp"

namespace loom::restore::test_restore {  // apart from the rest of its unity batch
namespace {

using loom::test::TempDir;
using loom::test::write_tiny_x2;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::shared_ptr<DeviceContext> make_context(unsigned threads = 2, device::FaultPlan faults = {}) {
    ContextOptions o;
    o.device = "edge";
    o.threads = threads;
    o.faults = faults;
    auto c = DeviceContext::create(o);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? *c : nullptr;
}

EngineOptions tiny_options(const TempDir& dir, int64_t in_flight = 3) {
    EngineOptions o;
    o.model.model = "tiny.param";
    o.model.base_dir = dir.file("");
    o.model.where = "test";
    o.in_flight = in_flight;
    return o;
}

// The tiny model's engine for frames of `l` on `ctx` (null, with the failure reported, when it
// cannot be made).
std::unique_ptr<Engine> tiny_engine(const TempDir& dir, const std::shared_ptr<DeviceContext>& ctx, const FrameLayout& l,
                                    int64_t in_flight = 3) {
    auto e = Engine::create(ctx, tiny_options(dir, in_flight), {l, {}});
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(*e) : nullptr;
}

// The engine tests: a temporary folder holding the tiny model, and a device context.
class RestoreEngine : public ::testing::Test {
protected:
    RestoreEngine() { write_tiny_x2(dir, "tiny", 7); }
    TempDir dir;
    std::shared_ptr<DeviceContext> ctx = make_context();
};

// A 4:2:0 frame of seeded samples in the limited range.
std::vector<uint8_t> random_frame(const FrameLayout& l, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> v(16, 235);
    std::vector<uint8_t> f(l.bytes());
    for (uint8_t& x : f) x = static_cast<uint8_t>(v(rng));
    return f;
}

// Every frame of a media file, as tight buffers.
std::vector<std::vector<uint8_t>> read_frames(const std::string& path) {
    std::vector<std::vector<uint8_t>> frames;
    auto r = preprocess::MediaReader::open(path, {});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return frames;
    for (;;) {
        std::vector<uint8_t> f((*r)->info().layout.bytes());
        preprocess::FrameMeta meta;
        auto got = (*r)->read(f.data(), f.size(), meta);
        EXPECT_TRUE(got.ok()) << got.status().to_string();
        if (!got.ok() || !*got) break;
        frames.push_back(std::move(f));
    }
    return frames;
}

std::string stage(const std::string& body) { return "[[stage]]\n" + body + "\n"; }

// testsrc (64x48, `count` frames) -> [infer] -> encode (ffv1, lossless) into `output`.
std::string generated_job(int64_t count, const std::string& output, bool infer, int64_t width = 64,
                          int64_t height = 48) {
    std::string t = fmt::format("[pipeline]\nname = \"gen\"\n\n") +
                    stage(fmt::format("name = \"src\"\ntype = \"testsrc\"\nwidth = {}\nheight = {}\ncount = {}", width,
                                      height, count));
    std::string last = "src";
    if (infer) {
        t += stage("name = \"restore\"\ntype = \"infer\"\ninput = \"src\"\nmodel = \"tiny.param\"");
        last = "restore";
    }
    return t + stage(fmt::format("name = \"out\"\ntype = \"encode\"\ninput = \"{}\"\ncodec = \"ffv1\"\noutput = \"{}\"",
                                 last, output));
}

pipeline::RunOptions run_options(const TempDir& dir, std::shared_ptr<DeviceContext> context = nullptr) {
    pipeline::RunOptions o;
    o.no_cache = true;
    o.models_dir = dir.file("");
    o.context = std::move(context);
    return o;
}

Status run_text(const TempDir& dir, const std::string& text, std::shared_ptr<DeviceContext> context = nullptr,
                nlohmann::json* summary = nullptr) {
    LOOM_ASSIGN_OR_RETURN(
        auto p, pipeline::Pipeline::create(pipeline::PipelineSource::from_text("job.toml", text, dir.file("")),
                                           run_options(dir, std::move(context))));
    Status st = p->run();
    if (summary) *summary = p->summary();
    return st;
}

// A pipeline's run() on a thread of the test's, with its progress and its result.
struct BackgroundRun {
    std::atomic<int64_t> frames{0};
    std::atomic<bool> returned{false};
    Status status;
    std::thread thread;  // last: starts once the fields above exist
    explicit BackgroundRun(pipeline::Pipeline& p)
        : thread([this, &p] {
              status = p.run([this](const pipeline::Progress& pr) { frames = pr.frames_done; }, 20);
              returned = true;
          }) {}
    ~BackgroundRun() {
        if (thread.joinable()) thread.join();
    }
    // Cancels the run and waits for run() to return; returns the ms that took.
    double cancel(pipeline::Pipeline& p) {
        const auto t0 = Clock::now();
        p.cancel();
        thread.join();
        return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
};

// Files in `dir` whose name holds ".partial-": temporary outputs left behind.
size_t partial_files(const TempDir& dir) {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.file("")))
        n += e.path().filename().string().find(".partial-") != std::string::npos;
    return n;
}

// ---- the engine alone ----

// Frames pushed from a test (no pipeline, no thread pulling from a queue) come back through the
// completion in submission order, with their tags, and equal, byte for byte, to what the
// pipeline's infer stage makes of the same frames.
TEST_F(RestoreEngine, FramesPushedFromATestComeBackInOrderEqualToTheInferStage) {
    ASSERT_TRUE(run_text(dir, generated_job(9, "in.mkv", false)).ok());
    const std::string restore_job =
        "[pipeline]\nname = \"r\"\n" + stage("name = \"decode\"\ntype = \"decode\"\ninput = \"in.mkv\"") +
        stage("name = \"restore\"\ntype = \"infer\"\ninput = \"decode\"\nmodel = \"tiny.param\"") +
        stage("name = \"out\"\ntype = \"encode\"\ninput = \"restore\"\ncodec = \"ffv1\"\noutput = \"out.mkv\"");
    ASSERT_TRUE(run_text(dir, restore_job).ok());
    const auto inputs = read_frames(dir.file("in.mkv"));
    const auto expected = read_frames(dir.file("out.mkv"));
    ASSERT_EQ(inputs.size(), 9u);
    ASSERT_EQ(expected.size(), 9u);

    ASSERT_TRUE(ctx);
    auto info = preprocess::MediaReader::open(dir.file("in.mkv"), {});
    ASSERT_TRUE(info.ok());
    auto engine = Engine::create(ctx, tiny_options(dir), {(*info)->info().layout, (*info)->info().color});
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    Engine& e = **engine;
    EXPECT_EQ(e.scale(), 2);
    EXPECT_EQ(e.output_format().layout.width, 128);
    EXPECT_EQ(e.output_format().layout.height, 96);

    // The completion copies each frame out and drops the view, giving the engine's buffer
    // back: more frames than buffers go through.
    struct Done {
        uint64_t sequence, tag;
        Status status;
        std::vector<uint8_t> bytes;
    };
    std::mutex m;
    std::vector<Done> done;
    for (size_t i = 0; i < inputs.size(); ++i) {
        const FrameView v = FrameView::tight(e.input_format().layout, inputs[i].data());
        ASSERT_TRUE(e.submit(
                         v,
                         [&](RestoredFrame r) {
                             Done d{r.sequence, r.tag, r.status, std::vector<uint8_t>(r.view.layout.bytes())};
                             if (r.status.ok()) r.view.copy_to(d.bytes.data());
                             std::lock_guard lock(m);
                             done.push_back(std::move(d));
                         },
                         nullptr, 100 + i)
                        .ok());
    }
    e.flush();
    ASSERT_EQ(done.size(), inputs.size());
    for (size_t i = 0; i < done.size(); ++i) {
        EXPECT_EQ(done[i].sequence, i);
        EXPECT_EQ(done[i].tag, 100 + i);
        ASSERT_TRUE(done[i].status.ok()) << done[i].status.to_string();
        EXPECT_EQ(done[i].bytes, expected[i]) << "frame " << i;
    }
    const EngineStats s = e.stats();
    EXPECT_EQ(s.frames_submitted, 9u);
    EXPECT_EQ(s.frames_completed, 9u);
    EXPECT_EQ(s.frames_failed, 0u);
    EXPECT_EQ(s.h2d_bytes, 9 * e.input_format().layout.bytes());
    EXPECT_GT(s.sim_fps, 0.0);
    EXPECT_GT(s.device_memory_reserved, 0u);
}

// Frames into the caller's memory; a frame of another size is refused before anything runs;
// nothing goes to the completion of a refused frame.
TEST_F(RestoreEngine, WritesIntoTheCallersMemoryAndRefusesAFrameOfAnotherLayout) {
    const FrameLayout l{PixelFormat::NV12, 40, 30};
    auto engine = tiny_engine(dir, ctx, l, 2);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    EXPECT_EQ(e.output_format().layout.format, PixelFormat::NV12);
    const auto in = random_frame(l, 3);
    device::PinnedBuffer<uint8_t> dst(e.output_format().layout.bytes());
    std::atomic<int> calls{0};
    ASSERT_TRUE(e.submit(
                     FrameView::tight(l, in.data()),
                     [&](RestoredFrame r) {
                         EXPECT_TRUE(r.status.ok());
                         EXPECT_EQ(r.view.plane[0], dst.data());
                         ++calls;
                     },
                     dst.data())
                    .ok());
    const FrameLayout other{PixelFormat::NV12, 42, 30};
    const auto bad = random_frame(other, 4);
    Status st = e.submit(FrameView::tight(other, bad.data()), [&](RestoredFrame) { ++calls; });
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("42x30"), std::string::npos) << st.message();
    e.flush();
    EXPECT_EQ(calls.load(), 1);
    EXPECT_NE(std::count(dst.data(), dst.data() + dst.size(), 0), static_cast<std::ptrdiff_t>(dst.size()));
}

// abandon(): every frame submitted still gets its completion, in order, OK or CANCELLED; the
// last of a batch queued behind slow frames is abandoned; later submits are refused.
TEST_F(RestoreEngine, AbandonCompletesEveryFrameInOrderAndRefusesMore) {
    const FrameLayout l{PixelFormat::YUV420P, 512, 512};
    auto engine = tiny_engine(dir, ctx, l, 3);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const auto in = random_frame(l, 5);
    std::mutex m;
    std::vector<RestoredFrame> done;
    for (int i = 0; i < 3; ++i)
        ASSERT_TRUE(e.submit(FrameView::tight(l, in.data()), [&](RestoredFrame r) {
                         std::lock_guard lock(m);
                         done.push_back(std::move(r));
                     }).ok());
    e.abandon();
    e.flush();
    ASSERT_EQ(done.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(done[i].sequence, i);
        EXPECT_TRUE(done[i].status.ok() || done[i].status.code() == StatusCode::CANCELLED)
            << done[i].status.to_string();
    }
    EXPECT_EQ(done[2].status.code(), StatusCode::CANCELLED) << done[2].status.to_string();
    EXPECT_EQ(e.submit(FrameView::tight(l, in.data()), [](RestoredFrame) {}).code(), StatusCode::CANCELLED);
}

// A model that is not there, and one that is no restoration model, fail at create naming the
// request and the file.
TEST(RestoreEngineCreate, BadModelsFailAtCreateNamingTheRequest) {
    TempDir dir;
    auto ctx = make_context();
    EngineOptions o = tiny_options(dir);
    o.model.where = "jobs.toml:7:9: infer";
    auto missing = Engine::create(ctx, o, {{PixelFormat::YUV420P, 32, 32}, {}});
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), StatusCode::NOT_FOUND);
    EXPECT_NE(missing.status().message().find("jobs.toml:7:9: infer: model file"), std::string::npos)
        << missing.status().message();
    dir.write("tiny.param", "7767517\n2 2\nInput in 0 1 data\nPooling p 1 1 data out 0=1 1=2 2=2\n");
    dir.write("tiny.bin", "");
    auto shrink = Engine::create(ctx, o, {{PixelFormat::YUV420P, 32, 32}, {}});
    ASSERT_FALSE(shrink.ok());
    EXPECT_NE(shrink.status().message().find("a restoration model gives 1x3x(s*H)x(s*W)"), std::string::npos)
        << shrink.status().message();
}

// ---- the device context ----

// Two engines of one model on one context: compiled and uploaded once (the second is told so),
// the device memory of the weights taken once; both restore the same frame to the same bytes.
TEST(DeviceContext, EnginesOfOneModelShareItsWeightsOnce) {
    TempDir dir;
    write_tiny_x2(dir, "tiny", 10);
    auto ctx = make_context();
    const FrameLayout l{PixelFormat::YUV420P, 48, 32};
    const size_t before = ctx->device().stats().memory_used;
    auto a = Engine::create(ctx, tiny_options(dir), {l, {}});
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    const size_t one = ctx->device().stats().memory_used - before;
    auto b = Engine::create(ctx, tiny_options(dir), {l, {}});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    const size_t two = ctx->device().stats().memory_used - before;
    EXPECT_FALSE((*a)->stats().weights_shared);
    EXPECT_TRUE((*b)->stats().weights_shared);
    const size_t weights = (*a)->stats().weight_bytes;
    EXPECT_GT(weights, 0u);
    // The second engine took its slots, not the weights (the arena rounds each buffer up).
    EXPECT_LE(two - one, one - weights + 256);
    EXPECT_GE(two - one + 256, one - weights);
    const ModelCacheStats mc = ctx->model_cache();
    EXPECT_EQ(mc.loads, 1u);
    EXPECT_EQ(mc.reuses, 1u);
    EXPECT_EQ(mc.models_live, 1u);
    EXPECT_EQ(mc.weight_bytes_saved, weights);
    const auto in = random_frame(l, 6);
    std::vector<uint8_t> out_a, out_b;
    auto grab = [](std::vector<uint8_t>& into) {
        return [&into](RestoredFrame r) {
            ASSERT_TRUE(r.status.ok());
            into.resize(r.view.layout.bytes());
            r.view.copy_to(into.data());
        };
    };
    ASSERT_TRUE((*a)->submit(FrameView::tight(l, in.data()), grab(out_a)).ok());
    ASSERT_TRUE((*b)->submit(FrameView::tight(l, in.data()), grab(out_b)).ok());
    (*a)->flush();
    (*b)->flush();
    EXPECT_EQ(out_a, out_b);
    // Gone with its last engine: the cache keeps nothing alive.
    a->reset();
    b->reset();
    EXPECT_EQ(ctx->model_cache().models_live, 0u);
    EXPECT_EQ(ctx->device().stats().memory_used, before);
}

// The memory floor: imported, not compiled, it gives the output's size and a figure that every
// plan the options allow takes at least (whole frames only, tiles only, the engine's choice).
TEST(MemoryFloor, IsTheOutputSizeAndALowerBoundOfWhatAnEngineTakes) {
    TempDir dir;
    write_tiny_x2(dir, "tiny", 15);
    auto ctx = make_context();
    const FrameLayout l{PixelFormat::YUV420P, 96, 64};
    for (const int64_t tile : {int64_t{-1}, int64_t{0}, int64_t{32}}) {
        SCOPED_TRACE(fmt::format("tile {}", tile));
        EngineOptions o = tiny_options(dir, 4);
        o.tile = tile;
        auto floor = Engine::memory_floor(o, {l, {}});
        ASSERT_TRUE(floor.ok()) << floor.status().to_string();
        EXPECT_EQ(floor->output.layout.width, 192);
        EXPECT_EQ(floor->output.layout.height, 128);
        EXPECT_EQ(floor->weight_bytes, 324u * 4);
        const size_t before = ctx->device().stats().memory_used;
        auto e = Engine::create(ctx, o, {l, {}});
        ASSERT_TRUE(e.ok()) << e.status().to_string();
        const size_t taken = ctx->device().stats().memory_used - before;
        EXPECT_GE(taken, floor->bytes) << floor->detail;
        EXPECT_EQ((*e)->output_format().layout.bytes(), floor->output.layout.bytes());
    }
    // Whole frames only: every slot's frames count, so more in flight needs more.
    EngineOptions whole = tiny_options(dir, 2);
    whole.tile = -1;
    auto two = Engine::memory_floor(whole, {l, {}});
    whole.in_flight = 16;
    auto sixteen = Engine::memory_floor(whole, {l, {}});
    ASSERT_TRUE(two.ok() && sixteen.ok());
    EXPECT_EQ(sixteen->bytes - sixteen->weight_bytes, 8 * (two->bytes - two->weight_bytes));
    // A model that is not x s fails as create() fails, naming the request.
    dir.write("tiny.param", "7767517\n2 2\nInput in 0 1 data\nPooling p 1 1 data out 0=1 1=2 2=2\n");
    dir.write("tiny.bin", "");
    auto bad = Engine::memory_floor(tiny_options(dir), {l, {}});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("test"), std::string::npos) << bad.status().to_string();
}

// The floor of the real models (each family, the scale from its descriptor): a lower bound of
// what its engine reserves, whole frames only and tiles, and the engine's output size.
TEST(MemoryFloor, RealModelsOfEveryFamilyStayBelowWhatTheirEnginesReserve) {
    const std::filesystem::path root = default_models_dir();
    const std::vector<std::string> models = {
        "realesr-animevideov3/realesr-animevideov3-x2", "realesr-animevideov3/realesrgan-x4plus-anime",
        "realcugan-se/up2x-conservative", "realcugan-se/up3x-no-denoise", "waifu2x-cunet/noise0_scale2.0x_model",
        "waifu2x-cunet/noise1_model", "waifu2x-upconv7/scale2.0x_model"};
    for (const std::string& m : models)
        if (!std::filesystem::exists(root / (m + ".param")))
            GTEST_SKIP() << "the models are not in " << root << " (run scripts/fetch-models)";
    auto ctx = make_context();
    const FrameLayout l{PixelFormat::YUV420P, 40, 24};
    for (const std::string& m : models) {
        // The U-Nets and UpConv7 do not tile yet (their floor assumes they could: still a lower
        // bound).
        const bool tiles = m.rfind("realesr", 0) == 0;
        for (const int64_t tile : {int64_t{-1}, int64_t{16}}) {
            if (tile > 0 && !tiles) continue;
            SCOPED_TRACE(fmt::format("{} tile {}", m, tile));
            EngineOptions o;
            o.model.model = (root / (m + ".param")).string();
            o.model.where = "test";
            o.in_flight = 1;
            o.tile = tile;
            auto floor = Engine::memory_floor(o, {l, {}});
            ASSERT_TRUE(floor.ok()) << floor.status().to_string();
            EXPECT_GT(floor->weight_bytes, 0u);
            const size_t before = ctx->device().stats().memory_used;
            auto e = Engine::create(ctx, o, {l, {}});
            ASSERT_TRUE(e.ok()) << e.status().to_string();
            EXPECT_GE(ctx->device().stats().memory_used - before, floor->bytes) << floor->detail;
            EXPECT_EQ((*e)->output_format().layout.width, floor->output.layout.width);
            EXPECT_EQ((*e)->output_format().layout.height, floor->output.layout.height);
        }
    }
}

// A pipeline's needs: its source probed (a file, or a generated source), its infer stage's floor,
// found before anything is built; a mistake names the stage.
TEST(MemoryFloor, APipelinesNeedsComeFromItsSourceAndItsInferStage) {
    TempDir dir;
    write_tiny_x2(dir, "tiny", 16);
    const std::string text = generated_job(5, dir.file("never.mkv"), true, 80, 48);
    pipeline::RunOptions ro;
    ro.sets = {"restore.in_flight=2", "restore.tile=-1"};
    auto needs = pipeline::estimate_needs(pipeline::PipelineSource::from_text("gen", text, dir.file("")), ro);
    ASSERT_TRUE(needs.ok()) << needs.status().to_string();
    EXPECT_EQ(needs->source.width, 80);
    EXPECT_EQ(needs->source.height, 48);
    EXPECT_EQ(needs->frames_expected, 5);
    EngineOptions o = tiny_options(dir, 2);
    o.tile = -1;
    auto floor = Engine::memory_floor(o, {{PixelFormat::YUV420P, 80, 48}, {}});
    ASSERT_TRUE(floor.ok());
    EXPECT_EQ(needs->device_bytes_min, floor->bytes);
    ASSERT_EQ(needs->detail.size(), 1u);
    EXPECT_NE(needs->detail[0].find("2 in flight"), std::string::npos) << needs->detail[0];
    EXPECT_FALSE(std::filesystem::exists(dir.file("never.mkv")));
    ro.sets = {"restore.model=\"missing.param\""};
    auto missing = pipeline::estimate_needs(pipeline::PipelineSource::from_text("gen", text, dir.file("")), ro);
    ASSERT_FALSE(missing.ok());
    EXPECT_NE(missing.status().message().find("stage 'restore'"), std::string::npos) << missing.status().to_string();
    EXPECT_NE(missing.status().message().find("missing.param"), std::string::npos) << missing.status().to_string();
}

// Two contexts in one process: each has its own pool (thread count) and its own fault plan; a
// fault planned for one never reaches the other.
TEST(DeviceContext, TwoContextsKeepTheirOwnPoolsAndFaultPlans) {
    TempDir dir;
    write_tiny_x2(dir, "tiny", 11);
    device::FaultPlan faults;
    faults.fail_launch = 1;
    auto faulty = make_context(1, faults);
    auto clean = make_context(2);
    EXPECT_EQ(faulty->pool().size(), 1u);
    EXPECT_EQ(clean->pool().size(), 2u);
    const FrameLayout l{PixelFormat::YUV420P, 32, 32};
    auto ea = Engine::create(faulty, tiny_options(dir, 1), {l, {}});
    auto eb = Engine::create(clean, tiny_options(dir, 1), {l, {}});
    ASSERT_TRUE(ea.ok() && eb.ok());
    const auto in = random_frame(l, 7);
    Status sa, sb;
    ASSERT_TRUE((*ea)->submit(FrameView::tight(l, in.data()), [&](RestoredFrame r) { sa = r.status; }).ok());
    ASSERT_TRUE((*eb)->submit(FrameView::tight(l, in.data()), [&](RestoredFrame r) { sb = r.status; }).ok());
    (*ea)->flush();
    (*eb)->flush();
    EXPECT_EQ(sa.code(), StatusCode::DEVICE_FAULT) << sa.to_string();
    EXPECT_TRUE(sb.ok()) << sb.to_string();
}

// ---- pipelines on the engine ----

// Two pipelines, each built from text in memory with a test source (no file in), run at once on
// one context: the model is loaded once for both, and each output equals its run alone.
TEST(PipelineOnContext, TwoPipelinesAtOnceShareTheModelAndEachEqualsItsRunAlone) {
    TempDir dir;
    write_tiny_x2(dir, "tiny", 12);
    ASSERT_TRUE(run_text(dir, generated_job(7, "a_alone.mkv", true)).ok());
    ASSERT_TRUE(run_text(dir, generated_job(5, "b_alone.mkv", true)).ok());

    auto ctx = make_context();
    auto a = pipeline::Pipeline::create(
        pipeline::PipelineSource::from_text("a.toml", generated_job(7, "a.mkv", true), dir.file("")),
        run_options(dir, ctx));
    auto b = pipeline::Pipeline::create(
        pipeline::PipelineSource::from_text("b.toml", generated_job(5, "b.mkv", true), dir.file("")),
        run_options(dir, ctx));
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    Status sa, sb;
    std::thread ta([&] { sa = (*a)->run(); });
    std::thread tb([&] { sb = (*b)->run(); });
    ta.join();
    tb.join();
    ASSERT_TRUE(sa.ok()) << sa.to_string();
    ASSERT_TRUE(sb.ok()) << sb.to_string();
    EXPECT_EQ(read_frames(dir.file("a.mkv")), read_frames(dir.file("a_alone.mkv")));
    EXPECT_EQ(read_frames(dir.file("b.mkv")), read_frames(dir.file("b_alone.mkv")));
    EXPECT_EQ(read_frames(dir.file("a.mkv")).size(), 7u);
    const ModelCacheStats mc = ctx->model_cache();
    EXPECT_EQ(mc.loads, 1u);
    EXPECT_EQ(mc.reuses, 1u);
    const nlohmann::json s = (*b)->summary();
    EXPECT_EQ(s["device"]["shared"], true);
    EXPECT_EQ(s["stages"][1]["weights_shared"], true) << s.dump(2);
    EXPECT_EQ(s["stages"][0]["type"], "testsrc");
}

// A mistake in text from memory is named by the text's name, line and column.
TEST(PipelineOnContext, AnInMemoryConfigsMistakeIsNamedByItsNameLineAndColumn) {
    const std::string text = "[pipeline]\nname = \"x\"\n\n[[stage]]\nname = \"src\"\ntype = \"testsrc\"\nwidht = 64\n";
    auto r = pipeline::check_config(pipeline::PipelineSource::from_text("submitted job", text), {});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message().rfind("submitted job:7:1:", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find("widht"), std::string::npos) << r.status().message();
}

// cancel() from another thread while the source waits on a pipe that gives no more data: run()
// returns CANCELLED within a frame's time (the read is interrupted), and nothing is left behind.
TEST(PipelineOnContext, CancelDuringABlockedReadReturnsWithinOneFrameTime) {
    TempDir dir;
    write_tiny_x2(dir, "tiny", 13);
    ASSERT_TRUE(run_text(dir, generated_job(60, "in.mkv", false)).ok());
    const std::string fifo = dir.file("live.fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::string bytes;
    {
        std::ifstream f(dir.file("in.mkv"), std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(f), {});
    }
    ASSERT_GT(bytes.size(), 1000u);
    // The writer gives two thirds of the file, then holds the pipe open without writing.
    std::atomic<bool> release{false};
    struct Join {
        std::atomic<bool>& release;
        std::thread& t;
        ~Join() {
            release = true;
            if (t.joinable()) t.join();
        }
    };
    std::thread writer;
    Join join_writer{release, writer};
    writer = std::thread([&] {
        const int fd = ::open(fifo.c_str(), O_WRONLY);
        if (fd < 0) return;
        size_t off = 0;
        const size_t part = bytes.size() * 2 / 3;
        while (off < part) {
            const ssize_t n = ::write(fd, bytes.data() + off, part - off);
            if (n <= 0) break;
            off += static_cast<size_t>(n);
        }
        while (!release.load()) std::this_thread::sleep_for(10ms);
        ::close(fd);
    });
    const std::string text = "[pipeline]\nname = \"live\"\n" +
                             stage("name = \"decode\"\ntype = \"decode\"\ninput = \"live.fifo\"\nhwaccel = \"none\"") +
                             stage("name = \"restore\"\ntype = \"infer\"\ninput = \"decode\"\nmodel = \"tiny.param\"") +
                             stage(
                                 "name = \"out\"\ntype = \"encode\"\ninput = \"restore\"\ncodec = \"ffv1\"\n"
                                 "output = \"out.mkv\"");
    auto p = pipeline::Pipeline::create(pipeline::PipelineSource::from_text("live.toml", text, dir.file("")),
                                        run_options(dir));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    BackgroundRun run(**p);
    // Wait until the frames that came stop coming: the source is blocked on the pipe.
    int64_t last = -1;
    for (int i = 0; i < 200 && (run.frames.load() == 0 || run.frames.load() != last); ++i) {
        last = run.frames.load();
        std::this_thread::sleep_for(150ms);
    }
    EXPECT_GT(run.frames.load(), 0);
    EXPECT_FALSE(run.returned.load());
    const double ms = run.cancel(**p);
    EXPECT_EQ(run.status.code(), StatusCode::CANCELLED) << run.status.to_string();
    EXPECT_LT(ms, 1000.0);
    EXPECT_FALSE(std::filesystem::exists(dir.file("out.mkv")));
    EXPECT_EQ(partial_files(dir), 0u);
}

// cancel() in the middle of a long run abandons the frames in flight on the device: run() is
// back within about a frame's time, with no output and no temporary file left.
TEST(PipelineOnContext, CancelMidRunAbandonsFramesInFlightAndLeavesNoFile) {
    TempDir dir;
    write_tiny_x2(dir, "tiny", 14);
    auto p = pipeline::Pipeline::create(
        pipeline::PipelineSource::from_text("long.toml", generated_job(100000, "out.mkv", true, 256, 192),
                                            dir.file("")),
        run_options(dir));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    BackgroundRun run(**p);
    while (run.frames.load() < 3 && !run.returned.load()) std::this_thread::sleep_for(10ms);
    ASSERT_FALSE(run.returned.load()) << "the run ended by itself: " << run.status.to_string();
    const double ms = run.cancel(**p);
    const Status& st = run.status;
    EXPECT_EQ(st.code(), StatusCode::CANCELLED) << st.to_string();
    EXPECT_NE(st.message().find("cancelled after"), std::string::npos) << st.message();  // not a stage's failure
    EXPECT_EQ((*p)->summary()["status"], "cancelled");
    EXPECT_LT(ms, 2000.0);
    EXPECT_LT(run.frames.load(), 100000);
    EXPECT_FALSE(std::filesystem::exists(dir.file("out.mkv")));
    EXPECT_EQ(partial_files(dir), 0u);
}

// Two writers of one output in one process get different temporary names.
TEST(PipelineOnContext, TemporaryOutputNamesAreUniqueWithinAProcess) {
    const std::string a = preprocess::av::temporary_name("/tmp/x/out.mkv");
    const std::string b = preprocess::av::temporary_name("/tmp/x/out.mkv");
    EXPECT_NE(a, b);
    EXPECT_EQ(a.rfind("/tmp/x/.out.partial-", 0), 0u) << a;
    EXPECT_TRUE(a.ends_with(".mkv")) << a;
}

// A compiled model file (.loom) as the model: the frames it was compiled for come out as the
// model compiled on the fly gives them; another size, tiles or a host-mode file are refused
// naming the file and the size; its floor and frame size are read from the file.
// tile 0 (the engine's choice) runs as many frames in flight as the device's memory holds, up
// to in_flight, before it tiles; tile -1 (whole frames as asked) takes in_flight or fails. On a
// device whose memory holds the weights and two frames' buffers and arenas, not three: the
// engine runs 2 and restores what an engine of 3 restores.
TEST_F(RestoreEngine, FewerFramesInFlightWhenTheDeviceMemoryHoldsFewer) {
    const FrameLayout l{PixelFormat::YUV420P, 320, 192};
    size_t base = 0, taken[3] = {};
    for (int64_t n : {1, 2}) {
        auto c = make_context();
        base = c->device().stats().memory_used;
        EngineOptions o = tiny_options(dir, n);
        o.tile = -1;
        auto e = Engine::create(c, o, {l, {}});
        ASSERT_TRUE(e.ok()) << e.status().to_string();
        taken[n] = c->device().stats().memory_used - base;
    }
    const size_t slot = taken[2] - taken[1];
    ASSERT_GT(slot, size_t{2} << 20) << "a frame's arena should span MiBs";
    const size_t capacity_mib = (base + taken[2] + slot / 2) >> 20;
    dir.write("small.toml", fmt::format("base = \"edge\"\nname = \"small\"\n[memory]\ncapacity_mib = {}\n", capacity_mib));
    ContextOptions co;
    co.device = dir.file("small.toml");
    co.threads = 2;
    auto small = DeviceContext::create(co);
    ASSERT_TRUE(small.ok()) << small.status().to_string();

    auto fit = Engine::create(*small, tiny_options(dir, 3), {l, {}});
    ASSERT_TRUE(fit.ok()) << fit.status().to_string();
    EXPECT_EQ((*fit)->describe()["in_flight"], 2);
    EXPECT_FALSE((*fit)->describe().contains("tiles")) << "fewer frames in flight come before tiles";
    auto three = tiny_engine(dir, ctx, l, 3);
    ASSERT_TRUE(three);
    EXPECT_EQ(three->describe()["in_flight"], 3);
    std::vector<std::vector<uint8_t>> got(4), want(4), inputs;
    for (uint32_t i = 0; i < 4; ++i) inputs.push_back(random_frame(l, 40 + i));  // read until the flush
    for (uint32_t i = 0; i < 4; ++i) {
        const auto& in = inputs[i];
        for (auto* e : {fit->get(), three.get()}) {
            auto& into = e == three.get() ? want[i] : got[i];
            ASSERT_TRUE(e->submit(FrameView::tight(l, in.data()), [&into](RestoredFrame r) {
                             ASSERT_TRUE(r.status.ok()) << r.status.to_string();
                             into.resize(r.view.layout.bytes());
                             r.view.copy_to(into.data());
                         }).ok());
        }
    }
    (*fit)->flush();
    three->flush();
    for (size_t i = 0; i < 4; ++i) {
        ASSERT_FALSE(want[i].empty());
        EXPECT_TRUE(got[i] == want[i]) << "frame " << i;
    }
    fit->reset();

    EngineOptions exact = tiny_options(dir, 3);
    exact.tile = -1;
    auto refused = Engine::create(*small, exact, {l, {}});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY) << refused.status().to_string();
}

TEST_F(RestoreEngine, ACompiledModelFileRestoresItsOwnFrameSizeAsTheModelDoes) {
    const FrameLayout l{PixelFormat::YUV420P, 48, 32};
    {
        auto g = compiler::import_model(dir.file("tiny.param"));
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        compiler::CompileOptions o;
        o.shapes.emplace_back(g->value(g->inputs[0]).name, std::vector<int64_t>{1, 3, l.height, l.width});
        auto m = compiler::compile_graph(std::move(*g), o, ctx->device().spec());
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        ASSERT_TRUE(compiler::save_compiled_model(dir.file("tiny.loom"), *m).ok());
    }
    EngineOptions compiled = tiny_options(dir, 2);
    compiled.model.model = "tiny.loom";
    auto size = compiled_frame_size(compiled.model);
    ASSERT_TRUE(size.ok()) << size.status().to_string();
    ASSERT_TRUE(size->has_value());
    EXPECT_EQ(**size, (std::array<int64_t, 2>{48, 32}));
    auto none = compiled_frame_size(tiny_options(dir).model);
    ASSERT_TRUE(none.ok() && !none->has_value());

    auto floor = Engine::memory_floor(compiled, {l, {}});
    ASSERT_TRUE(floor.ok()) << floor.status().to_string();
    EXPECT_EQ(floor->output.layout, (FrameLayout{PixelFormat::YUV420P, 96, 64}));
    EXPECT_GT(floor->weight_bytes, 0u);

    auto a = Engine::create(ctx, compiled, {l, {}});
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    auto b = tiny_engine(dir, ctx, l, 2);
    ASSERT_TRUE(b);
    EXPECT_EQ((*a)->scale(), 2);
    for (uint32_t seed = 1; seed <= 3; ++seed) {
        const auto in = random_frame(l, seed);
        std::vector<uint8_t> got, want;
        ASSERT_TRUE((*a)->submit(FrameView::tight(l, in.data()), [&](RestoredFrame r) {
                             ASSERT_TRUE(r.status.ok()) << r.status.to_string();
                             got.resize(r.view.layout.bytes());
                             r.view.copy_to(got.data());
                         }).ok());
        ASSERT_TRUE(b->submit(FrameView::tight(l, in.data()), [&](RestoredFrame r) {
                          ASSERT_TRUE(r.status.ok()) << r.status.to_string();
                          want.resize(r.view.layout.bytes());
                          r.view.copy_to(want.data());
                      }).ok());
        (*a)->flush();
        b->flush();
        ASSERT_FALSE(want.empty());
        EXPECT_TRUE(got == want) << "frame " << seed << " differs from the model compiled on the fly";
    }

    auto other = Engine::create(ctx, compiled, {{PixelFormat::YUV420P, 64, 32}, {}});
    EXPECT_EQ(other.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(other.status().message().find("tiny.loom is compiled for 1x3x32x48 (48x32 frames)"), std::string::npos)
        << other.status().message();
    EXPECT_FALSE(Engine::memory_floor(compiled, {{PixelFormat::YUV420P, 64, 32}, {}}).ok());
    compiled.tile = 16;
    auto tiled = Engine::create(ctx, compiled, {l, {}});
    EXPECT_EQ(tiled.status().code(), StatusCode::UNSUPPORTED);
    EXPECT_NE(tiled.status().message().find("tile 16"), std::string::npos) << tiled.status().message();

    dir.write("bad.loom", "LOOMMODL not really a model");
    compiled.tile = 0;
    compiled.model.model = "bad.loom";
    auto bad = Engine::create(ctx, compiled, {l, {}});
    EXPECT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("bad.loom"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace loom::restore::test_restore
