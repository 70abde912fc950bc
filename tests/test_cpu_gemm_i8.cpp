// Host int8 GEMM (device/kernels/cpu/gemm_i8.hpp) against an int64 reference, bit for bit, on
// every instruction set the CPU has (AVX-512: with VNNI where the CPU has it): odd M, N and K
// (K not a multiple of the pair, of the K slice or of anything), strided and transposed views,
// -128 in both operands, the int32 output and the float epilogue (compared with the same fp32
// operations on the exact sum), and K at the int32 limit kGemmIntKMax with every product at its
// largest magnitude, 127 x -128. Every micro-kernel is also checked directly against the
// reference, accumulating or not, and the vectorised int8 quantizer against quantize_value,
// value by value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernels/cpu/gemm_i8.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cube_util.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_cpu_gemm_i8 {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device::cpu;
using loom::ThreadPool;
using loom::test::IsaGuard;

struct Shape {
    int64_t m, n, k;
};

// The exact sums of A (m x k, through view a) x B (k x n, row-major).
std::vector<int64_t> reference(const Shape& s, MatViewI8 a, const std::vector<int8_t>& b) {
    std::vector<int64_t> c(size_t(s.m * s.n), 0);
    for (int64_t i = 0; i < s.m; ++i)
        for (int64_t k = 0; k < s.k; ++k) {
            const int64_t av = a.p[i * a.rs + k * a.cs];
            for (int64_t j = 0; j < s.n; ++j) c[size_t(i * s.n + j)] += av * b[size_t(k * s.n + j)];
        }
    return c;
}

class GemmI8Shapes : public ::testing::TestWithParam<std::tuple<Isa, Shape>> {};

