// cast (device/kernels/cast.cpp): Y = X converted to Y's dtype, ONNX Cast semantics with the
// out-of-range choice the kernel documents (saturate; NaN -> 0).
// Reference: the value of each source element in float64 (exact for every source used here),
// then: to f32 the nearest float, to f16 the nearest f16 (ref_round_f16), float to integer
// truncation toward zero clamped to the range, integer to integer the value modulo 2^bits.
// Tolerance 0: every conversion is exact or a single correctly rounded step.
// Data: random values spanning each type's range, plus edge values (NaN, +-inf, +-0.5, range
// ends and one past them), fixed seeds, all 36 dtype pairs.
#include <gtest/gtest.h>

#include <bit>
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

namespace test_kernel_cast {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

using Shape = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("cast"); }

const DType kTypes[] = {DType::F32, DType::F16, DType::I8, DType::I32, DType::I64, DType::U8};

// A host tensor of any dtype, stored as bytes.
struct Buf {
    DType dtype;
    std::vector<uint8_t> bytes;
    TensorRef ref(const Shape& dims) {
        TensorRef t;
        t.dtype = dtype;
        for (int64_t d : dims) t.dims[static_cast<size_t>(t.rank++)] = d;
        t.data = bytes.data();
        return t;
    }
};

// Value of element i in float64 (exact: i64 sources stay within 2^53 or are powers of two).
double get(const Buf& b, size_t i) {
    const uint8_t* p = b.bytes.data();
    switch (b.dtype) {
    case DType::F32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::F16: { uint16_t h; std::memcpy(&h, p + 2 * i, 2); return ref_decode_f16(h); }
    case DType::I8: return static_cast<int8_t>(p[i]);
    case DType::I32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::I64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case DType::U8: return p[i];
    }
    return 0;
}

int64_t get_int(const Buf& b, size_t i) {
    if (b.dtype == DType::I64) {
        int64_t v;
        std::memcpy(&v, b.bytes.data() + 8 * i, 8);
        return v;
    }
    return static_cast<int64_t>(get(b, i));
}

bool is_int(DType t) { return t != DType::F32 && t != DType::F16; }

int bits(DType t) { return static_cast<int>(dtype_size(t)) * 8; }

// Source data of `n` elements: the edge values first, then random values across the range.
Buf source(DType t, size_t n, std::mt19937& rng) {
    Buf b{t, std::vector<uint8_t>(n * dtype_size(t))};
    const double nan = std::nan(""), inf = HUGE_VAL;
    const std::vector<double> float_edges = {nan, inf, -inf, 0.5, -0.5, -0.99, 127.9, 128.0, -128.5, -129.0, 255.9,
                                             256.0, -1.0, 1e10, -1e10, 2147483520.0, 2147483648.0, -2147483904.0,
                                             3e9, 1e19, -1e19, 65504.0, 70000.0, 0.0};
    const std::vector<int64_t> int_edges = {0, -1, 1, 127, -128, 128, 255, 256, -129, 65504, 65519, 65520,
                                            std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
                                            std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                            (int64_t{1} << 24) + 1, (int64_t{1} << 40) + 3};
    std::uniform_real_distribution<double> fr(-70000, 70000), small(-300, 300);
    std::uniform_int_distribution<int64_t> ir(-(int64_t{1} << 50), int64_t{1} << 50);
    uint8_t* p = b.bytes.data();
    for (size_t i = 0; i < n; ++i) {
        switch (t) {
        case DType::F32: {
            float v = static_cast<float>(i < float_edges.size() ? float_edges[i] : i % 2 ? small(rng) : fr(rng) * 1e5);
            std::memcpy(p + 4 * i, &v, 4);
            break;
        }
        case DType::F16: {
            const double d = i < float_edges.size() ? float_edges[i] : i % 2 ? small(rng) : fr(rng);
            f16 v = f32_to_f16(static_cast<float>(d));
            std::memcpy(p + 2 * i, &v.bits, 2);
            break;
        }
        default: {
            const int64_t v = i < int_edges.size() ? int_edges[i] : ir(rng);
            // Reduce into the source type by keeping the low bits (the edge values too).
            switch (t) {
            case DType::I8: p[i] = static_cast<uint8_t>(v); break;
            case DType::U8: p[i] = static_cast<uint8_t>(v); break;
            case DType::I32: { int32_t w = static_cast<int32_t>(v); std::memcpy(p + 4 * i, &w, 4); break; }
            default: std::memcpy(p + 8 * i, &v, 8); break;
            }
        }
        }
    }
    return b;
}

