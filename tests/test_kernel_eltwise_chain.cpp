// eltwise_chain (device/kernels/eltwise_chain.cpp): a postfix program over broadcast inputs.
// Reference: a separate float64 stack evaluator of the same program, run per output element
// with inputs picked by index arithmetic; it also records the largest |value| the program
// holds at any step.
// Tolerance: each fp32 step may round, and a rounding of an intermediate propagates, so f32 is
// held to 1e-6 x (steps) x (1 + largest |intermediate|) absolute; f16 to 1 f16 ulp of the
// float64 result rounded to f16 plus the same bound.
// Data: random non-zero values of both signs (magnitudes 0.25 .. 3), fixed seeds; inputs of
// differing ranks broadcast per channel, innermost and as scalars; odd and large shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_eltwise_chain {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

using Shape = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("eltwise_chain"); }

Shape broadcast(const std::vector<Shape>& shapes) {
    size_t r = 0;
    for (const Shape& s : shapes) r = std::max(r, s.size());
    Shape o(r, 1);
    for (const Shape& s : shapes)
        for (size_t i = 0; i < s.size(); ++i) {
            int64_t& d = o[r - s.size() + i];
            if (s[i] != 1) d = s[i];
        }
    return o;
}

struct Eval {
    double value, largest;
    int steps;
};

// Evaluates `program` in float64 with input values `in`; parameters of leaky_relu, elu, clip
// and hard_sigmoid are the constants before them (rounded to float, as the kernel stores them).
Eval evaluate(const std::string& program, const std::vector<double>& in) {
    std::vector<double> st;
    std::istringstream ss(program);
    std::string t;
    double largest = 0;
    int steps = 0;
    auto pop = [&] {
        double v = st.back();
        st.pop_back();
        return v;
    };
    auto param = [&] { return static_cast<double>(static_cast<float>(pop())); };
    while (ss >> t) {
        ++steps;
        if (t[0] == '$') {
            st.push_back(in[static_cast<size_t>(std::stoi(t.substr(1)))]);
        } else if (t == "add" || t == "sub" || t == "mul" || t == "div" || t == "pow" || t == "max" || t == "min" ||
                   t == "prelu") {
            const double b = pop(), a = pop();
            st.push_back(t == "add"   ? a + b
                         : t == "sub" ? a - b
                         : t == "mul" ? a * b
                         : t == "div" ? a / b
                         : t == "pow" ? std::pow(a, b)
                         : t == "max" ? std::max(a, b)
                         : t == "min" ? std::min(a, b)
                                      : (a < 0 ? a * b : a));
        } else if (t == "clip") {
            const double hi = param(), lo = param(), x = pop();
            st.push_back(std::min(std::max(x, lo), hi));
        } else if (t == "hard_sigmoid") {
            const double beta = param(), alpha = param(), x = pop();
            st.push_back(std::clamp(alpha * x + beta, 0.0, 1.0));
        } else if (t == "leaky_relu" || t == "elu") {
            const double alpha = param(), x = pop();
            st.push_back(x >= 0 ? x : t == "elu" ? alpha * std::expm1(x) : alpha * x);
        } else if (t == "relu" || t == "sigmoid" || t == "tanh" || t == "exp" || t == "log" || t == "sqrt" ||
                   t == "neg" || t == "abs" || t == "hard_swish" || t == "erf" || t == "softplus" || t == "identity") {
            const double x = pop();
            st.push_back(t == "relu"         ? std::max(x, 0.0)
                         : t == "sigmoid"    ? 1 / (1 + std::exp(-x))
                         : t == "tanh"       ? std::tanh(x)
                         : t == "exp"        ? std::exp(x)
                         : t == "log"        ? std::log(x)
                         : t == "sqrt"       ? std::sqrt(x)
                         : t == "neg"        ? -x
                         : t == "abs"        ? std::fabs(x)
                         : t == "hard_swish" ? x * std::clamp(x / 6 + 0.5, 0.0, 1.0)
                         : t == "erf"        ? std::erf(x)
                         : t == "softplus"   ? std::log1p(std::exp(x))
                                             : x);
        } else {
            st.push_back(static_cast<float>(std::stod(t)));
        }
        largest = std::max(largest, std::fabs(st.back()));
    }
    EXPECT_EQ(st.size(), 1u) << program;
    return {st.empty() ? 0 : st.back(), largest, steps};
}

