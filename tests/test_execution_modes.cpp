// The two execution modes (executor/executor.hpp, docs/compiler.md "Execution mode"): a model
// whose input keeps symbolic dims compiles to host mode and runs at any input size the model
// allows, with the same outputs as a sink-mode compile for that size and as the host
// interpreter; host plans are cached per input-shape signature; bad input shapes and a full
// device fail one inference only; a sink submission beats host-scheduled launches on a model of
// many small ops in simulated time; host-mode model files round-trip and corrupt graph sections
// are refused naming the part.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compiler/compile.hpp"
#include "compiler/interpret.hpp"
#include "compiler/model_file.hpp"
#include "compiler/ops.hpp"
#include "executor/executor.hpp"
#include "tests/test_util.hpp"

namespace loom::test_execution_modes {  // apart from the rest of its unity batch
namespace {

using compiler::CompiledModel;
using compiler::Dim;
using compiler::Graph;
using compiler::HostTensor;
using device::KernelAttrs;

// An SR-like network over a 1x3xHxW input: conv+prelu, conv with a residual and relu, conv ->
// depth_to_space plus a nearest-upsampled skip, divided by the input's height (a value only
// run-time shape inference knows, read by a device kernel), flattened, and reshaped back to its
// own shape (a Reshape whose target only run-time shape inference knows).
Graph sr_graph(Dim h = Dim::sym("H"), Dim w = Dim::sym("W")) {
    test::GraphBuilder b;
    b.input("x", {1, 3, h, w});
    test::add_sr_body(b);
    b.node("Shape", {"x"}, {"x_shape"});
    b.constant("axis_h", test::host_i64({2}));
    b.node("Gather", {"x_shape", "axis_h"}, {"h"});
    b.node("Cast", {"h"}, {"h_f"}, {{"to", int64_t{1}}});
    b.node("Div", {"y", "h_f"}, {"y_norm"});
    b.constant("flat", test::host_i64({1, -1}));
    b.node("Reshape", {"y_norm", "flat"}, {"y_flat"});
    b.node("Shape", {"y_norm"}, {"y_shape"});
    b.node("Reshape", {"y_flat", "y_shape"}, {"y_back"});
    b.output("y_norm");
    b.output("y_flat");
    b.output("y_back");
    b.g.source = "sr_dyn";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b.g;
}

// `layers` 1x1 convs with fused relus over 1x8xHxW: many small kernels, nothing to fold.
Graph conv_chain(int layers, Dim h = Dim::sym("H"), Dim w = Dim::sym("W")) {
    test::GraphBuilder b;
    b.input("x", {1, 8, h, w});
    std::string prev = "x";
    for (int i = 0; i < layers; ++i) {
        const std::string id = std::to_string(i);
        b.random_f32("w" + id, {8, 8, 1, 1}, 100 + static_cast<uint32_t>(i), -0.4f, 0.4f);
        b.random_f32("b" + id, {8}, 200 + static_cast<uint32_t>(i), 0.0f, 0.1f);
        b.node("Conv", {prev, "w" + id, "b" + id}, {"c" + id});
        b.node("Relu", {"c" + id}, {"r" + id});
        prev = "r" + id;
    }
    b.output(prev);
    b.g.source = "conv_chain";
    return b.g;
}

CompiledModel compile_ok(const Graph& g, compiler::CompileOptions o = {}) {
    auto m = compiler::compile_graph(g, o, test::preset_spec("edge"));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(*m) : CompiledModel{};
}

CompiledModel compile_sink(const Graph& g, std::vector<int64_t> dims) {
    compiler::CompileOptions o;
    o.shapes = {{"x", std::move(dims)}};
    CompiledModel m = compile_ok(g, o);
    EXPECT_EQ(m.mode, compiler::ExecMode::SINK);
    return m;
}

// The unoptimised graph run by the host interpreter at the inputs' shapes.
std::vector<HostTensor> reference(Graph g, const std::vector<HostTensor>& inputs) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    for (size_t i = 0; i < inputs.size(); ++i) shapes.emplace_back(g.value(g.inputs[i]).name, inputs[i].dims());
    EXPECT_TRUE(compiler::set_input_shapes(g, shapes).ok());
    EXPECT_TRUE(compiler::infer_shapes(g).ok());
    EXPECT_TRUE(compiler::fold_constants(g).ok());  // the Shape -> Reshape chain
    auto r = compiler::interpret(g, inputs);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : std::vector<HostTensor>{};
}

using test::expect_close;

// A device, the model loaded on it and one session.
struct Runner {
    std::unique_ptr<device::Device> dev;
    std::shared_ptr<executor::LoadedModel> loaded;
    std::unique_ptr<executor::Session> session;