// The expected value of Y element i in float64 (integers exact within 2^53; i64 targets are
// compared through get_int).
double expect_value(const Buf& x, size_t i, DType to) {
    const double v = get(x, i);
    if (to == DType::F32) {
        if (x.dtype == DType::I64) return static_cast<float>(get_int(x, i));
        return static_cast<float>(v);  // sources other than i64 are exact in float64
    }
    if (to == DType::F16) return ref_round_f16(v);
    if (!is_int(x.dtype)) {  // float -> integer: truncate, saturate, NaN -> 0
        if (std::isnan(v)) return 0;
        const double lo = to == DType::U8 ? 0 : -std::ldexp(1.0, bits(to) - 1);
        const double hi = to == DType::U8 ? 255 : std::ldexp(1.0, bits(to) - 1) - 1;
        return std::clamp(std::trunc(v), lo, hi);
    }
    return 0;  // integer -> integer: see expect_int
}

int64_t expect_int(const Buf& x, size_t i, DType to) {
    const uint64_t u = static_cast<uint64_t>(get_int(x, i));
    const int b = bits(to);
    if (b == 64) return static_cast<int64_t>(u);
    const uint64_t low = u & ((uint64_t{1} << b) - 1);
    if (to == DType::U8) return static_cast<int64_t>(low);
    return low >= (uint64_t{1} << (b - 1)) ? static_cast<int64_t>(low) - (int64_t{1} << b) : static_cast<int64_t>(low);
}

TEST(CastAllPairs, MatchesReferenceExactly) {
    ThreadPool pool(3);
    uint32_t seed = 1;
    for (DType from : kTypes)
        for (DType to : kTypes)
            for (const Shape& s : {Shape{}, Shape{1, 1}, Shape{7, 13, 5}, Shape{3, 40009}}) {
                SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)) + " " +
                             testing::PrintToString(s));
                size_t n = 1;
                for (int64_t d : s) n *= static_cast<size_t>(d);
                std::mt19937 rng(seed++);
                Buf x = source(from, n, rng);
                Buf y{to, std::vector<uint8_t>(n * dtype_size(to), 0xab)};
                KernelLaunch l;
                l.inputs = {x.ref(s)};
                l.outputs = {y.ref(s)};
                loom::Status st = kernel().run(l, pool);
                ASSERT_TRUE(st.ok()) << st.to_string();
                int bad = 0;
                for (size_t i = 0; i < n; ++i) {
                    bool ok;
                    std::string got, want;
                    if (is_int(from) && is_int(to)) {
                        ok = get_int(y, i) == expect_int(x, i, to);
                        got = std::to_string(get_int(y, i));
                        want = std::to_string(expect_int(x, i, to));
                    } else if (to == DType::I64) {
                        const double e = expect_value(x, i, to);
                        const int64_t w = e >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(e);
                        ok = get_int(y, i) == w;
                        got = std::to_string(get_int(y, i));
                        want = std::to_string(w);
                    } else {
                        const double g = get(y, i), e = expect_value(x, i, to);
                        ok = g == e || (std::isnan(g) && std::isnan(e));
                        got = std::to_string(g);
                        want = std::to_string(e);
                    }
                    if (!ok && bad++ < 5)
                        ADD_FAILURE() << "element " << i << " (" << get(x, i) << ") gave " << got << ", want " << want;
                }
                EXPECT_EQ(bad, 0);
            }
}

