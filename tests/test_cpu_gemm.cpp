// Host GEMM (device/kernels/cpu/gemm.hpp) against a float64 reference, on every instruction
// set the CPU has, for odd shapes (1, primes, sizes straddling the MR/NR/KC/MC/NC blocks),
// strided and transposed views and every epilogue; AVX-512 also bit for bit against AVX2.
// Tolerance: |c - ref| <= 1e-5 * (sum_k |a b| + |addends|),
// i.e. a few fp32 roundings of the largest partial sum (K up to 600 -> relative error of a
// blocked sum stays below K * 2^-24 ~ 3.6e-5 in the worst case, far less in practice).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/sanitizer.hpp"
#include "common/thread_pool.hpp"
#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "test_util.hpp"

namespace test_cpu_gemm {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device::cpu;
using loom::ThreadPool;
using loom::test::IsaGuard;

struct Shape {
    int64_t m, n, k;
};

class GemmShapes : public ::testing::TestWithParam<std::tuple<Isa, Shape>> {};

TEST_P(GemmShapes, MatchesFloat64WithEveryEpilogue) {
    auto [want, sh] = GetParam();
    SKIP_UNLESS_ISA(want);
    IsaGuard guard(want);
    ThreadPool pool(2);
    std::mt19937 rng(static_cast<uint32_t>(sh.m * 131 + sh.n * 7 + sh.k));
    const auto a = loom::test::random_floats(rng, static_cast<size_t>(sh.m * sh.k));
    const auto b = loom::test::random_floats(rng, static_cast<size_t>(sh.k * sh.n));
    const auto bias = loom::test::random_floats(rng, static_cast<size_t>(sh.m));
    const auto slope = loom::test::random_floats(rng, static_cast<size_t>(sh.m), 0.05f, 0.5f);
    const auto res = loom::test::random_floats(rng, static_cast<size_t>(sh.m * sh.n));

    for (int variant = 0; variant < 4; ++variant) {
        SCOPED_TRACE(variant);
        Epilogue ep;
        if (variant >= 1) ep.bias = {bias.data(), 1, 0};
        if (variant == 1) ep.act = Act::RELU;
        if (variant == 2) ep.act = Act::PRELU, ep.slope = {slope.data(), 1, 0}, ep.residual = {res.data(), sh.n, 1};
        if (variant == 3)
            ep.act = Act::LEAKY_RELU, ep.alpha = 0.1f, ep.scale = 0.5f, ep.residual = {res.data(), sh.n, 1},
            ep.residual_after_act = true;
        // A transposed (stored K x M) in odd variants to cover the strided packer.
        std::vector<float> at(a.size());
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t k = 0; k < sh.k; ++k) at[static_cast<size_t>(k * sh.m + i)] = a[static_cast<size_t>(i * sh.k + k)];
        MatView av = variant % 2 ? MatView{at.data(), 1, sh.m} : MatView{a.data(), sh.k, 1};
        std::vector<float> c(static_cast<size_t>(sh.m * sh.n), std::nanf(""));
        gemm(sh.m, sh.n, sh.k, av, MatView{b.data(), sh.n, 1}, c.data(), sh.n, ep, pool);
        int64_t bad = 0;
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                double s = 0, mag = 0;
                for (int64_t k = 0; k < sh.k; ++k) {
                    double p = double(a[size_t(i * sh.k + k)]) * b[size_t(k * sh.n + j)];
                    s += p, mag += std::abs(p);
                }
                s *= ep.scale, mag *= std::abs(ep.scale);
                double r = res[size_t(i * sh.n + j)];
                if (ep.bias.p) s += bias[size_t(i)], mag += std::abs(bias[size_t(i)]);
                if (ep.residual.p && !ep.residual_after_act) s += r, mag += std::abs(r);
                if (ep.act == Act::RELU) s = std::max(s, 0.0);
                if (ep.act == Act::PRELU && s < 0) s *= slope[size_t(i)];
                if (ep.act == Act::LEAKY_RELU && s < 0) s *= ep.alpha;
                if (ep.residual.p && ep.residual_after_act) s += r, mag += std::abs(r);
                double got = c[size_t(i * sh.n + j)];
                if (!(std::abs(got - s) <= 1e-5 * mag + 1e-30)) {
                    if (++bad <= 5) ADD_FAILURE() << "C[" << i << "," << j << "] = " << got << ", want " << s;
                }
            }
        EXPECT_EQ(bad, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, GemmShapes,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Values(Shape{1, 1, 1}, Shape{6, 16, 1}, Shape{7, 17, 13},
                                                              Shape{64, 300, 27}, Shape{97, 257, 600},
                                                              Shape{5, 1000, 3}, Shape{200, 3, 70}, Shape{13, 29, 0},
                                                              Shape{150, 2100, 200})),
                         [](const auto& info) {
                             const Shape s = std::get<1>(info.param);
                             return std::string(isa_name(std::get<0>(info.param))) + "_" + std::to_string(s.m) + "x" +
                                    std::to_string(s.n) + "x" + std::to_string(s.k);
                         });

