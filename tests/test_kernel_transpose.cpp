// transpose (device/kernels/transpose.cpp): Y.dim(i) = X.dim(perm[i]). Exact comparison (a pure
// copy) against a per-element index reference: all 24 permutations of a 2x3x5x7 tensor for every
// dtype, the default (reversed) perm, size-1 and empty dims, rank 1 and 6, and large NCHW <->
// NHWC cases on three threads; errors name the problem; cost is positive, grows with size,
// charges a true transpose more than a row copy and checks the schedule; the tile's shape sets
// the runs on both sides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_transpose {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("transpose"); }

// perm empty: attribute absent (reversed).
template <typename T>
void check_transpose(const Dims& in, Dims perm, unsigned threads, uint32_t seed) {
    const bool given = !perm.empty();
    const size_t r = in.size();
    if (!given)
        for (size_t i = 0; i < r; ++i) perm.push_back(static_cast<int64_t>(r - 1 - i));
    Dims out(r), xstride(r);
    int64_t s = 1;
    for (size_t d = r; d-- > 0;) {
        xstride[d] = s;
        s *= in[d];
    }
    for (size_t i = 0; i < r; ++i) out[i] = in[static_cast<size_t>(perm[i])];
    std::vector<T> x = random_values<T>(static_cast<size_t>(element_count(in)), seed);
    std::vector<T> want(static_cast<size_t>(element_count(out))), y = random_values<T>(want.size(), 3);
    for (int64_t flat = 0; flat < element_count(out); ++flat) {
        int64_t rest = flat, src = 0;
        for (size_t i = r; i-- > 0;) {
            src += (rest % out[i]) * xstride[static_cast<size_t>(perm[i])];
            rest /= out[i];
        }
        want[static_cast<size_t>(flat)] = x[static_cast<size_t>(src)];
    }
    KernelLaunch l;
    l.inputs = {shape_ref(dtype_of<T>(), in, x.data())};
    l.outputs = {shape_ref(dtype_of<T>(), out, y.data())};
    if (given) l.attrs = {{"perm", perm}};
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += std::memcmp(&y[i], &want[i], sizeof(T)) != 0;
    EXPECT_EQ(bad, 0) << "perm " << ::testing::PrintToString(perm) << " of " << ::testing::PrintToString(in);
}

template <typename T>
class TransposeTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(TransposeTyped, AllTypes);

TYPED_TEST(TransposeTyped, EveryPermutationOfA4DTensor) {
    Dims perm = {0, 1, 2, 3};
    uint32_t seed = 1;
    do {
        check_transpose<TypeParam>({2, 3, 5, 7}, perm, 2, seed++);
    } while (std::next_permutation(perm.begin(), perm.end()));
    check_transpose<TypeParam>({2, 3, 5, 7}, {}, 2, seed++);
}

TEST(Transpose, OddRanksAndShapes) {
    check_transpose<float>({17}, {}, 1, 1);
    check_transpose<float>({1, 1}, {1, 0}, 1, 2);
    check_transpose<float>({1, 37, 1, 41}, {3, 2, 0, 1}, 2, 3);
    check_transpose<f16>({2, 3, 1, 5, 1, 7}, {5, 3, 1, 0, 2, 4}, 2, 4);
    check_transpose<int64_t>({2, 3, 4, 5, 6, 7}, {1, 0, 3, 2, 5, 4}, 2, 5);
    check_transpose<float>({3, 0, 5}, {2, 1, 0}, 2, 6);
    check_transpose<float>({33, 65}, {}, 2, 7);      // tiles with tails on both axes
    check_transpose<uint8_t>({100, 3}, {}, 2, 8);    // a thin matrix
}

TEST(Transpose, LargeLayoutChangesOnThreeThreads) {
    check_transpose<float>({1, 37, 61, 67}, {0, 2, 3, 1}, 3, 11);  // NCHW -> NHWC
    check_transpose<f16>({2, 61, 67, 37}, {0, 3, 1, 2}, 3, 12);    // NHWC -> NCHW
    check_transpose<float>({1, 16, 130, 131}, {0, 1, 3, 2}, 3, 13);  // batched H <-> W
    check_transpose<int8_t>({1, 8, 4, 1024}, {0, 2, 1, 3}, 3, 14);   // rows stay whole
}

