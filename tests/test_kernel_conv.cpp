// conv (device/kernels/conv.cpp) against a float64 direct convolution written here, for every
// host path (Winograd, depthwise, im2col GEMM, 1x1 GEMM) on both instruction sets, 1-D and 2-D,
// groups, strides, dilations, pads and auto_pad, odd sizes, every fused epilogue, f32 and f16.
// Tolerance: f32 |y - ref| <= 2e-5 * (sum |w x| + |bias| + |residual|) (Winograd's transforms
// add a few roundings of values up to ~10x the inputs); f16 inputs are exactly representable,
// so f16 output must be the reference rounded to f16 within 1 ulp (fp32 accumulation).
// Errors name the tensor or attribute; cost is positive, grows with work, refuses bad tilings.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "test_util.hpp"

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using loom::test::IsaGuard;
using loom::test::element_count;
using loom::test::expect_within_bound;
using loom::test::ref_activation;
using loom::test::round_to_f16;
using loom::test::shape_ref;

const KernelDef& conv_kernel() { return loom::test::registered_kernel("conv"); }

struct Case {
    std::string name;
    int64_t n, c, k, h, w, kh, kw;  // h = 0: 1-D conv
    int64_t group = 1, sh = 1, sw = 1, dh = 1, dw = 1;
    std::vector<int64_t> pads = {};  // empty: none
    std::string auto_pad = "";
    std::string act = "none";
    bool bias = true, residual = false, after = false;
};

struct Geo {
    int64_t ho, wo, pt, pl;
};

Geo geometry(const Case& c) {
    auto out = [](int64_t in, int64_t k, int64_t s, int64_t d, int64_t& pb, int64_t& pe, const std::string& ap) {
        const int64_t span = (k - 1) * d + 1;
        if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
            int64_t o = (in + s - 1) / s, total = std::max<int64_t>(0, (o - 1) * s + span - in);
            pb = ap == "SAME_UPPER" ? total / 2 : total - total / 2, pe = total - pb;
        }
        return (in + pb + pe - span) / s + 1;
    };
    const bool two = c.h > 0;
    int64_t pt = 0, pb = 0, pl = 0, pr = 0;
    if (!c.pads.empty()) {
        if (two) pt = c.pads[0], pl = c.pads[1], pb = c.pads[2], pr = c.pads[3];
        else pl = c.pads[0], pr = c.pads[1];
    }
    Geo g;
    g.ho = two ? out(c.h, c.kh, c.sh, c.dh, pt, pb, c.auto_pad) : 1;
    g.wo = out(c.w, c.kw, c.sw, c.dw, pl, pr, c.auto_pad);
    g.pt = pt, g.pl = pl;
    return g;
}

KernelAttrs attrs_of(const Case& c) {
    KernelAttrs a;
    const bool two = c.h > 0;
    if (c.group != 1) a.set("group", c.group);
    a.set("strides", two ? std::vector<int64_t>{c.sh, c.sw} : std::vector<int64_t>{c.sw});
    a.set("dilations", two ? std::vector<int64_t>{c.dh, c.dw} : std::vector<int64_t>{c.dw});
    if (!c.pads.empty()) a.set("pads", c.pads);
    if (!c.auto_pad.empty()) a.set("auto_pad", c.auto_pad);
    if (c.act != "none") a.set("activation", c.act);
    if (c.act == "leaky_relu") a.set("alpha", 0.125);
    if (c.act == "clip") a.set("min", -0.25).set("max", 0.5);
    if (c.after) a.set("residual_after_activation", int64_t{1});
    return a;
}

// The float64 result and the magnitude bound of each output.
void reference(const Case& c, const Geo& g, const std::vector<float>& x, const std::vector<float>& w,
               const std::vector<float>& b, const std::vector<float>& r, const std::vector<float>& s,
               std::vector<double>& out, std::vector<double>& mag) {
    const int64_t H = c.h > 0 ? c.h : 1, kh = c.h > 0 ? c.kh : 1, cg = c.c / c.group, kg = c.k / c.group;
    out.assign(size_t(c.n * c.k * g.ho * g.wo), 0), mag.assign(out.size(), 0);
    for (int64_t n = 0; n < c.n; ++n)
        for (int64_t k = 0; k < c.k; ++k)
            for (int64_t oy = 0; oy < g.ho; ++oy)
                for (int64_t ox = 0; ox < g.wo; ++ox) {
                    const size_t o = size_t(((n * c.k + k) * g.ho + oy) * g.wo + ox);
                    double sum = 0, m = 0;
                    const int64_t grp = k / kg;
                    for (int64_t ci = 0; ci < cg; ++ci)
                        for (int64_t ky = 0; ky < kh; ++ky)
                            for (int64_t kx = 0; kx < c.kw; ++kx) {
                                int64_t iy = oy * c.sh + ky * c.dh - g.pt, ix = ox * c.sw + kx * c.dw - g.pl;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= c.w) continue;
                                double p = double(w[size_t(((k * cg + ci) * kh + ky) * c.kw + kx)]) *
                                           x[size_t(((n * c.c + grp * cg + ci) * H + iy) * c.w + ix)];
                                sum += p, m += std::abs(p);
                            }
                    if (c.bias) sum += b[size_t(k)], m += std::abs(b[size_t(k)]);
                    const double rv = c.residual ? r[o] : 0;
                    if (c.residual && !c.after) sum += rv, m += std::abs(rv);
                    sum = ref_activation(c.act, sum, s[size_t(k)]);
                    if (c.residual && c.after) sum += rv, m += std::abs(rv);
                    out[o] = sum, mag[o] = m;
                }
}

