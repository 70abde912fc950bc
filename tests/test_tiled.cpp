// Large frames (executor/tiled.cpp): a model run over tiles of a frame with a halo gives the
// untiled run's output bit for bit (memcmp), on conv chains through every conv path (Winograd,
// GEMM, depthwise, 1x1), on SR networks at scales 2 and 4, and on frame sizes that are multiples of nothing;
// the tiling rule itself; non-tileable models refused naming the node; the tile chosen from
// device memory.
#include <gtest/gtest.h>

#include <cstring>

#include "compiler/compile.hpp"
#include "compiler/ops.hpp"
#include "executor/executor.hpp"
#include "executor/tiled.hpp"
#include "tests/run_util.hpp"
#include "tests/test_util.hpp"

namespace loom {
namespace {

using compiler::HostTensor;
using device::KernelAttrs;

const KernelAttrs kPad1{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};

test::GraphBuilder conv_chain(int convs, int64_t ch) { return test::srvgg_graph(convs, ch, 0); }
test::GraphBuilder srvgg(int convs, int64_t ch, int64_t s) { return test::srvgg_graph(convs, ch, s); }

// The untiled run: compiled for the whole frame, one inference.
HostTensor run_untiled(const compiler::Graph& g, const HostTensor& frame, device::Device& dev,
                       compiler::Precision precision = compiler::Precision::FP32) {
    return test::run_compiled(g, frame, dev, precision);
}

HostTensor run_tiled(const compiler::Graph& g, const HostTensor& frame, device::Device& dev, int64_t tile,
                     executor::TiledStats* stats = nullptr, compiler::Precision precision = compiler::Precision::FP32) {
    executor::TiledOptions o;
    o.tile = tile;
    o.precision = precision;
    auto r = executor::TiledRunner::create(dev, g, frame.dims(), o);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_GT((*r)->plan().tiles(), 1u);  // every caller means to tile
    auto y = (*r)->run(frame, stats);
    EXPECT_TRUE(y.ok()) << y.status().to_string();
    return std::move((*y)[0]);
}

// Bit-exact comparison; on a difference reports the first differing element and how many.
void expect_identical(const HostTensor& a, const HostTensor& b, const std::string& what) {
    ASSERT_EQ(a.dims(), b.dims()) << what;
    ASSERT_EQ(a.bytes(), b.bytes()) << what;
    if (std::memcmp(a.data(), b.data(), a.bytes()) == 0) return;
    const float* x = a.as<float>();
    const float* y = b.as<float>();
    int64_t first = -1, count = 0;
    for (int64_t i = 0; i < a.elements(); ++i)
        if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) {
            if (first < 0) first = i;
            ++count;
        }
    const auto& d = a.dims();
    ADD_FAILURE() << what << ": " << count << " of " << a.elements() << " elements differ; the first at (c "
                  << first / (d[2] * d[3]) % d[1] << ", y " << first / d[3] % d[2] << ", x " << first % d[3]
                  << "): " << x[first] << " vs " << y[first];
}

TEST(TilePlan, WindowsAlignedLastAtTheEdgeAndEveryKeptPixelHasItsHalo) {
    for (int64_t align : {1, 2, 4})
        for (int64_t halo : {0, 1, 3, 5, 8})
            for (int64_t step : {1, 4, 8, 12, 16, 33})
                for (int64_t frame : {1, 5, 16, 37, 53, 64, 71, 100}) {
                    const compiler::SpatialTiling t{1, halo, align};
                    const executor::TileAxis a = executor::plan_tile_axis(frame, step, t);
                    const std::string at = ::testing::PrintToString(std::vector<int64_t>{frame, step, halo, align});
                    ASSERT_EQ(a.cuts.size(), a.count() + 1) << at;
                    EXPECT_EQ(a.cuts.front(), 0) << at;
                    EXPECT_EQ(a.cuts.back(), frame) << at;
                    EXPECT_EQ(a.step % align, 0) << at;
                    if (a.count() == 1) {
                        EXPECT_EQ(a.window, frame) << at;
                        EXPECT_LE(frame, a.step + 2 * halo + align - 1) << at;
                        continue;
                    }
                    EXPECT_LE(a.window, a.step + 2 * halo + align - 1) << at;
                    EXPECT_EQ(a.origins.back() + a.window, frame) << at;
                    for (size_t i = 0; i < a.count(); ++i) {
                        const int64_t o = a.origins[i], lo = a.cuts[i], hi = a.cuts[i + 1];
                        EXPECT_EQ(o % align, 0) << at;
                        EXPECT_LT(lo, hi) << at;
                        EXPECT_GE(o, 0) << at;
                        // The kept pixels lie halo pixels inside the window, or reach a frame edge.
                        EXPECT_TRUE(lo == 0 ? o == 0 : lo - o >= halo) << at << " tile " << i;
                        EXPECT_TRUE(hi == frame ? o + a.window == frame : o + a.window - hi >= halo)
                            << at << " tile " << i;
                    }
                    // As few windows as the step allows: one fewer would leave a gap.
                    EXPECT_LT(static_cast<int64_t>(a.count() - 2) * a.step + a.window, frame) << at;
                }
}

TEST(TilePlan, BalancingKeepsTheCountWithLessOverlap) {
    const compiler::SpatialTiling t{1, 5, 4};
    const int64_t frame = 2100;
    const executor::TileAxis wide = executor::plan_tile_axis(frame, 1984, t);
    const int64_t step = executor::balance_tile_step(frame, 1984, t);
    const executor::TileAxis balanced = executor::plan_tile_axis(frame, step, t);
    EXPECT_EQ(wide.count(), 2u);
    EXPECT_EQ(balanced.count(), 2u);
    EXPECT_LT(balanced.window, 1100);
    EXPECT_EQ(executor::plan_tile_axis(frame, step - t.align, t).count(), 3u);
}

TEST(Tiled, ConvChainsEqualTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    // 4 and 16 channels: Winograd F(4x4, 3x3) (cpu::winograd_tile_for), whose 4x4 blocks need
    // aligned origins.
    for (int64_t ch : {4, 16}) {
        const compiler::Graph g = conv_chain(3, ch).g;
        for (auto [h, w] : {std::pair<int64_t, int64_t>{37, 53}, {64, 64}, {100, 71}}) {
            const HostTensor x = test::random_host_f32({1, 3, h, w}, static_cast<uint32_t>(h * w));
            const HostTensor ref = run_untiled(g, x, *dev);
            for (int64_t tile : {8, 12, 20}) {
                executor::TiledStats st;
                const HostTensor y = run_tiled(g, x, *dev, tile, &st);
                EXPECT_GT(st.tiles, 1u);
                expect_identical(y, ref, fmt::format("{} channels, {}x{} frame, tile {}", ch, h, w, tile));
            }
        }
    }
}

TEST(Tiled, SrNetworksAtScales2And4EqualTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    for (int64_t s : {2, 4}) {
        const compiler::Graph g = srvgg(3, 16, s).g;
        // Frames larger than a tile of 20 plus the 17-pixel halo on both sides (four Winograd
        // convs and the nearest skip).
        for (auto [h, w] : {std::pair<int64_t, int64_t>{61, 67}, {64, 64}, {100, 71}}) {
            const HostTensor x = test::random_host_f32({1, 3, h, w}, static_cast<uint32_t>(h + w));
            const HostTensor ref = run_untiled(g, x, *dev);
            for (int64_t tile : {12, 20}) {
                const HostTensor y = run_tiled(g, x, *dev, tile);
                expect_identical(y, ref, fmt::format("x{}, {}x{} frame, tile {}", s, h, w, tile));
            }
        }
    }
}

// animevideov3 x2's shape: the x4 network, then a bicubic resize by one half. Tiles of the x4
// map halve on the same pixel grid as the whole frame's, so the result is bit-identical too.
TEST(Tiled, AWholeFactorDownscaleAfterTheNetworkEqualsTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    test::GraphBuilder b = srvgg(2, 8, 4);
    b.g.outputs.clear();
    b.constant("half", test::host_f32({4}, {1, 1, 0.5f, 0.5f}));
    b.node("Resize", {"y", "", "half"}, {"z"}, {{"mode", std::string("cubic")}});
    b.output("z");
    ASSERT_TRUE(b.g.topo_sort().ok());
    for (auto [h, w] : {std::pair<int64_t, int64_t>{61, 67}, {64, 80}}) {
        const HostTensor x = test::random_host_f32({1, 3, h, w}, static_cast<uint32_t>(h * w));
        const HostTensor ref = run_untiled(b.g, x, *dev);
        ASSERT_EQ(ref.dims(), (std::vector<int64_t>{1, 3, 2 * h, 2 * w}));
        for (int64_t tile : {12, 24}) expect_identical(run_tiled(b.g, x, *dev, tile), ref, fmt::format("{}x{}, tile {}", h, w, tile));
    }
}

test::GraphBuilder mixed_chain() { return test::mixed_conv_chain(); }

TEST(Tiled, EveryConvPathEqualsTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    const compiler::Graph g = mixed_chain().g;
    for (auto [h, w] : {std::pair<int64_t, int64_t>{37, 53}, {100, 71}}) {
        const HostTensor x = test::random_host_f32({1, 3, h, w}, 7);
        const HostTensor ref = run_untiled(g, x, *dev);
        for (int64_t tile : {4, 16}) {
            const HostTensor y = run_tiled(g, x, *dev, tile);
            expect_identical(y, ref, fmt::format("{}x{} frame, tile {}", h, w, tile));
        }
    }
}

TEST(Tiled, F63AndMeasuredChoicesEqualTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    // 32 channels: F(6x6, 3x3) by the rule, whose 6x6 blocks need origins on multiples of 6.
    const compiler::Graph g = conv_chain(3, 32).g;
    const HostTensor x = test::random_host_f32({1, 3, 50, 61}, 5);
    expect_identical(run_tiled(g, x, *dev, 12), run_untiled(g, x, *dev), "32 channels, tile 12");
    // Choices measured on the frame (compiler/measure.hpp): every window runs each conv as the
    // frame's measurement chose, so the untiled run with those choices is the reference.
    executor::TiledOptions o;
    o.tile = 12;
    o.measure_host = true;
    auto r = executor::TiledRunner::create(*dev, g, x.dims(), o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto y = (*r)->run(x);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    compiler::Graph chosen = g;
    int recorded = 0;
    for (const auto& step : (*r)->model().steps)
        if (step.attrs.has("winograd"))
            for (compiler::Node& n : chosen.nodes)
                if (n.name == step.name) n.attrs.set("winograd", *step.attrs.get_int("winograd")), ++recorded;
    EXPECT_EQ(recorded, 3);
    expect_identical((*y)[0], run_untiled(chosen, x, *dev), "measured choices, tile 12");
}

TEST(Tiled, Fp16EqualsTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    const compiler::Graph g = srvgg(2, 8, 2).g;
    const HostTensor x = test::random_host_f32({1, 3, 45, 38}, 11);
    const HostTensor y = run_tiled(g, x, *dev, 8, nullptr, compiler::Precision::FP16);
    expect_identical(y, run_untiled(g, x, *dev, compiler::Precision::FP16), "fp16, tile 8");
}

TEST(Tiled, NonTileableModelsAreRefusedNamingTheNode) {
    auto dev = test::make_device();
    {
        // A global pool mixes every pixel of the frame.
        test::GraphBuilder b = conv_chain(1, 4);
        b.g.outputs.clear();
        b.node("GlobalAveragePool", {"p0"}, {"gap"});
        b.node("Mul", {"p0", "gap"}, {"y"});
        b.output("y");
        auto r = executor::TiledRunner::create(*dev, b.g, {1, 3, 40, 40});
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.status().code(), StatusCode::UNSUPPORTED);
        const std::string msg = r.status().message();
        EXPECT_NE(msg.find("node 'gap' (GlobalAveragePool) is not spatially tileable"), std::string::npos) << msg;
        EXPECT_NE(r.status().message().find("conv_chain: tiled run"), std::string::npos) << r.status().message();
    }
    {
        test::GraphBuilder b;
        b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
        b.random_f32("w", {4, 3, 3, 3}, 1);
        KernelAttrs strided = kPad1;
        strided.set("strides", std::vector<int64_t>{2, 2});
        b.node("Conv", {"x", "w"}, {"down"}, strided);
        b.output("down");
        auto r = executor::TiledRunner::create(*dev, b.g, {1, 3, 40, 40});
        ASSERT_FALSE(r.ok());
        const std::string msg = r.status().message();
        EXPECT_NE(msg.find("node 'down' (Conv) is not spatially tileable: stride 2"), std::string::npos) << msg;
    }
    {
        executor::TiledOptions o;
        o.precision = compiler::Precision::INT8;
        auto r = executor::TiledRunner::create(*dev, conv_chain(1, 4).g, {1, 3, 40, 40}, o);
        ASSERT_FALSE(r.ok());
        EXPECT_NE(r.status().message().find("int8"), std::string::npos) << r.status().message();
    }
}

TEST(Tiled, AFrameOfOtherDimsIsRefusedAndTheRunnerStaysUsable) {
    auto dev = test::make_device();
    const compiler::Graph g = conv_chain(2, 4).g;
    executor::TiledOptions o;
    o.tile = 16;
    auto r = executor::TiledRunner::create(*dev, g, {1, 3, 40, 30}, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto bad = (*r)->run(test::random_host_f32({1, 3, 30, 40}, 1));
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(bad.status().message().find("1x3x30x40"), std::string::npos) << bad.status().message();
    const HostTensor x = test::random_host_f32({1, 3, 40, 30}, 2);
    auto y = (*r)->run(x);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    expect_identical((*y)[0], run_untiled(g, x, *dev), "after a refused frame");
}

TEST(Tiled, AModelWithFixedInputDimsRunsOnWindowsOfThem) {
    // An export at one resolution: the frame must be that size; the windows are smaller.
    test::GraphBuilder b = srvgg(2, 8, 2);
    b.g.value(b.g.inputs[0]).shape = compiler::shape_of(std::vector<int64_t>{1, 3, 48, 40});
    auto dev = test::make_device();
    const HostTensor x = test::random_host_f32({1, 3, 48, 40}, 3);
    executor::TiledStats st;
    const HostTensor y = run_tiled(b.g, x, *dev, 8, &st);
    EXPECT_GT(st.tiles, 1u);
    expect_identical(y, run_untiled(b.g, x, *dev), "fixed 48x40 input, tile 8");
    auto other = executor::TiledRunner::create(*dev, b.g, {1, 3, 64, 64});
    ASSERT_FALSE(other.ok());
    EXPECT_NE(other.status().message().find("fixed at 48"), std::string::npos) << other.status().message();
}

// The tile chosen from device memory: untiled when the frame fits, smaller windows on smaller
// memories, always the untiled result.
TEST(Tiled, TheTileFromDeviceMemoryShrinksWithTheMemory) {
    const compiler::Graph g = srvgg(2, 8, 2).g;
    const HostTensor x = test::random_host_f32({1, 3, 384, 512}, 5);
    auto big = test::make_device();
    const HostTensor ref = run_untiled(g, x, *big);
    {
        auto r = executor::TiledRunner::create(*big, g, x.dims());
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_EQ((*r)->plan().tiles(), 1u);  // 8 GiB holds the whole frame
    }
    int64_t window_px_before = 384 * 512;
    for (int64_t mib : {32, 8, 2}) {
        device::DeviceSpec spec = test::preset_spec("edge");
        spec.memory_capacity_mib = mib;
        auto dev = test::make_device({}, spec);
        auto r = executor::TiledRunner::create(*dev, g, x.dims());
        ASSERT_TRUE(r.ok()) << mib << " MiB: " << r.status().to_string();
        const executor::TilePlan& p = (*r)->plan();
        const int64_t window_px = p.h.window * p.w.window;
        EXPECT_LT(window_px, window_px_before) << mib << " MiB";
        window_px_before = window_px;
        const int64_t bytes = (*r)->model().arena_bytes + (*r)->model().weights.elements();
        EXPECT_LE(bytes, spec.memory_bytes() * 9 / 10) << mib << " MiB";
        executor::TiledStats st;
        auto y = (*r)->run(x, &st);
        ASSERT_TRUE(y.ok()) << y.status().to_string();
        EXPECT_EQ(st.tiles, p.tiles());
        std::printf("%lld MiB: %zu tiles of %lldx%lld, arena %.2f MiB\n", static_cast<long long>(mib), p.tiles(),
                    static_cast<long long>(p.h.window), static_cast<long long>(p.w.window),
                    static_cast<double>((*r)->model().arena_bytes) / 1048576.0);
        expect_identical((*y)[0], ref,
                         fmt::format("{} MiB: {}x{} windows, {} tiles", mib, p.h.window, p.w.window, p.tiles()));
    }
    // Too little memory for even the smallest window.
    device::DeviceSpec tiny = test::preset_spec("edge");
    tiny.memory_capacity_mib = 1;
    auto dev = test::make_device({}, tiny);
    auto r = executor::TiledRunner::create(*dev, srvgg(2, 256, 2).g, x.dims());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY) << r.status().to_string();
}
// An SR network with a refinement tail at output resolution, as ESRGAN's conv_hr and conv_last
// (1x1 and narrow here, so a 4K frame runs in seconds): srvgg(convs, ch, s), then
// y = conv1x1(prelu(conv1x1(sr, hr_ch)), 3) + sr.
test::GraphBuilder sr_hr(int convs, int64_t ch, int64_t s, int64_t hr_ch) {
    test::GraphBuilder b = srvgg(convs, ch, s);
    b.g.outputs.clear();
    b.random_f32("whr", {hr_ch, 3, 1, 1}, 200, -0.5f, 0.5f);
    b.random_f32("shr", {hr_ch, 1, 1}, 201, 0.1f, 0.2f);
    b.random_f32("wlast", {3, hr_ch, 1, 1}, 202, -0.5f, 0.5f);
    b.node("Conv", {"y", "whr"}, {"hr"});
    b.node("PRelu", {"hr", "shr"}, {"hrp"});
    b.node("Conv", {"hrp", "wlast"}, {"last"});
    b.node("Add", {"last", "y"}, {"out"});
    b.output("out");
    b.g.source = "sr_hr";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b;
}

// Output pixels [y0, y1) x [x0, x1) of every plane of `a` (tiled, whole frame) and of `b` (a crop
// whose output starts at (by, bx) of the frame's) are identical.
void expect_region_identical(const HostTensor& a, const HostTensor& b, int64_t by, int64_t bx, int64_t y0, int64_t y1,
                             int64_t x0, int64_t x1, const std::string& what) {
    const int64_t planes = a.dims()[0] * a.dims()[1], ah = a.dims()[2], aw = a.dims()[3];
    const int64_t bh = b.dims()[2], bw = b.dims()[3];
    ASSERT_EQ(planes, b.dims()[0] * b.dims()[1]);
    int64_t rows_differing = 0;
    for (int64_t p = 0; p < planes; ++p)
        for (int64_t y = y0; y < y1; ++y)
            rows_differing += std::memcmp(a.as<float>() + (p * ah + y) * aw + x0,
                                          b.as<float>() + (p * bh + y - by) * bw + x0 - bx,
                                          static_cast<size_t>(x1 - x0) * sizeof(float)) != 0;
    EXPECT_EQ(rows_differing, 0) << what;
}

TEST(Tiled, A4KFrameRunsOnTheEdgePresetThatCannotHoldItUntiled) {
    // A minute of sanitized convolution arithmetic on a 4K frame; the sanitizer build checks the
    // tiled runner's memory on the smaller frames of the other tests here (test_util.hpp, kSanitized).
    if (test::kSanitized) GTEST_SKIP() << "the 4K frame runs in the normal build";
    const compiler::Graph g = sr_hr(2, 8, 4, 12).g;
    const std::vector<int64_t> dims{1, 3, 2160, 3840};
    auto dev = test::make_device();
    const device::DeviceSpec& spec = dev->spec();
    // Untiled: the plan alone exceeds the device, and loading it fails.
    compiler::CompileOptions o;
    o.shapes = {{"x", dims}};
    auto whole = compiler::compile_graph(g, o, spec);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    const int64_t untiled_arena = whole->arena_bytes;
    EXPECT_GT(untiled_arena, spec.memory_bytes());
    auto lm = executor::LoadedModel::load(*dev, std::make_shared<const compiler::CompiledModel>(std::move(*whole)));
    ASSERT_TRUE(lm.ok()) << lm.status().to_string();
    auto session = executor::Session::create(*lm);
    ASSERT_FALSE(session.ok());
    EXPECT_EQ(session.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY) << session.status().to_string();
    lm->reset();

    const HostTensor x = test::random_host_f32(dims, 4096);
    auto r = executor::TiledRunner::create(*dev, g, dims);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const executor::TilePlan& p = (*r)->plan();
    EXPECT_GT(p.tiles(), 1u);
    executor::TiledStats st;
    auto y = (*r)->run(x, &st);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    const HostTensor& out = (*y)[0];
    ASSERT_EQ(out.dims(), (std::vector<int64_t>{1, 3, 8640, 15360}));
    std::printf("4K on edge: untiled arena %.0f MiB, capacity %lld MiB; %zu tiles (%zux%zu) of %lldx%lld windows "
                "(halo %lld, align %lld), arena %.0f MiB; simulated %.1f ms, wall %.1f ms\n",
                static_cast<double>(untiled_arena) / 1048576.0, static_cast<long long>(spec.memory_capacity_mib),
                p.tiles(), p.h.count(), p.w.count(), static_cast<long long>(p.h.window),
                static_cast<long long>(p.w.window), static_cast<long long>((*r)->tiling().halo),
                static_cast<long long>((*r)->tiling().align),
                static_cast<double>((*r)->model().arena_bytes) / 1048576.0, st.sim_ms, st.wall_ms);

    // Against untiled runs of crops: at the top-left and bottom-right corners (the frame's true
    // borders) and across the first seams in both axes. A crop's output is the frame's wherever
    // the crop gave the full context (halo from its inner edges), its origin keeping the alignment.
    const compiler::SpatialTiling& t = (*r)->tiling();
    const int64_t ch = 160, cw = 224, s = t.scale, H = dims[2], W = dims[3];
    auto check_crop = [&](int64_t cy, int64_t cx, const std::string& what) {
        cy = cy / t.align * t.align, cx = cx / t.align * t.align;
        HostTensor c(device::DType::F32, {1, 3, ch, cw});
        for (int64_t plane = 0; plane < 3; ++plane)
            for (int64_t yy = 0; yy < ch; ++yy)
                std::memcpy(c.as<float>() + (plane * ch + yy) * cw, x.as<float>() + (plane * H + cy + yy) * W + cx,
                            static_cast<size_t>(cw) * sizeof(float));
        const HostTensor ref = run_untiled(g, c, *dev);
        const int64_t y0 = cy == 0 ? 0 : cy + t.halo, y1 = cy + ch == H ? H : cy + ch - t.halo;
        const int64_t x0 = cx == 0 ? 0 : cx + t.halo, x1 = cx + cw == W ? W : cx + cw - t.halo;
        expect_region_identical(out, ref, cy * s, cx * s, y0 * s, y1 * s, x0 * s, x1 * s, what);
    };
    check_crop(0, 0, "top-left crop");
    check_crop(p.h.cuts[1] - ch / 2, p.w.cuts[1] - cw / 2, "crop across the first seams");
    ASSERT_EQ((H - ch) % t.align, 0);
    ASSERT_EQ((W - cw) % t.align, 0);
    check_crop(H - ch, W - cw, "bottom-right crop");
}
}  // namespace
}  // namespace loom
