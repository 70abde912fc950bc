// resize (device/kernels/resize.cpp): ONNX Resize. The reference is an independent float64
// port of the ONNX reference implementation's structure: interpolate axis by axis recursively,
// each 1-D sample taking the n nearest indices of the edge-padded row (ties to the lower index)
// with the mode's coefficients. f32 within 4e-6 of it (fp32 weights and sums over data in
// [-1, 1]); f16 within 1 f16 ulp of the float64 result rounded to f16. Every mode x coordinate
// mode (and nearest_mode, exclude_outside, cubic_coeff_a, scales, roi) on odd shapes (1x1, 7x13,
// prime sizes, up and down, integer and fractional factors), the N-D path (resizing channels and
// 3-D volumes), rank 1, the ONNX documentation examples with their published outputs, the
// integer-factor nearest fast path (Real-ESRGAN x2/x3/x4) and bilinear on three threads. Errors
// name the problem; cost is positive, grows with size and checks the schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_resize {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("resize"); }

struct Spec {
    std::string mode = "nearest", coord = "half_pixel", nearest = "round_prefer_floor";
    double a = -0.75;
    int exclude = 0;
    double extrap = 0;
    std::vector<double> scales, roi;  // empty: attribute absent
};

KernelAttrs attrs_of(const Spec& s) {
    KernelAttrs a{{"mode", s.mode}, {"coordinate_transformation_mode", s.coord}, {"nearest_mode", s.nearest}};
    if (s.a != -0.75) a.set("cubic_coeff_a", s.a);
    if (s.exclude) a.set("exclude_outside", int64_t{1});
    if (s.extrap != 0) a.set("extrapolation_value", s.extrap);
    if (!s.scales.empty()) a.set("scales", s.scales);
    if (!s.roi.empty()) a.set("roi", s.roi);
    return a;
}

// ---- float64 reference ---------------------------------------------------------------------
// Per axis, the ONNX reference's 1-D rule; axes combine as the reference's recursion does.

double ref_coord(const Spec& s, size_t axis, size_t rank, int64_t o, int64_t in, int64_t out, double scale) {
    const double x = static_cast<double>(o), n = static_cast<double>(in);
    const double len = s.scales.empty() ? static_cast<double>(out) : scale * n;
    if (s.coord == "half_pixel") return (x + 0.5) / scale - 0.5;
    if (s.coord == "half_pixel_symmetric") {
        const double offset = n / 2 * (1 - static_cast<double>(out) / len);
        return offset + (x + 0.5) / scale - 0.5;
    }
    if (s.coord == "pytorch_half_pixel") return len > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
    if (s.coord == "align_corners") return len == 1 ? 0.0 : x * (n - 1) / (len - 1);
    if (s.coord == "asymmetric") return x / scale;
    const double r0 = s.roi.empty() ? 0.0 : s.roi[axis], r1 = s.roi.empty() ? 1.0 : s.roi[axis + rank];
    if (len == 1) return (r1 - r0) * (n - 1) / 2 + r0 * (n - 1);
    return x * (r1 - r0) * (n - 1) / (len - 1) + r0 * (n - 1);
}