struct Data {
    std::vector<float> x, w, b, r, s;
    std::vector<int64_t> xd, wd, yd;
};

Data make_data(const Case& c, const Geo& g, uint32_t seed) {
    std::mt19937 rng(seed);
    Data d;
    const bool two = c.h > 0;
    d.xd = two ? std::vector<int64_t>{c.n, c.c, c.h, c.w} : std::vector<int64_t>{c.n, c.c, c.w};
    d.wd = two ? std::vector<int64_t>{c.k, c.c / c.group, c.kh, c.kw} : std::vector<int64_t>{c.k, c.c / c.group, c.kw};
    d.yd = two ? std::vector<int64_t>{c.n, c.k, g.ho, g.wo} : std::vector<int64_t>{c.n, c.k, g.wo};
    d.x = loom::test::random_floats(rng, size_t(element_count(d.xd)));
    d.w = loom::test::random_floats(rng, size_t(element_count(d.wd)));
    d.b = loom::test::random_floats(rng, size_t(c.k));
    d.r = loom::test::random_floats(rng, size_t(element_count(d.yd)));
    d.s = loom::test::random_floats(rng, size_t(c.k), 0.05f, 0.5f);
    return d;
}

const std::vector<Case>& cases() {
    static const std::vector<Case> v = {
        {"winograd_64to64", 1, 64, 64, 19, 23, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "prelu"},
        {"winograd_odd_channels_batch2", 2, 9, 17, 13, 11, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "relu", true, true},
        {"winograd_no_pad_residual_after", 1, 16, 21, 10, 40, 3, 3, 1, 1, 1, 1, 1, {}, "", "leaky_relu", false, true, true},
        {"im2col_3to64_first_layer", 1, 3, 64, 20, 29, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "prelu"},
        {"im2col_stride2_dilation2", 2, 5, 7, 31, 17, 3, 5, 1, 2, 2, 2, 1, {2, 1, 0, 3}},
        {"im2col_groups", 1, 12, 18, 9, 14, 3, 3, 3, 1, 2, 1, 1, {1, 1, 1, 1}, "", "clip"},
        {"im2col_1x1_prime", 1, 1, 1, 1, 1, 1, 1},
        {"pointwise_1x1", 2, 37, 19, 7, 11, 1, 1, 1, 1, 1, 1, 1, {}, "", "sigmoid", true, true},
        {"pointwise_strided", 1, 8, 8, 9, 9, 1, 1, 1, 2, 2},
        {"depthwise_3x3", 2, 13, 13, 11, 9, 3, 3, 13, 1, 1, 1, 1, {1, 1, 1, 1}, "", "relu", true, true},
        {"depthwise_multiplier2_stride2", 1, 6, 12, 10, 15, 5, 5, 6, 2, 2, 1, 1, {2, 2, 2, 2}},
        {"same_upper_stride2", 1, 4, 6, 10, 13, 3, 3, 1, 2, 2, 1, 1, {}, "SAME_UPPER"},
        {"same_lower", 1, 4, 6, 10, 13, 4, 4, 1, 1, 1, 1, 1, {}, "SAME_LOWER"},
        {"valid_big_kernel", 1, 2, 3, 9, 9, 9, 9, 1, 1, 1, 1, 1, {}, "VALID"},
        {"conv1d", 2, 7, 5, 0, 50, 0, 3, 1, 1, 2, 1, 1, {1, 1}, "", "relu"},
        {"conv1d_depthwise", 1, 4, 4, 0, 33, 0, 5, 4, 1, 1, 1, 2, {4, 4}},
    };
    return v;
}

