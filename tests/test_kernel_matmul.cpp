// matmul (device/kernels/matmul.cpp): C = act(A x B + bias), ONNX MatMul batching.
// Functional: f32 against a float64 reference, tolerance 1e-5 relative to max |A x B + bias|
// (fp32 accumulation over K <= 257 terms stays near 1e-7); f16 storage against a float64
// reference on the f16-rounded inputs, tolerance one f16 rounding of the output (2^-11
// relative) plus the fp32 accumulation error. Fixed seeds; odd and prime shapes.
// Cost: legality checks of CubeTiling and monotonic properties of the cycle breakdown on the
// "edge" and "dc" presets.
// int8 (i8 B, per-column scales BS, A quantized in the kernel): against a reference that
// quantizes A as specified (ref_quantize) and sums in int64, then dequantizes and adds the
// epilogue in float64, bounds as for the batch tests over |x_scale BS[j]| sum |q b|; the
// quantizer's ties, clamps, infinities and NaN one by one; a K = 4099 reduction whose partial
// sums pass 2^24 compared bit for bit; int8 runs the Cube at twice the fp16 rate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/runtime.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_matmul {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

std::vector<f16> to_f16(const std::vector<float>& v) {
    std::vector<f16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
    return h;
}

std::vector<float> from_f16(const std::vector<f16>& h) {
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = f16_to_f32(h[i]);
    return v;
}

struct Shape {
    int64_t m, n, k;
};

// M x N x K written as in the test names: "7x13x17" is M=7, N=13, K=17.
const Shape kShapes[] = {{1, 1, 1}, {7, 13, 17}, {31, 3, 29}, {17, 33, 15}, {48, 20, 257}, {128, 96, 200}};

struct Case {
    Shape s;
    bool bias;
    bool relu;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
    const Case& c = info.param;
    return std::to_string(c.s.m) + "x" + std::to_string(c.s.n) + "x" + std::to_string(c.s.k) +
           (c.bias ? "_bias" : "") + (c.relu ? "_relu" : "");
}

std::vector<Case> all_cases() {
    std::vector<Case> v;
    for (const Shape& s : kShapes)
        for (bool bias : {false, true})
            for (bool relu : {false, true}) v.push_back({s, bias, relu});
    return v;
}

// Returns case `c`'s launch over host tensors: act(A[m,k] x B[k,n] (+ bias[n])) into out[m,n].
template <typename T>
KernelLaunch case_launch(const Case& c, std::vector<T>& a, std::vector<T>& b, std::vector<T>& bias,
                         std::vector<T>& out) {
    const auto [m, n, k] = c.s;
    KernelLaunch l;
    l.inputs = {ref(a, {m, k}), ref(b, {k, n})};
    if (c.bias) l.inputs.push_back(ref(bias, {n}));
    l.outputs = {ref(out, {m, n})};
    if (c.relu) l.attrs = {{"activation", std::string("relu")}};
    return l;
}

class MatmulF32 : public testing::TestWithParam<Case> {};
class MatmulF16 : public testing::TestWithParam<Case> {};

TEST_P(MatmulF32, MatchesFloat64ReferenceWithin1e5) {
    const Case c = GetParam();
    const auto [m, n, k] = c.s;
    std::mt19937 rng(static_cast<uint32_t>(1000 + m * 31 + n * 7 + k));
    auto a = random_floats(rng, m * k, -1, 1), b = random_floats(rng, k * n, -1, 1),
         bias = random_floats(rng, n, -0.5f, 0.5f);
    std::vector<float> out(static_cast<size_t>(m * n), -123.0f);
    ThreadPool pool(2);
    ASSERT_TRUE(matmul_kernel().run(case_launch(c, a, b, bias, out), pool).ok());

    auto want = matmul_reference(a, b, c.bias ? &bias : nullptr, m, n, k);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0);
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        double w = c.relu ? std::max(want[i], 0.0) : want[i];
        err = std::max(err, std::abs(out[i] - w));
        if (c.relu) {
            ASSERT_GE(out[i], 0.0f) << "element " << i;
        }
    }
    EXPECT_LE(err / scale, 1e-5);
}

TEST_P(MatmulF16, MatchesFloat64ReferenceWithinOneOutputRounding) {
    const Case c = GetParam();
    const auto [m, n, k] = c.s;
    std::mt19937 rng(static_cast<uint32_t>(2000 + m * 31 + n * 7 + k));
    auto a16 = to_f16(random_floats(rng, m * k, -1, 1)), b16 = to_f16(random_floats(rng, k * n, -1, 1)),
         bias16 = to_f16(random_floats(rng, n, -0.5f, 0.5f));
    std::vector<f16> out(static_cast<size_t>(m * n), f32_to_f16(-123.0f));
    ThreadPool pool(2);
    ASSERT_TRUE(matmul_kernel().run(case_launch(c, a16, b16, bias16, out), pool).ok());

    // The reference sees exactly the values the device stores.
    const auto a = from_f16(a16), b = from_f16(b16), bias = from_f16(bias16), got = from_f16(out);
    auto want = matmul_reference(a, b, c.bias ? &bias : nullptr, m, n, k);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0);
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        double w = c.relu ? std::max(want[i], 0.0) : want[i];
        double e = std::abs(got[i] - w);
        // One f16 rounding of the result (half an ulp, 2^-11 relative, 2^-25 absolute in the
        // subnormals) on top of the fp32 accumulation error.
        ASSERT_LE(e, std::ldexp(std::abs(w), -11) + std::ldexp(1.0, -25) + 1e-5 * scale)
            << "element " << i << " got " << got[i] << " want " << w;
        err = std::max(err, e);
    }
    EXPECT_LE(err / scale, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulF32, testing::ValuesIn(all_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Shapes, MatmulF16, testing::ValuesIn(all_cases()), case_name);

// Rows are split over the pool; each row is computed the same way whatever the split.
TEST(MatmulThreads, OneAndThreeThreadsGiveBitIdenticalResults) {
    const int64_t m = 193, n = 300, k = 257;  // grain 54 rows: several chunks
    std::mt19937 rng(77);
    auto a = random_floats(rng, m * k, -1, 1), b = random_floats(rng, k * n, -1, 1),
         bias = random_floats(rng, n, -1, 1);
    auto a16 = to_f16(a), b16 = to_f16(b), bias16 = to_f16(bias);
    ThreadPool one(1), three(3);
    {
        std::vector<float> c1(static_cast<size_t>(m * n)), c3(c1.size());
        KernelLaunch l;
        l.inputs = {ref(a, {m, k}), ref(b, {k, n}), ref(bias, {n})};
        l.attrs = {{"activation", std::string("relu")}};
        l.outputs = {ref(c1, {m, n})};
        ASSERT_TRUE(matmul_kernel().run(l, one).ok());
        l.outputs = {ref(c3, {m, n})};
        ASSERT_TRUE(matmul_kernel().run(l, three).ok());
        EXPECT_EQ(std::memcmp(c1.data(), c3.data(), c1.size() * sizeof(float)), 0);
    }
    {
        std::vector<f16> c1(static_cast<size_t>(m * n)), c3(c1.size());
        KernelLaunch l;
        l.inputs = {ref(a16, {m, k}), ref(b16, {k, n}), ref(bias16, {n})};
        l.outputs = {ref(c1, {m, n})};
        ASSERT_TRUE(matmul_kernel().run(l, one).ok());
        l.outputs = {ref(c3, {m, n})};
        ASSERT_TRUE(matmul_kernel().run(l, three).ok());
        EXPECT_EQ(std::memcmp(c1.data(), c3.data(), c1.size() * sizeof(f16)), 0);
    }
}

// Bad launches: run and cost reject them alike, with a message naming the problem.
void expect_rejected(const KernelLaunch& l, StatusCode code, const std::string& needle) {
    loom::test::expect_rejected(matmul_kernel(), l, code, needle);
}

TEST(MatmulArgs, RejectsMalformedLaunches) {
    std::vector<float> a(4 * 5, 1.0f), b(6 * 3, 1.0f), c(4 * 3, 0.0f), bias(4, 1.0f), b53(5 * 3, 1.0f);
    KernelLaunch l;
    {
        SCOPED_TRACE("K of A and B differ");
        l.inputs = {ref(a, {4, 5}), ref(b, {6, 3})};
        l.outputs = {ref(c, {4, 3})};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "do not agree");
    }
    {
        SCOPED_TRACE("C has the wrong shape");
        l.inputs = {ref(a, {4, 5}), ref(b53, {5, 3})};
        l.outputs = {ref(c, {3, 4})};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "do not agree");
    }
    {
        // A 3-D A is a batch of 2 (ONNX MatMul), so C must be 2x2x3.
        SCOPED_TRACE("rank 3 A with a 2-D C");
        l.inputs = {ref(a, {2, 2, 5}), ref(b53, {5, 3})};
        l.outputs = {ref(c, {4, 3})};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "C must be 2x2x3");
    }
    {
        SCOPED_TRACE("bias of length N + 1");
        l.inputs = {ref(a, {4, 5}), ref(b53, {5, 3}), ref(bias, {4})};
        l.outputs = {ref(c, {4, 3})};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "bias");
    }
    {
        SCOPED_TRACE("bad activation");
        l.inputs = {ref(a, {4, 5}), ref(b53, {5, 3})};
        l.outputs = {ref(c, {4, 3})};
        l.attrs = {{"activation", std::string("gelu")}};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "activation 'gelu'");
        l.attrs = {{"activation", int64_t{1}}};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "attribute 'activation' must be a string");
        l.attrs = {{"act", std::string("relu")}};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'act'");
        l.attrs = {};
    }
    {
        SCOPED_TRACE("empty M");
        l.inputs = {shape_ref(DType::F32, {0, 5}, a.data()), ref(b53, {5, 3})};
        l.outputs = {shape_ref(DType::F32, {0, 3}, c.data())};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "empty");
    }
    {
        SCOPED_TRACE("i8");
        std::vector<int8_t> ai(20, 1), bi(15, 1), ci(12, 0);
        l.inputs = {ref(ai, {4, 5}), ref(bi, {5, 3})};
        l.outputs = {ref(ci, {4, 3})};
        expect_rejected(l, StatusCode::UNSUPPORTED, "i8");
    }
    {
        SCOPED_TRACE("mixed f32 and f16");
        std::vector<f16> bh(15, f32_to_f16(1.0f));
        l.inputs = {ref(a, {4, 5}), ref(bh, {5, 3})};
        l.outputs = {ref(c, {4, 3})};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "mixed");
    }
    {
        SCOPED_TRACE("one input");
        l.inputs = {ref(a, {4, 5})};
        l.outputs = {ref(c, {4, 3})};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "matmul takes");
    }
    EXPECT_EQ(c, std::vector<float>(12, 0.0f));  // nothing was written
}

