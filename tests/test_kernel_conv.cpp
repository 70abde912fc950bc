// conv (device/kernels/conv.cpp) against a float64 direct convolution written here, for every
// host path (Winograd, depthwise, im2col GEMM, 1x1 GEMM) on both instruction sets, 1-D and 2-D,
// groups, strides, dilations, pads and auto_pad, odd sizes, every fused epilogue, f32 and f16.
// Tolerance: f32 |y - ref| <= 2e-5 * (sum |w x| + |bias| + |residual|) (Winograd's transforms
// add a few roundings of values up to ~10x the inputs); f16 inputs are exactly representable,
// so f16 output must be the reference rounded to f16 within 1 ulp (fp32 accumulation).
// Errors name the tensor or attribute; cost is positive, grows with work, refuses bad tilings.
// int8 (i8 W, per-channel scales WS, X quantized in the kernel): against a reference that
// quantizes X as specified (loom::test::ref_quantize) and sums in int64, then dequantizes and
// runs the epilogue in float64, with the bounds above taken over |x_scale WS[k]| sum |q w|; the
// sums compared bit for bit (power-of-two scales) on every host path, including a 2304-long
// reduction whose partial sums pass 2^24; int8 costs less than fp16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/winograd_i8.hpp"
#include "test_util.hpp"

namespace test_kernel_conv {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using loom::test::element_count;
using loom::test::expect_within_bound;
using loom::test::IsaGuard;
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

// "<isa>_<case name>" for the suites over (instruction set, index into Cases()), whose items are
// Cases or hold one as `c`.
template <auto Cases>
std::string isa_case_name(const ::testing::TestParamInfo<std::tuple<cpu::Isa, size_t>>& info) {
    const auto& item = Cases()[std::get<1>(info.param)];
    std::string name;
    if constexpr (requires { item.c.name; }) name = item.c.name;
    else name = item.name;
    return std::string(cpu::isa_name(std::get<0>(info.param))) + "_" + name;
}

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
        {"winograd_no_pad_residual_after",
         1,
         16,
         21,
         10,
         40,
         3,
         3,
         1,
         1,
         1,
         1,
         1,
         {},
         "",
         "leaky_relu",
         false,
         true,
         true},
        {"winograd_3to64_first_layer", 1, 3, 64, 20, 29, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "prelu"},
        {"winograd_few_channels_prime_sigmoid",
         1,
         3,
         5,
         13,
         17,
         3,
         3,
         1,
         1,
         1,
         1,
         1,
         {1, 1, 1, 1},
         "",
         "sigmoid",
         true,
         true},
        {"winograd_1x1_image", 2, 4, 3, 1, 1, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "relu"},
        {"im2col_3x3_dilation2", 1, 3, 8, 15, 11, 3, 3, 1, 1, 1, 2, 2, {2, 2, 2, 2}, "", "leaky_relu"},
        {"im2col_stride2_dilation2", 2, 5, 7, 31, 17, 3, 5, 1, 2, 2, 2, 1, {2, 1, 0, 3}},
        // Unpadded stride 2 on rows wide enough for whole panels: X read in place, every other value.
        {"im2col_2x2_stride2_unpadded_wide", 1, 16, 24, 6, 150, 2, 2, 1, 2, 2, 1, 1, {}, "", "leaky_relu"},
        {"im2col_3x3_stride2_unpadded_wide", 2, 5, 9, 7, 141, 3, 3, 1, 2, 2, 1, 1, {}, "", "none", true, true},
        // Rows narrower than a panel (several output rows in each) and two blocks of B's rows.
        {"im2col_2x2_stride2_narrow_two_k_blocks", 1, 40, 8, 14, 10, 2, 2, 1, 2, 2, 1, 1, {}, "", "relu", true, true},
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

// Runs `l` prepared (W constant: the kernel state packs it once) and expects the output `y` of
// the unprepared run bit for bit; then zeroes W in the launch and expects the same again, as
// the prepared run reads its packed copy. Without W marked constant nothing is prepared.
template <typename T>
void expect_prepared_run_identical(KernelLaunch l, const std::vector<T>& y, ThreadPool& pool) {
    ASSERT_NE(conv_kernel().prepare, nullptr);
    auto none = conv_kernel().prepare(l);
    ASSERT_TRUE(none.ok()) << none.status().to_string();
    EXPECT_EQ(*none, nullptr) << "prepared from a W that is not constant";
    l.constant_inputs = 1u << 1;
    auto state = conv_kernel().prepare(l);
    ASSERT_TRUE(state.ok()) << state.status().to_string();
    ASSERT_NE(*state, nullptr);
    l.state = *state;
    std::vector<T> y2(y.size());
    l.outputs[0].data = y2.data();
    ASSERT_TRUE(conv_kernel().run(l, pool).ok());
    EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(T))) << "prepared run differs";
    std::vector<uint8_t> saved(l.inputs[1].bytes());
    std::memcpy(saved.data(), l.inputs[1].data, saved.size());
    std::memset(l.inputs[1].data, 0, saved.size());
    std::fill(y2.begin(), y2.end(), T{});
    loom::Status st = conv_kernel().run(l, pool);
    std::memcpy(l.inputs[1].data, saved.data(), saved.size());
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(T))) << "the prepared run read W again";
}

