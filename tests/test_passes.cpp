// Graph passes (compiler/passes.cpp): one test per pass and pattern, each checking the count the
// pass reports, the node counts before and after, Graph::validate(), and numerical equivalence:
// interpret() runs the graph before and after the pass on the same seeded random inputs
// (uniform in [-1, 1), never all zero) and the outputs must agree within
//   |after - before| <= rel * (|before| + max |before|)
// with rel = 1e-5 for f32 rewrites (folded weights round differently), 0 where nothing is
// recomputed, and 4e-3 for convert_to_f16 against fp32 (f16 inputs, weights and outputs: a few
// 2^-11 roundings of sums of up to 72 products).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/graph.hpp"
#include "compiler/interpret.hpp"
#include "compiler/ops.hpp"
#include "compiler/passes.hpp"
#include "test_util.hpp"

namespace test_passes {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::Result;
using loom::Status;
using loom::compiler::Graph;
using loom::compiler::HostTensor;
using loom::compiler::infer_shapes;
using loom::compiler::interpret;
using loom::compiler::Node;
using loom::compiler::shape_str;
using loom::device::DType;
using loom::test::GraphBuilder;
using loom::test::host_f32;
using loom::test::host_i64;

using ints = std::vector<int64_t>;

constexpr double kRelF32 = 1e-5;
constexpr double kRelF16 = 4e-3;

// One seeded random f32 tensor per graph input, in [-1, 1).
std::vector<HostTensor> random_inputs(const Graph& g, uint32_t seed) {
    std::vector<HostTensor> in;
    for (int id : g.inputs) {
        const auto& v = g.value(id);
        EXPECT_EQ(v.dtype, DType::F32) << v.name;
        in.push_back(loom::test::random_host_f32(loom::compiler::shape_dims(v.shape), seed++));
    }
    return in;
}

// Runs `g` on `inputs`; fails the test (returning nothing) on error.
std::vector<HostTensor> run(const Graph& g, const std::vector<HostTensor>& inputs) {
    auto r = interpret(g, inputs);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : std::vector<HostTensor>{};
}

// Checks `got` against `want` within rel * (|want| + max |want|) per element (see the file
// comment) and returns the largest difference seen. `want` must not be all zero.
double expect_close(const std::vector<HostTensor>& got, const std::vector<HostTensor>& want, double rel) {
    double worst = 0;
    EXPECT_EQ(got.size(), want.size());
    for (size_t t = 0; t < std::min(got.size(), want.size()); ++t) {
        EXPECT_EQ(got[t].dtype(), want[t].dtype()) << "output " << t;
        EXPECT_EQ(got[t].dims(), want[t].dims()) << "output " << t;
        const auto a = got[t].to_doubles(), b = want[t].to_doubles();
        if (a.size() != b.size()) continue;
        double max_b = 0;
        for (double v : b) max_b = std::max(max_b, std::abs(v));
        EXPECT_GT(max_b, 0.0) << "output " << t << " is all zero: the comparison would prove nothing";
        int bad = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            const double d = std::abs(a[i] - b[i]);
            worst = std::max(worst, d);
            if (!(d <= rel * (std::abs(b[i]) + max_b)) && ++bad <= 5)
                ADD_FAILURE() << "output " << t << "[" << i << "] = " << a[i] << ", want " << b[i];
        }
        EXPECT_EQ(bad, 0) << "output " << t;
    }
    return worst;
}

int changed_of(int r) { return r; }
int changed_of(const Result<int>& r) {
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : -1;
}