    explicit Runner(CompiledModel m, device::DeviceOptions o = {}, const device::DeviceSpec& spec = test::preset_spec("edge")) {
        auto d = device::Device::create(spec, std::move(o));
        LOOM_ASSERT_MSG(d.ok(), "{}", d.status().to_string());
        dev = std::move(*d);
        auto l = executor::LoadedModel::load(*dev, std::make_shared<CompiledModel>(std::move(m)));
        LOOM_ASSERT_MSG(l.ok(), "{}", l.status().to_string());
        loaded = *l;
        auto s = executor::Session::create(loaded);
        LOOM_ASSERT_MSG(s.ok(), "{}", s.status().to_string());
        session = std::move(*s);
    }
    Result<std::vector<HostTensor>> run(const std::vector<HostTensor>& in, executor::RunStats* stats = nullptr) {
        return session->run(in, stats);
    }
};

// ---- compiling to host mode ----------------------------------------------------------------

TEST(HostMode, SymbolicInputCompilesToTheOptimisedGraphWithSymbolsKept) {
    const Graph g = sr_graph();
    const CompiledModel m = compile_ok(g);
    EXPECT_EQ(m.mode, compiler::ExecMode::HOST);
    EXPECT_TRUE(m.steps.empty());
    EXPECT_TRUE(m.tensors.empty());
    EXPECT_EQ(m.arena_bytes, 0);
    ASSERT_EQ(m.graph.inputs.size(), 1u);
    EXPECT_EQ(compiler::shape_str(m.graph.value(m.graph.inputs[0]).shape), "1x3xHxW");
    // The shape-agnostic passes ran: conv+prelu and conv+add+relu fused, nothing folded that
    // depends on H or W (the Shape nodes stay).
    EXPECT_LT(m.graph.nodes.size(), g.nodes.size());
    size_t convs = 0, shapes = 0;
    for (const auto& n : m.graph.nodes) {
        convs += n.op == "Conv";
        shapes += n.op == "Shape";
        if (n.op == "Conv" && n.outputs[0] == m.graph.find_value("p0")) {
            EXPECT_EQ(n.fused.size(), 1u);
        }
    }
    EXPECT_EQ(convs, 3u);
    EXPECT_EQ(shapes, 2u);
    EXPECT_EQ(m.graph_offsets.size(), m.graph.values.size());
    int64_t constants = 0;
    for (size_t i = 0; i < m.graph.values.size(); ++i) {
        EXPECT_EQ(m.graph_offsets[i] >= 0, m.graph.values[i].is_constant()) << m.graph.values[i].name;
        constants += m.graph.values[i].is_constant();
    }
    EXPECT_GE(constants, 5);
    EXPECT_GT(m.weights.elements(), 8 * 3 * 3 * 3 * 4);
    // fp16 works on symbolic shapes too: casts at the interface.
    compiler::CompileOptions f16;
    f16.precision = compiler::Precision::FP16;
    const CompiledModel h = compile_ok(g, f16);
    EXPECT_EQ(h.mode, compiler::ExecMode::HOST);
    EXPECT_EQ(h.graph.nodes.front().op, "Cast");
}

// The names CLI flags, config files and the .loom file use parse back to the same values;
// anything else is refused with the valid names listed.
TEST(ExecModeAndPrecision, NamesParseBackAndOthersListTheValidOnes) {
    for (const auto mode : {compiler::ExecMode::SINK, compiler::ExecMode::HOST})
        EXPECT_EQ(compiler::parse_exec_mode(compiler::exec_mode_name(mode)).value(), mode);
    for (const auto p : {compiler::Precision::FP32, compiler::Precision::FP16, compiler::Precision::INT8})
        EXPECT_EQ(compiler::parse_precision(compiler::precision_name(p)).value(), p);
    EXPECT_EQ(compiler::exec_mode_name(compiler::ExecMode::HOST), "host");
    EXPECT_EQ(compiler::precision_name(compiler::Precision::FP16), "fp16");
    const auto bad = compiler::parse_precision("FP32");
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(bad.status().message(), "unknown precision 'FP32' (fp32, fp16 or int8)");
}

TEST(HostMode, ForcedOnAStaticModelAndInt8OnASymbolicOneIsRefused) {
    compiler::CompileOptions host;
    host.mode = compiler::ExecMode::HOST;
    host.shapes = {{"x", {1, 3, 8, 8}}};
    const CompiledModel m = compile_ok(sr_graph(), host);
    EXPECT_EQ(m.mode, compiler::ExecMode::HOST);
    EXPECT_EQ(compiler::shape_str(m.graph.value(m.graph.inputs[0]).shape), "1x3x8x8");
    const auto bad = compiler::parse_exec_mode("graph");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("mode 'graph' (sink or host)"), std::string::npos) << bad.status().message();
    compiler::CompileOptions int8;
    int8.precision = compiler::Precision::INT8;
    auto r = compiler::compile_graph(sr_graph(), int8, test::preset_spec("edge"));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("int8 needs static shapes"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("--shape x=..."), std::string::npos) << r.status().message();
}

