// int8 post-training quantization (compiler/quantize.cpp): per-channel weight scales, the
// activation scale from calibration, the graph still computing close to fp32, the report's
// figures, and the int8 model compiled and run on the simulated NPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "compiler/compile.hpp"
#include "compiler/interpret.hpp"
#include "compiler/ops.hpp"
#include "compiler/quantize.hpp"
#include "executor/executor.hpp"
#include "tests/test_util.hpp"

namespace loom::test_quantize {  // apart from the rest of its unity batch
namespace {

using compiler::Graph;
using compiler::HostTensor;
using compiler::InputSet;
using device::KernelAttrs;

// conv+prelu -> conv+relu -> ConvTranspose -> Gemm head on a flattened pooled vector.
Graph cube_graph() {
    test::GraphBuilder b;
    b.input("x", {1, 5, 9, 11});
    b.random_f32("w0", {16, 5, 3, 3}, 1, -0.4f, 0.4f);
    b.random_f32("b0", {16}, 2);
    b.random_f32("s0", {16, 1, 1}, 3, 0.05f, 0.3f);
    b.random_f32("w1", {12, 16, 3, 3}, 4, -0.2f, 0.2f);
    b.random_f32("wt", {12, 3, 2, 2}, 5, -0.5f, 0.5f);
    b.random_f32("wg", {7, 3}, 6, -0.5f, 0.5f);
    const KernelAttrs pad1{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    b.node("Conv", {"x", "w0", "b0"}, {"c0"}, pad1);
    b.node("PRelu", {"c0", "s0"}, {"p0"});
    b.node("Conv", {"p0", "w1"}, {"c1"}, pad1);
    b.node("Relu", {"c1"}, {"r1"});
    b.node("ConvTranspose", {"r1", "wt"}, {"t"}, {{"strides", std::vector<int64_t>{2, 2}}});
    b.node("GlobalAveragePool", {"t"}, {"gp"});
    b.node("Flatten", {"gp"}, {"f"});
    b.node("Gemm", {"f", "wg"}, {"y"}, {{"transB", int64_t{1}}});
    b.output("t");
    b.output("y");
    b.g.source = "cube_graph";
    EXPECT_TRUE(b.g.topo_sort().ok());
    EXPECT_TRUE(compiler::infer_shapes(b.g).ok());
    return b.g;
}

std::vector<InputSet> calibration(int sets, uint32_t seed) {
    std::vector<InputSet> c;
    for (int i = 0; i < sets; ++i) c.push_back({test::random_host_f32({1, 5, 9, 11}, seed + static_cast<uint32_t>(i), 0.0f, 1.0f)});
    return c;
}

TEST(Quantize, EveryCubeOpGetsPerChannelInt8WeightsAndAnActivationScale) {
    Graph g = cube_graph();
    const Graph fp32 = g;
    const auto cal = calibration(3, 10);
    auto r = compiler::quantize_int8(g, cal);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->nodes_quantized, 4);
    EXPECT_EQ(r->nodes_skipped, 0);
    EXPECT_EQ(r->samples, 3);
    // The activation scale of the first conv clips at 50% to 100% of max|x| over the
    // calibration sets, and quantizes them with no more error than clipping at the maximum.
    double amax = 0;
    for (const auto& s : cal)
        for (double v : s[0].to_doubles()) amax = std::max(amax, std::abs(v));
    const compiler::Node& c0 = g.nodes[0];
    ASSERT_EQ(c0.op, "Conv");
    const double x_scale = *c0.attrs.get_float("x_scale");
    EXPECT_LE(x_scale, amax / 127.0 * (1 + 1e-12));
    EXPECT_GE(x_scale, 0.5 * amax / 127.0 * (1 - 1e-12));
    auto quant_error = [&](double step) {
        double e = 0;
        for (const auto& s : cal)
            for (double v : s[0].to_doubles()) {
                const double q = std::clamp(std::nearbyint(v / step), -127.0, 127.0) * step;
                e += (q - v) * (q - v);
            }
        return e;
    };
    EXPECT_LE(quant_error(x_scale), quant_error(amax / 127.0));
    // Per-channel weights: int8, and dequantized within half a step of the fp32 weight.
    const compiler::Value& wq = g.value(c0.inputs[1]);
    const compiler::Value& ws = g.value(c0.inputs[5]);
    ASSERT_EQ(wq.dtype, device::DType::I8);
    ASSERT_EQ(ws.data->elements(), 16);
    const HostTensor& w = *fp32.value(fp32.nodes[0].inputs[1]).data;
    const int64_t per = w.elements() / 16;
    for (int64_t k = 0; k < 16; ++k) {
        const float s = ws.data->as<float>()[k];
        float m = 0;
        int max_q = 0;
        for (int64_t j = 0; j < per; ++j) {
            const float wv = w.as<float>()[k * per + j];
            const int q = wq.data->as<int8_t>()[k * per + j];
            m = std::max(m, std::abs(wv));
            max_q = std::max(max_q, std::abs(q));
            EXPECT_LE(std::abs(q * s - wv), s / 2 + 1e-7f) << k << "," << j;
        }
        EXPECT_FLOAT_EQ(s, m / 127.0f);
        EXPECT_EQ(max_q, 127);  // each channel uses its full range
    }
    // ConvTranspose scales: one per output channel (3), Gemm with transB: one per row of B (7).
    EXPECT_EQ(g.value(g.nodes[4].inputs[5]).data->elements(), 3);
    EXPECT_EQ(g.value(g.nodes[7].inputs[4]).data->elements(), 7);
}

TEST(Quantize, ReportMatchesAnIndependentComparisonAndIsSmall) {
    Graph g = cube_graph();
    const Graph fp32 = g;
    const auto cal = calibration(2, 20);
    auto r = compiler::quantize_int8(g, cal);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    double worst = 0;
    for (const auto& s : cal) {
        auto a = compiler::interpret(fp32, s), b = compiler::interpret(g, s);
        ASSERT_TRUE(a.ok() && b.ok());
        for (size_t o = 0; o < a->size(); ++o) {
            const auto x = (*a)[o].to_doubles(), y = (*b)[o].to_doubles();
            double scale = 0, diff = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                scale = std::max(scale, std::abs(x[i]));
                diff = std::max(diff, std::abs(x[i] - y[i]));
            }
            worst = std::max(worst, diff / scale);
        }
    }
    EXPECT_DOUBLE_EQ(r->max_rel_error, worst);
    EXPECT_GT(r->max_rel_error, 0.0);   // int8 really ran
    EXPECT_LT(r->max_rel_error, 0.05);  // four chained int8 layers stay within a few percent
    EXPECT_GT(r->psnr_db, 30.0);
}

TEST(Quantize, NeedsCalibrationAndSkipsWhatItCannotScale) {
    Graph g = cube_graph();
    auto none = compiler::quantize_int8(g, {});
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.status().message().find("calibration"), std::string::npos);
    // An all-zero activation has no scale: that conv stays in float, the others are quantized.
    std::vector<InputSet> zeros{{HostTensor(device::DType::F32, {1, 5, 9, 11})}};
    auto r = compiler::quantize_int8(g, zeros);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(g.nodes[0].attrs.has("x_scale"));
    EXPECT_GE(r->nodes_skipped, 1);
    // A calibration set of the wrong shape is refused naming the set.
    Graph g2 = cube_graph();
    std::vector<InputSet> bad{{test::random_host_f32({1, 5, 9, 12}, 3)}};
    auto e = compiler::quantize_int8(g2, bad);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("calibration set 0"), std::string::npos) << e.status().message();
}