std::vector<double> ref_coeffs(const Spec& s, double ratio) {
    if (s.mode == "nearest") {
        if (ratio == std::floor(ratio)) return {0, 1};
        if (s.nearest == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
        if (s.nearest == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
        if (s.nearest == "floor") return {1, 0};
        return {0, 1};
    }
    if (s.mode == "linear") return {1 - ratio, ratio};
    const double A = s.a;
    auto far = [A](double d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };  // 1 <= d < 2
    auto near = [A](double d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };        // d < 1
    return {far(ratio + 1), near(ratio), near(1 - ratio), far(2 - ratio)};
}

// One axis's sample at output index o: the input indices (clamped: the row is edge-padded) and
// coefficients it combines, or `outside` for tf_crop_and_resize's extrapolation.
struct Taps {
    bool outside = false;
    std::vector<int64_t> idx;
    std::vector<double> c;
};

Taps ref_taps(const Spec& s, size_t axis, size_t rank, int64_t o, int64_t in, int64_t out, double scale) {
    Taps t;
    const double x = ref_coord(s, axis, rank, o, in, out, scale);
    if (s.coord == "tf_crop_and_resize" && (x < 0 || x > static_cast<double>(in - 1))) {
        t.outside = true;
        return t;
    }
    const double ratio = x == std::floor(x) ? 1.0 : x - std::floor(x);
    t.c = ref_coeffs(s, ratio);
    const int64_t n = static_cast<int64_t>(t.c.size()), pad = (n + 1) / 2;
    // The n indices of the row edge-padded by `pad` nearest to x, ties to the lower index. (The
    // ONNX reference measures from x + pad, which can round x to an integer its ratio is not.)
    std::vector<int64_t> cand;
    for (int64_t i = static_cast<int64_t>(std::floor(x)) - n - 1; i <= static_cast<int64_t>(std::floor(x)) + n + 1; ++i)
        if (i >= -pad && i < in + pad) cand.push_back(i);
    std::sort(cand.begin(), cand.end(), [x](int64_t p, int64_t q) {
        const double dp = std::fabs(x - static_cast<double>(p)), dq = std::fabs(x - static_cast<double>(q));
        return dp != dq ? dp < dq : p < q;
    });
    cand.resize(static_cast<size_t>(n));
    std::sort(cand.begin(), cand.end());
    if (s.exclude) {
        double sum = 0;
        for (size_t i = 0; i < t.c.size(); ++i) {
            if (cand[i] < 0 || cand[i] >= in) t.c[i] = 0;
            sum += t.c[i];
        }
        for (double& e : t.c) e /= sum;
    }
    for (int64_t i : cand) t.idx.push_back(std::clamp<int64_t>(i, 0, in - 1));
    return t;
}

// Interpolates axis by axis from `axis` on, at output multi-index o; only the rows the outer
// sample combines are visited.
double ref_nd(const Spec& s, const std::vector<double>& x, const Dims& in, const Dims& out, const std::vector<double>& scale,
              size_t axis, int64_t base, const Dims& o) {
    const Taps t = ref_taps(s, axis, in.size(), o[axis], in[axis], out[axis], scale[axis]);
    if (t.outside) return s.extrap;
    int64_t stride = 1;
    for (size_t d = axis + 1; d < in.size(); ++d) stride *= in[d];
    double v = 0;
    for (size_t i = 0; i < t.c.size(); ++i) {
        if (t.c[i] == 0) continue;
        const int64_t at = base + t.idx[i] * stride;
        v += t.c[i] * (axis + 1 == in.size() ? x[static_cast<size_t>(at)] : ref_nd(s, x, in, out, scale, axis + 1, at, o));
    }
    return v;
}

std::vector<double> reference(const Spec& s, const std::vector<double>& x, const Dims& in, const Dims& out) {
    std::vector<double> scale(in.size());
    for (size_t d = 0; d < in.size(); ++d)
        scale[d] = s.scales.empty() ? static_cast<double>(out[d]) / static_cast<double>(in[d]) : s.scales[d];
    std::vector<double> y(static_cast<size_t>(element_count(out)));
    Dims o(in.size());
    for (int64_t flat = 0; flat < element_count(out); ++flat) {
        int64_t rest = flat;
        for (size_t d = in.size(); d-- > 0;) {
            o[d] = rest % out[d];
            rest /= out[d];
        }
        y[static_cast<size_t>(flat)] = ref_nd(s, x, in, out, scale, 0, 0, o);
    }
    return y;
}

// ---- checks --------------------------------------------------------------------------------

std::string describe(const Spec& s, const Dims& in, const Dims& out) {
    return s.mode + " " + s.coord + " " + s.nearest + (s.exclude ? " exclude" : "") + " a=" + std::to_string(s.a) + " " +
           testing::PrintToString(in) + " -> " + testing::PrintToString(out);
}

void check_f32(const Spec& s, const Dims& in, const Dims& out, unsigned threads, uint32_t seed) {
    SCOPED_TRACE(describe(s, in, out));
    std::mt19937 rng(seed);
    std::vector<float> x = random_floats(rng, static_cast<size_t>(element_count(in)));
    const std::vector<double> want = reference(s, std::vector<double>(x.begin(), x.end()), in, out);
    std::vector<float> y(want.size(), std::nanf(""));
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, in, x.data())};
    l.outputs = {shape_ref(DType::F32, out, y.data())};
    l.attrs = attrs_of(s);
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i)
        if (!(std::fabs(y[i] - want[i]) <= (s.mode == "nearest" ? 0.0 : 4e-6)) && bad++ < 5)
            ADD_FAILURE() << "element " << i << ": " << y[i] << " want " << want[i];
    EXPECT_EQ(bad, 0);
}

