// binary (device/kernels/binary.cpp): Y = A op B with numpy broadcasting, ONNX semantics.
// Reference: an independent float64 loop over Y's multi-index (broadcast by index arithmetic).
// Tolerances: f32 add, sub, mul, max, min and prelu exact (a float64 sum or product of floats
// rounded once to float is the correctly rounded fp32 result; 53 >= 2 x 24 + 2); div within 1
// ulp (the float64 quotient is rounded twice); pow within 2 ulp (powf against pow). f16 within
// 1 f16 ulp of the float64 result rounded to f16. i32/i64 exact against int64 arithmetic.
// Data: random non-zero values of both signs, fixed seeds; odd and broadcast shapes of
// differing ranks, scalars, size-1 and zero dims. Cost: positive, monotonic, the schedule
// checked; the broadcast axis in the lanes saves the expansion pass; in place.
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

namespace test_kernel_binary {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

using Shape = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("binary"); }

Shape broadcast(const Shape& a, const Shape& b) {
    Shape r(std::max(a.size(), b.size()), 1);
    for (size_t i = 0; i < r.size(); ++i) {
        const size_t k = r.size() - 1 - i;
        const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
        r[k] = da == 1 ? db : da;
    }
    return r;
}

const char* const kOps[] = {"add", "sub", "mul", "div", "pow", "max", "min", "prelu"};

double ref_op(const std::string& op, double a, double b) {
    if (op == "add") return a + b;
    if (op == "sub") return a - b;
    if (op == "mul") return a * b;
    if (op == "div") return a / b;
    if (op == "pow") return std::pow(a, b);
    if (op == "max") return a > b ? a : b;
    if (op == "min") return a < b ? a : b;
    return a < 0 ? a * b : a;  // prelu
}

// Ulp tolerance of the f32 result per op (see the header).
int f32_ulps(const std::string& op) { return op == "pow" ? 2 : op == "div" ? 1 : 0; }

// Values for `op`: both signs, magnitudes 0.25 .. 4 (never 0); pow gets positive bases and
// exponents in -3 .. 3 (negative bases: BinaryF32.PowOfNegativeBaseWithIntegerExponent).
void fill_pair(std::mt19937& rng, const std::string& op, std::vector<double>& a, std::vector<double>& b) {
    std::uniform_real_distribution<double> mag(0.25, 4.0), expo(-3.0, 3.0);
    std::uniform_int_distribution<int> coin(0, 1);
    for (auto& v : a) v = (coin(rng) ? -1 : 1) * mag(rng);
    for (size_t i = 0; i < b.size(); ++i) b[i] = (coin(rng) ? -1 : 1) * mag(rng);
    if (op == "pow") {
        for (auto& v : a) v = std::fabs(v);
        for (auto& v : b) v = expo(rng);
    }
}

struct ShapePair {
    Shape a, b;
};

// Odd shapes: equal, innermost broadcast, middle broadcast, per-channel (C = 17 and 3) with
// [C,1,1] and [1,C,1,1], scalars, broadcasting on both sides, size-1 dims, ranks 0 to 5.
std::vector<ShapePair> shape_pairs() {
    return {
        {{1, 1}, {1, 1}},
        {{1}, {}},
        {{}, {}},
        {{7, 13, 5}, {7, 13, 5}},
        {{7, 13, 5}, {5}},
        {{7, 13, 5}, {13, 1}},
        {{5}, {7, 13, 5}},
        {{2, 17, 3, 5}, {17, 1, 1}},
        {{2, 17, 3, 5}, {1, 17, 1, 1}},
        {{1, 3, 11, 1}, {3, 1, 1}},
        {{}, {7, 13}},
        {{7, 13}, {}},
        {{3, 1, 5}, {1, 4, 1}},
        {{6, 1}, {6}},
        {{2, 1, 3, 1, 2}, {5, 1, 7, 1}},
        {{3, 1031}, {3, 1031}},
    };
}

