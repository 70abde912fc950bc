// reshape (device/kernels/reshape.cpp): Y = X's bytes under another shape of as many elements.
// Exact comparison (a pure copy) for every dtype on odd shapes, in place, overlapping and empty;
// errors name the problem; cost is positive, grows with size and checks the schedule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_reshape {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

const KernelDef& kernel() { return registered_kernel("reshape"); }

// Distinct non-zero values of T from a seeded generator.
TensorRef cost_ref(DType dt, std::initializer_list<int64_t> dims, int tag) {
    static char dummy[8];
    return shape_ref(dt, dims, dummy + tag);
}

template <typename T>
class ReshapeTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(ReshapeTyped, AllTypes);

TYPED_TEST(ReshapeTyped, CopiesBytesUnchanged) {
    ThreadPool pool(2);
    std::vector<TypeParam> x = random_values<TypeParam>(7 * 13 * 3, 5), y(x.size());
    KernelLaunch l;
    l.inputs = {ref(x, {1, 7, 13, 3})};
    l.outputs = {ref(y, {91, 3})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(TypeParam)), 0);
}

TEST(Reshape, LargeCopyMatchesOnOneAndThreeThreads) {
    const int64_t n = (1 << 20) + 3;
    std::vector<float> x = random_values<float>(static_cast<size_t>(n), 9), y1(x.size()), y3(x.size());
    ThreadPool one(1), three(3);
    KernelLaunch l;
    l.inputs = {ref(x, {n})};
    l.outputs = {ref(y1, {1, n, 1})};
    ASSERT_TRUE(kernel().run(l, one).ok());
    l.outputs = {ref(y3, {n, 1})};
    ASSERT_TRUE(kernel().run(l, three).ok());
    EXPECT_EQ(x, y1);
    EXPECT_EQ(x, y3);
}

TEST(Reshape, InPlaceIsANoOpAndCostsOnlySetUp) {
    ThreadPool pool(2);
    std::vector<float> x = random_values<float>(60, 3);
    const std::vector<float> before = x;
    KernelLaunch l;
    l.inputs = {ref(x, {3, 4, 5})};
    l.outputs = {ref(x, {12, 5})};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(x, before);
    for (std::string_view preset : loom::test::presets()) {
        KernelLaunch big;
        big.inputs = {cost_ref(DType::F32, {1 << 20}, 0)};
        big.outputs = {cost_ref(DType::F32, {1024, 1024}, 0)};
        const double in_place = cost_ok(kernel(), big, preset).total;
        big.outputs = {cost_ref(DType::F32, {1024, 1024}, 1)};
        const double copy = cost_ok(kernel(), big, preset).total;
        EXPECT_GT(in_place, 0);
        EXPECT_LT(in_place, copy) << preset;
    }
}

TEST(Reshape, OverlappingViewsMoveLikeMemmove) {
    ThreadPool pool(2);
    std::vector<int32_t> buf = random_values<int32_t>(41, 4);
    const std::vector<int32_t> before = buf;
    TensorRef x = shape_ref(DType::I32, {40}, buf.data());
    TensorRef y = shape_ref(DType::I32, {5, 8}, buf.data() + 1);
    KernelLaunch l;
    l.inputs = {x};
    l.outputs = {y};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_TRUE(std::equal(before.begin(), before.begin() + 40, buf.begin() + 1));
}

TEST(Reshape, EmptyTensorsAreFine) {
    ThreadPool pool(2);
    std::vector<float> x, y;
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {0, 3}, nullptr)};
    l.outputs = {shape_ref(DType::F32, {3, 0, 5}, nullptr)};
    EXPECT_TRUE(kernel().run(l, pool).ok());
    EXPECT_GT(cost_ok(kernel(), l, "edge").total, 0);
}

TEST(ReshapeArgs, RejectsMalformedLaunches) {
    std::vector<float> x(12, 1.0f), y(13, 0.0f);
    std::vector<int32_t> yi(12, 0);
    KernelLaunch l;
    l.inputs = {ref(x, {3, 4})};
    l.outputs = {ref(y, {13})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "reshape: output 0 is 13 (13 elements), input 0 is 3x4");
    l.outputs = {ref(yi, {12})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mixed dtypes");
    l.outputs = {ref(y, {2, 6})};
    l.attrs = {{"shape", std::vector<int64_t>{2, 6}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'shape'");
    l.attrs = {};
    l.inputs = {ref(x, {12}), ref(x, {12})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "reshape takes 1 input(s), got 2");
    EXPECT_EQ(y, std::vector<float>(13, 0.0f));
}

TEST(ReshapeCost, PositiveMonotonicAndScheduleChecked) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16, DType::U8, DType::I64}) {
            double prev = 0;
            for (int64_t n = 1; n <= int64_t{1} << 28; n = n * 3 + 1) {
                KernelLaunch l;
                l.inputs = {cost_ref(dt, {n}, 0)};
                l.outputs = {cost_ref(dt, {1, n}, 1)};
                const CycleBreakdown cb = cost_ok(kernel(), l, preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " n=" << n;
                prev = cb.total;
            }
            KernelLaunch l;
            l.inputs = {cost_ref(dt, {100000}, 0)};
            l.outputs = {cost_ref(dt, {100000}, 1)};
            expect_schedule_checked(kernel(), l, preset);
        }
}

}  // namespace

}  // namespace test_kernel_reshape