// Infers `b`'s graph, applies `pass` and checks what the file comment says: the reported
// count, the node counts, validate() and the outputs within `rel`. Returns the graph after.
template <typename Pass>
Graph check_pass(GraphBuilder& b, Pass pass, int changed, size_t nodes_before, size_t nodes_after,
                 double rel = kRelF32, uint32_t seed = 7) {
    Graph g = b.g;
    const Status inferred = infer_shapes(g);
    EXPECT_TRUE(inferred.ok()) << inferred.to_string();
    EXPECT_TRUE(g.validate().ok());
    EXPECT_EQ(g.nodes.size(), nodes_before);
    const auto inputs = random_inputs(g, seed);
    const auto before = run(g, inputs);
    EXPECT_EQ(changed_of(pass(g)), changed);
    EXPECT_EQ(g.nodes.size(), nodes_after);
    const Status valid = g.validate();
    EXPECT_TRUE(valid.ok()) << valid.to_string();
    expect_close(run(g, inputs), before, rel);
    return g;
}

// Returns the only node of op `op` in `g` (nullptr, failing the test, when there is not one).
const Node* only(const Graph& g, const std::string& op) {
    const Node* found = nullptr;
    int count = 0;
    for (const Node& n : g.nodes)
        if (n.op == op) found = &n, ++count;
    EXPECT_EQ(count, 1) << op;
    return count == 1 ? found : nullptr;
}

std::string attr_string(const Node& n, const char* name) {
    auto r = n.attrs.get_string(name);
    return r.ok() ? *r : std::string("<no string attribute>");
}

// x [1, 4, 6, 6] -> Conv(w [6, 4, 3, 3], bias, pads 1) -> "y".
void add_conv(GraphBuilder& b, const std::string& x = "x", const std::string& y = "y", uint32_t seed = 1) {
    if (b.g.find_value(x) < 0) b.input(x, {1, 4, 6, 6});
    b.random_f32(y + ".w", {6, 4, 3, 3}, seed);
    b.random_f32(y + ".b", {6}, seed + 100);
    b.node("Conv", {x, y + ".w", y + ".b"}, {y}, {{"pads", ints{1, 1, 1, 1}}});
}

TEST(Passes, FoldConstantsShapeChainToAConstantShape) {
    GraphBuilder b;
    b.input("x", {1, 3, 4, 4});
    b.constant("zero", host_i64({0}, true));
    b.constant("axes", host_i64({0}));
    b.constant("minus_one", host_i64({-1}));
    b.node("Shape", {"x"}, {"shape"});
    b.node("Gather", {"shape", "zero"}, {"batch"});
    b.node("Unsqueeze", {"batch", "axes"}, {"batch1"});
    b.node("Concat", {"batch1", "minus_one"}, {"target"}, {{"axis", 0}});
    b.node("Reshape", {"x", "target"}, {"y"});
    b.output("y");
    Graph g = b.g;
    ASSERT_TRUE(infer_shapes(g).ok());
    // The target is not a constant yet: the Reshape's dims are symbols, so interpret() cannot run
    // the graph before the pass; a reshape keeps the data, so the reference is the input.
    EXPECT_FALSE(loom::compiler::shape_static(g.value(g.find_value("y")).shape));
    auto folded = loom::compiler::fold_constants(g);
    ASSERT_TRUE(folded.ok()) << folded.status().to_string();
    EXPECT_EQ(*folded, 4);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].op, "Reshape");
    ASSERT_TRUE(g.validate().ok());
    const auto& target = g.value(g.find_value("target"));
    ASSERT_TRUE(target.is_constant());
    EXPECT_EQ(*target.data->to_ints(), (ints{1, -1}));
    EXPECT_EQ(shape_str(g.value(g.find_value("y")).shape), "1x48");  // the Reshape sees the folded shape
    const auto inputs = random_inputs(g, 3);
    const auto out = run(g, inputs);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].dims(), (ints{1, 48}));
    EXPECT_EQ(std::memcmp(out[0].data(), inputs[0].data(), inputs[0].bytes()), 0);
}

TEST(Passes, FoldConstantsComputesWeights) {
    GraphBuilder b;
    b.input("x", {1, 4, 6, 6});
    b.random_f32("w_raw", {6, 4, 3, 3}, 1);
    b.constant("half", host_f32({}, {0.5f}));
    b.node("Mul", {"w_raw", "half"}, {"w"});
    b.node("Conv", {"x", "w"}, {"y"});
    b.output("y");
    const Graph g = check_pass(b, loom::compiler::fold_constants, 1, 2, 1, 0.0);
    EXPECT_TRUE(g.value(g.find_value("w")).is_constant());
}

