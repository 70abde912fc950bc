// gemm (device/kernels/gemm.cpp): ONNX Gemm, Y = act(alpha * A' x B' + beta * C), against a
// float64 reference written here: transA / transB, alpha and beta, every broadcast form of C,
// the fused activations, odd and prime shapes (and shapes of several host GEMM blocks), on both
// instruction sets of the host GEMM.
// Tolerance: f32 |y - ref| <= 2e-5 * (|alpha| sum |a b| + |beta c|) + 1e-7; f16 inputs are exactly
// representable, so f16 output must be the reference rounded to f16 within 1 ulp plus that bound.
// Errors name the tensor or attribute; cost is positive, grows with work, refuses bad tilings.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "test_util.hpp"

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using loom::test::IsaGuard;
using loom::test::expect_within_bound;
using loom::test::ref_activation;
using loom::test::round_to_f16;
using loom::test::shape_ref;

const KernelDef& gemm_kernel() { return loom::test::registered_kernel("gemm"); }

enum class CForm { NONE, SCALAR, ONE, N, ROW, COL, FULL };  // absent, [], [1], [N], [1,N], [M,1], [M,N]

struct Case {
    std::string name;
    int64_t m, n, k;
    bool ta = false, tb = false;
    double alpha = 1, beta = 1;
    CForm c = CForm::NONE;
    std::string act = "none";
};

const std::vector<Case>& cases() {
    static const std::vector<Case> v = {
        {"ones", 1, 1, 1, false, false, 1, 1, CForm::SCALAR},
        {"plain_7x13x17", 7, 13, 17},
        {"trans_a", 31, 3, 29, true, false, 0.5, 1, CForm::N, "relu"},
        {"trans_b_fc_layer", 5, 37, 67, false, true, 1, 1, CForm::ROW},
        {"trans_both", 17, 33, 15, true, true, -1.25, 2, CForm::FULL, "leaky_relu"},
        {"c_column", 13, 11, 7, false, true, 1, -0.5, CForm::COL, "clip"},
        {"c_one_value", 9, 5, 3, true, false, 2, 3, CForm::ONE, "sigmoid"},
        {"beta_zero_ignores_c", 6, 7, 8, false, false, 1, 0, CForm::FULL},
        {"prelu", 11, 19, 23, false, false, 1, 1, CForm::N, "prelu"},
        {"hard_swish", 4, 9, 10, true, true, 1.5, 1, CForm::FULL, "hard_swish"},
        {"blocks_97x300x257", 97, 300, 257, false, true, 0.75, 0.25, CForm::FULL, "relu"},
        {"blocks_trans_a_200x40x300", 200, 40, 300, true, false, 1, 1, CForm::ROW},
    };
    return v;
}

std::vector<int64_t> c_shape(const Case& c) {
    switch (c.c) {
    case CForm::NONE: return {0};
    case CForm::SCALAR: return {};
    case CForm::ONE: return {1};
    case CForm::N: return {c.n};
    case CForm::ROW: return {1, c.n};
    case CForm::COL: return {c.m, 1};
    case CForm::FULL: return {c.m, c.n};
    }
    return {};
}

KernelAttrs attrs_of(const Case& c) {
    KernelAttrs a;
    if (c.ta) a.set("transA", int64_t{1});
    if (c.tb) a.set("transB", int64_t{1});
    if (c.alpha != 1) a.set("alpha", c.alpha);
    if (c.beta != 1) a.set("beta", c.beta);
    if (c.act != "none") a.set("activation", c.act);
    if (c.act == "leaky_relu") a.set("activation_alpha", 0.125);
    if (c.act == "clip") a.set("min", -0.25).set("max", 0.5);
    return a;
}

struct Data {
    std::vector<float> a, b, c, s;
};

Data make_data(const Case& c, uint32_t seed) {
    std::mt19937 rng(seed);
    Data d;
    d.a = loom::test::random_floats(rng, size_t(c.m * c.k));
    d.b = loom::test::random_floats(rng, size_t(c.k * c.n));
    d.c = loom::test::random_floats(rng, size_t(c.m * c.n));
    d.s = loom::test::random_floats(rng, size_t(c.n), 0.05f, 0.5f);
    return d;
}

