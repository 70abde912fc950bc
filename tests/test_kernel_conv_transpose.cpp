// conv_transpose (device/kernels/conv_transpose.cpp) against a float64 scatter written here from
// the ONNX definition (every input pixel times the kernel, added at oy = iy * sh + ky * dh - pad),
// 1-D and 2-D, groups, strides, dilations, pads, auto_pad, output_padding, output_shape, odd and
// prime sizes, every fused epilogue, on both instruction sets of the host GEMM, f32 and f16; and
// the ONNX spec's own examples, exactly.
// Tolerance: f32 |y - ref| <= 2e-5 * (sum |w x| + |bias| + |residual|) + 1e-7; f16 inputs are
// exactly representable, so f16 output must be the reference rounded to f16 within 1 ulp plus
// that bound. Errors name the tensor or attribute; cost is positive, grows with work, refuses
// bad tilings.
// int8 (i8 W, scales WS indexed by the output channel over all groups, X quantized in the
// kernel): against a scatter of the quantized X (ref_quantize) in int64, dequantized and with the
// epilogue in float64, bounds over |x_scale WS[k]| sum |q w|; a case whose per-output sum over
// taps passes 2^24 before cancelling, compared bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "test_util.hpp"

namespace test_kernel_conv_transpose {  // this file's names, apart from the rest of its unity batch

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

const KernelDef& convt_kernel() { return loom::test::registered_kernel("conv_transpose"); }

struct Case {
    std::string name;
    int64_t n, c, k, h, w, kh, kw;  // h = 0: 1-D; k = output channels
    int64_t group = 1, sh = 1, sw = 1, dh = 1, dw = 1;
    std::vector<int64_t> pads = {};  // empty: none
    std::string auto_pad = "";
    std::vector<int64_t> out_pad = {}, out_shape = {};
    std::string act = "none";
    bool bias = true, residual = false, after = false;
};

struct Geo {
    int64_t ho, wo, pt, pl;
};

// Output size and leading pads from the ONNX formulas.
Geo geometry(const Case& c) {
    const bool two = c.h > 0;
    auto axis = [&](size_t i, int64_t in, int64_t k, int64_t s, int64_t d, int64_t& begin) {
        const int64_t span = (k - 1) * d + 1, op = c.out_pad.empty() ? 0 : c.out_pad[i];
        const size_t n = two ? 2 : 1;
        if (!c.out_shape.empty() || c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
            const int64_t out = c.out_shape.empty() ? in * s : c.out_shape[i];
            const int64_t total = s * (in - 1) + op + span - out;
            begin = total < 0 ? 0 : c.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
            return out;
        }
        const int64_t pb = c.pads.empty() ? 0 : c.pads[i], pe = c.pads.empty() ? 0 : c.pads[i + n];
        begin = pb;
        return s * (in - 1) + op + span - pb - pe;
    };
    Geo g{1, 0, 0, 0};
    if (two) g.ho = axis(0, c.h, c.kh, c.sh, c.dh, g.pt);
    g.wo = axis(two ? 1 : 0, c.w, c.kw, c.sw, c.dw, g.pl);
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
    if (!c.out_pad.empty()) a.set("output_padding", c.out_pad);
    if (!c.out_shape.empty()) a.set("output_shape", c.out_shape);
    if (c.act != "none") a.set("activation", c.act);
    if (c.act == "leaky_relu") a.set("alpha", 0.125);
    if (c.act == "clip") a.set("min", -0.25).set("max", 0.5);
    if (c.after) a.set("residual_after_activation", int64_t{1});
    return a;
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
    d.wd = two ? std::vector<int64_t>{c.c, c.k / c.group, c.kh, c.kw} : std::vector<int64_t>{c.c, c.k / c.group, c.kw};
    d.yd = two ? std::vector<int64_t>{c.n, c.k, g.ho, g.wo} : std::vector<int64_t>{c.n, c.k, g.wo};
    d.x = loom::test::random_floats(rng, size_t(element_count(d.xd)));
    d.w = loom::test::random_floats(rng, size_t(element_count(d.wd)));
    d.b = loom::test::random_floats(rng, size_t(c.k));
    d.r = loom::test::random_floats(rng, size_t(element_count(d.yd)));
    d.s = loom::test::random_floats(rng, size_t(c.k), 0.05f, 0.5f);
    return d;
}

// The float64 result and the magnitude bound of each output, by scattering every input pixel.
void reference(const Case& c, const Geo& g, const Data& d, std::vector<double>& out, std::vector<double>& mag) {
    const int64_t H = c.h > 0 ? c.h : 1, kh = c.h > 0 ? c.kh : 1, cg = c.c / c.group, kg = c.k / c.group;
    const int64_t plane = g.ho * g.wo;
    out.assign(size_t(c.n * c.k * plane), 0), mag.assign(out.size(), 0);
    for (int64_t n = 0; n < c.n; ++n)
        for (int64_t ci = 0; ci < c.c; ++ci)
            for (int64_t kl = 0; kl < kg; ++kl) {
                const int64_t k = (ci / cg) * kg + kl;
                for (int64_t iy = 0; iy < H; ++iy)
                    for (int64_t ix = 0; ix < c.w; ++ix)
                        for (int64_t ky = 0; ky < kh; ++ky)
                            for (int64_t kx = 0; kx < c.kw; ++kx) {
                                const int64_t oy = iy * c.sh + ky * c.dh - g.pt, ox = ix * c.sw + kx * c.dw - g.pl;
                                if (oy < 0 || oy >= g.ho || ox < 0 || ox >= g.wo) continue;
                                const double p = double(d.x[size_t(((n * c.c + ci) * H + iy) * c.w + ix)]) *
                                                 d.w[size_t(((ci * kg + kl) * kh + ky) * c.kw + kx)];
                                const size_t o = size_t((n * c.k + k) * plane + oy * g.wo + ox);
                                out[o] += p, mag[o] += std::abs(p);
                            }
            }
    for (size_t o = 0; o < out.size(); ++o) {
        const size_t k = (o / size_t(plane)) % size_t(c.k);
        double sum = out[o];
        if (c.bias) sum += d.b[k], mag[o] += std::abs(d.b[k]);
        const double rv = c.residual ? d.r[o] : 0;
        if (c.residual && !c.after) sum += rv, mag[o] += std::abs(rv);
        sum = ref_activation(c.act, sum, d.s[k]);
        if (c.residual && c.after) sum += rv, mag[o] += std::abs(rv);
        out[o] = sum;
    }
}

const std::vector<Case>& cases() {
    static const std::vector<Case> v = {
        {"basic_3x3_pad1", 1, 5, 7, 6, 9, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", {}, {}, "relu"},
        {"upsample_k4_s2_p1_batch2", 2, 16, 8, 7, 5, 4, 4, 1, 2, 2, 1, 1, {1, 1, 1, 1}, "", {}, {}, "leaky_relu", true, true},
        {"k2_s2_no_overlap", 1, 3, 17, 5, 11, 2, 2, 1, 2, 2, 1, 1, {}, "", {}, {}, "prelu"},
        {"groups_dilation_output_padding", 1, 6, 9, 5, 7, 3, 3, 3, 2, 2, 2, 2, {1, 0, 2, 1}, "", {1, 1}, {}, "clip", true, true, true},
        {"prime_channels_s3x2", 1, 17, 13, 9, 8, 3, 2, 1, 3, 2, 1, 1, {0, 1, 2, 0}, "", {2, 1}, {}, "relu", true, true},
        {"depthwise", 1, 4, 4, 6, 7, 3, 3, 4, 2, 2, 1, 1, {1, 1, 1, 1}, "", {1, 1}, {}, "hard_swish"},
        {"same_upper_s2", 1, 3, 4, 5, 6, 3, 3, 1, 2, 2, 1, 1, {}, "SAME_UPPER", {}, {}, "none", false},
        {"same_lower_k4", 1, 3, 4, 5, 6, 4, 4, 1, 1, 1, 1, 1, {}, "SAME_LOWER", {}, {}, "sigmoid"},
        {"output_shape_odd_total", 1, 2, 3, 5, 4, 3, 3, 1, 2, 2, 1, 1, {}, "", {}, {10, 8}},
        {"output_shape_same_upper", 1, 2, 3, 5, 4, 3, 3, 1, 2, 2, 1, 1, {}, "SAME_UPPER", {}, {10, 8}},
        {"output_shape_grows_y", 2, 2, 3, 3, 3, 3, 3, 1, 3, 2, 1, 1, {}, "", {}, {11, 9}, "none", true, true},
        {"ones_1x1", 1, 1, 1, 1, 1, 1, 1},
        {"conv1d", 2, 4, 5, 0, 13, 0, 5, 1, 1, 3, 1, 1, {2, 1}, "", {2}, {}, "sigmoid", true, true, true},
        {"conv1d_groups_dilated", 1, 6, 4, 0, 19, 0, 3, 2, 1, 1, 1, 3, {0, 3}},
        {"large_rows_in_two_blocks", 1, 8, 64, 80, 64, 4, 4, 1, 2, 2, 1, 1, {1, 1, 1, 1}, "", {}, {}, "relu"},
        // Kernel = stride: the exact-tiling path (no zeroed plane, the epilogue per row), with
        // groups, a residual and two images; then over two row blocks, and at stride 3 x 2.
        {"k2_s2_exact_groups_residual_batch2", 2, 6, 4, 5, 7, 2, 2, 2, 2, 2, 1, 1, {}, "", {}, {}, "leaky_relu", true, true},
        {"k2_s2_exact_two_blocks", 1, 1, 64, 136, 128, 2, 2, 1, 2, 2, 1, 1, {}, "", {}, {}, "relu", true, true, true},
        {"k3x2_s3x2_exact", 1, 3, 5, 4, 6, 3, 2, 1, 3, 2, 1, 1, {}, "", {}, {}, "prelu"},
        // A Y of 71 MB: written with non-temporal stores.
        {"k2_s2_exact_streamed", 1, 1, 64, 272, 256, 2, 2, 1, 2, 2, 1, 1, {}, "", {}, {}, "relu", true, true},
        // The sub-pixel form (a 3x3 Winograd conv into K x sh x sw phases, then a shuffle):
        // Real-CUGAN's 4x4 stride-2 pads 3 with a residual, F(6,3) over two images, the up3x
        // kernel 5 at stride 3, uneven kernels and pads with output_padding, an output_shape
        // past the input (rows of bias only); then pads past two strides and groups, which keep
        // the GEMM (the latter over two row blocks).
        {"subpixel_k4_s2_p3_residual", 1, 16, 8, 13, 17, 4, 4, 1, 2, 2, 1, 1, {3, 3, 3, 3}, "", {}, {}, "none", true, true},
        {"subpixel_k4_s2_f63_batch2", 2, 32, 16, 9, 14, 4, 4, 1, 2, 2, 1, 1, {1, 1, 1, 1}, "", {}, {}, "leaky_relu", true, true, true},
        {"subpixel_k5_s3_p2", 1, 5, 3, 7, 8, 5, 5, 1, 3, 3, 1, 1, {2, 2, 2, 2}, "", {}, {}, "prelu"},
        {"subpixel_k6x5_s2_uneven_pads", 1, 4, 3, 6, 7, 6, 5, 1, 2, 2, 1, 1, {0, 5, 4, 1}, "", {1, 1}, {}, "relu", true, true},
        {"subpixel_output_shape_grows", 1, 3, 2, 4, 5, 4, 4, 1, 2, 2, 1, 1, {}, "", {}, {12, 13}},
        // At most 12 phase channels take the direct window (cpu::direct_conv): a last layer to
        // RGB over rows of several passes, two images, a residual.
        {"subpixel_direct_to_rgb_wide", 2, 40, 3, 7, 75, 4, 4, 1, 2, 2, 1, 1, {3, 3, 3, 3}, "", {}, {}, "none", true, true},
        {"k4_s2_pads_past_two_strides", 1, 3, 4, 8, 9, 4, 4, 1, 2, 2, 1, 1, {6, 6, 6, 6}, "", {}, {}, "relu"},
        {"k4_s2_groups_two_blocks", 1, 8, 128, 80, 64, 4, 4, 2, 2, 2, 1, 1, {1, 1, 1, 1}, "", {}, {}, "relu"},
    };
    return v;
}

// The cases that run in the sub-pixel form: their launches prepare a state (the conv's
// transformed weights); the others' have nothing to prepare.
bool sub_pixel_case(const Case& c) {
    static const std::set<std::string> names = {
        "basic_3x3_pad1",          "upsample_k4_s2_p1_batch2",     "large_rows_in_two_blocks",
        "subpixel_k4_s2_p3_residual", "subpixel_k4_s2_f63_batch2", "subpixel_k5_s3_p2",
        "subpixel_k6x5_s2_uneven_pads", "subpixel_output_shape_grows", "subpixel_direct_to_rgb_wide"};
    return names.count(c.name) > 0;
}

template <typename T>
KernelLaunch launch_of(const Case& c, const Data& d, std::vector<T>& x, std::vector<T>& w, std::vector<T>& b,
                       std::vector<T>& r, std::vector<T>& s, std::vector<T>& y) {
    const DType dt = dtype_of<T>();
    KernelLaunch l;
    TensorRef empty = shape_ref(dt, {0}, nullptr);
    l.inputs = {shape_ref(dt, d.xd, x.data()), shape_ref(dt, d.wd, w.data()),
                c.bias ? shape_ref(dt, {c.k}, b.data()) : empty, c.residual ? shape_ref(dt, d.yd, r.data()) : empty};
    if (c.act == "prelu") l.inputs.push_back(shape_ref(dt, {c.k}, s.data()));
    l.outputs = {shape_ref(dt, d.yd, y.data())};
    l.attrs = attrs_of(c);
    return l;
}

class ConvTransposeF32 : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(ConvTransposeF32, MatchesFloat64Reference) {
    auto [want, idx] = GetParam();
    const Case& c = cases()[idx];
    SKIP_UNLESS_ISA(want);
    const Geo g = geometry(c);
    Data d = make_data(c, g, static_cast<uint32_t>(idx * 7 + 2));
    std::vector<float> y(d.r.size(), std::nanf(""));
    KernelLaunch l = launch_of(c, d, d.x, d.w, d.b, d.r, d.s, y);
    IsaGuard isa_guard(want);
    ThreadPool pool(2);
    loom::Status st = convt_kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    reference(c, g, d, ref, mag);
    expect_within_bound(y, ref, mag);
    // Prepared (W constant): a sub-pixel launch keeps the transformed weights and computes the
    // same bits without reading W again; the GEMM path has nothing to keep.
    l.constant_inputs = 1u << 1;
    auto state = convt_kernel().prepare(l);
    ASSERT_TRUE(state.ok()) << state.status().to_string();
    ASSERT_EQ(*state != nullptr, sub_pixel_case(c));
    if (!*state) return;
    l.state = *state;
    std::fill(d.w.begin(), d.w.end(), 0.0f);
    std::vector<float> y2(y.size(), std::nanf(""));
    l.outputs[0].data = y2.data();
    ASSERT_TRUE(convt_kernel().run(l, pool).ok());
    EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(float))) << "the prepared run differs";
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvTransposeF32,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Range(size_t{0}, cases().size())),
                         [](const auto& info) {
                             return std::string(cpu::isa_name(std::get<0>(info.param))) + "_" +
                                    cases()[std::get<1>(info.param)].name;
                         });