void check_f16(const Spec& s, const Dims& in, const Dims& out, unsigned threads, uint32_t seed) {
    SCOPED_TRACE(describe(s, in, out) + " f16");
    std::mt19937 rng(seed);
    const std::vector<float> xf = random_floats(rng, static_cast<size_t>(element_count(in)));
    std::vector<f16> x(xf.size());
    std::vector<double> xd(xf.size());
    for (size_t i = 0; i < x.size(); ++i) {
        x[i] = f32_to_f16(xf[i]);
        xd[i] = ref_decode_f16(x[i].bits);
    }
    const std::vector<double> want = reference(s, xd, in, out);
    std::vector<f16> y(want.size(), f16{0x7e00});
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F16, in, x.data())};
    l.outputs = {shape_ref(DType::F16, out, y.data())};
    l.attrs = attrs_of(s);
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double w = ref_round_f16(want[i]), got = ref_decode_f16(y[i].bits);
        int e;
        std::frexp(std::max(std::fabs(w), std::ldexp(1.0, -14)), &e);
        const double ulp = s.mode == "nearest" ? 0.0 : std::ldexp(1.0, e - 11);
        if (!(std::fabs(got - w) <= ulp) && bad++ < 5)
            ADD_FAILURE() << "element " << i << ": " << got << " want " << w << " (exact " << want[i] << ")";
    }
    EXPECT_EQ(bad, 0);
}

const char* const kCoords[] = {"half_pixel",    "half_pixel_symmetric", "pytorch_half_pixel",
                               "align_corners", "asymmetric",           "tf_crop_and_resize"};

// (in, out) pairs over N x C x H x W.
const std::vector<std::pair<Dims, Dims>>& sizes_2d() {
    static const std::vector<std::pair<Dims, Dims>> v = {
        {{1, 2, 7, 13}, {1, 2, 14, 26}},  // x2
        {{1, 2, 7, 13}, {1, 2, 3, 5}},    // shrink
        {{1, 2, 7, 13}, {1, 2, 11, 20}},  // fractional factors
        {{1, 1, 1, 1}, {1, 1, 3, 2}},
        {{1, 3, 5, 4}, {1, 3, 1, 1}},
        {{2, 1, 6, 5}, {2, 1, 6, 15}},    // one axis unchanged
    };
    return v;
}

Spec with_roi(Spec s) {
    if (s.coord == "tf_crop_and_resize") {
        s.roi = {0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3};  // partly outside: extrapolation
        s.extrap = 0.25;
    }
    return s;
}

