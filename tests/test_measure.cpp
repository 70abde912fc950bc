// The host algorithm of each conv chosen by measurement (compiler/measure.hpp) and recorded in
// its `winograd` attribute: the conv kernel runs what the attribute says (every choice computes
// the same conv) and refuses what it cannot run; the pass times the candidates of the eligible
// convs only and records the fastest; a compiled model keeps the choice in its steps and the
// .loom file; spatial tiling aligns windows to the recorded tile, not to the rule's.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/thread_pool.hpp"
#include "compiler/compile.hpp"
#include "compiler/halo.hpp"
#include "compiler/measure.hpp"
#include "compiler/model_file.hpp"
#include "compiler/ops.hpp"
#include "tests/test_util.hpp"

namespace loom::test_measure {  // apart from the rest of its unity batch
namespace {

using compiler::Graph;
using device::KernelAttrs;

TEST(MeasuredConvAlgorithm, EveryChoiceComputesTheSameConvAndBadOnesAreRefused) {
    const auto& k = test::registered_kernel("conv");
    std::mt19937 rng(11);
    auto x = test::random_floats(rng, 1 * 8 * 13 * 29), w = test::random_floats(rng, 16 * 8 * 9),
         b = test::random_floats(rng, 16);
    std::vector<float> base(16 * 13 * 29);
    device::KernelLaunch l;
    l.inputs = {test::ref(x, {1, 8, 13, 29}), test::ref(w, {16, 8, 3, 3}), test::ref(b, {16})};
    l.outputs = {test::ref(base, {1, 16, 13, 29})};
    l.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"activation", std::string("relu")}};
    ThreadPool pool(2);
    ASSERT_TRUE(k.run(l, pool).ok());
    for (int64_t m : {0, 2, 4, 6}) {
        SCOPED_TRACE(m);
        std::vector<float> y(base.size(), std::nanf(""));
        device::KernelLaunch lm = l;
        lm.outputs = {test::ref(y, {1, 16, 13, 29})};
        lm.attrs.set("winograd", m);
        ASSERT_TRUE(k.run(lm, pool).ok());
        for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], base[i], 1e-4 * (1 + std::abs(base[i]))) << i;
    }
    device::KernelLaunch bad = l;
    bad.attrs.set("winograd", int64_t{3});
    test::expect_rejected(k, bad, StatusCode::INVALID_ARGUMENT, "'winograd' is 3");
    bad.attrs.set("winograd", int64_t{4}).set("strides", std::vector<int64_t>{2, 2});
    std::vector<float> y2(16 * 7 * 15);
    bad.outputs = {test::ref(y2, {1, 16, 7, 15})};
    test::expect_rejected(k, bad, StatusCode::INVALID_ARGUMENT, "only a 3x3 stride-1");
    bad.attrs.set("winograd", int64_t{0});  // the GEMM runs any conv
    EXPECT_TRUE(k.run(bad, pool).ok());
}

// x -> 3x3 conv (eligible) -> relu -> 3x3 stride-2 conv (not eligible) -> y
Graph two_convs() {
    test::GraphBuilder b;
    b.input("x", {1, 8, 24, 40});
    b.random_f32("w0", {32, 8, 3, 3}, 1);
    b.random_f32("w1", {4, 32, 3, 3}, 2);
    b.node("Conv", {"x", "w0"}, {"c0"}, KernelAttrs{{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    b.node("Relu", {"c0"}, {"r0"});
    b.node("Conv", {"r0", "w1"}, {"y"},
           KernelAttrs{{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}});
    b.output("y");
    EXPECT_TRUE(compiler::infer_shapes(b.g).ok());
    return b.g;
}

TEST(MeasuredConvAlgorithm, ThePassTimesTheEligibleConvsAndRecordsTheFastest) {
    Graph g = two_convs();
    ThreadPool pool(2);
    auto r = compiler::measure_conv_algorithms(g, pool, 1);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->convs.size(), 1u);
    const compiler::MeasuredConv& m = r->convs[0];
    ASSERT_EQ(m.ms.size(), 4u);
    double fastest = m.ms[0].second;
    for (const auto& [candidate, ms] : m.ms) {
        EXPECT_GT(ms, 0.0) << candidate;
        fastest = std::min(fastest, ms);
    }
    for (const auto& [candidate, ms] : m.ms) {
        if (candidate == m.chosen) {
            EXPECT_EQ(ms, fastest);
        }
    }
    const compiler::Node& c0 = g.nodes[0];
    EXPECT_EQ(*c0.attrs.get_int("winograd"), m.chosen);
    EXPECT_FALSE(g.nodes[2].attrs.has("winograd"));  // stride 2: the GEMM, nothing to choose
    // A node that already has the attribute keeps it (a window keeps its frame's choice).
    auto again = compiler::measure_conv_algorithms(g, pool, 1);
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->convs.empty());
}

TEST(MeasuredConvAlgorithm, AMapLargerThanTheWindowIsMeasuredWithItsResidualCutAlike) {
    // 300 x 1030 > 256 x 1024: timed on a 256 x 1024 window of it, unpadded; the residual must be
    // cut by the same rows and columns as the output, or the conv kernel refuses the launch and
    // the measurement fails.
    test::GraphBuilder b;
    b.input("x", {1, 4, 300, 1030});
    b.input("r", {1, 8, 298, 1028});
    b.random_f32("w", {8, 4, 3, 3}, 1);
    b.node("Conv", {"x", "w", "", "r"}, {"y"});
    b.output("y");
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    ThreadPool pool(2);
    auto r = compiler::measure_conv_algorithms(b.g, pool, 1);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->convs.size(), 1u);
    EXPECT_TRUE(b.g.nodes[0].attrs.has("winograd"));
}