// The AVX-512 6 x 32 kernel sums every output with the AVX2 6 x 16 kernel's fused multiply-adds
// in the same order (gemm.hpp), so the two agree bit for bit: whole and partial tiles, K slices
// (256 deep for AVX2, 128 for AVX-512) and an epilogue. Shapes straddle 16, 32 and both K slices.
TEST(GemmIsas, Avx512MatchesAvx2BitForBit) {
    SKIP_UNLESS_ISA(Isa::AVX512);
    ThreadPool pool(2);
    for (Shape sh :
         {Shape{6, 32, 1}, Shape{13, 47, 129}, Shape{64, 300, 576}, Shape{100, 16, 257}, Shape{7, 33, 1000}}) {
        SCOPED_TRACE(::testing::Message() << sh.m << "x" << sh.n << "x" << sh.k);
        std::mt19937 rng(static_cast<uint32_t>(sh.m + sh.n + sh.k));
        const auto a = loom::test::random_floats(rng, static_cast<size_t>(sh.m * sh.k));
        const auto b = loom::test::random_floats(rng, static_cast<size_t>(sh.k * sh.n));
        const auto bias = loom::test::random_floats(rng, static_cast<size_t>(sh.m));
        Epilogue ep;
        ep.bias = {bias.data(), 1, 0}, ep.act = Act::LEAKY_RELU, ep.alpha = 0.2f;
        std::vector<float> c[2];
        for (int i = 0; i < 2; ++i) {
            IsaGuard guard(i ? Isa::AVX512 : Isa::AVX2);
            c[i].assign(static_cast<size_t>(sh.m * sh.n), std::nanf(""));
            gemm(sh.m, sh.n, sh.k, MatView{a.data(), sh.k, 1}, MatView{b.data(), sh.n, 1}, c[i].data(), sh.n, ep, pool);
        }
        EXPECT_EQ(std::memcmp(c[0].data(), c[1].data(), c[0].size() * sizeof(float)), 0);
    }
}

// With enough column blocks for the threads, a task packs a column block's whole B once and
// runs every row block against it; with fewer it takes one (row block, column block). Both
// call the micro-kernels with the same K slices in the same order: the same bits. 2 threads
// take the first way for these shapes (9 and 12 column blocks), 16 the second.
TEST(GemmBlocks, PackingBOnceForEveryRowBlockChangesNoBits) {
    for (Shape sh : {Shape{150, 2100, 200}, Shape{300, 3000, 500}, Shape{97, 2305, 129}}) {
        SCOPED_TRACE(::testing::Message() << sh.m << "x" << sh.n << "x" << sh.k);
        std::mt19937 rng(static_cast<uint32_t>(sh.m * 3 + sh.n + sh.k));
        const auto a = loom::test::random_floats(rng, static_cast<size_t>(sh.m * sh.k));
        const auto b = loom::test::random_floats(rng, static_cast<size_t>(sh.k * sh.n));
        const auto bias = loom::test::random_floats(rng, static_cast<size_t>(sh.m));
        Epilogue ep;
        ep.bias = {bias.data(), 1, 0}, ep.act = Act::RELU;
        std::vector<float> c[2];
        for (int i = 0; i < 2; ++i) {
            ThreadPool pool(i ? 16 : 2);
            c[i].assign(static_cast<size_t>(sh.m * sh.n), std::nanf(""));
            gemm(sh.m, sh.n, sh.k, MatView{a.data(), sh.k, 1}, MatView{b.data(), sh.n, 1}, c[i].data(), sh.n, ep, pool);
        }
        EXPECT_EQ(std::memcmp(c[0].data(), c[1].data(), c[0].size() * sizeof(float)), 0);
    }
}