// ---- running in host mode ------------------------------------------------------------------

TEST(HostMode, OutputsEqualSinkModeAndTheInterpreterAtSeveralSizes) {
    const Graph g = sr_graph();
    Runner host(compile_ok(g));
    uint32_t seed = 40;
    for (const auto& [h, w] : std::vector<std::pair<int64_t, int64_t>>{{8, 8}, {12, 20}, {31, 17}}) {
        SCOPED_TRACE(testing::Message() << h << "x" << w);
        const std::vector<HostTensor> in{test::random_host_f32({1, 3, h, w}, seed++, 0.0f, 1.0f)};
        const auto want = reference(g, in);
        executor::RunStats hs, ss;
        auto got = host.run(in, &hs);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        Runner sink(compile_sink(g, {1, 3, h, w}));
        auto sunk = sink.run(in, &ss);
        ASSERT_TRUE(sunk.ok()) << sunk.status().to_string();
        ASSERT_EQ(got->size(), 3u);
        ASSERT_EQ(sunk->size(), 3u);
        for (size_t o = 0; o < 3; ++o) {
            expect_close((*got)[o], want[o], 1e-5);
            expect_close((*got)[o], (*sunk)[o], 1e-6);
        }
        EXPECT_EQ((*got)[0].dims(), (std::vector<int64_t>{1, 3, 2 * h, 2 * w}));
        EXPECT_EQ(hs.mode, compiler::ExecMode::HOST);
        EXPECT_EQ(ss.mode, compiler::ExecMode::SINK);
        EXPECT_EQ(hs.submissions, hs.launches);  // one per kernel
        EXPECT_EQ(ss.submissions, 1u);           // the whole graph at once
        EXPECT_GT(hs.sim_ms, ss.sim_ms);
    }
}

TEST(HostMode, Fp16RunsAtAnySizeWithinHalfPrecision) {
    const Graph g = sr_graph();
    compiler::CompileOptions f16;
    f16.precision = compiler::Precision::FP16;
    Runner host(compile_ok(g, f16));
    for (int64_t h : {9, 14}) {
        const std::vector<HostTensor> in{test::random_host_f32({1, 3, h, 11}, 60 + static_cast<uint32_t>(h), 0.0f, 1.0f)};
        auto got = host.run(in);
        ASSERT_TRUE(got.ok()) << got.status().to_string();
        EXPECT_EQ((*got)[0].dtype(), device::DType::F32);
        expect_close((*got)[0], reference(g, in)[0], 5e-3);
    }
}