// Runs `op` in f32 over `sp`; checks against float64 within the op's ulps.
void check_f32(const std::string& op, const ShapePair& sp, uint32_t seed, ThreadPool& pool) {
    if (op == "prelu" && broadcast(sp.a, sp.b) != sp.a) return;  // the slope must broadcast to A
    const Shape& bshape = sp.b;
    const Shape out = broadcast(sp.a, bshape);
    std::mt19937 rng(seed);
    std::vector<double> ad(static_cast<size_t>(element_count(sp.a))), bd(static_cast<size_t>(element_count(bshape)));
    fill_pair(rng, op, ad, bd);
    std::vector<float> a(ad.begin(), ad.end()), b(bd.begin(), bd.end());
    std::vector<float> y(static_cast<size_t>(element_count(out)), std::nanf(""));
    KernelLaunch l;
    l.inputs = {ref(a, sp.a), ref(b, bshape)};
    l.outputs = {ref(y, out)};
    l.attrs = {{"op", op}};
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    int bad = 0;
    for (int64_t i = 0; i < element_count(out); ++i) {
        const double u = a[static_cast<size_t>(broadcast_source_index(out, i, sp.a))];
        const double w = b[static_cast<size_t>(broadcast_source_index(out, i, bshape))];
        const double want = static_cast<float>(ref_op(op, u, w));
        const double got = y[static_cast<size_t>(i)];
        if (!(std::fabs(got - want) <= f32_ulps(op) * f32_ulp(want)) && bad++ < 5)
            ADD_FAILURE() << op << " element " << i << ": " << u << " " << op << " " << w << " gave " << got
                          << ", want " << want;
    }
    EXPECT_EQ(bad, 0);
}

class BinaryF32 : public testing::TestWithParam<const char*> {};
class BinaryF16 : public testing::TestWithParam<const char*> {};

TEST_P(BinaryF32, MatchesFloat64OnBroadcastShapes) {
    const std::string op = GetParam();
    ThreadPool pool(2);
    uint32_t seed = 100;
    for (const ShapePair& sp : shape_pairs()) {
        SCOPED_TRACE(testing::PrintToString(sp.a) + " " + op + " " + testing::PrintToString(sp.b));
        check_f32(op, sp, seed++, pool);
        check_f32(op, {sp.b, sp.a}, seed++, pool);
    }
}

// Large enough for several parallel chunks: same shape, per-channel and an inner broadcast.
TEST_P(BinaryF32, MatchesFloat64OnLargeShapes) {
    const std::string op = GetParam();
    ThreadPool pool(3);
    check_f32(op, {{200003}, {200003}}, 7, pool);
    check_f32(op, {{2, 31, 67, 41}, {31, 1, 1}}, 8, pool);
    check_f32(op, {{97, 3001}, {3001}}, 9, pool);
    check_f32(op, {{97, 1, 3001}, {1, 5, 1}}, 10, pool);
}

TEST_P(BinaryF16, WithinOneUlpOfFloat64RoundedToF16) {
    const std::string op = GetParam();
    ThreadPool pool(2);
    uint32_t seed = 300;
    std::vector<ShapePair> pairs = shape_pairs();
    pairs.push_back({{2, 31, 67, 41}, {31, 1, 1}});
    for (const ShapePair& sp : pairs) {
        SCOPED_TRACE(testing::PrintToString(sp.a) + " " + op + " " + testing::PrintToString(sp.b));
        if (op == "prelu" && broadcast(sp.a, sp.b) != sp.a) continue;
        const Shape out = broadcast(sp.a, sp.b);
        std::mt19937 rng(seed++);
        std::vector<double> ad(static_cast<size_t>(element_count(sp.a))), bd(static_cast<size_t>(element_count(sp.b)));
        fill_pair(rng, op, ad, bd);
        std::vector<f16> a, b, y(static_cast<size_t>(element_count(out)), f16{0x7e00});
        for (double v : ad) a.push_back(f32_to_f16(static_cast<float>(v)));
        for (double v : bd) b.push_back(f32_to_f16(static_cast<float>(v)));
        KernelLaunch l;
        l.inputs = {ref(a, sp.a), ref(b, sp.b)};
        l.outputs = {ref(y, out)};
        l.attrs = {{"op", op}};
        ASSERT_TRUE(kernel().run(l, pool).ok());
        int bad = 0;
        for (int64_t i = 0; i < element_count(out); ++i) {
            const double u = ref_decode_f16(a[static_cast<size_t>(broadcast_source_index(out, i, sp.a))].bits);
            const double w = ref_decode_f16(b[static_cast<size_t>(broadcast_source_index(out, i, sp.b))].bits);
            const double want = ref_round_f16(ref_op(op, u, w));
            const double got = ref_decode_f16(y[static_cast<size_t>(i)].bits);
            if (!(std::fabs(got - want) <= f16_ulp(want)) && bad++ < 5)
                ADD_FAILURE() << "element " << i << ": " << u << " " << op << " " << w << " gave " << got << ", want "
                              << want;
        }
        EXPECT_EQ(bad, 0);
    }
}