TEST_P(GemmI8Shapes, ExactAgainstInt64) {
    auto [want, sh] = GetParam();
    SKIP_UNLESS_ISA(want);
    IsaGuard guard(want);
    ThreadPool pool(2);
    const uint32_t seed = static_cast<uint32_t>(sh.m * 131 + sh.n * 7 + sh.k);
    // Full int8 range in both operands (-128 x -128 included): exact whatever the signs.
    const auto a = loom::test::random_int8(size_t(sh.m * sh.k), seed);
    const auto b = loom::test::random_int8(size_t(sh.k * sh.n), seed + 1);
    std::mt19937 rng(seed + 2);
    const auto dq = loom::test::random_floats(rng, size_t(sh.m), 0.001f, 0.01f);
    const auto bias = loom::test::random_floats(rng, size_t(sh.m));
    std::vector<int8_t> at(a.size());  // A stored K x M
    for (int64_t i = 0; i < sh.m; ++i)
        for (int64_t k = 0; k < sh.k; ++k) at[size_t(k * sh.m + i)] = a[size_t(i * sh.k + k)];
    const MatViewI8 bv{b.data(), sh.n, 1};

    for (bool transposed : {false, true}) {
        SCOPED_TRACE(transposed ? "A transposed" : "A row-major");
        const MatViewI8 av = transposed ? MatViewI8{at.data(), 1, sh.m} : MatViewI8{a.data(), sh.k, 1};
        const std::vector<int64_t> want_sums = reference(sh, av, b);

        // int32 output, no epilogue.
        std::vector<int16_t> ap(gemm_packed_a_i16(sh.m, sh.k));
        gemm_pack_a(sh.m, sh.k, av, ap.data());
        std::vector<int32_t> ci(want_sums.size(), 0x5a5a5a5a);
        gemm_packed(sh.m, sh.n, sh.k, ap.data(), static_cast<PackBI8>(gemm_pack_b_strided), &bv, ci.data(), sh.n, pool);
        int64_t bad = 0;
        for (size_t i = 0; i < ci.size(); ++i)
            if (ci[i] != want_sums[i] && ++bad <= 5)
                ADD_FAILURE() << "C[" << i << "] = " << ci[i] << ", want " << want_sums[i];
        EXPECT_EQ(bad, 0);

        // Float output through the epilogue: float(sum) x dequant + bias, relu, as fp32 does it.
        Epilogue ep;
        ep.dequant = {dq.data(), 1, 0};
        ep.bias = {bias.data(), 1, 0};
        ep.act = Act::RELU;
        std::vector<float> cf(want_sums.size(), std::nanf(""));
        gemm(sh.m, sh.n, sh.k, av, bv, cf.data(), sh.n, ep, pool);
        bad = 0;
        for (int64_t i = 0; i < sh.m; ++i)
            for (int64_t j = 0; j < sh.n; ++j) {
                const size_t o = size_t(i * sh.n + j);
                const float want_y = std::max(static_cast<float>(want_sums[o]) * dq[size_t(i)] + bias[size_t(i)], 0.0f);
                if (cf[o] != want_y && ++bad <= 5)
                    ADD_FAILURE() << "Y[" << i << "," << j << "] = " << cf[o] << ", want " << want_y;
            }
        EXPECT_EQ(bad, 0);
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, GemmI8Shapes,
                         ::testing::Combine(::testing::ValuesIn(loom::test::kAllIsas),
                                            ::testing::Values(Shape{1, 1, 1}, Shape{6, 16, 2}, Shape{7, 17, 13},
                                                              Shape{13, 29, 0}, Shape{64, 300, 577},
                                                              Shape{97, 257, 1031}, Shape{5, 1000, 3},
                                                              Shape{200, 3, 70}, Shape{3, 40, 4099})),
                         [](const auto& info) {
                             const Shape s = std::get<1>(info.param);
                             return std::string(isa_name(std::get<0>(info.param))) + "_" + std::to_string(s.m) + "x" +
                                    std::to_string(s.n) + "x" + std::to_string(s.k);
                         });

// K = kGemmIntKMax = 132104 (the longest reduction check_int8_reduction lets through) with every
// product 127 x -128 or -127 x -128: sums of +-2147482624, 1023 below INT32_MAX. Weights of -128
// in A (the conv's operand order), activations +-127 in B; one row mixes in random weights and
// one column random activations so the sums are not all alike.
class GemmI8Limit : public ::testing::TestWithParam<Isa> {};

TEST_P(GemmI8Limit, SumsAtTheInt32LimitAreExact) {
    const Isa want = GetParam();
    SKIP_UNLESS_ISA(want);
    IsaGuard guard(want);
    ThreadPool pool(2);
    const Shape sh{7, 17, kGemmIntKMax};
    ASSERT_GT(sh.k * kGemmIntProductMax, (int64_t{1} << 31) - 1 - kGemmIntProductMax);
    std::vector<int8_t> a(size_t(sh.m * sh.k), -128), b(size_t(sh.k * sh.n));
    std::mt19937 rng(132104);
    for (int64_t k = 0; k < sh.k; ++k) {
        a[size_t(3 * sh.k + k)] = static_cast<int8_t>(int32_t(rng() % 256) - 128);
        for (int64_t j = 0; j < sh.n; ++j)
            b[size_t(k * sh.n + j)] = j == 5 ? static_cast<int8_t>(int32_t(rng() % 255) - 127) : j % 2 ? 127 : -127;
    }
    const MatViewI8 av{a.data(), sh.k, 1}, bv{b.data(), sh.n, 1};
    const std::vector<int64_t> want_sums = reference(sh, av, b);
    EXPECT_EQ(want_sums[0], 127 * 128 * sh.k);
    EXPECT_EQ(want_sums[1], -127 * 128 * sh.k);
    std::vector<int16_t> ap(gemm_packed_a_i16(sh.m, sh.k));
    gemm_pack_a(sh.m, sh.k, av, ap.data());
    std::vector<int32_t> ci(want_sums.size());
    gemm_packed(sh.m, sh.n, sh.k, ap.data(), static_cast<PackBI8>(gemm_pack_b_strided), &bv, ci.data(), sh.n, pool);
    for (size_t i = 0; i < ci.size(); ++i) EXPECT_EQ(ci[i], want_sums[i]) << "C[" << i / sh.n << "," << i % sh.n << "]";
    std::vector<float> cf(want_sums.size());
    gemm(sh.m, sh.n, sh.k, av, bv, cf.data(), sh.n, Epilogue{}, pool);
    for (size_t i = 0; i < cf.size(); ++i) EXPECT_EQ(cf[i], static_cast<float>(want_sums[i])) << "Y[" << i << "]";
}

INSTANTIATE_TEST_SUITE_P(Cpu, GemmI8Limit, ::testing::ValuesIn(loom::test::kAllIsas),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

// One micro-kernel with panels of NR columns on the same random panels (int8 values held as
// int16, -128 included), with and without accumulation into C, against int64 sums.
void check_micro_kernel(MicroKernelI8 kernel, int64_t NR) {
    constexpr int64_t MR = kGemmI8MR, kp = 301;  // 602 values of K
    std::mt19937 rng(602);
    auto i8 = [&] { return static_cast<int16_t>(int32_t(rng() % 256) - 128); };
    std::vector<int16_t> a(size_t(kp * 2 * MR)), b(size_t(kp * 2 * NR));
    for (auto& v : a) v = i8();
    for (auto& v : b) v = i8();
    std::vector<int32_t> start(size_t(MR * NR));
    for (auto& v : start) v = int32_t(rng() % 2000001) - 1000000;
    std::vector<int64_t> want(size_t(MR * NR), 0);
    for (int64_t p = 0; p < kp; ++p)
        for (int64_t i = 0; i < MR; ++i)
            for (int64_t j = 0; j < NR; ++j)
                for (int64_t h = 0; h < 2; ++h)
                    want[size_t(i * NR + j)] += int64_t(a[size_t(p * 2 * MR + 2 * i + h)]) *
                                                b[size_t(p * 2 * NR + 2 * j + h)];
    // B panels are read with aligned loads: copy into 64-byte aligned storage.
    int16_t* bp = static_cast<int16_t*>(std::aligned_alloc(64, b.size() * sizeof(int16_t)));
    std::copy(b.begin(), b.end(), bp);
    for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
        const int64_t ldc = NR + 3;  // a row stride wider than the tile
        std::vector<int32_t> c(size_t(MR * ldc), 77);
        for (int64_t i = 0; i < MR; ++i)
            for (int64_t j = 0; j < NR; ++j) c[size_t(i * ldc + j)] = start[size_t(i * NR + j)];
        kernel(kp, a.data(), bp, c.data(), ldc, accumulate);
        for (int64_t i = 0; i < MR; ++i) {
            for (int64_t j = 0; j < NR; ++j)
                EXPECT_EQ(c[size_t(i * ldc + j)],
                          want[size_t(i * NR + j)] + (accumulate ? start[size_t(i * NR + j)] : 0))
                    << i << "," << j;
            for (int64_t j = NR; j < ldc; ++j) EXPECT_EQ(c[size_t(i * ldc + j)], 77) << "wrote past the tile";
        }
    }
    std::free(bp);
}

// Every micro-kernel the CPU can run, in its own NR.
TEST(GemmI8Micro, EveryKernelIsExact) {
    for (Isa level : loom::test::supported_isas()) {
        const GemmI8Micro um = gemm_i8_micro(level);
        SCOPED_TRACE(std::string(isa_name(level)) + " NR " + std::to_string(um.nr));
        if (level == Isa::AVX512) {
            EXPECT_EQ(um.nr, isa_has_vnni() ? 32 : 16);
        }
        check_micro_kernel(um.fn, um.nr);
    }
}

TEST(GemmI8Pack, PairRowInterleavesAndSignExtends) {
    int8_t r0[16], r1[16];
    for (int j = 0; j < 16; ++j) {
        r0[j] = static_cast<int8_t>(j == 0 ? -128 : j == 1 ? 127 : -j * 7);
        r1[j] = static_cast<int8_t>(j == 0 ? 127 : j == 1 ? -128 : j * 5 - 40);
    }
    int16_t d[2 * 16];
    gemm_i8_pack_pair(r0, r1, d);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(d[2 * j], r0[j]) << j;
        EXPECT_EQ(d[2 * j + 1], r1[j]) << j;
    }
}

