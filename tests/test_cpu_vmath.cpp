// Vectorised exp, sigmoid and tanh (device/kernels/cpu/vmath.hpp) on both instruction sets,
// against float64 <cmath> over a dense sweep of float bit patterns (every 97th float of the range
// that matters, every 2813th in the sanitizer build, plus +-1e-30 .. and the extremes), special
// values, and position independence
// (the masked tail gives an element the same bits wherever it sits); the fp16 conversions bit
// for bit against the scalar ones.
// Tolerance: at most 2 ulp of the float64 value (ulps of subnormals counted as 2^-149; sigmoid
// and tanh 3: three roundings after exp, and glibc's tanhf on the generic path), which is also <= 1e-6 relative for normal results; overflow must give +inf, underflow 0, NaN NaN.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <vector>

#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/vmath.hpp"
#include "test_util.hpp"

namespace test_cpu_vmath {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device::cpu;

class Vmath : public ::testing::TestWithParam<Isa> {
protected:
    void SetUp() override { SKIP_UNLESS_ISA(GetParam()); }
};

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Every `stride`-th float of [-hi, hi] (by bit pattern), both signs; a sample of 1 in 29 of them
// in the sanitizer build (test_util.hpp, kSanitized).
std::vector<float> sweep(float hi, uint32_t stride) {
    stride = loom::test::full_or_sampled(stride, stride * 29);
    uint32_t top;
    std::memcpy(&top, &hi, sizeof top);
    std::vector<float> v;
    for (uint32_t u = 0; u <= top; u += stride) v.push_back(from_bits(u)), v.push_back(-from_bits(u));
    v.push_back(hi), v.push_back(-hi);
    return v;
}

// The size of one ulp of a float near |ref| (2^-149 for subnormals).
double ulp_of(double ref) {
    const double a = std::fabs(ref);
    if (a < FLT_MIN) return std::ldexp(1.0, -149);
    int e;
    std::frexp(a, &e);
    return std::ldexp(1.0, e - 24);
}

struct ErrorStats {
    double ulp_max = 0, rel_max = 0;
    int64_t bad = 0;
};

// Compares got[i] with ref(x[i]) in float64; prints and returns the largest errors.
ErrorStats compare(const char* name, const std::vector<float>& x, const std::vector<float>& got,
                   const std::function<double(double)>& ref, double ulp_limit = 2.0) {
    ErrorStats s;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = ref(x[i]);
        const double y = got[i];
        bool ok;
        if (std::fabs(want) >= FLT_MAX) {
            ok = std::fabs(y) >= FLT_MAX && (y > 0) == (want > 0);  // FLT_MAX or inf: within an ulp
        } else {
            const double ulps = std::fabs(y - want) / ulp_of(want);
            s.ulp_max = std::max(s.ulp_max, ulps);
            if (std::fabs(want) >= FLT_MIN) s.rel_max = std::max(s.rel_max, std::fabs(y - want) / std::fabs(want));
            ok = ulps <= ulp_limit;
        }
        if (!ok && ++s.bad <= 5) ADD_FAILURE() << name << "(" << x[i] << ") = " << y << ", want " << want;
    }
    std::cout << name << ": max " << s.ulp_max << " ulp, " << s.rel_max << " relative over " << x.size()
              << " inputs\n";
    return s;
}

TEST_P(Vmath, ExpWithin2UlpOverTheFloatRange) {
    loom::test::IsaGuard guard(GetParam());
    const std::vector<float> x = sweep(110.0f, 97);
    std::vector<float> y(x.size());
    vec_exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
    const ErrorStats s = compare("exp", x, y, [](double v) { return std::exp(v); });
    EXPECT_EQ(s.bad, 0);
    EXPECT_LE(s.rel_max, 1e-6);
}

