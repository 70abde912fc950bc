// Winograd F(4x4, 3x3), F(2x2, 3x3) and F(6x6, 3x3) (device/kernels/cpu/winograd.hpp) against a float64
// direct convolution, on every instruction set the CPU has, for odd sizes (1x1 images, prime
// sizes, widths that leave partial tiles and partial 8- and 16-tile groups, channels not a
// multiple of 6 or 16), every padding and two epilogues (bias + leaky_relu; scale + residual
// after a sigmoid); AVX-512 also bit for bit against AVX2.
// Tolerance: |y - ref| <= 2e-5 * (sum |w x| + |bias|) (+ |residual|) + 2e-6 x the largest such
// magnitude in the output's m x m block: the transforms add a few roundings of values up to ~10x
// the inputs (the F(4,3) points 0, +-1, +-2, +-1/2; F(2,3)'s points 0, +-1 give values up to ~4x;
// F(6,3)'s 0, +-1, +-2, +-1/2 up to ~30x), and of the block's other outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernels/cpu/direct_conv.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/vmath.hpp"
#include "device/kernels/cpu/winograd.hpp"
#include "device/kernels/cpu/winograd_i8.hpp"
#include "test_util.hpp"

namespace test_cpu_winograd {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device::cpu;
using loom::ThreadPool;

struct Case {
    int64_t C, K, H, W, pt, pl, pb, pr;
    bool residual = false;  // epilogue: scale 0.5, sigmoid, then + residual; else bias + leaky_relu
};

class Winograd : public ::testing::TestWithParam<std::tuple<Isa, WinogradTile, Case>> {};

TEST_P(Winograd, MatchesFloat64DirectConvolution) {
    auto [want, tile, c] = GetParam();
    SKIP_UNLESS_ISA(want);
    loom::test::IsaGuard isa_guard(want);
    ThreadPool pool(2);
    std::mt19937 rng(static_cast<uint32_t>(c.C * 1000 + c.K * 10 + c.H + c.W));
    const auto x = loom::test::random_floats(rng, static_cast<size_t>(c.C * c.H * c.W));
    const auto w = loom::test::random_floats(rng, static_cast<size_t>(c.K * c.C * 9));
    const auto bias = loom::test::random_floats(rng, static_cast<size_t>(c.K));
    Conv2dShape s{c.C, c.H, c.W, c.K, c.H + c.pt + c.pb - 2, c.W + c.pl + c.pr - 2, c.pt, c.pl};
    const auto res = loom::test::random_floats(rng, static_cast<size_t>(c.K * s.Ho * s.Wo));
    std::vector<float> u(winograd_weights_floats(tile, c.K, c.C));
    winograd_transform_weights(tile, w.data(), c.K, c.C, u.data());
    std::vector<float> y(static_cast<size_t>(c.K * s.Ho * s.Wo), std::nanf(""));
    Epilogue ep;
    if (c.residual) {
        ep.scale = 0.5f, ep.act = Act::SIGMOID;
        ep.residual = {res.data(), s.Ho * s.Wo, 1}, ep.residual_after_act = true;
    } else {
        ep.bias = {bias.data(), 1, 0};
        ep.act = Act::LEAKY_RELU, ep.alpha = 0.2f;
    }
    winograd_conv(tile, s, x.data(), u.data(), y.data(), ep, pool);
    // First the reference and each output's magnitude, then the comparison: an output also
    // carries the rounding of its m x m block's other values (F(6,3)'s transforms scale them by
    // up to ~5; an output whose window lies outside the image is 0 plus that rounding).
    const int64_t m = static_cast<int64_t>(tile);
    std::vector<double> ref(y.size()), mags(y.size());
    for (int64_t k = 0; k < c.K; ++k)
        for (int64_t oy = 0; oy < s.Ho; ++oy)
            for (int64_t ox = 0; ox < s.Wo; ++ox) {
                double sum = c.residual ? 0.0 : bias[size_t(k)], mag = std::abs(sum);
                for (int64_t ch = 0; ch < c.C; ++ch)
                    for (int64_t ky = 0; ky < 3; ++ky)
                        for (int64_t kx = 0; kx < 3; ++kx) {
                            int64_t iy = oy + ky - c.pt, ix = ox + kx - c.pl;
                            if (iy < 0 || iy >= c.H || ix < 0 || ix >= c.W) continue;
                            double p = double(w[size_t(((k * c.C + ch) * 3 + ky) * 3 + kx)]) *
                                       x[size_t((ch * c.H + iy) * c.W + ix)];
                            sum += p, mag += std::abs(p);
                        }
                const size_t at = size_t((k * s.Ho + oy) * s.Wo + ox);
                if (c.residual) {
                    // sigmoid's slope is at most 1/4, so the sum's error shrinks through it
                    sum = 1 / (1 + std::exp(-0.5 * sum)) + res[at];
                    mag = 0.5 * mag + std::abs(res[at]);
                } else if (sum < 0) {
                    sum *= 0.2;
                }
                ref[at] = sum, mags[at] = mag;
            }
    int64_t bad = 0;
    for (int64_t k = 0; k < c.K; ++k)
        for (int64_t oy = 0; oy < s.Ho; ++oy)
            for (int64_t ox = 0; ox < s.Wo; ++ox) {
                double block = 0;
                for (int64_t by = oy / m * m; by < std::min(s.Ho, oy / m * m + m); ++by)
                    for (int64_t bx = ox / m * m; bx < std::min(s.Wo, ox / m * m + m); ++bx)
                        block = std::max(block, mags[size_t((k * s.Ho + by) * s.Wo + bx)]);
                const size_t at = size_t((k * s.Ho + oy) * s.Wo + ox);
                const double got = y[at];
                if (!(std::abs(got - ref[at]) <= 2e-5 * mags[at] + 2e-6 * block + 1e-30) && ++bad <= 5)
                    ADD_FAILURE() << "y[" << k << "," << oy << "," << ox << "] = " << got << ", want " << ref[at];
            }
    EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cpu, Winograd,
    ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                       ::testing::Values(WinogradTile::F43, WinogradTile::F23, WinogradTile::F63),
                       ::testing::Values(Case{1, 1, 3, 3, 1, 1, 1, 1}, Case{3, 5, 1, 1, 1, 1, 1, 1},
                                         Case{1, 2, 1, 1, 2, 2, 2, 2, true}, Case{7, 13, 9, 37, 1, 1, 1, 1},
                                         Case{16, 16, 4, 4, 0, 0, 0, 0}, Case{5, 6, 11, 130, 2, 0, 1, 3},
                                         Case{3, 17, 29, 31, 1, 1, 1, 1, true}, Case{4, 3, 13, 67, 0, 1, 2, 0},
                                         Case{3, 64, 23, 19, 1, 1, 1, 1}, Case{64, 64, 20, 135, 1, 1, 1, 1},
                                         Case{17, 48, 33, 8, 1, 1, 1, 1, true})),
    [](const auto& info) {
        const Case c = std::get<2>(info.param);
        return std::string(isa_name(std::get<0>(info.param))) + "_f" +
               std::to_string(static_cast<int>(std::get<1>(info.param))) + "3_c" + std::to_string(c.C) + "k" +
               std::to_string(c.K) + "_" + std::to_string(c.H) + "x" + std::to_string(c.W) + "_p" +
               std::to_string(c.pt) + std::to_string(c.pl) + std::to_string(c.pb) + std::to_string(c.pr) +
               (c.residual ? "_residual" : "");
    });

