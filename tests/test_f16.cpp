// f16 storage conversions (device/types.hpp): f32_to_f16 rounds to nearest even, overflows to
// infinity and keeps NaN; f16_to_f32 is exact. Checked against an independent float64
// implementation (decode by formula, encode by std::nearbyint on the f16 grid) with no
// tolerance: every conversion has exactly one correct answer.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "device/types.hpp"
#include "test_util.hpp"

namespace test_f16 {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::device::f16;
using loom::device::f16_to_f32;
using loom::device::f32_to_f16;
using loom::test::ref_decode_f16;
using loom::test::ref_round_f16;

uint16_t to_bits(float v) { return f32_to_f16(v).bits; }

bool is_f16_nan(uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }

uint32_t float_bits(float v) {
    uint32_t x;
    std::memcpy(&x, &v, 4);
    return x;
}

float float_from_bits(uint32_t x) {
    float v;
    std::memcpy(&v, &x, 4);
    return v;
}

TEST(F16, DecodeMatchesTheIeeeFormulaForAllPatterns) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const uint16_t h = static_cast<uint16_t>(b);
        const float v = f16_to_f32(f16{h});
        const double want = ref_decode_f16(h);
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(v)) << "pattern 0x" << std::hex << b;
            continue;
        }
        ASSERT_EQ(static_cast<double>(v), want) << "pattern 0x" << std::hex << b;
        ASSERT_EQ(std::signbit(v), (h & 0x8000u) != 0) << "pattern 0x" << std::hex << b;
    }
}

TEST(F16, EveryNonNanPatternRoundTripsThroughF32) {
    int checked = 0;
    for (uint32_t b = 0; b < 65536; ++b) {
        const uint16_t h = static_cast<uint16_t>(b);
        if (is_f16_nan(h)) continue;
        ASSERT_EQ(to_bits(f16_to_f32(f16{h})), h) << "pattern 0x" << std::hex << b;
        ++checked;
    }
    EXPECT_EQ(checked, 65536 - 2 * 1023);  // 2 x 1023 NaN patterns skipped
}

TEST(F16, NanStaysNan) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const uint16_t h = static_cast<uint16_t>(b);
        if (!is_f16_nan(h)) continue;
        ASSERT_TRUE(std::isnan(f16_to_f32(f16{h}))) << "pattern 0x" << std::hex << b;
        ASSERT_TRUE(is_f16_nan(to_bits(f16_to_f32(f16{h})))) << "pattern 0x" << std::hex << b;
    }
    EXPECT_TRUE(is_f16_nan(to_bits(std::numeric_limits<float>::quiet_NaN())));
    EXPECT_TRUE(is_f16_nan(to_bits(-std::numeric_limits<float>::quiet_NaN())));
    // Payload only in the low 13 bits, which narrowing drops: must not turn into infinity.
    EXPECT_TRUE(is_f16_nan(to_bits(float_from_bits(0x7f800001u))));
    EXPECT_TRUE(is_f16_nan(to_bits(float_from_bits(0xff800fffu))));
}