struct Case {
    const char* program;
    std::vector<Shape> inputs;
};

// Programs over every op kind; shapes broadcast per channel, innermost, as scalars, and equal.
// The long rows are shorter in the sanitizer build (kSanitized): the reference evaluates each
// element's program from its text, and any length past a few vectors takes the same code paths.
std::vector<Case> cases() {
    const int64_t row = full_or_sampled<int64_t>(1001, 203), flat = full_or_sampled<int64_t>(1031, 227);
    const std::vector<std::vector<Shape>> shape_sets = {
        {{2, 17, 3, 5}, {17, 1, 1}, {5}, {}},
        {{7, 13}, {7, 1}, {1, 13}, {1}},
        {{}, {}, {}, {}},
        {{1, 1}, {1}, {}, {1, 1, 1}},
        {{3, flat}, {3, flat}, {3, flat}, {3, flat}},
        {{4, 33, row}, {33, 1}, {row}, {4, 1, 1}},
        {{1, 3, 1}, {5, 1, 7}, {1, 1, 1}, {3, 7}},
    };
    const std::vector<std::pair<const char*, int>> programs = {
        {"$0 $1 add relu $2 mul 0.5 max", 3},
        {"$0 sigmoid $0 mul", 1},
        {"$0 0 6 clip $1 sub 0.1 leaky_relu", 2},
        {"$0 abs 0.5 add $1 pow", 2},
        {"$0 $1 div exp log", 2},
        {"2 $0 sub tanh $1 $2 min neg abs sqrt mul", 3},
        {"$0 erf $1 softplus add 1.5 elu $0 hard_swish prelu", 2},
        {"$0", 1},
        {"$0 $1 max $2 min $3 add 0.2 0.5 hard_sigmoid", 4},
        {"$3 $2 $1 $0 sub mul sub -1.25 mul identity", 4},
    };
    std::vector<Case> v;
    for (const auto& [p, n] : programs)
        for (const auto& set : shape_sets) v.push_back({p, std::vector<Shape>(set.begin(), set.begin() + n)});
    return v;
}

std::vector<double> draw(std::mt19937& rng, size_t n) {
    std::uniform_real_distribution<double> mag(0.25, 3.0);
    std::uniform_int_distribution<int> coin(0, 1);
    std::vector<double> v(n);
    for (auto& x : v) x = (coin(rng) ? -1 : 1) * mag(rng);
    return v;
}

template <typename T>
void check(const Case& c, uint32_t seed, ThreadPool& pool) {
    const bool half = std::is_same_v<T, f16>;
    SCOPED_TRACE(std::string(c.program) + " on " + testing::PrintToString(c.inputs) + (half ? " f16" : " f32"));
    std::mt19937 rng(seed);
    std::vector<std::vector<T>> in;
    std::vector<std::vector<double>> ind;
    KernelLaunch l;
    for (const Shape& s : c.inputs) {
        std::vector<T> v;
        std::vector<double> d;
        for (double x : draw(rng, static_cast<size_t>(element_count(s)))) {
            if constexpr (half) {
                v.push_back(f32_to_f16(static_cast<float>(x)));
                d.push_back(ref_decode_f16(v.back().bits));
            } else {
                v.push_back(static_cast<float>(x));
                d.push_back(v.back());
            }
        }
        in.push_back(std::move(v));
        ind.push_back(std::move(d));
    }
    for (size_t i = 0; i < c.inputs.size(); ++i) l.inputs.push_back(ref(in[i], c.inputs[i]));
    const Shape out = broadcast(c.inputs);
    std::vector<T> y(static_cast<size_t>(element_count(out)));
    l.outputs = {ref(y, out)};
    l.attrs = {{"program", std::string(c.program)}};
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    int bad = 0;
    std::vector<double> args(c.inputs.size());
    for (int64_t i = 0; i < element_count(out); ++i) {
        for (size_t k = 0; k < c.inputs.size(); ++k)
            args[k] = ind[k][static_cast<size_t>(broadcast_source_index(out, i, c.inputs[k]))];
        const Eval e = evaluate(c.program, args);
        const double chain = 1e-6 * e.steps * (1 + e.largest);
        double got, want, tol;
        if constexpr (half) {
            got = ref_decode_f16(y[static_cast<size_t>(i)].bits);
            want = ref_round_f16(e.value);
            tol = f16_ulp(want) + chain;
        } else {
            got = y[static_cast<size_t>(i)];
            want = e.value;
            tol = chain;
        }
        if (!(std::fabs(got - want) <= tol) && bad++ < 5)
            ADD_FAILURE() << "element " << i << " gave " << got << ", want " << want << " (tolerance " << tol << ")";
    }
    EXPECT_EQ(bad, 0);
}