// V's panels (winograd.hpp): a block's tiles_gemm tiles in nr-wide panels, then at most one
// 16-wide and one 8-wide, each tile in exactly one place, runs of 8 never split.
TEST(WinogradPanels, CoverEveryTileOnceInFullPanelsThenSixteenThenEight) {
    for (int64_t nr : {16, 32})
        for (int64_t tiles = 8; tiles <= 136; tiles += 8) {
            SCOPED_TRACE(::testing::Message() << "nr " << nr << ", " << tiles << " tiles");
            const int64_t count = winograd_panel_count(tiles, nr);
            std::vector<int64_t> width(static_cast<size_t>(count), 0), filled(static_cast<size_t>(count), 0);
            for (int64_t tile = 0; tile < tiles; ++tile) {
                const WinogradPanel p = winograd_panel(tile, tiles, nr);
                ASSERT_GE(p.q, 0);
                ASSERT_LT(p.q, count);
                ASSERT_TRUE(p.width == nr || p.width == 16 || p.width == 8);
                if (width[size_t(p.q)] == 0) {
                    width[size_t(p.q)] = p.width;
                }
                ASSERT_EQ(width[size_t(p.q)], p.width);
                ASSERT_EQ(p.at, filled[size_t(p.q)]++);  // in order, no gap, no repeat
                if (tile % 8 == 0) {
                    EXPECT_LE(p.at + 8, p.width);
                }
            }
            int64_t sum = 0;
            for (int64_t q = 0; q < count; ++q) {
                EXPECT_EQ(filled[size_t(q)], width[size_t(q)]);  // every panel full
                if (q > 0) {
                    EXPECT_LE(width[size_t(q)], width[size_t(q - 1)]);
                }
                sum += width[size_t(q)];
            }
            EXPECT_EQ(sum, tiles);
        }
}

