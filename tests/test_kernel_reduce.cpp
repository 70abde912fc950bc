// reduce (device/kernels/reduce.cpp): ReduceMean, ReduceSum, ReduceMax, ReduceMin.
// Reference: one float64 loop over X that maps every element to its output index by zeroing
// the reduced coordinates, summing in order (or taking max/min).
// Tolerances: max and min exact. Sum and mean (float64 accumulation in the kernel, in another
// order) within 1 ulp of the result plus 1e-12 of the sum of |x| (the reorder's float64 error);
// f16 within 1 f16 ulp of the float64 result rounded to f16.
// Data: random non-zero values in -4 .. 4, fixed seeds; every axis subset of an odd 3-D shape,
// negative axes, keepdims 0 and 1, size-1 dims, scalars, a kept innermost dim wider than the
// kernel's 256 tile, and long reductions into few outputs (the split-and-combine path).
// Cost: positive, monotonic, the schedule checked; short contiguous lines across the lanes.
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

namespace test_kernel_reduce {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

using Shape = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("reduce"); }

struct Case {
    Shape shape;
    std::vector<int64_t> axes;  // as given to the kernel; empty = all
    bool keepdims;
};

std::vector<bool> reduced_set(const Case& c) {
    std::vector<bool> red(c.shape.size(), c.axes.empty());
    for (int64_t a : c.axes) red[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(c.shape.size()) : a)] = true;
    return red;
}

Shape out_shape(const Case& c) {
    const std::vector<bool> red = reduced_set(c);
    Shape o;
    for (size_t d = 0; d < c.shape.size(); ++d)
        if (!red[d]) o.push_back(c.shape[d]);
        else if (c.keepdims) o.push_back(1);
    return o;
}

// Reference results and the sums of |x| per output (for the tolerance).
struct Ref {
    std::vector<double> value, abs_sum;
};

Ref reference(const std::vector<double>& x, const Case& c, const std::string& op) {
    const std::vector<bool> red = reduced_set(c);
    const Shape o = out_shape({c.shape, c.axes, false});
    const int64_t n_out = element_count(o);
    Ref r{std::vector<double>(static_cast<size_t>(n_out)), std::vector<double>(static_cast<size_t>(n_out))};
    const double init = op == "max" ? -HUGE_VAL : op == "min" ? HUGE_VAL : 0.0;
    std::fill(r.value.begin(), r.value.end(), init);
    int64_t per_out = 1;
    for (size_t d = 0; d < c.shape.size(); ++d)
        if (red[d]) per_out *= c.shape[d];
    for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
        int64_t rest = i, oi = 0, stride = 1;
        for (size_t k = c.shape.size(); k-- > 0;) {
            const int64_t coord = rest % c.shape[k];
            rest /= c.shape[k];
            if (!red[k]) {
                oi += coord * stride;
                stride *= c.shape[k];
            }
        }
        double& v = r.value[static_cast<size_t>(oi)];
        const double xi = x[static_cast<size_t>(i)];
        v = op == "max" ? std::max(v, xi) : op == "min" ? std::min(v, xi) : v + xi;
        r.abs_sum[static_cast<size_t>(oi)] += std::fabs(xi);
    }
    if (op == "mean")
        for (size_t k = 0; k < r.value.size(); ++k) {
            r.value[k] /= static_cast<double>(per_out);
            r.abs_sum[k] /= static_cast<double>(per_out);
        }
    return r;
}

std::vector<Case> cases() {
    std::vector<Case> v;
    for (bool keep : {true, false}) {
        for (const std::vector<int64_t>& axes : std::vector<std::vector<int64_t>>{
                 {}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}, {0, 1}, {2, 0, 1}, {-3, -2}})
            v.push_back({{7, 13, 5}, axes, keep});
        v.push_back({{1, 1}, {}, keep});
        v.push_back({{}, {}, keep});
        v.push_back({{2, 1, 3}, {1}, keep});
        v.push_back({{2, 1, 3}, {0}, keep});
        v.push_back({{3, 1031}, {0}, keep});
        v.push_back({{3, 1031}, {1}, keep});
        v.push_back({{4, 300, 5}, {1}, keep});
        v.push_back({{2, 600, 3}, {0, 2}, keep});
        v.push_back({{2, 3, 4, 5, 6}, {1, 3}, keep});
        v.push_back({{64, 4099}, {0}, keep});
    }
    // Few outputs from long reductions: the kernel splits them into parts.
    v.push_back({{1, 3, 200003}, {2}, true});
    v.push_back({{1000003}, {}, false});
    v.push_back({{1, 70001, 7}, {1}, false});
    v.push_back({{3, 65537, 2}, {0, 1}, true});
    return v;
}

