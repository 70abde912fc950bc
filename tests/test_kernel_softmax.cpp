// softmax (device/kernels/softmax.cpp): Softmax and LogSoftmax along one axis (opset 13).
// Reference: float64 softmax of the same inputs, subtracting the max (written independently:
// loops over every (outer, inner) line of the axis).
// Tolerances: f32 within 1e-6 relative (+ 1e-7 absolute for log) - the kernel rounds x - max
// to fp32 before exp, which for |x - max| <= 8 moves exp's result by up to ~5e-7 relative.
// f16 within 1 f16 ulp of the float64 result rounded to f16.
// Data: random values in -4 .. 4, fixed seeds, every axis of an odd 3-D shape, size-1 axes,
// inner extents above and below the kernel's 256-wide tile, large rows for the parallel path.
// Cost: positive, monotonic, the schedule checked; the vector axis along or across the lines,
// fusion and in place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_softmax {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

using Shape = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("softmax"); }

std::vector<double> reference(const std::vector<double>& x, const Shape& s, int axis, bool log) {
    const int r = static_cast<int>(s.size());
    const int ax = axis < 0 ? axis + r : axis;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= s[static_cast<size_t>(d)];
    for (int d = ax + 1; d < r; ++d) inner *= s[static_cast<size_t>(d)];
    const int64_t len = s[static_cast<size_t>(ax)];
    std::vector<double> y(x.size());
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) {
            auto at = [&](int64_t k) { return static_cast<size_t>((o * len + k) * inner + j); };
            double m = -HUGE_VAL, sum = 0;
            for (int64_t k = 0; k < len; ++k) m = std::max(m, x[at(k)]);
            for (int64_t k = 0; k < len; ++k) sum += std::exp(x[at(k)] - m);
            for (int64_t k = 0; k < len; ++k)
                y[at(k)] = log ? x[at(k)] - m - std::log(sum) : std::exp(x[at(k)] - m) / sum;
        }
    return y;
}

struct Case {
    Shape shape;
    int axis;
};

std::vector<Case> cases() {
    return {{{7, 13, 5}, 0},   {{7, 13, 5}, 1},     {{7, 13, 5}, 2},       {{7, 13, 5}, -1},  {{7, 13, 5}, -3},
            {{1, 1}, -1},      {{1, 1}, 0},         {{5}, 0},              {{1}, 0},          {{2, 3, 17, 33}, 1},
            {{1000, 3}, 0},    {{3, 1, 4}, 1},      {{2, 300, 1}, 1},      {{64, 4099}, -1},  {{4099, 64}, 0},
            {{2, 7, 600}, 1}};
}

std::vector<double> draw(std::mt19937& rng, size_t n) {
    std::uniform_real_distribution<double> d(-4.0, 4.0);
    std::vector<double> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

TEST(SoftmaxF32, MatchesFloat64OnEveryAxis) {
    ThreadPool pool(3);
    uint32_t seed = 1;
    for (bool log : {false, true})
        for (const Case& c : cases()) {
            SCOPED_TRACE(testing::PrintToString(c.shape) + " axis " + std::to_string(c.axis) + (log ? " log" : ""));
            std::mt19937 rng(seed++);
            std::vector<double> xd = draw(rng, static_cast<size_t>(element_count(c.shape)));
            std::vector<float> x(xd.begin(), xd.end()), y(x.size(), std::nanf(""));
            KernelLaunch l;
            l.inputs = {ref(x, c.shape)};
            l.outputs = {ref(y, c.shape)};
            l.attrs = {{"axis", int64_t{c.axis}}, {"log", int64_t{log}}};
            ASSERT_TRUE(kernel().run(l, pool).ok());
            const std::vector<double> want = reference(std::vector<double>(x.begin(), x.end()), c.shape, c.axis, log);
            int bad = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                const double tol = 1e-6 * std::fabs(want[i]) + (log ? 1e-7 : 0);
                if (!(std::fabs(y[i] - want[i]) <= tol) && bad++ < 5)
                    ADD_FAILURE() << "element " << i << " gave " << y[i] << ", want " << want[i];
            }
            EXPECT_EQ(bad, 0);
        }
}