TEST(CastSemantics, SaturatesTruncatesAndMapsNanToZero) {
    ThreadPool pool(1);
    std::vector<float> x = {2.9f, -2.9f, 300.0f, -300.0f, std::nanf(""), -0.7f, 5e9f, -5e9f};
    std::vector<int8_t> i8(x.size());
    std::vector<uint8_t> u8(x.size());
    std::vector<int32_t> i32(x.size());
    KernelLaunch l;
    l.inputs = {ref(x, {8})};
    l.outputs = {ref(i8, {8})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(i8, (std::vector<int8_t>{2, -2, 127, -128, 0, 0, 127, -128}));
    l.outputs = {ref(u8, {8})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(u8, (std::vector<uint8_t>{2, 0, 255, 0, 0, 0, 255, 0}));
    l.outputs = {ref(i32, {8})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(i32, (std::vector<int32_t>{2, -2, 300, -300, 0, 0, std::numeric_limits<int32_t>::max(),
                                         std::numeric_limits<int32_t>::min()}));
    std::vector<int32_t> wide = {300, -129, 255};
    l.inputs = {ref(wide, {3})};
    l.outputs = {ref(i8, {3})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(i8[0], 44);  // 300 - 256: integer narrowing wraps
    EXPECT_EQ(i8[1], 127);
    EXPECT_EQ(i8[2], -1);
}

// The kernels' inline f16 conversions must agree bit for bit with device/types.cpp: every f16
// to f32, and f32 to f16 on the bit patterns of the exponents around the f16 range (both signs,
// one in 251) plus random patterns of all exponents (NaN payloads included).
TEST(CastF16, ConversionsMatchTypesCppBitForBit) {
    ThreadPool pool(2);
    std::vector<f16> h(65536);
    for (uint32_t i = 0; i < 65536; ++i) h[i].bits = static_cast<uint16_t>(i);
    std::vector<float> f(65536);
    KernelLaunch l;
    l.inputs = {ref(h, {65536})};
    l.outputs = {ref(f, {65536})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    for (uint32_t i = 0; i < 65536; ++i) {
        const float want = f16_to_f32(h[i]);
        ASSERT_EQ(std::memcmp(&f[i], &want, 4), 0) << std::hex << i;
    }
    std::vector<float> src;
    for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 251) {
        const uint32_t e = static_cast<uint32_t>(u >> 23) & 0xffu;
        if (e >= 100 && e <= 145) src.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
        else u += uint64_t{251} << 12;  // sparse elsewhere
    }
    std::mt19937 rng(77);
    for (int i = 0; i < 1 << 20; ++i) src.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
    std::vector<f16> out(src.size());
    const auto n = static_cast<int64_t>(src.size());
    l.inputs = {shape_ref(DType::F32, {n}, src.data())};
    l.outputs = {shape_ref(DType::F16, {n}, out.data())};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    int bad = 0;
    for (size_t i = 0; i < src.size(); ++i)
        if (out[i].bits != f32_to_f16(src[i]).bits && bad++ < 5)
            ADD_FAILURE() << std::hex << std::bit_cast<uint32_t>(src[i]) << " gave " << out[i].bits << ", want "
                          << f32_to_f16(src[i]).bits;
    EXPECT_EQ(bad, 0);
}

TEST(CastShapes, SameDtypeInPlaceAndEmpty) {
    ThreadPool pool(1);
    std::vector<float> x = {1.5f, -2.0f, 3.25f};
    KernelLaunch l;
    l.inputs = {ref(x, {3})};
    l.outputs = {ref(x, {3})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(x, (std::vector<float>{1.5f, -2.0f, 3.25f}));
    std::vector<float> e;
    std::vector<f16> eh;
    l.inputs = {ref(e, {2, 0})};
    l.outputs = {ref(eh, {2, 0})};
    EXPECT_TRUE(kernel().run(l, pool).ok());
    EXPECT_TRUE(kernel().cost(l, preset_spec("dc")).ok());
}

TEST(CastArgs, RejectsMalformedLaunches) {
    std::vector<float> x(12, 1.0f);
    std::vector<int32_t> y(12, 0);
    KernelLaunch l;
    l.inputs = {ref(x, {3, 4})};
    l.outputs = {ref(y, {12})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "cast: output Y is 12, want X's shape 3x4");
    l.outputs = {ref(y, {3, 4})};
    l.attrs = {{"to", int64_t{6}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "cast: unknown attribute 'to'");
    l.attrs = {};
    TensorRef odd = ref(y, {3, 4});
    odd.dtype = static_cast<DType>(42);
    l.outputs = {odd};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "cast: output Y dtype");
    l.outputs = {ref(y, {3, 4}), ref(y, {3, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "cast takes 1 output(s), got 2");
    EXPECT_EQ(y, std::vector<int32_t>(12, 0));
}

TEST(CastCost, PositiveMonotonicAndScheduleChecked) {
    auto launch = [](DType from, DType to, int64_t n) {
        KernelLaunch l;
        l.inputs = {shape_ref(from, {n})};
        l.outputs = {shape_ref(to, {n})};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType from : kTypes)
            for (DType to : kTypes) {
                SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(from)) + " -> " +
                             std::string(dtype_name(to)));
                double prev = 0;
                for (int64_t n = 1; n <= int64_t{1} << 28; n = n * 5 + 3) {
                    CycleBreakdown cb = cost_ok(kernel(), launch(from, to, n), preset);
                    EXPECT_GT(cb.total, 0);
                    EXPECT_GE(cb.total, prev) << n;
                    prev = cb.total;
                }
                KernelLaunch l = launch(from, to, 100000);
                l.tiling = VectorSchedule{3, true, 0};
                EXPECT_NE(cost_error(kernel(), l, preset).message().find("cast: schedule: ub_tile = 3"),
                          std::string::npos);
            }
    const int64_t n = 1 << 22;
    EXPECT_GT(cost_ok(kernel(), launch(DType::F32, DType::I8, n), "dc").vector,
              cost_ok(kernel(), launch(DType::F32, DType::F32, n), "dc").vector);
}

}  // namespace

}  // namespace test_kernel_cast
