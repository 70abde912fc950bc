// Large frames (executor/tiled.cpp): a model run over tiles of a frame with a halo gives the
// untiled run's output bit for bit (memcmp), on conv chains through every conv path (Winograd,
// GEMM, depthwise, 1x1), on SR networks at scales 2 and 4, on U-Nets of valid convs, strides,
// crops and transposed convs with squeeze-and-excitation means (their passes handing values on
// or recomputing), and on frame sizes that are multiples of nothing; the tiling rule itself;
// non-tileable models refused naming the node; the tile chosen from device memory.
#include <gtest/gtest.h>

#include <cstring>

#include "compiler/compile.hpp"
#include "compiler/ops.hpp"
#include "executor/executor.hpp"
#include "executor/tiled.hpp"
#include "tests/run_util.hpp"
#include "tests/test_util.hpp"

namespace loom::test_tiled {  // apart from the rest of its unity batch
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
                    compiler::SpatialTiling t;
                    t.halo = t.lead = t.trail = halo;
                    t.align = align;
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

// Networks that consume their borders (valid convs: c output pixels fewer) and whose halo
// differs before and after a pixel: every kept output pixel lies lead x s pixels past its
// window's inner start and trail x s before its inner end, the output covered once.
TEST(TilePlan, ShrinkingNetworksAndOneSidedHalosKeepEveryPixelOnceWithItsContext) {
    for (int64_t scale : {1, 2})
        for (auto [lead, trail] : {std::pair<int64_t, int64_t>{0, 0}, {0, 7}, {3, 1}})
            for (int64_t shrink : {0, 5, 28})
                for (int64_t step : {4, 8, 20})
                    for (int64_t frame : {20, 37, 64, 101}) {
                        compiler::SpatialTiling t;
                        t.scale = scale;
                        t.lead = lead;
                        t.trail = trail;
                        t.halo = std::max(lead, trail);
                        t.align = 2;
                        t.shrink = {shrink, shrink};
                        if (scale * frame <= shrink) continue;
                        const executor::TileAxis a = executor::plan_tile_axis(frame, step, t, 0);
                        const std::string at = ::testing::PrintToString(
                            std::vector<int64_t>{scale, lead, trail, shrink, step, frame});
                        const int64_t out = scale * frame - shrink;
                        ASSERT_EQ(a.cuts.size(), a.count() + 1) << at;
                        EXPECT_EQ(a.cuts.front(), 0) << at;
                        EXPECT_EQ(a.cuts.back(), out) << at;
                        for (size_t i = 0; i < a.count(); ++i) {
                            const int64_t o = a.origins[i], from = a.cuts[i], to = a.cuts[i + 1];
                            const int64_t window_out = scale * a.window - shrink;
                            EXPECT_LT(from, to) << at << " tile " << i;
                            EXPECT_EQ((frame - a.window) % t.align, 0) << at;
                            EXPECT_TRUE(from == 0 ? o == 0 : from - scale * o >= scale * lead) << at << " tile " << i;
                            EXPECT_TRUE(to == out ? o + a.window == frame
                                                  : scale * o + window_out - to >= scale * trail)
                                << at << " tile " << i;
                        }
                    }
}

TEST(TilePlan, BalancingKeepsTheCountWithLessOverlap) {
    compiler::SpatialTiling t;
    t.halo = t.lead = t.trail = 5;
    t.align = 4;
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
        // A maximum over the frame is not a mean the passes compute.
        test::GraphBuilder b = conv_chain(1, 4);
        b.g.outputs.clear();
        b.node("GlobalMaxPool", {"p0"}, {"gmp"});
        b.node("Mul", {"p0", "gmp"}, {"y"});
        b.output("y");
        auto r = executor::TiledRunner::create(*dev, b.g, {1, 3, 40, 40});
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.status().code(), StatusCode::UNSUPPORTED);
        const std::string msg = r.status().message();
        EXPECT_NE(msg.find("node 'gmp' (GlobalMaxPool) is not spatially tileable"), std::string::npos) << msg;
        EXPECT_NE(r.status().message().find("conv_chain: tiled run"), std::string::npos) << r.status().message();
    }
    {
        // A strided conv halves the map: the output is not a whole multiple of the input.
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
        EXPECT_NE(msg.find("the output is at 1/2x the input, not a whole scale"), std::string::npos) << msg;
    }
    {
        // A crop to a fixed size is not the window's share of the frame's map.
        test::GraphBuilder b = conv_chain(1, 4);
        b.g.outputs.clear();
        b.constant("starts", test::host_i64({1, 1}));
        b.constant("ends", test::host_i64({30, 30}));
        b.constant("axes", test::host_i64({2, 3}));
        b.node("Slice", {"p0", "starts", "ends", "axes"}, {"y"});
        b.output("y");
        executor::TiledOptions o;
        o.tile = 8;
        auto r = executor::TiledRunner::create(*dev, b.g, {1, 3, 40, 40}, o);
        ASSERT_FALSE(r.ok());
        const std::string msg = r.status().message();
        EXPECT_NE(msg.find("a size in the model does not follow the input's"), std::string::npos) << msg;
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

// A 3x3 conv of `ch` channels with leaky ReLU, padded or valid ("same" or consuming a pixel
// on each side).
void conv3(test::GraphBuilder& b, const std::string& in, const std::string& out, int64_t c_in, int64_t ch,
           bool padded, uint32_t seed) {
    b.random_f32(out + ".w", {ch, c_in, 3, 3}, seed, -0.4f, 0.4f);
    b.random_f32(out + ".b", {ch}, seed + 1, -0.1f, 0.1f);
    KernelAttrs a;
    if (padded) a = kPad1;
    b.node("Conv", {in, out + ".w", out + ".b"}, {out + ".c"}, a);
    b.node("LeakyRelu", {out + ".c"}, {out}, {{"alpha", 0.1f}});
}

// Squeeze-and-excitation on map `in` of `ch` channels, as Real-CUGAN's: the frame's mean per
// channel, two fully connected layers, a sigmoid, the map scaled by it.
// `mean`: GlobalAveragePool (ncnn's Pooling), or ReduceMean over H and W as PyTorch exports
// x.mean((2, 3), keepdim=True): "ReduceMean" with axes as an attribute (opsets up to 17),
// "ReduceMean18" with them as a constant input (opset 18).
void se_block(test::GraphBuilder& b, const std::string& in, const std::string& out, int64_t ch, uint32_t seed,
              const std::string& mean = "GlobalAveragePool") {
    if (mean == "ReduceMean") {
        b.node("ReduceMean", {in}, {out + ".gap"}, {{"axes", std::vector<int64_t>{2, 3}}, {"keepdims", int64_t{1}}});
    } else if (mean == "ReduceMean18") {
        b.constant(out + ".axes", test::host_i64({-2, -1}));
        b.node("ReduceMean", {in, out + ".axes"}, {out + ".gap"});
    } else {
        b.node(mean, {in}, {out + ".gap"});
    }
    b.node("Flatten", {out + ".gap"}, {out + ".flat"});
    b.random_f32(out + ".w1", {ch / 2, ch}, seed, -0.5f, 0.5f);
    b.random_f32(out + ".w2", {ch, ch / 2}, seed + 1, -0.5f, 0.5f);
    b.node("Gemm", {out + ".flat", out + ".w1"}, {out + ".fc1"}, {{"transB", int64_t{1}}});
    b.node("Relu", {out + ".fc1"}, {out + ".r"});
    b.node("Gemm", {out + ".r", out + ".w2"}, {out + ".fc2"}, {{"transB", int64_t{1}}});
    b.node("Sigmoid", {out + ".fc2"}, {out + ".sig"});
    b.constant(out + ".shape", test::host_i64({1, ch, 1, 1}));
    b.node("Reshape", {out + ".sig", out + ".shape"}, {out + ".scale"});
    b.node("Mul", {in, out + ".scale"}, {out});
}

// Real-CUGAN's shape, small: valid 3x3 convs, a 2x2 stride-2 conv down, squeeze-and-excitation
// at two depths, a 2x2 stride-2 transposed conv up, the skip branch cut to size (Slice) and
// added, and UpConv7's 4x4 stride-2 transposed conv with padding 3 to x2. Even frames.
test::GraphBuilder valid_unet(const std::string& mean = "GlobalAveragePool") {
    test::GraphBuilder b;
    b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
    conv3(b, "x", "c1", 3, 8, false, 1);
    b.random_f32("down.w", {8, 8, 2, 2}, 10, -0.4f, 0.4f);
    b.node("Conv", {"c1", "down.w"}, {"down"}, {{"strides", std::vector<int64_t>{2, 2}}});
    conv3(b, "down", "c2", 8, 16, false, 20);
    conv3(b, "c2", "c3", 16, 8, false, 30);
    se_block(b, "c3", "se1", 8, 40, mean);
    b.random_f32("up.w", {8, 8, 2, 2}, 50, -0.4f, 0.4f);
    b.node("ConvTranspose", {"se1", "up.w"}, {"up"}, {{"strides", std::vector<int64_t>{2, 2}}});
    b.constant("crop.starts", test::host_i64({4, 4}));
    b.constant("crop.ends", test::host_i64({-4, -4}));
    b.constant("crop.axes", test::host_i64({2, 3}));
    b.node("Slice", {"c1", "crop.starts", "crop.ends", "crop.axes"}, {"skip"});
    b.node("Add", {"skip", "up"}, {"joined"});
    conv3(b, "joined", "c4", 8, 8, false, 60);
    se_block(b, "c4", "se2", 8, 70, mean);
    b.random_f32("out.w", {8, 3, 4, 4}, 80, -0.3f, 0.3f);
    b.node("ConvTranspose", {"se2", "out.w"}, {"y"},
           {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{3, 3, 3, 3}}});
    b.output("y");
    b.g.source = "valid_unet";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b;
}

