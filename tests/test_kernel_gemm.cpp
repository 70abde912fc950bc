// gemm (device/kernels/gemm.cpp): ONNX Gemm, Y = act(alpha * A' x B' + beta * C), against a
// float64 reference written here: transA / transB, alpha and beta, every broadcast form of C,
// the fused activations, odd and prime shapes (and shapes of several host GEMM blocks), on both
// instruction sets of the host GEMM.
// Tolerance: f32 |y - ref| <= 2e-5 * (|alpha| sum |a b| + |beta c|) + 1e-7; f16 inputs are exactly
// representable, so f16 output must be the reference rounded to f16 within 1 ulp plus that bound.
// Errors name the tensor or attribute; cost is positive, grows with work, refuses bad tilings.
// int8 (i8 B, scales BS per output column whatever transB, A quantized in the kernel): against a
// reference that quantizes A as specified (ref_quantize), sums in int64 and dequantizes before
// alpha, beta * C and the activation in float64, bounds over |alpha x_scale BS[j]| sum |q b|; a
// K = 2500 transposed reduction whose partial sums pass 2^24 compared bit for bit; int8 costs
// less than fp16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "test_util.hpp"

namespace test_kernel_gemm {  // this file's names, apart from the rest of its unity batch

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
    SKIP_UNLESS_ISA(want);
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
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
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
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm takes 2 to 5 inputs");
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
    for (std::string_view preset : loom::test::presets()) {
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

// ---- int8 -----------------------------------------------------------------------------------

struct Int8Case {
    Case c;
    bool per_tensor = false;  // BS holds 1 value
    bool f16 = false;         // A, C, S and Y f16 (else f32)
};

const std::vector<Int8Case>& int8_cases() {
    static const std::vector<Int8Case> v = {
        {{"ones", 1, 1, 1, false, false, 1, 1, CForm::SCALAR}, true},
        {{"trans_b_fc_layer", 5, 37, 67, false, true, 1, 1, CForm::ROW}},
        {{"trans_a_alpha", 31, 3, 29, true, false, 0.5, 1, CForm::N, "relu"}, true},
        {{"trans_both_leaky", 17, 33, 15, true, true, -1.25, 2, CForm::FULL, "leaky_relu"}, false, true},
        {{"c_column_clip", 13, 11, 7, false, true, 1, -0.5, CForm::COL, "clip"}, true, true},
        {{"c_one_value_sigmoid", 9, 5, 3, true, false, 2, 3, CForm::ONE, "sigmoid"}, false, true},
        {{"prelu_k1500_in_slices", 9, 20, 1500, false, true, 1, 1, CForm::ROW, "prelu"}},
        {{"hard_swish", 4, 9, 10, true, true, 1.5, 1, CForm::FULL, "hard_swish"}},
        {{"blocks_97x300x257", 97, 300, 257, false, true, 0.75, 0.25, CForm::FULL, "relu"}},
    };
    return v;
}

// The float64 result and the magnitude bound of each output for i8 B `w` (stored as the case
// says), scales `ws` (1 or N values) and A quantized with step `xs`.
void int8_reference(const Case& c, const Data& d, float xs, const std::vector<int8_t>& w, const std::vector<float>& ws,
                    std::vector<double>& out, std::vector<double>& mag) {
    out.assign(size_t(c.m * c.n), 0), mag.assign(out.size(), 0);
    for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
            int64_t acc = 0, abs_acc = 0;
            for (int64_t kk = 0; kk < c.k; ++kk) {
                const int64_t q = loom::test::ref_quantize(d.a[size_t(c.ta ? kk * c.m + i : i * c.k + kk)], xs);
                const int64_t p = q * int64_t(w[size_t(c.tb ? j * c.k + kk : kk * c.n + j)]);
                acc += p, abs_acc += std::abs(p);
            }
            const double factor = c.alpha * double(xs) * ws[ws.size() == 1 ? 0 : size_t(j)];
            double sum = factor * double(acc), m = std::abs(factor) * double(abs_acc);
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

// The launch A, B (i8), C, S, BS with x_scale `xs` (absent optional inputs are empty).
template <typename T>
KernelLaunch int8_launch(const Case& c, std::vector<T>& a, std::vector<int8_t>& w, std::vector<T>& cv,
                         std::vector<T>& s, std::vector<float>& ws, float xs, std::vector<T>& y) {
    const DType dt = dtype_of<T>();
    KernelLaunch l;
    l.inputs = {shape_ref(dt, c.ta ? std::vector<int64_t>{c.k, c.m} : std::vector<int64_t>{c.m, c.k}, a.data()),
                shape_ref(DType::I8, c.tb ? std::vector<int64_t>{c.n, c.k} : std::vector<int64_t>{c.k, c.n}, w.data()),
                shape_ref(dt, c_shape(c), c.c == CForm::NONE ? nullptr : cv.data()),
                c.act == "prelu" ? shape_ref(dt, {c.n}, s.data()) : shape_ref(dt, {0}, nullptr),
                shape_ref(DType::F32, {int64_t(ws.size())}, ws.data())};
    l.outputs = {shape_ref(dt, {c.m, c.n}, y.data())};
    l.attrs = attrs_of(c);
    l.attrs.set("x_scale", double(xs));
    return l;
}

class GemmInt8 : public ::testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(GemmInt8, MatchesTheQuantizedReference) {
    auto [want, idx] = GetParam();
    const Int8Case& ic = int8_cases()[idx];
    const Case& c = ic.c;
    SKIP_UNLESS_ISA(want);
    IsaGuard isa_guard(want);
    const uint32_t seed = static_cast<uint32_t>(idx * 19 + 3);
    Data d = make_data(c, seed);
    for (float& v : d.a) v *= 1.5f;  // |a| / x_scale up to 150: some values clamp to +-127
    std::vector<int8_t> w = loom::test::random_int8(d.b.size(), seed + 1);
    std::mt19937 rng(seed + 2);
    std::vector<float> ws = ic.per_tensor ? std::vector<float>{0.004f}
                                          : loom::test::random_floats(rng, size_t(c.n), 0.001f, 0.01f);
    const float xs = 0.01f;
    ThreadPool pool(2);
    std::vector<double> ref, mag;
    if (ic.f16) {
        auto ah = round_to_f16(d.a), ch = round_to_f16(d.c), sh = round_to_f16(d.s);
        std::vector<f16> y(size_t(c.m * c.n));
        loom::Status st = gemm_kernel().run(int8_launch(c, ah, w, ch, sh, ws, xs, y), pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        int8_reference(c, d, xs, w, ws, ref, mag);
        expect_within_bound(y, ref, mag);
    } else {
        std::vector<float> y(size_t(c.m * c.n), std::nanf(""));
        loom::Status st = gemm_kernel().run(int8_launch(c, d.a, w, d.c, d.s, ws, xs, y), pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        int8_reference(c, d, xs, w, ws, ref, mag);
        expect_within_bound(y, ref, mag);
    }
}

INSTANTIATE_TEST_SUITE_P(Onnx, GemmInt8,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Range(size_t{0}, int8_cases().size())),
                         [](const auto& info) {
                             return std::string(cpu::isa_name(std::get<0>(info.param))) + "_" +
                                    int8_cases()[std::get<1>(info.param)].c.name;
                         });

// K = 2500 with B transposed ([N, K]): products of about +15000 for 1200 steps (partial sums past
// 2^24), 50 small ones, 1200 that cancel the first, 50 small ones. x_scale 1/4, BS 1/8 and
// alpha 2: Y = the int32 sum / 16, exact, compared bit for bit.
TEST(GemmInt8, TransposedSumsOver2500AreExactInt32) {
    const int64_t m = 4, n = 6, k = 2500;
    std::mt19937 rng(2500);
    auto small = [&](int32_t r) { const int32_t v = int32_t(rng() % uint32_t(2 * r + 1)) - r; return v == 0 ? 1 : v; };
    std::vector<float> a(size_t(m * k)), y(size_t(m * n), std::nanf("")), bs = {0.125f};
    std::vector<int8_t> b(size_t(n * k));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t kk = 0; kk < k; ++kk) {
            int32_t q = small(9);
            if (kk < 1200) q = 120 + int32_t(rng() % 8);
            if (kk >= 1250 && kk < 2450) q = int32_t(a[size_t(i * k + kk - 1250)] * 4);
            a[size_t(i * k + kk)] = float(q) / 4;
        }
    for (int64_t j = 0; j < n; ++j)
        for (int64_t kk = 0; kk < k; ++kk)
            b[size_t(j * k + kk)] = int8_t(kk < 1200 ? 127 : kk >= 1250 && kk < 2450 ? -127 : small(100));
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {m, k}, a.data()), shape_ref(DType::I8, {n, k}, b.data()),
                shape_ref(DType::F32, {0}, nullptr), shape_ref(DType::F32, {0}, nullptr),
                shape_ref(DType::F32, {1}, bs.data())};
    l.outputs = {shape_ref(DType::F32, {m, n}, y.data())};
    l.attrs = {{"transB", int64_t{1}}, {"alpha", 2.0}, {"x_scale", 0.25}};
    for (cpu::Isa isa : loom::test::supported_isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        IsaGuard guard(isa);
        ThreadPool pool(2);
        ASSERT_TRUE(gemm_kernel().run(l, pool).ok());
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                int64_t acc = 0, partial_max = 0;
                for (int64_t kk = 0; kk < k; ++kk) {
                    acc += int64_t(a[size_t(i * k + kk)] * 4) * b[size_t(j * k + kk)];
                    partial_max = std::max(partial_max, std::abs(acc));
                }
                ASSERT_GT(partial_max, int64_t{1} << 24);
                EXPECT_EQ(double(y[size_t(i * n + j)]), double(acc) / 16) << "row " << i << " column " << j;
            }
    }
}