TEST(Passes, DeadCodeRemovesAnUnusedBranch) {
    GraphBuilder b;
    b.input("x", {2, 8});
    b.node("Relu", {"x"}, {"y"});
    b.node("Sigmoid", {"x"}, {"unused"});
    b.node("Tanh", {"unused"}, {"unused2"});
    b.output("y");
    const Graph g = check_pass(b, loom::compiler::eliminate_dead_code, 2, 3, 1, 0.0);
    EXPECT_EQ(g.nodes[0].op, "Relu");
}

TEST(Passes, CommonSubexpressionsMergeIdenticalNodes) {
    GraphBuilder b;
    b.input("x", {2, 8});
    b.node("Relu", {"x"}, {"a"});
    b.node("Relu", {"x"}, {"a2"});
    b.node("Add", {"a", "a2"}, {"y"});
    b.node("LeakyRelu", {"x"}, {"l1"}, {{"alpha", 0.1}});
    b.node("LeakyRelu", {"x"}, {"l2"}, {{"alpha", 0.2}});  // other attributes: kept
    b.node("Sub", {"l1", "l2"}, {"z"});
    b.output("y");
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::eliminate_common_subexpressions, 1, 6, 5, 0.0);
    const Node* add = only(g, "Add");
    ASSERT_NE(add, nullptr);
    EXPECT_EQ(add->inputs[0], add->inputs[1]);  // both read the one Relu left
}

TEST(Passes, CommonSubexpressionsMergeEqualConstants) {
    GraphBuilder b;
    b.input("x", {2, 3});
    b.constant("c1", host_f32({3}, {0.5f, 2.0f, -1.0f}));
    b.constant("c2", host_f32({3}, {0.5f, 2.0f, -1.0f}));
    b.constant("c3", host_f32({3}, {0.5f, 2.0f, -1.5f}));
    b.node("Mul", {"x", "c1"}, {"m1"});
    b.node("Mul", {"x", "c2"}, {"m2"});
    b.node("Mul", {"x", "c3"}, {"m3"});
    b.node("Add", {"m1", "m2"}, {"s"});
    b.node("Add", {"s", "m3"}, {"y"});
    b.output("y");
    const Graph g = check_pass(b, loom::compiler::eliminate_common_subexpressions, 1, 5, 4, 0.0);
    int muls = 0;
    for (const Node& n : g.nodes)
        if (n.op == "Mul") {
            ++muls;
            EXPECT_NE(g.value(n.inputs[1]).name, "c2");
        }
    EXPECT_EQ(muls, 2);
}

TEST(Passes, ConvBatchNormFolded) {
    GraphBuilder b;
    add_conv(b);
    b.random_f32("gamma", {6}, 2, 0.5f, 1.5f);
    b.random_f32("beta", {6}, 3);
    b.random_f32("mean", {6}, 4);
    b.random_f32("var", {6}, 5, 0.25f, 2.0f);
    b.node("BatchNormalization", {"y", "gamma", "beta", "mean", "var"}, {"bn"}, {{"epsilon", 1e-3}});
    b.output("bn");
    const Graph g = check_pass(b, loom::compiler::fuse_conv_affine, 1, 2, 1);
    EXPECT_EQ(g.nodes[0].op, "Conv");
    EXPECT_EQ(g.nodes[0].fused, std::vector<std::string>{"bn"});
    EXPECT_NE(g.value(g.nodes[0].inputs[1]).name, "y.w");  // new weights: the original may be shared
}