// ---- cost ----------------------------------------------------------------------------------

KernelLaunch cost_launch(DType dt, int64_t m, int64_t n, int64_t k, bool bias = false) {
    KernelLaunch l;
    l.inputs = {shape_ref(dt, {m, k}), shape_ref(dt, {k, n})};
    if (bias) l.inputs.push_back(shape_ref(dt, {n}));
    l.outputs = {shape_ref(dt, {m, n})};
    return l;
}

CubeTiling tiling(int64_t m_l1, int64_t n_l1, int64_t k_l1, int64_t m_l0, int64_t n_l0, int64_t k_l0) {
    CubeTiling t;
    t.m_l1 = m_l1, t.n_l1 = n_l1, t.k_l1 = k_l1, t.m_l0 = m_l0, t.n_l0 = n_l0, t.k_l0 = k_l0;
    return t;
}

CycleBreakdown cost_ok(const KernelLaunch& l, std::string_view preset) {
    return loom::test::cost_ok(matmul_kernel(), l, preset);
}

loom::Status cost_error(const KernelLaunch& l, std::string_view preset) {
    return loom::test::cost_error(matmul_kernel(), l, preset);
}

// Checks that cost on `preset` rejects `l` as INVALID_ARGUMENT with a message containing `needle`.
void expect_cost_rejects(const KernelLaunch& l, std::string_view preset, const std::string& needle) {
    loom::Status st = cost_error(l, preset);
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
}

const Shape kCostShapes[] = {{1, 1, 1},       {7, 13, 17},     {31, 3, 29},       {16, 16, 16},   {17, 33, 15},
                             {100, 1, 1000},  {1, 1000, 100},  {128, 96, 200},    {256, 256, 64}, {333, 777, 555},
                             {1024, 1024, 1024}, {4096, 16, 16}, {16, 4096, 4096}, {8192, 8192, 8192}, {100000, 7, 3}};

// Sanity of one breakdown: the counts agree, and the total covers every unit's own busy time
// except MTE-in (MTE1 and MTE2 are separate engines that run concurrently).
void expect_consistent(const CycleBreakdown& cb, const DeviceSpec& s, const Shape& sh) {
    EXPECT_GE(cb.cores_used, 1);
    EXPECT_LE(cb.cores_used, s.aicore_count);
    EXPECT_LE(cb.cores_used, cb.blocks);
    EXPECT_EQ(cb.rounds, (cb.blocks + cb.cores_used - 1) / cb.cores_used);
    EXPECT_GT(cb.total, 0);
    EXPECT_GE(cb.total, cb.cube);
    EXPECT_GE(cb.total, cb.vector);
    EXPECT_GE(cb.total, cb.mte_out);
    EXPECT_GE(cb.total, cb.scalar);
    EXPECT_GT(cb.cube, 0);
    EXPECT_GT(cb.mte_in, 0);
    EXPECT_GE(cb.l2_hit_bytes, 0);
    EXPECT_DOUBLE_EQ(cb.flops, 2.0 * double(sh.m) * double(sh.n) * double(sh.k));
}

TEST(MatmulCost, DefaultTilingIsLegalForManyShapesOnBothPresets) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F16, DType::F32})
            for (const Shape& sh : kCostShapes)
                for (bool bias : {false, true}) {
                    SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)) + " " + std::to_string(sh.m) +
                                 "x" + std::to_string(sh.n) + "x" + std::to_string(sh.k));
                    CycleBreakdown cb = cost_ok(cost_launch(dt, sh.m, sh.n, sh.k, bias), preset);
                    expect_consistent(cb, preset_spec(preset), sh);
                    // Every byte of A and B comes from memory at least once.
                    double in = static_cast<double>(dtype_size(dt));
                    EXPECT_GE(cb.l2_miss_bytes, in * double(sh.m * sh.k + sh.k * sh.n) * (1 - 1e-12));
                }
}

TEST(MatmulCost, GrowsWithK) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F16, DType::F32}) {
            double prev = 0;
            for (int64_t k : {1, 16, 17, 32, 63, 64, 65, 128, 255, 256, 257, 512, 1000, 4096, 16384}) {
                double total = cost_ok(cost_launch(dt, 256, 192, k), preset).total;
                EXPECT_GE(total, prev) << preset << " " << dtype_name(dt) << " K=" << k;
                prev = total;
            }
            for (int64_t k : {64, 256, 1024, 4096})
                EXPECT_GT(cost_ok(cost_launch(dt, 256, 192, 2 * k), preset).total,
                          cost_ok(cost_launch(dt, 256, 192, k), preset).total)
                    << preset << " K=" << k << " doubled";
        }
}

TEST(MatmulCost, F32RunsTheCubeAtHalfRate) {
    for (std::string_view preset : loom::test::presets())
        for (const Shape& sh : {Shape{128, 96, 200}, Shape{1024, 1024, 1024}, Shape{7, 13, 17}}) {
            CycleBreakdown h = cost_ok(cost_launch(DType::F16, sh.m, sh.n, sh.k), preset);
            CycleBreakdown f = cost_ok(cost_launch(DType::F32, sh.m, sh.n, sh.k), preset);
            EXPECT_DOUBLE_EQ(f.cube, 2 * h.cube) << preset;
            EXPECT_GT(f.total, h.total) << preset;
        }
}

TEST(MatmulCost, TilingThatOverflowsL0AIsRejectedNotClamped) {
    KernelLaunch l = cost_launch(DType::F16, 512, 64, 512);
    l.tiling = tiling(256, 16, 256, 256, 16, 256);  // L0A: 2 x 256 x 256 x 2 B = 256 KiB > 64 KiB
    for (std::string_view preset : loom::test::presets()) expect_cost_rejects(l, preset, "L0A");
    // Exactly full is legal; one fractal more is not.
    l.tiling = tiling(128, 16, 128, 128, 16, 128);  // 2 x 128 x 128 x 2 B = 64 KiB
    EXPECT_TRUE(cost_error(l, "edge").ok()) << cost_error(l, "edge").to_string();
    l.tiling = tiling(144, 16, 128, 144, 16, 128);
    EXPECT_NE(cost_error(l, "edge").message().find("L0A"), std::string::npos);
    // Single-buffered, the same tile fits.
    auto t = tiling(144, 16, 128, 144, 16, 128);
    t.double_buffer = false;
    l.tiling = t;
    EXPECT_TRUE(cost_error(l, "edge").ok()) << cost_error(l, "edge").to_string();
    // L0B and L1 are named the same way.
    l.tiling = tiling(16, 256, 256, 16, 256, 256);
    EXPECT_NE(cost_error(l, "dc").message().find("L0B"), std::string::npos) << cost_error(l, "dc").to_string();
    l = cost_launch(DType::F32, 4096, 4096, 4096);
    l.tiling = tiling(1024, 1024, 256, 64, 64, 32);
    EXPECT_NE(cost_error(l, "dc").message().find("L1 needs"), std::string::npos) << cost_error(l, "dc").to_string();
}