TEST(GemmInt8Errors, NameTheTensorOrAttribute) {
    std::vector<float> a(20, 1.0f), y(12), bs(3, 0.5f), bf(15, 1.0f);
    std::vector<int8_t> b(15, 2);
    const TensorRef empty = shape_ref(DType::F32, {0}, nullptr);
    KernelLaunch l;
    // transB: B is [N, K] = [3, 5]; BS still holds one value per output column.
    l.inputs = {shape_ref(DType::F32, {4, 5}, a.data()), shape_ref(DType::I8, {3, 5}, b.data()), empty, empty,
                shape_ref(DType::F32, {3}, bs.data())};
    l.outputs = {shape_ref(DType::F32, {4, 3}, y.data())};
    l.attrs = {{"transB", int64_t{1}}, {"x_scale", 0.1}};
    ThreadPool pool(1);
    ASSERT_TRUE(gemm_kernel().run(l, pool).ok());
    KernelLaunch bad = l;
    bad.inputs[4] = shape_ref(DType::F32, {5}, bs.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm: BS is 5 f32, must hold 1 or N = 3 f32 values");
    bad = l;
    bad.inputs.resize(4);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm: B is i8 and needs its per-channel scales BS (input 4)");
    bad = l;
    bad.attrs = {{"transB", int64_t{1}}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm: B is i8 and needs attribute 'x_scale'");
    bad = l;
    bad.attrs.set("x_scale", 0.0);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm: attribute 'x_scale' is 0");
    bad = l;
    bad.inputs[1] = shape_ref(DType::F32, {3, 5}, bf.data());
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm: BS (input 4) is given but B is f32");
    bad.inputs.resize(2);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm: attribute 'x_scale' applies to i8 weights only");
    bad = l;
    bad.inputs[0] = shape_ref(DType::I8, {4, 5}, b.data());
    expect_rejected(bad, StatusCode::UNSUPPORTED, "gemm: dtype i8");
    bad = l;
    bad.inputs.push_back(empty);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "gemm takes 2 to 5 inputs, got 6");
}

TEST(GemmInt8Cost, CheaperThanFp16WithTheCubeAtTwiceTheRate) {
    for (std::string_view preset : loom::test::presets()) {
        const DeviceSpec& s = loom::test::preset_spec(preset);
        KernelLaunch h = cost_launch(1024, 768, 1024);
        KernelLaunch q = h;
        q.inputs[1].dtype = DType::I8;
        q.inputs.insert(q.inputs.end(), {shape_ref(DType::F16, {0}, nullptr), shape_ref(DType::F16, {0}, nullptr),
                                         shape_ref(DType::F32, {768}, nullptr)});
        q.attrs = {{"x_scale", 0.5}};
        auto hc = gemm_kernel().cost(h, s), qc = gemm_kernel().cost(q, s);
        ASSERT_TRUE(hc.ok() && qc.ok()) << qc.status().to_string();
        EXPECT_DOUBLE_EQ(qc->cube, 0.5 * hc->cube) << preset;
        EXPECT_LT(qc->total, hc->total) << preset;
        // Transposes stay free for int8.
        KernelLaunch t = q;
        t.inputs[1] = shape_ref(DType::I8, {768, 1024}, nullptr);
        t.attrs.set("transB", int64_t{1});
        EXPECT_DOUBLE_EQ(gemm_kernel().cost(t, s)->total, qc->total) << preset;
    }
}

}  // namespace

}  // namespace test_kernel_gemm