class ConvTransposeF16 : public ::testing::TestWithParam<size_t> {};

TEST_P(ConvTransposeF16, MatchesFloat64RoundedToF16) {
    const Case& c = cases()[GetParam()];
    const Geo g = geometry(c);
    Data d = make_data(c, g, static_cast<uint32_t>(GetParam() * 11 + 4));
    auto xh = round_to_f16(d.x), wh = round_to_f16(d.w), bh = round_to_f16(d.b);
    auto rh = round_to_f16(d.r), sh = round_to_f16(d.s);
    std::vector<f16> y(d.r.size());
    KernelLaunch l = launch_of(c, d, xh, wh, bh, rh, sh, y);
    ThreadPool pool(2);
    loom::Status st = convt_kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    reference(c, g, d, ref, mag);
    expect_within_bound(y, ref, mag);
    // On every level, the bits of the fp32 launch on the same (widened) values rounded once:
    // fp16 X is widened as the GEMM packs it, and the exact-tiling path rounds Y's rows itself.
    using loom::test::widen_f16;
    auto xw = widen_f16(xh), ww = widen_f16(wh), bw = widen_f16(bh), rw = widen_f16(rh), sw = widen_f16(sh);
    for (cpu::Isa level : loom::test::supported_isas()) {
        SCOPED_TRACE(cpu::isa_name(level));
        IsaGuard guard(level);
        std::vector<f16> yh(y.size(), f16{0x7e00});
        std::vector<float> yf(y.size());
        KernelLaunch lh = launch_of(c, d, xh, wh, bh, rh, sh, yh), lf = launch_of(c, d, xw, ww, bw, rw, sw, yf);
        ASSERT_TRUE(convt_kernel().run(lh, pool).ok());
        ASSERT_TRUE(convt_kernel().run(lf, pool).ok());
        EXPECT_EQ(loom::test::count_unlike_rounded(yf, yh), 0)
            << "of " << yf.size() << " outputs differ from the fp32 launch's rounded";
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvTransposeF16, ::testing::Range(size_t{0}, cases().size()),
                         [](const auto& info) { return cases()[info.param].name; });

// ---- the ONNX spec's examples (onnx/backend/test/case/node/convtranspose.py) -------------------

// X = 0..8 as [1, 1, 3, 3] and W = ones [1, 2, 3, 3], as in most of the spec's examples.
std::vector<float> run_example(const KernelAttrs& attrs, std::vector<int64_t> ydims, std::vector<float> x = {},
                               std::vector<int64_t> xdims = {1, 1, 3, 3}, std::vector<float> w = {},
                               std::vector<int64_t> wdims = {1, 2, 3, 3}) {
    if (x.empty())
        for (int i = 0; i < element_count(xdims); ++i) x.push_back(float(i));
    if (w.empty()) w.assign(size_t(element_count(wdims)), 1.0f);
    std::vector<float> y(size_t(element_count(ydims)), std::nanf(""));
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, xdims, x.data()), shape_ref(DType::F32, wdims, w.data())};
    l.outputs = {shape_ref(DType::F32, ydims, y.data())};
    l.attrs = attrs;
    ThreadPool pool(2);
    loom::Status st = convt_kernel().run(l, pool);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return y;
}