TEST(MatmulCost, RejectsL0SizesThatAreNotFractalMultiples) {
    KernelLaunch l = cost_launch(DType::F16, 100, 100, 100);
    for (auto t : {tiling(24, 16, 16, 24, 16, 16), tiling(16, 24, 16, 16, 24, 16), tiling(16, 16, 8, 16, 16, 8),
                   tiling(16, 16, 16, 0, 16, 16), tiling(-16, 16, 16, -16, 16, 16)}) {
        l.tiling = t;
        expect_cost_rejects(l, "edge", "multiples of 16");
    }
}

TEST(MatmulCost, RejectsL1SizesThatAreNotMultiplesOfL0) {
    KernelLaunch l = cost_launch(DType::F16, 100, 100, 100);
    for (auto t : {tiling(48, 32, 32, 32, 32, 32), tiling(32, 48, 32, 32, 32, 32), tiling(32, 32, 48, 32, 32, 32),
                   tiling(0, 32, 32, 32, 32, 32)}) {
        l.tiling = t;
        expect_cost_rejects(l, "dc", "L1 sizes");
    }
}

TEST(MatmulCost, RejectsMoreCoresThanTheDeviceHas) {
    KernelLaunch l = cost_launch(DType::F16, 100, 100, 100);
    for (std::string_view preset : loom::test::presets()) {
        for (int64_t cores : {preset_spec(preset).aicore_count + 1, int64_t{-1}}) {
            auto t = tiling(32, 32, 32, 32, 32, 32);
            t.cores = cores;
            l.tiling = t;
            expect_cost_rejects(l, preset, "cores");
        }
        auto t = tiling(32, 32, 32, 32, 32, 32);
        t.cores = preset_spec(preset).aicore_count;
        l.tiling = t;
        EXPECT_TRUE(cost_error(l, preset).ok());
    }
}

TEST(MatmulCost, RejectsAVectorSchedule) {
    KernelLaunch l = cost_launch(DType::F16, 64, 64, 64);
    l.tiling = VectorSchedule{256, true, 0};
    loom::Status st = cost_error(l, "edge");
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("CubeTiling"), std::string::npos) << st.to_string();
}

// Double buffering only adds overlap: switching it off can never make a launch cheaper.
TEST(MatmulCost, DoubleBufferingOffNeverMakesTotalSmaller) {
    std::vector<std::string> worse;
    auto check = [&](std::string_view preset, DType dt, const Shape& sh, CubeTiling t, const std::string& what) {
        KernelLaunch l = cost_launch(dt, sh.m, sh.n, sh.k);
        t.double_buffer = true;
        l.tiling = t;
        auto on = matmul_kernel().cost(l, preset_spec(preset));
        t.double_buffer = false;
        l.tiling = t;
        auto off = matmul_kernel().cost(l, preset_spec(preset));
        if (!on.ok() || !off.ok()) return;  // tiles that only fit single-buffered
        if (off->total < on->total)
            worse.push_back(fmt::format("{} {} {}x{}x{} {}: on {:.1f} > off {:.1f}", preset, dtype_name(dt), sh.m,
                                        sh.n, sh.k, what, on->total, off->total));
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F16, DType::F32})
            for (const Shape& sh : kCostShapes) {
                // Small (MTE1-bound) to large (Cube-bound) L0 tiles; one to several L0 tiles per stage.
                for (auto t : {tiling(16, 16, 16, 16, 16, 16), tiling(32, 32, 64, 32, 32, 32),
                               tiling(64, 64, 256, 64, 64, 64), tiling(128, 128, 256, 128, 128, 64),
                               tiling(128, 128, 64, 64, 64, 64)})
                    check(preset, dt, sh, t,
                          fmt::format("L1 {}x{}x{} L0 {}x{}x{}", t.m_l1, t.n_l1, t.k_l1, t.m_l0, t.n_l0, t.k_l0));
            }
    EXPECT_TRUE(worse.empty()) << worse.size() << " launches cost more with double buffering, first: "
                               << (worse.empty() ? "" : worse.front()) << (worse.size() > 1 ? "\nlast: " + worse.back() : "");
}

// Without double buffering nothing overlaps: the total is the sum of the units' cycles.
TEST(MatmulCost, SingleBufferedTotalIsTheSumOfTheUnits) {
    for (std::string_view preset : loom::test::presets())
        for (const Shape& sh : {Shape{128, 96, 200}, Shape{1024, 1024, 1024}, Shape{7, 13, 17}}) {
            KernelLaunch l = cost_launch(DType::F16, sh.m, sh.n, sh.k, true);
            auto t = tiling(64, 64, 128, 64, 64, 64);
            t.double_buffer = false;
            l.tiling = t;
            CycleBreakdown cb = cost_ok(l, preset);
            EXPECT_NEAR(cb.total, cb.mte_in + cb.mte_out + cb.cube + cb.vector + cb.scalar, 1e-9 * cb.total)
                << preset;
        }
}

// Double buffering (docs/device-model.md 4.6, 4.8), on dc with one core so that every MTE2 byte
// moves at the 128 B/cycle port (the core's memory share is 1200). f16, L0 128x128x64: an L0
// tile loads in (128*64 + 64*128) * 2 / 512 = 64 cycles and runs 8*8*4 = 256 fractals; the
// epilogue of a 256x128 block is L0C -> UB 512 + the f16 cast 512 + UB -> GM 512 = 1536.
TEST(MatmulCost, L0PingPongRunsOnAcrossL1StagesAndKInOneStagePreloadsTheNextBlock) {
    // 256x128x512, one block of four 128-deep L1 stages: a stage brings (256 + 128) * 128 * 2 =
    // 98304 bytes in 768 cycles, under its 4 L0 tiles' 1024 Cube cycles. The block pays one
    // stage's MTE2 and one tile's load, then the Cube runs without a gap: 768 + 64 + 4 * 1024.
    // (Refilling L0 at every stage would cost 3 * 64 more.) Scalar: 200 + 16 tiles * 16.
    KernelLaunch l = cost_launch(DType::F16, 256, 128, 512);
    CubeTiling t = tiling(256, 128, 128, 128, 128, 64);
    t.cores = 1;
    l.tiling = t;
    CycleBreakdown one = cost_ok(l, "dc");
    EXPECT_EQ(one.rounds, 1);
    EXPECT_DOUBLE_EQ(one.cube, 4096);
    EXPECT_DOUBLE_EQ(one.total, 768 + 64 + 4 * 1024 + 1536 + (200 + 16 * 16));

    // 1024x128x128 in four 256x128 blocks, all of K in one L1 stage: the other L1 buffer takes
    // the next block's operands while this one computes (MTE2 preload), so after the first block
    // (768 + 64 + 1024, then its epilogue 1536) each costs only the bottleneck, the epilogue.
    // Without the preload each block would load after the previous one's Cube work:
    // 4 * 1856 + 1536 = 8960. Scalar: 4 * (200 + 4 * 16).
    l = cost_launch(DType::F16, 1024, 128, 128);
    l.tiling = t;
    CycleBreakdown four = cost_ok(l, "dc");
    EXPECT_EQ(four.rounds, 4);
    EXPECT_DOUBLE_EQ(four.total, 1856 + 1536 + 3 * 1536 + 4 * (200 + 4 * 16));

    // Two 64-deep stages per block: no preload, so a block's loads wait for the previous
    // block's Cube work: main = 384 + 64 + 512 + 512 = 1472 per block, under the epilogue's
    // 1536, which paces the blocks: 1472 + 4 * 1536. Scalar: 4 * (200 + 4 * 16).
    t.k_l1 = 64;
    l.tiling = t;
    EXPECT_DOUBLE_EQ(cost_ok(l, "dc").total, 1472 + 4 * 1536 + 4 * (200 + 4 * 16));
}