TEST(Tiled, AValidUNetWithSqueezeExcitationEqualsTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    const compiler::Graph g = valid_unet().g;
    // Frames beyond a window's 52 pixels of context (the halo of 19 on each side, the 14 the
    // network consumes), so that both axes tile.
    for (auto [h, w] : {std::pair<int64_t, int64_t>{96, 96}, {94, 130}, {140, 72}}) {
        const HostTensor x = test::random_host_f32({1, 3, h, w}, static_cast<uint32_t>(h * 3 + w));
        const HostTensor ref = run_untiled(g, x, *dev);
        // The network consumes 14 pixels at each border: 2 (h - 14) output pixels.
        ASSERT_EQ(ref.dims(), (std::vector<int64_t>{1, 3, 2 * h - 28, 2 * w - 28}));
        struct Case {
            int64_t tile, carry;
            bool on_device;
        };
        for (const Case c : {Case{8, -1, true}, Case{16, -1, true}, Case{32, -1, true}, Case{8, -1, false},
                             Case{16, -1, false}, Case{8, 0, true}, Case{16, 0, false}}) {
            const int64_t tile = c.tile, carry = c.carry;
            executor::TiledOptions o;
            o.tile = tile;
            o.carry_bytes = carry;
            o.carry_on_device = c.on_device;
            auto r = executor::TiledRunner::create(*dev, g, x.dims(), o);
            ASSERT_TRUE(r.ok()) << r.status().to_string();
            const compiler::SpatialTiling& t = (*r)->tiling();
            EXPECT_EQ(t.scale, 2);
            EXPECT_EQ(t.shrink[0], 28);
            EXPECT_EQ(t.reductions.size(), 2u);
            EXPECT_EQ(t.align % 2, 0);  // the stride-2 conv's grid
            EXPECT_GT((*r)->plan().tiles(), 1u) << "halo " << t.halo << ", align " << t.align << ", overlap "
                                                << t.overlap[0] << ", window " << (*r)->plan().h.window;
            executor::TiledStats st;
            auto y = (*r)->run(x, &st);
            ASSERT_TRUE(y.ok()) << y.status().to_string();
            EXPECT_EQ(st.passes, 3u);
            EXPECT_EQ(st.tiles, 3 * (*r)->plan().tiles());
            // Values handed on between passes through the host, or every pass from the window.
            EXPECT_EQ((*r)->carried(), carry != 0);
            EXPECT_EQ(st.carried, carry != 0);
            // In device memory (no copies between the passes) unless that is off.
            EXPECT_EQ((*r)->carried_on_device(), carry != 0 && c.on_device) << (*r)->carry_note();
            if (carry != 0) {
                EXPECT_GT((*r)->carried_bytes(), 0);
                EXPECT_NE((*r)->carry_note().find(c.on_device ? "in device memory" : "through the host"),
                          std::string::npos)
                    << (*r)->carry_note();
            }
            expect_identical(
                (*y)[0], ref,
                fmt::format("{}x{} frame, tile {}, carried {}, on the device {}", h, w, tile, carry != 0, c.on_device));
            // A second frame through the same runner: nothing of the first is left over.
            const HostTensor x2 = test::random_host_f32({1, 3, h, w}, static_cast<uint32_t>(h * 5 + w));
            if (tile == 8) {
                auto y2 = (*r)->run(x2);
                ASSERT_TRUE(y2.ok()) << y2.status().to_string();
                expect_identical((*y2)[0], run_untiled(g, x2, *dev), fmt::format("{}x{}, second frame", h, w));
            }
        }
    }
}

