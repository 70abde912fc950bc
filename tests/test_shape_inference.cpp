// Shape and type inference of the op table (compiler/ops/*.cpp through infer_shapes): output
// shapes for windowed ops (pads, strides, dilations, auto_pad, ceil_mode, output_padding),
// matrix products, reshapes, Concat/Split/Slice/Pad, Resize, DepthToSpace, Gather, Shape and
// reductions; symbolic dims kept where the op preserves them; the kernels accepting the
// inferred shapes (the interpreter runs the node); and errors that name the node.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "compiler/graph.hpp"
#include "compiler/interpret.hpp"
#include "compiler/ops.hpp"
#include "test_util.hpp"

namespace test_shape_inference {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::Status;
using loom::StatusCode;
using loom::compiler::Dim;
using loom::compiler::HostTensor;
using loom::compiler::infer_shapes;
using loom::compiler::shape_str;
using loom::device::DType;
using loom::test::GraphBuilder;
using loom::test::host_i64;

using ints = std::vector<int64_t>;
using floats = std::vector<double>;

Dim sym(const char* name) { return Dim::sym(name); }

// Infers `b`'s graph (failing the test on error) and returns value `name`'s shape as
// shape_str writes it ("1x3xHx4").
std::string inferred(GraphBuilder& b, const std::string& name) {
    const Status s = infer_shapes(b.g);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok()) return "<error>";
    const int id = b.g.find_value(name);
    EXPECT_GE(id, 0) << name;
    return id < 0 ? "<none>" : shape_str(b.g.value(id).shape);
}

