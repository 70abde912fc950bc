// space_to_depth (device/kernels/space_to_depth.cpp): spatial blocks into channels, DCR order.
// Exact comparison against the ONNX definition (reshape to [N, C, H/b, b, W/b, b], transpose
// to [N, b, b, C, H/b, W/b]) as index arithmetic, the ONNX documentation example, a round trip
// through depth_to_space (DCR), every dtype, odd shapes and a large multi-threaded case; errors
// name the problem; cost is positive, grows with size and checks the schedule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_space_to_depth {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

const KernelDef& kernel() { return registered_kernel("space_to_depth"); }

template <typename T>
std::vector<T> reference(const std::vector<T>& x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t b) {
    std::vector<T> y;
    for (int64_t in = 0; in < n; ++in)
        for (int64_t i = 0; i < b; ++i)
            for (int64_t j = 0; j < b; ++j)
                for (int64_t ic = 0; ic < c; ++ic)
                    for (int64_t oh = 0; oh < h / b; ++oh)
                        for (int64_t ow = 0; ow < w / b; ++ow)
                            y.push_back(x[static_cast<size_t>(((in * c + ic) * h + oh * b + i) * w + ow * b + j)]);
    return y;
}

template <typename T>
void check(int64_t n, int64_t c, int64_t h, int64_t w, int64_t b, unsigned threads, uint32_t seed) {
    std::vector<T> x = random_values<T>(static_cast<size_t>(n * c * h * w), seed);
    const std::vector<T> want = reference(x, n, c, h, w, b);
    std::vector<T> y = random_values<T>(want.size(), 3);
    KernelLaunch l;
    l.inputs = {ref(x, {n, c, h, w})};
    l.outputs = {ref(y, {n, c * b * b, h / b, w / b})};
    l.attrs = {{"blocksize", b}};
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(want.empty() || std::memcmp(y.data(), want.data(), want.size() * sizeof(T)) == 0) << "b=" << b;
}

template <typename T>
class SpaceToDepthTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(SpaceToDepthTyped, AllTypes);

TYPED_TEST(SpaceToDepthTyped, OddShapes) {
    check<TypeParam>(1, 3, 14, 26, 2, 2, 1);
    check<TypeParam>(2, 5, 9, 21, 3, 2, 2);
    check<TypeParam>(1, 1, 1, 1, 1, 1, 3);
    check<TypeParam>(1, 7, 4, 4, 4, 1, 4);
    check<TypeParam>(0, 7, 4, 4, 2, 1, 5);  // empty
}

TEST(SpaceToDepth, OnnxDocumentationExample) {
    // test_spacetodepth_example: 1 x 1 x 4 x 6 -> 1 x 4 x 2 x 3 holding 0 .. 23 in order.
    std::vector<float> x = {0, 6, 1, 7, 2, 8, 12, 18, 13, 19, 14, 20, 3, 9, 4, 10, 5, 11, 15, 21, 16, 22, 17, 23};
    std::vector<float> y(24, -1.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {1, 1, 4, 6})};
    l.outputs = {ref(y, {1, 4, 2, 3})};
    l.attrs = {{"blocksize", int64_t{2}}};
    ThreadPool pool(1);
    ASSERT_TRUE(kernel().run(l, pool).ok());
    for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], static_cast<float>(i));
    // DCR depth_to_space undoes it.
    std::vector<float> back(24, -1.0f);
    l.inputs = {ref(y, {1, 4, 2, 3})};
    l.outputs = {ref(back, {1, 1, 4, 6})};
    ASSERT_TRUE(find_kernel("depth_to_space")->run(l, pool).ok());
    EXPECT_EQ(back, x);
}

TEST(SpaceToDepth, LargeOnThreeThreads) {
    check<float>(1, 3, 256, 258, 2, 3, 11);
    check<f16>(2, 5, 120, 96, 4, 3, 12);
}

TEST(SpaceToDepthArgs, RejectsMalformedLaunches) {
    std::vector<float> x(1 * 2 * 4 * 6, 1.0f), y(48, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {1, 2, 4, 6})};
    l.outputs = {ref(y, {1, 8, 3, 2})};
    l.attrs = {{"blocksize", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "space_to_depth: output 0 has shape 1x8x3x2, expected 1x8x2x3 (dim 2 is 3, expected 2)");
    l.outputs = {ref(y, {1, 8, 2, 3})};
    l.attrs = {{"blocksize", int64_t{4}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "H and W must be multiples of blocksize 4");
    l.attrs = {{"blocksize", int64_t{-1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'blocksize' = -1 must be >= 1");
    l.attrs = {{"blocksize", int64_t{2}}, {"mode", std::string("DCR")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'mode'");
    l.attrs = {{"blocksize", 2.0}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'blocksize' must be an int");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(SpaceToDepthCost, PositiveMonotonicAndScheduleChecked) {
    static char dummy[4];
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::U8}) {
            double prev = 0;
            for (int64_t h = 2; h <= int64_t{1} << 14; h = h * 3 + 2) {
                KernelLaunch l;
                l.inputs = {shape_ref(dt, {1, 16, h, 64}, dummy)};
                l.outputs = {shape_ref(dt, {1, 64, h / 2, 32}, dummy + 1)};
                l.attrs = {{"blocksize", int64_t{2}}};
                const CycleBreakdown cb = cost_ok(kernel(), l, preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " h=" << h;
                prev = cb.total;
                expect_schedule_checked(kernel(), l, preset);
            }
        }
}

}  // namespace

}  // namespace test_kernel_space_to_depth