TEST(HostMode, PlansAreCachedPerInputShapeSignatureAndTheArenaGrows) {
    Runner r(compile_ok(sr_graph()));
    EXPECT_EQ(r.session->arena_bytes(), 0u);  // nothing known before the first inference
    const auto small = test::random_host_f32({1, 3, 8, 8}, 1, 0.0f, 1.0f);
    const auto large = test::random_host_f32({1, 3, 24, 16}, 2, 0.0f, 1.0f);
    std::vector<bool> cached;
    std::vector<size_t> arena;
    for (const HostTensor* t : {&small, &large, &small, &large, &small}) {
        executor::RunStats st;
        auto out = r.run({*t}, &st);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        cached.push_back(st.plan_cached);
        EXPECT_FALSE(st.launches_cached);
        arena.push_back(r.session->arena_bytes());
    }
    EXPECT_EQ(cached, (std::vector<bool>{false, false, true, true, true}));
    // The session keeps the launches of the last shapes it ran: these alternated, so each run
    // built its own; the same shapes again take them.
    executor::RunStats again;
    ASSERT_TRUE(r.run({small}, &again).ok());
    EXPECT_TRUE(again.launches_cached);
    EXPECT_EQ(r.loaded->host_plans_built(), 2u);
    EXPECT_EQ(r.loaded->host_plans_cached(), 2u);
    EXPECT_GT(arena[1], arena[0]);  // grown for the larger input
    EXPECT_EQ(arena[4], arena[1]);  // and never shrunk
    // The plan keeps the model's weights where they are; only the value that run-time shape
    // inference folded (the input's height, which the Div reads) has bytes of its own.
    bool hit = false;
    auto plan = r.loaded->host_plan(std::vector<HostTensor>{small}, &hit);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EXPECT_TRUE(hit);
    EXPECT_EQ((*plan)->lowered.weights.elements(), 64);
    ASSERT_TRUE((*plan)->constants.valid());
    EXPECT_EQ((*plan)->resident_bytes, r.loaded->model().weights.elements());
    // A second session shares the model's plans.
    auto s2 = executor::Session::create(r.loaded);
    ASSERT_TRUE(s2.ok());
    executor::RunStats st;
    ASSERT_TRUE((*s2)->run(std::vector<HostTensor>{large}, &st).ok());
    EXPECT_TRUE(st.plan_cached);
    // The cache is bounded: the least recently used plan goes first.
    for (int64_t w = 1; w <= static_cast<int64_t>(executor::LoadedModel::kHostPlansMax); ++w)
        ASSERT_TRUE(r.run({test::random_host_f32({1, 3, 4, w}, 3, 0.0f, 1.0f)}).ok());
    EXPECT_EQ(r.loaded->host_plans_cached(), executor::LoadedModel::kHostPlansMax);
    ASSERT_TRUE(r.run({small}, &st).ok());
    EXPECT_FALSE(st.plan_cached);
    EXPECT_EQ(r.loaded->host_plans_built(), 3u + executor::LoadedModel::kHostPlansMax);
}

TEST(HostMode, AFixedDimMismatchIsRefusedNamingTheInputAndAxis) {
    Runner r(compile_ok(sr_graph()));
    auto bad = r.run({test::random_host_f32({1, 4, 8, 8}, 5)});
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(bad.status().message().find("input 0 ('x') is f32 1x4x8x8, the model takes f32 1x3xHxW: axis 1 is fixed "
                                          "at 3"),
              std::string::npos)
        << bad.status().message();
    bad = r.run({test::random_host_f32({3, 8, 8}, 5)});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("rank 4, not 3"), std::string::npos) << bad.status().message();
    HostTensor ints(device::DType::I32, {1, 3, 8, 8});
    bad = r.run({ints});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("the dtype differs"), std::string::npos) << bad.status().message();
    EXPECT_EQ(r.loaded->host_plans_built(), 0u);
    EXPECT_EQ(r.dev->stats().engines[static_cast<size_t>(device::Engine::AICORE)].tasks, 0u);
    auto good = r.run({test::random_host_f32({1, 3, 8, 8}, 6, 0.0f, 1.0f)});
    EXPECT_TRUE(good.ok()) << good.status().to_string();
}

