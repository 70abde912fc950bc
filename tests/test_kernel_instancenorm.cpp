// instancenorm (device/kernels/instancenorm.cpp): InstanceNormalization, statistics over the
// spatial dims of each (n, c) plane.
// Reference: two-pass float64 mean and population variance per plane, then
// (x - mean) / sqrt(var + epsilon) * scale + B in float64.
// Tolerance: the kernel evaluates ((X - mean) * a + B) in fp32 (a = scale / sqrt(var + eps)),
// so f32 is held to 4 ulp of |(X - mean) * a| + |B| (Y itself can cancel to near 0); f16 to
// 1 f16 ulp of the float64 result rounded to f16, or that f32 bound if larger.
// Data: per-plane offsets in -2 .. 2 plus noise in -1 .. 1 (never all zero), scale +-(0.5 .. 2),
// B in -1 .. 1; fixed seeds; ranks 3 to 5, channels 1, 3, 17; 1x1 planes (var 0: Y = B);
// planes longer than the kernel's 32K-element part so its split sums are exercised.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_instancenorm {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

using Shape = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("instancenorm"); }

struct Want {
    std::vector<double> value, scale;  // expected Y and the tolerance scale |(x - mean) * a| + |B|
};

Want reference(const std::vector<double>& x, const Shape& s, const std::vector<float>& scale,
               const std::vector<float>& bias, double eps) {
    int64_t plane = 1;
    for (size_t d = 2; d < s.size(); ++d) plane *= s[d];
    Want w{std::vector<double>(x.size()), std::vector<double>(x.size())};
    for (int64_t p = 0; p < s[0] * s[1]; ++p) {
        const size_t base = static_cast<size_t>(p * plane), c = static_cast<size_t>(p % s[1]);
        double mean = 0, var = 0;
        for (int64_t i = 0; i < plane; ++i) mean += x[base + static_cast<size_t>(i)];
        mean /= static_cast<double>(plane);
        for (int64_t i = 0; i < plane; ++i) {
            const double d = x[base + static_cast<size_t>(i)] - mean;
            var += d * d;
        }
        var /= static_cast<double>(plane);
        const double inv = 1.0 / std::sqrt(var + eps), a = scale[c] * inv;
        for (int64_t i = 0; i < plane; ++i) {
            const size_t k = base + static_cast<size_t>(i);
            w.value[k] = (x[k] - mean) * inv * scale[c] + bias[c];
            w.scale[k] = std::fabs((x[k] - mean) * a) + std::fabs(bias[c]);
        }
    }
    return w;
}

std::vector<double> draw_x(std::mt19937& rng, const Shape& s) {
    int64_t plane = 1;
    for (size_t d = 2; d < s.size(); ++d) plane *= s[d];
    std::uniform_real_distribution<double> off(-2, 2), noise(-1, 1);
    std::vector<double> v(static_cast<size_t>(element_count(s)));
    double o = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        if (static_cast<int64_t>(i) % plane == 0) o = off(rng);
        v[i] = o + noise(rng);
    }
    return v;
}

void draw_params(std::mt19937& rng, int64_t c, std::vector<float>& scale, std::vector<float>& bias) {
    std::uniform_real_distribution<float> mag(0.5f, 2.0f), pm(-1.0f, 1.0f);
    std::uniform_int_distribution<int> coin(0, 1);
    scale.clear();
    bias.clear();
    for (int64_t i = 0; i < c; ++i) {
        scale.push_back((coin(rng) ? -1.0f : 1.0f) * mag(rng));
        bias.push_back(pm(rng));
    }
}

const std::vector<Shape> kShapes = {{1, 1, 1},   {2, 3, 7, 13},  {1, 17, 5},         {2, 5, 1, 1},
                                    {3, 2, 1031}, {2, 1, 3, 4, 5}, {1, 3, 200003}, {2, 17, 41, 43}};

TEST(InstancenormF32, MatchesFloat64) {
    ThreadPool pool(3);
    uint32_t seed = 1;
    for (double eps : {1e-5, 0.1})
        for (const Shape& s : kShapes) {
            SCOPED_TRACE(testing::PrintToString(s) + " eps " + std::to_string(eps));
            std::mt19937 rng(seed++);
            std::vector<float> scale, bias;
            draw_params(rng, s[1], scale, bias);
            std::vector<double> xd = draw_x(rng, s);
            std::vector<float> x(xd.begin(), xd.end()), y(x.size(), std::nanf(""));
            KernelLaunch l;
            l.inputs = {ref(x, s), ref(scale, {s[1]}), ref(bias, {s[1]})};
            l.outputs = {ref(y, s)};
            if (eps != 1e-5) l.attrs = {{"epsilon", eps}};
            ASSERT_TRUE(kernel().run(l, pool).ok());
            const Want w = reference(std::vector<double>(x.begin(), x.end()), s, scale, bias, eps);
            int bad = 0;
            for (size_t i = 0; i < x.size(); ++i)
                if (!(std::fabs(y[i] - w.value[i]) <= 4 * f32_ulp(w.scale[i])) && bad++ < 5)
                    ADD_FAILURE() << "element " << i << " gave " << y[i] << ", want " << w.value[i];
            EXPECT_EQ(bad, 0);
        }
}