// The output transforms apply a bias + RELU / LEAKY_RELU / PRELU epilogue themselves
// (WinogradEpilogue): on every level the result equals the transform without it followed by
// apply_epilogue, bit for bit, a NaN input (kept by every activation) and per-channel and
// shared PReLU slopes included.
TEST(WinogradFusedEpilogue, MatchesApplyEpilogueBitForBit) {
    ThreadPool pool(2);
    const Case c{7, 13, 9, 37, 1, 1, 1, 1};
    std::mt19937 rng(2024);
    auto x = loom::test::random_floats(rng, static_cast<size_t>(c.C * c.H * c.W));
    x[static_cast<size_t>(3 * c.W + 17)] = std::nanf("");
    const auto w = loom::test::random_floats(rng, static_cast<size_t>(c.K * c.C * 9));
    const auto bias = loom::test::random_floats(rng, static_cast<size_t>(c.K));
    const auto slope = loom::test::random_floats(rng, static_cast<size_t>(c.K), 0.05f, 0.5f);
    const Conv2dShape s{c.C, c.H, c.W, c.K, c.H, c.W, 1, 1};
    const int64_t plane = s.Ho * s.Wo;
    for (Isa level : loom::test::supported_isas())
        for (WinogradTile tile : {WinogradTile::F43, WinogradTile::F23, WinogradTile::F63})
            for (int variant = 0; variant < 5; ++variant) {
                SCOPED_TRACE(::testing::Message()
                             << isa_name(level) << " f" << static_cast<int>(tile) << "3 variant " << variant);
                loom::test::IsaGuard guard(level);
                std::vector<float> u(winograd_weights_floats(tile, c.K, c.C));
                winograd_transform_weights(tile, w.data(), c.K, c.C, u.data());
                Epilogue ep;
                ep.bias = {bias.data(), 1, 0};
                if (variant == 1) ep.act = Act::RELU;
                if (variant == 2) ep.act = Act::LEAKY_RELU, ep.alpha = 0.1f;
                if (variant == 3) ep.act = Act::PRELU, ep.slope = {slope.data(), 1, 0};
                if (variant == 4) ep.act = Act::PRELU, ep.slope = {slope.data(), 0, 0};
                std::vector<float> fused(static_cast<size_t>(c.K * plane)), apart(fused.size());
                winograd_conv(tile, s, x.data(), u.data(), fused.data(), ep, pool);
                winograd_conv(tile, s, x.data(), u.data(), apart.data(), Epilogue{}, pool);
                for (int64_t k = 0; k < c.K; ++k) apply_epilogue(ep, apart.data() + k * plane, k, 0, plane);
                EXPECT_EQ(std::memcmp(fused.data(), apart.data(), fused.size() * sizeof(float)), 0);
                EXPECT_TRUE(std::isnan(fused[static_cast<size_t>(3 * c.W + 17)]));
            }
}