TEST(MatmulCost, BlocksRoundsAndTheTail) {
    // 16x16 output blocks: M = 32 x 16 fills the 32 cores of dc once, M = 33 x 16 needs a second round.
    KernelLaunch l = cost_launch(DType::F16, 32 * 16, 16, 64);
    l.tiling = tiling(16, 16, 64, 16, 16, 64);
    CycleBreakdown full = cost_ok(l, "dc");
    EXPECT_EQ(full.blocks, 32);
    EXPECT_EQ(full.cores_used, 32);
    EXPECT_EQ(full.rounds, 1);
    l = cost_launch(DType::F16, 33 * 16, 16, 64);
    l.tiling = tiling(16, 16, 64, 16, 16, 64);
    CycleBreakdown tail = cost_ok(l, "dc");
    EXPECT_EQ(tail.blocks, 33);
    EXPECT_EQ(tail.cores_used, 32);
    EXPECT_EQ(tail.rounds, 2);
    EXPECT_GT(tail.total, full.total);
    EXPECT_DOUBLE_EQ(tail.cube, 2 * full.cube);  // the critical core runs two blocks
    // Partial blocks count as blocks: 33 x 16 + 1 rows is 34 blocks.
    l = cost_launch(DType::F16, 33 * 16 + 1, 16, 64);
    l.tiling = tiling(16, 16, 64, 16, 16, 64);
    EXPECT_EQ(cost_ok(l, "dc").blocks, 34);
    // On edge (2 cores) the same 33 blocks take 17 rounds.
    l = cost_launch(DType::F16, 33 * 16, 16, 64);
    l.tiling = tiling(16, 16, 64, 16, 16, 64);
    CycleBreakdown e = cost_ok(l, "edge");
    EXPECT_EQ(e.cores_used, 2);
    EXPECT_EQ(e.rounds, 17);
}

TEST(MatmulCost, FewerCoresCostMore) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F16, DType::F32}) {
            KernelLaunch l = cost_launch(dt, 1024, 1024, 512);
            auto t = tiling(128, 128, 256, 128, 128, 64);
            l.tiling = t;
            CycleBreakdown all = cost_ok(l, preset);
            t.cores = 1;
            l.tiling = t;
            CycleBreakdown one = cost_ok(l, preset);
            EXPECT_EQ(all.cores_used, preset_spec(preset).aicore_count);
            EXPECT_EQ(one.cores_used, 1);
            EXPECT_EQ(one.rounds, one.blocks);
            EXPECT_GT(one.total, all.total) << preset;
        }
    // The default tiling against cores = 1 on the same launch.
    KernelLaunch l = cost_launch(DType::F16, 1000, 1000, 1000);
    double all = cost_ok(l, "dc").total;
    auto t = tiling(128, 128, 256, 128, 128, 64);
    t.cores = 1;
    l.tiling = t;
    EXPECT_GT(cost_ok(l, "dc").total, all);
}

// Every byte read by a core is either an L2 hit or a miss: hit + miss = A read once per N
// block plus B read once per M block.
TEST(MatmulCost, L2HitsPlusMissesAreTheBytesRead) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F16, DType::F32})
            for (bool n_outer : {false, true})
                for (const Shape& sh : {Shape{1000, 700, 300}, Shape{4096, 4096, 2048}, Shape{7, 13, 17}}) {
                    KernelLaunch l = cost_launch(dt, sh.m, sh.n, sh.k);
                    auto t = tiling(128, 64, 128, 64, 64, 64);
                    t.n_outer = n_outer;
                    l.tiling = t;
                    CycleBreakdown cb = cost_ok(l, preset);
                    double in = static_cast<double>(dtype_size(dt));
                    double blocks_m = std::ceil(double(sh.m) / 128), blocks_n = std::ceil(double(sh.n) / 64);
                    double reads = in * (double(sh.m * sh.k) * blocks_n + double(sh.k * sh.n) * blocks_m);
                    EXPECT_NEAR(cb.l2_hit_bytes + cb.l2_miss_bytes, reads, 1e-9 * reads) << preset;
                    EXPECT_EQ(cb.blocks, static_cast<int64_t>(blocks_m * blocks_n));
                }
}

// With M outer, B is swept once per M block; when B does not fit in L2 next to an A panel,
// every sweep misses again. N outer (or a B that fits) avoids the refetch.
TEST(MatmulCost, BLargerThanL2IsRefetchedPerMBlock) {
    struct Case {
        std::string_view preset;
        DType dt;
        int64_t m, n, k;  // B = k x n elements: 32 MiB on dc (L2 32 MiB), 8 MiB on edge (L2 8 MiB)
    };
    for (const Case& c : {Case{"dc", DType::F32, 2048, 4096, 2048}, Case{"edge", DType::F16, 1024, 2048, 2048}}) {
        SCOPED_TRACE(c.preset);
        const double in = static_cast<double>(dtype_size(c.dt));
        const double a_bytes = in * double(c.m * c.k), b_bytes = in * double(c.k * c.n);
        ASSERT_GE(b_bytes, double(preset_spec(c.preset).l2_bytes()));
        auto t = tiling(128, 128, 256, 128, 128, 64);
        KernelLaunch l = cost_launch(c.dt, c.m, c.n, c.k);
        l.tiling = t;
        CycleBreakdown m_outer = cost_ok(l, c.preset);
        const double blocks_m = double(c.m) / 128;
        EXPECT_GE(m_outer.l2_miss_bytes, a_bytes + b_bytes * blocks_m * (1 - 1e-12));

        t.n_outer = true;  // A (much smaller than L2) is swept instead
        l.tiling = t;
        CycleBreakdown n_outer = cost_ok(l, c.preset);
        EXPECT_LT(n_outer.l2_miss_bytes, m_outer.l2_miss_bytes);
        EXPECT_NEAR(n_outer.l2_miss_bytes, a_bytes + b_bytes, 1e-9 * (a_bytes + b_bytes));
        EXPECT_GT(n_outer.l2_hit_bytes, m_outer.l2_hit_bytes);

        // A quarter as wide B fits in L2: misses are the compulsory ones only.
        t.n_outer = false;
        l = cost_launch(c.dt, c.m, c.n / 4, c.k);
        l.tiling = t;
        CycleBreakdown small_b = cost_ok(l, c.preset);
        EXPECT_NEAR(small_b.l2_miss_bytes, a_bytes + b_bytes / 4, 1e-9 * (a_bytes + b_bytes));
        EXPECT_LT(small_b.l2_miss_bytes * 4, m_outer.l2_miss_bytes);
        // Refetching from memory costs time.
        EXPECT_GE(m_outer.total, n_outer.total);
    }
}

// ---- through the runtime -------------------------------------------------------------------

// A matmul uploaded, launched on a stream and downloaded gives exactly the direct run's result,
// and occupies the AI cores for the cost model's duration.
TEST(MatmulLaunch, StreamLaunchMatchesDirectRunAndCostsTheModelDuration) {
    const int64_t m = 67, n = 45, k = 91;
    const DeviceSpec& sp = preset_spec("edge");
    ThreadPool pool(2);
    loom::device::DeviceOptions opt;
    opt.pool = &pool;
    auto dev_r = Device::create(sp, opt);
    ASSERT_TRUE(dev_r.ok()) << dev_r.status().to_string();
    auto& dev = *dev_r;

    std::mt19937 rng(5150);
    auto a = to_f16(random_floats(rng, m * k, -1, 1)), b = to_f16(random_floats(rng, k * n, -1, 1)),
         bias = to_f16(random_floats(rng, n, -1, 1));
    auto da = dev->malloc(a.size() * sizeof(f16), "a"), db = dev->malloc(b.size() * sizeof(f16), "b"),
         dbias = dev->malloc(bias.size() * sizeof(f16), "bias"), dc = dev->malloc(size_t(m * n) * sizeof(f16), "c");
    ASSERT_TRUE(da.ok() && db.ok() && dbias.ok() && dc.ok());
    Stream st = dev->create_stream();
    ASSERT_TRUE(st.copy_h2d(da->as<f16>(), pageable(a)).ok());
    ASSERT_TRUE(st.copy_h2d(db->as<f16>(), pageable(b)).ok());
    ASSERT_TRUE(st.copy_h2d(dbias->as<f16>(), pageable(bias)).ok());
    KernelLaunch l;
    l.inputs = {*tensor_ref(da->as<f16>(), {m, k}), *tensor_ref(db->as<f16>(), {k, n}),
                *tensor_ref(dbias->as<f16>(), {n})};
    l.outputs = {*tensor_ref(dc->as<f16>(), {m, n})};
    l.attrs = {{"activation", std::string("relu")}};
    CycleBreakdown cb = cost_ok(l, "edge");
    ASSERT_TRUE(st.launch(matmul_kernel(), l, "fc").ok());
    std::vector<f16> got(static_cast<size_t>(m * n));
    ASSERT_TRUE(st.copy_d2h(pageable_out(got), DevicePtr<const f16>(dc->as<f16>())).ok());
    ASSERT_TRUE(st.synchronize().ok());

    std::vector<f16> direct(got.size());
    KernelLaunch dl;
    dl.inputs = {ref(a, {m, k}), ref(b, {k, n}), ref(bias, {n})};
    dl.outputs = {ref(direct, {m, n})};
    dl.attrs = {{"activation", std::string("relu")}};
    ASSERT_TRUE(matmul_kernel().run(dl, pool).ok());
    EXPECT_EQ(std::memcmp(got.data(), direct.data(), got.size() * sizeof(f16)), 0);
    EXPECT_NE(from_f16(got), std::vector<float>(got.size(), 0.0f));

    DeviceStats s = dev->stats();
    const auto& aicore = s.engines[static_cast<size_t>(Engine::AICORE)];
    EXPECT_EQ(aicore.tasks, 1u);
    EXPECT_EQ(aicore.busy, sim_from_ns(cb.total / sp.aicore_clock_ghz) * cb.cores_used);
    EXPECT_GE(s.sim_now, sim_from_ns(cb.total / sp.aicore_clock_ghz));
}