// The values the passes hand on stay in device memory when it has room beside the passes, and
// go through the host (saying why) when it has not; either way the tiles equal the untiled run.
// The means as PyTorch exports them (ReduceMean over H and W, keeping them) are means over the
// frame too: the compiler runs them as GlobalAveragePool (its exact sum), so tiles equal the
// untiled run; a ReduceMean over other axes is refused by name.
TEST(Tiled, ReduceMeanSqueezeExcitationAsPyTorchExportsItEqualsTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    const HostTensor x = test::random_host_f32({1, 3, 96, 110}, 17);
    for (const std::string mean : {"ReduceMean", "ReduceMean18"}) {
        const compiler::Graph g = valid_unet(mean).g;
        compiler::CompileOptions o;
        o.shapes = {{"x", x.dims()}};
        auto whole = compiler::compile_graph(g, o, dev->spec());
        ASSERT_TRUE(whole.ok()) << whole.status().to_string();
        size_t pools = 0, reduces = 0;
        for (const compiler::CompiledStep& st : whole->steps) {
            pools += st.op == "GlobalAveragePool";
            reduces += st.op == "ReduceMean";
        }
        EXPECT_EQ(pools, 2u) << mean;
        EXPECT_EQ(reduces, 0u) << mean;
        const HostTensor ref = run_untiled(g, x, *dev);
        executor::TiledStats st;
        const HostTensor y = run_tiled(g, x, *dev, 16, &st);
        EXPECT_EQ(st.passes, 3u) << mean;
        expect_identical(y, ref, mean + ", tile 16");
    }
    // Over the channels as well: not a mean over the frame's pixels.
    test::GraphBuilder b = conv_chain(1, 4);
    b.g.outputs.clear();
    b.node("ReduceMean", {"p0"}, {"m"}, {{"axes", std::vector<int64_t>{1, 2, 3}}});
    b.node("Mul", {"p0", "m"}, {"y"});
    b.output("y");
    ASSERT_TRUE(b.g.topo_sort().ok());
    auto r = executor::TiledRunner::create(*dev, b.g, {1, 3, 64, 64});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::UNSUPPORTED);
    EXPECT_NE(r.status().message().find("ReduceMean"), std::string::npos) << r.status().message();
}