// AVX-512's transforms and 6 x 32 GEMM compute every value with AVX2's operations in the same
// order (winograd.hpp), so the two agree bit for bit: both tile sizes, blocks of 16 and 32
// tiles (a 16-wide last V panel under AVX-512), partial tiles and image edges, an epilogue, and
// a conv wide enough (C x K >= 8192) for AVX-512 to take its 6 x 16 kernel throughout.
TEST(WinogradIsas, Avx512MatchesAvx2BitForBit) {
    SKIP_UNLESS_ISA(Isa::AVX512);
    ThreadPool pool(2);
    for (WinogradTile tile : {WinogradTile::F43, WinogradTile::F23, WinogradTile::F63})
        for (Case c :
             {Case{3, 64, 23, 19, 1, 1, 1, 1}, Case{64, 64, 20, 135, 1, 1, 1, 1}, Case{5, 6, 11, 130, 2, 0, 1, 3},
              Case{17, 48, 33, 8, 1, 1, 1, 1}, Case{32, 16, 9, 257, 1, 1, 1, 1},
              Case{64, 130, 7, 75, 1, 1, 1, 1}}) {  // C x K >= 8192: AVX-512's 6 x 16 GEMMs
            SCOPED_TRACE(::testing::Message()
                         << "f" << static_cast<int>(tile) << "3 c" << c.C << "k" << c.K << " " << c.H << "x" << c.W);
            std::mt19937 rng(static_cast<uint32_t>(c.C * 1000 + c.K * 10 + c.H + c.W));
            const auto x = loom::test::random_floats(rng, static_cast<size_t>(c.C * c.H * c.W));
            const auto w = loom::test::random_floats(rng, static_cast<size_t>(c.K * c.C * 9));
            const auto bias = loom::test::random_floats(rng, static_cast<size_t>(c.K));
            Conv2dShape s{c.C, c.H, c.W, c.K, c.H + c.pt + c.pb - 2, c.W + c.pl + c.pr - 2, c.pt, c.pl};
            std::vector<float> u(winograd_weights_floats(tile, c.K, c.C));
            winograd_transform_weights(tile, w.data(), c.K, c.C, u.data());
            Epilogue ep;
            ep.bias = {bias.data(), 1, 0}, ep.act = Act::LEAKY_RELU, ep.alpha = 0.2f;
            std::vector<float> y[2];
            for (int i = 0; i < 2; ++i) {
                loom::test::IsaGuard guard(i ? Isa::AVX512 : Isa::AVX2);
                y[i].assign(static_cast<size_t>(c.K * s.Ho * s.Wo), std::nanf(""));
                winograd_conv(tile, s, x.data(), u.data(), y[i].data(), ep, pool);
            }
            EXPECT_EQ(std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)), 0);
        }
}

// The F(6,3) conv of x (C x H x W, pads 1) with w (K x C x 3 x 3) and `ep` (bias per channel) in
// slices of 16 output channels into y: each slice's map is too small to stream.
template <typename In, typename Out>
void conv_in_slices(const std::vector<In>& x, const std::vector<float>& w, const std::vector<float>& bias,
                    const Epilogue& ep, int64_t C, int64_t H, int64_t W, int64_t K, Out* y, ThreadPool& pool) {
    constexpr int64_t kSlice = 16;
    for (int64_t k0 = 0; k0 < K; k0 += kSlice) {
        std::vector<float> us(winograd_weights_floats(WinogradTile::F63, kSlice, C));
        winograd_transform_weights(WinogradTile::F63, w.data() + k0 * C * 9, kSlice, C, us.data());
        Epilogue eps = ep;
        eps.bias = {bias.data() + k0, 1, 0};
        winograd_conv(WinogradTile::F63, Conv2dShape{C, H, W, kSlice, H, W, 1, 1}, x.data(), us.data(), y + k0 * H * W,
                      eps, pool);
    }
}

// An output map of kWinogradStreamBytes or more goes out through non-temporal stores (AVX2 and
// AVX-512's F(6,3)): every value is written, a sample of them matches a float64 direct conv, and
// the map equals, bit for bit, the same conv run as 16-channel slices (maps too small to
// stream); the two levels agree. Odd sizes: clipped last tile rows and columns, rows starting at
// every alignment.
TEST(WinogradStream, LargeMapsAreWrittenWhole) {
    ThreadPool pool(2);
    const int64_t C = 4, K = 128, H = 256, W = 257;  // 128 x 256 x 257 fp32: 33.7 MB
    ASSERT_GE(K * H * W * 4, kWinogradStreamBytes);
    std::mt19937 rng(99);
    const auto x = loom::test::random_floats(rng, static_cast<size_t>(C * H * W));
    const auto w = loom::test::random_floats(rng, static_cast<size_t>(K * C * 9));
    const auto bias = loom::test::random_floats(rng, static_cast<size_t>(K));
    const Conv2dShape s{C, H, W, K, H, W, 1, 1};
    std::vector<float> u(winograd_weights_floats(WinogradTile::F63, K, C));
    winograd_transform_weights(WinogradTile::F63, w.data(), K, C, u.data());
    Epilogue ep;
    ep.bias = {bias.data(), 1, 0}, ep.act = Act::RELU;
    std::vector<std::vector<float>> ys;
    for (Isa level : {Isa::AVX2, Isa::AVX512}) {
        if (!isa_supported(level)) continue;
        SCOPED_TRACE(isa_name(level));
        loom::test::IsaGuard guard(level);
        std::vector<float> y(static_cast<size_t>(K * H * W), std::nanf(""));
        winograd_conv(WinogradTile::F63, s, x.data(), u.data(), y.data(), ep, pool);
        int64_t unwritten = 0;
        for (float v : y) unwritten += std::isnan(v);
        EXPECT_EQ(unwritten, 0);
        std::uniform_int_distribution<int64_t> pick(0, K * H * W - 1);
        for (int n = 0; n < 3000; ++n) {
            const int64_t at = pick(rng), k = at / (H * W), oy = at / W % H, ox = at % W;
            double sum = bias[size_t(k)], mag = std::abs(sum);
            for (int64_t c = 0; c < C; ++c)
                for (int64_t ky = 0; ky < 3; ++ky)
                    for (int64_t kx = 0; kx < 3; ++kx) {
                        const int64_t iy = oy + ky - 1, ix = ox + kx - 1;
                        if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                        const double p = double(w[size_t(((k * C + c) * 3 + ky) * 3 + kx)]) *
                                         x[size_t((c * H + iy) * W + ix)];
                        sum += p, mag += std::abs(p);
                    }
            ASSERT_NEAR(y[size_t(at)], std::max(sum, 0.0), 2e-5 * mag + 1e-5) << "output " << at;
        }
        std::vector<float> sliced(y.size(), std::nanf(""));  // maps of 4.2 MB: ordinary stores
        conv_in_slices(x, w, bias, ep, C, H, W, K, sliced.data(), pool);
        EXPECT_EQ(std::memcmp(sliced.data(), y.data(), y.size() * sizeof(float)), 0);
        ys.push_back(std::move(y));
    }
    if (ys.size() == 2) {
        EXPECT_EQ(std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * sizeof(float)), 0);
    }
}