TEST(ResizeF32, NearestEveryCoordinateAndRoundingMode) {
    uint32_t seed = 1;
    for (const char* coord : kCoords)
        for (const char* nearest : {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"})
            for (const auto& [in, out] : sizes_2d()) {
                Spec s;
                s.coord = coord;
                s.nearest = nearest;
                check_f32(with_roi(s), in, out, 2, seed++);
            }
}

TEST(ResizeF32, LinearAndCubicEveryCoordinateMode) {
    uint32_t seed = 100;
    for (const char* mode : {"linear", "cubic"})
        for (const char* coord : kCoords)
            for (int exclude : {0, 1})
                for (const auto& [in, out] : sizes_2d()) {
                    Spec s;
                    s.mode = mode;
                    s.coord = coord;
                    s.exclude = exclude;
                    if (exclude) s.a = -0.5;
                    check_f32(with_roi(s), in, out, 2, seed++);
                }
}

TEST(ResizeF16, EveryModeWithinOneUlpOfTheRoundedReference) {
    uint32_t seed = 300;
    for (const char* mode : {"nearest", "linear", "cubic"})
        for (const char* coord : {"half_pixel", "align_corners", "tf_crop_and_resize"})
            for (const auto& [in, out] : sizes_2d()) {
                Spec s;
                s.mode = mode;
                s.coord = coord;
                check_f16(with_roi(s), in, out, 2, seed++);
            }
}

TEST(Resize, ScalesGiveTheSizeByFloorAndTheCoordinates) {
    Spec s;
    s.mode = "linear";
    s.scales = {1, 1, 1.7, 0.55};  // 7 -> 11, 13 -> 7
    check_f32(s, {1, 2, 7, 13}, {1, 2, 11, 7}, 2, 1);
    s.coord = "align_corners";
    check_f32(s, {1, 2, 7, 13}, {1, 2, 11, 7}, 2, 2);
    s.mode = "cubic";
    s.coord = "half_pixel_symmetric";
    check_f32(s, {1, 2, 7, 13}, {1, 2, 11, 7}, 2, 3);
    s.mode = "nearest";
    s.coord = "pytorch_half_pixel";
    s.scales = {1, 1, 0.2, 0.1};  // 7 -> 1 (resized length 1.4), 13 -> 1 (1.3)
    check_f32(s, {1, 2, 7, 13}, {1, 2, 1, 1}, 2, 4);
}

TEST(Resize, AnyAxesRank1And3DVolumes) {
    Spec s;
    for (const char* mode : {"nearest", "linear", "cubic"}) {
        s.mode = mode;
        check_f32(s, {1, 5, 6, 7}, {1, 9, 6, 7}, 2, 1);   // channels only: the N-D path
        check_f32(s, {2, 3, 5, 4}, {3, 5, 7, 3}, 2, 2);   // every axis
        check_f32(s, {17}, {40}, 2, 3);                   // rank 1
        check_f32(s, {1, 2, 3, 4, 5}, {1, 2, 5, 3, 9}, 2, 4);  // 3-D volume
        check_f16(s, {1, 2, 3, 4, 5}, {1, 2, 5, 3, 9}, 2, 5);
    }
    s.mode = "linear";
    s.coord = "tf_crop_and_resize";
    s.roi = {0, 0.1, -0.2, 0.3, 1, 1.2, 0.9, 0.6};
    s.extrap = -2;
    check_f32(s, {2, 3, 5, 4}, {3, 5, 7, 3}, 2, 6);
}

TEST(Resize, IntegerNearestUpscalesAndBilinearOnThreeThreads) {
    Spec s;
    uint32_t seed = 1;
    for (int64_t f : {2, 3, 4, 5}) {
        for (const char* coord : {"asymmetric", "half_pixel"}) {
            s.coord = coord;
            s.nearest = std::string(coord) == "asymmetric" ? "floor" : "round_prefer_floor";
            check_f32(s, {1, 3, 23, 29}, {1, 3, 23 * f, 29 * f}, 3, seed++);
            check_f16(s, {1, 3, 23, 29}, {1, 3, 23 * f, 29 * f}, 3, seed++);
        }
    }
    s = Spec{};
    s.mode = "linear";
    check_f32(s, {1, 3, 61, 67}, {1, 3, 128, 140}, 3, seed++);
    check_f32(s, {1, 3, 128, 140}, {1, 3, 61, 67}, 3, seed++);
    s.mode = "cubic";
    check_f32(s, {1, 3, 61, 67}, {1, 3, 122, 134}, 3, seed++);
}

// Runs a 1 x 1 x h x w resize of `x` with spec `s`; returns Y.
std::vector<float> run_doc(const Spec& s, std::vector<float> x, Dims in, Dims out) {
    std::vector<float> y(static_cast<size_t>(element_count(out)), -1.0f);
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, in, x.data())};
    l.outputs = {shape_ref(DType::F32, out, y.data())};
    l.attrs = attrs_of(s);
    ThreadPool pool(1);
    loom::Status st = kernel().run(l, pool);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return y;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, double tol = 2e-6) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << i;
}

