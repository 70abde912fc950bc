// eltwise (device/kernels/eltwise.cpp): C = act(A op B) for op in add, sub, mul, max, min.
// Functional, tolerance 0: f32 against the float64 result rounded once to float (float64 holds
// every product of two floats exactly and 53 >= 2 x 24 + 2 makes rounding a float64 sum to
// float equal to rounding the exact sum); f16 against the exact result rounded once to f16 by an
// independent float64 implementation (fp32 intermediates are exact or, with 24 >= 2 x 11 + 2,
// round the same). Fixed seeds; sizes 1, 17 and 1000003.
// Cost: legality of VectorSchedule and monotonic properties on the "edge" and "dc" presets; the
// fused sides' GM bytes and in-place room.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/runtime.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

enum Op { ADD, SUB, MUL, MAX, MIN };

KernelAttrs eltwise_attrs(int op, int relu) {
    static const char* const names[] = {"add", "sub", "mul", "max", "min"};
    return {{"op", std::string(names[op])}, {"activation", std::string(relu ? "relu" : "none")}};
}
const char* const kOpNames[] = {"add", "sub", "mul", "max", "min"};

double apply(int op, double u, double w) {
    switch (op) {
    case ADD: return u + w;
    case SUB: return u - w;
    case MUL: return u * w;
    case MAX: return std::max(u, w);
    default: return std::min(u, w);
    }
}

// Floats of both signs over 2^-20 .. 2^20; every eighth B equals A (sub gives 0, max/min tie).
void fill(std::mt19937& rng, std::vector<float>& a, std::vector<float>& b) {
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    std::uniform_int_distribution<int> ex(-20, 20), coin(0, 1);
    auto draw = [&] { return (coin(rng) ? -1.0f : 1.0f) * std::ldexp(mant(rng), ex(rng)); };
    for (size_t i = 0; i < a.size(); ++i) {
        a[i] = draw();
        b[i] = i % 8 == 3 ? a[i] : draw();
    }
}

struct Case {
    int op;
    bool relu;
};

std::vector<Case> all_cases() {
    std::vector<Case> v;
    for (int op = 0; op < 5; ++op)
        for (bool relu : {false, true}) v.push_back({op, relu});
    return v;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
    return std::string(kOpNames[info.param.op]) + (info.param.relu ? "_relu" : "");
}

class EltwiseF32 : public testing::TestWithParam<Case> {};
class EltwiseF16 : public testing::TestWithParam<Case> {};

TEST_P(EltwiseF32, EqualsFloat64ResultRoundedToFloat) {
    const Case c = GetParam();
    ThreadPool pool(2);
    std::mt19937 rng(static_cast<uint32_t>(31 + c.op * 2 + c.relu));
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{1000003}}) {
        std::vector<float> a(static_cast<size_t>(n)), b(a.size()), out(a.size(), std::nanf(""));
        fill(rng, a, b);
        KernelLaunch l;
        l.inputs = {ref(a, {n}), ref(b, {n})};
        l.outputs = {ref(out, {n})};
        l.attrs = eltwise_attrs(c.op, c.relu ? 1 : 0);
        ASSERT_TRUE(eltwise_kernel().run(l, pool).ok());
        int64_t bad = 0, positive = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            double r = apply(c.op, a[i], b[i]);
            if (c.relu) r = std::max(r, 0.0);
            const float want = static_cast<float>(r);
            positive += want > 0;
            if (!(out[i] == want) && bad++ < 5)
                ADD_FAILURE() << "n=" << n << " element " << i << ": " << a[i] << " " << kOpNames[c.op] << " " << b[i]
                              << " gave " << out[i] << ", want " << want;
        }
        EXPECT_EQ(bad, 0) << "n=" << n;
        if (n > 1) {
            EXPECT_GT(positive, 0);
        }
    }
}

// A rank-3 odd shape runs the same as its flattening.
TEST_P(EltwiseF32, Rank3OddShapeMatchesFlattened) {
    const Case c = GetParam();
    ThreadPool pool(1);
    std::mt19937 rng(static_cast<uint32_t>(7 + c.op));
    std::vector<float> a(3 * 5 * 7), b(a.size()), out3(a.size()), out1(a.size());
    fill(rng, a, b);
    KernelLaunch l;
    l.inputs = {ref(a, {3, 5, 7}), ref(b, {3, 5, 7})};
    l.outputs = {ref(out3, {3, 5, 7})};
    l.attrs = eltwise_attrs(c.op, c.relu ? 1 : 0);
    ASSERT_TRUE(eltwise_kernel().run(l, pool).ok());
    l.inputs = {ref(a, {105}), ref(b, {105})};
    l.outputs = {ref(out1, {105})};
    ASSERT_TRUE(eltwise_kernel().run(l, pool).ok());
    EXPECT_EQ(std::memcmp(out3.data(), out1.data(), out1.size() * sizeof(float)), 0);
}