TEST(Passes, GroupedConvTransposeBatchNormFolded) {
    // W is [C, K/g, kh, kw]: output channel k = group * K/g + kk; the fold must scale by that.
    GraphBuilder b;
    b.input("x", {1, 4, 5, 5});
    b.random_f32("w", {4, 3, 3, 3}, 1);  // 2 groups: K = 2 * 3 = 6
    b.random_f32("bias", {6}, 6);
    b.node("ConvTranspose", {"x", "w", "bias"}, {"y"}, {{"group", int64_t{2}}, {"strides", std::vector<int64_t>{2, 2}}});
    b.random_f32("gamma", {6}, 2, 0.5f, 1.5f);
    b.random_f32("beta", {6}, 3);
    b.random_f32("mean", {6}, 4);
    b.random_f32("var", {6}, 5, 0.25f, 2.0f);
    b.node("BatchNormalization", {"y", "gamma", "beta", "mean", "var"}, {"bn"});
    b.output("bn");
    const Graph g = check_pass(b, loom::compiler::fuse_conv_affine, 1, 2, 1);
    EXPECT_EQ(g.nodes[0].op, "ConvTranspose");
    EXPECT_EQ(g.nodes[0].fused, std::vector<std::string>{"bn"});
}

TEST(Passes, GemmBatchNormAndPerColumnMulFolded) {
    // transB: B is [N, K], so column n of the output is row n of B; beta scales C.
    GraphBuilder b;
    b.input("a", {3, 5});
    b.random_f32("bmat", {4, 5}, 1);
    b.random_f32("c", {4}, 2);
    b.node("Gemm", {"a", "bmat", "c"}, {"y"}, {{"transB", int64_t{1}}, {"beta", 0.5}, {"alpha", 1.5}});
    b.random_f32("gamma", {4}, 3, 0.5f, 1.5f);
    b.random_f32("beta", {4}, 4);
    b.random_f32("mean", {4}, 5);
    b.random_f32("var", {4}, 6, 0.25f, 2.0f);
    b.node("BatchNormalization", {"y", "gamma", "beta", "mean", "var"}, {"bn"});
    b.random_f32("colscale", {1, 4}, 7);
    b.node("Mul", {"bn", "colscale"}, {"z"});
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_conv_affine, 2, 3, 1);
    EXPECT_EQ(g.nodes[0].op, "Gemm");
    EXPECT_DOUBLE_EQ(*g.nodes[0].attrs.get_float("beta"), 1.0);
}

TEST(Passes, GemmWithFullCIsNotFolded) {
    GraphBuilder b;
    b.input("a", {3, 5});
    b.random_f32("bmat", {5, 4}, 1);
    b.random_f32("c", {3, 4}, 2);  // one value per element: no per-column bias
    b.node("Gemm", {"a", "bmat", "c"}, {"y"});
    b.random_f32("colscale", {4}, 7);
    b.node("Mul", {"y", "colscale"}, {"z"});
    b.output("z");
    check_pass(b, loom::compiler::fuse_conv_affine, 0, 2, 2);
}

TEST(Passes, ConvPerChannelMulAddFolded) {
    GraphBuilder b;
    b.input("x", {1, 4, 6, 6});
    b.random_f32("w", {6, 4, 3, 3}, 1);
    b.node("Conv", {"x", "w"}, {"y"});  // no bias: the fold adds one
    b.random_f32("scale", {6, 1, 1}, 2);
    b.random_f32("shift", {1, 6, 1, 1}, 3);
    b.node("Mul", {"scale", "y"}, {"scaled"});
    b.node("Add", {"scaled", "shift"}, {"z"});
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_conv_affine, 2, 3, 1);
    ASSERT_EQ(g.nodes[0].inputs.size(), 3u);
    EXPECT_TRUE(g.value(g.nodes[0].inputs[2]).is_constant());
}