// The float64 result and the magnitude bound of each output.
void reference(const Case& c, const Data& d, std::vector<double>& out, std::vector<double>& mag) {
    out.assign(size_t(c.m * c.n), 0), mag.assign(out.size(), 0);
    for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
            double sum = 0, m = 0;
            for (int64_t kk = 0; kk < c.k; ++kk) {
                const double av = d.a[size_t(c.ta ? kk * c.m + i : i * c.k + kk)];
                const double bv = d.b[size_t(c.tb ? j * c.k + kk : kk * c.n + j)];
                sum += av * bv, m += std::abs(av * bv);
            }
            sum *= c.alpha, m *= std::abs(c.alpha);
            double cv = 0;
            switch (c.c) {
            case CForm::NONE: break;
            case CForm::SCALAR:
            case CForm::ONE: cv = d.c[0]; break;
            case CForm::N:
            case CForm::ROW: cv = d.c[size_t(j)]; break;
            case CForm::COL: cv = d.c[size_t(i)]; break;
            case CForm::FULL: cv = d.c[size_t(i * c.n + j)]; break;
            }
            sum += c.beta * cv, m += std::abs(c.beta * cv);
            sum = ref_activation(c.act, sum, d.s[size_t(j)]);
            out[size_t(i * c.n + j)] = sum, mag[size_t(i * c.n + j)] = m;
        }
}

template <typename T>
KernelLaunch launch_of(const Case& c, std::vector<T>& a, std::vector<T>& b, std::vector<T>& cv, std::vector<T>& s,
                       std::vector<T>& y) {
    const DType dt = dtype_of<T>();
    KernelLaunch l;
    l.inputs = {shape_ref(dt, c.ta ? std::vector<int64_t>{c.k, c.m} : std::vector<int64_t>{c.m, c.k}, a.data()),
                shape_ref(dt, c.tb ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n}, b.data()),
                shape_ref(dt, c_shape(c), c.c == CForm::NONE ? nullptr : cv.data())};
    if (c.act == "prelu") l.inputs.push_back(shape_ref(dt, {c.n}, s.data()));
    l.outputs = {shape_ref(dt, {c.m, c.n}, y.data())};
    l.attrs = attrs_of(c);
    return l;
}

class GemmF32 : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(GemmF32, MatchesFloat64Reference) {
    auto [want, idx] = GetParam();
    const Case& c = cases()[idx];
    if (want == cpu::Isa::AVX2 && cpu::isa_detected() != cpu::Isa::AVX2) GTEST_SKIP() << "CPU lacks AVX2";
    Data d = make_data(c, static_cast<uint32_t>(idx * 13 + 5));
    std::vector<float> y(size_t(c.m * c.n), std::nanf(""));
    KernelLaunch l = launch_of(c, d.a, d.b, d.c, d.s, y);
    IsaGuard isa_guard(want);
    ThreadPool pool(2);
    loom::Status st = gemm_kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    reference(c, d, ref, mag);
    expect_within_bound(y, ref, mag);
}

INSTANTIATE_TEST_SUITE_P(Onnx, GemmF32,
                         ::testing::Combine(::testing::Values(cpu::Isa::GENERIC, cpu::Isa::AVX2),
                                            ::testing::Range(size_t{0}, cases().size())),
                         [](const auto& info) {
                             return std::string(cpu::isa_name(std::get<0>(info.param))) + "_" +
                                    cases()[std::get<1>(info.param)].name;
                         });

class GemmF16 : public ::testing::TestWithParam<size_t> {};

TEST_P(GemmF16, MatchesFloat64RoundedToF16) {
    const Case& c = cases()[GetParam()];
    Data d = make_data(c, static_cast<uint32_t>(GetParam() * 17 + 9));
    auto ah = round_to_f16(d.a), bh = round_to_f16(d.b), ch = round_to_f16(d.c), sh = round_to_f16(d.s);
    std::vector<f16> y(size_t(c.m * c.n));
    KernelLaunch l = launch_of(c, ah, bh, ch, sh, y);
    ThreadPool pool(2);
    loom::Status st = gemm_kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    reference(c, d, ref, mag);
    expect_within_bound(y, ref, mag);
}