TEST(BinaryPow, NegativeBaseWithIntegerExponent) {
    ThreadPool pool(1);
    std::vector<float> a = {-2.0f, -0.5f, -3.0f, -1.5f}, b = {3.0f, -2.0f, 2.0f, 0.0f}, y(4);
    KernelLaunch l;
    l.inputs = {ref(a, {4}), ref(b, {4})};
    l.outputs = {ref(y, {4})};
    l.attrs = {{"op", std::string("pow")}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(y, (std::vector<float>{-8.0f, 4.0f, 9.0f, 1.0f}));
}

std::string op_name(const testing::TestParamInfo<const char*>& info) { return info.param; }

INSTANTIATE_TEST_SUITE_P(Ops, BinaryF32, testing::ValuesIn(kOps), op_name);
INSTANTIATE_TEST_SUITE_P(Ops, BinaryF16, testing::ValuesIn(kOps), op_name);

// ---- integers ------------------------------------------------------------------------------

template <typename T>
void check_int(const std::string& op, const ShapePair& sp, uint32_t seed) {
    ThreadPool pool(2);
    const Shape out = broadcast(sp.a, sp.b);
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> v(-1000, 1000);
    auto draw = [&] {
        int x = 0;
        while (x == 0) x = v(rng);
        return static_cast<T>(x);
    };
    std::vector<T> a(static_cast<size_t>(element_count(sp.a))), b(static_cast<size_t>(element_count(sp.b)));
    for (auto& x : a) x = draw();
    for (auto& x : b) x = draw();
    std::vector<T> y(static_cast<size_t>(element_count(out)), T{77});
    KernelLaunch l;
    l.inputs = {ref(a, sp.a), ref(b, sp.b)};
    l.outputs = {ref(y, out)};
    l.attrs = {{"op", op}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    for (int64_t i = 0; i < element_count(out); ++i) {
        const int64_t u = a[static_cast<size_t>(broadcast_source_index(out, i, sp.a))];
        const int64_t w = b[static_cast<size_t>(broadcast_source_index(out, i, sp.b))];
        int64_t want = op == "add" ? u + w : op == "sub" ? u - w : op == "mul" ? u * w : op == "div" ? u / w
                     : op == "max" ? std::max(u, w) : std::min(u, w);
        ASSERT_EQ(static_cast<int64_t>(y[static_cast<size_t>(i)]), want) << u << " " << op << " " << w;
    }
}

TEST(BinaryInt, I32AndI64MatchInt64Arithmetic) {
    uint32_t seed = 500;
    for (const char* op : {"add", "sub", "mul", "div", "max", "min"})
        for (const ShapePair& sp : shape_pairs()) {
            SCOPED_TRACE(std::string(op) + " " + testing::PrintToString(sp.a) + " " + testing::PrintToString(sp.b));
            check_int<int32_t>(op, sp, seed++);
            check_int<int64_t>(op, sp, seed++);
        }
}

TEST(BinaryInt, DivisionTruncatesTowardZeroAndOverflowWraps) {
    ThreadPool pool(1);
    const int32_t lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
    std::vector<int32_t> a = {-7, 7, -7, lo, hi, lo}, b = {2, -2, -2, -1, 1, 1}, y(6);
    KernelLaunch l;
    l.inputs = {ref(a, {6}), ref(b, {6})};
    l.outputs = {ref(y, {6})};
    l.attrs = {{"op", std::string("div")}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(y, (std::vector<int32_t>{-3, -3, 3, lo, hi, lo}));
    l.attrs = {{"op", std::string("add")}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(y[4], lo);  // hi + 1
    std::vector<int64_t> a64 = {std::numeric_limits<int64_t>::max()}, b64 = {2}, y64(1);
    l.inputs = {ref(a64, {1}), ref(b64, {1})};
    l.outputs = {ref(y64, {1})};
    l.attrs = {{"op", std::string("mul")}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(y64[0], -2);
}

TEST(BinaryInt, DivisionByZeroIsAnErrorAndWritesNothing) {
    for (int trial = 0; trial < 2; ++trial) {
        std::vector<int64_t> a = {1, 2, 3, 4, 5, 6}, b = {1, 2, 0}, y(6, 9);
        KernelLaunch l;
        l.inputs = {ref(a, {2, 3}), ref(b, {3})};
        l.outputs = {ref(y, {2, 3})};
        l.attrs = {{"op", std::string("div")}};
        ThreadPool pool(1);
        loom::Status st = kernel().run(l, pool);
        EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
        EXPECT_NE(st.message().find("division by zero"), std::string::npos) << st.to_string();
        EXPECT_EQ(y, std::vector<int64_t>(6, 9));
        EXPECT_TRUE(kernel().cost(l, preset_spec("edge")).ok());  // data-dependent: only run sees it
    }
}

// ---- shapes, threads, aliasing -------------------------------------------------------------

TEST(BinaryShapes, EmptyTensorsProduceEmptyOutput) {
    ThreadPool pool(2);
    for (const ShapePair& sp : std::vector<ShapePair>{{{0, 5}, {5}}, {{3, 0}, {1}}, {{4, 1, 0}, {3, 1}}}) {
        std::vector<float> a(static_cast<size_t>(element_count(sp.a))), b(static_cast<size_t>(element_count(sp.b)), 1.0f);
        std::vector<float> y;
        KernelLaunch l;
        l.inputs = {ref(a, sp.a), ref(b, sp.b)};
        l.outputs = {ref(y, broadcast(sp.a, sp.b))};
        l.attrs = {{"op", std::string("add")}};
        EXPECT_TRUE(kernel().run(l, pool).ok());
        EXPECT_TRUE(kernel().cost(l, preset_spec("dc")).ok());
    }
}

TEST(BinaryShapes, InPlaceOnAMatchesOutOfPlace) {
    ThreadPool pool(2);
    std::mt19937 rng(5);
    std::vector<float> a = random_floats(rng, 3 * 17 * 101), b = random_floats(rng, 17), y(a.size());
    KernelLaunch l;
    l.inputs = {ref(a, {3, 17, 101}), ref(b, {17, 1})};
    l.outputs = {ref(y, {3, 17, 101})};
    l.attrs = {{"op", std::string("mul")}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    l.outputs = {ref(a, {3, 17, 101})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(a, y);
}

TEST(BinaryShapes, OneAndThreeThreadsGiveBitIdenticalResults) {
    std::mt19937 rng(6);
    std::vector<float> a = random_floats(rng, 4 * 33 * 1001), b = random_floats(rng, 33), y1(a.size()), y3(a.size());
    ThreadPool one(1), three(3);
    KernelLaunch l;
    l.inputs = {ref(a, {4, 33, 1001}), ref(b, {33, 1})};
    l.attrs = {{"op", std::string("pow")}};
    l.outputs = {ref(y1, {4, 33, 1001})};
    ASSERT_TRUE(kernel().run(l, one).ok());
    l.outputs = {ref(y3, {4, 33, 1001})};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0);
}

// ---- errors --------------------------------------------------------------------------------

TEST(BinaryArgs, RejectsMalformedLaunches) {
    std::vector<float> a(64, 1.0f), b(64, 2.0f), y(64, 0.0f);
    KernelLaunch l;
    l.attrs = {{"op", std::string("add")}};
    l.inputs = {ref(a, {2, 3}), ref(b, {3})};
    l.outputs = {ref(y, {3, 2})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output Y is 3x2, want 2x3");
    l.outputs = {ref(y, {1, 2, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output Y is 1x2x3, want 2x3");
    l.inputs = {ref(a, {2, 3}), ref(b, {4})};
    l.outputs = {ref(y, {2, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "binary: A (2x3) and B (4) do not broadcast: dim 1");
    l.inputs = {ref(a, {5, 2, 3}), ref(b, {4, 1, 1})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "dim 3 from the right is 5 vs 4");
    l.inputs = {ref(a, {2, 3}), ref(b, {3})};
    l.outputs = {ref(y, {2, 3})};
    l.attrs = {{"op", std::string("mod")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "op 'mod' (add, sub, mul, div, pow, max, min, prelu)");
    l.attrs = {};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "binary: attribute 'op' is required");
    l.attrs = {{"op", int64_t{0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'op' must be a string");
    l.attrs = {{"op", std::string("add")}, {"alpha", 0.5}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "binary: unknown attribute 'alpha'");
    l.attrs = {{"op", std::string("prelu")}};
    l.inputs = {ref(a, {3}), ref(b, {2, 3})};
    l.outputs = {ref(y, {2, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "prelu slope B (2x3) does not broadcast to X = A (3)");
    l.attrs = {{"op", std::string("add")}};
    std::vector<f16> h(64);
    l.inputs = {ref(a, {2, 3}), ref(h, {2, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mixed dtypes (A f32, B f16, Y f32)");
    std::vector<uint8_t> ua(8), ub(8), uy(8);
    l.inputs = {ref(ua, {8}), ref(ub, {8})};
    l.outputs = {ref(uy, {8})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "dtype u8");
    std::vector<int32_t> ia(8), ib(8), iy(8);
    l.inputs = {ref(ia, {8}), ref(ib, {8})};
    l.outputs = {ref(iy, {8})};
    l.attrs = {{"op", std::string("pow")}};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "op 'pow' on i32");
    l.inputs = {ref(a, {8})};
    l.outputs = {ref(y, {8})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "binary takes 2 input(s), got 1");
    EXPECT_EQ(y, std::vector<float>(64, 0.0f));  // nothing was written
}

// ---- cost ----------------------------------------------------------------------------------

KernelLaunch cost_launch(DType dt, std::initializer_list<int64_t> a, std::initializer_list<int64_t> b,
                         std::initializer_list<int64_t> y, const char* op = "add") {
    KernelLaunch l;
    l.inputs = {shape_ref(dt, a), shape_ref(dt, b)};
    l.outputs = {shape_ref(dt, y)};
    l.attrs = {{"op", std::string(op)}};
    return l;
}

TEST(BinaryCost, PositiveMonotonicAndScheduleChecked) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16, DType::I32, DType::I64}) {
            SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)));
            double prev = 0;
            for (int64_t n = 1; n <= int64_t{1} << 28; n = n * 3 + 1) {
                CycleBreakdown cb = cost_ok(kernel(), cost_launch(dt, {n}, {n}, {n}), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << n;
                prev = cb.total;
            }
            // Per-channel broadcast reads less than two full inputs.
            CycleBreakdown full = cost_ok(kernel(), cost_launch(dt, {8, 64, 56, 56}, {8, 64, 56, 56}, {8, 64, 56, 56}),
                                          preset);
            CycleBreakdown chan =
                cost_ok(kernel(), cost_launch(dt, {8, 64, 56, 56}, {64, 1, 1}, {8, 64, 56, 56}), preset);
            EXPECT_LT(chan.l2_miss_bytes, full.l2_miss_bytes);
            KernelLaunch l = cost_launch(dt, {100000}, {100000}, {100000});
            l.tiling = VectorSchedule{6, true, 0};  // not whole 32-byte blocks of any dtype
            loom::Status st = cost_error(kernel(), l, preset);
            EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
            EXPECT_NE(st.message().find("binary: schedule: ub_tile = 6"), std::string::npos) << st.to_string();
            l.tiling = VectorSchedule{1 << 24, true, 0};
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("UB"), std::string::npos);
            l.tiling = CubeTiling{};
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("VectorSchedule"), std::string::npos);
        }
    // Transcendental pow costs more Vector time than add.
    const int64_t n = 1 << 22;
    EXPECT_GT(cost_ok(kernel(), cost_launch(DType::F32, {n}, {n}, {n}, "pow"), "dc").vector,
              cost_ok(kernel(), cost_launch(DType::F32, {n}, {n}, {n}, "add"), "dc").vector);
}

// A per-channel operand is constant along each plane (the schedule's axis): lines joined (the
// default, the flat stream) expand it in UB for one more pass; lanes along the plane use it
// as a scalar. In place needs an input of the output's size.
TEST(BinaryCost, BroadcastAxisAndInPlace) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)));
            KernelLaunch l = cost_launch(dt, {1, 16, 60, 80}, {16, 1, 1}, {1, 16, 60, 80}, "prelu");
            VectorSchedule joined;
            joined.ub_tile = 4800;
            l.tiling = joined;
            const CycleBreakdown flat = cost_ok(kernel(), l, preset);
            VectorSchedule along = joined;
            along.vector_axis = VectorAxis::AXIS;  // 60 x 80 = 4800 = 75 repeats of 64 lanes
            along.vector_tile = 4800;
            l.tiling = along;
            const CycleBreakdown lines = cost_ok(kernel(), l, preset);
            const double passes = 2 + (dt == DType::F16 ? 2 : 0);
            EXPECT_DOUBLE_EQ(flat.vector / lines.vector, (passes + 1) / passes);
            EXPECT_DOUBLE_EQ(flat.l2_miss_bytes, lines.l2_miss_bytes);
            along.in_place = true;
            l.tiling = along;
            EXPECT_TRUE(cost_error(kernel(), l, preset).ok());
            KernelLaunch outer = cost_launch(dt, {8, 1}, {1, 5}, {8, 5}, "add");  // neither input is 8 x 5
            joined.ub_tile = 64;
            joined.in_place = true;
            outer.tiling = joined;
            EXPECT_NE(cost_error(kernel(), outer, preset).message().find("binary: schedule: in_place"),
                      std::string::npos);
        }
}

}  // namespace

}  // namespace test_kernel_binary