TEST(InstancenormF16, WithinOneUlpOfFloat64RoundedToF16) {
    ThreadPool pool(2);
    uint32_t seed = 40;
    for (const Shape& s : kShapes) {
        SCOPED_TRACE(testing::PrintToString(s));
        std::mt19937 rng(seed++);
        std::vector<float> scale, bias;
        draw_params(rng, s[1], scale, bias);
        std::vector<f16> x, y(static_cast<size_t>(element_count(s)), f16{0x7e00}), hscale;
        std::vector<double> xd;
        for (double v : draw_x(rng, s)) {
            x.push_back(f32_to_f16(static_cast<float>(v)));
            xd.push_back(ref_decode_f16(x.back().bits));
        }
        for (float& v : scale) {  // scale in f16, B in f32: each parameter picks its own dtype
            hscale.push_back(f32_to_f16(v));
            v = f16_to_f32(hscale.back());
        }
        KernelLaunch l;
        l.inputs = {ref(x, s), ref(hscale, {s[1]}), ref(bias, {s[1]})};
        l.outputs = {ref(y, s)};
        ASSERT_TRUE(kernel().run(l, pool).ok());
        const Want w = reference(xd, s, scale, bias, 1e-5);
        int bad = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double want = ref_round_f16(w.value[i]), got = ref_decode_f16(y[i].bits);
            if (!(std::fabs(got - want) <= std::max(f16_ulp(want), 4 * f32_ulp(w.scale[i]))) && bad++ < 5)
                ADD_FAILURE() << "element " << i << " gave " << got << ", want " << want;
        }
        EXPECT_EQ(bad, 0);
    }
}

// A plane with a large mean and a small spread keeps its variance (the kernel sums x - x[0]).
TEST(InstancenormStats, LargeMeanSmallSpread) {
    ThreadPool pool(1);
    std::vector<float> x(4096), y(x.size()), scale = {1.0f}, bias = {0.0f};
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-0.01f, 0.01f);
    for (auto& v : x) v = 1000.0f + d(rng);
    KernelLaunch l;
    l.inputs = {ref(x, {1, 1, 4096}), ref(scale, {1}), ref(bias, {1})};
    l.outputs = {ref(y, {1, 1, 4096})};
    l.attrs = {{"epsilon", 0.0}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    double m = 0, v = 0;
    for (float f : y) m += f;
    m /= 4096;
    for (float f : y) v += (f - m) * (f - m);
    v /= 4096;
    EXPECT_NEAR(m, 0.0, 1e-5);
    EXPECT_NEAR(v, 1.0, 1e-5);
}

TEST(InstancenormShapes, InPlaceEmptyAndThreadCountIndependent) {
    std::mt19937 rng(7);
    const Shape s = {1, 2, 300007};
    std::vector<float> scale, bias;
    draw_params(rng, 2, scale, bias);
    std::vector<double> xd = draw_x(rng, s);
    std::vector<float> x(xd.begin(), xd.end()), y1(x.size()), y3(x.size());
    ThreadPool one(1), three(3);
    KernelLaunch l;
    l.inputs = {ref(x, s), ref(scale, {2}), ref(bias, {2})};
    l.outputs = {ref(y1, s)};
    ASSERT_TRUE(kernel().run(l, one).ok());
    l.outputs = {ref(y3, s)};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(y1, y3);
    l.outputs = {ref(x, s)};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(x, y1);
    std::vector<float> e;
    for (const Shape& z : {Shape{0, 2, 5}, Shape{3, 2, 0}}) {
        l.inputs[0] = ref(e, z);
        l.outputs = {ref(e, z)};
        EXPECT_TRUE(kernel().run(l, one).ok());
        EXPECT_TRUE(kernel().cost(l, preset_spec("edge")).ok());
    }
}