TEST(MatmulLaunch, SubmissionRejectsBadLaunchesAndHostOnlyTensors) {
    auto dev_r = Device::create(preset_spec("dc"));
    ASSERT_TRUE(dev_r.ok());
    auto& dev = *dev_r;
    auto buf = dev->malloc(64 * 64 * sizeof(float), "x");
    ASSERT_TRUE(buf.ok());
    Stream st = dev->create_stream();
    TensorRef t = *tensor_ref(buf->as<float>(), {64, 64});
    KernelLaunch l;
    l.inputs = {t, t};
    l.outputs = {t};
    l.attrs = {{"activation", std::string("gelu")}};
    loom::Status bad = st.launch(matmul_kernel(), l, "bad");
    EXPECT_EQ(bad.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(bad.message().find("kernel 'bad'"), std::string::npos) << bad.to_string();
    EXPECT_NE(bad.message().find("activation 'gelu'"), std::string::npos) << bad.to_string();

    std::vector<float> host(64 * 64, 1.0f);
    l.attrs = {};
    l.inputs = {t, ref(host, {64, 64})};  // no device address
    EXPECT_EQ(st.launch(matmul_kernel(), l).code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(st.synchronize().ok());
    EXPECT_EQ(dev->stats().engines[static_cast<size_t>(Engine::AICORE)].tasks, 0u);
}

// ---- ONNX batching, broadcasting and 1-D operands --------------------------------------------
// Against a float64 reference that broadcasts by multi-index; tolerance per output 2e-5 x
// (sum |a b| + |bias|) in f32, plus one f16 ulp of the rounded reference in f16. Both
// instruction sets of the host GEMM for f32.

struct BatchCase {
    std::string name;
    std::vector<int64_t> a, b;  // operand shapes
    bool bias = false;
    std::string act = "none";
};

const std::vector<BatchCase>& batch_cases() {
    static const std::vector<BatchCase> v = {
        {"fold_batch_into_m", {2, 3, 5, 7}, {7, 4}, true, "relu"},
        {"a_broadcast_packed_once", {5, 7}, {3, 7, 4}, true, "prelu"},
        {"both_broadcast", {2, 1, 5, 7}, {3, 7, 4}, false, "leaky_relu"},
        {"same_batch", {3, 9, 17}, {3, 17, 11}, true, "clip"},
        {"vector_a", {7}, {7, 4}, true},
        {"vector_a_batched_b", {7}, {2, 7, 4}, false, "sigmoid"},
        {"vector_b", {3, 5, 7}, {7}, true},
        {"vector_vector", {7}, {7}},
        {"ones", {1, 1, 1}, {1, 1, 1}, true, "hard_swish"},
        {"k1_outer_products", {4, 1, 13, 1}, {1, 3, 1, 17}},
        {"rank6", {2, 1, 3, 1, 5, 6}, {1, 2, 1, 2, 6, 3}, true, "relu"},
        {"batched_b_of_1", {1, 5, 6}, {2, 6, 3}},
        {"many_blocks_per_entry", {3, 100, 129}, {3, 129, 300}, true, "relu"},
        {"fold_many_blocks", {4, 50, 64}, {64, 270}},
    };
    return v;
}

struct BatchData {
    int64_t m, n, k;
    std::vector<int64_t> y;  // Y's shape
    std::vector<float> a, b, bias, s;
};

BatchData batch_data(const BatchCase& c, uint32_t seed) {
    BatchData d;
    d.k = c.a.back();
    d.m = c.a.size() == 1 ? 1 : c.a[c.a.size() - 2];
    d.n = c.b.size() == 1 ? 1 : c.b.back();
    const size_t ar = c.a.size() == 1 ? 0 : c.a.size() - 2, br = c.b.size() == 1 ? 0 : c.b.size() - 2;
    const size_t r = std::max(ar, br);
    for (size_t i = 0; i < r; ++i) {
        const int64_t ad = i + ar >= r ? c.a[i + ar - r] : 1, bd = i + br >= r ? c.b[i + br - r] : 1;
        d.y.push_back(std::max(ad, bd));
    }
    if (c.a.size() > 1) d.y.push_back(d.m);
    if (c.b.size() > 1) d.y.push_back(d.n);
    std::mt19937 rng(seed);
    d.a = random_floats(rng, size_t(element_count(c.a)));
    d.b = random_floats(rng, size_t(element_count(c.b)));
    d.bias = random_floats(rng, size_t(d.n), -0.5f, 0.5f);
    d.s = random_floats(rng, size_t(d.n), 0.05f, 0.5f);
    return d;
}

// The float64 result and, per output, sum |a b| + |bias|.
void batch_reference(const BatchCase& c, const BatchData& d, std::vector<double>& out, std::vector<double>& mag) {
    const size_t ar = c.a.size() == 1 ? 0 : c.a.size() - 2, br = c.b.size() == 1 ? 0 : c.b.size() - 2;
    const size_t r = std::max(ar, br);
    std::vector<int64_t> ad(r), bd(r), yd(r);
    for (size_t i = 0; i < r; ++i) {
        ad[i] = i + ar >= r ? c.a[i + ar - r] : 1, bd[i] = i + br >= r ? c.b[i + br - r] : 1;
        yd[i] = std::max(ad[i], bd[i]);
    }
    const int64_t batch = element_count(yd);
    out.assign(size_t(batch * d.m * d.n), 0), mag.assign(out.size(), 0);
    for (int64_t t = 0; t < batch; ++t) {
        // Multi-index of t, then each operand's entry (index 0 where it broadcasts).
        int64_t rem = t, ao = 0, bo = 0, as = 1, bs = 1;
        for (size_t i = r; i-- > 0;) {
            const int64_t idx = rem % yd[i];
            rem /= yd[i];
            ao += (ad[i] == 1 ? 0 : idx) * as, bo += (bd[i] == 1 ? 0 : idx) * bs;
            as *= ad[i], bs *= bd[i];
        }
        for (int64_t i = 0; i < d.m; ++i)
            for (int64_t j = 0; j < d.n; ++j) {
                double sum = 0, m = 0;
                for (int64_t kk = 0; kk < d.k; ++kk) {
                    const double p = double(d.a[size_t((ao * d.m + i) * d.k + kk)]) * d.b[size_t((bo * d.k + kk) * d.n + j)];
                    sum += p, m += std::abs(p);
                }
                if (c.bias) sum += d.bias[size_t(j)], m += std::abs(d.bias[size_t(j)]);
                sum = ref_activation(c.act, sum, d.s[size_t(j)]);
                out[size_t((t * d.m + i) * d.n + j)] = sum, mag[size_t((t * d.m + i) * d.n + j)] = m;
            }
    }
}

KernelAttrs batch_attrs(const BatchCase& c) {
    KernelAttrs a;
    if (c.act != "none") a.set("activation", c.act);
    if (c.act == "leaky_relu") a.set("alpha", 0.125);
    if (c.act == "clip") a.set("min", -0.25).set("max", 0.5);
    return a;
}

template <typename T>
KernelLaunch batch_launch(const BatchCase& c, const BatchData& d, std::vector<T>& a, std::vector<T>& b,
                          std::vector<T>& bias, std::vector<T>& s, std::vector<T>& y) {
    const DType dt = dtype_of<T>();
    KernelLaunch l;
    TensorRef empty = shape_ref(dt, {0}, nullptr);
    l.inputs = {shape_ref(dt, c.a, a.data()), shape_ref(dt, c.b, b.data()),
                c.bias ? shape_ref(dt, {d.n}, bias.data()) : empty};
    if (c.act == "prelu") l.inputs.push_back(shape_ref(dt, {d.n}, s.data()));
    l.outputs = {shape_ref(dt, d.y, y.data())};
    l.attrs = batch_attrs(c);
    return l;
}

class MatmulBatchF32 : public testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(MatmulBatchF32, BroadcastsLikeOnnxMatMul) {
    auto [want, idx] = GetParam();
    const BatchCase& c = batch_cases()[idx];
    SKIP_UNLESS_ISA(want);
    BatchData d = batch_data(c, static_cast<uint32_t>(300 + idx));
    std::vector<float> y(size_t(element_count(d.y)), std::nanf(""));
    KernelLaunch l = batch_launch(c, d, d.a, d.b, d.bias, d.s, y);
    IsaGuard isa_guard(want);
    ThreadPool pool(2);
    loom::Status st = matmul_kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    batch_reference(c, d, ref, mag);
    ASSERT_EQ(ref.size(), y.size());
    expect_within_bound(y, ref, mag);
}

INSTANTIATE_TEST_SUITE_P(Onnx, MatmulBatchF32,
                         testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                          testing::Range(size_t{0}, batch_cases().size())),
                         [](const auto& info) {
                             return std::string(cpu::isa_name(std::get<0>(info.param))) + "_" +
                                    batch_cases()[std::get<1>(info.param)].name;
                         });

class MatmulBatchF16 : public testing::TestWithParam<size_t> {};

TEST_P(MatmulBatchF16, BroadcastsLikeOnnxMatMulRoundedOnce) {
    const BatchCase& c = batch_cases()[GetParam()];
    BatchData d = batch_data(c, static_cast<uint32_t>(400 + GetParam()));
    // Round the inputs to f16 first so the reference sees the stored values.
    auto ah = round_to_f16(d.a), bh = round_to_f16(d.b), biash = round_to_f16(d.bias), sh = round_to_f16(d.s);
    std::vector<f16> y(size_t(element_count(d.y)));
    KernelLaunch l = batch_launch(c, d, ah, bh, biash, sh, y);
    ThreadPool pool(2);
    loom::Status st = matmul_kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<double> ref, mag;
    batch_reference(c, d, ref, mag);
    expect_within_bound(y, ref, mag);
}

INSTANTIATE_TEST_SUITE_P(Onnx, MatmulBatchF16, testing::Range(size_t{0}, batch_cases().size()),
                         [](const auto& info) { return batch_cases()[info.param].name; });

// Batch entries run in parallel (and nest the GEMM's own blocks); each output is computed the
// same way whatever the split.
TEST(MatmulThreads, BatchedOneAndThreeThreadsGiveBitIdenticalResults) {
    for (const size_t idx : {size_t{2}, size_t{12}, size_t{13}}) {
        const BatchCase& c = batch_cases()[idx];
        BatchData d = batch_data(c, 99);
        std::vector<float> y1(size_t(element_count(d.y))), y3(y1.size());
        ThreadPool one(1), three(3);
        ASSERT_TRUE(matmul_kernel().run(batch_launch(c, d, d.a, d.b, d.bias, d.s, y1), one).ok());
        ASSERT_TRUE(matmul_kernel().run(batch_launch(c, d, d.a, d.b, d.bias, d.s, y3), three).ok());
        EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0) << c.name;
    }
}