// Both output channels of the W = ones examples are equal: repeats one channel.
std::vector<float> twice(std::vector<float> v) {
    std::vector<float> out = v;
    out.insert(out.end(), v.begin(), v.end());
    return out;
}

// Stride 1 with a 3x3 kernel runs as a 3x3 conv on the Winograd path (the sub-pixel form), whose
// transforms round: the spec's integers come back within a few ulps of 36 (2^-18 apart), not exactly.
TEST(ConvTransposeOnnx, Basic) {
    const std::vector<float> y = run_example({}, {1, 2, 5, 5});
    const std::vector<float> want =
        twice({0, 1, 3, 3, 2, 3, 8, 15, 12, 7, 9, 21, 36, 27, 15, 9, 20, 33, 24, 13, 6, 13, 21, 15, 8});
    ASSERT_EQ(y.size(), want.size());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-4) << "at " << i;
}

TEST(ConvTransposeOnnx, OneDimensional) {
    EXPECT_EQ(run_example({}, {1, 2, 5}, {0, 1, 2}, {1, 1, 3}, {}, {1, 2, 3}), twice({0, 1, 3, 3, 2}));
}

TEST(ConvTransposeOnnx, Pads) {
    KernelAttrs a{{"strides", std::vector<int64_t>{3, 2}}, {"pads", std::vector<int64_t>{1, 2, 1, 2}}};
    EXPECT_EQ(run_example(a, {1, 2, 7, 3}),
              twice({1, 1, 3, 1, 1, 3, 7, 4, 9, 7, 4, 9, 7, 4, 9, 13, 7, 15, 13, 7, 15}));
}

