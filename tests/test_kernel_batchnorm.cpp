// batchnorm (device/kernels/batchnorm.cpp): inference BatchNormalization over channel axis 1.
// Reference: (x - mean) / sqrt(var + epsilon) * scale + B in float64 on the same inputs.
// Tolerance: the kernel folds the parameters into Y = X * a + b (a, b in float64, then fp32)
// and evaluates that in fp32, so f32 is held to 4 ulp of |X * a| + |b| (not of Y, which can
// cancel); f16 to 1 f16 ulp of the float64 result rounded to f16, or that f32 bound if larger.
// Data: random non-zero X in -4 .. 4, scale +-(0.5 .. 2), B and mean in -1 .. 1, var in
// 0.1 .. 2; fixed seeds; ranks 2 to 5, channels 1, 3, 17 and 19, 1x1 spatial, one large shape.
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

namespace test_kernel_batchnorm {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

using Shape = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("batchnorm"); }

struct Params {
    std::vector<float> scale, bias, mean, var;
};

Params draw_params(std::mt19937& rng, int64_t c) {
    std::uniform_real_distribution<float> mag(0.5f, 2.0f), pm(-1.0f, 1.0f), var(0.1f, 2.0f);
    std::uniform_int_distribution<int> coin(0, 1);
    Params p;
    for (int64_t i = 0; i < c; ++i) {
        p.scale.push_back((coin(rng) ? -1.0f : 1.0f) * mag(rng));
        p.bias.push_back(pm(rng));
        p.mean.push_back(pm(rng));
        p.var.push_back(var(rng));
    }
    return p;
}

std::vector<float> draw_x(std::mt19937& rng, size_t n) {
    std::uniform_real_distribution<float> d(0.01f, 4.0f);
    std::uniform_int_distribution<int> coin(0, 1);
    std::vector<float> v(n);
    for (auto& x : v) x = (coin(rng) ? -1.0f : 1.0f) * d(rng);
    return v;
}

// Expected value and tolerance scale (|x * a| + |b|) of element i.
struct Want {
    double value, scale;
};

Want reference(const Params& p, double eps, const Shape& s, size_t i, double x) {
    int64_t plane = 1;
    for (size_t d = 2; d < s.size(); ++d) plane *= s[d];
    const size_t c = static_cast<size_t>(static_cast<int64_t>(i) / plane % s[1]);
    const double inv = 1.0 / std::sqrt(static_cast<double>(p.var[c]) + eps);
    const double a = p.scale[c] * inv, b = p.bias[c] - p.mean[c] * a;
    return {(x - p.mean[c]) * inv * p.scale[c] + p.bias[c], std::fabs(x * a) + std::fabs(b)};
}

const std::vector<Shape> kShapes = {{1, 1},        {2, 17},         {1, 3, 5},     {2, 17, 7, 13},
                                    {3, 19, 1, 1}, {2, 5, 3, 4, 6}, {2, 32, 129, 67}};

TEST(BatchnormF32, MatchesFloat64) {
    ThreadPool pool(3);
    uint32_t seed = 1;
    for (double eps : {1e-5, 1e-3})
        for (const Shape& s : kShapes) {
            SCOPED_TRACE(testing::PrintToString(s) + " eps " + std::to_string(eps));
            std::mt19937 rng(seed++);
            Params p = draw_params(rng, s[1]);
            std::vector<float> x = draw_x(rng, static_cast<size_t>(element_count(s))), y(x.size(), std::nanf(""));
            KernelLaunch l;
            l.inputs = {ref(x, s), ref(p.scale, {s[1]}), ref(p.bias, {s[1]}), ref(p.mean, {s[1]}),
                        ref(p.var, {s[1]})};
            l.outputs = {ref(y, s)};
            if (eps != 1e-5) l.attrs = {{"epsilon", eps}};
            ASSERT_TRUE(kernel().run(l, pool).ok());
            int bad = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                const Want w = reference(p, eps, s, i, x[i]);
                if (!(std::fabs(y[i] - w.value) <= 4 * f32_ulp(w.scale)) && bad++ < 5)
                    ADD_FAILURE() << "element " << i << " gave " << y[i] << ", want " << w.value;
            }
            EXPECT_EQ(bad, 0);
        }
}

TEST(BatchnormF16, WithinOneUlpOfFloat64RoundedToF16) {
    ThreadPool pool(2);
    uint32_t seed = 50;
    for (bool f16_params : {false, true})
        for (const Shape& s : kShapes) {
            SCOPED_TRACE(testing::PrintToString(s) + (f16_params ? " f16 params" : " f32 params"));
            std::mt19937 rng(seed++);
            Params p = draw_params(rng, s[1]);
            std::vector<f16> x, y(static_cast<size_t>(element_count(s)), f16{0x7e00});
            for (float v : draw_x(rng, y.size())) x.push_back(f32_to_f16(v));
            std::vector<f16> hp[4];
            std::vector<float>* fp[4] = {&p.scale, &p.bias, &p.mean, &p.var};
            KernelLaunch l;
            l.inputs = {ref(x, s)};
            for (int k = 0; k < 4; ++k) {
                if (f16_params) {
                    for (float& v : *fp[k]) {
                        hp[k].push_back(f32_to_f16(v));
                        v = f16_to_f32(hp[k].back());  // the reference sees the stored values
                    }
                    l.inputs.push_back(ref(hp[k], {s[1]}));
                } else {
                    l.inputs.push_back(ref(*fp[k], {s[1]}));
                }
            }
            l.outputs = {ref(y, s)};
            ASSERT_TRUE(kernel().run(l, pool).ok());
            int bad = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                const Want w = reference(p, 1e-5, s, i, ref_decode_f16(x[i].bits));
                const double want = ref_round_f16(w.value), got = ref_decode_f16(y[i].bits);
                if (!(std::fabs(got - want) <= std::max(f16_ulp(want), 4 * f32_ulp(w.scale))) && bad++ < 5)
                    ADD_FAILURE() << "element " << i << " gave " << got << ", want " << want;
            }
            EXPECT_EQ(bad, 0);
        }
}