TEST(MatmulArgs, RejectsBadBatchesAndEpilogues) {
    std::vector<float> buf(4096, 1.0f);
    float* p = buf.data();
    KernelLaunch l;
    {
        SCOPED_TRACE("batch dims 2 and 3 do not broadcast");
        l.inputs = {shape_ref(DType::F32, {2, 4, 5}, p), shape_ref(DType::F32, {3, 5, 6}, p)};
        l.outputs = {shape_ref(DType::F32, {3, 4, 6}, p)};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "batch dims of A 2x4x5 and B 3x5x6 do not broadcast");
    }
    {
        SCOPED_TRACE("scalar A");
        l.inputs = {shape_ref(DType::F32, {}, p), shape_ref(DType::F32, {5, 6}, p)};
        l.outputs = {shape_ref(DType::F32, {6}, p)};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "A is scalar");
    }
    {
        SCOPED_TRACE("1-D B keeps N out of C");
        l.inputs = {shape_ref(DType::F32, {4, 5}, p), shape_ref(DType::F32, {5}, p)};
        l.outputs = {shape_ref(DType::F32, {4, 1}, p)};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "C must be 4");
    }
    {
        SCOPED_TRACE("K of a 1-D A");
        l.inputs = {shape_ref(DType::F32, {4}, p), shape_ref(DType::F32, {5, 6}, p)};
        l.outputs = {shape_ref(DType::F32, {6}, p)};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "K is 4 in A, 5 in B");
    }
    {
        SCOPED_TRACE("empty batch");
        l.inputs = {shape_ref(DType::F32, {0, 4, 5}, p), shape_ref(DType::F32, {5, 6}, p)};
        l.outputs = {shape_ref(DType::F32, {0, 4, 6}, p)};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "empty");
    }
    l.inputs = {shape_ref(DType::F32, {4, 5}, p), shape_ref(DType::F32, {5, 6}, p)};
    l.outputs = {shape_ref(DType::F32, {4, 6}, p)};
    {
        SCOPED_TRACE("prelu without slopes");
        l.attrs = {{"activation", std::string("prelu")}};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "slope input S");
    }
    {
        SCOPED_TRACE("slopes of the wrong length");
        KernelLaunch bad = l;
        bad.inputs.push_back(shape_ref(DType::F32, {0}, nullptr));
        bad.inputs.push_back(shape_ref(DType::F32, {5}, p));
        expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "prelu slopes S are 5, must hold 1 or N = 6");
    }
    {
        SCOPED_TRACE("alpha without leaky_relu");
        l.attrs = {{"alpha", 0.5}};
        expect_rejected(l, StatusCode::INVALID_ARGUMENT, "'alpha' only applies");
    }
}

TEST(MatmulCost, BatchIsTheProductOfTheBroadcastBatchDims) {
    for (std::string_view preset : loom::test::presets()) {
        KernelLaunch one = cost_launch(DType::F16, 64, 48, 80);
        KernelLaunch many;
        many.inputs = {shape_ref(DType::F16, {4, 1, 64, 80}, nullptr), shape_ref(DType::F16, {3, 80, 48}, nullptr)};
        many.outputs = {shape_ref(DType::F16, {4, 3, 64, 48}, nullptr)};
        CycleBreakdown a = cost_ok(one, preset), b = cost_ok(many, preset);
        EXPECT_DOUBLE_EQ(b.flops, 12 * a.flops);
        EXPECT_EQ(b.blocks, 12 * a.blocks);
        EXPECT_GT(b.total, a.total);
        // 1-D operands are one row or one column.
        KernelLaunch vec;
        vec.inputs = {shape_ref(DType::F16, {80}, nullptr), shape_ref(DType::F16, {80, 48}, nullptr)};
        vec.outputs = {shape_ref(DType::F16, {48}, nullptr)};
        EXPECT_DOUBLE_EQ(cost_ok(vec, preset).flops, 2.0 * 80 * 48);
        // The tiling is still checked per GEMM.
        many.tiling = tiling(256, 16, 256, 256, 16, 256);
        expect_cost_rejects(many, preset, "L0A");
    }
}

// ---- int8 -----------------------------------------------------------------------------------

struct Int8Case {
    BatchCase c;
    bool per_tensor = false;  // BS holds 1 value
    bool f16 = false;         // A, bias, S and Y f16 (else f32)
};

const std::vector<Int8Case>& int8_cases() {
    static const std::vector<Int8Case> v = {
        {{"ones", {1, 1}, {1, 1}, true, "hard_swish"}, true},
        {{"prime_7x13x17", {7, 17}, {17, 13}, true, "relu"}},
        {{"prelu_31x3x29", {31, 29}, {29, 3}, false, "prelu"}, false, true},
        {{"k1100_in_slices", {5, 1100}, {1100, 33}, true, "leaky_relu"}},
        {{"fold_batch_into_m", {2, 3, 5, 7}, {7, 4}, true, "sigmoid"}, true, true},
        {{"a_broadcast_packed_once", {5, 7}, {3, 7, 4}, true, "clip"}},
        {{"a_broadcast_k1300_in_slices", {6, 1300}, {2, 1300, 9}, true}},
        {{"both_broadcast", {2, 1, 5, 7}, {3, 7, 4}}, true, true},
        {{"vector_a", {7}, {7, 4}, true}},
        {{"many_blocks_per_entry", {3, 100, 129}, {3, 129, 300}, true, "relu"}, false, true},
    };
    return v;
}