TEST(Resize, OnnxDocumentationExamples) {
    const std::vector<float> x22 = {1, 2, 3, 4}, x24 = {1, 2, 3, 4, 5, 6, 7, 8};
    std::vector<float> x44(16);
    for (int i = 0; i < 16; ++i) x44[static_cast<size_t>(i)] = static_cast<float>(i + 1);
    Spec s;
    s.scales = {1, 1, 2, 3};  // resize_upsample_scales_nearest
    EXPECT_EQ(run_doc(s, x22, {1, 1, 2, 2}, {1, 1, 4, 6}),
              (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
    s.scales = {1, 1, 0.6, 0.6};  // resize_downsample_scales_nearest
    EXPECT_EQ(run_doc(s, x24, {1, 1, 2, 4}, {1, 1, 1, 2}), (std::vector<float>{1, 3}));
    s.scales = {};  // resize_downsample_sizes_nearest
    EXPECT_EQ(run_doc(s, x24, {1, 1, 2, 4}, {1, 1, 1, 2}), (std::vector<float>{1, 3}));
    s.mode = "linear";
    s.scales = {1, 1, 2, 2};  // resize_upsample_scales_linear
    expect_near(run_doc(s, x22, {1, 1, 2, 2}, {1, 1, 4, 4}),
                {1, 1.25f, 1.75f, 2, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3, 3.25f, 3.75f, 4});
    s.coord = "align_corners";  // resize_upsample_scales_linear_align_corners
    expect_near(run_doc(s, x22, {1, 1, 2, 2}, {1, 1, 4, 4}),
                {1, 1.33333333f, 1.66666667f, 2, 1.66666667f, 2, 2.33333333f, 2.66666667f, 2.33333333f,
                 2.66666667f, 3, 3.33333333f, 3, 3.33333333f, 3.66666667f, 4});
    s.scales = {1, 1, 0.6, 0.6};  // resize_downsample_scales_linear_align_corners
    expect_near(run_doc(s, x24, {1, 1, 2, 4}, {1, 1, 1, 2}), {1, 3.142857f});
    s.coord = "half_pixel";  // resize_downsample_scales_linear
    expect_near(run_doc(s, x24, {1, 1, 2, 4}, {1, 1, 1, 2}), {2.6666665f, 4.3333331f});
    s.coord = "half_pixel_symmetric";  // resize_downsample_scales_linear_half_pixel_symmetric
    s.scales = {1, 1, 1, 0.6};
    expect_near(run_doc(s, {1, 2, 3, 4}, {1, 1, 1, 4}, {1, 1, 1, 2}), {1.6666666f, 3.3333333f});
    s.scales = {1, 1, 2.3, 2.94};  // resize_upsample_scales_linear_half_pixel_symmetric
    expect_near(run_doc(s, x22, {1, 1, 2, 2}, {1, 1, 4, 5}),
                {1, 1.15986395f, 1.5f, 1.84013605f, 2, 1.56521738f, 1.72508133f, 2.06521738f, 2.40535343f,
                 2.56521738f, 2.43478262f, 2.59464657f, 2.93478262f, 3.27491867f, 3.43478262f, 3, 3.15986395f,
                 3.5f, 3.84013605f, 4});
    s.coord = "tf_crop_and_resize";  // resize_tf_crop_and_resize
    s.scales = {};
    s.roi = {0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8};
    expect_near(run_doc(s, x44, {1, 1, 4, 4}, {1, 1, 3, 3}),
                {7.6000004f, 7.9f, 8.2f, 8.8f, 9.1f, 9.400001f, 10, 10.3f, 10.6f});
    s.roi = {0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7};  // resize_tf_crop_and_resize_extrapolation_value
    s.extrap = 10;
    expect_near(run_doc(s, x44, {1, 1, 4, 4}, {1, 1, 3, 3}), {7.6f, 10, 10, 12.400001f, 10, 10, 10, 10, 10});
    s = Spec{};
    s.mode = "cubic";
    s.scales = {1, 1, 2, 2};  // resize_upsample_scales_cubic
    const std::vector<float> cubic = run_doc(s, x44, {1, 1, 4, 4}, {1, 1, 8, 8});
    expect_near(std::vector<float>(cubic.begin(), cubic.begin() + 8),
                {0.47265625f, 0.76953125f, 1.24609375f, 1.875f, 2.28125f, 2.91015625f, 3.38671875f, 3.68359375f});
    expect_near(std::vector<float>(cubic.end() - 8, cubic.end()),
                {13.31640625f, 13.61328125f, 14.08984375f, 14.71875f, 15.125f, 15.75390625f, 16.23046875f, 16.52734375f});
    s = Spec{};
    s.nearest = "ceil";  // resize_upsample_sizes_nearest_ceil_half_pixel
    const std::vector<float> ceil_rows = {1, 2, 2, 3, 3, 4, 4, 4};
    std::vector<float> got = run_doc(s, x44, {1, 1, 4, 4}, {1, 1, 8, 8});
    for (int r = 0; r < 8; ++r) {
        const float base = 4.0f * static_cast<float>(std::vector<int>{0, 1, 1, 2, 2, 3, 3, 3}[static_cast<size_t>(r)]);
        for (int c = 0; c < 8; ++c) EXPECT_EQ(got[static_cast<size_t>(r * 8 + c)], base + ceil_rows[static_cast<size_t>(c)]);
    }
    s.nearest = "floor";  // resize_upsample_sizes_nearest_floor_align_corners
    s.coord = "align_corners";
    got = run_doc(s, x44, {1, 1, 4, 4}, {1, 1, 8, 8});
    EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 8), (std::vector<float>{1, 1, 1, 2, 2, 3, 3, 4}));
    s.nearest = "round_prefer_ceil";  // resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric
    s.coord = "asymmetric";
    got = run_doc(s, x44, {1, 1, 4, 4}, {1, 1, 8, 8});
    EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 8), (std::vector<float>{1, 2, 2, 3, 3, 4, 4, 4}));
}