TEST(BatchnormShapes, InPlaceEmptyAndThreadCountIndependent) {
    std::mt19937 rng(7);
    const Shape s = {3, 21, 37, 41};
    Params p = draw_params(rng, 21);
    std::vector<float> x = draw_x(rng, static_cast<size_t>(element_count(s))), y1(x.size()), y3(x.size());
    ThreadPool one(1), three(3);
    KernelLaunch l;
    l.inputs = {ref(x, s), ref(p.scale, {21}), ref(p.bias, {21}), ref(p.mean, {21}), ref(p.var, {21})};
    l.outputs = {ref(y1, s)};
    ASSERT_TRUE(kernel().run(l, one).ok());
    l.outputs = {ref(y3, s)};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(y1, y3);
    l.outputs = {ref(x, s)};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(x, y1);
    std::vector<float> e;
    l.inputs[0] = ref(e, {0, 21, 5});
    l.outputs = {ref(e, {0, 21, 5})};
    EXPECT_TRUE(kernel().run(l, one).ok());
    EXPECT_TRUE(kernel().cost(l, preset_spec("dc")).ok());
}

TEST(BatchnormArgs, RejectsMalformedLaunches) {
    std::vector<float> x(24, 1.0f), y(24, 0.0f), c4(4, 1.0f), c3(3, 1.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {2, 4, 3}), ref(c4, {4}), ref(c4, {4}), ref(c4, {4}), ref(c4, {4})};
    l.outputs = {ref(y, {2, 4, 3})};
    ASSERT_TRUE(kernel().cost(l, preset_spec("edge")).ok());
    l.inputs[3] = ref(c3, {3});
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "batchnorm: mean is 3, want [C] = 4 (X 2x4x3)");
    l.inputs[3] = ref(c4, {1, 4});
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mean is 1x4, want [C] = 4");
    l.inputs[3] = ref(c4, {4});
    l.outputs = {ref(y, {2, 12})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output Y is 2x12, want X's shape 2x4x3");
    l.outputs = {ref(y, {2, 4, 3})};
    l.attrs = {{"training_mode", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "training_mode = 1");
    l.attrs = {{"epsilon", HUGE_VAL}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "epsilon = inf must be finite");
    l.attrs = {{"epsilon", std::string("small")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "batchnorm: attribute 'epsilon' must be a float");
    l.attrs = {{"spatial", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "batchnorm: unknown attribute 'spatial'");
    l.attrs = {{"momentum", 0.99}};
    EXPECT_TRUE(kernel().cost(l, preset_spec("edge")).ok());
    l.attrs = {};
    l.inputs[0] = ref(x, {24});
    l.outputs = {ref(y, {24})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "X is 24 (rank >= 2 needed");
    std::vector<int32_t> ic(4);
    l.inputs[0] = ref(x, {2, 4, 3});
    l.outputs = {ref(y, {2, 4, 3})};
    l.inputs[4] = ref(ic, {4});
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "batchnorm: var dtype i32");
    l.inputs[4] = ref(c4, {4});
    std::vector<int32_t> ix(24), iy(24);
    l.inputs[0] = ref(ix, {2, 4, 3});
    l.outputs = {ref(iy, {2, 4, 3})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "batchnorm: X dtype i32");
    l.inputs.pop_back();
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "batchnorm takes 5 input(s), got 4");
    EXPECT_EQ(y, std::vector<float>(24, 0.0f));
}

TEST(BatchnormCost, PositiveMonotonicAndScheduleChecked) {
    auto launch = [](DType dt, int64_t n) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {n, 32, 7, 7})};
        for (int i = 0; i < 4; ++i) l.inputs.push_back(shape_ref(DType::F32, {32}));
        l.outputs = {shape_ref(dt, {n, 32, 7, 7})};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            double prev = 0;
            for (int64_t n = 1; n <= 100000; n = n * 3 + 1) {
                CycleBreakdown cb = cost_ok(kernel(), launch(dt, n), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << n;
                prev = cb.total;
            }
            KernelLaunch l = launch(dt, 4);
            l.tiling = VectorSchedule{6, true, 0};
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("batchnorm: schedule: ub_tile = 6"),
                      std::string::npos);
        }
}

}  // namespace

}  // namespace test_kernel_batchnorm