TEST(EltwiseChainF32, MatchesFloat64StackEvaluator) {
    ThreadPool pool(3);
    uint32_t seed = 1;
    for (const Case& c : cases()) check<float>(c, seed++, pool);
}

TEST(EltwiseChainF16, WithinOneUlpOfFloat64RoundedToF16) {
    ThreadPool pool(2);
    uint32_t seed = 1000;
    for (const Case& c : cases()) check<f16>(c, seed++, pool);
}

TEST(EltwiseChainShapes, MatchesBinaryAndUnaryKernels) {
    // "$0 $1 mul 0 6 clip" equals binary mul followed by unary clip, bit for bit.
    ThreadPool pool(2);
    std::mt19937 rng(3);
    std::vector<float> a = random_floats(rng, 2 * 19 * 77, -5, 5), b = random_floats(rng, 19, -5, 5);
    std::vector<float> fused(a.size()), step(a.size());
    KernelLaunch l;
    l.inputs = {ref(a, {2, 19, 77}), ref(b, {19, 1})};
    l.outputs = {ref(fused, {2, 19, 77})};
    l.attrs = {{"program", std::string("$0 $1 mul 0 6 clip")}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    l.outputs = {ref(step, {2, 19, 77})};
    l.attrs = {{"op", std::string("mul")}};
    ASSERT_TRUE(find_kernel("binary")->run(l, pool).ok());
    l.inputs = {ref(step, {2, 19, 77})};
    l.attrs = {{"op", std::string("clip")}, {"min", 0.0}, {"max", 6.0}};
    ASSERT_TRUE(find_kernel("unary")->run(l, pool).ok());
    EXPECT_EQ(fused, step);
}

TEST(EltwiseChainShapes, EmptyInPlaceAndThreadCountIndependent) {
    ThreadPool one(1), three(3);
    std::vector<float> e, s = {2.0f};
    KernelLaunch l;
    l.inputs = {ref(e, {0, 3}), ref(s, {})};
    l.outputs = {ref(e, {0, 3})};
    l.attrs = {{"program", std::string("$0 $1 add")}};
    EXPECT_TRUE(kernel().run(l, one).ok());
    EXPECT_TRUE(kernel().cost(l, preset_spec("edge")).ok());
    std::mt19937 rng(5);
    std::vector<float> a = random_floats(rng, 5 * 41 * 1009), b = random_floats(rng, 41), y1(a.size()), y3(a.size());
    l.inputs = {ref(a, {5, 41, 1009}), ref(b, {41, 1})};
    l.attrs = {{"program", std::string("$0 $1 sub tanh $0 mul")}};
    l.outputs = {ref(y1, {5, 41, 1009})};
    ASSERT_TRUE(kernel().run(l, one).ok());
    l.outputs = {ref(y3, {5, 41, 1009})};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(y1, y3);
    l.outputs = {ref(a, {5, 41, 1009})};  // Y over input 0
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(a, y1);
}

TEST(EltwiseChainArgs, ProgramErrorsNameTheTokenAndColumn) {
    std::vector<float> a(6, 1.0f), b(6, 2.0f), y(6, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(a, {2, 3}), ref(b, {3})};
    l.outputs = {ref(y, {2, 3})};
    auto reject = [&](const std::string& program, const std::string& needle) {
        SCOPED_TRACE(program);
        l.attrs = {{"program", program}};
        expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, needle);
    };
    reject("$0 $1 add foo", "eltwise_chain: program token 4 'foo' at column 11: not an input ($i), a number or an op");
    reject("$0  $2 add", "program token 2 '$2' at column 5: the launch has 2 input(s), $0 to $1");
    reject("$x relu", "token 1 '$x' at column 1: an input is $ and its index");
    reject("$ relu", "token 1 '$' at column 1");
    reject("$0 add", "token 2 'add' at column 4: needs 2 operands, the stack holds 1");
    reject("$0 $1 clip", "token 3 'clip' at column 7: takes 2 constant parameter(s)");
    reject("$0 leaky_relu", "token 2 'leaky_relu' at column 4: takes 1 constant parameter(s)");
    reject("0.1 leaky_relu", "token 2 'leaky_relu' at column 5: needs an operand, the stack is empty");
    reject("$0 1.5x mul", "token 2 '1.5x' at column 4");
    reject("$0 $1", "program leaves 2 values on the stack at its end (want 1)");
    reject("   ", "eltwise_chain: program is empty");
    std::string deep;
    for (int i = 0; i < 17; ++i) deep += "$0 ";
    for (int i = 0; i < 16; ++i) deep += "add ";
    reject(deep, "program needs a stack of 17 values (at most 16)");
}