// The float64 result, the magnitude bound and the exact sums of each output for i8 B `w`, scales
// `ws` (1 or N values) and A quantized with step `xs`.
void int8_reference(const BatchCase& c, const BatchData& d, const std::vector<float>& a, float xs,
                    const std::vector<int8_t>& w, const std::vector<float>& ws, std::vector<double>& out,
                    std::vector<double>& mag, std::vector<int64_t>& sums) {
    const size_t ar = c.a.size() == 1 ? 0 : c.a.size() - 2, br = c.b.size() == 1 ? 0 : c.b.size() - 2;
    const size_t r = std::max(ar, br);
    std::vector<int64_t> ad(r), bd(r), yd(r);
    for (size_t i = 0; i < r; ++i) {
        ad[i] = i + ar >= r ? c.a[i + ar - r] : 1, bd[i] = i + br >= r ? c.b[i + br - r] : 1;
        yd[i] = std::max(ad[i], bd[i]);
    }
    std::vector<int64_t> q(a.size());
    for (size_t i = 0; i < a.size(); ++i) q[i] = ref_quantize(a[i], xs);
    const int64_t batch = element_count(yd);
    out.assign(size_t(batch * d.m * d.n), 0), mag.assign(out.size(), 0), sums.assign(out.size(), 0);
    for (int64_t t = 0; t < batch; ++t) {
        int64_t rem = t, ao = 0, bo = 0, as = 1, bs = 1;
        for (size_t i = r; i-- > 0;) {
            const int64_t idx = rem % yd[i];
            rem /= yd[i];
            ao += (ad[i] == 1 ? 0 : idx) * as, bo += (bd[i] == 1 ? 0 : idx) * bs;
            as *= ad[i], bs *= bd[i];
        }
        for (int64_t i = 0; i < d.m; ++i)
            for (int64_t j = 0; j < d.n; ++j) {
                int64_t acc = 0, abs_acc = 0;
                for (int64_t kk = 0; kk < d.k; ++kk) {
                    const int64_t p =
                        q[size_t((ao * d.m + i) * d.k + kk)] * int64_t(w[size_t((bo * d.k + kk) * d.n + j)]);
                    acc += p, abs_acc += std::abs(p);
                }
                const double factor = double(xs) * ws[ws.size() == 1 ? 0 : size_t(j)];
                double sum = factor * double(acc), m = std::abs(factor) * double(abs_acc);
                if (c.bias) sum += d.bias[size_t(j)], m += std::abs(d.bias[size_t(j)]);
                sum = ref_activation(c.act, sum, d.s[size_t(j)]);
                const size_t o = size_t((t * d.m + i) * d.n + j);
                out[o] = sum, mag[o] = m, sums[o] = acc;
            }
    }
}

// The launch A, B (i8), bias, S, BS with x_scale `xs` (absent optional inputs are empty).
template <typename T>
KernelLaunch int8_launch(const BatchCase& c, const BatchData& d, std::vector<T>& a, std::vector<int8_t>& w,
                         std::vector<T>& bias, std::vector<T>& s, std::vector<float>& ws, float xs, std::vector<T>& y) {
    const DType dt = dtype_of<T>();
    KernelLaunch l;
    TensorRef empty = shape_ref(dt, {0}, nullptr);
    l.inputs = {shape_ref(dt, c.a, a.data()), shape_ref(DType::I8, c.b, w.data()),
                c.bias ? shape_ref(dt, {d.n}, bias.data()) : empty,
                c.act == "prelu" ? shape_ref(dt, {d.n}, s.data()) : empty,
                shape_ref(DType::F32, {int64_t(ws.size())}, ws.data())};
    l.outputs = {shape_ref(dt, d.y, y.data())};
    l.attrs = batch_attrs(c);
    l.attrs.set("x_scale", double(xs));
    return l;
}

class MatmulInt8 : public testing::TestWithParam<std::tuple<cpu::Isa, size_t>> {};

TEST_P(MatmulInt8, MatchesTheQuantizedReference) {
    auto [want, idx] = GetParam();
    const Int8Case& ic = int8_cases()[idx];
    const BatchCase& c = ic.c;
    SKIP_UNLESS_ISA(want);
    IsaGuard isa_guard(want);
    const uint32_t seed = static_cast<uint32_t>(500 + idx);
    BatchData d = batch_data(c, seed);
    for (float& v : d.a) v *= 1.5f;  // |a| / x_scale up to 150: some values clamp to +-127
    std::vector<int8_t> w = random_int8(d.b.size(), seed + 1);
    std::mt19937 rng(seed + 2);
    std::vector<float> ws = ic.per_tensor ? std::vector<float>{0.004f} : random_floats(rng, size_t(d.n), 0.001f, 0.01f);
    const float xs = 0.01f;
    ThreadPool pool(2);
    std::vector<double> ref, mag;
    std::vector<int64_t> sums;
    if (ic.f16) {
        auto ah = round_to_f16(d.a), biash = round_to_f16(d.bias), sh = round_to_f16(d.s);
        std::vector<f16> y(size_t(element_count(d.y)));
        loom::Status st = matmul_kernel().run(int8_launch(c, d, ah, w, biash, sh, ws, xs, y), pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        int8_reference(c, d, d.a, xs, w, ws, ref, mag, sums);
        expect_within_bound(y, ref, mag);
    } else {
        std::vector<float> y(size_t(element_count(d.y)), std::nanf(""));
        loom::Status st = matmul_kernel().run(int8_launch(c, d, d.a, w, d.bias, d.s, ws, xs, y), pool);
        ASSERT_TRUE(st.ok()) << st.to_string();
        int8_reference(c, d, d.a, xs, w, ws, ref, mag, sums);
        expect_within_bound(y, ref, mag);
    }
}

INSTANTIATE_TEST_SUITE_P(Onnx, MatmulInt8,
                         testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                          testing::Range(size_t{0}, int8_cases().size())),
                         [](const auto& info) {
                             return std::string(cpu::isa_name(std::get<0>(info.param))) + "_" +
                                    int8_cases()[std::get<1>(info.param)].c.name;
                         });

// One row per value: A is [16, 1], B = [[1]], BS = 1, x_scale 0.5, so Y = 0.5 q. Ties go to
// even, |x / x_scale| above 127 (infinities too) clamps, NaN gives 0.
TEST(MatmulInt8, QuantizesToNearestEvenClampsAndZeroesNan) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> a = {0.25f, 0.75f,  1.25f,  -0.25f, -0.75f, -1.25f, 63.25f, 63.75f,
                            100.0f, -100.0f, inf, -inf, std::nanf(""), 1e-30f, 0.2499f, 0.2501f};
    const std::vector<int32_t> want_q = {0, 2, 2, 0, -2, -2, 126, 127, 127, -127, 127, -127, 0, 0, 0, 1};
    std::vector<int8_t> b = {1};
    std::vector<float> bs = {1.0f}, y(a.size(), -1.0f);
    KernelLaunch l;
    const int64_t m = int64_t(a.size());
    l.inputs = {ref(a, {m, 1}), ref(b, {1, 1}), shape_ref(DType::F32, {0}), shape_ref(DType::F32, {0}), ref(bs, {1})};
    l.outputs = {ref(y, {m, 1})};
    l.attrs = {{"x_scale", 0.5}};
    for (cpu::Isa isa : loom::test::supported_isas()) {
        IsaGuard guard(isa);
        ThreadPool pool(2);
        ASSERT_TRUE(matmul_kernel().run(l, pool).ok());
        for (size_t i = 0; i < a.size(); ++i) {
            EXPECT_EQ(y[i], 0.5f * float(want_q[i])) << "a = " << a[i];
            EXPECT_EQ(ref_quantize(a[i], 0.5f), want_q[i]) << "a = " << a[i];
        }
    }
}