TEST_P(EltwiseF16, EqualsExactResultRoundedOnceToF16) {
    const Case c = GetParam();
    ThreadPool pool(2);
    std::mt19937 rng(static_cast<uint32_t>(61 + c.op * 2 + c.relu));
    // Any finite f16 (subnormals to 65504), so sums and products also underflow and overflow.
    std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
    auto finite = [&] {
        for (;;) {
            uint16_t h = static_cast<uint16_t>(bits(rng));
            if ((h & 0x7c00u) != 0x7c00u) return f16{h};
        }
    };
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{100003}}) {
        std::vector<f16> a(static_cast<size_t>(n)), b(a.size()), out(a.size(), f16{0x7e00});
        for (size_t i = 0; i < a.size(); ++i) {
            a[i] = finite();
            b[i] = i % 8 == 3 ? a[i] : finite();
        }
        KernelLaunch l;
        l.inputs = {ref(a, {n}), ref(b, {n})};
        l.outputs = {ref(out, {n})};
        l.attrs = eltwise_attrs(c.op, c.relu ? 1 : 0);
        ASSERT_TRUE(eltwise_kernel().run(l, pool).ok());
        int64_t bad = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            const double u = ref_decode_f16(a[i].bits), w = ref_decode_f16(b[i].bits);
            double r = apply(c.op, u, w);  // exact in float64
            if (c.relu) r = std::max(r, 0.0);
            const double want = ref_round_f16(r), got = ref_decode_f16(out[i].bits);
            if (!(got == want) && bad++ < 5)
                ADD_FAILURE() << "n=" << n << " element " << i << ": " << u << " " << kOpNames[c.op] << " " << w
                              << " gave " << got << " (0x" << std::hex << out[i].bits << std::dec << "), want " << want;
        }
        EXPECT_EQ(bad, 0) << "n=" << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, EltwiseF32, testing::ValuesIn(all_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Ops, EltwiseF16, testing::ValuesIn(all_cases()), case_name);

TEST(EltwiseThreads, OneAndThreeThreadsGiveBitIdenticalResults) {
    const int64_t n = 1000003;  // 31 chunks of 32768
    std::mt19937 rng(99);
    std::vector<float> a(static_cast<size_t>(n)), b(a.size()), c1(a.size()), c3(a.size());
    fill(rng, a, b);
    ThreadPool one(1), three(3);
    KernelLaunch l;
    l.inputs = {ref(a, {n}), ref(b, {n})};
    l.attrs = eltwise_attrs(SUB, 1);
    l.outputs = {ref(c1, {n})};
    ASSERT_TRUE(eltwise_kernel().run(l, one).ok());
    l.outputs = {ref(c3, {n})};
    ASSERT_TRUE(eltwise_kernel().run(l, three).ok());
    EXPECT_EQ(std::memcmp(c1.data(), c3.data(), c1.size() * sizeof(float)), 0);
}

// Bad launches: run and cost reject them alike, with a message naming the problem.
void expect_rejected(const KernelLaunch& l, StatusCode code, const std::string& needle) {
    loom::test::expect_rejected(eltwise_kernel(), l, code, needle);
}