TEST(HostMode, OneSymbolMustHaveOneSizeAcrossInputs) {
    test::GraphBuilder b;
    b.input("a", {1, Dim::sym("N")});
    b.input("b", {1, Dim::sym("N")});
    b.node("Add", {"a", "b"}, {"y"});
    b.output("y");
    b.g.source = "two_inputs";
    Runner r(compile_ok(b.g));
    auto bad = r.run({test::random_host_f32({1, 5}, 1), test::random_host_f32({1, 6}, 2)});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("input 1 ('b') is f32 1x6, the model takes f32 1xN: axis 1 is 'N', which "
                                          "input 'a' axis 1 gives as 5"),
              std::string::npos)
        << bad.status().message();
    const std::vector<HostTensor> in{test::random_host_f32({1, 6}, 1), test::random_host_f32({1, 6}, 2)};
    auto good = r.run(in);
    ASSERT_TRUE(good.ok()) << good.status().to_string();
    expect_close((*good)[0], reference(b.g, in)[0], 1e-6);
}

TEST(HostMode, AShapeTheModelCannotTakeFailsThatInferenceNamingTheShapes) {
    test::GraphBuilder b;
    b.input("x", {1, 1, Dim::sym("H"), Dim::sym("W")});
    b.random_f32("w", {2, 1, 3, 3}, 1);
    b.node("Conv", {"x", "w"}, {"y"});  // no padding: H and W must be at least 3
    b.output("y");
    b.g.source = "valid_conv";
    Runner r(compile_ok(b.g));
    auto bad = r.run({test::random_host_f32({1, 1, 2, 5}, 1)});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("valid_conv: input shapes x=1x1x2x5"), std::string::npos)
        << bad.status().message();
    EXPECT_NE(bad.status().message().find("node 'y' (Conv)"), std::string::npos) << bad.status().message();
    auto good = r.run({test::random_host_f32({1, 1, 4, 5}, 1)});
    ASSERT_TRUE(good.ok()) << good.status().to_string();
    EXPECT_EQ((*good)[0].dims(), (std::vector<int64_t>{1, 2, 2, 3}));
}

TEST(HostMode, AnArenaBeyondDeviceMemoryFailsThatInferenceOnly) {
    device::DeviceSpec spec = test::preset_spec("edge");
    spec.memory_capacity_mib = 1;
    auto m = compiler::compile_graph(sr_graph(), {}, spec);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Runner r(std::move(*m), {}, spec);
    auto bad = r.run({test::random_host_f32({1, 3, 160, 160}, 1, 0.0f, 1.0f)});
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_NE(bad.status().message().find("activation arena of sr_dyn"), std::string::npos) << bad.status().message();
    EXPECT_NE(bad.status().message().find("x=1x3x160x160"), std::string::npos) << bad.status().message();
    auto good = r.run({test::random_host_f32({1, 3, 8, 8}, 2, 0.0f, 1.0f)});
    ASSERT_TRUE(good.ok()) << good.status().to_string();
}

TEST(HostMode, AnInjectedFaultFailsOneInferenceAndTheSessionRecovers) {
    device::DeviceOptions o;
    o.faults.fail_launch = 3;
    Runner r(compile_ok(sr_graph()), o);
    const std::vector<HostTensor> in{test::random_host_f32({1, 3, 10, 6}, 9, 0.0f, 1.0f)};
    auto bad = r.run(in);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::DEVICE_FAULT);
    auto good = r.run(in);
    ASSERT_TRUE(good.ok()) << good.status().to_string();
    expect_close((*good)[0], reference(sr_graph(), in)[0], 1e-5);
}

// ---- sink against host in simulated time ----------------------------------------------------

