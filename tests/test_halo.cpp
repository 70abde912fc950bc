// Spatial tiling analysis (compiler/halo.cpp): scale, halo and Winograd alignment of fully
// convolutional models; models that mix pixels globally are refused naming the node.
#include <gtest/gtest.h>

#include "compiler/halo.hpp"
#include "compiler/ops.hpp"
#include "tests/test_util.hpp"

namespace loom::test_halo {  // apart from the rest of its unity batch
namespace {

using device::KernelAttrs;

const KernelAttrs kPad1{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};

// `convs` 3x3 convs of `ch` channels + prelu, a 3x3 conv to 3*s*s channels, PixelShuffle(s)
// and a nearest-upsampled skip: the SRVGGNetCompact shape.
test::GraphBuilder srvgg(int convs, int64_t ch, int64_t s) {
    test::GraphBuilder b;
    b.input("x", {1, 3, 20, 24});
    std::string prev = "x";
    int64_t c_in = 3;
    for (int i = 0; i < convs; ++i) {
        const std::string n = std::to_string(i);
        b.random_f32("w" + n, {ch, c_in, 3, 3}, static_cast<uint32_t>(i + 1));
        b.random_f32("s" + n, {ch, 1, 1}, static_cast<uint32_t>(i + 50), 0.1f, 0.2f);
        b.node("Conv", {prev, "w" + n}, {"c" + n}, kPad1);
        b.node("PRelu", {"c" + n, "s" + n}, {"p" + n});
        prev = "p" + n;
        c_in = ch;
    }
    b.random_f32("wl", {3 * s * s, c_in, 3, 3}, 99);
    b.node("Conv", {prev, "wl"}, {"cl"}, kPad1);
    b.node("DepthToSpace", {"cl"}, {"d"}, {{"blocksize", s}, {"mode", std::string("CRD")}});
    b.constant("scales", test::host_f32({4}, {1, 1, static_cast<float>(s), static_cast<float>(s)}));
    b.node("Resize", {"x", "", "scales"}, {"up"}, {{"mode", std::string("nearest")}});
    b.node("Add", {"d", "up"}, {"y"});
    b.output("y");
    b.g.source = "srvgg";
    EXPECT_TRUE(b.g.topo_sort().ok());
    EXPECT_TRUE(compiler::infer_shapes(b.g).ok());
    return b;
}

TEST(Halo, SrNetworkScaleHaloAndWinogradAlignment) {
    auto t = compiler::analyse_spatial_tiling(srvgg(4, 16, 4).g);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->scale, 4);
    // Five 3x3 convs at scale 1, all Winograd F(4x4, 3x3) (cpu::winograd_tile_for picks it down
    // to 3 channels): 4 pixels each, as each output's bits depend on its whole 6x6 input tile.
    EXPECT_EQ(t->halo, 20);
    EXPECT_EQ(t->align, 4);
    // Few channels take F(4,3) as well: the same alignment, 4 pixels per conv.
    auto narrow = compiler::analyse_spatial_tiling(srvgg(2, 4, 2).g);
    ASSERT_TRUE(narrow.ok());
    EXPECT_EQ(narrow->scale, 2);
    EXPECT_EQ(narrow->halo, 12);
    EXPECT_EQ(narrow->align, 4);
}

TEST(Halo, AWholeFactorDownscaleOfAnUpscaledMapKeepsAWholeScale) {
    test::GraphBuilder b = srvgg(2, 4, 4);
    b.g.outputs.clear();
    b.constant("half", test::host_f32({4}, {1, 1, 0.5f, 0.5f}));
    b.node("Resize", {"y", "", "half"}, {"z"}, {{"mode", std::string("cubic")}});
    b.output("z");
    ASSERT_TRUE(b.g.topo_sort().ok());
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    auto t = compiler::analyse_spatial_tiling(b.g);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->scale, 2);
    // The network's 12 pixels, plus the cubic taps and the 2-pixel block of the x4 map: 4 of its
    // pixels, one input pixel.
    EXPECT_EQ(t->halo, 13);