TEST(EltwiseChainArgs, RejectsMalformedLaunches) {
    std::vector<float> a(6, 1.0f), b(6, 2.0f), y(6, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(a, {2, 3}), ref(b, {3})};
    l.outputs = {ref(y, {3, 2})};
    l.attrs = {{"program", std::string("$0 $1 add")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "eltwise_chain: output Y is 3x2, want the inputs' broadcast 2x3");
    l.inputs = {ref(a, {2, 3}), ref(b, {2})};
    l.outputs = {ref(y, {2, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "eltwise_chain: input 0 (2x3) and input 1 (2) do not broadcast: dim 1 from the right is 3 vs 2");
    l.inputs = {ref(a, {2, 3}), ref(b, {3})};
    l.attrs = {};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "eltwise_chain: attribute 'program' is required");
    l.attrs = {{"program", std::string("$0 $1 add")}, {"op", std::string("add")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "eltwise_chain: unknown attribute 'op' (known: program)");
    l.attrs = {{"program", std::string("$0 $1 add")}};
    std::vector<f16> h(6);
    l.inputs = {ref(a, {2, 3}), ref(h, {3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mixed dtypes (input 1 is f16, Y f32)");
    std::vector<int32_t> ia(6), iy(6);
    l.inputs = {ref(ia, {2, 3})};
    l.outputs = {ref(iy, {2, 3})};
    l.attrs = {{"program", std::string("$0 relu")}};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "eltwise_chain: dtype i32");
    l.inputs.clear();
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "eltwise_chain takes 1 to 16 inputs, got 0");
    EXPECT_EQ(y, std::vector<float>(6, 0.0f));
}

TEST(EltwiseChainCost, PositiveMonotonicAndScheduleChecked) {
    auto launch = [](DType dt, int64_t n, const char* program) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {n, 64}), shape_ref(dt, {64})};
        l.outputs = {shape_ref(dt, {n, 64})};
        l.attrs = {{"program", std::string(program)}};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            double prev = 0;
            for (int64_t n = 1; n <= int64_t{1} << 22; n = n * 3 + 1) {
                CycleBreakdown cb = cost_ok(kernel(), launch(dt, n, "$0 $1 add relu"), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << n;
                prev = cb.total;
            }
            const int64_t n = 1 << 16;
            EXPECT_GT(cost_ok(kernel(), launch(dt, n, "$0 $1 add exp $0 mul sigmoid"), preset).vector,
                      cost_ok(kernel(), launch(dt, n, "$0 $1 add"), preset).vector);
            KernelLaunch l = launch(dt, 100, "$0 $1 add");
            l.tiling = VectorSchedule{6, true, 0};
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("eltwise_chain: schedule: ub_tile = 6"),
                      std::string::npos);
        }
}

}  // namespace

}  // namespace test_kernel_eltwise_chain