TEST(EltwiseArgs, RejectsMalformedLaunches) {
    std::vector<float> a(18, 1.0f), b(18, 2.0f), c(18, 0.0f);
    KernelLaunch l;
    l.outputs = {ref(c, {17})};
    l.inputs = {ref(a, {17}), ref(b, {18})};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "same shape");
    l.inputs = {ref(a, {3, 6}), ref(b, {6, 3})};  // same element count, different shape
    l.outputs = {ref(c, {3, 6})};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "same shape");
    l.inputs = {ref(a, {18}), ref(b, {3, 6})};  // different rank
    l.outputs = {ref(c, {18})};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "same shape");
    l.inputs = {ref(a, {18}), ref(b, {18})};
    l.outputs = {ref(c, {17})};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "same shape");
    l.outputs = {ref(c, {18})};
    l.attrs = {{"op", std::string("pow")}};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "op 'pow'");
    l.attrs = {{"op", int64_t{1}}};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "attribute 'op' must be a string, got int 1");
    l.attrs = {{"activation", std::string("gelu")}};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "activation 'gelu'");
    l.attrs = {{"alpha", 0.5}};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'alpha'");
    l.attrs = {};
    std::vector<f16> bh(18, f32_to_f16(1.0f));
    l.inputs = {ref(a, {18}), ref(bh, {18})};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "mixed");
    std::vector<int32_t> ai(18, 1), bi(18, 2), ci(18, 0);
    l.inputs = {ref(ai, {18}), ref(bi, {18})};
    l.outputs = {ref(ci, {18})};
    expect_rejected(l, StatusCode::UNSUPPORTED, "i32");
    l.inputs = {ref(a, {18})};
    l.outputs = {ref(c, {18})};
    expect_rejected(l, StatusCode::INVALID_ARGUMENT, "two inputs");
    EXPECT_EQ(c, std::vector<float>(18, 0.0f));  // nothing was written
}

// ---- cost ----------------------------------------------------------------------------------

KernelLaunch cost_launch(DType dt, int64_t n, bool relu = false) {
    KernelLaunch l;
    l.inputs = {shape_ref(dt, {n}), shape_ref(dt, {n})};
    l.outputs = {shape_ref(dt, {n})};
    l.attrs = eltwise_attrs(ADD, relu ? 1 : 0);
    return l;
}

CycleBreakdown cost_ok(const KernelLaunch& l, const char* preset) {
    return loom::test::cost_ok(eltwise_kernel(), l, preset);
}

loom::Status cost_error(const KernelLaunch& l, const char* preset) {
    return loom::test::cost_error(eltwise_kernel(), l, preset);
}

VectorSchedule schedule(int64_t ub_tile, bool double_buffer = true, int64_t cores = 0) {
    return VectorSchedule{ub_tile, double_buffer, cores};
}

TEST(EltwiseCost, DefaultScheduleIsLegalAndConsistent) {
    for (const char* preset : {"edge", "dc"})
        for (DType dt : {DType::F16, DType::F32})
            for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{1000}, int64_t{1000003}, int64_t{1} << 28})
                for (bool relu : {false, true}) {
                    SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)) + " n=" + std::to_string(n));
                    CycleBreakdown cb = cost_ok(cost_launch(dt, n, relu), preset);
                    EXPECT_GE(cb.cores_used, 1);
                    EXPECT_LE(cb.cores_used, preset_spec(preset).aicore_count);
                    EXPECT_EQ(cb.rounds, (cb.blocks + cb.cores_used - 1) / cb.cores_used);
                    EXPECT_GT(cb.total, 0);
                    EXPECT_GE(cb.total, cb.vector);
                    EXPECT_GE(cb.total, cb.mte_in);
                    EXPECT_GE(cb.total, cb.mte_out);
                    EXPECT_GE(cb.total, cb.scalar);
                    EXPECT_DOUBLE_EQ(cb.l2_miss_bytes, 3.0 * double(n) * double(dtype_size(dt)));
                    EXPECT_DOUBLE_EQ(cb.flops, double(n) * (relu ? 2 : 1));
                }
}

TEST(EltwiseCost, RejectsTilesThatAreNotWhole32ByteBlocks) {
    for (const char* preset : {"edge", "dc"}) {
        KernelLaunch l = cost_launch(DType::F32, 100000);
        for (int64_t tile : {int64_t{12}, int64_t{4}, int64_t{0}, int64_t{-8}}) {
            l.tiling = schedule(tile);
            loom::Status st = cost_error(l, preset);
            EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT) << tile;
            EXPECT_NE(st.message().find("multiple of 8"), std::string::npos) << st.to_string();
        }
        l.tiling = schedule(8);
        EXPECT_TRUE(cost_error(l, preset).ok());
        l = cost_launch(DType::F16, 100000);
        l.tiling = schedule(8);  // 16 B: half a block of f16
        EXPECT_NE(cost_error(l, preset).message().find("multiple of 16"), std::string::npos);
        l.tiling = schedule(16);
        EXPECT_TRUE(cost_error(l, preset).ok());
    }
}