TEST(ExecutionModes, SinkIsMuchFasterThanHostSchedulingForManySmallOps) {
    constexpr int kLayers = 24;
    const Graph g = conv_chain(kLayers);
    const std::vector<HostTensor> in{test::random_host_f32({1, 8, 8, 8}, 11, 0.0f, 1.0f)};
    Runner sink(compile_sink(g, {1, 8, 8, 8}));
    Runner host(compile_ok(g));
    executor::RunStats ss, hs;
    auto a = sink.run(in, &ss);
    auto b = host.run(in, &hs);
    ASSERT_TRUE(a.ok() && b.ok());
    expect_close((*b)[0], (*a)[0], 1e-6);
    expect_close((*a)[0], reference(g, in)[0], 1e-5);
    // The convs, plus a TransData to NC1HWC0 before the first and one back after the last.
    EXPECT_EQ(ss.launches, static_cast<size_t>(kLayers + 2));
    EXPECT_EQ(hs.launches, static_cast<size_t>(kLayers + 2));
    EXPECT_EQ(ss.submissions, 1u);
    EXPECT_EQ(hs.submissions, static_cast<size_t>(kLayers + 2));
    std::printf("%d 1x1 convs at 8x8 on edge: sink %.4f ms, host-scheduled %.4f ms (%.2fx)\n", kLayers, ss.sim_ms,
                hs.sim_ms, hs.sim_ms / ss.sim_ms);
    EXPECT_GE(hs.sim_ms / ss.sim_ms, 1.5);
    // The SR network at 16x16: fewer, larger kernels, so a smaller gap.
    Runner sr_sink(compile_sink(sr_graph(), {1, 3, 16, 16}));
    Runner sr_host(compile_ok(sr_graph()));
    const std::vector<HostTensor> x{test::random_host_f32({1, 3, 16, 16}, 12, 0.0f, 1.0f)};
    ASSERT_TRUE(sr_sink.run(x, &ss).ok());
    ASSERT_TRUE(sr_host.run(x, &hs).ok());
    std::printf("SR network at 16x16 on edge: sink %.4f ms (%zu kernels), host-scheduled %.4f ms (%zu kernels)\n",
                ss.sim_ms, ss.launches, hs.sim_ms, hs.launches);
    EXPECT_GT(hs.sim_ms, ss.sim_ms);
}

TEST(ExecutionModes, ForcedHostModeOnAStaticModelMatchesSink) {
    const Graph g = conv_chain(6, 5, 7);
    compiler::CompileOptions host;
    host.mode = compiler::ExecMode::HOST;
    Runner a(compile_ok(g)), b(compile_ok(g, host));
    const std::vector<HostTensor> in{test::random_host_f32({1, 8, 5, 7}, 13, 0.0f, 1.0f)};
    executor::RunStats sa, sb;
    auto ya = a.run(in, &sa), yb = b.run(in, &sb);
    ASSERT_TRUE(ya.ok() && yb.ok());
    EXPECT_EQ(sa.mode, compiler::ExecMode::SINK);
    EXPECT_EQ(sb.mode, compiler::ExecMode::HOST);
    EXPECT_EQ(std::memcmp((*ya)[0].data(), (*yb)[0].data(), (*ya)[0].bytes()), 0);
    auto wrong = b.run({test::random_host_f32({1, 8, 5, 8}, 13)});
    ASSERT_FALSE(wrong.ok());
    EXPECT_NE(wrong.status().message().find("axis 3 is fixed at 7"), std::string::npos) << wrong.status().message();
}

TEST(ExecutionModes, HostPlacedStepsSplitASinkIntoOneSubmissionPerDeviceRun) {
    test::GraphBuilder b;
    b.input("a", {3}, device::DType::I64);
    b.input("x", {2, 64});
    b.constant("one", test::host_i64({1, 1, 1}));
    b.node("Relu", {"x"}, {"y1"});
    b.node("Add", {"a", "one"}, {"shape_sum"});
    b.node("Sigmoid", {"y1"}, {"y2"});
    b.output("shape_sum");
    b.output("y2");
    b.g.source = "mixed";
    compiler::CompileOptions o;
    o.optimize = false;  // keep Relu and Sigmoid apart
    Runner r(compile_ok(b.g, o));
    ASSERT_EQ(r.loaded->model().steps.size(), 3u);
    ASSERT_EQ(r.loaded->model().steps[1].placement, compiler::Placement::HOST);
    executor::RunStats st;
    const std::vector<HostTensor> in{test::host_i64({4, 5, 6}), test::random_host_f32({2, 64}, 3)};
    auto out = r.run(in, &st);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(st.launches, 2u);
    EXPECT_EQ(st.host_steps, 1u);
    EXPECT_EQ(st.submissions, 2u);
    EXPECT_EQ(std::vector<int64_t>((*out)[0].as<int64_t>(), (*out)[0].as<int64_t>() + 3), (std::vector<int64_t>{5, 6, 7}));
    expect_close((*out)[1], reference(b.g, in)[1], 1e-6);
}