class ConvF32 : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(ConvF32, MatchesFloat64Reference) {
    auto [want, idx] = GetParam();
    const Case& c = cases()[idx];
    SKIP_UNLESS_ISA(want);
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
    expect_prepared_run_identical(l, y, pool);
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvF32,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Range(size_t{0}, cases().size())),
                         isa_case_name<cases>);

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
    // On every level, the fp16 launch gives the bits of the fp32 launch on the same (widened)
    // values rounded once: the Winograd path reads and writes the fp16 maps itself, the others
    // convert around the fp32 kernel.
    using loom::test::widen_f16;
    auto xw = widen_f16(xh), ww = widen_f16(wh), bw = widen_f16(bh), rw = widen_f16(rh), sw = widen_f16(sh);
    for (cpu::Isa level : loom::test::supported_isas()) {
        SCOPED_TRACE(cpu::isa_name(level));
        IsaGuard guard(level);
        std::vector<f16> yh(y.size(), f16{0x7e00});
        l.outputs[0].data = yh.data();
        ASSERT_TRUE(conv_kernel().run(l, pool).ok());
        KernelLaunch lf = l;
        TensorRef none = shape_ref(DType::F32, {0}, nullptr);
        lf.inputs = {shape_ref(DType::F32, d.xd, xw.data()), shape_ref(DType::F32, d.wd, ww.data()),
                     c.bias ? shape_ref(DType::F32, {c.k}, bw.data()) : none,
                     c.residual ? shape_ref(DType::F32, d.yd, rw.data()) : none};
        if (c.act == "prelu") lf.inputs.push_back(shape_ref(DType::F32, {c.k}, sw.data()));
        std::vector<float> yf(y.size());
        lf.outputs = {shape_ref(DType::F32, d.yd, yf.data())};
        ASSERT_TRUE(conv_kernel().run(lf, pool).ok());
        EXPECT_EQ(loom::test::count_unlike_rounded(yf, yh), 0)
            << "of " << yf.size() << " outputs differ from the fp32 launch's rounded";
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvF16, ::testing::Range(size_t{0}, cases().size()),
                         [](const auto& info) { return cases()[info.param].name; });

// ---- errors ----------------------------------------------------------------------------------