TEST(EltwiseCost, UbOverflowIsRejectedNotClamped) {
    // UB 256 KiB: double-buffered A, B and C of f32 hold at most 10922 elements each.
    KernelLaunch l = cost_launch(DType::F32, 1 << 20);
    l.tiling = schedule(10920);
    EXPECT_TRUE(cost_error(l, "dc").ok());
    l.tiling = schedule(10928);
    loom::Status st = cost_error(l, "dc");
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.message().find("UB"), std::string::npos) << st.to_string();
    // Single-buffered, twice the tile fits; the same tile double-buffered does not.
    l.tiling = schedule(21840, false);
    EXPECT_TRUE(cost_error(l, "edge").ok());
    l.tiling = schedule(21840, true);
    EXPECT_NE(cost_error(l, "edge").message().find("UB"), std::string::npos);
    l.tiling = schedule(21848, false);
    EXPECT_NE(cost_error(l, "edge").message().find("UB"), std::string::npos);
}

TEST(EltwiseCost, RejectsCoresOutsideTheDevice) {
    for (const char* preset : {"edge", "dc"}) {
        KernelLaunch l = cost_launch(DType::F16, 100000);
        for (int64_t cores : {preset_spec(preset).aicore_count + 1, int64_t{-1}}) {
            l.tiling = schedule(1024, true, cores);
            loom::Status st = cost_error(l, preset);
            EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
            EXPECT_NE(st.message().find("cores"), std::string::npos) << st.to_string();
        }
        l.tiling = CubeTiling{};
        EXPECT_NE(cost_error(l, preset).message().find("VectorSchedule"), std::string::npos);
    }
}

TEST(EltwiseCost, MoreElementsCostMore) {
    for (const char* preset : {"edge", "dc"})
        for (DType dt : {DType::F16, DType::F32}) {
            double prev = 0;
            int64_t prev_n = 0;
            // Default schedule over a dense sweep, then decades.
            std::vector<int64_t> sizes;
            for (int64_t n = 1; n <= 40000; n += 97) sizes.push_back(n);
            for (int64_t n = 40000; n <= int64_t{1} << 30; n *= 3) sizes.push_back(n);
            for (int64_t n : sizes) {
                double total = cost_ok(cost_launch(dt, n), preset).total;
                EXPECT_GE(total, prev) << preset << " " << dtype_name(dt) << " n=" << n << " vs n=" << prev_n;
                prev = total;
                prev_n = n;
            }
            EXPECT_GT(cost_ok(cost_launch(dt, 10000000), preset).total,
                      1.5 * cost_ok(cost_launch(dt, 1000000), preset).total);
            // A fixed schedule too.
            KernelLaunch small = cost_launch(dt, 100000), big = cost_launch(dt, 1000000);
            small.tiling = big.tiling = schedule(2048);
            EXPECT_GT(cost_ok(big, preset).total, cost_ok(small, preset).total);
        }
}

TEST(EltwiseCost, FewerCoresCostMore) {
    for (const char* preset : {"edge", "dc"})
        for (DType dt : {DType::F16, DType::F32}) {
            KernelLaunch l = cost_launch(dt, 4000000);
            l.tiling = schedule(4096);
            CycleBreakdown all = cost_ok(l, preset);
            l.tiling = schedule(4096, true, 1);
            CycleBreakdown one = cost_ok(l, preset);
            EXPECT_EQ(all.cores_used, preset_spec(preset).aicore_count);
            EXPECT_EQ(one.cores_used, 1);
            EXPECT_EQ(one.rounds, one.blocks);
            EXPECT_GT(one.total, all.total) << preset;
        }
}

TEST(EltwiseCost, DoubleBufferingOffNeverMakesTotalSmaller) {
    for (const char* preset : {"edge", "dc"})
        for (DType dt : {DType::F16, DType::F32})
            for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{5000}, int64_t{1000003}, int64_t{1} << 26})
                for (int64_t tile : {int64_t{16}, int64_t{256}, int64_t{4096}, int64_t{8192}})
                    for (bool relu : {false, true}) {
                        KernelLaunch l = cost_launch(dt, n, relu);
                        l.tiling = schedule(tile, true);
                        double on = cost_ok(l, preset).total;
                        l.tiling = schedule(tile, false);
                        double off = cost_ok(l, preset).total;
                        EXPECT_GE(off, on) << preset << " " << dtype_name(dt) << " n=" << n << " tile=" << tile;
                    }
}