// The same for an fp16 output map of kWinogradStreamBytes or more (its values rounded as every
// fp16 store rounds them): bit for bit the sliced conv's, on both levels.
TEST(WinogradStream, LargeFp16MapsAreWrittenWhole) {
    using loom::device::f16;
    ThreadPool pool(2);
    const int64_t C = 3, K = 128, H = 362, W = 365;  // 128 x 362 x 365 fp16: 33.8 MB
    ASSERT_GE(K * H * W * 2, kWinogradStreamBytes);
    std::mt19937 rng(7);
    const auto xf = loom::test::random_floats(rng, static_cast<size_t>(C * H * W));
    std::vector<f16> x(xf.size());
    vec_f32_to_f16(xf.data(), x.data(), static_cast<int64_t>(x.size()));
    const auto w = loom::test::random_floats(rng, static_cast<size_t>(K * C * 9));
    const auto bias = loom::test::random_floats(rng, static_cast<size_t>(K));
    std::vector<float> u(winograd_weights_floats(WinogradTile::F63, K, C));
    winograd_transform_weights(WinogradTile::F63, w.data(), K, C, u.data());
    Epilogue ep;
    ep.bias = {bias.data(), 1, 0}, ep.act = Act::LEAKY_RELU, ep.alpha = 0.1f;
    std::vector<std::vector<f16>> ys;
    for (Isa level : {Isa::AVX2, Isa::AVX512}) {
        if (!isa_supported(level)) continue;
        SCOPED_TRACE(isa_name(level));
        loom::test::IsaGuard guard(level);
        std::vector<f16> y(static_cast<size_t>(K * H * W), f16{0x7e00}), sliced(y.size(), f16{0x7e00});
        winograd_conv(WinogradTile::F63, Conv2dShape{C, H, W, K, H, W, 1, 1}, x.data(), u.data(), y.data(), ep, pool);
        conv_in_slices(x, w, bias, ep, C, H, W, K, sliced.data(), pool);  // maps of 4.2 MB: ordinary stores
        int64_t unwritten = 0;
        for (f16 v : y) unwritten += v.bits == 0x7e00;
        EXPECT_EQ(unwritten, 0);
        EXPECT_EQ(std::memcmp(sliced.data(), y.data(), y.size() * sizeof(f16)), 0);
        ys.push_back(std::move(y));
    }
    if (ys.size() == 2) {
        EXPECT_EQ(std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * sizeof(f16)), 0);
    }
}