// ---- host-mode model files -------------------------------------------------------------------

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

class HostModelFile : public ::testing::Test {
protected:
    void SetUp() override {
        model_ = compile_ok(sr_graph());
        ASSERT_EQ(model_.mode, compiler::ExecMode::HOST);
        path_ = dir_.file("m.loom");
        ASSERT_TRUE(compiler::save_compiled_model(path_, model_).ok());
    }
    // Saves the model with `edit` applied to it.
    template <typename Fn>
    void rewrite_model(Fn edit) {
        CompiledModel m = model_;
        edit(m);
        ASSERT_TRUE(compiler::save_compiled_model(path_, m).ok());
    }
    // Saves the model, then rewrites the file's JSON with `edit` applied, sizes and checksum
    // fixed, so only validation can catch it.
    template <typename Fn>
    void rewrite_json(Fn edit) {
        ASSERT_TRUE(compiler::save_compiled_model(path_, model_).ok());
        std::ifstream f(path_, std::ios::binary);
        std::string bytes(std::istreambuf_iterator<char>(f), {});
        uint64_t jbytes = 0, wbytes = 0;
        std::memcpy(&jbytes, bytes.data() + 16, 8);
        std::memcpy(&wbytes, bytes.data() + 24, 8);
        nlohmann::json j = nlohmann::json::parse(bytes.substr(40, jbytes));
        edit(j);
        const std::string json = j.dump();
        const std::string weights = bytes.substr(bytes.size() - wbytes);
        std::string out = bytes.substr(0, 40);
        const uint64_t n = json.size();
        const uint64_t sum = fnv1a(fnv1a(0xcbf29ce484222325ull, json.data(), json.size()), weights.data(), wbytes);
        std::memcpy(out.data() + 16, &n, 8);
        std::memcpy(out.data() + 32, &sum, 8);
        out += json;
        out += std::string((64 - out.size() % 64) % 64, '\0');
        out += weights;
        std::ofstream(path_, std::ios::binary | std::ios::trunc).write(out.data(), static_cast<std::streamsize>(out.size()));
    }
    void expect_refused(const std::string& needle) {
        auto m = compiler::load_compiled_model(path_);
        ASSERT_FALSE(m.ok());
        EXPECT_EQ(m.status().code(), StatusCode::PARSE_ERROR) << m.status().to_string();
        EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
        EXPECT_NE(m.status().message().find(path_), std::string::npos) << m.status().message();
    }
    int node_index(const std::string& op) const {
        for (size_t i = 0; i < model_.graph.nodes.size(); ++i)
            if (model_.graph.nodes[i].op == op) return static_cast<int>(i);
        ADD_FAILURE() << "no " << op << " node";
        return 0;
    }
    CompiledModel model_;
    test::TempDir dir_;
    std::string path_;
};

TEST_F(HostModelFile, RoundTripKeepsTheGraphAndRunsTheSame) {
    auto m = compiler::load_compiled_model(path_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->mode, compiler::ExecMode::HOST);
    EXPECT_EQ(compiler::compiled_model_json(*m), compiler::compiled_model_json(model_));
    ASSERT_EQ(m->graph.values.size(), model_.graph.values.size());
    for (size_t i = 0; i < m->graph.values.size(); ++i) {
        const auto &a = m->graph.values[i], &b = model_.graph.values[i];
        EXPECT_EQ(a.shape, b.shape) << a.name;
        ASSERT_EQ(a.is_constant(), b.is_constant()) << a.name;
        if (a.is_constant()) {
            EXPECT_EQ(std::memcmp(a.data->data(), b.data->data(), a.data->bytes()), 0) << a.name;
        }
    }
    Runner a(model_), b(*m);
    for (int64_t h : {6, 13}) {
        const std::vector<HostTensor> in{test::random_host_f32({1, 3, h, 9}, 21, 0.0f, 1.0f)};
        auto ya = a.run(in), yb = b.run(in);
        ASSERT_TRUE(ya.ok() && yb.ok());
        for (size_t o = 0; o < ya->size(); ++o)
            EXPECT_EQ(std::memcmp((*ya)[o].data(), (*yb)[o].data(), (*ya)[o].bytes()), 0) << o;
    }
}