TEST(Tiled, HandedValuesGoThroughTheHostWhenTheDeviceHasNoRoomForThem) {
    device::DeviceSpec spec = test::preset_spec("edge");
    spec.memory_capacity_mib = 64;
    auto dev = test::make_device({}, spec);
    const compiler::Graph g = valid_unet().g;
    const HostTensor x = test::random_host_f32({1, 3, 96, 96}, 11);
    const HostTensor ref = run_untiled(g, x, *dev);
    executor::TiledOptions o;
    o.tile = 16;
    const auto used = [&] { return static_cast<int64_t>(dev->stats().memory_used); };
    const int64_t before = used();
    int64_t taken = 0, handed = 0;
    {
        auto r = executor::TiledRunner::create(*dev, g, x.dims(), o);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        ASSERT_TRUE((*r)->carried_on_device()) << (*r)->carry_note();
        taken = used() - before;
        handed = (*r)->carried_bytes();
        EXPECT_GE(taken, handed);
    }
    // Free memory less the margin that holds the passes and half of what they hand on.
    const auto capacity = static_cast<int64_t>(dev->stats().memory_capacity);
    const int64_t budget = capacity - used() - capacity / 10;
    auto filler = dev->malloc(static_cast<size_t>(budget - (taken - handed / 2)), "filler");
    ASSERT_TRUE(filler.ok()) << filler.status().to_string();
    auto r = executor::TiledRunner::create(*dev, g, x.dims(), o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE((*r)->carried());
    EXPECT_FALSE((*r)->carried_on_device());
    EXPECT_NE((*r)->carry_note().find("through the host"), std::string::npos) << (*r)->carry_note();
    EXPECT_NE((*r)->carry_note().find("on the device they would take"), std::string::npos) << (*r)->carry_note();
    auto y = (*r)->run(x);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    expect_identical((*y)[0], ref, "handed on through the host");
}

// Two means of one map (a gate on the features before they are scaled, and one after a conv):
// the second mean's map comes from an earlier pass than its own, which on the device would not
// copy it out, so the values go through the host, saying why; the tiles equal the untiled run.
TEST(Tiled, TwoMeansOfOneMapHandTheirValuesOnThroughTheHost) {
    auto dev = test::make_device();
    test::GraphBuilder b = conv_chain(2, 8);
    b.g.outputs.clear();
    b.node("GlobalAveragePool", {"p1"}, {"m1"});
    b.node("Mul", {"p1", "m1"}, {"scaled"});
    conv3(b, "scaled", "after", 8, 8, true, 120);
    b.node("GlobalAveragePool", {"p1"}, {"m2"});
    b.node("Mul", {"after", "m2"}, {"gated"});
    b.output("gated");
    ASSERT_TRUE(b.g.topo_sort().ok());
    const HostTensor x = test::random_host_f32({1, 3, 64, 80}, 23);
    const HostTensor ref = run_untiled(b.g, x, *dev);
    executor::TiledOptions o;
    o.tile = 16;
    auto r = executor::TiledRunner::create(*dev, b.g, x.dims(), o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ((*r)->tiling().reductions.size(), 2u);
    EXPECT_TRUE((*r)->carried());
    EXPECT_FALSE((*r)->carried_on_device());
    EXPECT_NE((*r)->carry_note().find("a mean's map comes from an earlier pass"), std::string::npos)
        << (*r)->carry_note();
    auto y = (*r)->run(x);
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    expect_identical((*y)[0], ref, "two means of one map");
}

// Runners that hand values on through the host count what the others keep (two jobs of a daemon
// must not each budget half of the same free memory): the process-wide figure is the sum of the
// live runners', and falls back as they go; one that keeps its values on the device adds nothing.
TEST(Tiled, HostHandOnIsCountedAcrossLiveRunners) {
    auto dev = test::make_device();
    const compiler::Graph g = valid_unet().g;
    const std::vector<int64_t> dims{1, 3, 96, 96};
    executor::TiledOptions o;
    o.tile = 16;
    o.carry_on_device = false;
    const int64_t before = executor::TiledRunner::host_carry_promised();
    auto a = executor::TiledRunner::create(*dev, g, dims, o);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE((*a)->carried() && !(*a)->carried_on_device()) << (*a)->carry_note();
    EXPECT_GT((*a)->carried_bytes(), 0);
    EXPECT_EQ(executor::TiledRunner::host_carry_promised(), before + (*a)->carried_bytes());
    auto b = executor::TiledRunner::create(*dev, g, dims, o);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    const int64_t both = before + (*a)->carried_bytes() + (*b)->carried_bytes();
    EXPECT_EQ(executor::TiledRunner::host_carry_promised(), both);
    o.carry_on_device = true;
    auto c = executor::TiledRunner::create(*dev, g, dims, o);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_TRUE((*c)->carried_on_device()) << (*c)->carry_note();
    EXPECT_EQ(executor::TiledRunner::host_carry_promised(), both);
    const int64_t kept_b = (*b)->carried_bytes();
    a->reset();
    EXPECT_EQ(executor::TiledRunner::host_carry_promised(), before + kept_b);
    b->reset();
    c->reset();
    EXPECT_EQ(executor::TiledRunner::host_carry_promised(), before);
}

TEST(Tiled, SqueezeExcitationOnAPaddedNetworkEqualsTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    // Padded Winograd convs: the means' maps are clean only inside each window's halo.
    for (int64_t ch : {4, 16}) {
        test::GraphBuilder b = conv_chain(2, ch);
        b.g.outputs.clear();
        se_block(b, "p1", "se", ch, 90);
        conv3(b, "se", "tail", ch, 3, true, 95);
        b.output("tail");
        ASSERT_TRUE(b.g.topo_sort().ok());
        for (auto [h, w] : {std::pair<int64_t, int64_t>{37, 53}, {64, 64}}) {
            const HostTensor x = test::random_host_f32({1, 3, h, w}, static_cast<uint32_t>(h + w + ch));
            const HostTensor ref = run_untiled(b.g, x, *dev);
            for (int64_t tile : {8, 20}) {
                executor::TiledStats st;
                const HostTensor y = run_tiled(b.g, x, *dev, tile, &st);
                EXPECT_EQ(st.passes, 2u);
                EXPECT_TRUE(st.carried);
                expect_identical(y, ref, fmt::format("{} channels, {}x{} frame, tile {}", ch, h, w, tile));
            }
        }
    }
}

TEST(Tiled, AValidUNetInFp16EqualsTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    const compiler::Graph g = valid_unet().g;
    const HostTensor x = test::random_host_f32({1, 3, 94, 110}, 7);
    const HostTensor ref = run_untiled(g, x, *dev, compiler::Precision::FP16);
    const HostTensor y = run_tiled(g, x, *dev, 16, nullptr, compiler::Precision::FP16);
    expect_identical(y, ref, "fp16, tile 16");
}

// Transposed convs take three host paths (device/kernels/conv_transpose.cpp): the GEMM and
// col2im; for kernels spanning one to three strides a 3x3 conv into one channel per phase, on
// Winograd (many phase channels: its blocks need the input's origin on their grid) or on the
// direct window (few, under AVX-512). Each, after a valid conv, tiles exactly.
TEST(Tiled, TransposedConvsOfEveryHostPathEqualTheUntiledRunBitForBit) {
    auto dev = test::make_device();
    struct Case {
        int64_t k, st, pad, out;
    };
    // 4x4 stride 2 pad 3 to 3 channels: Real-CUGAN's and UpConv7's last layer (12 phase
    // channels: direct); to 16: Winograd; 5x5 stride 3: Real-CUGAN x3's (27: Winograd); 3x3
    // stride 3 and 2x2 stride 2: the GEMM.
    for (const Case& c : {Case{4, 2, 3, 3}, Case{4, 2, 3, 16}, Case{5, 3, 2, 3}, Case{3, 3, 0, 8}, Case{2, 2, 0, 8}}) {
        test::GraphBuilder b;
        b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
        conv3(b, "x", "c1", 3, 32, false, 1);
        b.random_f32("up.w", {32, c.out, c.k, c.k}, 80, -0.3f, 0.3f);
        b.node("ConvTranspose", {"c1", "up.w"}, {"y"},
               {{"strides", std::vector<int64_t>{c.st, c.st}}, {"pads", std::vector<int64_t>(4, c.pad)}});
        b.output("y");
        b.g.source = "transposed";
        const HostTensor x = test::random_host_f32({1, 3, 90, 76}, static_cast<uint32_t>(c.k * 10 + c.out));
        const HostTensor ref = run_untiled(b.g, x, *dev);
        for (int64_t tile : {8, 20}) {
            const HostTensor y = run_tiled(b.g, x, *dev, tile);
            expect_identical(y, ref, fmt::format("k{} stride {} pad {} to {}, tile {}", c.k, c.st, c.pad, c.out, tile));
        }
    }
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
    check_crop(p.h.cuts[1] / s - ch / 2, p.w.cuts[1] / s - cw / 2, "crop across the first seams");
    ASSERT_EQ((H - ch) % t.align, 0);
    ASSERT_EQ((W - cw) % t.align, 0);
    check_crop(H - ch, W - cw, "bottom-right crop");
}
}  // namespace
}  // namespace loom::test_tiled