void expect_rejected(const KernelLaunch& l, StatusCode code, const std::string& needle) {
    ThreadPool pool(1);
    for (loom::Status st :
         {conv_kernel().run(l, pool), conv_kernel().cost(l, loom::test::preset_spec("edge")).status()}) {
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
    for (std::string_view preset : loom::test::presets()) {
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

// ---- int8 -----------------------------------------------------------------------------------

struct Int8Case {
    Case c;
    bool per_tensor = false;  // WS holds 1 value
    bool f16 = false;         // X, B, R, S and Y f16 (else f32)
};

const std::vector<Int8Case>& int8_cases() {
    static const std::vector<Int8Case> v = {
        {{"im2col_13to19_prime", 1, 13, 19, 11, 9, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "relu"}},
        // Real-CUGAN's 2x2 stride-2 convs: whole panels in a row (a pair of B rows one stretch),
        // and rows narrower than a panel with 160 rows of B.
        {{"im2col_2x2_stride2_wide", 1, 16, 24, 6, 150, 2, 2, 1, 2, 2, 1, 1, {}, "", "leaky_relu"}},
        {{"im2col_2x2_stride2_narrow", 1, 40, 8, 14, 10, 2, 2, 1, 2, 2, 1, 1, {}, "", "relu", true, true}, false, true},
        {{"winograd_shape_64to64", 1, 64, 64, 12, 10, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "leaky_relu", true, true}},
        {{"pointwise_1x1_residual", 2, 37, 19, 7, 11, 1, 1, 1, 1, 1, 1, 1, {}, "", "sigmoid", true, true}, true},
        {{"stride2_dilation2", 2, 5, 7, 31, 17, 3, 5, 1, 2, 2, 2, 1, {2, 1, 0, 3}}, false, true},
        {{"groups_scale_per_output_channel", 1, 12, 18, 9, 14, 3, 3, 3, 1, 2, 1, 1, {1, 1, 1, 1}, "", "clip"}},
        {{"depthwise_prelu_residual_after",
          2,
          13,
          13,
          11,
          9,
          3,
          3,
          13,
          1,
          1,
          1,
          1,
          {1, 1, 1, 1},
          "",
          "prelu",
          true,
          true,
          true}},
        {{"depthwise_multiplier2_stride2", 1, 6, 12, 10, 15, 5, 5, 6, 2, 2, 1, 1, {2, 2, 2, 2}, "", "leaky_relu"},
         true,
         true},
        {{"conv1d_hard_swish", 2, 7, 5, 0, 50, 0, 3, 1, 1, 2, 1, 1, {1, 1}, "", "hard_swish"}, false, true},
        {{"ones_1x1", 1, 1, 1, 1, 1, 1, 1}, true},
        {{"reduction_2304_in_slices", 1, 256, 20, 6, 7, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "relu", true, true}},
        {{"reduction_2304_f16", 1, 256, 9, 5, 4, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "none"}, true, true},
    };
    return v;
}

// The float64 result, the magnitude bound and the exact sums (int64) of each output for int8 W
// `w`, scales `ws` (1 or K values) and X quantized with step `xs`.
void int8_reference(const Case& c, const Geo& g, const std::vector<float>& x, float xs, const std::vector<int8_t>& w,
                    const std::vector<float>& ws, const Data& d, std::vector<double>& out, std::vector<double>& mag,
                    std::vector<int64_t>& sums) {
    const int64_t H = c.h > 0 ? c.h : 1, kh = c.h > 0 ? c.kh : 1, cg = c.c / c.group, kg = c.k / c.group;
    std::vector<int64_t> q(x.size());
    for (size_t i = 0; i < x.size(); ++i) q[i] = loom::test::ref_quantize(x[i], xs);
    out.assign(size_t(c.n * c.k * g.ho * g.wo), 0), mag.assign(out.size(), 0), sums.assign(out.size(), 0);
    for (int64_t n = 0; n < c.n; ++n)
        for (int64_t k = 0; k < c.k; ++k) {
            const double factor = double(xs) * ws[ws.size() == 1 ? 0 : size_t(k)];
            for (int64_t oy = 0; oy < g.ho; ++oy)
                for (int64_t ox = 0; ox < g.wo; ++ox) {
                    const size_t o = size_t(((n * c.k + k) * g.ho + oy) * g.wo + ox);
                    int64_t acc = 0, abs_acc = 0;
                    const int64_t grp = k / kg;
                    for (int64_t ci = 0; ci < cg; ++ci)
                        for (int64_t ky = 0; ky < kh; ++ky)
                            for (int64_t kx = 0; kx < c.kw; ++kx) {
                                int64_t iy = oy * c.sh + ky * c.dh - g.pt, ix = ox * c.sw + kx * c.dw - g.pl;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= c.w) continue;
                                const int64_t p = int64_t(w[size_t(((k * cg + ci) * kh + ky) * c.kw + kx)]) *
                                                  q[size_t(((n * c.c + grp * cg + ci) * H + iy) * c.w + ix)];
                                acc += p, abs_acc += std::abs(p);
                            }
                    double sum = factor * double(acc), m = std::abs(factor) * double(abs_acc);
                    if (c.bias) sum += d.b[size_t(k)], m += std::abs(d.b[size_t(k)]);
                    const double rv = c.residual ? d.r[o] : 0;
                    if (c.residual && !c.after) sum += rv, m += std::abs(rv);
                    sum = ref_activation(c.act, sum, d.s[size_t(k)]);
                    if (c.residual && c.after) sum += rv, m += std::abs(rv);
                    out[o] = sum, mag[o] = m, sums[o] = acc;
                }
        }
}

// The launch X, W (i8), B, R, S, WS with x_scale `xs` (absent optional inputs are empty).
template <typename T>
KernelLaunch int8_launch(const Case& c, const Data& d, std::vector<T>& x, std::vector<int8_t>& w, std::vector<T>& b,
                         std::vector<T>& r, std::vector<T>& s, std::vector<float>& ws, float xs, std::vector<T>& y) {
    const DType dt = dtype_of<T>();
    KernelLaunch l;
    TensorRef empty = shape_ref(dt, {0}, nullptr);
    l.inputs = {shape_ref(dt, d.xd, x.data()),
                shape_ref(DType::I8, d.wd, w.data()),
                c.bias ? shape_ref(dt, {c.k}, b.data()) : empty,
                c.residual ? shape_ref(dt, d.yd, r.data()) : empty,
                c.act == "prelu" ? shape_ref(dt, {c.k}, s.data()) : empty,
                shape_ref(DType::F32, {int64_t(ws.size())}, ws.data())};
    l.outputs = {shape_ref(dt, d.yd, y.data())};
    l.attrs = attrs_of(c);
    l.attrs.set("x_scale", double(xs));
    return l;
}

// An int8 case's data for x_scale 0.01: X scaled so that |x| / x_scale reaches 150 (some values
// clamp to +-127), random int8 W, and WS (1 value or K).
struct Int8Data {
    Data d;
    std::vector<int8_t> w;
    std::vector<float> ws;
};
Int8Data int8_data(const Int8Case& ic, const Geo& g, uint32_t seed) {
    Int8Data r{make_data(ic.c, g, seed), {}, {}};
    for (float& v : r.d.x) v *= 1.5f;
    r.w = loom::test::random_int8(r.d.w.size(), seed + 1);
    std::mt19937 rng(seed + 2);
    r.ws = ic.per_tensor ? std::vector<float>{0.004f} : loom::test::random_floats(rng, size_t(ic.c.k), 0.001f, 0.01f);
    return r;
}

class ConvInt8 : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(ConvInt8, MatchesTheQuantizedReference) {
    auto [want, idx] = GetParam();
    const Int8Case& ic = int8_cases()[idx];
    const Case& c = ic.c;
    SKIP_UNLESS_ISA(want);
    IsaGuard isa_guard(want);
    const Geo g = geometry(c);
    auto [d, w, ws] = int8_data(ic, g, static_cast<uint32_t>(idx * 13 + 5));
    const float xs = 0.01f;
    ThreadPool pool(2);
    std::vector<double> ref, mag;
    std::vector<int64_t> sums;
    if (ic.f16) {
        auto xh = round_to_f16(d.x), bh = round_to_f16(d.b), rh = round_to_f16(d.r), sh = round_to_f16(d.s);
        std::vector<f16> y(d.r.size());
        loom::Status st = conv_kernel().run(int8_launch(c, d, xh, w, bh, rh, sh, ws, xs, y), pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        int8_reference(c, g, d.x, xs, w, ws, d, ref, mag, sums);
        expect_within_bound(y, ref, mag);
    } else {
        std::vector<float> y(d.r.size(), std::nanf(""));
        const KernelLaunch l = int8_launch(c, d, d.x, w, d.b, d.r, d.s, ws, xs, y);
        loom::Status st = conv_kernel().run(l, pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        int8_reference(c, g, d.x, xs, w, ws, d, ref, mag, sums);
        expect_within_bound(y, ref, mag);
        expect_prepared_run_identical(l, y, pool);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvInt8,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Range(size_t{0}, int8_cases().size())),
                         isa_case_name<int8_cases>);

// Exactness: x = q / 4 with x_scale 1/4 (so q is known), WS = 1/8: every output is the int32 sum
// / 32, exact in fp32 while |sum| < 2^24, and must equal the int64 reference bit for bit. The
// adversarial case's reduction (256 channels x 3 x 3 = 2304) starts with 1116 products of about
// +15000 (partial sums near 1.7e7, past 2^24 where fp32 steps by 2), then small odd products,
// then 1116 products that cancel the first ones: a plain fp32 sum loses the small ones.
struct ExactCase {
    Case c;
    bool adversarial = false;
};

const std::vector<ExactCase>& exact_cases() {
    static const std::vector<ExactCase> v = {
        {{"adversarial_256ch_3x3", 1, 256, 3, 5, 5, 3, 3, 1, 1, 1, 1, 1, {}, "", "none", false}, true},
        {{"winograd_shape_64to64", 1, 64, 64, 10, 12, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "none", false}},
        {{"depthwise_3x3", 2, 13, 13, 11, 9, 3, 3, 13, 1, 1, 1, 1, {1, 1, 1, 1}, "", "none", false}},
        {{"pointwise_1500ch_in_slices", 1, 1500, 5, 4, 6, 1, 1, 1, 1, 1, 1, 1, {}, "", "none", false}},
        {{"groups", 1, 12, 18, 9, 14, 3, 3, 3, 1, 1, 1, 1, {1, 1, 1, 1}, "", "none", false}},
    };
    return v;
}

class ConvInt8Exact : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(ConvInt8Exact, SumsAreExactInt32) {
    auto [want, idx] = GetParam();
    const ExactCase& ec = exact_cases()[idx];
    const Case& c = ec.c;
    SKIP_UNLESS_ISA(want);
    IsaGuard isa_guard(want);
    const Geo g = geometry(c);
    Data d = make_data(c, g, 77);
    std::mt19937 rng(static_cast<uint32_t>(idx + 91));
    auto small = [&](int32_t r) {
        const int32_t v = int32_t(rng() % uint32_t(2 * r + 1)) - r;
        return v == 0 ? 1 : v;
    };
    std::vector<int8_t> w(d.w.size());
    const int64_t plane = c.h * c.w, taps = c.kh * c.kw, cg = c.c / c.group;
    if (ec.adversarial) {
        // Channels [0, 124) and [128, 252) carry equal activations of 120..127 and weights +127
        // and -127; channels 124..127 and 252..255 small values.
        for (int64_t ci = 0; ci < c.c; ++ci)
            for (int64_t p = 0; p < plane; ++p) {
                float q = float(small(9));
                if (ci < 124) q = float(120 + int32_t(rng() % 8));
                if (ci >= 128 && ci < 252) q = d.x[size_t((ci - 128) * plane + p)] * 4;
                d.x[size_t(ci * plane + p)] = q / 4;
            }
        for (int64_t k = 0; k < c.k; ++k)
            for (int64_t ci = 0; ci < cg; ++ci)
                for (int64_t t = 0; t < taps; ++t)
                    w[size_t((k * cg + ci) * taps + t)] = int8_t(ci < 124                ? 127
                                                                 : ci >= 128 && ci < 252 ? -127
                                                                                         : small(9));
    } else {
        for (float& v : d.x) v = float(small(127)) / 4;
        w = loom::test::random_int8(w.size(), 5);
    }
    std::vector<float> ws = {0.125f};
    std::vector<float> y(d.r.size(), std::nanf(""));
    ThreadPool pool(2);
    loom::Status st = conv_kernel().run(int8_launch(c, d, d.x, w, d.b, d.r, d.s, ws, 0.25f, y), pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    std::vector<int64_t> sums;
    int8_reference(c, g, d.x, 0.25f, w, ws, d, ref, mag, sums);
    int64_t bad = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_LT(std::abs(sums[i]), int64_t{1} << 24);
        if (double(y[i]) * 32 != double(sums[i]) && ++bad <= 5)
            ADD_FAILURE() << "y[" << i << "] * 32 = " << double(y[i]) * 32 << ", the int32 sum is " << sums[i];
    }
    EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvInt8Exact,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Range(size_t{0}, exact_cases().size())),
                         isa_case_name<exact_cases>);

// The integer F(4,3) (cpu/winograd_i8.hpp) against the int8 GEMM ('winograd' 0) on the same
// launch: the same int32 sums and the same epilogue, so the same bits, on every instruction set;
// and both within the float64 reference's bound. The shapes cover odd C, K not a multiple of 6,
// two images, asymmetric and no padding, rows of 36 tiles (two blocks: 32 + 4), partial groups
// of sixteen tiles, partial output tiles on both edges, fp16 maps and every epilogue input.
const std::vector<Int8Case>& winograd_i8_cases() {
    static const std::vector<Int8Case> v = {
        {{"64to64_19x70_leaky", 1, 64, 64, 19, 70, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "leaky_relu", true, true}},
        {{"13to7_two_images_36_tiles_prelu",
          2,
          13,
          7,
          10,
          141,
          3,
          3,
          1,
          1,
          1,
          1,
          1,
          {2, 0, 1, 2},
          "",
          "prelu",
          true,
          true,
          true}},
        {{"3to32_unpadded_relu", 1, 3, 32, 9, 9, 3, 3, 1, 1, 1, 1, 1, {}, "", "relu"}, true},
        // No residual: the output transform applies the epilogue itself (WinogradI8Epilogue).
        {{"32to20_fused_leaky", 1, 32, 20, 11, 37, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "leaky_relu"}},
        {{"16to24_fused_prelu_two_images", 2, 16, 24, 6, 9, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "prelu"}},
        {{"1to1_5x6", 1, 1, 1, 5, 6, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "none", false}},
        {{"24to40_f16_residual", 1, 24, 40, 14, 23, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "relu", true, true},
         false,
         true},
    };
    return v;
}

class ConvInt8Winograd : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

template <typename T>
std::vector<T> run_int8_conv(const Case& c, Data& d, std::vector<T>& x, std::vector<int8_t>& w, std::vector<float>& ws,
                             float xs, int64_t winograd, ThreadPool& pool) {
    auto cast = [](std::vector<float> v) {
        if constexpr (std::is_same_v<T, float>) return v;
        else return round_to_f16(v);
    };
    std::vector<T> b = cast(d.b), r = cast(d.r), s = cast(d.s), y(d.r.size());
    KernelLaunch l = int8_launch(c, d, x, w, b, r, s, ws, xs, y);
    if (winograd >= 0) l.attrs.set("winograd", winograd);
    const loom::Status st = conv_kernel().run(l, pool);
    EXPECT_TRUE(st.ok()) << st.to_string();
    if constexpr (std::is_same_v<T, float>) expect_prepared_run_identical(l, y, pool);
    return y;
}

TEST_P(ConvInt8Winograd, SameBitsAsTheGemm) {
    auto [want, idx] = GetParam();
    const Int8Case& ic = winograd_i8_cases()[idx];
    const Case& c = ic.c;
    SKIP_UNLESS_ISA(want);
    IsaGuard isa_guard(want);
    const Geo g = geometry(c);
    auto [d, w, ws] = int8_data(ic, g, static_cast<uint32_t>(idx * 7 + 3));
    ASSERT_TRUE(cpu::winograd_i8_exact(w.data(), c.k, c.c));
    const float xs = 0.01f;
    ThreadPool pool(2);
    std::vector<double> ref, mag;
    std::vector<int64_t> sums;
    if (ic.f16) {
        // round_to_f16 rounds its argument in place too: the reference sees the fp16 values.
        std::vector<f16> xh = round_to_f16(d.x);
        round_to_f16(d.b), round_to_f16(d.r), round_to_f16(d.s);
        int8_reference(c, g, d.x, xs, w, ws, d, ref, mag, sums);
        const std::vector<f16> wino = run_int8_conv(c, d, xh, w, ws, xs, -1, pool);
        const std::vector<f16> gemm = run_int8_conv(c, d, xh, w, ws, xs, 0, pool);
        ASSERT_EQ(std::memcmp(wino.data(), gemm.data(), wino.size() * sizeof(f16)), 0);
        expect_within_bound(wino, ref, mag);
    } else {
        int8_reference(c, g, d.x, xs, w, ws, d, ref, mag, sums);
        const std::vector<float> wino = run_int8_conv(c, d, d.x, w, ws, xs, 4, pool);
        const std::vector<float> gemm = run_int8_conv(c, d, d.x, w, ws, xs, 0, pool);
        for (size_t i = 0; i < wino.size(); ++i)
            ASSERT_EQ(std::memcmp(&wino[i], &gemm[i], sizeof(float)), 0)
                << "y[" << i << "]: " << wino[i] << " (Winograd) against " << gemm[i] << " (GEMM)";
        expect_within_bound(wino, ref, mag);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvInt8Winograd,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Range(size_t{0}, winograd_i8_cases().size())),
                         isa_case_name<winograd_i8_cases>);

// 224 identical channels of +-127 activations and +-127 weights: sums up to 224 x 9 x 127 x 127
// (32.5 million, just under the 2^25 that winograd_i8_exact allows), so 576 Y is far past 2^31
// and the transformed sums wrap; the inverse of 9 and the shift must still give every sum
// exactly. Compared with the GEMM bit for bit and with the int64 sums.
class ConvInt8WinogradWrap : public ::testing::TestWithParam<cpu::Isa> {};

TEST_P(ConvInt8WinogradWrap, WrappedSumsComeBackExact) {
    const cpu::Isa want = GetParam();
    SKIP_UNLESS_ISA(want);
    IsaGuard isa_guard(want);
    const Case c{"wrap_224ch", 1, 224, 6, 12, 21, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "none", false};
    const Geo g = geometry(c);
    Data d = make_data(c, g, 5);
    std::mt19937 rng(17);
    auto sign = [&] { return rng() % 2 ? 127 : -127; };
    std::vector<float> plane(size_t(c.h * c.w));
    for (float& v : plane) v = float(sign()) / 4;  // x_scale 1/4: q = +-127
    for (int64_t ci = 0; ci < c.c; ++ci) std::copy(plane.begin(), plane.end(), d.x.begin() + ci * c.h * c.w);
    std::vector<int8_t> w(d.w.size());
    for (int64_t k = 0; k < c.k; ++k) {
        int8_t taps[9];
        for (int8_t& t : taps) t = int8_t(sign());
        for (int64_t ci = 0; ci < c.c; ++ci) std::copy(taps, taps + 9, w.begin() + (k * c.c + ci) * 9);
    }
    ASSERT_TRUE(cpu::winograd_i8_exact(w.data(), c.k, c.c));
    std::vector<float> ws = {0.125f};
    ThreadPool pool(2);
    const std::vector<float> wino = run_int8_conv(c, d, d.x, w, ws, 0.25f, 4, pool);
    const std::vector<float> gemm = run_int8_conv(c, d, d.x, w, ws, 0.25f, 0, pool);
    std::vector<double> ref, mag;
    std::vector<int64_t> sums;
    int8_reference(c, g, d.x, 0.25f, w, ws, d, ref, mag, sums);
    int64_t biggest = 0;
    for (size_t i = 0; i < wino.size(); ++i) {
        biggest = std::max(biggest, std::abs(sums[i]));
        ASSERT_EQ(std::memcmp(&wino[i], &gemm[i], sizeof(float)), 0) << "y[" << i << "]";
        ASSERT_EQ(double(wino[i]) * 32, double(float(sums[i]))) << "y[" << i << "], sum " << sums[i];
    }
    EXPECT_GT(biggest * 576, int64_t{1} << 31);  // the wrap did happen
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvInt8WinogradWrap, ::testing::ValuesIn(loom::test::kAllIsas),
                         [](const auto& info) { return std::string(cpu::isa_name(info.param)); });

// A map of at least cpu::kWinogradStreamBytes (64 x 371 x 365 fp32: 34.7 MB) with a fusable
// epilogue goes out through non-temporal stores; 365-float rows put the lines' boundaries
// anywhere in a block's run.
TEST_P(ConvInt8WinogradWrap, StreamedMapSameBitsAsTheGemm) {
    const cpu::Isa want = GetParam();
    SKIP_UNLESS_ISA(want);
    IsaGuard isa_guard(want);
    const Case c{"streamed", 1, 3, 64, 371, 365, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", "relu"};
    ASSERT_GE(c.k * c.h * c.w * 4, cpu::kWinogradStreamBytes);
    const Geo g = geometry(c);
    Data d = make_data(c, g, 11);
    std::vector<int8_t> w = loom::test::random_int8(d.w.size(), 12);
    std::vector<float> ws = {0.004f};
    ThreadPool pool(2);
    const std::vector<float> wino = run_int8_conv(c, d, d.x, w, ws, 0.01f, 4, pool);
    const std::vector<float> gemm = run_int8_conv(c, d, d.x, w, ws, 0.01f, 0, pool);
    ASSERT_EQ(std::memcmp(wino.data(), gemm.data(), wino.size() * sizeof(float)), 0);
}

TEST(ConvInt8Winograd, ExactnessBoundFromTheWeights) {
    // 127 x sum |w| <= 2^25 - 1: 231 channels of 127 x 9 taps pass (33533163), 232 do not.
    std::vector<int8_t> w(size_t(232 * 9), 127);
    EXPECT_TRUE(cpu::winograd_i8_exact(w.data(), 1, 231));
    EXPECT_FALSE(cpu::winograd_i8_exact(w.data(), 1, 232));
    std::fill(w.begin(), w.end(), int8_t{-128});
    EXPECT_FALSE(cpu::winograd_i8_exact(w.data(), 1, 231));  // 128 x 9 x 231 x 127 > 2^25
    // Two output channels: the second one decides.
    std::vector<int8_t> two(size_t(2 * 200 * 9), 1);
    std::fill(two.begin() + 200 * 9, two.end(), int8_t{127});
    EXPECT_TRUE(cpu::winograd_i8_exact(two.data(), 2, 200));
    two.resize(size_t(2 * 240 * 9), 127);
    std::fill(two.begin(), two.begin() + 240 * 9, int8_t{1});
    EXPECT_FALSE(cpu::winograd_i8_exact(two.data(), 2, 240));
}

TEST(ConvInt8Errors, NameTheTensorOrAttribute) {
    std::vector<float> x(1 * 4 * 8 * 8, 1.0f), y(6 * 8 * 8), ws(6, 0.01f), wf(6 * 4 * 3 * 3, 1.0f);
    std::vector<int8_t> w(6 * 4 * 3 * 3, 3);
    std::vector<f16> wsh(6);
    const TensorRef empty = shape_ref(DType::F32, {0}, nullptr);
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {1, 4, 8, 8}, x.data()),
                shape_ref(DType::I8, {6, 4, 3, 3}, w.data()),
                empty,
                empty,
                empty,
                shape_ref(DType::F32, {6}, ws.data())};
    l.outputs = {shape_ref(DType::F32, {1, 6, 8, 8}, y.data())};
    l.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"x_scale", 0.05}};
    ThreadPool pool(1);
    ASSERT_TRUE(conv_kernel().run(l, pool).ok());

    KernelLaunch bad = l;
    bad.inputs.pop_back();
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: W is i8 and needs its per-channel scales WS (input 5)");
    bad = l;
    bad.inputs[5] = empty;
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: W is i8 and needs its per-channel scales WS (input 5)");
    bad = l;
    bad.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: W is i8 and needs attribute 'x_scale'");
    for (double v : {0.0, -0.5, double(INFINITY)}) {
        bad = l;
        bad.attrs.set("x_scale", v);
        expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: attribute 'x_scale' is");
    }
    bad = l;
    bad.attrs.set("x_scale", std::string("big"));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "x_scale");
    bad = l;
    bad.inputs[5] = shape_ref(DType::F32, {5}, ws.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: WS is 5 f32, must hold 1 or K = 6 f32 values");
    bad = l;
    bad.inputs[5] = shape_ref(DType::F16, {6}, wsh.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: WS is 6 f16, must hold 1 or K = 6 f32 values");
    bad = l;
    bad.inputs[1] = shape_ref(DType::F32, {6, 4, 3, 3}, wf.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: WS (input 5) is given but W is f32");
    bad.inputs.pop_back();
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT,
                    "conv: attribute 'x_scale' applies to i8 weights only (W is f32)");
    bad = l;
    bad.outputs = {shape_ref(DType::F16, {1, 6, 8, 8}, y.data())};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: mixed dtypes");
    bad = l;
    bad.inputs[0] = shape_ref(DType::I8, {1, 4, 8, 8}, w.data());
    expect_rejected(bad, StatusCode::UNSUPPORTED, "conv: dtype i8");
    bad = l;
    bad.inputs.push_back(empty);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv takes 2 to 6 inputs, got 7");
    // 'winograd': 0 (the GEMM) and 4 (the integer F(4,3)) for an int8 3x3 conv; nothing else.
    bad = l;
    bad.attrs.set("winograd", int64_t{4});
    EXPECT_TRUE(conv_kernel().run(bad, pool).ok());
    bad.attrs.set("winograd", int64_t{0});
    EXPECT_TRUE(conv_kernel().run(bad, pool).ok());
    bad.attrs.set("winograd", int64_t{6});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT,
                    "conv: attribute 'winograd' is 6, but an int8 conv runs only as the GEMM (0) or");
    bad.attrs.set("strides", std::vector<int64_t>{2, 2});
    bad.attrs.set("winograd", int64_t{4});
    bad.outputs = {shape_ref(DType::F32, {1, 6, 4, 4}, y.data())};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv: attribute 'winograd' is 4, but an int8 conv runs only");
    // 14700 channels x 3 x 3 = 132300 products: an int32 sum could overflow.
    bad = l;
    bad.inputs[0] = shape_ref(DType::F32, {1, 14700, 8, 8}, nullptr);
    bad.inputs[1] = shape_ref(DType::I8, {6, 14700, 3, 3}, nullptr);
    expect_rejected(bad, StatusCode::UNSUPPORTED, "conv: the int8 reduction over C/group x kh x kw is 132300");
}