class ConvF32 : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(ConvF32, MatchesFloat64Reference) {
    auto [want, idx] = GetParam();
    const Case& c = cases()[idx];
    if (want == cpu::Isa::AVX2 && cpu::isa_detected() != cpu::Isa::AVX2) GTEST_SKIP() << "CPU lacks AVX2";
    IsaGuard isa_guard(want);
    const Geo g = geometry(c);
    Data d = make_data(c, g, static_cast<uint32_t>(idx * 7 + 1));
    std::vector<float> y(d.r.size(), std::nanf(""));
    KernelLaunch l;
    TensorRef empty = shape_ref(DType::F32, {0}, nullptr);
    l.inputs = {shape_ref(DType::F32, d.xd, d.x.data()), shape_ref(DType::F32, d.wd, d.w.data()),
                c.bias ? shape_ref(DType::F32, {c.k}, d.b.data()) : empty,
                c.residual ? shape_ref(DType::F32, d.yd, d.r.data()) : empty};
    if (c.act == "prelu") l.inputs.push_back(shape_ref(DType::F32, {c.k}, d.s.data()));
    l.outputs = {shape_ref(DType::F32, d.yd, y.data())};
    l.attrs = attrs_of(c);
    ThreadPool pool(2);
    loom::Status st = conv_kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    reference(c, g, d.x, d.w, d.b, d.r, d.s, ref, mag);
    expect_within_bound(y, ref, mag);
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvF32,
                         ::testing::Combine(::testing::Values(cpu::Isa::GENERIC, cpu::Isa::AVX2),
                                            ::testing::Range(size_t{0}, cases().size())),
                         [](const auto& info) {
                             return std::string(cpu::isa_name(std::get<0>(info.param))) + "_" +
                                    cases()[std::get<1>(info.param)].name;
                         });

class ConvF16 : public ::testing::TestWithParam<size_t> {};

TEST_P(ConvF16, MatchesFloat64RoundedToF16) {
    const Case& c = cases()[GetParam()];
    const Geo g = geometry(c);
    Data d = make_data(c, g, static_cast<uint32_t>(GetParam() * 11 + 3));
    // Round the inputs to f16 first so the reference sees the same values.
    auto xh = round_to_f16(d.x), wh = round_to_f16(d.w), bh = round_to_f16(d.b);
    auto rh = round_to_f16(d.r), sh = round_to_f16(d.s);
    std::vector<f16> y(d.r.size());
    KernelLaunch l;
    TensorRef empty = shape_ref(DType::F16, {0}, nullptr);
    l.inputs = {shape_ref(DType::F16, d.xd, xh.data()), shape_ref(DType::F16, d.wd, wh.data()),
                c.bias ? shape_ref(DType::F16, {c.k}, bh.data()) : empty,
                c.residual ? shape_ref(DType::F16, d.yd, rh.data()) : empty};
    if (c.act == "prelu") l.inputs.push_back(shape_ref(DType::F16, {c.k}, sh.data()));
    l.outputs = {shape_ref(DType::F16, d.yd, y.data())};
    l.attrs = attrs_of(c);
    ThreadPool pool(2);
    loom::Status st = conv_kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    reference(c, g, d.x, d.w, d.b, d.r, d.s, ref, mag);
    expect_within_bound(y, ref, mag);
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvF16, ::testing::Range(size_t{0}, cases().size()),
                         [](const auto& info) { return cases()[info.param].name; });

// ---- errors ----------------------------------------------------------------------------------

void expect_rejected(const KernelLaunch& l, StatusCode code, const std::string& needle) {
    ThreadPool pool(1);
    for (loom::Status st : {conv_kernel().run(l, pool), conv_kernel().cost(l, loom::test::preset_spec("edge")).status()}) {
        EXPECT_EQ(st.code(), code) << st.to_string();
        EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string() << "\nwanted: " << needle;
    }
}