TEST(Passes, ConvAffineLeavesNonChannelConstants) {
    // Y is 1x6x6x6, so each constant below has 6 values (or one per element) but lines them up
    // with the width, not the channels: none may be folded into the weights.
    GraphBuilder b;
    b.input("x", {1, 4, 6, 6});
    const std::vector<std::vector<int64_t>> shapes = {{1, 6, 6, 6}, {6}, {1, 1, 1, 6}, {1, 6}};
    for (size_t i = 0; i < shapes.size(); ++i) {
        const std::string y = fmt::format("y{}", i), c = fmt::format("c{}", i), z = fmt::format("z{}", i);
        add_conv(b, "x", y, static_cast<uint32_t>(10 * i + 1));
        b.random_f32(c, shapes[i], static_cast<uint32_t>(10 * i + 2));
        b.node(i % 2 ? "Add" : "Mul", {y, c}, {z});
        b.output(z);
    }
    check_pass(b, loom::compiler::fuse_conv_affine, 0, 8, 8);
}

// Builds x -> Conv -> `act` (with `extra` inputs) -> "z", fuses epilogues and checks the
// single Conv left carries activation `name`; returns the graph.
Graph conv_activation(GraphBuilder& b, const std::string& act, const std::vector<std::string>& extra,
                      loom::device::KernelAttrs attrs, const std::string& name) {
    add_conv(b);
    std::vector<std::string> inputs{"y"};
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    b.node(act, inputs, {"z"}, std::move(attrs));
    b.output("z");
    Graph g = check_pass(b, loom::compiler::fuse_epilogues, 1, 2, 1);
    if (g.nodes.size() == 1) {
        EXPECT_EQ(g.nodes[0].op, "Conv");
        EXPECT_EQ(attr_string(g.nodes[0], "activation"), name);
        EXPECT_EQ(g.nodes[0].fused, std::vector<std::string>{"z"});
    }
    return g;
}

TEST(Passes, ConvReluFused) {
    GraphBuilder b;
    conv_activation(b, "Relu", {}, {}, "relu");
}

TEST(Passes, ConvLeakyReluFused) {
    GraphBuilder b;
    const Graph g = conv_activation(b, "LeakyRelu", {}, {{"alpha", 0.2}}, "leaky_relu");
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_DOUBLE_EQ(*g.nodes[0].attrs.get_float("alpha"), 0.2);
}

TEST(Passes, ConvPReluPerChannelFused) {
    GraphBuilder b;
    b.random_f32("slope", {6, 1, 1}, 9, -0.5f, 0.5f);
    const Graph g = conv_activation(b, "PRelu", {"slope"}, {}, "prelu");
    ASSERT_EQ(g.nodes.size(), 1u);
    ASSERT_EQ(g.nodes[0].inputs.size(), 5u);
    EXPECT_EQ(g.value(g.nodes[0].inputs[4]).name, "slope");
}

TEST(Passes, ConvClipFused) {
    GraphBuilder b;
    b.constant("lo", host_f32({}, {-0.25f}));
    b.constant("hi", host_f32({}, {0.5f}));
    const Graph g = conv_activation(b, "Clip", {"lo", "hi"}, {}, "clip");
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_DOUBLE_EQ(*g.nodes[0].attrs.get_float("min"), -0.25);
    EXPECT_DOUBLE_EQ(*g.nodes[0].attrs.get_float("max"), 0.5);

    GraphBuilder old;  // opset 6: min and max attributes
    conv_activation(old, "Clip", {}, {{"min", 0.0}, {"max", 0.75}}, "clip");
}

TEST(Passes, ConvResidualBeforeActivation) {
    GraphBuilder b;
    add_conv(b);
    b.input("r", {1, 6, 6, 6});
    b.node("Add", {"y", "r"}, {"sum"});
    b.node("Relu", {"sum"}, {"z"});
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_epilogues, 2, 3, 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    const Node& n = g.nodes[0];
    ASSERT_EQ(n.inputs.size(), 5u);
    EXPECT_EQ(g.value(n.inputs[3]).name, "r");
    EXPECT_EQ(*n.attrs.get_int("residual_after_activation"), 0);
    EXPECT_EQ(attr_string(n, "activation"), "relu");
}