KernelLaunch int8_cost_launch(DType x_dtype, int64_t c, int64_t k, int64_t h, int64_t w, int64_t group = 1) {
    KernelLaunch l = cost_launch(c, k, h, w, group);
    l.inputs[0].dtype = x_dtype, l.outputs[0].dtype = x_dtype;
    l.inputs[1].dtype = DType::I8;
    const TensorRef empty = shape_ref(DType::F32, {0}, nullptr);
    l.inputs.insert(l.inputs.end(), {empty, empty, empty, shape_ref(DType::F32, {k}, nullptr)});
    l.attrs.set("x_scale", 0.02);
    return l;
}

TEST(ConvInt8Cost, CheaperThanFp16OnTheCubeAtTwiceTheRate) {
    struct Shape {
        int64_t c, k, h, w;
    };
    for (std::string_view preset : loom::test::presets())
        for (const Shape sh : {Shape{64, 64, 240, 320}, Shape{256, 256, 64, 64}, Shape{64, 64, 120, 160}}) {
            SCOPED_TRACE(std::string(preset) + " " + std::to_string(sh.c) + "ch " + std::to_string(sh.h) + "x" +
                         std::to_string(sh.w));
            const DeviceSpec& s = loom::test::preset_spec(preset);
            auto f16 = conv_kernel().cost(cost_launch(sh.c, sh.k, sh.h, sh.w), s);
            auto i8 = conv_kernel().cost(int8_cost_launch(DType::F16, sh.c, sh.k, sh.h, sh.w), s);
            KernelLaunch f32l = cost_launch(sh.c, sh.k, sh.h, sh.w);
            for (TensorRef* t : {&f32l.inputs[0], &f32l.inputs[1], &f32l.outputs[0]}) t->dtype = DType::F32;
            auto f32 = conv_kernel().cost(f32l, s);
            auto i8x32 = conv_kernel().cost(int8_cost_launch(DType::F32, sh.c, sh.k, sh.h, sh.w), s);
            ASSERT_TRUE(f16.ok() && i8.ok() && f32.ok() && i8x32.ok())
                << f16.status().to_string() << i8.status().to_string() << i8x32.status().to_string();
            EXPECT_LT(i8->total, f16->total);
            EXPECT_LT(i8x32->total, f32->total);
            // Twice the MACs per cycle; K = 576 pads to 1024 in 512-deep int8 stages against
            // 768 in 256-deep fp16 stages, so the Cube time is about 2/3 of fp16's here, not 1/2.
            EXPECT_LE(i8->cube, 0.75 * f16->cube);
            // The quantize and dequantize passes are Vector work fp16 does not have.
            EXPECT_GT(i8->vector, f16->vector);
            EXPECT_DOUBLE_EQ(i8->flops, f16->flops);
            // The weights move 1 byte per element: fewer bytes miss L2.
            EXPECT_LT(i8->l2_miss_bytes, f16->l2_miss_bytes);
        }
}