TEST(Resize, EmptyTensorsAreFine) {
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {0, 3, 4, 4}, nullptr)};
    l.outputs = {shape_ref(DType::F32, {0, 3, 8, 8}, nullptr)};
    ThreadPool pool(1);
    EXPECT_TRUE(kernel().run(l, pool).ok());
    std::vector<float> x(12, 1.0f);
    l.inputs = {shape_ref(DType::F32, {1, 3, 4}, x.data())};
    l.outputs = {shape_ref(DType::F32, {1, 3, 0}, nullptr)};
    EXPECT_TRUE(kernel().run(l, pool).ok());
}

TEST(ResizeArgs, RejectsMalformedLaunches) {
    std::vector<float> x(1 * 2 * 7 * 13, 1.0f), y(1 * 2 * 14 * 26, 0.0f);
    std::vector<int32_t> xi(x.size(), 1), yi(y.size(), 0);
    KernelLaunch l;
    l.inputs = {ref(x, {1, 2, 7, 13})};
    l.outputs = {ref(y, {1, 2, 14, 25})};
    l.attrs = {{"scales", std::vector<double>{1, 1, 2, 2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "resize: output 0 has shape 1x2x14x25, expected 1x2x14x26 (dim 3 is 25, expected 26)");
    l.outputs = {ref(y, {1, 2, 14, 26})};
    l.attrs = {{"scales", std::vector<double>{2, 2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'scales' has 2 values, expected rank = 4");
    l.attrs = {{"scales", std::vector<double>{1, 1, 0, 2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "scale 0 of axis 2 is not usable");
    l.attrs = {{"mode", std::string("bilinear")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'mode' = 'bilinear' (nearest, linear, cubic)");
    l.attrs = {{"coordinate_transformation_mode", std::string("tf_half_pixel_for_nn")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'coordinate_transformation_mode' = 'tf_half_pixel_for_nn'");
    l.attrs = {{"nearest_mode", std::string("round")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'nearest_mode' = 'round'");
    l.attrs = {{"exclude_outside", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'exclude_outside' = 2 (0 or 1)");
    l.attrs = {{"roi", std::vector<double>{0, 1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'roi' has 2 values, expected 2 x rank = 8");
    l.attrs = {{"antialias", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'antialias'");
    l.attrs = {{"cubic_coeff_a", std::string("-0.5")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'cubic_coeff_a' must be a float");
    l.attrs = {};
    l.outputs = {ref(y, {1, 2, 14})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output 0 has shape 1x2x14 (rank 3), expected");
    l.inputs = {ref(xi, {1, 2, 7, 13})};
    l.outputs = {ref(yi, {1, 2, 14, 26})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "resize: dtype i32 (f32 and f16 are supported)");
    l.inputs = {shape_ref(DType::F32, {1, 0, 3}, nullptr)};
    l.outputs = {ref(y, {1, 2, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "axis 1 of input 0 (1x0x3) is empty and cannot grow to 2");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(ResizeCost, PositiveMonotonicAndScheduleChecked) {
    static char dummy[4];
    for (std::string_view preset : loom::test::presets())
        for (const char* mode : {"nearest", "linear", "cubic"})
            for (DType dt : {DType::F32, DType::F16}) {
                double prev = 0;
                for (int64_t h = 1; h <= int64_t{1} << 12; h = h * 3 + 1) {
                    KernelLaunch l;
                    l.inputs = {shape_ref(dt, {1, 64, h, 256}, dummy)};
                    l.outputs = {shape_ref(dt, {1, 64, 2 * h, 512}, dummy + 1)};
                    l.attrs = {{"mode", std::string(mode)}};
                    const CycleBreakdown cb = cost_ok(kernel(), l, preset);
                    EXPECT_GT(cb.total, 0);
                    EXPECT_GE(cb.total, prev) << preset << " " << mode << " h=" << h;
                    prev = cb.total;
                    expect_schedule_checked(kernel(), l, preset);
                }
            }
}

}  // namespace

}  // namespace test_kernel_resize
