// global_pool (device/kernels/global_pool.cpp): average or maximum over all spatial positions.
// Against a float64 reference: max exactly; f32 average equal to the float64 mean rounded to
// float or one float ulp off (an exact sum, in any order: cpu/exact_sum.hpp, tested here too); f16 within 1 f16 ulp of the float64 mean
// rounded to f16. Fixed seeds; odd shapes (1x1, 7x13, 19 channels, 1-D and 3-D spatial) and a
// large case on three threads; errors name the problem; cost is positive, grows with size and
// checks the schedule, planes along or across the lanes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "device/kernels/cpu/exact_sum.hpp"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_global_pool {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("global_pool"); }

Dims out_of(const Dims& in) {
    Dims o(in.size(), 1);
    o[0] = in[0];
    o[1] = in[1];
    return o;
}

std::vector<double> reference(const std::string& op, const Dims& in, const std::vector<double>& x) {
    const int64_t planes = in[0] * in[1], n = element_count(in) / std::max<int64_t>(planes, 1);
    std::vector<double> y;
    for (int64_t p = 0; p < planes; ++p) {
        double acc = op == "max" ? -HUGE_VAL : 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const double v = x[static_cast<size_t>(p * n + i)];
            acc = op == "max" ? std::max(acc, v) : acc + v;
        }
        y.push_back(op == "max" ? acc : acc / static_cast<double>(n));
    }
    return y;
}

void check_f32(const std::string& op, const Dims& in, unsigned threads, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> x = random_floats(rng, static_cast<size_t>(element_count(in)), -1.0f, 3.0f);
    const std::vector<double> want = reference(op, in, std::vector<double>(x.begin(), x.end()));
    std::vector<float> y(want.size(), std::nanf(""));
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, in, x.data())};
    l.outputs = {shape_ref(DType::F32, out_of(in), y.data())};
    l.attrs = {{"op", op}};
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (size_t i = 0; i < want.size(); ++i) {
        const float w = static_cast<float>(want[i]);
        if (op == "max") EXPECT_EQ(y[i], w) << i;
        else EXPECT_LE(std::fabs(y[i] - w), std::fabs(std::nextafter(w, 1e30f) - w)) << i << ": " << y[i] << " want " << w;
    }
}

void check_f16(const std::string& op, const Dims& in, unsigned threads, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> xf = random_floats(rng, static_cast<size_t>(element_count(in)), -1.0f, 3.0f);
    std::vector<f16> x(xf.size());
    std::vector<double> xd(xf.size());
    for (size_t i = 0; i < x.size(); ++i) {
        x[i] = f32_to_f16(xf[i]);
        xd[i] = ref_decode_f16(x[i].bits);
    }
    const std::vector<double> want = reference(op, in, xd);
    std::vector<f16> y(want.size(), f16{0x7e00});
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F16, in, x.data())};
    l.outputs = {shape_ref(DType::F16, out_of(in), y.data())};
    l.attrs = {{"op", op}};
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (size_t i = 0; i < want.size(); ++i) {
        const double w = ref_round_f16(want[i]), got = ref_decode_f16(y[i].bits);
        int e;
        std::frexp(std::max(std::fabs(w), std::ldexp(1.0, -14)), &e);
        const double ulp = std::ldexp(1.0, e - 11);
        EXPECT_LE(std::fabs(got - w), op == "max" ? 0.0 : ulp) << i << ": " << got << " want " << w;
    }
}

const std::vector<Dims>& shapes() {
    static const std::vector<Dims> v = {{1, 1, 1, 1}, {2, 19, 7, 13}, {1, 3, 17}, {2, 5, 3, 4, 5}, {1, 1, 1, 1, 1, 1}};
    return v;
}

TEST(GlobalPool, F32MatchesFloat64Reference) {
    uint32_t seed = 1;
    for (const char* op : {"avg", "max"})
        for (const Dims& in : shapes()) check_f32(op, in, 2, seed++);
}

TEST(GlobalPool, F16MatchesFloat64ReferenceRoundedToF16WithinOneUlp) {
    uint32_t seed = 51;
    for (const char* op : {"avg", "max"})
        for (const Dims& in : shapes()) check_f16(op, in, 2, seed++);
}

TEST(GlobalPool, LargeOnThreeThreads) {
    check_f32("avg", {2, 64, 130, 131}, 3, 7);    // planes of 17030 elements
    check_f32("max", {1, 3000, 3, 3}, 3, 8);      // many tiny planes
    check_f16("avg", {1, 7, 512, 511}, 3, 9);     // few large planes
}

TEST(GlobalPool, EmptyBatchIsFine) {
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {0, 3, 5, 5}, nullptr)};
    l.outputs = {shape_ref(DType::F32, {0, 3, 1, 1}, nullptr)};
    l.attrs = {{"op", std::string("avg")}};
    ThreadPool pool(1);
    EXPECT_TRUE(kernel().run(l, pool).ok());
}

// The average's sum (cpu/exact_sum.hpp) is exact and the same in any order and split: what a
// tiled run (executor/tiled.hpp) relies on to give the whole frame's means bit for bit.
using loom::device::cpu::ExactSum;