TEST(SoftmaxF16, WithinOneUlpOfFloat64RoundedToF16) {
    ThreadPool pool(2);
    uint32_t seed = 100;
    for (bool log : {false, true})
        for (const Case& c : cases()) {
            SCOPED_TRACE(testing::PrintToString(c.shape) + " axis " + std::to_string(c.axis) + (log ? " log" : ""));
            std::mt19937 rng(seed++);
            std::vector<f16> x, y(static_cast<size_t>(element_count(c.shape)), f16{0x7e00});
            for (double v : draw(rng, y.size())) x.push_back(f32_to_f16(static_cast<float>(v)));
            KernelLaunch l;
            l.inputs = {ref(x, c.shape)};
            l.outputs = {ref(y, c.shape)};
            l.attrs = {{"axis", int64_t{c.axis}}, {"log", int64_t{log}}};
            ASSERT_TRUE(kernel().run(l, pool).ok());
            std::vector<double> xd;
            for (f16 h : x) xd.push_back(ref_decode_f16(h.bits));
            const std::vector<double> want = reference(xd, c.shape, c.axis, log);
            int bad = 0;
            for (size_t i = 0; i < x.size(); ++i) {
                const double w = ref_round_f16(want[i]), got = ref_decode_f16(y[i].bits);
                if (!(std::fabs(got - w) <= f16_ulp(w)) && bad++ < 5)
                    ADD_FAILURE() << "element " << i << " gave " << got << ", want " << w;
            }
            EXPECT_EQ(bad, 0);
        }
}