// An fp16 residual (Addend::h, an fp16 model's skip map) adds the widened values: the bits of
// the same epilogue with the fp32 residual, before or after the activation, per column or one
// value for the row, over rows longer than the epilogue's 256-value runs.
TEST(GemmEpilogue, Fp16ResidualAddsTheWidenedValues) {
    using loom::device::f16;
    std::mt19937 rng(77);
    const int64_t n = 700;
    const auto c0 = loom::test::random_floats(rng, static_cast<size_t>(3 * n), -3.0f, 3.0f);
    const auto r = loom::test::random_floats(rng, static_cast<size_t>(3 * n), -3.0f, 3.0f);
    std::vector<f16> rh(r.size());
    for (size_t i = 0; i < r.size(); ++i) rh[i] = loom::device::f32_to_f16(r[i]);
    std::vector<float> rw(r.size());
    for (size_t i = 0; i < r.size(); ++i) rw[i] = loom::device::f16_to_f32(rh[i]);
    const std::vector<float> bias = {0.25f, -0.5f, 1.0f};
    for (int64_t cs : {1, 0})
        for (bool after : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "cs " << cs << (after ? ", after the activation" : ""));
            Epilogue half, wide;
            half.bias = wide.bias = {bias.data(), 1, 0};
            half.act = wide.act = Act::LEAKY_RELU;
            half.alpha = wide.alpha = 0.1f;
            half.residual_after_act = wide.residual_after_act = after;
            half.residual = {nullptr, n, cs, rh.data()};
            wide.residual = {rw.data(), n, cs};
            EXPECT_FALSE(half.trivial());
            std::vector<float> a = c0, b = c0;
            for (int64_t i = 0; i < 3; ++i) {
                apply_epilogue(half, a.data() + i * n + 5, i, 5, n - 5);
                apply_epilogue(wide, b.data() + i * n + 5, i, 5, n - 5);
            }
            EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
            EXPECT_NE(std::memcmp(a.data(), c0.data(), a.size() * sizeof(float)), 0);
        }
}

// The fp16 B packer gives the fp32 packer's panels of the widened values, contiguous rows
// (cs 1) and strided ones alike, partial panels zero-filled, at both NR.
TEST(GemmPackB, Fp16PanelsAreTheWidenedFp32Ones) {
    using loom::device::f16;
    std::mt19937 rng(5);
    const auto v = loom::test::random_floats(rng, 40 * 90);
    std::vector<f16> h(v.size());
    std::vector<float> w(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = loom::device::f32_to_f16(v[i]), w[i] = loom::device::f16_to_f32(h[i]);
    for (int64_t nr : {16, 32})
        for (int64_t cs : {1, 2}) {
            SCOPED_TRACE(::testing::Message() << "nr " << nr << ", cs " << cs);
            const MatViewF16 bh{h.data(), 90, cs};
            const MatView bw{w.data(), 90, cs};
            const int64_t k0 = 3, kc = 29, j0 = 5, nc = 90 / cs - 5;
            const size_t size = static_cast<size_t>((nc + nr - 1) / nr * nr * kc);
            std::vector<float> a(size, 7.0f), b(size, 8.0f);
            gemm_pack_b_strided_f16(&bh, k0, kc, j0, nc, nr, a.data());
            gemm_pack_b_strided(&bw, k0, kc, j0, nc, nr, b.data());
            EXPECT_EQ(std::memcmp(a.data(), b.data(), size * sizeof(float)), 0);
        }
}

TEST(CpuScratch, NestedScopesNeverMoveOuterBuffers) {
    ScratchScope outer;
    float* a = outer.alloc(100);
    a[0] = 1.0f, a[99] = 2.0f;
    {
        ScratchScope inner;
        float* b = inner.alloc(size_t{1} << 22);  // larger than the first block: a new block
        b[0] = 3.0f;
        EXPECT_NE(a, b);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
    }
    float* c = outer.alloc(10);
    EXPECT_EQ(a[0], 1.0f);
    EXPECT_EQ(a[99], 2.0f);
    EXPECT_GE(c, a + 100);  // the outer scope keeps what it took
}

// Under ASan the scratch arena poisons all but what it hands out: a buffer's last float is
// addressable, the one after it is not (nor the redzone before the next buffer), and a buffer
// given back by its scope is poisoned again, so kernels' scratch overruns are reported.
TEST(CpuScratch, UnderAsanOnlyTheBuffersHandedOutAreAddressable) {
#if LOOM_ASAN
    ScratchScope outer;
    float* a = outer.alloc(37);
    EXPECT_FALSE(__asan_address_is_poisoned(a));
    EXPECT_FALSE(__asan_address_is_poisoned(a + 36));
    EXPECT_TRUE(__asan_address_is_poisoned(a + 37));
    float* b = nullptr;
    {
        ScratchScope inner;
        b = inner.alloc(64);
        EXPECT_FALSE(__asan_address_is_poisoned(b + 63));
        EXPECT_TRUE(__asan_address_is_poisoned(b + 64));
        EXPECT_TRUE(__asan_address_is_poisoned(b - 1));  // the redzone after a
    }
    EXPECT_TRUE(__asan_address_is_poisoned(b));  // given back
    EXPECT_FALSE(__asan_address_is_poisoned(a + 36));
#else
    GTEST_SKIP() << "checked in the sanitizer build (SAN=1)";
#endif
}

}  // namespace

}  // namespace test_cpu_gemm