INSTANTIATE_TEST_SUITE_P(Onnx, GemmF16, ::testing::Range(size_t{0}, cases().size()),
                         [](const auto& info) { return cases()[info.param].name; });

// Both operands transposed, alpha, beta and a [1, N] C (the attributes of ONNX's
// gemm_all_attributes case) on small integers: exact in f32.
TEST(GemmOnnx, TransposedOperandsWithIntegerDataAreExact) {
    // A' = [[1, 2], [3, 4], [5, 6]] stored transposed; B' = [[1, 0, 2, 1], [0, 1, 1, 2]] stored
    // transposed; C = [1, 2, 3, 4]; alpha 2, beta -1.
    std::vector<float> a = {1, 3, 5, 2, 4, 6}, b = {1, 0, 0, 1, 2, 1, 1, 2}, c = {1, 2, 3, 4}, y(12);
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {2, 3}, a.data()), shape_ref(DType::F32, {4, 2}, b.data()),
                shape_ref(DType::F32, {1, 4}, c.data())};
    l.outputs = {shape_ref(DType::F32, {3, 4}, y.data())};
    l.attrs = {{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 2.0}, {"beta", -1.0}};
    ThreadPool pool(1);
    ASSERT_TRUE(gemm_kernel().run(l, pool).ok());
    // A'B' = [[1, 2, 4, 5], [3, 4, 10, 11], [5, 6, 16, 17]]
    EXPECT_EQ(y, (std::vector<float>{1, 2, 5, 6, 5, 6, 17, 18, 9, 10, 29, 30}));
}

// ---- errors ----------------------------------------------------------------------------------

void expect_rejected(const KernelLaunch& l, StatusCode code, const std::string& needle) {
    loom::test::expect_rejected(gemm_kernel(), l, code, needle);
}

TEST(GemmErrors, NameTheProblem) {
    std::vector<float> buf(256, 1.0f);
    float* p = buf.data();
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {4, 5}, p), shape_ref(DType::F32, {5, 3}, p), shape_ref(DType::F32, {3}, p)};
    l.outputs = {shape_ref(DType::F32, {4, 3}, p + 128)};
    ThreadPool pool(1);
    ASSERT_TRUE(gemm_kernel().run(l, pool).ok());

    KernelLaunch bad = l;
    bad.attrs = {{"transB", int64_t{1}}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "A' is 4x5 (A 4x5, transA 0) but B' is 3x5 (B 5x3, transB 1)");
    bad = l;
    bad.attrs = {{"transA", int64_t{2}}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "attribute 'transA' is 2 (0 or 1)");
    bad = l;
    bad.outputs = {shape_ref(DType::F32, {3, 4}, p)};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "Y is 3x4 but A' x B' is 4x3");
    bad = l;
    bad.inputs[2] = shape_ref(DType::F32, {4}, p);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "C is 4, does not broadcast to Y 4x3");
    bad = l;
    bad.inputs[2] = shape_ref(DType::F32, {1, 4, 3}, p);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "C is 1x4x3, does not broadcast");
    bad = l;
    bad.inputs[0] = shape_ref(DType::F32, {1, 4, 5}, p);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "A is 1x4x5 (must be 2-D)");
    bad = l;
    bad.inputs[1] = shape_ref(DType::F16, {5, 3}, p);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "mixed dtypes");
    bad = l;
    bad.inputs[2] = shape_ref(DType::F16, {3}, p);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "C is f16, must be f32");
    bad = l;
    bad.attrs = {{"activation_alpha", 0.5}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "'activation_alpha' only applies to activation 'leaky_relu'");
    bad = l;
    bad.attrs = {{"activation", std::string("prelu")}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "slope input S");
    bad = l;
    bad.attrs = {{"activation", std::string("gelu")}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "activation 'gelu'");
    bad = l;
    bad.attrs = {{"broadcast", int64_t{1}}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "unknown attribute 'broadcast'");
    bad = l;
    bad.attrs = {{"alpha", std::string("two")}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "attribute 'alpha'");
    bad = l;
    bad.inputs = {shape_ref(DType::F32, {0, 5}, p), shape_ref(DType::F32, {5, 3}, p)};
    bad.outputs = {shape_ref(DType::F32, {0, 3}, p)};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "empty");
    bad = l;
    bad.inputs.resize(1);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm takes 2 to 4 inputs");
    std::vector<int32_t> ai(20);
    bad = l;
    bad.inputs[0] = shape_ref(DType::I32, {4, 5}, ai.data());
    expect_rejected(bad, StatusCode::UNSUPPORTED, "dtype i32");
}