    // Halving the input itself leaves a half-pixel scale at the output: refused.
    test::GraphBuilder d;
    d.input("x", {1, 3, 16, 16});
    d.constant("half", test::host_f32({4}, {1, 1, 0.5f, 0.5f}));
    d.node("Resize", {"x", "", "half"}, {"y"}, {{"mode", std::string("linear")}});
    d.output("y");
    ASSERT_TRUE(compiler::infer_shapes(d.g).ok());
    auto r = compiler::analyse_spatial_tiling(d.g);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("the output is at 1/2x the input, not a whole scale"), std::string::npos)
        << r.status().message();
}

// Real-CUGAN's layers: valid (unpadded) convolutions consume the map's borders, a stride-2 conv
// halves the map (origins on its grid), a transposed conv doubles it, a Slice cuts the skip
// branch to size; none of them reads padding inside a window, so the windows' maps are the
// frame's exactly, and only the pixels the network consumes are lost. (The 4x4 stride-2
// transposed convs of Real-CUGAN's and UpConv7's last layers run as a padded 3x3 conv:
// Tiled.TransposedConvsOfEveryHostPathEqualTheUntiledRunBitForBit.)
test::GraphBuilder valid_net(int64_t first_pads) {
    test::GraphBuilder b;
    b.input("x", {1, 2, 40, 36});
    b.random_f32("w5", {4, 2, 5, 5}, 1);  // 5x5: no Winograd
    b.node("Conv", {"x", "w5"}, {"c"}, {{"pads", std::vector<int64_t>(4, first_pads)}});  // 36 x 32 unpadded
    b.random_f32("wd", {4, 4, 2, 2}, 2);
    b.node("Conv", {"c", "wd"}, {"d"}, {{"strides", std::vector<int64_t>{2, 2}}});  // 18 x 16
    b.random_f32("wu", {4, 4, 2, 2}, 3);
    b.node("ConvTranspose", {"d", "wu"}, {"u"}, {{"strides", std::vector<int64_t>{2, 2}}});  // 36 x 32
    b.constant("starts", test::host_i64({2, 2}));
    b.constant("ends", test::host_i64({-2, -2}));
    b.constant("axes", test::host_i64({2, 3}));
    b.node("Slice", {"u", "starts", "ends", "axes"}, {"s"});  // 32 x 28
    b.random_f32("wo", {4, 3, 2, 2}, 4);
    b.node("ConvTranspose", {"s", "wo"}, {"y"}, {{"strides", std::vector<int64_t>{2, 2}}});  // 64 x 56
    b.output("y");
    EXPECT_TRUE(compiler::infer_shapes(b.g).ok());
    return b;
}

TEST(Halo, ValidConvsStridesCropsAndTransposedConvsShiftTheMapWithoutAHalo) {
    auto t = compiler::analyse_spatial_tiling(valid_net(0).g);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->scale, 2);
    EXPECT_EQ(t->halo, 0);
    EXPECT_EQ(t->align, 2);
    EXPECT_EQ(t->shrink[0], 2 * 40 - 64);
    EXPECT_EQ(t->shrink[1], 2 * 36 - 56);
    EXPECT_TRUE(t->reductions.empty());

    // A padded conv before them: its window-edge pixels differ, and every later layer carries
    // that on (a transposed conv spreads it by its kernel) unless a crop cuts it away: pads of 2
    // are cut by the Slice, pads of 4 leave a halo.
    auto cut = compiler::analyse_spatial_tiling(valid_net(2).g);
    ASSERT_TRUE(cut.ok()) << cut.status().to_string();
    EXPECT_EQ(cut->halo, 0);
    EXPECT_EQ(cut->shrink[0], 2 * 40 - 72);
    auto padded = compiler::analyse_spatial_tiling(valid_net(4).g);
    ASSERT_TRUE(padded.ok()) << padded.status().to_string();
    EXPECT_EQ(padded->halo, 2);
    EXPECT_EQ(padded->shrink[0], 0);
}

