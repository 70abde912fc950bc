// Compiled models on the simulated NPU: the executor's results equal the host interpreter's on
// the unoptimised graph, weights are shared, device errors fail one inference only, and a
// model built for another spec is refused. Also the compiled-model file: round trip and every
// kind of corruption refused with a message naming the part.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "compiler/compile.hpp"
#include "compiler/interpret.hpp"
#include "compiler/model_file.hpp"
#include "compiler/ops.hpp"
#include "executor/executor.hpp"
#include "tests/test_util.hpp"

namespace loom::test_executor {  // apart from the rest of its unity batch
namespace {

using compiler::CompiledModel;
using compiler::Graph;
using compiler::HostTensor;
using device::KernelAttrs;

// A small SR-like network: conv+prelu, conv+relu with a residual, conv -> depth_to_space,
// plus a nearest-upsampled skip; a reshape and a tiny integer side computation.
Graph sr_graph(int64_t h = 12, int64_t w = 10) {
    test::GraphBuilder b;
    b.input("x", {1, 3, h, w});
    test::add_sr_body(b);
    b.constant("flat", test::host_i64({1, -1}));
    b.node("Reshape", {"y", "flat"}, {"y_flat"});
    b.output("y");
    b.output("y_flat");
    b.g.source = "sr_graph";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b.g;
}

CompiledModel compile_ok(Graph g, std::string_view preset = "edge",
                         compiler::Precision precision = compiler::Precision::FP32) {
    compiler::CompileOptions o;
    o.precision = precision;
    auto m = compiler::compile_graph(std::move(g), o, test::preset_spec(preset));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(*m) : CompiledModel{};
}

std::vector<HostTensor> reference(Graph g, const std::vector<HostTensor>& inputs) {
    EXPECT_TRUE(compiler::infer_shapes(g).ok());
    auto r = compiler::interpret(g, inputs);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : std::vector<HostTensor>{};
}

using test::expect_close;

TEST(Executor, CompiledModelMatchesInterpreterOnTheUnoptimisedGraph) {
    const Graph g = sr_graph();
    const std::vector<HostTensor> in{test::random_host_f32({1, 3, 12, 10}, 7, 0.0f, 1.0f)};
    const auto want = reference(g, in);
    auto model = std::make_shared<CompiledModel>(compile_ok(g));
    // Fusion happened: conv+prelu, conv+add+relu; the reshape is a zero-copy alias.
    EXPECT_LT(model->steps.size(), g.nodes.size());
    size_t alias = 0;
    for (const auto& s : model->steps) alias += s.alias;
    EXPECT_EQ(alias, 1u);
    auto dev = test::make_device();
    auto loaded = executor::LoadedModel::load(*dev, model);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    auto session = executor::Session::create(*loaded);
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    executor::RunStats stats;
    auto out = (*session)->run(in, &stats);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ(out->size(), 2u);
    expect_close((*out)[0], want[0], 1e-5);
    expect_close((*out)[1], want[1], 1e-5);
    EXPECT_GT(stats.sim_ms, 0.0);
    EXPECT_EQ(stats.launches, model->steps.size() - alias);
}

// A session prepares its launches (checks, costs, packed and transformed weights) on its first
// inference and reuses them: later inferences of new inputs still compute their own outputs.
TEST(Executor, ASessionPreparesItsLaunchesOnceAndEveryInferenceComputesItsOwnInputs) {
    const Graph g = sr_graph();
    auto model = std::make_shared<CompiledModel>(compile_ok(g));
    auto dev = test::make_device();
    auto session = executor::Session::create(*executor::LoadedModel::load(*dev, model));
    ASSERT_TRUE(session.ok());
    std::vector<bool> cached;
    for (uint64_t seed : {11, 12, 13}) {
        const std::vector<HostTensor> in{test::random_host_f32({1, 3, 12, 10}, seed, 0.0f, 1.0f)};
        executor::RunStats stats;
        auto out = (*session)->run(in, &stats);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        cached.push_back(stats.launches_cached);
        const auto want = reference(g, in);
        expect_close((*out)[0], want[0], 1e-5);
        expect_close((*out)[1], want[1], 1e-5);
    }
    EXPECT_EQ(cached, (std::vector<bool>{false, true, true}));
}

TEST(Executor, Fp16MatchesFp32WithinHalfPrecision) {
    const Graph g = sr_graph();
    const std::vector<HostTensor> in{test::random_host_f32({1, 3, 12, 10}, 8, 0.0f, 1.0f)};
    const auto want = reference(g, in);
    auto model = std::make_shared<CompiledModel>(compile_ok(g, "edge", compiler::Precision::FP16));
    auto dev = test::make_device();
    auto session = executor::Session::create(*executor::LoadedModel::load(*dev, model));
    ASSERT_TRUE(session.ok());
    auto out = (*session)->run(in);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ((*out)[0].dtype(), device::DType::F32);  // the interface stays f32
    expect_close((*out)[0], want[0], 5e-3);
}

TEST(Executor, SessionsShareOneCopyOfTheWeights) {
    auto model = std::make_shared<CompiledModel>(compile_ok(sr_graph()));
    auto dev = test::make_device();
    const size_t before = dev->stats().memory_used;
    auto loaded = executor::LoadedModel::load(*dev, model);
    ASSERT_TRUE(loaded.ok());
    const size_t with_weights = dev->stats().memory_used;
    auto s1 = executor::Session::create(*loaded);
    auto s2 = executor::Session::create(*loaded);
    ASSERT_TRUE(s1.ok() && s2.ok());
    const size_t arena = dev->stats().memory_used - with_weights;
    EXPECT_GE(with_weights - before, static_cast<size_t>(model->weights.elements()));
    EXPECT_GE(arena, 2 * static_cast<size_t>(model->arena_bytes));
    EXPECT_LT(arena, 2 * static_cast<size_t>(model->arena_bytes) + 4096);
}

// Sessions that never run at once may share one arena (the tiled runner's passes): the device
// holds it once, each session computes its own inputs in it, and an arena smaller than the
// model's is refused, as is a host-mode model (its arena grows per input shape).
TEST(Executor, SessionsTakingTurnsShareOneArena) {
    const Graph g = sr_graph();
    auto model = std::make_shared<CompiledModel>(compile_ok(g));
    auto dev = test::make_device();
    auto loaded = executor::LoadedModel::load(*dev, model);
    ASSERT_TRUE(loaded.ok());
    const size_t with_weights = dev->stats().memory_used;
    auto buffer = dev->malloc(static_cast<size_t>(model->arena_bytes), "shared");
    ASSERT_TRUE(buffer.ok());
    auto arena = std::make_shared<device::DeviceBuffer>(std::move(*buffer));
    auto s1 = executor::Session::create(*loaded, arena);
    auto s2 = executor::Session::create(*loaded, arena);
    ASSERT_TRUE(s1.ok() && s2.ok()) << s1.status().to_string() << s2.status().to_string();
    EXPECT_LT(dev->stats().memory_used - with_weights, static_cast<size_t>(model->arena_bytes) + 4096);
    EXPECT_EQ((*s1)->arena_bytes(), (*s2)->arena_bytes());
    for (uint64_t seed : {21, 22, 23, 24}) {
        const std::vector<HostTensor> in{test::random_host_f32({1, 3, 12, 10}, seed, 0.0f, 1.0f)};
        auto out = (seed % 2 ? *s1 : *s2)->run(in);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        const auto want = reference(g, in);
        expect_close((*out)[0], want[0], 1e-5);
    }
    auto small = dev->malloc(static_cast<size_t>(model->arena_bytes) / 2, "small");
    ASSERT_TRUE(small.ok());
    auto refused = executor::Session::create(*loaded, std::make_shared<device::DeviceBuffer>(std::move(*small)));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(refused.status().message().find("shared arena"), std::string::npos) << refused.status().message();
}

// Two models that hand a value on the device: the producer x -> Conv -> Relu = y (left in the
// conv's NC1HWC0, as an output preset to it) and Reshape(y) = y_flat; the consumer y (read in
// NC1HWC0) -> Conv = z.
Graph producer() {
    test::GraphBuilder b;
    b.input("x", {1, 3, 12, 10});
    b.random_f32("w0", {8, 3, 3, 3}, 31);
    b.node("Conv", {"x", "w0"}, {"c"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    b.node("Relu", {"c"}, {"y"});
    b.constant("flat", test::host_i64({1, -1}));
    b.node("Reshape", {"y", "flat"}, {"y_flat"});
    b.output("y");
    b.output("y_flat");
    b.g.source = "producer";
    EXPECT_TRUE(b.g.topo_sort().ok());
    EXPECT_TRUE(compiler::infer_shapes(b.g).ok());
    b.g.value(b.g.find_value("y")).layout = compiler::Layout::NC1HWC0;
    return b.g;
}

Graph consumer() {
    test::GraphBuilder b;
    b.input("y", {1, 8, 12, 10});
    b.random_f32("w1", {4, 8, 3, 3}, 32);
    b.node("Conv", {"y", "w1"}, {"z"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}});
    b.output("z");
    b.g.source = "consumer";
    EXPECT_TRUE(b.g.topo_sort().ok());
    EXPECT_TRUE(compiler::infer_shapes(b.g).ok());
    b.g.value(b.g.find_value("y")).layout = compiler::Layout::NC1HWC0;
    return b.g;
}

size_t trans_data_steps(const CompiledModel& m) {
    return static_cast<size_t>(std::count_if(m.steps.begin(), m.steps.end(),
                                             [](const compiler::CompiledStep& s) { return s.op == "TransData"; }));
}

void expect_same_bytes(const HostTensor& got, const HostTensor& want, const std::string& what) {
    ASSERT_EQ(got.dims(), want.dims()) << what;
    ASSERT_EQ(got.dtype(), want.dtype()) << what;
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.bytes()), 0) << what;
}

TEST(Executor, BoundValuesStayOnTheDeviceAndEqualTheHostRoundTrip) {
    auto ma = std::make_shared<CompiledModel>(compile_ok(producer()));
    auto mb = std::make_shared<CompiledModel>(compile_ok(consumer()));
    // No TransData at the handed edge: only x into 5HD and y to ND for the Reshape, then z to ND.
    EXPECT_EQ(trans_data_steps(*ma), 2u);
    EXPECT_EQ(trans_data_steps(*mb), 1u);
    const compiler::CompiledTensor& y = ma->tensors[static_cast<size_t>(ma->outputs[0])];
    EXPECT_EQ(y.layout, compiler::Layout::NC1HWC0);
    EXPECT_EQ(mb->tensors[static_cast<size_t>(mb->inputs[0])].layout, compiler::Layout::NC1HWC0);

    auto dev = test::make_device();
    auto la = executor::LoadedModel::load(*dev, ma);
    auto lb = executor::LoadedModel::load(*dev, mb);
    ASSERT_TRUE(la.ok() && lb.ok());
    auto sa = executor::Session::create(*la);
    auto sb = executor::Session::create(*lb);
    ASSERT_TRUE(sa.ok() && sb.ok());
    auto buf = dev->malloc(size_t{1} << 20, "handed");
    ASSERT_TRUE(buf.ok());
    // y at 0; y_flat (the same bytes as the producer's ND copy of y: an alias) after it, and
    // copied out as well.
    const int64_t flat_at = (y.device_bytes() + 63) / 64 * 64;
    using executor::DeviceTensor;
    const std::vector<DeviceTensor> host_in(1);
    auto ba = (*sa)->bind(host_in, std::vector<DeviceTensor>{{&*buf, 0, false}, {&*buf, flat_at, true}});
    auto bb = (*sb)->bind(std::vector<DeviceTensor>{{&*buf, 0, false}}, std::vector<DeviceTensor>(1));
    ASSERT_TRUE(ba.ok()) << ba.status().to_string();
    ASSERT_TRUE(bb.ok()) << bb.status().to_string();
    for (uint64_t seed : {41, 42}) {
        const std::vector<HostTensor> x{test::random_host_f32({1, 3, 12, 10}, seed, -1.0f, 1.0f)};
        // Through the host: y copied out in logical order and back in.
        auto ya = (*sa)->run(x);
        ASSERT_TRUE(ya.ok()) << ya.status().to_string();
        auto zb = (*sb)->run(std::vector<HostTensor>{(*ya)[0]});
        ASSERT_TRUE(zb.ok()) << zb.status().to_string();
        // On the device: y never leaves it.
        std::vector<HostTensor> outs(2);
        executor::RunStats rs;
        ASSERT_TRUE((*sa)->run(*ba, x, outs, &rs).ok());
        EXPECT_TRUE(rs.launches_cached);
        EXPECT_EQ(outs[0].data(), nullptr);  // left as it was
        expect_same_bytes(outs[1], (*ya)[1], "y_flat copied out from the bound buffer");
        std::vector<HostTensor> z;
        ASSERT_TRUE((*sb)->run(*bb, std::vector<HostTensor>(1), z).ok());
        expect_same_bytes(z[0], (*zb)[0], fmt::format("z, seed {}", seed));
    }

    auto refused = [](const Result<executor::BoundLaunches>& r, const std::string& says) {
        ASSERT_FALSE(r.ok()) << says;
        EXPECT_EQ(r.status().code(), StatusCode::INVALID_ARGUMENT);
        EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
    };
    refused((*sb)->bind(std::vector<DeviceTensor>{{&*buf, 32, false}}, std::vector<DeviceTensor>(1)), "input 0 ('y')");
    refused((*sa)->bind(host_in, std::vector<DeviceTensor>{{&*buf, 0, false}, {&*buf, 64, false}}), "overlapping");
    auto small = dev->malloc(64, "small");
    ASSERT_TRUE(small.ok());
    refused((*sb)->bind(std::vector<DeviceTensor>{{&*small, 0, false}}, std::vector<DeviceTensor>(1)),
            "the tensor fit");
    refused((*sb)->bind({}, {}), "0 inputs and 0 outputs bound");
    // An output that is a constant of the model: nothing would write it into the buffer.
    {
        test::GraphBuilder cb;
        cb.input("x", {1, 2, 4, 4});
        cb.node("Relu", {"x"}, {"r"});
        cb.constant("k", test::host_i64({1, 2, 3}));
        cb.output("r");
        cb.output("k");
        cb.g.source = "constant_out";
        ASSERT_TRUE(compiler::infer_shapes(cb.g).ok());
        auto mc = std::make_shared<CompiledModel>(compile_ok(cb.g));
        auto lc = executor::LoadedModel::load(*dev, mc);
        ASSERT_TRUE(lc.ok());
        auto sc = executor::Session::create(*lc);
        ASSERT_TRUE(sc.ok());
        refused((*sc)->bind(host_in, std::vector<DeviceTensor>{{}, {&*buf, 0, false}}), "output 1 ('k') is a constant");
    }
    std::vector<HostTensor> z;
    const Status other = (*sb)->run(*ba, std::vector<HostTensor>(1), z);
    EXPECT_EQ(other.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(other.message().find("another session"), std::string::npos) << other.message();
    // A host-mode model plans per input shape: nothing to bind.
    compiler::CompileOptions host;
    host.mode = compiler::ExecMode::HOST;
    auto mh = compiler::compile_graph(consumer(), host, test::preset_spec("edge"));
    ASSERT_TRUE(mh.ok()) << mh.status().to_string();
    auto lh = executor::LoadedModel::load(*dev, std::make_shared<CompiledModel>(std::move(*mh)));
    ASSERT_TRUE(lh.ok());
    auto sh = executor::Session::create(*lh);
    ASSERT_TRUE(sh.ok());
    refused((*sh)->bind(std::vector<DeviceTensor>(1), std::vector<DeviceTensor>(1)), "host-mode");
}

TEST(Executor, InjectedFaultFailsOneInferenceAndTheSessionRecovers) {
    const std::vector<HostTensor> in{test::random_host_f32({1, 3, 12, 10}, 9, 0.0f, 1.0f)};
    auto model = std::make_shared<CompiledModel>(compile_ok(sr_graph()));
    device::DeviceOptions opt;
    opt.faults.fail_launch = 2;
    auto dev = test::make_device(opt);
    auto session = executor::Session::create(*executor::LoadedModel::load(*dev, model));
    ASSERT_TRUE(session.ok());
    auto bad = (*session)->run(in);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::DEVICE_FAULT) << bad.status().to_string();
    auto good = (*session)->run(in);
    ASSERT_TRUE(good.ok()) << good.status().to_string();
    expect_close((*good)[0], reference(sr_graph(), in)[0], 1e-5);
}

TEST(Executor, ArenaBeyondDeviceMemoryIsATypedError) {
    device::DeviceSpec spec = test::preset_spec("edge");
    spec.memory_capacity_mib = 1;
    compiler::CompileOptions o;
    auto m = compiler::compile_graph(sr_graph(256, 256), o, spec);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_GT(m->arena_bytes, int64_t{1} << 20);
    auto dev = device::Device::create(spec);
    ASSERT_TRUE(dev.ok());
    auto loaded = executor::LoadedModel::load(**dev, std::make_shared<CompiledModel>(std::move(*m)));
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    auto session = executor::Session::create(*loaded);
    ASSERT_FALSE(session.ok());
    EXPECT_EQ(session.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_NE(session.status().message().find("activation arena of sr_graph"), std::string::npos)
        << session.status().message();
}

TEST(Executor, SeveralModelsStayResidentAndOneThatDoesNotFitIsRefusedByName) {
    device::DeviceSpec spec = test::preset_spec("edge");
    spec.memory_capacity_mib = 2;
    auto compile_for = [&](Graph g) {
        auto m = compiler::compile_graph(std::move(g), compiler::CompileOptions{}, spec);
        EXPECT_TRUE(m.ok()) << m.status().to_string();
        return std::make_shared<CompiledModel>(m.ok() ? std::move(*m) : CompiledModel{});
    };
    auto a = compile_for(sr_graph()), b = compile_for(sr_graph(8, 8));
    b->source = "second";
    // 1.66 MB of weights: fits beside the other two, not beside them and 1.5 MiB more.
    test::GraphBuilder big;
    big.input("x", {1, 64, 4, 4});
    big.random_f32("w", {360, 64, 3, 3}, 3);
    big.random_f32("w2", {64, 360, 3, 3}, 4);
    const device::KernelAttrs conv{{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"kernel_shape", std::vector<int64_t>{3, 3}}};
    big.node("Conv", {"x", "w"}, {"h"}, conv);
    big.node("Conv", {"h", "w2"}, {"y"}, conv);
    big.output("y");
    big.g.source = "too-big";
    auto c = compile_for(big.g);
    auto dev = device::Device::create(spec);
    ASSERT_TRUE(dev.ok());
    auto la = executor::LoadedModel::load(**dev, a), lb = executor::LoadedModel::load(**dev, b);
    ASSERT_TRUE(la.ok() && lb.ok());
    auto sa = executor::Session::create(*la), sb = executor::Session::create(*lb);
    ASSERT_TRUE(sa.ok() && sb.ok());
    // A third model on top of a 1.5 MB allocation does not fit: a typed error naming it.
    auto ballast = (*dev)->malloc(size_t{1536} << 10, "ballast");
    ASSERT_TRUE(ballast.ok());
    auto lc = executor::LoadedModel::load(**dev, c);
    ASSERT_FALSE(lc.ok());
    EXPECT_EQ(lc.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_NE(lc.status().message().find("loading the weights of too-big"), std::string::npos)
        << lc.status().message();
    // The resident models are untouched and keep serving, interleaved.
    const std::vector<HostTensor> ia{test::random_host_f32({1, 3, 12, 10}, 1, 0.0f, 1.0f)};
    const std::vector<HostTensor> ib{test::random_host_f32({1, 3, 8, 8}, 2, 0.0f, 1.0f)};
    for (int round = 0; round < 2; ++round) {
        auto ya = (*sa)->run(ia);
        auto yb = (*sb)->run(ib);
        ASSERT_TRUE(ya.ok() && yb.ok());
        expect_close((*ya)[0], reference(sr_graph(), ia)[0], 1e-5);
        expect_close((*yb)[0], reference(sr_graph(8, 8), ib)[0], 1e-5);
    }
    // Room made, it loads.
    ballast = device::DeviceBuffer();
    EXPECT_TRUE(executor::LoadedModel::load(**dev, c).ok());
}

TEST(Executor, ModelForAnotherSpecIsRefused) {
    auto model = std::make_shared<CompiledModel>(compile_ok(sr_graph(), "dc"));
    auto dev = test::make_device();  // edge
    auto loaded = executor::LoadedModel::load(*dev, model);
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(loaded.status().message().find("compiled for device 'dc'"), std::string::npos);
    EXPECT_NE(loaded.status().message().find("the device is 'edge'"), std::string::npos);
}

TEST(Executor, WrongInputShapeIsRefusedBeforeAnythingRuns) {
    auto model = std::make_shared<CompiledModel>(compile_ok(sr_graph()));
    auto dev = test::make_device();
    auto session = executor::Session::create(*executor::LoadedModel::load(*dev, model));
    ASSERT_TRUE(session.ok());
    const std::vector<HostTensor> in{test::random_host_f32({1, 3, 10, 12}, 7)};
    auto out = (*session)->run(in);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(out.status().message().find("compiled for f32 1x3x12x10"), std::string::npos) << out.status().message();
    EXPECT_EQ(dev->stats().engines[static_cast<size_t>(device::Engine::AICORE)].tasks, 0u);
}

TEST(Executor, TinyIntegerOpsRunOnTheHostEngine) {
    test::GraphBuilder b;
    b.input("a", {3}, device::DType::I64);
    b.input("x", {2, 3});
    b.constant("one", test::host_i64({1, 1, 1}));
    b.node("Add", {"a", "one"}, {"shape_sum"});
    b.node("Relu", {"x"}, {"y"});
    b.output("shape_sum");
    b.output("y");
    b.g.source = "tiny";
    auto model = std::make_shared<CompiledModel>(compile_ok(b.g));
    ASSERT_EQ(model->steps.size(), 2u);
    EXPECT_EQ(model->steps[0].placement, compiler::Placement::HOST);
    EXPECT_EQ(model->steps[1].placement, compiler::Placement::DEVICE);
    auto dev = test::make_device();
    auto session = executor::Session::create(*executor::LoadedModel::load(*dev, model));
    ASSERT_TRUE(session.ok());
    executor::RunStats stats;
    auto out = (*session)->run(std::vector<HostTensor>{test::host_i64({4, 5, 6}), test::random_host_f32({2, 3}, 3)}, &stats);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(stats.host_steps, 1u);
    EXPECT_EQ(std::vector<int64_t>((*out)[0].as<int64_t>(), (*out)[0].as<int64_t>() + 3), (std::vector<int64_t>{5, 6, 7}));
    EXPECT_EQ(dev->stats().engines[static_cast<size_t>(device::Engine::HOST_CPU)].tasks, 1u);
}

// target = Reshape(Concat(Gather(Shape(x), [0, 1]), [-1]), [1, 3]) beside y = Relu(x), compiled
// with folding off so that the chain runs at run time (as with shapes known only then).
std::shared_ptr<CompiledModel> shape_chain(bool host_placement, compiler::ExecMode mode) {
    test::GraphBuilder b;
    b.input("x", {1, 16, 8, 8});
    b.constant("nc_axes", test::host_i64({0, 1}));
    b.constant("rest", test::host_i64({-1}));
    b.constant("row", test::host_i64({1, 3}));
    b.node("Shape", {"x"}, {"shape"});
    b.node("Gather", {"shape", "nc_axes"}, {"nc"}, {{"axis", int64_t{0}}});
    b.node("Concat", {"nc", "rest"}, {"flat"}, {{"axis", int64_t{0}}});
    b.node("Reshape", {"flat", "row"}, {"target"});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    b.output("target");
    b.g.source = "shape-chain";
    compiler::CompileOptions o;
    o.fold = false;
    o.host_placement = host_placement;
    o.mode = mode;
    auto m = compiler::compile_graph(b.g, o, test::preset_spec("edge"));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return std::make_shared<CompiledModel>(m.ok() ? std::move(*m) : CompiledModel{});
}

TEST(Executor, AShapeChainOnTheHostIsOneHostTaskAndNoDeviceKernels) {
    for (const compiler::ExecMode mode : {compiler::ExecMode::SINK, compiler::ExecMode::HOST}) {
        SCOPED_TRACE(compiler::exec_mode_name(mode));
        auto dev = test::make_device();
        auto session = executor::Session::create(*executor::LoadedModel::load(*dev, shape_chain(true, mode)));
        ASSERT_TRUE(session.ok()) << session.status().to_string();
        executor::RunStats st;
        auto out = (*session)->run(std::vector<HostTensor>{test::random_host_f32({1, 16, 8, 8}, 5)}, &st);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        EXPECT_EQ(st.host_steps, 3u);  // Shape, Gather, Concat; the Reshape is a zero-copy alias
        EXPECT_EQ(st.launches, 1u);    // the Relu
        EXPECT_EQ(dev->stats().engines[static_cast<size_t>(device::Engine::HOST_CPU)].tasks, 1u);
        EXPECT_EQ(dev->stats().engines[static_cast<size_t>(device::Engine::AICORE)].tasks, 1u);
        ASSERT_EQ((*out)[1].dims(), (std::vector<int64_t>{1, 3}));
        EXPECT_EQ(std::vector<int64_t>((*out)[1].as<int64_t>(), (*out)[1].as<int64_t>() + 3),
                  (std::vector<int64_t>{1, 16, -1}));
    }
}

TEST(Executor, HostPlacementOffRunsTheShapeChainOnTheAICores) {
    auto model = shape_chain(false, compiler::ExecMode::SINK);
    for (const auto& s : model->steps) EXPECT_EQ(s.placement, compiler::Placement::DEVICE) << s.name;
    test::TempDir dir;
    ASSERT_TRUE(compiler::save_compiled_model(dir.file("m.loom"), *model).ok());
    auto back = compiler::load_compiled_model(dir.file("m.loom"));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_FALSE(back->fold);
    EXPECT_FALSE(back->host_placement);
    auto dev = test::make_device();
    auto session = executor::Session::create(*executor::LoadedModel::load(*dev, model));
    ASSERT_TRUE(session.ok());
    executor::RunStats st;
    auto out = (*session)->run(std::vector<HostTensor>{test::random_host_f32({1, 16, 8, 8}, 5)}, &st);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(st.host_steps, 0u);
    EXPECT_EQ(dev->stats().engines[static_cast<size_t>(device::Engine::HOST_CPU)].tasks, 0u);
    EXPECT_EQ(std::vector<int64_t>((*out)[1].as<int64_t>(), (*out)[1].as<int64_t>() + 3),
              (std::vector<int64_t>{1, 16, -1}));
}

TEST(Compile, MemoryPlanReusesBuffersAndChecksOut) {
    const CompiledModel m = compile_ok(sr_graph(64, 64));
    EXPECT_GE(m.arena_bytes, m.plan_lower_bound);
    EXPECT_LE(m.arena_bytes, m.plan_lower_bound + m.plan_lower_bound / 20);  // within 5% of the bound
    EXPECT_LT(m.arena_bytes, m.plan_naive);  // the 2x target is checked on the real models (ctest plan.*)
}

TEST(Compile, SymbolicInputInSinkModeIsRefusedNamingIt) {
    test::GraphBuilder b;
    b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    b.g.source = "dyn.onnx";
    compiler::CompileOptions sink;
    sink.mode = compiler::ExecMode::SINK;
    auto m = compiler::compile_graph(b.g, sink, test::preset_spec("edge"));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("input 'x' has the symbolic shape 1x3xHxW; sink mode needs static shapes: "
                                        "give --shape x=..."),
              std::string::npos)
        << m.status().message();
    auto host = compiler::compile_graph(b.g, {}, test::preset_spec("edge"));  // the default: host mode
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    EXPECT_EQ(host->mode, compiler::ExecMode::HOST);
    compiler::CompileOptions o;
    o.shapes = {{"x", {1, 3, 5, 7}}};
    auto ok = compiler::compile_graph(b.g, o, test::preset_spec("edge"));
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
    EXPECT_EQ(ok->mode, compiler::ExecMode::SINK);
    EXPECT_EQ(ok->tensors[static_cast<size_t>(ok->outputs[0])].dims, (std::vector<int64_t>{1, 3, 5, 7}));
}

TEST(Compile, IllegalLaunchFailsTheCompileNamingTheNode) {
    test::GraphBuilder b;
    b.input("x", {1, 2, 3, 4, 5});  // 3-D conv: the kernel does 1-D and 2-D
    b.random_f32("w", {2, 2, 1, 1, 1}, 1);
    b.node("Conv", {"x", "w"}, {"y"});
    b.output("y");
    b.g.source = "conv3d.onnx";
    auto m = compiler::compile_graph(b.g, {}, test::preset_spec("edge"));
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("conv3d.onnx: node 'y' (Conv) -> kernel conv"), std::string::npos)
        << m.status().message();
}

TEST(Compile, ParseShapeOption) {
    auto s = compiler::parse_shape_option("input=1x3x240x320");
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->first, "input");
    EXPECT_EQ(s->second, (std::vector<int64_t>{1, 3, 240, 320}));
    for (const char* bad : {"input", "=1x3", "input=", "input=1xx3", "input=1x-3", "input=1x3a"})
        EXPECT_FALSE(compiler::parse_shape_option(bad).ok()) << bad;
}

