// Layout assignment (compiler/passes.cpp, assign_layouts) and the trans_data kernel: where
// TransData goes, which values live in NC1HWC0, cancelled pairs, padded device bytes, and that
// the values computed never change.
#include <gtest/gtest.h>

#include <cstring>

#include "common/thread_pool.hpp"
#include "compiler/compile.hpp"
#include "compiler/interpret.hpp"
#include "compiler/ops.hpp"
#include "compiler/passes.hpp"
#include "tests/test_util.hpp"

namespace loom::test_layout {  // apart from the rest of its unity batch
namespace {

using compiler::Graph;
using compiler::Layout;
using device::KernelAttrs;

const KernelAttrs kPad1{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};

int count_op(const Graph& g, const std::string& op) {
    int n = 0;
    for (const auto& node : g.nodes) n += node.op == op;
    return n;
}

Layout layout_of(const Graph& g, const std::string& name) { return g.value(g.find_value(name)).layout; }

// x -> conv -> relu -> conv -> flatten-free reshape to itself -> conv -> output
Graph chain() {
    test::GraphBuilder b;
    b.input("x", {1, 3, 6, 5});
    b.random_f32("w0", {8, 3, 3, 3}, 1);
    b.random_f32("w1", {8, 8, 3, 3}, 2);
    b.random_f32("w2", {4, 8, 3, 3}, 3);
    b.node("Conv", {"x", "w0"}, {"c0"}, kPad1);
    b.node("Relu", {"c0"}, {"r0"});
    b.node("Conv", {"r0", "w1"}, {"c1"}, kPad1);
    b.constant("same", test::host_i64({1, 8, 6, 5}));
    b.node("Reshape", {"c1", "same"}, {"rs"});
    b.node("Conv", {"rs", "w2"}, {"y"}, kPad1);
    b.output("y");
    b.g.source = "chain";
    EXPECT_TRUE(compiler::infer_shapes(b.g).ok());
    return b.g;
}

TEST(Layout, CubeOpsInNc1hwc0AgnosticOpsFollowOthersInNd) {
    Graph g = chain();
    const auto in = std::vector<compiler::HostTensor>{test::random_host_f32({1, 3, 6, 5}, 5)};
    const auto before = compiler::interpret(g, in);
    ASSERT_TRUE(before.ok());
    int cancelled = -1;
    const int inserted = compiler::assign_layouts(g, &cancelled);
    ASSERT_TRUE(g.validate().ok());
    // x -> 5HD; c1 -> ND for the Reshape; rs -> 5HD for the last conv; its output back to ND.
    EXPECT_EQ(inserted, 4);
    EXPECT_EQ(cancelled, 0);
    EXPECT_EQ(count_op(g, "TransData"), 4);
    EXPECT_EQ(layout_of(g, "x"), Layout::ND);
    EXPECT_EQ(layout_of(g, "c0"), Layout::NC1HWC0);
    EXPECT_EQ(layout_of(g, "r0"), Layout::NC1HWC0);  // Relu between convs: no TransData
    EXPECT_EQ(layout_of(g, "c1"), Layout::NC1HWC0);
    EXPECT_EQ(layout_of(g, "rs"), Layout::ND);
    // The graph output keeps its name, in ND; the conv writes a 5HD copy.
    EXPECT_EQ(g.value(g.outputs[0]).name, "y");
    EXPECT_EQ(g.value(g.outputs[0]).layout, Layout::ND);
    // Values are unchanged: TransData moves layout, not data.
    const auto after = compiler::interpret(g, in);
    ASSERT_TRUE(after.ok()) << after.status().to_string();
    ASSERT_EQ((*after)[0].bytes(), (*before)[0].bytes());
    EXPECT_EQ(std::memcmp((*after)[0].data(), (*before)[0].data(), (*before)[0].bytes()), 0);
    // A second run has nothing to do.
    EXPECT_EQ(compiler::assign_layouts(g, &cancelled), 0);
    EXPECT_EQ(cancelled, 0);
}

// A graph output or input preset to NC1HWC0 is handed between models on the device: the output
// stays as its producer wrote it, the input is read as it is; no TransData at either edge.
TEST(Layout, PresetGraphEdgesKeepTheDeviceLayout) {
    test::GraphBuilder b;
    b.input("x", {1, 4, 5, 5});
    b.random_f32("w", {8, 4, 3, 3}, 1);
    b.node("Conv", {"x", "w"}, {"c"}, kPad1);
    b.node("Relu", {"c"}, {"r"});
    b.output("r");
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    {
        Graph g = b.g;  // the default: x into 5HD, r back to ND
        EXPECT_EQ(compiler::assign_layouts(g), 2);
    }
    Graph g = b.g;
    g.value(g.find_value("x")).layout = Layout::NC1HWC0;
    g.value(g.find_value("r")).layout = Layout::NC1HWC0;
    EXPECT_EQ(compiler::assign_layouts(g), 0);
    EXPECT_EQ(count_op(g, "TransData"), 0);
    EXPECT_EQ(g.value(g.outputs[0]).name, "r");
    EXPECT_EQ(g.value(g.outputs[0]).layout, Layout::NC1HWC0);
    // An output asked for NC1HWC0 whose producer writes ND stays ND (whichever its producer wrote).
    test::GraphBuilder nd;
    nd.input("x", {1, 4, 5, 5});
    nd.node("Softmax", {"x"}, {"s"}, {{"axis", int64_t{1}}});
    nd.output("s");
    ASSERT_TRUE(compiler::infer_shapes(nd.g).ok());
    nd.g.value(nd.g.find_value("s")).layout = Layout::NC1HWC0;
    EXPECT_EQ(compiler::assign_layouts(nd.g), 0);
    EXPECT_EQ(nd.g.value(nd.g.outputs[0]).layout, Layout::ND);
}

TEST(Layout, TransDataThatUndoesAnotherIsCancelled) {
    test::GraphBuilder b;
    b.input("x", {1, 4, 5, 5});
    b.random_f32("w", {4, 4, 3, 3}, 1);
    b.node("Conv", {"x", "w"}, {"c"}, kPad1);
    b.node("TransData", {"c"}, {"c_nd"}, {{"src", std::string("NC1HWC0")}, {"dst", std::string("NCHW")}});
    b.node("TransData", {"c_nd"}, {"c_5hd"}, {{"src", std::string("NCHW")}, {"dst", std::string("NC1HWC0")}});
    b.node("Relu", {"c_5hd"}, {"r"});
    b.output("r");
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    Graph g = b.g;
    int cancelled = 0;
    compiler::assign_layouts(g, &cancelled);
    EXPECT_EQ(cancelled, 1);
    compiler::eliminate_dead_code(g);  // the first TransData now feeds nothing
    // x -> 5HD, the conv, the relu reading the conv directly, and r back to ND.
    EXPECT_EQ(count_op(g, "TransData"), 2);
    EXPECT_EQ(g.value(g.nodes[2].inputs[0]).name, "c");
}

TEST(Layout, BroadcastOperandsKeepAgnosticOpsInNd) {
    // Add of a conv output and a [1, 1, H, W] map: not a same-shaped pair, so the Add runs in ND.
    test::GraphBuilder b;
    b.input("x", {1, 4, 5, 5});
    b.input("m", {1, 1, 5, 5});
    b.random_f32("w", {4, 4, 3, 3}, 1);
    b.node("Conv", {"x", "w"}, {"c"}, kPad1);
    b.node("Add", {"c", "m"}, {"y"});
    b.output("y");
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    Graph g = b.g;
    EXPECT_EQ(compiler::assign_layouts(g), 2);  // x -> 5HD, c -> ND
    EXPECT_EQ(layout_of(g, "y"), Layout::ND);
}

// Runs g before and after assign_layouts on the same input: the values never change.
void expect_same_values(const Graph& before, const Graph& after, const std::vector<int64_t>& in_shape) {
    const auto in = std::vector<compiler::HostTensor>{test::random_host_f32(in_shape, 9)};
    const auto a = compiler::interpret(before, in), b = compiler::interpret(after, in);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ((*a)[0].bytes(), (*b)[0].bytes());
    EXPECT_EQ(std::memcmp((*a)[0].data(), (*b)[0].data(), (*a)[0].bytes()), 0);
}

TEST(Layout, SqueezeExcitationAndCropsStayInNc1hwc0) {
    // Real-CUGAN's SE block and crop: conv -> GlobalAveragePool -> Flatten -> Gemm -> Sigmoid ->
    // Unsqueeze -> Mul(conv, scale) -> Slice (H and W) -> conv. The pool reads the conv's 5HD map
    // and writes its [1, C, 1, 1] vector in ND; the Mul broadcasts that vector over the 5HD map;
    // the crop cuts the 5HD planes. Only the graph's input and output are converted.
    test::GraphBuilder b;
    b.input("x", {1, 3, 12, 10});
    b.random_f32("w0", {32, 3, 3, 3}, 1);
    b.random_f32("fc", {32, 32}, 2);
    b.random_f32("w1", {4, 32, 3, 3}, 3);
    b.node("Conv", {"x", "w0"}, {"c0"}, kPad1);
    b.node("GlobalAveragePool", {"c0"}, {"gap"});
    b.node("Flatten", {"gap"}, {"flat"});
    b.node("Gemm", {"flat", "fc"}, {"fc_out"}, {{"transB", int64_t{1}}});
    b.node("Sigmoid", {"fc_out"}, {"s"});
    b.constant("axes", test::host_i64({2, 3}));
    b.node("Unsqueeze", {"s", "axes"}, {"scale"});
    b.node("Mul", {"c0", "scale"}, {"se"});
    b.constant("starts", test::host_i64({2, 1}));
    b.constant("ends", test::host_i64({10, 9}));
    b.constant("crop_axes", test::host_i64({2, 3}));
    b.node("Slice", {"se", "starts", "ends", "crop_axes"}, {"crop"});
    b.node("Conv", {"crop", "w1"}, {"y"}, kPad1);
    b.output("y");
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    Graph g = b.g;
    EXPECT_EQ(compiler::assign_layouts(g), 2);  // x -> 5HD and y back
    ASSERT_TRUE(g.validate().ok());
    EXPECT_EQ(layout_of(g, "c0"), Layout::NC1HWC0);
    EXPECT_EQ(layout_of(g, "gap"), Layout::ND);
    EXPECT_EQ(layout_of(g, "scale"), Layout::ND);
    EXPECT_EQ(layout_of(g, "se"), Layout::NC1HWC0);
    EXPECT_EQ(layout_of(g, "crop"), Layout::NC1HWC0);
    expect_same_values(b.g, g, {1, 3, 12, 10});
}

TEST(Layout, SpatialOpsThatCutChannelsRunInNd) {
    // A Slice over the channels (and a Pad of them) re-blocks C1 x C0: both read ND.
    test::GraphBuilder b;
    b.input("x", {1, 3, 6, 5});
    b.random_f32("w0", {32, 3, 3, 3}, 1);
    b.node("Conv", {"x", "w0"}, {"c0"}, kPad1);
    b.constant("starts", test::host_i64({0}));
    b.constant("ends", test::host_i64({8}));
    b.constant("axes", test::host_i64({1}));
    b.node("Slice", {"c0", "starts", "ends", "axes"}, {"half"});
    b.constant("pads", test::host_i64({0, 1, 1, 1, 0, 1, 1, 1}));
    b.node("Pad", {"half", "pads"}, {"y"});
    b.output("y");
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    Graph g = b.g;
    EXPECT_EQ(compiler::assign_layouts(g), 2);  // x -> 5HD, c0 -> ND for the channel slice
    EXPECT_EQ(layout_of(g, "half"), Layout::ND);
    EXPECT_EQ(layout_of(g, "y"), Layout::ND);
    expect_same_values(b.g, g, {1, 3, 6, 5});
}

TEST(Layout, MemoryPlanCountsPaddedChannels) {
    // 3 input channels occupy 16 in NC1HWC0: the 5HD copy of x is 16/3 of x's bytes.
    auto m = compiler::compile_graph(chain(), {}, test::preset_spec("edge"));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    int trans = 0;
    for (const auto& s : m->steps) trans += s.kernel == "trans_data";
    EXPECT_EQ(trans, 4);
    bool found = false;
    for (const auto& t : m->tensors)
        if (t.layout == Layout::NC1HWC0 && t.dims == std::vector<int64_t>{1, 3, 6, 5}) {
            EXPECT_EQ(t.bytes, 3 * 6 * 5 * 4);
            EXPECT_EQ(t.device_bytes(), 16 * 6 * 5 * 4);
            found = true;
        }
    EXPECT_TRUE(found);
}

TEST(TransDataKernel, CopiesValuesAndCostsThePaddedLayout) {
    const auto& k = test::registered_kernel("trans_data");
    std::vector<float> x(2 * 3 * 4 * 5), y(x.size(), 0.0f);
    std::mt19937 rng(7);
    x = test::random_floats(rng, x.size());
    device::KernelLaunch l;
    l.inputs = {test::ref(x, {2, 3, 4, 5})};
    l.outputs = {test::ref(y, {2, 3, 4, 5})};
    l.attrs = {{"src", std::string("NCHW")}, {"dst", std::string("NC1HWC0")}};
    ThreadPool pool(2);
    ASSERT_TRUE(k.run(l, pool).ok());
    EXPECT_EQ(x, y);
    // 3 channels pad to 16 and 16 channels do not: per real element, 3 channels cost more.
    std::vector<float> a(1 * 3 * 64 * 64), b(1 * 16 * 64 * 64);
    device::KernelLaunch la = l, lb = l;
    la.inputs = {test::ref(a, {1, 3, 64, 64})};
    la.outputs = {test::ref(a, {1, 3, 64, 64})};
    lb.inputs = {test::ref(b, {1, 16, 64, 64})};
    lb.outputs = {test::ref(b, {1, 16, 64, 64})};
    const double per_a = test::cost_ok(k, la, "edge").total / 3.0, per_b = test::cost_ok(k, lb, "edge").total / 16.0;
    EXPECT_GT(per_a, per_b);
    // Errors name the problem.
    l.attrs = {{"src", std::string("NCHW")}, {"dst", std::string("NCHW")}};
    test::expect_rejected(k, l, StatusCode::INVALID_ARGUMENT, "must be NCHW and NC1HWC0");
    l.attrs = {{"src", std::string("NCHW")}, {"dst", std::string("NC1HWC0")}};
    l.inputs = {test::ref(x, {6, 4, 5})};
    l.outputs = {test::ref(y, {6, 4, 5})};
    test::expect_rejected(k, l, StatusCode::INVALID_ARGUMENT, "must be 4-D");
}

}  // namespace
}  // namespace loom::test_layout