TEST(ConvInt8Cost, TilingUsesTheInt8FractalAndOneByteElements) {
    const DeviceSpec& s = loom::test::preset_spec("edge");
    KernelLaunch l = int8_cost_launch(DType::F16, 64, 64, 60, 80);
    CubeTiling t;
    t.m_l1 = t.m_l0 = 128, t.n_l1 = t.n_l0 = 64, t.k_l1 = t.k_l0 = 16;  // a whole fp16 fractal in K
    l.tiling = t;
    auto cb = conv_kernel().cost(l, s);
    EXPECT_EQ(cb.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(cb.status().message().find("conv: tiling: L0 sizes 128x64x16 must be positive multiples of the int8 "
                                         "fractal 16x16x32"),
              std::string::npos)
        << cb.status().to_string();
    t.k_l1 = t.k_l0 = 32;
    l.tiling = t;
    EXPECT_TRUE(conv_kernel().cost(l, s).ok());
    // L0A with double buffering: 2 x 128 x 256 x 1 B = 64 KiB fits for int8; the same tile in
    // fp16 needs 128 KiB.
    t.k_l1 = t.k_l0 = 256;
    l.tiling = t;
    auto fits = conv_kernel().cost(l, s);
    EXPECT_TRUE(fits.ok()) << fits.status().to_string();
    KernelLaunch h = cost_launch(64, 64, 60, 80);
    h.tiling = t;
    EXPECT_NE(conv_kernel().cost(h, s).status().message().find("L0A needs 131072"), std::string::npos);
    t.k_l1 = t.k_l0 = 512;  // 128 KiB of int8: too much
    l.tiling = t;
    EXPECT_NE(conv_kernel().cost(l, s).status().message().find("conv: tiling: L0A needs 131072"), std::string::npos);
}

TEST(ConvInt8Cost, DepthwiseStaysOnTheVectorUnitWithTheQuantizePasses) {
    const DeviceSpec& s = loom::test::preset_spec("edge");
    auto f16 = conv_kernel().cost(cost_launch(32, 32, 60, 80, 32), s);
    auto i8 = conv_kernel().cost(int8_cost_launch(DType::F16, 32, 32, 60, 80, 32), s);
    ASSERT_TRUE(f16.ok() && i8.ok()) << i8.status().to_string();
    EXPECT_EQ(i8->cube, 0);
    EXPECT_GT(i8->vector, f16->vector);
}

}  // namespace

}  // namespace test_kernel_conv