// ---- cost --------------------------------------------------------------------------------------

KernelLaunch cost_launch(int64_t m, int64_t n, int64_t k, DType dt = DType::F16) {
    KernelLaunch l;
    l.inputs = {shape_ref(dt, {m, k}, nullptr), shape_ref(dt, {k, n}, nullptr)};
    l.outputs = {shape_ref(dt, {m, n}, nullptr)};
    return l;
}

TEST(GemmCost, ScalesWithWorkAndMatchesMatmul) {
    const KernelDef* matmul = find_kernel("matmul");
    ASSERT_NE(matmul, nullptr);
    for (const char* preset : {"edge", "dc"}) {
        const DeviceSpec& s = loom::test::preset_spec(preset);
        for (DType dt : {DType::F16, DType::F32}) {
            auto small = gemm_kernel().cost(cost_launch(128, 96, 200, dt), s);
            auto big = gemm_kernel().cost(cost_launch(1024, 768, 800, dt), s);
            ASSERT_TRUE(small.ok() && big.ok()) << small.status().to_string() << big.status().to_string();
            EXPECT_GT(small->total, 0);
            EXPECT_GT(big->total, 8 * small->total);  // 32x the work
            EXPECT_DOUBLE_EQ(big->flops, 2.0 * 1024 * 768 * 800);
            // Without alpha, beta and C it is the same Cube work as matmul.
            auto mm = matmul->cost(cost_launch(128, 96, 200, dt), s);
            ASSERT_TRUE(mm.ok());
            EXPECT_DOUBLE_EQ(mm->total, small->total);
        }
    }
}

TEST(GemmCost, TransposesAreFreeAndTheEpilogueCosts) {
    const DeviceSpec& s = loom::test::preset_spec("edge");
    KernelLaunch l = cost_launch(256, 192, 320);
    const double plain = gemm_kernel().cost(l, s)->total;
    KernelLaunch t = l;
    t.inputs = {shape_ref(DType::F16, {320, 256}, nullptr), shape_ref(DType::F16, {192, 320}, nullptr)};
    t.attrs = {{"transA", int64_t{1}}, {"transB", int64_t{1}}};
    EXPECT_DOUBLE_EQ(gemm_kernel().cost(t, s)->total, plain);
    KernelLaunch e = l;
    e.inputs.push_back(shape_ref(DType::F16, {256, 192}, nullptr));
    e.attrs = {{"alpha", 0.5}, {"beta", 2.0}, {"activation", std::string("relu")}};
    auto with = gemm_kernel().cost(e, s);
    ASSERT_TRUE(with.ok()) << with.status().to_string();
    EXPECT_GT(with->vector, gemm_kernel().cost(l, s)->vector);
    EXPECT_GE(with->total, plain);
}

TEST(GemmCost, IllegalTilingIsRejected) {
    KernelLaunch l = cost_launch(512, 64, 512);
    CubeTiling t;
    t.m_l1 = t.m_l0 = 256, t.n_l1 = t.n_l0 = 16, t.k_l1 = t.k_l0 = 256;  // L0A overflows
    l.tiling = t;
    auto cb = gemm_kernel().cost(l, loom::test::preset_spec("edge"));
    EXPECT_EQ(cb.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(cb.status().message().find("gemm: tiling: L0A"), std::string::npos) << cb.status().to_string();
    t.m_l0 = 24;
    l.tiling = t;
    EXPECT_NE(gemm_kernel().cost(l, loom::test::preset_spec("edge")).status().message().find("multiples of 16"),
              std::string::npos);
    l.tiling = VectorSchedule{256, true, 0};
    EXPECT_EQ(gemm_kernel().cost(l, loom::test::preset_spec("edge")).status().code(), StatusCode::INVALID_ARGUMENT);
}

}  // namespace