// fp16 maps (an fp16 model's activations): reading an fp16 x and writing an fp16 y gives the bits
// of converting x to fp32, running the fp32 conv and rounding y once, on every level, tile size,
// partial group and image edge, and for a conv wide enough (C x K >= 8192) for AVX-512's 6 x 16
// GEMMs, with a fused epilogue (bias + leaky_relu), one the transform cannot apply (scale,
// sigmoid, an fp16 residual read in place: the driver's fp32 block path) and none; a value beyond
// fp16's range, inside the image, rounds to infinity alike. The fp16-in fp32-out and fp32-in
// fp16-out mixes (with the residual widened) as well.
TEST(WinogradHalf, MatchesTheFp32ConvOnTheConvertedMapRoundedOnce) {
    using loom::device::f16;
    ThreadPool pool(2);
    for (Isa level : loom::test::supported_isas())
        for (WinogradTile tile : {WinogradTile::F43, WinogradTile::F23, WinogradTile::F63})
            for (Case c : {Case{7, 13, 9, 37, 1, 1, 1, 1}, Case{5, 6, 11, 130, 2, 0, 1, 3},
                           Case{17, 48, 33, 8, 1, 1, 1, 1, true}, Case{3, 17, 29, 31, 1, 1, 1, 1, true},
                           Case{1, 2, 1, 1, 2, 2, 2, 2}, Case{64, 130, 7, 40, 1, 1, 1, 1, true}})
                for (int epilogue = 0; epilogue < 2; ++epilogue) {
                    SCOPED_TRACE(::testing::Message() << isa_name(level) << " f" << static_cast<int>(tile) << "3 c"
                                                      << c.C << "k" << c.K << " " << c.H << "x" << c.W
                                                      << (c.residual ? " residual" : "") << " epilogue " << epilogue);
                    loom::test::IsaGuard guard(level);
                    std::mt19937 rng(static_cast<uint32_t>(c.C * 1000 + c.K * 10 + c.H + c.W));
                    auto x = loom::test::random_floats(rng, static_cast<size_t>(c.C * c.H * c.W), -4.0f, 4.0f);
                    x[x.size() / 2] = 70000.0f;  // rounds to infinity in fp16
                    const auto w = loom::test::random_floats(rng, static_cast<size_t>(c.K * c.C * 9));
                    const auto bias = loom::test::random_floats(rng, static_cast<size_t>(c.K));
                    const Conv2dShape s{c.C, c.H, c.W, c.K, c.H + c.pt + c.pb - 2, c.W + c.pl + c.pr - 2, c.pt, c.pl};
                    const size_t out = static_cast<size_t>(c.K * s.Ho * s.Wo);
                    auto half = [](const std::vector<float>& v) {
                        std::vector<f16> h(v.size());
                        vec_f32_to_f16(v.data(), h.data(), static_cast<int64_t>(v.size()));
                        return h;
                    };
                    auto wide = [](const std::vector<f16>& h) {
                        std::vector<float> v(h.size());
                        vec_f16_to_f32(h.data(), v.data(), static_cast<int64_t>(h.size()));
                        return v;
                    };
                    const std::vector<f16> xh = half(x), rh = half(loom::test::random_floats(rng, out));
                    const std::vector<float> xw = wide(xh), rw = wide(rh);  // as the fp16 model holds them
                    std::vector<float> u(winograd_weights_floats(tile, c.K, c.C));
                    winograd_transform_weights(tile, w.data(), c.K, c.C, u.data());
                    Epilogue ep;  // with the widened residual
                    if (epilogue && c.residual) {
                        ep.scale = 0.5f, ep.act = Act::SIGMOID;
                        ep.residual = {rw.data(), s.Ho * s.Wo, 1}, ep.residual_after_act = true;
                    } else if (epilogue) {
                        ep.bias = {bias.data(), 1, 0}, ep.act = Act::LEAKY_RELU, ep.alpha = 0.2f;
                    }
                    Epilogue ep_h = ep;  // with the fp16 residual read in place
                    if (ep.residual.p) ep_h.residual = {nullptr, s.Ho * s.Wo, 1, rh.data()};
                    std::vector<float> want(out);
                    winograd_conv(tile, s, xw.data(), u.data(), want.data(), ep, pool);
                    const std::vector<f16> want_h = half(want);
                    std::vector<f16> got_h(out, f16{0x7e00});
                    winograd_conv(tile, s, xh.data(), u.data(), got_h.data(), ep_h, pool);
                    EXPECT_EQ(std::memcmp(got_h.data(), want_h.data(), out * sizeof(f16)), 0);
                    std::vector<float> got(out, std::nanf(""));
                    winograd_conv(tile, s, xh.data(), u.data(), got.data(), ep, pool);
                    EXPECT_EQ(std::memcmp(got.data(), want.data(), out * sizeof(float)), 0);
                    std::fill(got_h.begin(), got_h.end(), f16{0x7e00});
                    winograd_conv(tile, s, xw.data(), u.data(), got_h.data(), ep, pool);
                    EXPECT_EQ(std::memcmp(got_h.data(), want_h.data(), out * sizeof(f16)), 0);
                }
}