TEST(SoftmaxShapes, DefaultAxisIsLastAndInPlaceWorks) {
    ThreadPool pool(2);
    std::mt19937 rng(9);
    std::vector<float> x = random_floats(rng, 6 * 1031, -3, 3), y(x.size());
    KernelLaunch l;
    l.inputs = {ref(x, {6, 1031})};
    l.outputs = {ref(y, {6, 1031})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    for (int r = 0; r < 6; ++r) {
        double s = 0;
        for (int j = 0; j < 1031; ++j) s += y[static_cast<size_t>(r * 1031 + j)];
        EXPECT_NEAR(s, 1.0, 1e-5);
    }
    for (bool log : {false, true}) {
        std::vector<float> z = x, want(x.size());
        l.attrs = {{"log", int64_t{log}}, {"axis", int64_t{0}}};
        l.inputs = {ref(x, {6, 1031})};
        l.outputs = {ref(want, {6, 1031})};
        ASSERT_TRUE(kernel().run(l, pool).ok());
        l.inputs = {ref(z, {6, 1031})};
        l.outputs = {ref(z, {6, 1031})};
        ASSERT_TRUE(kernel().run(l, pool).ok());
        EXPECT_EQ(z, want);
    }
}

TEST(SoftmaxShapes, EmptyAndThreadCountIndependent) {
    std::vector<float> e;
    KernelLaunch l;
    ThreadPool one(1), three(3);
    for (const Shape& s : {Shape{0, 5}, Shape{5, 0}, Shape{3, 0, 2}}) {
        l.inputs = {ref(e, s)};
        l.outputs = {ref(e, s)};
        l.attrs = {{"axis", int64_t{1}}};
        EXPECT_TRUE(kernel().run(l, one).ok());
    }
    std::mt19937 rng(10);
    std::vector<float> x = random_floats(rng, 33 * 257 * 9), y1(x.size()), y3(x.size());
    l.inputs = {ref(x, {33, 257, 9})};
    l.attrs = {{"axis", int64_t{1}}};
    l.outputs = {ref(y1, {33, 257, 9})};
    ASSERT_TRUE(kernel().run(l, one).ok());
    l.outputs = {ref(y3, {33, 257, 9})};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(y1, y3);
}

TEST(SoftmaxArgs, RejectsMalformedLaunches) {
    std::vector<float> x(12, 1.0f), y(12, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {3, 4})};
    l.outputs = {ref(y, {3, 4})};
    l.attrs = {{"axis", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "softmax: axis = 2 outside [-2, 1] for X 3x4");
    l.attrs = {{"axis", int64_t{-3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "axis = -3 outside");
    l.attrs = {{"log", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "softmax: log = 2 (0 or 1)");
    l.attrs = {{"axis", 1.5}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "softmax: attribute 'axis' must be an int");
    l.attrs = {{"dim", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "softmax: unknown attribute 'dim' (known: axis, log)");
    l.attrs = {};
    l.outputs = {ref(y, {4, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output Y is 4x3, want X's shape 3x4");
    l.inputs = {ref(x, {})};
    l.outputs = {ref(y, {})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "X is a scalar");
    std::vector<f16> h(12);
    l.inputs = {ref(x, {3, 4})};
    l.outputs = {ref(h, {3, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mixed dtypes (X f32, Y f16)");
    std::vector<int32_t> ix(12), iy(12);
    l.inputs = {ref(ix, {3, 4})};
    l.outputs = {ref(iy, {3, 4})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "softmax: dtype i32");
    EXPECT_EQ(y, std::vector<float>(12, 0.0f));
}

TEST(SoftmaxCost, PositiveMonotonicAndScheduleChecked) {
    auto launch = [](DType dt, int64_t rows, int64_t len) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {rows, len})};
        l.outputs = {shape_ref(dt, {rows, len})};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)));
            double prev = 0;
            for (int64_t rows = 1; rows <= int64_t{1} << 20; rows = rows * 3 + 1) {
                CycleBreakdown cb = cost_ok(kernel(), launch(dt, rows, 1000), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << rows;
                prev = cb.total;
            }
            // Rows too long for UB are read twice.
            const int64_t n = int64_t{1} << 24;
            EXPECT_GT(cost_ok(kernel(), launch(dt, 1, n), preset).l2_miss_bytes,
                      cost_ok(kernel(), launch(dt, n / 256, 256), preset).l2_miss_bytes);
            KernelLaunch l = launch(dt, 100, 1000);
            l.tiling = VectorSchedule{6, true, 0};
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("softmax: schedule: ub_tile = 6"),
                      std::string::npos);
            l.tiling = CubeTiling{};
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("VectorSchedule"), std::string::npos);
        }
}

// The softmax axis is the schedule's (a reduction): lanes along it, one line a UB row, waste
// fewer lanes the longer the line; lines of 5 do better across the lanes; X can come from a
// neighbour in UB and Y overwrite it while a line fits a third of UB.
TEST(SoftmaxCost, VectorAxisLanesFusionAndInPlace) {
    auto launch = [](DType dt, int64_t rows, int64_t len) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {rows, len})};
        l.outputs = {shape_ref(dt, {rows, len})};
        return l;
    };
    auto along = [](int64_t vector_tile, int64_t rows) {
        VectorSchedule v;
        v.vector_axis = VectorAxis::AXIS;
        v.vector_tile = vector_tile;
        v.ub_tile = vector_tile * rows;
        return v;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)));
            const int64_t block = 32 / int64_t(dtype_size(dt));
            double prev = 1e300;
            for (int64_t len : {2, 4, 8, 16, 32, 64}) {
                KernelLaunch l = launch(dt, 4096, len);
                l.tiling = along((len + block - 1) / block * block, 64);
                const double per = cost_ok(kernel(), l, preset).vector / double(4096 * len);
                EXPECT_LT(per, prev) << len;
                prev = per;
            }
            KernelLaunch l = launch(dt, 20000, 5);
            l.tiling = along(block, 256);
            const double lines_in_rows = cost_ok(kernel(), l, preset).total;
            VectorSchedule across;
            across.vector_axis = VectorAxis::OUTER;
            across.vector_tile = 256;
            across.ub_tile = 256 * 5;
            l.tiling = across;
            EXPECT_LT(2 * cost_ok(kernel(), l, preset).total, lines_in_rows);
            l.tiling = {};
            EXPECT_LE(cost_ok(kernel(), l, preset).total, lines_in_rows);  // the default goes across too
            VectorSchedule joined;
            joined.ub_tile = 1024;
            l.tiling = joined;
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("softmax: schedule: vector_tile = 0 joins lines"),
                      std::string::npos);
            l = launch(dt, 64, 1000);
            VectorSchedule v = along((1000 + block - 1) / block * block, 4);
            v.fuse_input = v.fuse_output = v.in_place = true;
            l.tiling = v;
            const CycleBreakdown fused = cost_ok(kernel(), l, preset);
            EXPECT_DOUBLE_EQ(fused.mte_in + fused.mte_out, 0);
            l = launch(dt, 1, 1 << 20);  // a line longer than a third of UB is read twice from GM
            v = along(1024, 1);
            v.fuse_input = true;
            l.tiling = v;
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("fuse_input"), std::string::npos);
        }
}

}  // namespace

}  // namespace test_kernel_softmax