TEST(F16, RoundsToNearestEvenAtTies) {
    EXPECT_EQ(to_bits(1.0f), 0x3c00);
    EXPECT_EQ(to_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie between 1 and 1 + 2^-10: even
    EXPECT_EQ(to_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie between odd 0x3c01 and even 0x3c02
    EXPECT_EQ(to_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);  // above the tie
    EXPECT_EQ(to_bits(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -20)), 0x3c00);  // below the tie
    EXPECT_EQ(to_bits(-(1.0f + 3 * std::ldexp(1.0f, -11))), 0xbc02);
    // Carry out of the mantissa into the exponent: 2 - 2^-12 rounds up to 2.
    EXPECT_EQ(to_bits(2.0f - std::ldexp(1.0f, -12)), 0x4000);
    EXPECT_EQ(to_bits(0.1f), 0x2e66);
    EXPECT_EQ(to_bits(3.14159265f), 0x4248);
}

TEST(F16, OverflowsToInfinity) {
    EXPECT_EQ(to_bits(65504.0f), 0x7bff);  // largest finite
    EXPECT_EQ(to_bits(65519.0f), 0x7bff);  // below the midpoint to 65536
    EXPECT_EQ(to_bits(65520.0f), 0x7c00);  // the midpoint ties to even, which is infinity
    EXPECT_EQ(to_bits(-65520.0f), 0xfc00);
    EXPECT_EQ(to_bits(1e10f), 0x7c00);
    EXPECT_EQ(to_bits(std::numeric_limits<float>::max()), 0x7c00);
    EXPECT_EQ(to_bits(std::numeric_limits<float>::infinity()), 0x7c00);
    EXPECT_EQ(to_bits(-std::numeric_limits<float>::infinity()), 0xfc00);
    EXPECT_TRUE(std::isinf(f16_to_f32(f16{0x7c00})));
}

TEST(F16, SubnormalsRoundToNearestEven) {
    const float tiny = std::ldexp(1.0f, -24);
    EXPECT_EQ(to_bits(tiny), 0x0001);                          // smallest subnormal
    EXPECT_EQ(to_bits(std::ldexp(1.0f, -25)), 0x0000);         // half of it: ties to even zero
    EXPECT_EQ(to_bits(std::ldexp(3.0f, -26)), 0x0001);         // 0.75 of it rounds up
    EXPECT_EQ(to_bits(std::ldexp(1.0f, -26)), 0x0000);         // 0.25 of it rounds down
    EXPECT_EQ(to_bits(std::ldexp(3.0f, -25)), 0x0002);         // 1.5 ulp: tie to even 2
    EXPECT_EQ(to_bits(std::ldexp(5.0f, -25)), 0x0002);         // 2.5 ulp: tie to even 2
    EXPECT_EQ(to_bits(std::ldexp(1023.0f, -24)), 0x03ff);      // largest subnormal
    EXPECT_EQ(to_bits(std::ldexp(2047.0f, -25)), 0x0400);      // tie above it carries to the smallest normal
    EXPECT_EQ(to_bits(std::ldexp(1.0f, -14)), 0x0400);
    EXPECT_EQ(to_bits(std::numeric_limits<float>::denorm_min()), 0x0000);
    EXPECT_EQ(to_bits(-std::ldexp(3.0f, -26)), 0x8001);
    EXPECT_EQ(f16_to_f32(f16{0x0001}), tiny);
    EXPECT_EQ(f16_to_f32(f16{0x03ff}), std::ldexp(1023.0f, -24));
}

TEST(F16, KeepsTheSignOfZero) {
    EXPECT_EQ(to_bits(0.0f), 0x0000);
    EXPECT_EQ(to_bits(-0.0f), 0x8000);
    EXPECT_EQ(to_bits(-std::ldexp(1.0f, -30)), 0x8000);  // underflow keeps the sign
    EXPECT_EQ(to_bits(-std::ldexp(1.0f, -25)), 0x8000);  // tie to even, negative
    const float nz = f16_to_f32(f16{0x8000});
    EXPECT_EQ(nz, 0.0f);
    EXPECT_TRUE(std::signbit(nz));
    EXPECT_FALSE(std::signbit(f16_to_f32(f16{0x0000})));
}

// Random floats over the whole f16 range and beyond, against the independent rounding; exact.
TEST(F16, EncodeMatchesFloat64ReferenceOnRandomFloats) {
    ASSERT_EQ(std::fegetround(), FE_TONEAREST);
    std::mt19937 rng(1234);
    std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
    std::uniform_int_distribution<int> exponent(127 - 28, 127 + 17);  // below the subnormals to past 65504
    std::uniform_int_distribution<uint32_t> any(0, 0xffffffffu);
    for (int i = 0; i < 1 << 20; ++i) {
        uint32_t x;
        if (i % 8 == 7) {
            x = any(rng);
        } else {
            x = (static_cast<uint32_t>(exponent(rng)) << 23) | mantissa(rng);
            if (i & 1) x |= 0x80000000u;
            if (i % 4 == 2) x &= ~0xfffu;  // clear low bits so that exact ties come up often
        }
        const float v = float_from_bits(x);
        const uint16_t got = to_bits(v);
        if (std::isnan(v)) {
            ASSERT_TRUE(is_f16_nan(got)) << std::hex << x;
            continue;
        }
        const double want = ref_round_f16(static_cast<double>(v));
        const double have = ref_decode_f16(got);
        ASSERT_EQ(have, want) << "f32 bits 0x" << std::hex << x << " value " << v;
        ASSERT_EQ(std::signbit(have), std::signbit(v)) << "f32 bits 0x" << std::hex << x;
    }
}

// Every f32 in [1, 2) and in the top binade of the subnormals: exhaustive where rounding and
// the subnormal shift are most intricate.
TEST(F16, EncodeIsExactOnTwoWholeBinades) {
    for (uint32_t start : {0x3f800000u, float_bits(std::ldexp(1.0f, -15))}) {
        for (uint32_t m = 0; m < (1u << 23); m += 7) {  // stride 7 covers every residue of the 13 dropped bits
            const float v = float_from_bits(start + m);
            ASSERT_EQ(ref_decode_f16(to_bits(v)), ref_round_f16(v)) << "f32 bits 0x" << std::hex << (start + m);
        }
    }
}

}  // namespace

}  // namespace test_f16