// Checks that inferring `b`'s graph fails with `code` and a message containing every needle.
void expect_infer_error(GraphBuilder& b, const std::vector<std::string>& needles,
                        StatusCode code = StatusCode::INVALID_ARGUMENT) {
    const Status s = infer_shapes(b.g);
    ASSERT_FALSE(s.ok()) << "inference succeeded";
    EXPECT_EQ(s.code(), code) << s.to_string();
    for (const auto& n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << n << " in " << s.to_string();
}

// Runs the (inferred, static) graph on seeded random f32 inputs: the kernels check that the
// output shapes they are given are the ones they compute, so this proves inference and kernel
// agree. Fails the test on error.
void expect_kernels_agree(const GraphBuilder& b) {
    std::vector<HostTensor> inputs;
    uint32_t seed = 11;
    for (int id : b.g.inputs) {
        const auto& v = b.g.value(id);
        ASSERT_EQ(v.dtype, DType::F32);
        inputs.push_back(loom::test::random_host_f32(loom::compiler::shape_dims(v.shape), seed++));
    }
    auto r = loom::compiler::interpret(b.g, inputs);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
}

TEST(ShapeInference, ConvPadsStridesDilations) {
    GraphBuilder b;
    b.input("x", {1, 3, 10, 12});
    b.random_f32("w", {8, 3, 3, 3}, 1);
    b.random_f32("bias", {8}, 2);
    b.node("Conv", {"x", "w", "bias"}, {"same"}, {{"pads", ints{1, 1, 1, 1}}});
    b.node("Conv", {"x", "w"}, {"strided"}, {{"pads", ints{1, 1, 1, 1}}, {"strides", ints{2, 2}}});
    b.node("Conv", {"x", "w"}, {"dilated"}, {{"dilations", ints{2, 3}}});
    b.node("Conv", {"x", "w"}, {"asym"}, {{"pads", ints{0, 2, 1, 0}}, {"strides", ints{3, 1}}});
    EXPECT_EQ(inferred(b, "same"), "1x8x10x12");
    EXPECT_EQ(inferred(b, "strided"), "1x8x5x6");    // (10 + 2 - 3) / 2 + 1, (12 + 2 - 3) / 2 + 1
    EXPECT_EQ(inferred(b, "dilated"), "1x8x6x6");    // spans 5 and 7
    EXPECT_EQ(inferred(b, "asym"), "1x8x3x12");      // (10 + 1 - 3) / 3 + 1, 12 + 2 - 3 + 1
    EXPECT_EQ(b.g.value(b.g.find_value("same")).dtype, DType::F32);
    expect_kernels_agree(b);
}

TEST(ShapeInference, ConvAutoPadSameUpper) {
    GraphBuilder b;
    b.input("x", {1, 2, 11, 12});
    b.random_f32("w", {4, 2, 3, 3}, 1);
    b.random_f32("w4", {4, 2, 4, 4}, 2);
    b.node("Conv", {"x", "w"}, {"s1"}, {{"auto_pad", "SAME_UPPER"}});
    b.node("Conv", {"x", "w"}, {"s2"}, {{"auto_pad", "SAME_UPPER"}, {"strides", ints{2, 2}}});
    b.node("Conv", {"x", "w4"}, {"even"}, {{"auto_pad", "SAME_LOWER"}});
    b.node("Conv", {"x", "w"}, {"valid"}, {{"auto_pad", "VALID"}});
    EXPECT_EQ(inferred(b, "s1"), "1x4x11x12");
    EXPECT_EQ(inferred(b, "s2"), "1x4x6x6");  // ceil(11 / 2), ceil(12 / 2)
    EXPECT_EQ(inferred(b, "even"), "1x4x11x12");
    EXPECT_EQ(inferred(b, "valid"), "1x4x9x10");
    expect_kernels_agree(b);
}

TEST(ShapeInference, Conv1dAndGrouped) {
    GraphBuilder b;
    b.input("x", {2, 4, 16});
    b.random_f32("w", {6, 2, 5}, 1);
    b.input("img", {1, 4, 7, 7});
    b.random_f32("dw", {4, 1, 3, 3}, 2);
    b.node("Conv", {"x", "w"}, {"y"}, {{"strides", ints{3}}, {"group", 2}});
    b.node("Conv", {"img", "dw"}, {"z"}, {{"group", 4}, {"strides", ints{2, 2}}});
    EXPECT_EQ(inferred(b, "y"), "2x6x4");  // (16 - 5) / 3 + 1
    EXPECT_EQ(inferred(b, "z"), "1x4x3x3");
    expect_kernels_agree(b);
}

TEST(ShapeInference, ConvTransposeOutputPaddingAndShape) {
    GraphBuilder b;
    b.input("x", {1, 4, 5, 5});
    b.random_f32("w", {4, 2, 3, 3}, 1);
    b.random_f32("wg", {4, 3, 3, 3}, 2);
    b.node("ConvTranspose", {"x", "w"}, {"y"},
           {{"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}, {"output_padding", ints{1, 0}}});
    b.node("ConvTranspose", {"x", "wg"}, {"grouped"}, {{"group", 2}});
    b.node("ConvTranspose", {"x", "w"}, {"sized"}, {{"strides", ints{2, 2}}, {"output_shape", ints{11, 10}}});
    // 2 * (5 - 1) + output_padding + (3 - 1) + 1 - 2
    EXPECT_EQ(inferred(b, "y"), "1x2x10x9");
    EXPECT_EQ(inferred(b, "grouped"), "1x6x7x7");  // K = W[1] x group
    EXPECT_EQ(inferred(b, "sized"), "1x2x11x10");
    GraphBuilder run;  // the kernel computes the same size
    run.input("x", {1, 4, 5, 5});
    run.random_f32("w", {4, 2, 3, 3}, 1);
    run.node("ConvTranspose", {"x", "w"}, {"y"},
             {{"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}, {"output_padding", ints{1, 0}}});
    run.output("y");
    ASSERT_EQ(inferred(run, "y"), "1x2x10x9");
    expect_kernels_agree(run);
}

TEST(ShapeInference, NegativeOutputDimIsRefused) {
    GraphBuilder b;
    b.input("x", {1, 1, 2, 2});
    b.random_f32("w", {1, 1, 1, 1}, 1);
    // 1 x (2 - 1) + 0 + 1 - 3 - 3 = -4: the pads crop more than there is.
    b.node("ConvTranspose", {"x", "w"}, {"y"}, {{"pads", ints{3, 0, 3, 0}}});
    expect_infer_error(b, {"node 'y' (ConvTranspose)", "negative"});

    GraphBuilder r;
    r.input("x", {1, 3, 4, 4});
    r.constant("sizes", host_i64({1, 3, -2, 8}));
    r.node("Resize", {"x", "", "", "sizes"}, {"y"});
    expect_infer_error(r, {"node 'y' (Resize)", "negative"});
}

TEST(ShapeInference, PoolsWithCeilMode) {
    GraphBuilder b;
    b.input("x", {1, 3, 6, 7});
    b.input("small", {1, 2, 5, 5});
    b.input("tiny", {1, 1, 3, 3});
    b.node("MaxPool", {"x"}, {"floor"}, {{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}});
    b.node("MaxPool", {"x"}, {"ceil"}, {{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"ceil_mode", 1}});
    // ceil((5 + 2 - 2) / 2) + 1 = 4, but the 4th window would start in the right padding.
    b.node("AveragePool", {"small"}, {"edge"},
           {{"kernel_shape", ints{2, 2}}, {"strides", ints{2, 2}}, {"pads", ints{1, 1, 1, 1}}, {"ceil_mode", 1}});
    // Asymmetric pads: the 2nd window starts at input index 2 (after 1 of padding), inside the
    // input, so it counts although it would start past in + pad_total / 2.
    b.node("MaxPool", {"tiny"}, {"lopsided"},
           {{"kernel_shape", ints{2, 2}}, {"strides", ints{3, 3}}, {"pads", ints{1, 1, 0, 0}}, {"ceil_mode", 1}});
    b.node("AveragePool", {"x"}, {"same"},
           {{"kernel_shape", ints{3, 3}}, {"strides", ints{2, 2}}, {"auto_pad", "SAME_UPPER"}});
    b.node("GlobalAveragePool", {"x"}, {"global"});
    EXPECT_EQ(inferred(b, "floor"), "1x3x2x3");
    EXPECT_EQ(inferred(b, "ceil"), "1x3x3x3");
    EXPECT_EQ(inferred(b, "edge"), "1x2x3x3");
    EXPECT_EQ(inferred(b, "lopsided"), "1x1x2x2");
    EXPECT_EQ(inferred(b, "same"), "1x3x3x4");
    EXPECT_EQ(inferred(b, "global"), "1x3x1x1");
    expect_kernels_agree(b);

    GraphBuilder missing;
    missing.input("x", {1, 3, 6, 7});
    missing.node("MaxPool", {"x"}, {"y"});
    expect_infer_error(missing, {"node 'y' (MaxPool)", "kernel_shape"});
}

TEST(ShapeInference, MatMulBroadcastingAndVectors) {
    GraphBuilder b;
    b.input("a4", {2, 1, 3, 4});
    b.input("b3", {5, 4, 6});
    b.input("v", {4});
    b.input("m", {4, 6});
    b.input("t", {2, 3, 4});
    b.node("MatMul", {"a4", "b3"}, {"batched"});
    b.node("MatMul", {"v", "m"}, {"vec_mat"});
    b.node("MatMul", {"t", "v"}, {"mat_vec"});
    b.node("MatMul", {"v", "v"}, {"dot"});
    EXPECT_EQ(inferred(b, "batched"), "2x5x3x6");
    EXPECT_EQ(inferred(b, "vec_mat"), "6");
    EXPECT_EQ(inferred(b, "mat_vec"), "2x3");
    EXPECT_EQ(inferred(b, "dot"), "scalar");
    expect_kernels_agree(b);

    GraphBuilder bad;
    bad.input("a", {3, 4});
    bad.input("b", {5, 6});
    bad.node("MatMul", {"a", "b"}, {"y"});
    expect_infer_error(bad, {"node 'y' (MatMul)", "inner dims"});
}

TEST(ShapeInference, GemmTransposes) {
    GraphBuilder b;
    b.input("a", {4, 3});
    b.input("bt", {5, 4});
    b.input("bn", {4, 5});
    b.node("Gemm", {"a", "bt"}, {"tt"}, {{"transA", 1}, {"transB", 1}});
    b.node("Gemm", {"a", "bn"}, {"tn"}, {{"transA", 1}});
    EXPECT_EQ(inferred(b, "tt"), "3x5");
    EXPECT_EQ(inferred(b, "tn"), "3x5");
    expect_kernels_agree(b);
}

TEST(ShapeInference, ReshapeZeroAndMinusOne) {
    GraphBuilder b;
    b.input("x", {2, 3, 4});
    b.constant("s1", host_i64({0, -1}));
    b.constant("s2", host_i64({-1, 2, 0}));
    b.constant("s3", host_i64({4, 0, 2}));
    b.node("Reshape", {"x", "s1"}, {"keep_first"});
    b.node("Reshape", {"x", "s2"}, {"copy_last"});
    b.node("Reshape", {"x", "s3"}, {"copy_mid"});
    EXPECT_EQ(inferred(b, "keep_first"), "2x12");
    EXPECT_EQ(inferred(b, "copy_last"), "3x2x4");  // 0 copies x's axis 2
    EXPECT_EQ(inferred(b, "copy_mid"), "4x3x2");
    expect_kernels_agree(b);

    GraphBuilder s;  // a symbolic batch passes through 0; -1 over a symbol stays unknown
    s.input("x", {sym("N"), 3, 4});
    s.constant("shape", host_i64({0, -1}));
    s.node("Reshape", {"x", "shape"}, {"y"});
    ASSERT_TRUE(infer_shapes(s.g).ok());
    const auto& y = s.g.value(s.g.find_value("y")).shape;
    ASSERT_EQ(y.size(), 2u);
    EXPECT_EQ(y[0], sym("N"));
    EXPECT_FALSE(y[1].known());
}

TEST(ShapeInference, ReshapeErrorsNameTheNode) {
    GraphBuilder b;
    b.input("x", {2, 3, 4});
    b.constant("shape", host_i64({5, -1}));
    b.node("Reshape", {"x", "shape"}, {"y"});
    expect_infer_error(b, {"node 'y' (Reshape)", "cannot reshape 2x3x4"});

    GraphBuilder two;
    two.input("x", {2, 3, 4});
    two.constant("shape", host_i64({-1, -1}));
    two.node("Reshape", {"x", "shape"}, {"y"});
    expect_infer_error(two, {"node 'y' (Reshape)", "more than one -1"});

    GraphBuilder count;
    count.input("x", {2, 3, 4});
    count.constant("shape", host_i64({5, 5}));
    count.node("Reshape", {"x", "shape"}, {"y"});
    expect_infer_error(count, {"node 'y' (Reshape)", "24 elements", "25 elements"});
}

TEST(ShapeInference, Flatten) {
    GraphBuilder b;
    b.input("x", {2, 3, 4, 5});
    b.input("s", {sym("N"), 3, 4});
    b.node("Flatten", {"x"}, {"axis2"}, {{"axis", 2}});
    b.node("Flatten", {"x"}, {"axis0"}, {{"axis", 0}});
    b.node("Flatten", {"x"}, {"last"}, {{"axis", -1}});
    b.node("Flatten", {"s"}, {"symbolic"});
    EXPECT_EQ(inferred(b, "axis2"), "6x20");
    EXPECT_EQ(inferred(b, "axis0"), "1x120");
    EXPECT_EQ(inferred(b, "last"), "24x5");
    EXPECT_EQ(inferred(b, "symbolic"), "Nx12");
}

TEST(ShapeInference, SqueezeUnsqueezeAttributeAndInputForms) {
    GraphBuilder b;
    b.input("x", {2, 1, 3, 1});
    b.input("m", {2, 3});
    b.constant("last", host_i64({-1}));
    b.constant("front_back", host_i64({0, 3}));
    b.node("Squeeze", {"x"}, {"attr"}, {{"axes", ints{1}}});
    b.node("Squeeze", {"x", "last"}, {"input"});
    b.node("Squeeze", {"x"}, {"all"});
    b.node("Unsqueeze", {"m"}, {"u_attr"}, {{"axes", ints{0, 3}}});
    b.node("Unsqueeze", {"m", "front_back"}, {"u_input"});
    b.node("Unsqueeze", {"m", "last"}, {"u_last"});
    EXPECT_EQ(inferred(b, "attr"), "2x3x1");
    EXPECT_EQ(inferred(b, "input"), "2x1x3");
    EXPECT_EQ(inferred(b, "all"), "2x3");
    EXPECT_EQ(inferred(b, "u_attr"), "1x2x3x1");
    EXPECT_EQ(inferred(b, "u_input"), "1x2x3x1");
    EXPECT_EQ(inferred(b, "u_last"), "2x3x1");

    GraphBuilder bad;
    bad.input("x", {2, 1, 3});
    bad.node("Squeeze", {"x"}, {"y"}, {{"axes", ints{2}}});
    expect_infer_error(bad, {"node 'y' (Squeeze)", "cannot squeeze axis 2"});
}

TEST(ShapeInference, ConcatAndSplit) {
    GraphBuilder b;
    b.input("a", {1, 2, 4});
    b.input("c", {1, 3, 4});
    b.input("x", {2, 6, 4});
    b.constant("sizes", host_i64({2, 4}));
    b.node("Concat", {"a", "c", "a"}, {"cat"}, {{"axis", -2}});
    b.node("Split", {"x"}, {"e0", "e1", "e2"}, {{"axis", 1}});
    b.node("Split", {"x"}, {"p0", "p1"}, {{"axis", 1}, {"split", ints{1, 5}}});
    b.node("Split", {"x", "sizes"}, {"q0", "q1"}, {{"axis", -2}});
    EXPECT_EQ(inferred(b, "cat"), "1x7x4");
    EXPECT_EQ(inferred(b, "e2"), "2x2x4");
    EXPECT_EQ(inferred(b, "p0"), "2x1x4");
    EXPECT_EQ(inferred(b, "p1"), "2x5x4");
    EXPECT_EQ(inferred(b, "q0"), "2x2x4");
    EXPECT_EQ(inferred(b, "q1"), "2x4x4");
    expect_kernels_agree(b);

    GraphBuilder bad;
    bad.input("x", {2, 6, 4});
    bad.node("Split", {"x"}, {"y0", "y1"}, {{"axis", 1}, {"split", ints{2, 3}}});
    expect_infer_error(bad, {"node 'y0' (Split)", "sum to 5"});

    GraphBuilder uneven;
    uneven.input("x", {2, 7});
    uneven.node("Split", {"x"}, {"y0", "y1"}, {{"axis", 1}});
    expect_infer_error(uneven, {"node 'y0' (Split)", "equal parts"});
}

TEST(ShapeInference, ConcatRefusesMismatchedDims) {
    GraphBuilder b;
    b.input("a", {1, 2, 4});
    b.input("c", {1, 3, 5});
    b.node("Concat", {"a", "c"}, {"y"}, {{"axis", 1}});
    expect_infer_error(b, {"node 'y' (Concat)", "1x3x5"});
}

TEST(ShapeInference, SliceNegativeClampedAndReversed) {
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    GraphBuilder b;
    b.input("x", {10, 8});
    b.constant("neg_s", host_i64({-3}));
    b.constant("big_e", host_i64({kMax}));
    b.constant("ax0", host_i64({0}));
    b.constant("rev_s", host_i64({-1}));
    b.constant("rev_e", host_i64({kMin}));
    b.constant("ax1", host_i64({1}));
    b.constant("step_m3", host_i64({-3}));
    b.constant("two_axes_s", host_i64({1, 100}));
    b.constant("two_axes_e", host_i64({-1, -100}));
    b.constant("two_axes", host_i64({1, 0}));
    b.constant("steps_2_m1", host_i64({2, -1}));
    b.constant("five", host_i64({5}));
    b.constant("two", host_i64({2}));
    b.node("Slice", {"x", "neg_s", "big_e", "ax0"}, {"tail"});
    b.node("Slice", {"x", "rev_s", "rev_e", "ax1", "step_m3"}, {"reversed"});
    // axis 1 from 1 to 7 by 2 (3 values); axis 0 from 100 (clamped to 9) down to -100 (clamped
    // to before 0) by -1 (10 values).
    b.node("Slice", {"x", "two_axes_s", "two_axes_e", "two_axes", "steps_2_m1"}, {"both"});
    b.node("Slice", {"x", "five", "two"}, {"empty"});
    b.node("Slice", {"x"}, {"attr"}, {{"starts", ints{2}}, {"ends", ints{-2}}, {"axes", ints{1}}});
    EXPECT_EQ(inferred(b, "tail"), "3x8");
    EXPECT_EQ(inferred(b, "reversed"), "10x3");  // columns 7, 4, 1
    EXPECT_EQ(inferred(b, "both"), "10x3");
    EXPECT_EQ(inferred(b, "empty"), "0x8");
    EXPECT_EQ(inferred(b, "attr"), "10x4");
    GraphBuilder run = b;  // the empty slice is left out: kernels need data to compare
    run.g.nodes.erase(run.g.nodes.begin() + 3);
    expect_kernels_agree(run);
}

TEST(ShapeInference, PadFormsAndCrops) {
    GraphBuilder b;
    b.input("x", {1, 3, 4, 5});
    b.constant("pads", host_i64({0, 0, 1, 2, 0, 0, 3, 4}));
    b.constant("crop", host_i64({0, 0, -1, 0, 0, 0, 0, -2}));
    b.constant("axis_pads", host_i64({1, 1}));
    b.constant("axis", host_i64({-1}));
    b.node("Pad", {"x", "pads"}, {"grow"});
    b.node("Pad", {"x", "crop"}, {"crop_y"});
    b.node("Pad", {"x"}, {"attr"}, {{"pads", ints{1, 0, 0, 0, 0, 0, 0, 1}}, {"mode", "edge"}});
    b.node("Pad", {"x", "axis_pads", "", "axis"}, {"axes"});
    EXPECT_EQ(inferred(b, "grow"), "1x3x8x11");
    EXPECT_EQ(inferred(b, "crop_y"), "1x3x3x3");
    EXPECT_EQ(inferred(b, "attr"), "2x3x4x6");
    EXPECT_EQ(inferred(b, "axes"), "1x3x4x7");
    expect_kernels_agree(b);

    GraphBuilder bad;
    bad.input("x", {1, 3, 4, 5});
    bad.constant("pads", host_i64({0, 0, 1, 2}));
    bad.node("Pad", {"x", "pads"}, {"y"});
    expect_infer_error(bad, {"node 'y' (Pad)", "expected 2 x rank = 8"});
}

TEST(ShapeInference, ResizeScalesAndSizes) {
    GraphBuilder b;
    b.input("x", {1, 3, 4, 5});
    b.constant("x2", loom::test::host_f32({4}, {1, 1, 2, 2}));
    b.constant("x15", loom::test::host_f32({4}, {1, 1, 1.5f, 1.5f}));
    b.constant("sizes", host_i64({1, 3, 9, 7}));
    b.node("Resize", {"x", "", "x2"}, {"double"}, {{"mode", "nearest"}});
    b.node("Resize", {"x", "", "x15"}, {"frac"}, {{"mode", "linear"}});
    b.node("Resize", {"x", "", "", "sizes"}, {"sized"}, {{"mode", "linear"}});
    EXPECT_EQ(inferred(b, "double"), "1x3x8x10");
    EXPECT_EQ(inferred(b, "frac"), "1x3x6x7");  // floor(4 x 1.5), floor(5 x 1.5)
    EXPECT_EQ(inferred(b, "sized"), "1x3x9x7");
    expect_kernels_agree(b);

    GraphBuilder old;  // opset 9 Upsample: (X, scales)
    old.g.opset = 9;
    old.input("x", {1, 3, 4, 5});
    old.constant("scales", loom::test::host_f32({4}, {1, 1, 2, 3}));
    old.node("Upsample", {"x", "scales"}, {"y"});
    EXPECT_EQ(inferred(old, "y"), "1x3x8x15");

    GraphBuilder both;
    both.input("x", {1, 3, 4, 5});
    both.constant("scales", loom::test::host_f32({4}, {1, 1, 2, 2}));
    both.constant("sizes", host_i64({1, 3, 8, 10}));
    both.node("Resize", {"x", "", "scales", "sizes"}, {"y"});
    expect_infer_error(both, {"node 'y' (Resize)", "both scales and sizes"});
}

TEST(ShapeInference, DepthToSpaceAndSpaceToDepth) {
    GraphBuilder b;
    b.input("x", {1, 8, 3, 4});
    b.input("img", {1, 2, 6, 8});
    b.node("DepthToSpace", {"x"}, {"d2s"}, {{"blocksize", 2}});
    b.node("DepthToSpace", {"x"}, {"crd"}, {{"blocksize", 2}, {"mode", "CRD"}});
    b.node("SpaceToDepth", {"img"}, {"s2d"}, {{"blocksize", 2}});
    EXPECT_EQ(inferred(b, "d2s"), "1x2x6x8");
    EXPECT_EQ(inferred(b, "crd"), "1x2x6x8");
    EXPECT_EQ(inferred(b, "s2d"), "1x8x3x4");
    expect_kernels_agree(b);

    GraphBuilder bad;
    bad.input("x", {1, 6, 3, 4});
    bad.node("DepthToSpace", {"x"}, {"y"}, {{"blocksize", 2}});
    expect_infer_error(bad, {"node 'y' (DepthToSpace)", "blocksize^2 = 4"});
}

TEST(ShapeInference, GatherAndShape) {
    GraphBuilder b;
    b.input("x", {5, 4, 3});
    b.input("s", {sym("N"), 3, 4, 5});
    b.constant("idx", host_i64({2, 0}));
    b.constant("one", host_i64({1}, true));
    b.node("Gather", {"x", "idx"}, {"g1"}, {{"axis", 1}});
    b.node("Gather", {"x", "one"}, {"g0"});
    b.node("Shape", {"s"}, {"all"});
    b.node("Shape", {"s"}, {"mid"}, {{"start", 1}, {"end", -1}});
    EXPECT_EQ(inferred(b, "g1"), "5x2x3");
    EXPECT_EQ(inferred(b, "g0"), "4x3");  // a scalar index drops the axis
    EXPECT_EQ(inferred(b, "all"), "4");
    EXPECT_EQ(inferred(b, "mid"), "2");
    EXPECT_EQ(b.g.value(b.g.find_value("all")).dtype, DType::I64);

    GraphBuilder bad;
    bad.input("x", {5, 4});
    bad.input("idx", {2});  // f32 indices
    bad.node("Gather", {"x", "idx"}, {"y"});
    expect_infer_error(bad, {"node 'y' (Gather)", "indices are f32"});
}

TEST(ShapeInference, ReductionsKeepdims) {
    GraphBuilder b;
    b.input("x", {2, 3, 4, 5});
    b.constant("last", host_i64({-1}));
    b.node("ReduceMean", {"x"}, {"keep"}, {{"axes", ints{1, 2}}});
    b.node("ReduceMax", {"x"}, {"drop"}, {{"axes", ints{1, -2}}, {"keepdims", 0}});
    b.node("ReduceSum", {"x", "last"}, {"input_axes"}, {{"keepdims", 0}});
    b.node("ReduceMin", {"x"}, {"everything"});
    b.node("ReduceSum", {"x"}, {"noop"}, {{"noop_with_empty_axes", 1}});
    EXPECT_EQ(inferred(b, "keep"), "2x1x1x5");
    EXPECT_EQ(inferred(b, "drop"), "2x5");
    EXPECT_EQ(inferred(b, "input_axes"), "2x3x4");
    EXPECT_EQ(inferred(b, "everything"), "1x1x1x1");
    EXPECT_EQ(inferred(b, "noop"), "2x3x4x5");
    expect_kernels_agree(b);
}

TEST(ShapeInference, SymbolsSurviveSizePreservingOps) {
    GraphBuilder b;
    b.input("x", {sym("N"), 3, sym("H"), sym("W")});
    b.random_f32("w", {8, 3, 3, 3}, 1);
    b.node("Conv", {"x", "w"}, {"same"}, {{"pads", ints{1, 1, 1, 1}}});
    b.node("Conv", {"x", "w"}, {"strided"}, {{"pads", ints{1, 1, 1, 1}}, {"strides", ints{2, 2}}});
    b.node("Conv", {"x", "w"}, {"auto"}, {{"auto_pad", "SAME_UPPER"}});
    b.node("Relu", {"same"}, {"act"});
    b.node("MaxPool", {"x"}, {"pooled"}, {{"kernel_shape", ints{3, 3}}, {"pads", ints{1, 1, 1, 1}}});
    EXPECT_EQ(inferred(b, "same"), "Nx8xHxW");
    EXPECT_EQ(inferred(b, "act"), "Nx8xHxW");
    EXPECT_EQ(inferred(b, "auto"), "Nx8xHxW");
    EXPECT_EQ(inferred(b, "pooled"), "Nx3xHxW");
    const auto& strided = b.g.value(b.g.find_value("strided")).shape;
    ASSERT_EQ(strided.size(), 4u);
    EXPECT_FALSE(strided[2].known());
    EXPECT_NE(strided[2], sym("H"));  // a new size gets a new name
}

TEST(ShapeInference, BroadcastWithSymbols) {
    GraphBuilder b;
    b.input("x", {sym("N"), 3, sym("H"), sym("W")});
    b.input("c", {1, 3, 1, 1});
    b.input("row", {1, 3, sym("H"), 1});
    b.input("col", {1, 3, 1, sym("W")});
    b.input("a", {sym("A")});
    b.input("bb", {sym("B")});
    b.input("four", {4});
    b.node("Add", {"x", "c"}, {"sym_vs_1"});
    b.node("Mul", {"row", "col"}, {"outer"});
    b.node("Add", {"a", "bb"}, {"two_syms"});
    b.node("Sub", {"a", "four"}, {"sym_vs_4"});
    EXPECT_EQ(inferred(b, "sym_vs_1"), "Nx3xHxW");
    EXPECT_EQ(inferred(b, "outer"), "1x3xHxW");
    EXPECT_EQ(inferred(b, "sym_vs_4"), "4");
    const auto& two = b.g.value(b.g.find_value("two_syms")).shape;
    ASSERT_EQ(two.size(), 1u);
    EXPECT_FALSE(two[0].known());
    EXPECT_NE(two[0], sym("A"));
    EXPECT_NE(two[0], sym("B"));
}

TEST(ShapeInference, BadBroadcastNamesTheNode) {
    GraphBuilder b;
    b.input("x", {2, 3});
    b.input("z", {4, 3});
    b.node("Add", {"x", "z"}, {"y"});
    expect_infer_error(b, {"node 'y' (Add)", "do not broadcast", "2 vs 4"});
}

TEST(ShapeInference, UnsupportedOpListsTheSupportedOnes) {
    GraphBuilder b;
    b.input("x", {2, 3});
    b.node("NonMaxSuppression", {"x"}, {"y"});
    expect_infer_error(b, {"node 'y' (NonMaxSuppression)", "not supported", loom::compiler::supported_ops_list()},
                       StatusCode::UNSUPPORTED);
    const std::string list = loom::compiler::supported_ops_list();
    EXPECT_NE(list.find("Conv, ConvTranspose"), std::string::npos) << list;
    // The op table itself: tests/test_ops_registry.cpp.
}

TEST(ShapeInference, ArityAndInputTypesChecked) {
    GraphBuilder b;
    b.input("x", {2, 3});
    b.node("Relu", {"x", "x"}, {"y"});
    expect_infer_error(b, {"node 'y' (Relu)", "has 2 inputs"});

    GraphBuilder untyped;
    untyped.g.add_value("x");
    untyped.g.inputs.push_back(0);
    untyped.node("Relu", {"x"}, {"y"});
    expect_infer_error(untyped, {"graph input 'x' has no type"});
}

TEST(ShapeInference, DeclaredOutputShapesAreChecked) {
    GraphBuilder b;
    b.input("x", {1, sym("H")});
    b.node("Relu", {"x"}, {"y"});
    auto& y = b.g.value(b.g.find_value("y"));
    y.typed = true;
    y.shape = {1, 7};  // a declared size the inference cannot know
    EXPECT_EQ(inferred(b, "y"), "1x7");

    GraphBuilder bad;
    bad.input("x", {1, 5});
    bad.node("Relu", {"x"}, {"y"});
    auto& v = bad.g.value(bad.g.find_value("y"));
    v.typed = true;
    v.shape = {1, 6};
    expect_infer_error(bad, {"node 'y' (Relu)", "declared 1x6 but computes 1x5"});
}

TEST(ShapeInference, CastAndSoftmax) {
    GraphBuilder b;
    b.input("x", {2, 3});
    b.node("Cast", {"x"}, {"h"}, {{"to", 10}});
    b.node("Softmax", {"x"}, {"s"}, {{"axis", 0}});
    EXPECT_EQ(inferred(b, "s"), "2x3");
    EXPECT_EQ(b.g.value(b.g.find_value("h")).dtype, DType::F16);

    GraphBuilder old;  // opset 12 Softmax flattens from the axis: only the last axis is the same
    old.g.opset = 12;
    old.input("x", {2, 3, 4});
    old.node("Softmax", {"x"}, {"y"}, {{"axis", 1}});
    expect_infer_error(old, {"node 'y' (Softmax)", "only the last axis"}, StatusCode::UNSUPPORTED);
}

}  // namespace

}  // namespace test_shape_inference