// The integer F(4,3) driver itself (cpu/winograd_i8.hpp), not through the conv kernel, which
// would fall back to the int8 GEMM unseen: quantized X laid into phase planes, random int8
// weights, the epilogue a dequantize factor of 1, so every output must be float(Y) of the int64
// direct sum, exactly (|Y| < 2^24). Shapes: odd C and K, partial tiles and groups, a row of 36
// tiles (two blocks), asymmetric and no padding.
struct I8Case {
    int64_t C, K, H, W, pt, pl, pb, pr;
};

class WinogradI8 : public ::testing::TestWithParam<std::tuple<Isa, I8Case>> {};

TEST_P(WinogradI8, GivesTheExactInt32Sums) {
    auto [want, c] = GetParam();
    SKIP_UNLESS_ISA(want);
    loom::test::IsaGuard isa_guard(want);
    const int64_t Ho = c.H + c.pt + c.pb - 2, Wo = c.W + c.pl + c.pr - 2;
    std::vector<int8_t> x = loom::test::random_int8(size_t(c.C * c.H * c.W), uint32_t(c.C + c.W));
    for (int8_t& v : x) v = v == -128 ? int8_t{-127} : v;  // quantized activations are in [-127, 127]
    const std::vector<int8_t> w = loom::test::random_int8(size_t(c.K * c.C * 9), uint32_t(c.K + c.H));
    ASSERT_TRUE(winograd_i8_exact(w.data(), c.K, c.C));
    const WinogradI8PlaneShape ps = winograd_i8_plane_shape(Ho, Wo);
    std::vector<int8_t> planes(winograd_i8_plane_bytes(c.C, ps)), padded(size_t(4 * ps.tq));
    for (int64_t ch = 0; ch < c.C; ++ch)
        for (int64_t r = 0; r < ps.rows; ++r) {
            std::fill(padded.begin(), padded.end(), int8_t{0});
            const int64_t iy = r - c.pt;
            if (iy >= 0 && iy < c.H) std::copy_n(x.begin() + (ch * c.H + iy) * c.W, c.W, padded.begin() + c.pl);
            winograd_i8_phase_row(padded.data(), ps.tq, planes.data() + (ch * ps.rows + r) * 4 * ps.tq);
        }
    std::vector<int16_t> u(winograd_i8_weights_i16(c.K, c.C));
    winograd_i8_transform_weights(w.data(), c.K, c.C, u.data());
    const float one = 1.0f;
    Epilogue ep;
    ep.dequant = {&one, 0, 0};
    std::vector<float> y(size_t(c.K * Ho * Wo), std::nanf(""));
    ThreadPool pool(2);
    winograd_i8_conv({c.C, c.H, c.W, c.K, Ho, Wo, c.pt, c.pl}, {planes.data(), ps.rows, ps.tq}, u.data(), y.data(), ep,
                     pool);
    for (int64_t k = 0; k < c.K; ++k)
        for (int64_t oy = 0; oy < Ho; ++oy)
            for (int64_t ox = 0; ox < Wo; ++ox) {
                int64_t sum = 0;
                for (int64_t ch = 0; ch < c.C; ++ch)
                    for (int64_t ky = 0; ky < 3; ++ky)
                        for (int64_t kx = 0; kx < 3; ++kx) {
                            const int64_t iy = oy + ky - c.pt, ix = ox + kx - c.pl;
                            if (iy < 0 || iy >= c.H || ix < 0 || ix >= c.W) continue;
                            sum += int64_t{x[size_t((ch * c.H + iy) * c.W + ix)]} *
                                   w[size_t(((k * c.C + ch) * 3 + ky) * 3 + kx)];
                        }
                ASSERT_EQ(y[size_t((k * Ho + oy) * Wo + ox)], float(sum))
                    << "k " << k << ", oy " << oy << ", ox " << ox;
            }
}

INSTANTIATE_TEST_SUITE_P(Cpu, WinogradI8,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Values(I8Case{5, 7, 9, 70, 1, 1, 1, 1},
                                                              I8Case{64, 13, 6, 141, 2, 0, 1, 2},
                                                              I8Case{3, 32, 5, 6, 0, 0, 0, 0})));

}  // namespace

// ---- cpu::direct_conv (direct_conv.hpp) --------------------------------------------------------