TEST(TransposeArgs, RejectsMalformedLaunches) {
    std::vector<float> x(2 * 3 * 4, 1.0f), y(2 * 3 * 4, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {2, 3, 4})};
    l.outputs = {ref(y, {4, 3, 2})};
    l.attrs = {{"perm", Dims{0, 2, 1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "transpose: output 0 has shape 4x3x2, expected 2x4x3 (dim 0 is 4, expected 2)");
    for (const Dims& bad : {Dims{0, 1, 1}, Dims{0, 1}, Dims{0, 1, 3}, Dims{-1, 0, 1}}) {
        l.attrs = {{"perm", bad}};
        expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "is not a permutation of 0..2");
    }
    l.attrs = {{"axes", Dims{2, 1, 0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'axes'");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(TransposeCost, PositiveMonotonicTrueTransposeCostsMoreAndScheduleChecked) {
    static char dummy[4];
    auto launch = [](DType dt, int64_t c, Dims perm) {
        Dims in = {1, c, 64, 64}, out(4);
        for (size_t i = 0; i < 4; ++i) out[i] = in[static_cast<size_t>(perm[i])];
        KernelLaunch l;
        l.inputs = {shape_ref(dt, in, dummy)};
        l.outputs = {shape_ref(dt, out, dummy + 1)};
        l.attrs = {{"perm", perm}};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            double prev = 0;
            for (int64_t c = 1; c <= int64_t{1} << 14; c = c * 3 + 1) {
                const CycleBreakdown cb = cost_ok(kernel(), launch(dt, c, {0, 2, 3, 1}), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " c=" << c;
                prev = cb.total;
            }
            EXPECT_GT(cost_ok(kernel(), launch(dt, 256, {0, 2, 3, 1}), preset).total,
                      cost_ok(kernel(), launch(dt, 256, {1, 0, 2, 3}), preset).total);
            KernelLaunch l = launch(dt, 16, {0, 2, 3, 1});
            expect_schedule_checked(kernel(), l, preset);
        }
}

// NCHW -> NHWC with 3 channels: rows across the 3 channels keep Y's runs whole (3 x the tile's
// pixels) and X's (the pixels of each channel); a single row per tile writes 3-element runs,
// each a whole 32-byte block. Lines cannot be joined: each side has its own contiguous axis.
TEST(TransposeCost, TileShapeSetsTheRunsOnBothSides) {
    static char dummy[4];
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            SCOPED_TRACE(std::string(preset) + " " + std::string(dtype_name(dt)));
            KernelLaunch l;
            l.inputs = {shape_ref(dt, {1, 3, 60, 80}, dummy)};
            l.outputs = {shape_ref(dt, {1, 60, 80, 3}, dummy + 1)};
            l.attrs = {{"perm", Dims{0, 2, 3, 1}}};
            const double n = 3 * 60 * 80, b = static_cast<double>(dtype_size(dt));
            const CycleBreakdown def = cost_ok(kernel(), l, preset);
            EXPECT_DOUBLE_EQ(def.l2_miss_bytes, 2 * n * b);  // every byte once, no partial blocks
            VectorSchedule rows3;
            rows3.vector_axis = VectorAxis::AXIS;  // X's contiguous pixels in the lanes
            rows3.vector_tile = 480;
            rows3.ub_tile = 480 * 3;
            l.tiling = rows3;
            EXPECT_DOUBLE_EQ(cost_ok(kernel(), l, preset).l2_miss_bytes, 2 * n * b);
            VectorSchedule rows1 = rows3;
            rows1.ub_tile = 480;
            l.tiling = rows1;
            EXPECT_DOUBLE_EQ(cost_ok(kernel(), l, preset).l2_miss_bytes, n * b + n * 32);
            VectorSchedule joined;
            joined.ub_tile = 1024;
            l.tiling = joined;
            EXPECT_NE(cost_error(kernel(), l, preset).message().find("contiguous in GM on both sides"),
                      std::string::npos);
        }
}

}  // namespace

}  // namespace test_kernel_transpose