TEST(Passes, ConvResidualAfterActivation) {
    GraphBuilder b;
    add_conv(b);
    b.input("r", {1, 6, 6, 6});
    b.node("Relu", {"y"}, {"act"});
    b.node("Add", {"r", "act"}, {"z"});  // the residual as the first operand
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_epilogues, 2, 3, 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.value(g.nodes[0].inputs[3]).name, "r");
    EXPECT_EQ(*g.nodes[0].attrs.get_int("residual_after_activation"), 1);
}

TEST(Passes, ConvResidualProducedLaterIsResorted) {
    GraphBuilder b;
    add_conv(b);
    b.input("x2", {1, 6, 6, 6});
    b.node("Sigmoid", {"x2"}, {"r"});  // after the conv in node order
    b.node("Add", {"y", "r"}, {"z"});
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_epilogues, 1, 3, 2);
    ASSERT_EQ(g.nodes.size(), 2u);
    EXPECT_EQ(g.nodes[0].op, "Sigmoid");
    EXPECT_EQ(g.nodes[1].op, "Conv");
    EXPECT_EQ(g.value(g.nodes[1].inputs[3]).name, "r");
}

TEST(Passes, MatMulBiasFused) {
    GraphBuilder b;
    b.input("a", {3, 5});
    b.random_f32("w", {5, 4}, 1);
    b.random_f32("bias", {4}, 2);
    b.node("MatMul", {"a", "w"}, {"y"});
    b.node("Add", {"y", "bias"}, {"z"});
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_epilogues, 1, 2, 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.value(g.nodes[0].inputs[2]).name, "bias");
}

TEST(Passes, MatMulColumnAddIsNotABias) {
    // [4, 1] holds 4 = N values but adds one per row: a bias would add one per column.
    GraphBuilder b;
    b.input("a", {4, 4});
    b.random_f32("w", {4, 4}, 1);
    b.random_f32("col", {4, 1}, 2);
    b.node("MatMul", {"a", "w"}, {"y"});
    b.node("Add", {"y", "col"}, {"z"});
    b.output("z");
    check_pass(b, loom::compiler::fuse_epilogues, 0, 2, 2);
}

TEST(Passes, MatMulVectorProductAddIsNotABias) {
    // B is 1-D, so Y [3] has no N axis (N is 1): the 3 values added are one per row.
    GraphBuilder b;
    b.input("a", {3, 5});
    b.random_f32("v", {5}, 1);
    b.random_f32("c", {3}, 2);
    b.node("MatMul", {"a", "v"}, {"y"});
    b.node("Add", {"y", "c"}, {"z"});
    b.output("z");
    check_pass(b, loom::compiler::fuse_epilogues, 0, 2, 2);
}

TEST(Passes, GemmReluFused) {
    GraphBuilder b;
    b.input("a", {3, 5});
    b.random_f32("w", {4, 5}, 1);
    b.random_f32("c", {4}, 2);
    b.node("Gemm", {"a", "w", "c"}, {"y"}, {{"transB", 1}, {"alpha", 0.5}});
    b.node("Relu", {"y"}, {"z"});
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_epilogues, 1, 2, 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(attr_string(g.nodes[0], "activation"), "relu");
}

TEST(Passes, ElementwiseChainCollapsed) {
    GraphBuilder b;
    b.input("x", {2, 3, 4});
    b.input("m", {3, 4});
    b.constant("half", host_f32({}, {0.5f}));
    b.node("Add", {"x", "half"}, {"t"});
    b.node("Mul", {"t", "m"}, {"u"});
    b.node("Sigmoid", {"u"}, {"z"});
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_elementwise_chains, 2, 3, 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    const Node& n = g.nodes[0];
    EXPECT_EQ(n.op, "EltwiseChain");
    EXPECT_EQ(attr_string(n, "program"), "$0 0.5 add $1 mul sigmoid");
    ASSERT_EQ(n.inputs.size(), 2u);
    EXPECT_EQ(g.value(n.inputs[0]).name, "x");
    EXPECT_EQ(g.value(n.inputs[1]).name, "m");
}

