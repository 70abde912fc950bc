// unary (device/kernels/unary.cpp): Y = op(X) for the ONNX activations and math ops.
// Reference: each op written out in float64 here, on the same (fp32-rounded) parameters.
// Tolerances (f32, against the float64 result rounded to float): relu, leaky_relu, clip, neg,
// abs, identity and sqrt exact (one correctly rounded step); exp, log, tanh, erf 2 ulp (libm
// float functions); sigmoid, softplus, elu 4 ulp (two or three rounded steps); hard_sigmoid and
// hard_swish 2 ulp or 1e-7 absolute (alpha * x + beta may cancel). f16 within 1 f16 ulp of the
// float64 result rounded to f16 (infinities must match exactly). i32/i64 exact.
// Data: random non-zero values of both signs, magnitudes 0.25 .. 12 (sqrt and log: positive),
// fixed seeds; scalars, size-1 dims, odd sizes, one large size for the parallel path.
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

namespace test_kernel_unary {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

using Shape = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("unary"); }

// One op with its attributes (non-default values where it takes any) and its tolerance.
struct Case {
    const char* op;
    KernelAttrs attrs;
    int ulps;
    double abs_tol;
};

float attr(const Case& c, const char* name, double fallback) {
    return static_cast<float>(*c.attrs.get_float(name, fallback));
}

double reference(const Case& c, double x) {
    const std::string op = c.op;
    if (op == "relu") return x < 0 ? 0 : x;
    if (op == "leaky_relu") return x < 0 ? attr(c, "alpha", 0.01) * x : x;
    if (op == "sigmoid") return 1 / (1 + std::exp(-x));
    if (op == "tanh") return std::tanh(x);
    if (op == "clip") return std::min<double>(std::max<double>(x, attr(c, "min", -INFINITY)), attr(c, "max", INFINITY));
    if (op == "hard_sigmoid")
        return std::clamp(attr(c, "alpha", 0.2) * x + attr(c, "beta", 0.5), 0.0, 1.0);
    if (op == "hard_swish") return x * std::clamp(x / 6 + 0.5, 0.0, 1.0);
    if (op == "sqrt") return std::sqrt(x);
    if (op == "exp") return std::exp(x);
    if (op == "log") return std::log(x);
    if (op == "neg") return -x;
    if (op == "abs") return std::fabs(x);
    if (op == "identity") return x;
    if (op == "erf") return std::erf(x);
    if (op == "softplus") return std::log1p(std::exp(x));
    if (op == "elu") return x < 0 ? attr(c, "alpha", 1.0) * std::expm1(x) : x;
    ADD_FAILURE() << "no reference for " << op;
    return 0;
}

std::vector<Case> all_cases() {
    return {
        {"relu", {}, 0, 0},
        {"leaky_relu", {{"alpha", 0.3}}, 0, 0},
        {"sigmoid", {}, 4, 0},
        {"tanh", {}, 2, 0},
        {"clip", {{"min", -1.5}, {"max", int64_t{2}}}, 0, 0},
        {"hard_sigmoid", {{"alpha", 0.3}, {"beta", 0.4}}, 2, 1e-7},
        {"hard_swish", {}, 2, 1e-7},
        {"sqrt", {}, 0, 0},
        {"exp", {}, 2, 0},
        {"log", {}, 2, 0},
        {"neg", {}, 0, 0},
        {"abs", {}, 0, 0},
        {"identity", {}, 0, 0},
        {"erf", {}, 2, 0},
        {"softplus", {}, 4, 0},
        {"elu", {{"alpha", 0.7}}, 4, 0},
    };
}

KernelAttrs with_op(const Case& c) {
    KernelAttrs a = c.attrs;
    a.set("op", std::string(c.op));
    return a;
}

std::vector<double> draw(std::mt19937& rng, size_t n, const std::string& op) {
    std::uniform_real_distribution<double> mag(0.25, 12.0);
    std::uniform_int_distribution<int> coin(0, 1);
    std::vector<double> v(n);
    const bool positive = op == "sqrt" || op == "log";
    for (auto& x : v) x = (positive || coin(rng) ? 1 : -1) * mag(rng);
    return v;
}

const std::vector<Shape> kShapes = {{}, {1}, {1, 1}, {7, 13, 5}, {1, 17, 1, 3}, {2, 3, 5, 7, 11}, {1000003}};

std::string case_name(const testing::TestParamInfo<Case>& info) { return info.param.op; }

class UnaryF32 : public testing::TestWithParam<Case> {};
class UnaryF16 : public testing::TestWithParam<Case> {};