// output_shape, output_padding, and both with kernel_shape give the same Y: the spec's
// output_shape example needs one more row and column than the unpadded output (total padding -1).
TEST(ConvTransposeOnnx, OutputShapeAndOutputPadding) {
    const std::vector<float> want = twice({0, 0, 1, 1, 3,  2, 2, 0, 0, 0, 1, 1, 3,  2, 2, 0, 0, 0, 1, 1, 3,  2, 2, 0,
                                           3, 3, 7, 4, 9,  5, 5, 0, 3, 3, 7, 4, 9,  5, 5, 0, 3, 3, 7, 4, 9,  5, 5, 0,
                                           6, 6, 13, 7, 15, 8, 8, 0, 6, 6, 13, 7, 15, 8, 8, 0, 6, 6, 13, 7, 15, 8, 8, 0,
                                           0, 0, 0, 0, 0,  0, 0, 0});
    const std::vector<int64_t> strides = {3, 2};
    EXPECT_EQ(run_example({{"strides", strides}, {"output_shape", std::vector<int64_t>{10, 8}}}, {1, 2, 10, 8}), want);
    EXPECT_EQ(run_example({{"strides", strides}, {"output_padding", std::vector<int64_t>{1, 1}}}, {1, 2, 10, 8}), want);
    EXPECT_EQ(run_example({{"strides", strides},
                           {"output_shape", std::vector<int64_t>{10, 8}},
                           {"kernel_shape", std::vector<int64_t>{3, 3}},
                           {"output_padding", std::vector<int64_t>{1, 1}}},
                          {1, 2, 10, 8}),
              want);
}

TEST(ConvTransposeOnnx, AutoPadSameUpper) {
    KernelAttrs a{{"strides", std::vector<int64_t>{2, 2}}, {"auto_pad", std::string("SAME_UPPER")}};
    EXPECT_EQ(run_example(a, {1, 2, 6, 6}), twice({0, 0, 1,  1,  3,  2,  0, 0, 1,  1,  3,  2,  3, 3, 8,  5,  12, 7,
                                                   3, 3, 7, 4,  9,  5,  9, 9, 20, 11, 24, 13, 6, 6, 13, 7,  15, 8}));
}