TEST(Passes, ElementwiseChainKeepsAnIntermediateGraphOutput) {
    GraphBuilder b;
    b.input("x", {2, 3, 4});
    b.input("m", {3, 4});
    b.constant("half", host_f32({}, {0.5f}));
    b.node("Add", {"x", "half"}, {"t"});
    b.node("Mul", {"t", "m"}, {"u"});
    b.node("Sigmoid", {"u"}, {"z"});
    b.output("z");
    b.output("t");  // the Add's result must stay visible
    const Graph g = check_pass(b, loom::compiler::fuse_elementwise_chains, 1, 3, 2);
    ASSERT_EQ(g.nodes.size(), 2u);
    EXPECT_EQ(g.nodes[0].op, "Add");
    EXPECT_EQ(g.nodes[1].op, "EltwiseChain");
    EXPECT_EQ(attr_string(g.nodes[1], "program"), "$0 $1 mul sigmoid");
}

TEST(Passes, ElementwiseChainKeepsTheOutputRank) {
    // The one-element constant is [1, 1, 1]: it raises Y's rank, so it cannot become a bare
    // number in the program, or inference over the chain's inputs would give a 2x3 Y.
    GraphBuilder b;
    b.input("x", {2, 3});
    b.constant("half", host_f32({1, 1, 1}, {0.5f}));
    b.node("Add", {"x", "half"}, {"t"});
    b.node("Sigmoid", {"t"}, {"z"});
    b.output("z");
    Graph g = check_pass(b, loom::compiler::fuse_elementwise_chains, 1, 2, 1);
    loom::compiler::reset_types(g);  // what convert_to_f16 does before inferring again
    ASSERT_TRUE(infer_shapes(g).ok());
    EXPECT_EQ(shape_str(g.value(g.outputs[0]).shape), "1x2x3");
}