// Rows of 0..40 values (the 16-wide vector body and every tail) of random values, ties, clamps,
// infinities, NaN and denormals, from f32 and f16: each int8 equals quantize_value's integer.
// On every instruction set (AVX-512 takes sixteen at a time, SSE2 four, then the scalar tail).
class QuantizeRowI8 : public ::testing::TestWithParam<Isa> {};

TEST_P(QuantizeRowI8, MatchesQuantizeValue) {
    SKIP_UNLESS_ISA(GetParam());
    IsaGuard guard(GetParam());
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> x = {0.25f,          0.75f,   1.25f,   -0.25f,  -0.75f, -1.25f, 63.25f,
                            63.75f,         -63.75f, 100.0f,  -100.0f, inf,    -inf,   std::nanf(""),
                            -std::nanf(""), 1e-40f,  -1e-40f, 0.0f,    -0.0f,  3e38f};
    std::mt19937 rng(40);
    std::uniform_real_distribution<float> u(-80.0f, 80.0f);
    while (x.size() < 41) x.push_back(u(rng));
    // The specials once more past the first 16 and 32, inside a wide path's second vector.
    for (size_t i = 0; i < 20; i += 3) x[20 + i] = x[i];
    std::shuffle(x.begin() + 20, x.end(), rng);
    std::vector<loom::device::f16> xh(x.size());
    for (size_t i = 0; i < x.size(); ++i) xh[i] = loom::device::f32_to_f16(x[i]);
    for (float xs : {0.5f, 0.37f}) {
        for (size_t n = 0; n <= 40; ++n) {
            std::vector<int8_t> q(n + 1, 99), qh(n + 1, 99);
            loom::device::ops::quantize_row_i8(x.data(), int64_t(n), xs, q.data());
            loom::device::ops::quantize_row_i8(xh.data(), int64_t(n), xs, qh.data());
            for (size_t i = 0; i < n; ++i) {
                EXPECT_EQ(q[i], int8_t(loom::device::ops::quantize_value(x[i], xs))) << "x = " << x[i] << ", n " << n;
                const float hv = loom::device::f16_to_f32(xh[i]);
                EXPECT_EQ(qh[i], int8_t(loom::device::ops::quantize_value(hv, xs))) << "x = " << hv << ", n " << n;
            }
            EXPECT_EQ(q[n], 99) << "wrote past n = " << n;
            EXPECT_EQ(qh[n], 99) << "wrote past n = " << n;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, QuantizeRowI8, ::testing::ValuesIn(loom::test::kAllIsas),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace

}  // namespace test_cpu_gemm_i8