TEST_F(HostModelFile, UnknownOpIsRefused) {
    rewrite_model([](CompiledModel& m) { m.graph.nodes[0].op = "WarpDrive"; });
    expect_refused("graph: node");
    expect_refused("uses an op this loomc does not know");
}

TEST_F(HostModelFile, ValueIdOutOfRangeIsRefused) {
    rewrite_model([](CompiledModel& m) { m.graph.nodes[1].inputs[0] = static_cast<int>(m.graph.values.size()) + 3; });
    expect_refused("out of range");
    rewrite_model([](CompiledModel& m) { m.graph.outputs.push_back(-2); });
    expect_refused("graph output id -2");
}

TEST_F(HostModelFile, NodesOutOfTopologicalOrderAreRefused) {
    rewrite_model([&](CompiledModel& m) { std::swap(m.graph.nodes[0], m.graph.nodes.back()); });
    expect_refused("before it is produced");
}

TEST_F(HostModelFile, ConstantOutsideTheWeightsIsRefused) {
    rewrite_model([](CompiledModel& m) {
        for (size_t i = 0; i < m.graph_offsets.size(); ++i)
            if (m.graph_offsets[i] >= 0 && m.graph.values[i].data->bytes() > 64) {
                m.graph_offsets[i] = m.weights.elements() - 64;
                break;
            }
    });
    expect_refused("leaves its weights");
    rewrite_model([](CompiledModel& m) {
        for (auto& o : m.graph_offsets)
            if (o >= 0) {
                o += 8;  // unaligned
                break;
            }
    });
    expect_refused("leaves its weights");
}

TEST_F(HostModelFile, MalformedValuesAreRefused) {
    rewrite_json([](nlohmann::json& j) { j["graph"]["values"][1]["name"] = j["graph"]["values"][0]["name"]; });
    expect_refused("is defined twice");
    rewrite_json([](nlohmann::json& j) { j["graph"]["values"][0]["shape"][2] = -4; });
    expect_refused("bad dim -4");
    rewrite_json([](nlohmann::json& j) { j["graph"]["values"][0]["shape"][2] = ""; });
    expect_refused("bad dim");
    rewrite_json([](nlohmann::json& j) { j["graph"]["values"][0]["dtype"] = "f128"; });
    expect_refused("unknown dtype 'f128'");
    rewrite_json([](nlohmann::json& j) { j["graph"]["inputs"].push_back(j["graph"]["inputs"][0]); });
    expect_refused("listed twice");
}

TEST_F(HostModelFile, AGraphThatNoLongerInfersIsRefusedNamingTheNode) {
    const int conv = node_index("Conv");
    rewrite_model([&](CompiledModel& m) {
        auto& in = m.graph.nodes[static_cast<size_t>(conv)].inputs;
        std::swap(in[1], in[2]);  // the bias as the weights
    });
    expect_refused(fmt::format("graph: node '{}' (Conv)", model_.graph.nodes[static_cast<size_t>(conv)].name));
}

TEST_F(HostModelFile, SectionsOfTheOtherModeAreRefused) {
    rewrite_json([](nlohmann::json& j) { j.erase("graph"); });
    expect_refused("malformed model description");
    rewrite_json([](nlohmann::json& j) { j["mode"] = "turbo"; });
    expect_refused("unknown mode 'turbo' (sink or host)");
    rewrite_json([](nlohmann::json& j) { j["precision"] = "fp64"; });
    expect_refused("unknown precision 'fp64' (fp32, fp16 or int8)");
    rewrite_json([](nlohmann::json& j) { j["mode"] = "sink"; });
    expect_refused("a sink-mode model with a graph section");
    rewrite_model([](CompiledModel& m) { m.arena_bytes = 4096; });
    expect_refused("a host-mode model with tensors, steps or a plan");
}

}  // namespace
}  // namespace loom::test_execution_modes