std::vector<double> draw(std::mt19937& rng, size_t n) {
    std::uniform_real_distribution<double> d(0.01, 4.0);
    std::uniform_int_distribution<int> coin(0, 1);
    std::vector<double> v(n);
    for (auto& x : v) x = (coin(rng) ? -1 : 1) * d(rng);
    return v;
}

KernelAttrs attrs(const std::string& op, const Case& c) {
    KernelAttrs a = {{"op", op}, {"keepdims", int64_t{c.keepdims}}};
    if (!c.axes.empty()) a.set("axes", c.axes);
    return a;
}

const char* const kOps[] = {"mean", "sum", "max", "min"};

std::string op_name(const testing::TestParamInfo<const char*>& info) { return info.param; }

class ReduceF32 : public testing::TestWithParam<const char*> {};
class ReduceF16 : public testing::TestWithParam<const char*> {};

TEST_P(ReduceF32, MatchesFloat64) {
    const std::string op = GetParam();
    ThreadPool pool(3);
    uint32_t seed = 1;
    for (const Case& c : cases()) {
        SCOPED_TRACE(testing::PrintToString(c.shape) + " axes " + testing::PrintToString(c.axes) + " keepdims " +
                     std::to_string(c.keepdims));
        std::mt19937 rng(seed++);
        std::vector<double> xd = draw(rng, static_cast<size_t>(element_count(c.shape)));
        std::vector<float> x(xd.begin(), xd.end()), y(static_cast<size_t>(element_count(out_shape(c))), std::nanf(""));
        KernelLaunch l;
        l.inputs = {ref(x, c.shape)};
        l.outputs = {ref(y, out_shape(c))};
        l.attrs = attrs(op, c);
        loom::Status st = kernel().run(l, pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        const Ref r = reference(std::vector<double>(x.begin(), x.end()), c, op);
        int bad = 0;
        for (size_t i = 0; i < y.size(); ++i) {
            const double want = static_cast<float>(r.value[i]);
            const double tol = op == "max" || op == "min" ? 0 : f32_ulp(want) + 1e-12 * r.abs_sum[i];
            if (!(std::fabs(y[i] - want) <= tol) && bad++ < 5)
                ADD_FAILURE() << "output " << i << " gave " << y[i] << ", want " << want;
        }
        EXPECT_EQ(bad, 0);
    }
}

TEST_P(ReduceF16, WithinOneUlpOfFloat64RoundedToF16) {
    const std::string op = GetParam();
    ThreadPool pool(2);
    uint32_t seed = 500;
    for (const Case& c : cases()) {
        SCOPED_TRACE(testing::PrintToString(c.shape) + " axes " + testing::PrintToString(c.axes) + " keepdims " +
                     std::to_string(c.keepdims));
        std::mt19937 rng(seed++);
        std::vector<f16> x, y(static_cast<size_t>(element_count(out_shape(c))), f16{0x7e00});
        std::vector<double> xd;
        for (double v : draw(rng, static_cast<size_t>(element_count(c.shape)))) {
            x.push_back(f32_to_f16(static_cast<float>(v)));
            xd.push_back(ref_decode_f16(x.back().bits));
        }
        KernelLaunch l;
        l.inputs = {ref(x, c.shape)};
        l.outputs = {ref(y, out_shape(c))};
        l.attrs = attrs(op, c);
        ASSERT_TRUE(kernel().run(l, pool).ok());
        const Ref r = reference(xd, c, op);
        int bad = 0;
        for (size_t i = 0; i < y.size(); ++i) {
            const double want = ref_round_f16(r.value[i]), got = ref_decode_f16(y[i].bits);
            if (!(got == want || std::fabs(got - want) <= f16_ulp(want)) && bad++ < 5)
                ADD_FAILURE() << "output " << i << " gave " << got << ", want " << want;
        }
        EXPECT_EQ(bad, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceF32, testing::ValuesIn(kOps), op_name);
INSTANTIATE_TEST_SUITE_P(Ops, ReduceF16, testing::ValuesIn(kOps), op_name);

TEST(ReduceSemantics, NoopWithEmptyAxesIsIdentity) {
    ThreadPool pool(1);
    std::mt19937 rng(4);
    std::vector<float> x = random_floats(rng, 35), y(35);
    KernelLaunch l;
    l.inputs = {ref(x, {5, 7})};
    l.outputs = {ref(y, {5, 7})};
    l.attrs = {{"op", std::string("sum")}, {"noop_with_empty_axes", int64_t{1}}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(x, y);
    l.attrs.set("axes", std::vector<int64_t>{});
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(x, y);
    // noop off with empty axes: everything is reduced.
    l.attrs = {{"op", std::string("sum")}, {"axes", std::vector<int64_t>{}}, {"keepdims", int64_t{0}}};
    l.outputs = {ref(y, {})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    double s = 0;
    for (float v : x) s += v;
    EXPECT_NEAR(y[0], s, 1e-5);
}

TEST(ReduceSemantics, EmptyReductionsGiveTheIdentityElement) {
    ThreadPool pool(1);
    std::vector<float> x, y(3, 7.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {0, 3})};
    l.outputs = {ref(y, {1, 3})};
    auto run = [&](const char* op) {
        l.attrs = {{"op", std::string(op)}, {"axes", std::vector<int64_t>{0}}};
        EXPECT_TRUE(kernel().run(l, pool).ok());
        return y[2];
    };
    EXPECT_EQ(run("sum"), 0.0f);
    EXPECT_TRUE(std::isnan(run("mean")));
    EXPECT_EQ(run("max"), -HUGE_VALF);
    EXPECT_EQ(run("min"), HUGE_VALF);
    // An empty output is a no-op.
    std::vector<float> e;
    l.inputs = {ref(e, {3, 0})};
    l.outputs = {ref(e, {1, 0})};
    l.attrs = {{"op", std::string("sum")}, {"axes", std::vector<int64_t>{0}}};
    EXPECT_TRUE(kernel().run(l, pool).ok());
    EXPECT_TRUE(kernel().cost(l, preset_spec("dc")).ok());
}

TEST(ReduceSemantics, ThreadCountDoesNotChangeResults) {
    std::mt19937 rng(12);
    std::vector<float> x = random_floats(rng, 3 * 200003), y1(3), y3(3);
    ThreadPool one(1), three(3);
    KernelLaunch l;
    l.inputs = {ref(x, {3, 200003})};
    l.attrs = {{"op", std::string("mean")}, {"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}};
    l.outputs = {ref(y1, {3})};
    ASSERT_TRUE(kernel().run(l, one).ok());
    l.outputs = {ref(y3, {3})};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(y1, y3);
}

TEST(ReduceArgs, RejectsMalformedLaunches) {
    std::vector<float> x(24, 1.0f), y(24, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {2, 3, 4})};
    l.outputs = {ref(y, {2, 1, 4})};
    l.attrs = {{"op", std::string("sum")}, {"axes", std::vector<int64_t>{1}}};
    ASSERT_TRUE(kernel().cost(l, preset_spec("edge")).ok());
    l.outputs = {ref(y, {2, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "reduce: output Y is 2x4, want 2x1x4 (X 2x3x4, axes [1], keepdims 1)");
    l.attrs.set("keepdims", int64_t{0});
    l.outputs = {ref(y, {2, 1, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output Y is 2x1x4, want 2x4");
    l.attrs = {{"op", std::string("sum")}, {"axes", std::vector<int64_t>{3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "reduce: axis 3 outside [-3, 2] for X 2x3x4");
    l.attrs = {{"op", std::string("sum")}, {"axes", std::vector<int64_t>{1, -2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "axes [1, -2] name axis 1 twice");
    l.attrs = {{"op", std::string("sum")}, {"axes", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "reduce: attribute 'axes' must be a list of ints");
    l.attrs = {{"op", std::string("prod")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "reduce: op 'prod' (mean, sum, max or min)");
    l.attrs = {{"op", std::string("sum")}, {"keepdims", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "keepdims = 2 (0 or 1)");
    l.attrs = {{"op", std::string("sum")}, {"noop_with_empty_axes", int64_t{-1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "noop_with_empty_axes = -1 (0 or 1)");
    l.attrs = {{"op", std::string("sum")}, {"axis", int64_t{0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "reduce: unknown attribute 'axis'");
    l.attrs = {};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "reduce: attribute 'op' is required");
    l.attrs = {{"op", std::string("sum")}, {"axes", std::vector<int64_t>{1}}};
    std::vector<f16> h(8);
    l.outputs = {ref(h, {2, 1, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mixed dtypes (X f32, Y f16)");
    std::vector<int32_t> ix(24), iy(8);
    l.inputs = {ref(ix, {2, 3, 4})};
    l.outputs = {ref(iy, {2, 1, 4})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "reduce: dtype i32");
    EXPECT_EQ(y, std::vector<float>(24, 0.0f));
}

TEST(ReduceCost, PositiveMonotonicAndScheduleChecked) {
    auto launch = [](DType dt, int64_t rows, int64_t len) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {rows, len})};
        l.outputs = {shape_ref(dt, {rows})};
        l.attrs = {{"op", std::string("mean")}, {"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            double prev = 0;
            for (int64_t len = 1; len <= int64_t{1} << 26; len = len * 3 + 1) {
                CycleBreakdown cb = cost_ok(kernel(), launch(dt, 7, len), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << len;
                prev = cb.total;
            }
            // Fewer outputs for the same input writes fewer bytes.
            EXPECT_LT(cost_ok(kernel(), launch(dt, 16, 1 << 16), preset).l2_miss_bytes,
                      cost_ok(kernel(), launch(dt, 1 << 16, 16), preset).l2_miss_bytes);
            KernelLaunch l = launch(dt, 7, 1000);
            l.tiling = VectorSchedule{6, true, 0};
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("reduce: schedule: ub_tile = 6"),
                      std::string::npos);
        }
}

// Lines of 5 along the lanes waste 59 of 64 of them; across the lanes (rows covering the line,
// so reads stay whole blocks) they cost a transposition but fill them. The default takes the
// cheaper; joining lines is refused for a reduction; both reduced layouts name their axis.
TEST(ReduceCost, ShortContiguousLinesGoAcrossTheLanes) {
    auto launch = [](DType dt, Shape in, std::vector<int64_t> axes) {
        Case c{in, axes, true};
        KernelLaunch l;
        l.inputs = {shape_ref(dt, in)};
        l.outputs = {shape_ref(dt, out_shape(c))};
        l.attrs = {{"op", std::string("sum")}, {"axes", axes}};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)));
            const int64_t block = 32 / int64_t(dtype_size(dt));
            KernelLaunch l = launch(dt, {20000, 5}, {1});
            VectorSchedule along;
            along.vector_axis = VectorAxis::AXIS;
            along.vector_tile = block;
            along.ub_tile = block * 512;
            l.tiling = along;
            const CycleBreakdown a = cost_ok(kernel(), l, preset);
            VectorSchedule across;
            across.vector_axis = VectorAxis::OUTER;
            across.vector_tile = 512;
            across.ub_tile = 512 * 5;
            l.tiling = across;
            const CycleBreakdown b = cost_ok(kernel(), l, preset);
            EXPECT_LT(2 * b.vector, a.vector);
            EXPECT_LT(b.l2_miss_bytes, a.l2_miss_bytes);  // rows of 5 padded to whole blocks along the lanes
            EXPECT_LT(b.total, a.total);
            l.tiling = {};
            const CycleBreakdown d = cost_ok(kernel(), l, preset);
            EXPECT_LE(d.total, a.total);
            EXPECT_EQ(std::get<VectorSchedule>(d.tiling).vector_axis, VectorAxis::OUTER);
            VectorSchedule joined;
            joined.ub_tile = 1024;
            l.tiling = joined;
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("reduce: schedule: vector_tile = 0 joins lines"),
                      std::string::npos);
            // Over C of NCHW: the plane is contiguous and kept (inner), C the reduced axis.
            l = launch(dt, {2, 64, 28, 28}, {1});
            l.tiling = {};
            EXPECT_EQ(std::get<VectorSchedule>(cost_ok(kernel(), l, preset).tiling).vector_axis, VectorAxis::INNER);
            VectorSchedule c = along;
            c.vector_tile = 64;  // up to the 64 channels
            c.ub_tile = 64 * 16;
            l.tiling = c;
            EXPECT_TRUE(cost_error(kernel(), l, preset).ok());
            c.vector_tile = 128;
            l.tiling = c;
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("vector_axis = axis has 64"), std::string::npos);
        }
}

}  // namespace

}  // namespace test_kernel_reduce
