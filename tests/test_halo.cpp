// Spatial tiling analysis (compiler/halo.cpp): scale, halo and Winograd alignment of fully
// convolutional models; models that mix pixels globally are refused naming the node.
#include <gtest/gtest.h>

#include "compiler/halo.hpp"
#include "compiler/ops.hpp"
#include "tests/test_util.hpp"

namespace loom {
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

    // Halving the input itself would leave a half-pixel scale: refused, naming the node.
    test::GraphBuilder d;
    d.input("x", {1, 3, 16, 16});
    d.constant("half", test::host_f32({4}, {1, 1, 0.5f, 0.5f}));
    d.node("Resize", {"x", "", "half"}, {"y"}, {{"mode", std::string("linear")}});
    d.output("y");
    ASSERT_TRUE(compiler::infer_shapes(d.g).ok());
    auto r = compiler::analyse_spatial_tiling(d.g);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("scales down by 2 a map at 1x the input"), std::string::npos)
        << r.status().message();
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

TEST(Halo, GlobalOpsStridesAndShiftingPadsAreRefusedNamingTheNode) {
    {
        test::GraphBuilder b;
        b.input("x", {1, 2, 8, 8});
        b.node("GlobalAveragePool", {"x"}, {"y"});
        b.output("y");
        ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
        auto t = compiler::analyse_spatial_tiling(b.g);
        ASSERT_FALSE(t.ok());
        EXPECT_NE(t.status().message().find("node 'y' (GlobalAveragePool) is not spatially tileable"), std::string::npos)
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
        EXPECT_NE(t.status().message().find("stride 2"), std::string::npos) << t.status().message();
    }
    {
        test::GraphBuilder b;
        b.input("x", {1, 2, 8, 8});
        b.random_f32("w", {2, 2, 3, 3}, 1);
        b.node("Conv", {"x", "w"}, {"y"}, {{"pads", std::vector<int64_t>{2, 0, 0, 2}}});
        b.output("y");
        ASSERT_TRUE(compiler::infer_shapes(b.g).ok());
        auto t = compiler::analyse_spatial_tiling(b.g);
        ASSERT_FALSE(t.ok());
        EXPECT_NE(t.status().message().find("does not keep pixels in place"), std::string::npos) << t.status().message();
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
}  // namespace loom