TEST(Quantize, Int8ModelRunsOnTheDeviceAsTheHostGraphDoes) {
    compiler::CompileOptions o;
    o.precision = compiler::Precision::INT8;
    o.calibration = calibration(2, 30);
    auto m = compiler::compile_graph(cube_graph(), o, test::preset_spec("edge"));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->int8.nodes_quantized, 4);
    // The fp32 compile of the same graph costs more simulated Cube time.
    auto f = compiler::compile_graph(cube_graph(), {}, test::preset_spec("edge"));
    ASSERT_TRUE(f.ok());
    double int8_ns = 0, fp32_ns = 0;
    for (const auto& s : m->steps) int8_ns += s.op == "Conv" ? s.cost_ns : 0;
    for (const auto& s : f->steps) fp32_ns += s.op == "Conv" ? s.cost_ns : 0;
    EXPECT_LT(int8_ns, fp32_ns);
    // Device results equal the host interpretation of the quantized graph.
    Graph q = cube_graph();
    ASSERT_TRUE(compiler::quantize_int8(q, o.calibration).ok());
    const InputSet in{test::random_host_f32({1, 5, 9, 11}, 99, 0.0f, 1.0f)};
    auto want = compiler::interpret(q, in);
    ASSERT_TRUE(want.ok());
    auto dev = test::make_device();
    auto session =
        executor::Session::create(*executor::LoadedModel::load(*dev, std::make_shared<compiler::CompiledModel>(*m)));
    ASSERT_TRUE(session.ok());
    auto got = (*session)->run(in);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    for (size_t o2 = 0; o2 < want->size(); ++o2) {
        const auto a = (*want)[o2].to_doubles(), b = (*got)[o2].to_doubles();
        ASSERT_EQ(a.size(), b.size());
        // The compiled graph is fused first (same values, other float rounding), so an activation
        // on a rounding boundary may quantize one step apart: allow 1e-3 of the output's range.
        double scale = 0;
        for (double v : a) scale = std::max(scale, std::abs(v));
        for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3 * scale) << o2 << ":" << i;
    }
}

}  // namespace
}  // namespace loom::test_quantize