TEST(EltwiseCost, ScheduleFieldsBeyondTheTileAreCheckedByName) {
    for (const char* preset : {"edge", "dc"}) {
        KernelLaunch l = cost_launch(DType::F32, 100000);
        VectorSchedule v = schedule(1024);
        v.vector_tile = 12;
        l.tiling = v;
        EXPECT_NE(cost_error(l, preset).message().find("eltwise: schedule: vector_tile = 12"), std::string::npos);
        v.vector_tile = 256;  // 4 rows of 256 elements of the one contiguous line: legal
        l.tiling = v;
        EXPECT_TRUE(cost_error(l, preset).ok());
        v = schedule(1024);
        v.vector_axis = VectorAxis::OUTER;  // extent 1: lines joined along it are still the flat stream
        l.tiling = v;
        EXPECT_TRUE(cost_error(l, preset).ok());
        v = schedule(1024);
        v.fuse_ub_buffers = 1;
        l.tiling = v;
        EXPECT_NE(cost_error(l, preset).message().find("fuse_ub_buffers = 1 needs fuse_input or fuse_output"),
                  std::string::npos);
    }
}

TEST(EltwiseCost, FusedSidesSkipGlobalMemoryAndInPlaceMakesRoom) {
    const int64_t n = 1 << 20;
    for (const char* preset : {"edge", "dc"})
        for (DType dt : {DType::F16, DType::F32}) {
            const double size = static_cast<double>(dtype_size(dt));
            KernelLaunch l = cost_launch(dt, n);
            VectorSchedule v = schedule(2048);
            l.tiling = v;
            const CycleBreakdown alone = cost_ok(l, preset);
            v.fuse_input = true;
            l.tiling = v;
            const CycleBreakdown fused = cost_ok(l, preset);
            EXPECT_DOUBLE_EQ(alone.l2_miss_bytes - fused.l2_miss_bytes, double(n) * size);
            EXPECT_LT(fused.total, alone.total);
            v.fuse_output = true;
            l.tiling = v;
            EXPECT_DOUBLE_EQ(cost_ok(l, preset).mte_out, 0);
            // Three double-buffered tiles of 64 KiB overflow UB (256 KiB); two, the output written
            // over A's tile, fit.
            l.tiling = schedule(65536 / int64_t(dtype_size(dt)));
            EXPECT_NE(cost_error(l, preset).message().find("3 live tiles"), std::string::npos);
            v = schedule(65536 / int64_t(dtype_size(dt)));
            v.in_place = true;
            l.tiling = v;
            EXPECT_TRUE(cost_error(l, preset).ok());
        }
}

// ---- through the runtime -------------------------------------------------------------------

TEST(EltwiseLaunch, StreamLaunchMatchesDirectRun) {
    const int64_t n = 4099;
    ThreadPool pool(2);
    DeviceOptions opt;
    opt.pool = &pool;
    auto dev_r = Device::create(preset_spec("dc"), opt);
    ASSERT_TRUE(dev_r.ok()) << dev_r.status().to_string();
    auto& dev = *dev_r;
    std::mt19937 rng(4);
    std::vector<float> a(static_cast<size_t>(n)), b(a.size()), got(a.size()), direct(a.size());
    fill(rng, a, b);
    auto da = dev->malloc(a.size() * 4), db = dev->malloc(a.size() * 4), dc = dev->malloc(a.size() * 4);
    ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
    Stream st = dev->create_stream();
    ASSERT_TRUE(st.copy_h2d(fp(*da), pageable(a)).ok());
    ASSERT_TRUE(st.copy_h2d(fp(*db), pageable(b)).ok());
    KernelLaunch l;
    l.inputs = {*tensor_ref(da->as<float>(), {n}), *tensor_ref(db->as<float>(), {n})};
    l.outputs = {*tensor_ref(dc->as<float>(), {n})};
    l.attrs = eltwise_attrs(MUL, 1);
    ASSERT_TRUE(st.launch(eltwise_kernel(), l).ok());
    ASSERT_TRUE(st.copy_d2h(pageable_out(got), cfp(*dc)).ok());
    ASSERT_TRUE(st.synchronize().ok());
    l.inputs = {ref(a, {n}), ref(b, {n})};
    l.outputs = {ref(direct, {n})};
    ASSERT_TRUE(eltwise_kernel().run(l, pool).ok());
    EXPECT_EQ(got, direct);
    EXPECT_EQ(dev->stats().engines[static_cast<size_t>(Engine::AICORE)].tasks, 1u);
}

}  // namespace