TEST(ConvTransposeOnnx, Dilations) {
    KernelAttrs a{{"dilations", std::vector<int64_t>{2, 2}}};
    EXPECT_EQ(run_example(a, {1, 1, 5, 5}, {3, 8, 1, 9, 5, 7, 3, 2, 6}, {1, 1, 3, 3}, {7, 2, 1, 9}, {1, 1, 2, 2}),
              (std::vector<float>{21, 56, 13, 16, 2, 63, 35, 67, 10, 14, 24, 22, 76, 76, 21, 9, 5, 88, 45, 63, 3, 2,
                                  33, 18, 54}));
}

// ---- errors ----------------------------------------------------------------------------------

void expect_rejected(const KernelLaunch& l, StatusCode code, const std::string& needle) {
    loom::test::expect_rejected(convt_kernel(), l, code, needle);
}

TEST(ConvTransposeErrors, NameTheProblem) {
    // X [1, 4, 5, 5], W [4, 3, 3, 3], stride 2, pads 1: Y [1, 3, 9, 9].
    std::vector<float> buf(4096, 1.0f), y(3 * 11 * 11);
    float* p = buf.data();
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {1, 4, 5, 5}, p), shape_ref(DType::F32, {4, 3, 3, 3}, p)};
    l.outputs = {shape_ref(DType::F32, {1, 3, 9, 9}, y.data())};
    l.attrs = {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    ThreadPool pool(1);
    ASSERT_TRUE(convt_kernel().run(l, pool).ok());

    KernelLaunch bad = l;
    bad.outputs = {shape_ref(DType::F32, {1, 3, 10, 10}, y.data())};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "Y is 1x3x10x10 but X 1x4x5x5 and W 4x3x3x3 give 1x3x9x9");
    bad = l;
    bad.inputs[1] = shape_ref(DType::F32, {5, 3, 3, 3}, p);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "X has 4 channels and W is 5x3x3x3 with group 1");
    bad = l;
    bad.attrs.set("group", int64_t{3});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "group 3");
    bad = l;
    bad.attrs.set("output_padding", std::vector<int64_t>{2, 0});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "'output_padding' 2 must be below the stride");
    bad = l;
    bad.attrs.set("output_shape", std::vector<int64_t>{9, 9});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "'pads' and 'output_shape' exclude each other");
    bad = l;
    bad.attrs = {{"strides", std::vector<int64_t>{2, 2}}, {"output_shape", std::vector<int64_t>{9, 10}}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "'output_shape' disagrees with the output tensor");
    bad = l;
    bad.attrs.set("strides", std::vector<int64_t>{2, 2, 2});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "attribute 'strides' needs 2 values, got 3");
    bad = l;
    bad.attrs.set("auto_pad", std::string("SAME"));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "auto_pad");
    bad = l;
    bad.attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "kernel_shape");
    bad = l;
    bad.attrs.set("dilation", std::vector<int64_t>{1, 1});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "unknown attribute 'dilation'");
    bad = l;
    bad.attrs.set("activation", std::string("prelu"));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "slope input S");
    bad = l;
    bad.attrs.set("residual_after_activation", int64_t{2});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "'residual_after_activation' is 2");
    bad = l;
    bad.inputs.push_back(shape_ref(DType::F32, {4}, p));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "B is 4 f32, must hold K = 3");
    bad = l;
    bad.inputs.push_back(shape_ref(DType::F32, {0}, nullptr));
    bad.inputs.push_back(shape_ref(DType::F32, {1, 3, 9, 8}, p));
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "residual R is 1x3x9x8 f32, must match Y 1x3x9x9");
    bad = l;
    bad.inputs[1] = shape_ref(DType::F16, {4, 3, 3, 3}, p);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "mixed dtypes");
    bad = l;
    bad.inputs[0] = shape_ref(DType::F32, {4, 5, 5}, p);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "same rank");
    bad = l;
    bad.attrs = {{"pads", std::vector<int64_t>{3, 3, 3, 3}}};  // 7 - 6 = 1 row left; more empties it
    bad.outputs = {shape_ref(DType::F32, {1, 3, 1, 1}, y.data())};
    ASSERT_TRUE(convt_kernel().run(bad, pool).ok());
    bad.attrs = {{"pads", std::vector<int64_t>{4, 4, 3, 3}}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "the pads leave an empty output");
    std::vector<int32_t> xi(100);
    bad = l;
    bad.inputs[0] = shape_ref(DType::I32, {1, 4, 5, 5}, xi.data());
    expect_rejected(bad, StatusCode::UNSUPPORTED, "dtype i32");
}

// ---- cost --------------------------------------------------------------------------------------

// A decoder-style 2x upsampling: k4 s2 p1, H x W -> 2H x 2W.
KernelLaunch cost_launch(int64_t c, int64_t k, int64_t h, int64_t w, int64_t group = 1) {
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F16, {1, c, h, w}, nullptr), shape_ref(DType::F16, {c, k / group, 4, 4}, nullptr)};
    l.outputs = {shape_ref(DType::F16, {1, k, 2 * h, 2 * w}, nullptr)};
    l.attrs = {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    if (group > 1) l.attrs.set("group", group);
    return l;
}

TEST(ConvTransposeCost, ScalesWithWorkAndCountsTheGemm) {
    for (std::string_view preset : loom::test::presets()) {
        const DeviceSpec& s = loom::test::preset_spec(preset);
        auto small = convt_kernel().cost(cost_launch(64, 32, 30, 40), s);
        auto big = convt_kernel().cost(cost_launch(64, 32, 120, 160), s);
        ASSERT_TRUE(small.ok() && big.ok()) << small.status().to_string() << big.status().to_string();
        EXPECT_GT(small->total, 0);
        EXPECT_GT(big->total, 8 * small->total);  // 16x the pixels
        EXPECT_DOUBLE_EQ(big->flops, 2.0 * 120 * 160 * 64 * 32 * 16);
        EXPECT_GT(big->vector, 0);  // col2im
        // Groups divide the work.
        auto grouped = convt_kernel().cost(cost_launch(64, 32, 120, 160, 4), s);
        ASSERT_TRUE(grouped.ok()) << grouped.status().to_string();
        EXPECT_DOUBLE_EQ(grouped->flops, big->flops / 4);
        EXPECT_LT(grouped->total, big->total);
    }
}