TEST(ExactSum, ExactInAnyOrderAndSplit) {
    // Cancellation a float64 chain loses: 1e30 + 1 - 1e30 is 1, not 0.
    {
        const float v[] = {1e30f, 1.0f, -1e30f, 0x1p-140f};
        ExactSum s;
        s.add(v, 4);
        EXPECT_EQ(s.value(), 1.0 + 0x1p-140);
    }
    // Random values of every magnitude: whole, reversed, and split at random points and merged
    // in another order give the same double, equal to a long-double-free exact reference.
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-140, 120);
    std::vector<float> v(10000);
    for (float& x : v) x = std::ldexp(mant(rng), expo(rng) / 4);  // exponents -35..30
    ExactSum whole;
    whole.add(v.data(), static_cast<int64_t>(v.size()));
    std::vector<float> r(v.rbegin(), v.rend());
    ExactSum reversed;
    reversed.add(r.data(), static_cast<int64_t>(r.size()));
    EXPECT_EQ(whole.value(), reversed.value());
    for (int trial = 0; trial < 20; ++trial) {
        size_t a = rng() % v.size(), b = rng() % v.size();
        if (a > b) std::swap(a, b);
        ExactSum p1, p2, p3;
        p1.add(v.data(), static_cast<int64_t>(a));
        p2.add(v.data() + a, static_cast<int64_t>(b - a));
        p3.add(v.data() + b, static_cast<int64_t>(v.size() - b));
        p3.merge(p1);
        p3.merge(p2);
        EXPECT_EQ(p3.value(), whole.value()) << "split at " << a << ", " << b;
    }
    // Specials: NaN wins, opposite infinities make NaN, one infinity stays.
    const float inf = std::numeric_limits<float>::infinity();
    ExactSum pos, both, nan_sum;
    const float pv[] = {1.0f, inf};
    pos.add(pv, 2);
    EXPECT_EQ(pos.value(), std::numeric_limits<double>::infinity());
    const float bv[] = {inf, -inf};
    both.add(bv, 2);
    EXPECT_TRUE(std::isnan(both.value()));
    const float nv[] = {std::nanf(""), 1.0f};
    nan_sum.add(nv, 2);
    EXPECT_TRUE(std::isnan(nan_sum.value()));
    // Subnormals count.
    const float sub[] = {0x1p-149f, 0x1p-149f};
    ExactSum tiny;
    tiny.add(sub, 2);
    EXPECT_EQ(tiny.value(), 0x1p-148);
}

TEST(GlobalPoolArgs, RejectsMalformedLaunches) {
    std::vector<float> x(2 * 3 * 4 * 5, 1.0f), y(6, 0.0f);
    std::vector<int32_t> xi(x.size(), 1), yi(6, 0);
    KernelLaunch l;
    l.inputs = {ref(x, {2, 3, 4, 5})};
    l.outputs = {ref(y, {2, 3, 1})};
    l.attrs = {{"op", std::string("avg")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "global_pool: output 0 has shape 2x3x1 (rank 3), expected 2x3x1x1 (rank 4)");
    l.outputs = {ref(y, {2, 3, 1, 1})};
    l.attrs = {{"op", std::string("min")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'op' = 'min' (avg or max)");
    l.attrs = {{"op", std::string("avg")}, {"keepdims", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'keepdims'");
    l.attrs = {{"op", std::string("avg")}};
    l.inputs = {ref(xi, {2, 3, 4, 5})};
    l.outputs = {ref(yi, {2, 3, 1, 1})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "dtype i32");
    l.inputs = {ref(x, {6, 20})};
    l.outputs = {ref(y, {6, 1})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "input 0 is 6x20, needs rank >= 3");
    l.inputs = {shape_ref(DType::F32, {2, 3, 0}, nullptr)};
    l.outputs = {ref(y, {2, 3, 1})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "the spatial extent is empty");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(GlobalPoolCost, PositiveMonotonicAndScheduleChecked) {
    static char dummy[4];
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            double prev = 0;
            for (int64_t hw = 1; hw <= int64_t{1} << 12; hw = hw * 3 + 1) {
                KernelLaunch l;
                l.inputs = {shape_ref(dt, {1, 512, hw, hw}, dummy)};
                l.outputs = {shape_ref(dt, {1, 512, 1, 1}, dummy + 1)};
                l.attrs = {{"op", std::string("avg")}};
                const CycleBreakdown cb = cost_ok(kernel(), l, preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " hw=" << hw;
                prev = cb.total;
                expect_schedule_checked(kernel(), l, preset);
            }
        }
}

// The spatial extent is the schedule's axis, reduced: lanes along 7 x 7 planes leave 15 of 64
// idle and each 49-element row a partial block; across the planes they are full. Joining
// planes is refused.
TEST(GlobalPoolCost, PlanesAlongOrAcrossTheLanes) {
    for (std::string_view preset : loom::test::presets()) {
        KernelLaunch l;
        l.inputs = {shape_ref(DType::F32, {8, 256, 7, 7})};
        l.outputs = {shape_ref(DType::F32, {8, 256, 1, 1})};
        l.attrs = {{"op", std::string("avg")}};
        VectorSchedule along;
        along.vector_axis = VectorAxis::AXIS;
        along.vector_tile = 56;
        along.ub_tile = 56 * 64;
        l.tiling = along;
        const CycleBreakdown a = cost_ok(kernel(), l, preset);
        VectorSchedule across;
        across.vector_axis = VectorAxis::OUTER;
        across.vector_tile = 64;
        across.ub_tile = 64 * 49;
        l.tiling = across;
        const CycleBreakdown b = cost_ok(kernel(), l, preset);
        EXPECT_LT(b.l2_miss_bytes, a.l2_miss_bytes) << preset;
        EXPECT_DOUBLE_EQ(b.l2_miss_bytes, 8.0 * 256 * 49 * 4 * (1 + 1.0 / 49));
        VectorSchedule joined;
        joined.ub_tile = 1024;
        l.tiling = joined;
        EXPECT_NE(cost_error(kernel(), l, preset).message().find("a reduction cannot"), std::string::npos);
        l.tiling = {};
        EXPECT_TRUE(cost_error(kernel(), l, preset).ok());
    }
}

}  // namespace

}  // namespace test_kernel_global_pool