TEST(ConvErrors, NameTheProblem) {
    std::vector<float> x(1 * 4 * 8 * 8, 1.0f), w(6 * 4 * 3 * 3, 1.0f), y(6 * 8 * 8), b(6), s(6);
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {1, 4, 8, 8}, x.data()), shape_ref(DType::F32, {6, 4, 3, 3}, w.data())};
    l.outputs = {shape_ref(DType::F32, {1, 6, 8, 8}, y.data())};
    l.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    ThreadPool pool(1);
    ASSERT_TRUE(conv_kernel().run(l, pool).ok());

    KernelLaunch bad = l;
    bad.outputs = {shape_ref(DType::F32, {1, 6, 6, 6}, y.data())};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "Y is 1x6x6x6 but X 1x4x8x8 and W 6x4x3x3 give 1x6x8x8");
    bad = l;
    bad.attrs.set("group", int64_t{3});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "group 3");
    bad = l;
    bad.attrs.set("strides", std::vector<int64_t>{1});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "attribute 'strides' needs 2 values, got 1");
    bad = l;
    bad.attrs.set("strides", std::vector<int64_t>{0, 1});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "attribute 'strides' holds 0");
    bad = l;
    bad.attrs.set("auto_pad", std::string("SAME"));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "auto_pad");
    bad = l;
    bad.attrs.set("dilation", std::vector<int64_t>{1, 1});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "unknown attribute 'dilation'");
    bad = l;
    bad.attrs.set("activation", std::string("prelu"));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "slope input S");
    bad = l;
    bad.inputs.push_back(shape_ref(DType::F32, {5}, b.data()));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "B is 5 f32, must hold K = 6");
    bad = l;
    bad.inputs[1] = shape_ref(DType::F16, {6, 4, 3, 3}, w.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "mixed dtypes");
    bad = l;
    bad.inputs[0] = shape_ref(DType::F32, {4, 8, 8}, x.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "same rank");
    bad = l;
    bad.attrs.set("kernel_shape", std::vector<int64_t>{5, 5});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "kernel_shape");
    bad = l;
    bad.attrs.set("activation", std::string("gelu"));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "activation 'gelu'");
    bad = l;
    bad.attrs.set("alpha", 0.5);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "'alpha' only applies");
    bad = l;
    bad.attrs = {{"pads", std::vector<int64_t>{0, 0, 0, 0}}};
    bad.inputs[1] = shape_ref(DType::F32, {6, 4, 9, 9}, w.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "larger than the padded input");
    std::vector<int32_t> xi(x.size());
    bad = l;
    bad.inputs[0] = shape_ref(DType::I32, {1, 4, 8, 8}, xi.data());
    expect_rejected(bad, StatusCode::UNSUPPORTED, "dtype i32");
}

// ---- cost --------------------------------------------------------------------------------------

KernelLaunch cost_launch(int64_t c, int64_t k, int64_t h, int64_t w, int64_t group = 1) {
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F16, {1, c, h, w}, nullptr), shape_ref(DType::F16, {k, c / group, 3, 3}, nullptr)};
    l.outputs = {shape_ref(DType::F16, {1, k, h, w}, nullptr)};
    l.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    if (group > 1) l.attrs.set("group", group);
    return l;
}

TEST(ConvCost, ScalesWithWorkAndRunsNearTheCubePeak) {
    for (const char* preset : {"edge", "dc"}) {
        const DeviceSpec& s = loom::test::preset_spec(preset);
        auto small = conv_kernel().cost(cost_launch(64, 64, 60, 80), s);
        auto big = conv_kernel().cost(cost_launch(64, 64, 240, 320), s);
        ASSERT_TRUE(small.ok() && big.ok()) << small.status().to_string() << big.status().to_string();
        EXPECT_GT(small->total, 0);
        EXPECT_GT(big->total, 8 * small->total);  // 16x the pixels
        EXPECT_DOUBLE_EQ(big->flops, 2.0 * 240 * 320 * 64 * 64 * 9);
        // A large conv keeps every core's Cube busy: within 3x of the fractal peak.
        const double fractals = 240.0 * 320 * 64 * 64 * 9 / (16.0 * 16 * 16);
        const double peak_cycles = fractals / static_cast<double>(s.aicore_count);
        EXPECT_LT(big->total, 3 * peak_cycles) << preset;
        EXPECT_GE(big->total, peak_cycles) << preset;
        // img2col in L1: global memory traffic is far below k copies of the input.
        EXPECT_LT(big->l2_miss_bytes, 4.0 * (64 * 240 * 320 * 2 + 64 * 64 * 9 * 2) * 2) << preset;
    }
}

TEST(ConvCost, DepthwiseRunsOnTheVectorUnitAndRefusesACubeTiling) {
    const DeviceSpec& s = loom::test::preset_spec("edge");
    KernelLaunch l = cost_launch(32, 32, 60, 80, 32);
    auto cb = conv_kernel().cost(l, s);
    ASSERT_TRUE(cb.ok()) << cb.status().to_string();
    EXPECT_GT(cb->vector, 0);
    EXPECT_EQ(cb->cube, 0);
    l.tiling = CubeTiling{};
    EXPECT_EQ(conv_kernel().cost(l, s).status().code(), StatusCode::INVALID_ARGUMENT);
}

TEST(ConvCost, IllegalTilingIsRejected) {
    KernelLaunch l = cost_launch(64, 64, 60, 80);
    CubeTiling t;
    t.m_l0 = t.n_l0 = t.k_l0 = 1024;
    t.m_l1 = t.n_l1 = t.k_l1 = 1024;
    l.tiling = t;
    auto cb = conv_kernel().cost(l, loom::test::preset_spec("edge"));
    EXPECT_EQ(cb.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(cb.status().message().find("conv: tiling"), std::string::npos) << cb.status().to_string();
}

}  // namespace