TEST_P(UnaryF32, MatchesFloat64WithinStatedUlps) {
    const Case& c = GetParam();
    ThreadPool pool(3);
    uint32_t seed = 11;
    for (const Shape& s : kShapes) {
        SCOPED_TRACE(testing::PrintToString(s));
        std::mt19937 rng(seed++);
        std::vector<double> xd = draw(rng, static_cast<size_t>(element_count(s)), c.op);
        std::vector<float> x(xd.begin(), xd.end()), y(x.size(), std::nanf(""));
        KernelLaunch l;
        l.inputs = {ref(x, s)};
        l.outputs = {ref(y, s)};
        l.attrs = with_op(c);
        ASSERT_TRUE(kernel().run(l, pool).ok());
        int bad = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double want = static_cast<float>(reference(c, x[i])), got = y[i];
            const double tol = c.ulps * f32_ulp(want) + c.abs_tol;
            if (!(got == want || std::fabs(got - want) <= tol) && bad++ < 5)
                ADD_FAILURE() << c.op << "(" << x[i] << ") gave " << got << ", want " << want;
        }
        EXPECT_EQ(bad, 0);
    }
}

TEST_P(UnaryF32, InPlaceMatchesOutOfPlace) {
    const Case& c = GetParam();
    ThreadPool pool(2);
    std::mt19937 rng(3);
    std::vector<double> xd = draw(rng, 70001, c.op);
    std::vector<float> x(xd.begin(), xd.end()), y(x.size());
    KernelLaunch l;
    l.inputs = {ref(x, {70001})};
    l.outputs = {ref(y, {70001})};
    l.attrs = with_op(c);
    ASSERT_TRUE(kernel().run(l, pool).ok());
    l.outputs = {ref(x, {70001})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
}

TEST_P(UnaryF16, WithinOneUlpOfFloat64RoundedToF16) {
    const Case& c = GetParam();
    ThreadPool pool(2);
    uint32_t seed = 51;
    for (const Shape& s : {Shape{}, Shape{1, 1}, Shape{7, 13, 5}, Shape{3, 100003}}) {
        SCOPED_TRACE(testing::PrintToString(s));
        std::mt19937 rng(seed++);
        std::vector<f16> x, y(static_cast<size_t>(element_count(s)), f16{0x7e00});
        for (double v : draw(rng, y.size(), c.op)) x.push_back(f32_to_f16(static_cast<float>(v)));
        KernelLaunch l;
        l.inputs = {ref(x, s)};
        l.outputs = {ref(y, s)};
        l.attrs = with_op(c);
        ASSERT_TRUE(kernel().run(l, pool).ok());
        int bad = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double u = ref_decode_f16(x[i].bits);
            const double want = ref_round_f16(reference(c, u)), got = ref_decode_f16(y[i].bits);
            if (!(got == want || std::fabs(got - want) <= f16_ulp(want)) && bad++ < 5)
                ADD_FAILURE() << c.op << "(" << u << ") gave " << got << ", want " << want;
        }
        EXPECT_EQ(bad, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryF32, testing::ValuesIn(all_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Ops, UnaryF16, testing::ValuesIn(all_cases()), case_name);

TEST(UnaryAttrs, DefaultsAreTheOnnxOnes) {
    ThreadPool pool(1);
    std::vector<float> x = {-2.0f, -0.5f, 0.5f, 3.0f}, y(4);
    KernelLaunch l;
    l.inputs = {ref(x, {4})};
    l.outputs = {ref(y, {4})};
    auto run = [&](const char* op) {
        l.attrs = {{"op", std::string(op)}};
        EXPECT_TRUE(kernel().run(l, pool).ok());
        return y;
    };
    EXPECT_EQ(run("leaky_relu"), (std::vector<float>{-2.0f * 0.01f, -0.5f * 0.01f, 0.5f, 3.0f}));
    EXPECT_EQ(run("clip"), x);  // -inf .. +inf
    EXPECT_EQ(run("hard_sigmoid"),
              (std::vector<float>{0.2f * -2.0f + 0.5f, 0.2f * -0.5f + 0.5f, 0.2f * 0.5f + 0.5f, 1.0f}));
    std::vector<float> elu = run("elu");
    EXPECT_FLOAT_EQ(elu[0], std::expm1(-2.0f));
    EXPECT_EQ(elu[3], 3.0f);
}

TEST(UnaryShapes, EmptyTensorIsANoOp) {
    ThreadPool pool(1);
    std::vector<float> x, y;
    KernelLaunch l;
    l.inputs = {ref(x, {4, 0, 3})};
    l.outputs = {ref(y, {4, 0, 3})};
    l.attrs = {{"op", std::string("exp")}};
    EXPECT_TRUE(kernel().run(l, pool).ok());
    EXPECT_TRUE(kernel().cost(l, preset_spec("edge")).ok());
}

template <typename T>
void check_int_ops() {
    ThreadPool pool(2);
    std::mt19937 rng(8);
    std::uniform_int_distribution<int64_t> d(-100000, 100000);
    std::vector<T> x(40001), y(x.size());
    for (auto& v : x) v = static_cast<T>(d(rng));
    x[0] = std::numeric_limits<T>::min();
    x[1] = std::numeric_limits<T>::max();
    KernelLaunch l;
    l.inputs = {ref(x, {40001})};
    l.outputs = {ref(y, {40001})};
    for (const char* op : {"identity", "neg", "abs"}) {
        l.attrs = {{"op", std::string(op)}};
        ASSERT_TRUE(kernel().run(l, pool).ok()) << op;
        for (size_t i = 0; i < x.size(); ++i) {
            T want = x[i];
            if (i > 0 && std::string(op) == "neg") want = static_cast<T>(-x[i]);
            if (i > 0 && std::string(op) == "abs") want = static_cast<T>(x[i] < 0 ? -x[i] : x[i]);
            ASSERT_EQ(y[i], want) << op << " " << x[i];  // the most negative value wraps to itself
        }
    }
}

TEST(UnaryInt, IdentityNegAbsOnI32AndI64) {
    check_int_ops<int32_t>();
    check_int_ops<int64_t>();
}

TEST(UnaryArgs, RejectsMalformedLaunches) {
    std::vector<float> x(12, 1.0f), y(12, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {3, 4})};
    l.outputs = {ref(y, {4, 3})};
    l.attrs = {{"op", std::string("relu")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output Y is 4x3, want X's shape 3x4");
    l.outputs = {ref(y, {3, 4})};
    l.attrs = {{"op", std::string("relu")}, {"alpha", 0.1}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'alpha' for op 'relu' (known: op)");
    l.attrs = {{"op", std::string("clip")}, {"alpha", 0.1}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "(known: op, min, max)");
    l.attrs = {{"op", std::string("leaky_relu")}, {"alpha", std::string("big")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unary: attribute 'alpha' must be a float");
    l.attrs = {{"op", std::string("gelu")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "op 'gelu' (relu, leaky_relu,");
    l.attrs = {};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unary: attribute 'op' is required");
    l.attrs = {{"op", std::string("exp")}};
    std::vector<f16> h(12);
    l.outputs = {ref(h, {3, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mixed dtypes (X f32, Y f16)");
    std::vector<int32_t> ix(12), iy(12);
    l.inputs = {ref(ix, {3, 4})};
    l.outputs = {ref(iy, {3, 4})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "op 'exp' on i32");
    std::vector<uint8_t> ux(12), uy(12);
    l.inputs = {ref(ux, {3, 4})};
    l.outputs = {ref(uy, {3, 4})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "dtype u8");
    l.inputs = {ref(x, {3, 4}), ref(x, {3, 4})};
    l.outputs = {ref(y, {3, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unary takes 1 input(s), got 2");
    EXPECT_EQ(y, std::vector<float>(12, 0.0f));
}

TEST(UnaryCost, PositiveMonotonicAndScheduleChecked) {
    auto launch = [](DType dt, int64_t n, const char* op) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {n})};
        l.outputs = {shape_ref(dt, {n})};
        l.attrs = {{"op", std::string(op)}};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16})
            for (const char* op : {"relu", "identity", "erf"}) {
                SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)) + " " + op);
                double prev = 0;
                for (int64_t n = 1; n <= int64_t{1} << 28; n = n * 3 + 1) {
                    CycleBreakdown cb = cost_ok(kernel(), launch(dt, n, op), preset);
                    EXPECT_GT(cb.total, 0);
                    EXPECT_GE(cb.total, prev) << n;
                    prev = cb.total;
                }
                KernelLaunch l = launch(dt, 100000, op);
                l.tiling = VectorSchedule{6, true, 0};
                EXPECT_NE(cost_error(kernel(), l, preset).message().find("unary: schedule: ub_tile = 6"),
                          std::string::npos);
                l.tiling = VectorSchedule{1024, true, 1000};
                EXPECT_NE(cost_error(kernel(), l, preset).message().find("cores = 1000"), std::string::npos);
            }
    const int64_t n = 1 << 22;
    EXPECT_GT(cost_ok(kernel(), launch(DType::F32, n, "erf"), "dc").vector,
              cost_ok(kernel(), launch(DType::F32, n, "relu"), "dc").vector);
}

}  // namespace

}  // namespace test_kernel_unary