// A mean over the frame feeding a map (squeeze-and-excitation) is a reduction the tiled run
// computes in a pass of its own: listed with its map's scale, contamination and size.
TEST(Halo, AMeanOverTheFrameIsListedAsAReduction) {
    test::GraphBuilder b = srvgg(2, 4, 2);
    b.g.outputs.clear();
    b.node("GlobalAveragePool", {"p0"}, {"gap"});
    b.node("Mul", {"p1", "gap"}, {"se"});
    b.output("se");
    ASSERT_TRUE(b.g.topo_sort().ok());
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    auto t = compiler::analyse_spatial_tiling(b.g);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_EQ(t->reductions.size(), 1u);
    const compiler::FrameReduction& r = t->reductions[0];
    EXPECT_EQ(r.node, "gap");
    EXPECT_EQ(r.input, "p0");
    EXPECT_EQ(r.output, "gap");
    EXPECT_EQ(r.num, 1);
    EXPECT_EQ(r.den, 1);
    EXPECT_EQ(r.lo, 4);  // one padded Winograd F(4,3) conv
    EXPECT_EQ(r.frame_h, 20);
    EXPECT_EQ(r.frame_w, 24);
    // Consecutive windows' clean pixels of p0 must meet: the window exceeds the step by 8.
    EXPECT_EQ(t->overlap[0], 8);
    EXPECT_EQ(t->halo, 8);
}

TEST(Halo, DilationAddsItsReach) {
    test::GraphBuilder b;
    b.input("x", {1, 2, 16, 16});
    b.random_f32("w", {2, 2, 3, 3}, 1);
    b.node("Conv", {"x", "w"}, {"y"}, {{"pads", std::vector<int64_t>{2, 2, 2, 2}}, {"dilations", std::vector<int64_t>{2, 2}}});
    b.output("y");
    ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
    auto t = compiler::analyse_spatial_tiling(b.g);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->halo, 2);
}

TEST(Halo, GlobalOutputsAndHalvedOutputsAreRefusedShiftingPadsFollowed) {
    {
        test::GraphBuilder b;
        b.input("x", {1, 2, 8, 8});
        b.node("GlobalAveragePool", {"x"}, {"y"});
        b.output("y");
        ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
        auto t = compiler::analyse_spatial_tiling(b.g);
        ASSERT_FALSE(t.ok());
        EXPECT_NE(t.status().message().find("output 'y' is not a map of the input frame"), std::string::npos)
            << t.status().message();
    }
    {
        test::GraphBuilder b;
        b.input("x", {1, 2, 8, 8});
        b.random_f32("w", {2, 2, 3, 3}, 1);
        b.node("Conv", {"x", "w"}, {"y"}, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"strides", std::vector<int64_t>{2, 2}}});
        b.output("y");
        ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
        auto t = compiler::analyse_spatial_tiling(b.g);
        ASSERT_FALSE(t.ok());
        EXPECT_NE(t.status().message().find("at 1/2x the input"), std::string::npos) << t.status().message();
    }
    {
        // Padding on one side moves the map by whole pixels, the same in every window.
        test::GraphBuilder b;
        b.input("x", {1, 2, 8, 8});
        b.random_f32("w", {2, 2, 3, 3}, 1);
        b.node("Conv", {"x", "w"}, {"y"}, {{"pads", std::vector<int64_t>{2, 0, 0, 2}}});
        b.output("y");
        ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
        auto t = compiler::analyse_spatial_tiling(b.g);
        ASSERT_TRUE(t.ok()) << t.status().to_string();
        EXPECT_EQ(t->shrink[0], 0);
        EXPECT_EQ(t->shrink[1], 0);
        EXPECT_GE(t->halo, 2);
    }
    {
        // An operand that varies along W (a [W] row) is not the same for every pixel.
        test::GraphBuilder b;
        b.input("x", {1, 2, 8, 8});
        b.random_f32("row", {8}, 1);
        b.node("Add", {"x", "row"}, {"y"});
        b.output("y");
        ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
        auto t = compiler::analyse_spatial_tiling(b.g);
        ASSERT_FALSE(t.ok());
        EXPECT_NE(t.status().message().find("varies over H or W"), std::string::npos) << t.status().message();
    }
}

}  // namespace
}  // namespace loom::test_halo