TEST(InstancenormArgs, RejectsMalformedLaunches) {
    std::vector<float> x(24, 1.0f), y(24, 0.0f), c4(4, 1.0f), c3(3, 1.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {2, 4, 3}), ref(c4, {4}), ref(c4, {4})};
    l.outputs = {ref(y, {2, 4, 3})};
    ASSERT_TRUE(kernel().cost(l, preset_spec("edge")).ok());
    l.inputs[2] = ref(c3, {3});
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "instancenorm: B is 3, want [C] = 4 (X 2x4x3)");
    l.inputs[2] = ref(c4, {4});
    l.outputs = {ref(y, {2, 4, 1, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output Y is 2x4x1x3, want X's shape 2x4x3");
    l.inputs[0] = ref(x, {6, 4});
    l.outputs = {ref(y, {6, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "X is 6x4 (N x C x D1 ... needs rank >= 3)");
    l.inputs[0] = ref(x, {2, 4, 3});
    l.outputs = {ref(y, {2, 4, 3})};
    l.attrs = {{"momentum", 0.9}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "instancenorm: unknown attribute 'momentum'");
    l.attrs = {{"epsilon", -HUGE_VAL}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "epsilon = -inf must be finite");
    l.attrs = {};
    std::vector<f16> h(24);
    l.outputs = {ref(h, {2, 4, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mixed dtypes (X f32, Y f16)");
    std::vector<int64_t> ix(24), iy(24);
    l.inputs[0] = ref(ix, {2, 4, 3});
    l.outputs = {ref(iy, {2, 4, 3})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "instancenorm: X dtype i64");
    l.inputs.pop_back();
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "instancenorm takes 3 input(s), got 2");
    EXPECT_EQ(y, std::vector<float>(24, 0.0f));
}

TEST(InstancenormCost, PositiveMonotonicAndScheduleChecked) {
    auto launch = [](DType dt, int64_t n, int64_t plane) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {n, 16, plane}), shape_ref(DType::F32, {16}), shape_ref(DType::F32, {16})};
        l.outputs = {shape_ref(dt, {n, 16, plane})};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            double prev = 0;
            for (int64_t n = 1; n <= 100000; n = n * 3 + 1) {
                CycleBreakdown cb = cost_ok(kernel(), launch(dt, n, 49), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << n;
                prev = cb.total;
            }
            // Planes too large for UB are read twice.
            EXPECT_GT(cost_ok(kernel(), launch(dt, 1, 1 << 20), preset).l2_miss_bytes,
                      cost_ok(kernel(), launch(dt, 1 << 10, 1 << 10), preset).l2_miss_bytes);
            KernelLaunch l = launch(dt, 4, 49);
            l.tiling = VectorSchedule{6, true, 0};
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("instancenorm: schedule: ub_tile = 6"),
                      std::string::npos);
        }
}

// Each plane is a line of the schedule's axis (reduced twice: sum and sum of squares). The
// default is legal on odd shapes; a plane wider than one repeat folds once per row; Y may be
// written over X's tile; joining planes is refused.
TEST(InstancenormCost, PlanesAreTheScheduleAxis) {
    for (std::string_view preset : loom::test::presets()) {
        for (const Shape& s : {Shape{1, 3, 7, 7}, Shape{2, 17, 5, 13}, Shape{1, 64, 60, 80}, Shape{3, 1, 1, 1}}) {
            KernelLaunch l;
            l.inputs = {shape_ref(DType::F32, s), shape_ref(DType::F32, {s[1]}), shape_ref(DType::F32, {s[1]})};
            l.outputs = {shape_ref(DType::F32, s)};
            EXPECT_GT(cost_ok(kernel(), l, preset).total, 0);
        }
        KernelLaunch l;
        l.inputs = {shape_ref(DType::F32, {1, 64, 8, 8}), shape_ref(DType::F32, {64}), shape_ref(DType::F32, {64})};
        l.outputs = {shape_ref(DType::F32, {1, 64, 8, 8})};
        VectorSchedule v;
        v.vector_axis = VectorAxis::AXIS;
        v.vector_tile = 64;
        v.ub_tile = 64 * 8;
        l.tiling = v;
        const CycleBreakdown a = cost_ok(kernel(), l, preset);
        // 6 passes + 2 folds per 64-element row, 8 rows a tile.
        EXPECT_DOUBLE_EQ(a.vector / static_cast<double>(a.rounds), 8 * (6 + 2));
        v.in_place = true;
        l.tiling = v;
        EXPECT_TRUE(cost_error(kernel(), l, preset).ok());
        VectorSchedule joined;
        joined.ub_tile = 512;
        l.tiling = joined;
        EXPECT_NE(cost_error(kernel(), l, preset).message().find("instancenorm: schedule: vector_tile = 0"),
                  std::string::npos);
    }
}

}  // namespace

}  // namespace test_kernel_instancenorm