TEST_P(Vmath, ExpSpecialValues) {
    loom::test::IsaGuard guard(GetParam());
    const float inf = INFINITY;
    const std::vector<float> x = {0.0f, -0.0f, inf, -inf, NAN, 89.0f, 88.73f, 88.72f, -87.3f, -103.0f, -104.0f, -200.0f,
                                  1e30f, -1e30f, FLT_MIN, 1.0f};
    std::vector<float> y(x.size());
    vec_exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], 1.0f);
    EXPECT_EQ(y[2], inf);
    EXPECT_EQ(y[3], 0.0f);
    EXPECT_TRUE(std::isnan(y[4]));
    EXPECT_EQ(y[5], inf);
    EXPECT_EQ(y[6], inf);                                      // e^88.73 > FLT_MAX
    EXPECT_TRUE(std::isfinite(y[7]) && y[7] > 3.3e38f);        // e^88.72 < FLT_MAX
    const double e8 = std::exp(double(x[8]));
    EXPECT_NEAR(y[8], e8, 2 * ulp_of(e8));  // near FLT_MIN
    EXPECT_NEAR(y[9], std::exp(-103.0), std::ldexp(1.0, -149));       // subnormal
    EXPECT_EQ(y[10], 0.0f);
    EXPECT_EQ(y[11], 0.0f);
    EXPECT_EQ(y[12], inf);
    EXPECT_EQ(y[13], 0.0f);
    EXPECT_EQ(y[14], 1.0f);
    EXPECT_NEAR(y[15], std::exp(1.0), 2 * ulp_of(std::exp(1.0)));
}

TEST_P(Vmath, ExpShiftAndSumMatchTheElementwiseValues) {
    loom::test::IsaGuard guard(GetParam());
    std::mt19937 rng(11);
    for (int64_t n : {0, 1, 7, 8, 9, 31, 1000}) {
        const auto x = loom::test::random_floats(rng, static_cast<size_t>(n), -20.0f, 20.0f);
        std::vector<float> y(static_cast<size_t>(n)), z(static_cast<size_t>(n));
        const double sum = vec_exp_sum(x.data(), y.data(), n, 3.5f);
        vec_exp(x.data(), z.data(), n, 3.5f);
        double want = 0;
        for (int64_t i = 0; i < n; ++i) {
            EXPECT_EQ(y[size_t(i)], z[size_t(i)]);
            const double ref = std::exp(double(x[size_t(i)] - 3.5f));
            EXPECT_LE(std::fabs(y[size_t(i)] - ref), 2 * ulp_of(ref)) << "x = " << x[size_t(i)];
            want += y[size_t(i)];
        }
        EXPECT_NEAR(sum, want, 1e-13 * want) << "n = " << n;
    }
}

// The same input gives the same bits at every offset and length (vector body or masked tail).
TEST_P(Vmath, ResultsDoNotDependOnPosition) {
    loom::test::IsaGuard guard(GetParam());
    std::mt19937 rng(5);
    const auto x = loom::test::random_floats(rng, 64, -30.0f, 30.0f);
    std::vector<float> ref_exp(64), ref_sig(64), ref_tanh(64);
    vec_exp(x.data(), ref_exp.data(), 64);
    vec_sigmoid(x.data(), ref_sig.data(), 64);
    vec_tanh(x.data(), ref_tanh.data(), 64);
    for (int64_t off = 0; off < 9; ++off)
        for (int64_t n = 1; n <= 17 && off + n <= 64; ++n) {
            std::vector<float> y(static_cast<size_t>(n));
            vec_exp(x.data() + off, y.data(), n);
            EXPECT_EQ(0, std::memcmp(y.data(), ref_exp.data() + off, size_t(n) * 4)) << off << " " << n;
            vec_sigmoid(x.data() + off, y.data(), n);
            EXPECT_EQ(0, std::memcmp(y.data(), ref_sig.data() + off, size_t(n) * 4)) << off << " " << n;
            vec_tanh(x.data() + off, y.data(), n);
            EXPECT_EQ(0, std::memcmp(y.data(), ref_tanh.data() + off, size_t(n) * 4)) << off << " " << n;
        }
}

TEST_P(Vmath, SigmoidWithin3UlpAndSaturates) {
    loom::test::IsaGuard guard(GetParam());
    std::vector<float> x = sweep(120.0f, 97);
    for (float s : {INFINITY, -INFINITY, 1e30f, -1e30f}) x.push_back(s);
    std::vector<float> y(x.size());
    vec_sigmoid(x.data(), y.data(), static_cast<int64_t>(x.size()));
    // 3 ulp: exp, 1 + e and the division each round.
    const ErrorStats s = compare("sigmoid", x, y, [](double v) { return 1 / (1 + std::exp(-v)); }, 3.0);
    EXPECT_EQ(s.bad, 0);
    EXPECT_LE(s.rel_max, 1e-6);
    const float nan = NAN;
    float ny;
    vec_sigmoid(&nan, &ny, 1);
    EXPECT_TRUE(std::isnan(ny));
}