// K = 4099: products of about +15000 for 1200 steps (partial sums past 2^24, where fp32 steps by
// 2), then 100 small ones, then 1200 that cancel the first, then 1599 small ones. x_scale 1/4 and
// power-of-two BS: Y = the int32 sum x a power of two, exact, compared bit for bit. Through the
// folded GEMM (B without batch) and the packed-once path (A without batch).
TEST(MatmulInt8, SumsOver4099AreExactInt32) {
    const int64_t m = 3, n = 5, k = 4099;
    std::mt19937 rng(4099);
    auto small = [&](int32_t r) { const int32_t v = int32_t(rng() % uint32_t(2 * r + 1)) - r; return v == 0 ? 1 : v; };
    std::vector<float> a(size_t(m * k));
    std::vector<int8_t> b(size_t(2 * k * n));  // two batch entries for the packed-once path
    for (int64_t i = 0; i < m; ++i)
        for (int64_t kk = 0; kk < k; ++kk) {
            int32_t q = small(9);
            if (kk < 1200) q = 120 + int32_t(rng() % 8);
            if (kk >= 1300 && kk < 2500) q = int32_t(a[size_t(i * k + kk - 1300)] * 4);
            a[size_t(i * k + kk)] = float(q) / 4;
        }
    for (int64_t t = 0; t < 2; ++t)
        for (int64_t kk = 0; kk < k; ++kk)
            for (int64_t j = 0; j < n; ++j)
                b[size_t((t * k + kk) * n + j)] = int8_t(kk < 1200 ? 127 : kk >= 1300 && kk < 2500 ? -127 : small(100));
    std::vector<float> bs = {0.125f, 0.25f, 1.0f, 2.0f, 0.0625f};
    for (bool batched : {false, true})
        for (cpu::Isa isa : loom::test::supported_isas()) {
            SCOPED_TRACE(std::string(batched ? "A without batch" : "B without batch") + " " +
                         std::string(cpu::isa_name(isa)));
            IsaGuard guard(isa);
            std::vector<float> y(size_t((batched ? 2 : 1) * m * n), std::nanf(""));
            KernelLaunch l;
            l.inputs = {ref(a, {m, k}), batched ? ref(b, {2, k, n}) : ref(b, {k, n}), shape_ref(DType::F32, {0}),
                        shape_ref(DType::F32, {0}), ref(bs, {n})};
            l.outputs = {batched ? ref(y, {2, m, n}) : ref(y, {m, n})};
            l.attrs = {{"x_scale", 0.25}};
            ThreadPool pool(2);
            ASSERT_TRUE(matmul_kernel().run(l, pool).ok());
            for (int64_t t = 0; t < (batched ? 2 : 1); ++t)
                for (int64_t i = 0; i < m; ++i)
                    for (int64_t j = 0; j < n; ++j) {
                        int64_t acc = 0, partial_max = 0;
                        for (int64_t kk = 0; kk < k; ++kk) {
                            acc += int64_t(a[size_t(i * k + kk)] * 4) * b[size_t((t * k + kk) * n + j)];
                            partial_max = std::max(partial_max, std::abs(acc));
                        }
                        ASSERT_GT(partial_max, int64_t{1} << 24);
                        ASSERT_LT(std::abs(acc), int64_t{1} << 24);
                        EXPECT_EQ(double(y[size_t((t * m + i) * n + j)]), double(acc) * 0.25 * bs[size_t(j)])
                            << "row " << i << " column " << j;
                    }
        }
}

TEST(MatmulInt8, RejectsMissingOrMisplacedQuantization) {
    std::vector<float> a(4 * 5, 1.0f), c(4 * 3), bs(3, 0.5f), bf(15, 1.0f);
    std::vector<int8_t> b(15, 2);
    const TensorRef empty = shape_ref(DType::F32, {0});
    KernelLaunch l;
    l.inputs = {ref(a, {4, 5}), ref(b, {5, 3}), empty, empty, ref(bs, {3})};
    l.outputs = {ref(c, {4, 3})};
    l.attrs = {{"x_scale", 0.1}};
    ThreadPool pool(1);
    ASSERT_TRUE(matmul_kernel().run(l, pool).ok());
    KernelLaunch bad = l;
    bad.inputs.resize(2);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "matmul: B is i8 and needs its per-channel scales BS (input 4)");
    bad = l;
    bad.attrs = {};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "matmul: B is i8 and needs attribute 'x_scale'");
    bad = l;
    bad.attrs = {{"x_scale", -2.0}};
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "matmul: attribute 'x_scale' is -2 (must be finite and > 0)");
    bad = l;
    bad.inputs[4] = ref(bs, {2});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "matmul: BS is 2 f32, must hold 1 or N = 3 f32 values");
    bad = l;
    bad.inputs[1] = ref(bf, {5, 3});
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "matmul: BS (input 4) is given but B is f32");
    bad.inputs.resize(2);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "matmul: attribute 'x_scale' applies to i8 weights only");
    bad = l;
    bad.inputs.push_back(empty);
    expect_rejected(bad, StatusCode::INVALID_ARGUMENT, "matmul takes 2 to 5 inputs, got 6");
    bad = l;
    bad.inputs[0] = shape_ref(DType::F32, {4, 132105});
    bad.inputs[1] = shape_ref(DType::I8, {132105, 3});
    expect_rejected(bad, StatusCode::UNSUPPORTED, "matmul: the int8 reduction over K is 132105 products long");
}

KernelLaunch int8_cost_launch(DType a_dtype, int64_t m, int64_t n, int64_t k) {
    KernelLaunch l = cost_launch(a_dtype, m, n, k);
    l.inputs[1].dtype = DType::I8;
    l.inputs.insert(l.inputs.end(),
                    {shape_ref(DType::F32, {0}), shape_ref(DType::F32, {0}), shape_ref(DType::F32, {n})});
    l.attrs = {{"x_scale", 0.02}};
    return l;
}

TEST(MatmulInt8Cost, DefaultTilingIsLegalAndConsistentForManyShapes) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F16, DType::F32})
            for (const Shape& sh : kCostShapes) {
                SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)) + " " + std::to_string(sh.m) +
                             "x" + std::to_string(sh.n) + "x" + std::to_string(sh.k));
                CycleBreakdown cb = cost_ok(int8_cost_launch(dt, sh.m, sh.n, sh.k), preset);
                expect_consistent(cb, preset_spec(preset), sh);
                // A moves as stored, B as int8.
                const double in = static_cast<double>(dtype_size(dt));
                EXPECT_GE(cb.l2_miss_bytes, double(sh.m * sh.k) * in + double(sh.k * sh.n) * (1 - 1e-12));
                EXPECT_GT(cb.vector, 0);  // the quantize pass at least
            }
}

TEST(MatmulInt8Cost, TheCubeRunsAtTwiceTheFp16RateAndTheTotalIsLower) {
    for (std::string_view preset : loom::test::presets())
        for (const Shape& sh : {Shape{1024, 1024, 1024}, Shape{512, 256, 2048}, Shape{4096, 512, 512}}) {
            SCOPED_TRACE(std::string(preset) + " " + std::to_string(sh.m) + "x" + std::to_string(sh.n) + "x" +
                         std::to_string(sh.k));
            CycleBreakdown h = cost_ok(cost_launch(DType::F16, sh.m, sh.n, sh.k), preset);
            CycleBreakdown q = cost_ok(int8_cost_launch(DType::F16, sh.m, sh.n, sh.k), preset);
            CycleBreakdown f = cost_ok(cost_launch(DType::F32, sh.m, sh.n, sh.k), preset);
            CycleBreakdown qf = cost_ok(int8_cost_launch(DType::F32, sh.m, sh.n, sh.k), preset);
            EXPECT_DOUBLE_EQ(q.cube, 0.5 * h.cube);  // K a multiple of both stage depths
            EXPECT_DOUBLE_EQ(qf.cube, q.cube);       // the A dtype does not change the Cube
            EXPECT_LT(q.total, h.total);
            EXPECT_LT(qf.total, f.total);
            EXPECT_DOUBLE_EQ(q.flops, h.flops);
        }
}

TEST(MatmulInt8Cost, TilingChecksUseTheInt8FractalAndOneByteElements) {
    KernelLaunch l = int8_cost_launch(DType::F16, 512, 64, 512);
    l.tiling = tiling(128, 16, 64, 128, 16, 16);
    expect_cost_rejects(l, "edge", "multiples of the int8 fractal 16x16x32");
    l.tiling = tiling(128, 16, 64, 128, 16, 32);
    EXPECT_TRUE(cost_error(l, "edge").ok()) << cost_error(l, "edge").to_string();
    // L0A: 2 x 256 x 128 x 1 B = 64 KiB fits int8; fp16 needs twice that.
    l.tiling = tiling(256, 16, 128, 256, 16, 128);
    EXPECT_TRUE(cost_error(l, "edge").ok()) << cost_error(l, "edge").to_string();
    KernelLaunch h = cost_launch(DType::F16, 512, 64, 512);
    h.tiling = l.tiling;
    expect_cost_rejects(h, "edge", "L0A needs 131072");
    l.tiling = tiling(256, 16, 256, 256, 16, 256);
    expect_cost_rejects(l, "edge", "L0A needs 131072");
}

}  // namespace

}  // namespace test_kernel_matmul