TEST(ConvTransposeCost, EpilogueAndOverlapAddVectorWork) {
    const DeviceSpec& s = loom::test::preset_spec("edge");
    KernelLaunch l = cost_launch(32, 32, 60, 80);
    const CycleBreakdown plain = *convt_kernel().cost(l, s);
    KernelLaunch fused = l;
    fused.inputs.push_back(shape_ref(DType::F16, {32}, nullptr));
    fused.inputs.push_back(shape_ref(DType::F16, {1, 32, 120, 160}, nullptr));
    fused.attrs.set("activation", std::string("relu"));
    auto f = convt_kernel().cost(fused, s);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_GT(f->vector, plain.vector);
    EXPECT_GE(f->total, plain.total);
}

TEST(ConvTransposeCost, IllegalTilingIsRejected) {
    KernelLaunch l = cost_launch(64, 64, 60, 80);
    CubeTiling t;
    t.m_l0 = t.n_l0 = t.k_l0 = 1024;
    t.m_l1 = t.n_l1 = t.k_l1 = 1024;
    l.tiling = t;
    auto cb = convt_kernel().cost(l, loom::test::preset_spec("edge"));
    EXPECT_EQ(cb.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(cb.status().message().find("conv_transpose: tiling"), std::string::npos) << cb.status().to_string();
    l.tiling = VectorSchedule{256, true, 0};
    EXPECT_EQ(convt_kernel().cost(l, loom::test::preset_spec("edge")).status().code(), StatusCode::INVALID_ARGUMENT);
}

// ---- int8 -----------------------------------------------------------------------------------

struct Int8Case {
    Case c;
    bool per_tensor = false;  // WS holds 1 value
    bool f16 = false;         // X, B, R, S and Y f16 (else f32)
};

const std::vector<Int8Case>& int8_cases() {
    static const std::vector<Int8Case> v = {
        {cases()[0]}, {cases()[1], true, true}, {cases()[2]}, {cases()[3]}, {cases()[4], false, true},
        {cases()[5]}, {cases()[7], true}, {cases()[11], true}, {cases()[12], false, true}, {cases()[13]},
        {cases()[14]},
        // The sub-pixel form on the integer F(4,3): Real-CUGAN's pads, fp16 over two images,
        // 5x5 at stride 3; 12 phase channels keep the GEMM.
        {cases()[19]}, {cases()[20], false, true}, {cases()[21], true}, {cases()[22]},
        // 65 channels per group x 16 taps = 1040 products per output: int32 sums, per group.
        {{"groups_int32_sums", 1, 130, 6, 5, 7, 4, 4, 2, 2, 2, 1, 1, {1, 1, 1, 1}, "", {}, {}, "relu", true, true}},
    };
    return v;
}

// The float64 result, magnitude bound and exact sums of each output, by scattering every
// quantized input pixel times the i8 W; WS has 1 or K values.
void int8_reference(const Case& c, const Geo& g, const Data& d, float xs, const std::vector<int8_t>& w,
                    const std::vector<float>& ws, std::vector<double>& out, std::vector<double>& mag,
                    std::vector<int64_t>& sums) {
    const int64_t H = c.h > 0 ? c.h : 1, kh = c.h > 0 ? c.kh : 1, cg = c.c / c.group, kg = c.k / c.group;
    const int64_t plane = g.ho * g.wo;
    std::vector<int64_t> abs_sums(size_t(c.n * c.k * plane), 0);
    sums.assign(abs_sums.size(), 0);
    for (int64_t n = 0; n < c.n; ++n)
        for (int64_t ci = 0; ci < c.c; ++ci)
            for (int64_t kl = 0; kl < kg; ++kl) {
                const int64_t k = (ci / cg) * kg + kl;
                for (int64_t iy = 0; iy < H; ++iy)
                    for (int64_t ix = 0; ix < c.w; ++ix) {
                        const float xv = d.x[size_t(((n * c.c + ci) * H + iy) * c.w + ix)];
                        const int64_t q = loom::test::ref_quantize(xv, xs);
                        for (int64_t ky = 0; ky < kh; ++ky)
                            for (int64_t kx = 0; kx < c.kw; ++kx) {
                                const int64_t oy = iy * c.sh + ky * c.dh - g.pt, ox = ix * c.sw + kx * c.dw - g.pl;
                                if (oy < 0 || oy >= g.ho || ox < 0 || ox >= g.wo) continue;
                                const int64_t p = q * int64_t(w[size_t(((ci * kg + kl) * kh + ky) * c.kw + kx)]);
                                const size_t o = size_t((n * c.k + k) * plane + oy * g.wo + ox);
                                sums[o] += p, abs_sums[o] += std::abs(p);
                            }
                    }
            }
    out.assign(sums.size(), 0), mag.assign(sums.size(), 0);
    for (size_t o = 0; o < out.size(); ++o) {
        const size_t k = (o / size_t(plane)) % size_t(c.k);
        const double factor = double(xs) * ws[ws.size() == 1 ? 0 : k];
        double sum = factor * double(sums[o]), m = std::abs(factor) * double(abs_sums[o]);
        if (c.bias) sum += d.b[k], m += std::abs(d.b[k]);
        const double rv = c.residual ? d.r[o] : 0;
        if (c.residual && !c.after) sum += rv, m += std::abs(rv);
        sum = ref_activation(c.act, sum, d.s[k]);
        if (c.residual && c.after) sum += rv, m += std::abs(rv);
        out[o] = sum, mag[o] = m;
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

class ConvTransposeInt8 : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(ConvTransposeInt8, MatchesTheQuantizedReference) {
    auto [want, idx] = GetParam();
    const Int8Case& ic = int8_cases()[idx];
    const Case& c = ic.c;
    SKIP_UNLESS_ISA(want);
    IsaGuard isa_guard(want);
    const Geo g = geometry(c);
    const uint32_t seed = static_cast<uint32_t>(idx * 23 + 7);
    Data d = make_data(c, g, seed);
    for (float& v : d.x) v *= 1.5f;  // |x| / x_scale up to 150: some values clamp to +-127
    std::vector<int8_t> w = loom::test::random_int8(d.w.size(), seed + 1);
    std::mt19937 rng(seed + 2);
    std::vector<float> ws = ic.per_tensor ? std::vector<float>{0.004f}
                                          : loom::test::random_floats(rng, size_t(c.k), 0.001f, 0.01f);
    const float xs = 0.01f;
    ThreadPool pool(2);
    std::vector<double> ref, mag;
    std::vector<int64_t> sums;
    if (ic.f16) {
        auto xh = round_to_f16(d.x), bh = round_to_f16(d.b), rh = round_to_f16(d.r), sh = round_to_f16(d.s);
        std::vector<f16> y(d.r.size());
        loom::Status st = convt_kernel().run(int8_launch(c, d, xh, w, bh, rh, sh, ws, xs, y), pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        int8_reference(c, g, d, xs, w, ws, ref, mag, sums);
        expect_within_bound(y, ref, mag);
    } else {
        std::vector<float> y(d.r.size(), std::nanf(""));
        loom::Status st = convt_kernel().run(int8_launch(c, d, d.x, w, d.b, d.r, d.s, ws, xs, y), pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        int8_reference(c, g, d, xs, w, ws, ref, mag, sums);
        expect_within_bound(y, ref, mag);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, ConvTransposeInt8,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Range(size_t{0}, int8_cases().size())),
                         [](const auto& info) {
                             const Int8Case& ic = int8_cases()[std::get<1>(info.param)];
                             return std::string(cpu::isa_name(std::get<0>(info.param))) + "_" + ic.c.name +
                                    (ic.f16 ? "_f16" : "") + (ic.per_tensor ? "_per_tensor" : "");
                         });

// The sub-pixel form on the integer F(4,3) gives the GEMM path's bits: each output is its exact
// int32 sum (less than 2^24 here) converted to fp32 and times x_scale x WS[k] (one fp32
// product), one rounding; no bias or activation after it. Real-CUGAN's 4x4 stride-2 pads-3 with
// 24 channels to 8 (32 phase channels), per-channel scales, on every ISA.
TEST(ConvTransposeInt8, TheSubPixelFormGivesTheExactSums) {
    const Case c{"subpixel_int8_bits", 1, 24, 8, 11, 37, 4, 4, 1, 2, 2, 1, 1, {3, 3, 3, 3}, "", {}, {}, "none", false};
    const Geo g = geometry(c);
    Data d = make_data(c, g, 91);
    std::vector<int8_t> w = loom::test::random_int8(d.w.size(), 92);
    std::mt19937 rng(93);
    std::vector<float> ws = loom::test::random_floats(rng, size_t(c.k), 0.001f, 0.01f);
    const float xs = 0.01f;
    std::vector<double> ref, mag;
    std::vector<int64_t> sums;
    int8_reference(c, g, d, xs, w, ws, ref, mag, sums);
    const int64_t plane = g.ho * g.wo;
    ThreadPool pool(2);
    for (cpu::Isa level : loom::test::supported_isas()) {
        SCOPED_TRACE(cpu::isa_name(level));
        IsaGuard guard(level);
        std::vector<float> y(size_t(c.k * plane), std::nanf(""));
        KernelLaunch l = int8_launch(c, d, d.x, w, d.b, d.r, d.s, ws, xs, y);
        l.constant_inputs = 1u << 1;  // prepared, as a compiled model's launch is: the form's state
        auto state = convt_kernel().prepare(l);
        ASSERT_TRUE(state.ok()) << state.status().to_string();
        ASSERT_NE(*state, nullptr) << "the int8 launch did not take the sub-pixel form";
        l.state = *state;
        ASSERT_TRUE(convt_kernel().run(l, pool).ok());
        int64_t wrong = 0;
        for (size_t o = 0; o < y.size(); ++o) {
            const float factor = xs * ws[(o / size_t(plane)) % size_t(c.k)];
            wrong += y[o] != static_cast<float>(sums[o]) * factor;
        }
        EXPECT_EQ(wrong, 0) << "of " << y.size() << " outputs differ from the exact sums";
    }
}

// 400 input channels to 16, 3x3, stride 1: each output sums 400 x (up to) 9 products. X = 127 / 4
// everywhere (x_scale 1/4), W = +127 on the ky = 0 taps (three GEMM rows of 400 x 16129 =
// 6451600: past 2^24 together), small values on ky = 1, -127 on ky = 2; WS = 1/8. An inner
// output's sum is what ky = 1 adds, which fp32 sums over the taps would round away. Y = the
// int32 sum converted to fp32 (exact below 2^24, as inside), / 32.
TEST(ConvTransposeInt8, SumsOverTapsAreExactInt32) {
    const Case c{"taps_past_2p24", 1, 400, 16, 4, 5, 3, 3, 1, 1, 1, 1, 1, {1, 1, 1, 1}, "", {}, {}, "none", false};
    const Geo g = geometry(c);
    Data d = make_data(c, g, 400);
    for (float& v : d.x) v = 127.0f / 4;
    std::mt19937 rng(401);
    std::vector<int8_t> w(d.w.size());
    for (size_t i = 0; i < w.size(); ++i) {
        const int64_t ky = int64_t(i / 3) % 3;
        const int32_t small = int32_t(rng() % 19) - 9;
        w[i] = int8_t(ky == 0 ? 127 : ky == 2 ? -127 : small == 0 ? 1 : small);
    }
    std::vector<float> ws = {0.125f};
    for (cpu::Isa isa : loom::test::supported_isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        IsaGuard guard(isa);
        std::vector<float> y(d.r.size(), std::nanf(""));
        ThreadPool pool(2);
        loom::Status st = convt_kernel().run(int8_launch(c, d, d.x, w, d.b, d.r, d.s, ws, 0.25f, y), pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        // These weights break the integer Winograd's bound: the sub-pixel form (stride 1, 3x3,
        // 16 phase channels) keeps the GEMM, and a prepared launch records that (a state without
        // weights) and gives the same bits.
        std::vector<float> y2(y.size(), std::nanf(""));
        KernelLaunch lp = int8_launch(c, d, d.x, w, d.b, d.r, d.s, ws, 0.25f, y2);
        lp.constant_inputs = 1u << 1;
        auto state = convt_kernel().prepare(lp);
        ASSERT_TRUE(state.ok()) << state.status().to_string();
        ASSERT_NE(*state, nullptr);
        lp.state = *state;
        ASSERT_TRUE(convt_kernel().run(lp, pool).ok());
        EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)));
        std::vector<double> ref, mag;
        std::vector<int64_t> sums;
        int8_reference(c, g, d, 0.25f, w, ws, ref, mag, sums);
        int64_t bad = 0;
        for (size_t i = 0; i < y.size(); ++i)
            if (double(y[i]) * 32 != double(float(sums[i])) && ++bad <= 5)
                ADD_FAILURE() << "y[" << i << "] * 32 = " << double(y[i]) * 32 << ", the int32 sum is " << sums[i];
        EXPECT_EQ(bad, 0);
        // Inside (rows 1-2, columns 1-3 of 4 x 5) every tap lands: the large sums cancel.
        for (int64_t k = 0; k < c.k; ++k)
            for (int64_t oy = 1; oy <= 2; ++oy)
                for (int64_t ox = 1; ox <= 3; ++ox) EXPECT_LT(std::abs(sums[size_t((k * 4 + oy) * 5 + ox)]), 1 << 24);
    }
}

TEST(ConvTransposeInt8Errors, NameTheTensorOrAttribute) {
    // X [1, 4, 5, 5], W [4, 3, 3, 3] i8 with group 2 (K = 6), stride 2, pads 1: Y [1, 6, 9, 9].
    std::vector<float> x(100, 1.0f), y(6 * 81), ws(6, 0.5f);
    std::vector<int8_t> w(4 * 3 * 9, 5);
    const TensorRef empty = shape_ref(DType::F32, {0}, nullptr);
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {1, 4, 5, 5}, x.data()), shape_ref(DType::I8, {4, 3, 3, 3}, w.data()), empty,
                empty, empty, shape_ref(DType::F32, {6}, ws.data())};
    l.outputs = {shape_ref(DType::F32, {1, 6, 9, 9}, y.data())};
    l.attrs = {{"strides", std::vector<int64_t>{2, 2}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}},
               {"group", int64_t{2}}, {"x_scale", 0.25}};
    ThreadPool pool(1);
    ASSERT_TRUE(convt_kernel().run(l, pool).ok());
    KernelLaunch bad = l;
    bad.inputs[5] = shape_ref(DType::F32, {3}, ws.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv_transpose: WS is 3 f32, must hold 1 or K = 6 f32 values");
    bad = l;
    bad.inputs.resize(5);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv_transpose: W is i8 and needs its per-channel scales WS");
    bad = l;
    bad.attrs.set("x_scale", -1.0);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv_transpose: attribute 'x_scale' is -1");
    bad = l;
    bad.inputs[1] = shape_ref(DType::F32, {4, 3, 3, 3}, x.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv_transpose: WS (input 5) is given but W is f32");
    bad = l;
    bad.inputs.push_back(empty);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "conv_transpose takes 2 to 6 inputs, got 7");
}

TEST(ConvTransposeInt8Cost, TheCubeRunsAtTwiceTheRate) {
    for (std::string_view preset : loom::test::presets()) {
        const DeviceSpec& s = loom::test::preset_spec(preset);
        KernelLaunch h = cost_launch(256, 128, 60, 80);
        KernelLaunch q = h;
        q.inputs[1].dtype = DType::I8;
        const TensorRef empty = shape_ref(DType::F16, {0}, nullptr);
        q.inputs.insert(q.inputs.end(), {empty, empty, empty, shape_ref(DType::F32, {128}, nullptr)});
        q.attrs.set("x_scale", 0.5);
        auto hc = convt_kernel().cost(h, s), qc = convt_kernel().cost(q, s);
        ASSERT_TRUE(hc.ok() && qc.ok()) << qc.status().to_string();
        EXPECT_DOUBLE_EQ(qc->cube, 0.5 * hc->cube) << preset;
        EXPECT_GT(qc->vector, hc->vector) << preset;  // quantize and dequantize
        EXPECT_LT(qc->total, hc->total) << preset;
    }
}

}  // namespace

}  // namespace test_kernel_conv_transpose