TEST_P(Vmath, TanhWithin3UlpAndSaturates) {
    loom::test::IsaGuard guard(GetParam());
    std::vector<float> x = sweep(50.0f, 97);
    for (float s : {INFINITY, -INFINITY, 1e30f, -1e30f, 0.625f, -0.625f, 0.62499994f}) x.push_back(s);
    std::vector<float> y(x.size());
    vec_tanh(x.data(), y.data(), static_cast<int64_t>(x.size()));
    // 3 ulp: glibc's tanhf (the generic path) is 2.13 ulp off at worst over this sweep.
    const ErrorStats s = compare("tanh", x, y, [](double v) { return std::tanh(v); }, 3.0);
    EXPECT_EQ(s.bad, 0);
    EXPECT_LE(s.rel_max, 1e-6);
    const float nan = NAN;
    float ny;
    vec_tanh(&nan, &ny, 1);
    EXPECT_TRUE(std::isnan(ny));
}

// fp16 storage: every one of the 65536 halves widens to types.hpp's f16_to_f32 bits (NaNs as
// NaNs of the same sign), and a sweep of floats (every 997th bit pattern of both signs: normal,
// subnormal and overflowing results, ties, infinities and NaNs) narrows to f32_to_f16's bits,
// at every length's tail.
TEST_P(Vmath, Fp16ConversionsMatchTheScalarOnesBitForBit) {
    using loom::device::f16;
    loom::test::IsaGuard guard(GetParam());
    std::vector<f16> h(65536);
    for (uint32_t i = 0; i < 65536; ++i) h[i] = f16{static_cast<uint16_t>(i)};
    std::vector<float> wide(h.size());
    vec_f16_to_f32(h.data(), wide.data(), static_cast<int64_t>(h.size()));
    int64_t bad = 0;
    for (size_t i = 0; i < h.size(); ++i) {
        const float want = loom::device::f16_to_f32(h[i]);
        if (std::isnan(want) ? !std::isnan(wide[i]) || std::signbit(want) != std::signbit(wide[i])
                             : std::memcmp(&want, &wide[i], sizeof want) != 0)
            ++bad;
    }
    EXPECT_EQ(bad, 0) << "halves widened to other bits";
    std::vector<float> x;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += loom::test::full_or_sampled(997u, 28913u))
        x.push_back(from_bits(static_cast<uint32_t>(u)));
    for (float v : {65504.0f, 65519.99f, 65520.0f, 1e-8f, 2.9802322e-8f, 5.9604645e-8f, 6.1035156e-5f, 1.0009766f,
                    1.0004883f, 1.0014648f, INFINITY, -INFINITY, NAN})
        x.push_back(v);
    std::vector<f16> narrow(x.size());
    vec_f32_to_f16(x.data(), narrow.data(), static_cast<int64_t>(x.size()));
    bad = 0;
    for (size_t i = 0; i < x.size(); ++i) bad += narrow[i].bits != loom::device::f32_to_f16(x[i]).bits;
    EXPECT_EQ(bad, 0) << "floats narrowed to other bits";
    for (int64_t n = 1; n <= 17; ++n) {  // every tail: only the n values are written
        std::vector<f16> out(20, f16{0x1234});
        vec_f32_to_f16(x.data() + 1000, out.data(), n);
        std::vector<float> back(20, 7.0f);
        vec_f16_to_f32(out.data(), back.data(), n);
        for (int64_t i = 0; i < 20; ++i) {
            if (i < n) {
                EXPECT_EQ(out[size_t(i)].bits, loom::device::f32_to_f16(x[size_t(1000 + i)]).bits);
            } else {
                EXPECT_EQ(out[size_t(i)].bits, 0x1234);
                EXPECT_EQ(back[size_t(i)], 7.0f);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Vmath, ::testing::ValuesIn(loom::test::kAllIsas),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace

}  // namespace test_cpu_vmath