TEST(MeasuredConvAlgorithm, TheCompiledModelKeepsTheChoiceInItsSteps) {
    compiler::CompileOptions o;
    o.measure_host = true;
    auto m = compiler::compile_graph(two_convs(), o, test::preset_spec("edge"));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    int recorded = 0;
    for (const auto& s : m->steps) recorded += s.kernel == "conv" && s.attrs.has("winograd");
    EXPECT_EQ(recorded, 1);
    const std::string path = ::testing::TempDir() + "measured.loom";
    ASSERT_TRUE(compiler::save_compiled_model(path, *m).ok());
    auto loaded = compiler::load_compiled_model(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    int kept = 0;
    for (size_t i = 0; i < m->steps.size(); ++i)
        if (m->steps[i].attrs.has("winograd")) {
            EXPECT_EQ(*loaded->steps[i].attrs.get_int("winograd"), *m->steps[i].attrs.get_int("winograd"));
            ++kept;
        }
    EXPECT_EQ(kept, 1);
}

TEST(MeasuredConvAlgorithm, AnInt8ConvChoosesBetweenTheGemmAndTheIntegerWinograd) {
    // Quantized first, then measured: the eligible conv's candidates are the int8 GEMM (0) and the
    // integer F(4,3) (4), which compute the same bits; the stride-2 one has no choice.
    compiler::CompileOptions o;
    o.measure_host = true;
    o.precision = compiler::Precision::INT8;
    o.calibration = {{test::random_host_f32({1, 8, 24, 40}, 5, 0.0f, 1.0f)}};
    auto m = compiler::compile_graph(two_convs(), o, test::preset_spec("edge"));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_EQ(m->measured.convs.size(), 1u);
    const compiler::MeasuredConv& mc = m->measured.convs[0];
    ASSERT_EQ(mc.ms.size(), 2u);
    EXPECT_EQ(mc.ms[0].first, 0);
    EXPECT_EQ(mc.ms[1].first, 4);
    EXPECT_EQ(mc.rule, 4);
    EXPECT_EQ(mc.chosen, mc.ms[0].second <= mc.ms[1].second ? 0 : 4);
    int recorded = 0;
    for (const auto& s : m->steps)
        if (s.kernel == "conv" && s.attrs.has("winograd")) {
            EXPECT_EQ(*s.attrs.get_int("winograd"), mc.chosen);
            ++recorded;
        }
    EXPECT_EQ(recorded, 1);
}

TEST(MeasuredConvAlgorithm, TilingAlignsToTheRecordedTile) {
    // 32 -> 32 channels take F(6,3) by the rule (align 6); a recorded F(2,3) aligns to 2, the GEMM
    // to 1.
    for (int64_t m : {-1, 2, 0}) {
        SCOPED_TRACE(m);
        test::GraphBuilder b;
        b.input("x", {1, 32, 24, 24});
        b.random_f32("w", {32, 32, 3, 3}, 1);
        KernelAttrs a{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
        if (m >= 0) a.set("winograd", m);
        b.node("Conv", {"x", "w"}, {"y"}, a);
        b.output("y");
        ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
        auto t = compiler::analyse_spatial_tiling(b.g);
        ASSERT_TRUE(t.ok()) << t.status().to_string();
        EXPECT_EQ(t->align, m < 0 ? 6 : std::max<int64_t>(m, 1));
    }
}

}  // namespace
}  // namespace loom::test_measure