// ---- the compiled-model file ----------------------------------------------------------------

class ModelFile : public ::testing::Test {
protected:
    void SetUp() override {
        model_ = compile_ok(sr_graph());
        path_ = dir_.file("m.loom");
        ASSERT_TRUE(compiler::save_compiled_model(path_, model_).ok());
    }
    std::string read() const {
        std::ifstream f(path_, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(f), {});
    }
    void write(const std::string& bytes) const {
        std::ofstream f(path_, std::ios::binary | std::ios::trunc);
        f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    // Rewrites the JSON with `edit` applied and a correct checksum, so validation (not the
    // checksum) must catch it.
    template <typename Fn>
    void rewrite_json(Fn edit) {
        compiler::CompiledModel m = model_;
        edit(m);
        ASSERT_TRUE(compiler::save_compiled_model(path_, m).ok());
    }
    void expect_refused(const std::string& needle, StatusCode code = StatusCode::PARSE_ERROR) {
        auto m = compiler::load_compiled_model(path_);
        ASSERT_FALSE(m.ok());
        EXPECT_EQ(m.status().code(), code) << m.status().to_string();
        EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
        EXPECT_NE(m.status().message().find(path_), std::string::npos) << m.status().message();
    }
    CompiledModel model_;
    test::TempDir dir_;
    std::string path_;
};

TEST_F(ModelFile, RoundTripKeepsEverything) {
    auto m = compiler::load_compiled_model(path_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(compiler::compiled_model_json(*m), compiler::compiled_model_json(model_));
    ASSERT_EQ(m->weights.elements(), model_.weights.elements());
    EXPECT_EQ(std::memcmp(m->weights.data(), model_.weights.data(), model_.weights.bytes()), 0);
    // And it runs to the same result.
    const std::vector<HostTensor> in{test::random_host_f32({1, 3, 12, 10}, 11, 0.0f, 1.0f)};
    auto dev = test::make_device();
    auto a = executor::Session::create(*executor::LoadedModel::load(*dev, std::make_shared<CompiledModel>(model_)));
    auto b = executor::Session::create(*executor::LoadedModel::load(*dev, std::make_shared<CompiledModel>(*m)));
    ASSERT_TRUE(a.ok() && b.ok());
    auto ya = (*a)->run(in), yb = (*b)->run(in);
    ASSERT_TRUE(ya.ok() && yb.ok());
    EXPECT_EQ(std::memcmp((*ya)[0].data(), (*yb)[0].data(), (*ya)[0].bytes()), 0);
}

TEST_F(ModelFile, FlippedWeightByteFailsTheChecksum) {
    std::string bytes = read();
    bytes[bytes.size() - 5] ^= 0x40;
    write(bytes);
    expect_refused("checksum mismatch");
}

TEST_F(ModelFile, TruncatedFileIsRefused) {
    std::string bytes = read();
    write(bytes.substr(0, bytes.size() - 100));
    expect_refused("disagree with the file size");
    write(bytes.substr(0, 20));
    expect_refused("too short");
}

TEST_F(ModelFile, BadMagicAndVersionAreRefused) {
    std::string bytes = read();
    bytes[0] = 'X';
    write(bytes);
    expect_refused("bad magic");
    bytes = read();
    bytes[0] = 'L';
    bytes[8] = 99;
    write(bytes);
    expect_refused("format version 99", StatusCode::FAILED_PRECONDITION);
}

// Format version 3 added the descriptor: it round-trips; version-2 files (none) still load; a
// version-2 file with one, or a descriptor with a bad field, is refused naming it.
TEST_F(ModelFile, DescriptorRoundTripsAndVersion2FilesStillLoad) {
    compiler::ModelDescriptor d;
    d.family = compiler::ModelFamily::REAL_CUGAN;
    d.scale = 2;
    d.prepad = 18;
    d.border = compiler::BorderMode::REFLECT;
    d.align = 2;
    d.described_by = "recognised: test";
    d.applied = true;
    rewrite_json([&](CompiledModel& m) { m.descriptor = d; });
    auto back = compiler::load_compiled_model(path_);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_TRUE(back->descriptor.has_value());
    EXPECT_EQ(*back->descriptor, d);
    std::string bytes = read();
    ASSERT_EQ(bytes[8], 3);
    bytes[8] = 2;  // the header is outside the checksum
    write(bytes);
    expect_refused("a version-2 file with a descriptor");
    rewrite_json([](CompiledModel& m) { m.descriptor.reset(); });
    bytes = read();
    bytes[8] = 2;
    write(bytes);
    auto v2 = compiler::load_compiled_model(path_);
    ASSERT_TRUE(v2.ok()) << v2.status().to_string();
    EXPECT_FALSE(v2->descriptor.has_value());
    bytes[8] = 1;
    write(bytes);
    expect_refused("format version 1, this loomc reads versions 2 to 4", StatusCode::FAILED_PRECONDITION);
    d.align = 65;
    rewrite_json([&](CompiledModel& m) { m.descriptor = d; });
    expect_refused("field 'align': 65 is out of range");
}

TEST_F(ModelFile, TensorOutsideItsBlobIsRefused) {
    rewrite_json([](CompiledModel& m) {
        for (auto& t : m.tensors)
            if (t.storage == compiler::Storage::WEIGHTS) {
                t.offset = m.weights.elements();
                break;
            }
    });
    expect_refused("leaves its weights");
}

TEST_F(ModelFile, OverlappingLiveTensorsAreRefused) {
    rewrite_json([](CompiledModel& m) {
        // Put a step's output on its own input: both are live at that step.
        for (auto it = m.steps.rbegin(); it != m.steps.rend(); ++it) {
            if (it->alias || it->inputs.empty() || it->inputs[0] < 0) continue;
            auto& in = m.tensors[static_cast<size_t>(it->inputs[0])];
            if (in.storage != compiler::Storage::ARENA) continue;
            m.tensors[static_cast<size_t>(it->outputs[0])].offset = in.offset;
            break;
        }
    });
    expect_refused("memory plan");
}

TEST_F(ModelFile, UnknownKernelIsRefused) {
    rewrite_json([](CompiledModel& m) { m.steps[0].kernel = "warp_drive"; });
    expect_refused("unknown kernel 'warp_drive'");
}

TEST_F(ModelFile, ReadBeforeWriteIsRefused) {
    rewrite_json([](CompiledModel& m) { std::swap(m.steps[0], m.steps[1]); });
    expect_refused("before it is written");
}

TEST_F(ModelFile, OtherCompilerVersionIsRefusedAtLoadOntoADevice) {
    CompiledModel m = model_;
    m.compiler_version = "0.0.1";
    EXPECT_EQ(compiler::check_compatible(m, test::preset_spec("edge"), "m.loom").code(),
              StatusCode::FAILED_PRECONDITION);
    EXPECT_TRUE(compiler::check_compatible(model_, test::preset_spec("edge"), "m.loom").ok());
}

}  // namespace
}  // namespace loom::test_executor