TEST(Passes, ElementwiseChainClipAttributes) {
    GraphBuilder b;  // opset 6 Clip: the bounds are attributes, and the chain must keep them
    b.input("x", {4, 8});
    b.constant("two", host_f32({}, {2.0f}));
    b.node("Mul", {"x", "two"}, {"t"});
    b.node("Clip", {"t"}, {"z"}, {{"min", -0.5}, {"max", 0.75}});
    b.output("z");
    const Graph g = check_pass(b, loom::compiler::fuse_elementwise_chains, 1, 2, 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(attr_string(g.nodes[0], "program"), "$0 2 mul -0.5 0.75 clip");
}

TEST(Passes, ConvertToF16KeepsF32Interfaces) {
    GraphBuilder b;
    b.input("x", {1, 8, 8, 8});
    b.random_f32("w", {8, 8, 3, 3}, 1);
    b.random_f32("bias", {8}, 2);
    b.node("Conv", {"x", "w", "bias"}, {"y"}, {{"pads", ints{1, 1, 1, 1}}});
    b.node("Relu", {"y"}, {"z"});
    b.output("z");
    Graph g = b.g;
    ASSERT_TRUE(infer_shapes(g).ok());
    const auto inputs = random_inputs(g, 5);
    const auto before = run(g, inputs);
    EXPECT_EQ(loom::compiler::convert_to_f16(g), 2);  // one Cast in, one out
    const Status s = infer_shapes(g);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_TRUE(g.validate().ok());
    EXPECT_EQ(g.nodes.size(), 4u);
    EXPECT_EQ(g.value(g.inputs[0]).dtype, DType::F32);
    EXPECT_EQ(g.value(g.outputs[0]).dtype, DType::F32);
    EXPECT_EQ(g.value(g.outputs[0]).name, "z");
    EXPECT_EQ(g.value(g.find_value("w")).dtype, DType::F16);
    EXPECT_EQ(g.value(g.find_value("y")).dtype, DType::F16);
    const double worst = expect_close(run(g, inputs), before, kRelF16);
    EXPECT_GT(worst, 0.0);  // f16 arithmetic did happen
}

// The SR-shaped model: three Conv + PRelu, a Conv to 12 channels, DepthToSpace x2, plus a
// nearest-neighbour upscale of the input.
GraphBuilder sr_model() {
    GraphBuilder b;
    b.input("x", {1, 3, 8, 8});
    std::string prev = "x";
    int64_t channels = 3;
    for (int i = 1; i <= 3; ++i) {
        const std::string c = fmt::format("conv{}", i), p = fmt::format("prelu{}", i);
        b.random_f32(c + ".w", {8, channels, 3, 3}, 10 + i, -0.5f, 0.5f);
        b.random_f32(c + ".b", {8}, 20 + i, -0.1f, 0.1f);
        b.random_f32(p + ".slope", {8, 1, 1}, 30 + i, 0.05f, 0.3f);
        b.node("Conv", {prev, c + ".w", c + ".b"}, {c}, {{"pads", ints{1, 1, 1, 1}}});
        b.node("PRelu", {c, p + ".slope"}, {p});
        prev = p;
        channels = 8;
    }
    b.random_f32("conv4.w", {12, 8, 3, 3}, 14, -0.5f, 0.5f);
    b.node("Conv", {prev, "conv4.w"}, {"conv4"}, {{"pads", ints{1, 1, 1, 1}}});
    b.node("DepthToSpace", {"conv4"}, {"residual"}, {{"blocksize", 2}, {"mode", "DCR"}});
    b.constant("scales", host_f32({4}, {1, 1, 2, 2}));
    b.node("Resize", {"x", "", "scales"}, {"upscaled"}, {{"mode", "nearest"}});
    b.node("Add", {"residual", "upscaled"}, {"y"});
    b.output("y");
    return b;
}

TEST(Passes, OptimizeSuperResolutionModel) {
    GraphBuilder b = sr_model();
    const auto run_optimize = [](Graph& g) -> Result<int> {
        auto r = loom::compiler::optimize(g, {});
        if (!r.ok()) return r.status();
        std::vector<std::string> summary;
        int changed = 0;
        for (const auto& p : *r) {
            EXPECT_LE(p.nodes_after, p.nodes_before) << p.pass;
            EXPECT_EQ(static_cast<int>(p.nodes_before - p.nodes_after), p.changed) << p.pass;
            changed += p.changed;
            if (p.changed) summary.push_back(p.pass);
        }
        EXPECT_EQ(summary, std::vector<std::string>{"fuse_epilogues"});
        return changed;
    };
    const Graph g = check_pass(b, run_optimize, 4, 10, 6);
    std::vector<std::string> ops;
    for (const Node& n : g.nodes) ops.push_back(n.op);
    // The upsampled skip's Add joins the DepthToSpace, which now follows the Resize it reads.
    EXPECT_EQ(ops, (std::vector<std::string>{"Conv", "Conv", "Conv", "Conv", "Resize", "DepthToSpace"}));
    EXPECT_EQ(g.nodes[5].inputs.size(), 2u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(attr_string(g.nodes[i], "activation"), "prelu") << i;
    EXPECT_FALSE(g.nodes[3].attrs.has("activation"));
    EXPECT_EQ(shape_str(g.value(g.outputs[0]).shape), "1x3x16x16");
}

TEST(Passes, OptimizeToF16MatchesF32) {
    GraphBuilder b = sr_model();
    Graph g = b.g;
    ASSERT_TRUE(infer_shapes(g).ok());
    const auto inputs = random_inputs(g, 9);
    const auto before = run(g, inputs);
    loom::compiler::OptimizeOptions options;
    options.f16 = true;
    auto r = loom::compiler::optimize(g, options);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_TRUE(g.validate().ok());
    EXPECT_EQ(g.nodes.size(), 8u);  // 6 and a Cast at each end
    EXPECT_EQ(g.value(g.inputs[0]).dtype, DType::F32);
    EXPECT_EQ(g.value(g.outputs[0]).dtype, DType::F32);
    EXPECT_GT(expect_close(run(g, inputs), before, kRelF16), 0.0);
}

}  // namespace

}  // namespace test_passes