namespace {

// The direct window against a float64 sum on every instruction set: a partial block of
// channels and two blocks, an uneven window, a leading pad before the image and one inside it
// (negative), rows of several passes with partial ones at both edges, fp32 and fp16 X.
// Tolerance: 1e-6 x sum |w x| + 1e-7 (single-precision sums of up to C x th x tw products).
struct DirectCase {
    int64_t C, K, H, W, th, tw, pt, pl, Ho, Wo;
};

class DirectConv : public ::testing::TestWithParam<std::tuple<Isa, DirectCase>> {};

TEST_P(DirectConv, MatchesFloat64DirectSums) {
    const Isa want = std::get<0>(GetParam());
    const DirectCase c = std::get<1>(GetParam());  // not a structured binding: the lambda below takes it
    SKIP_UNLESS_ISA(want);
    loom::test::IsaGuard isa_guard(want);
    ThreadPool pool(2);
    std::mt19937 rng(static_cast<uint32_t>(c.C * 131 + c.K * 7 + c.W));
    std::vector<float> x = loom::test::random_floats(rng, size_t(c.C * c.H * c.W));
    std::vector<float> w = loom::test::random_floats(rng, size_t(c.K * c.C * c.th * c.tw));
    std::vector<float> wp(direct_conv_weights_floats(c.K, c.C, c.th, c.tw));
    direct_conv_pack_weights(w.data(), c.K, c.C, c.th, c.tw, wp.data());
    const Conv2dShape s{c.C, c.H, c.W, c.K, c.Ho, c.Wo, c.pt, c.pl};
    // The float64 sums of the window over `xv`, and their magnitudes.
    auto reference = [&](const std::vector<float>& xv, std::vector<double>& ref, std::vector<double>& mag) {
        ref.assign(size_t(c.K * c.Ho * c.Wo), 0.0), mag.assign(ref.size(), 0.0);
        for (int64_t k = 0; k < c.K; ++k)
            for (int64_t oy = 0; oy < c.Ho; ++oy)
                for (int64_t ox = 0; ox < c.Wo; ++ox)
                    for (int64_t ci = 0; ci < c.C; ++ci)
                        for (int64_t ty = 0; ty < c.th; ++ty)
                            for (int64_t tx = 0; tx < c.tw; ++tx) {
                                const int64_t iy = oy - c.pt + ty, ix = ox - c.pl + tx;
                                if (iy < 0 || iy >= c.H || ix < 0 || ix >= c.W) continue;
                                const double p = double(xv[size_t((ci * c.H + iy) * c.W + ix)]) *
                                                 w[size_t(((k * c.C + ci) * c.th + ty) * c.tw + tx)];
                                const size_t o = size_t((k * c.Ho + oy) * c.Wo + ox);
                                ref[o] += p, mag[o] += std::abs(p);
                            }
    };
    for (bool half : {false, true}) {
        SCOPED_TRACE(half ? "fp16 X" : "fp32 X");
        std::vector<loom::device::f16> xh;
        std::vector<float> xw = x;
        if (half) {  // the reference of the widened fp16 values
            xh = loom::test::round_to_f16(x);
            xw = loom::test::widen_f16(xh);
        }
        std::vector<double> ref, mag;
        reference(xw, ref, mag);
        std::vector<float> y(ref.size(), std::nanf(""));
        const WinogradIn in = half ? WinogradIn(xh.data()) : WinogradIn(xw.data());
        direct_conv(s, c.th, c.tw, in, wp.data(), y.data(), pool);
        int64_t bad = 0;
        for (size_t o = 0; o < y.size(); ++o)
            if (!(std::abs(double(y[o]) - ref[o]) <= 1e-6 * mag[o] + 1e-7)) ++bad;
        EXPECT_EQ(bad, 0) << "of " << y.size() << " outputs";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Levels, DirectConv,
    ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                       ::testing::Values(DirectCase{5, 7, 6, 45, 2, 3, 1, 1, 7, 45},     // a partial block
                                         DirectCase{9, 14, 5, 70, 2, 2, -1, 0, 3, 68},  // two blocks, pad inside
                                         DirectCase{3, 12, 4, 3, 3, 3, 2, 2, 6, 5})),   // narrower than a pass
    [](const auto& info) {
        const DirectCase& c = std::get<1>(info.param);
        return std::string(isa_name(std::get<0>(info.param))) + "_C" + std::to_string(c.C) + "_K" +
               std::to_string(c.K) + "_W" + std::to_string(c.W);
    });

}  // namespace

}  // namespace test_cpu_winograd
