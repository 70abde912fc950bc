// concat (device/kernels/concat.cpp): inputs joined along one axis. Exact comparison (a pure
// copy) against a per-element multi-index reference, for every dtype, every axis (negative too),
// odd sizes, empty inputs and a large multi-threaded case; errors name the problem; cost is
// positive, grows with size, charges short runs more and checks the schedule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_concat {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("concat"); }

// Reference: walk every output multi-index, find the input that holds it along axis.
template <typename T>
std::vector<T> reference(const std::vector<std::vector<T>>& xs, const std::vector<Dims>& shapes, int axis) {
    Dims out = shapes[0];
    out[static_cast<size_t>(axis)] = 0;
    for (const Dims& s : shapes) out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    std::vector<T> y(static_cast<size_t>(element_count(out)));
    for (int64_t flat = 0; flat < element_count(out); ++flat) {
        Dims idx(out.size());
        int64_t rest = flat;
        for (size_t d = out.size(); d-- > 0;) {
            idx[d] = rest % out[d];
            rest /= out[d];
        }
        size_t k = 0;
        while (idx[static_cast<size_t>(axis)] >= shapes[k][static_cast<size_t>(axis)]) {
            idx[static_cast<size_t>(axis)] -= shapes[k][static_cast<size_t>(axis)];
            ++k;
        }
        int64_t src = 0;
        for (size_t d = 0; d < out.size(); ++d) src = src * shapes[k][d] + idx[d];
        y[static_cast<size_t>(flat)] = xs[k][static_cast<size_t>(src)];
    }
    return y;
}

template <typename T>
void check_concat(const std::vector<Dims>& shapes, int64_t axis_attr, unsigned threads, uint32_t seed) {
    const int rank = static_cast<int>(shapes[0].size());
    const int axis = axis_attr < 0 ? static_cast<int>(axis_attr) + rank : static_cast<int>(axis_attr);
    std::vector<std::vector<T>> xs;
    KernelLaunch l;
    for (size_t i = 0; i < shapes.size(); ++i)
        xs.push_back(random_values<T>(static_cast<size_t>(element_count(shapes[i])), seed + static_cast<uint32_t>(i)));
    for (size_t i = 0; i < shapes.size(); ++i) l.inputs.push_back(shape_ref(dtype_of<T>(), shapes[i], xs[i].data()));
    const std::vector<T> want = reference(xs, shapes, axis);
    Dims out = shapes[0];
    out[static_cast<size_t>(axis)] = 0;
    for (const Dims& s : shapes) out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    std::vector<T> y = random_values<T>(want.size(), 999);
    l.outputs = {shape_ref(dtype_of<T>(), out, y.data())};
    l.attrs = {{"axis", axis_attr}};
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(want.empty() || std::memcmp(y.data(), want.data(), want.size() * sizeof(T)) == 0) << "axis " << axis_attr;
}

template <typename T>
class ConcatTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(ConcatTyped, AllTypes);

TYPED_TEST(ConcatTyped, EveryAxisOfOddShapes) {
    for (int axis = 0; axis < 4; ++axis) {
        std::vector<Dims> shapes = {{2, 3, 7, 13}, {2, 3, 7, 13}, {2, 3, 7, 13}};
        shapes[1][static_cast<size_t>(axis)] = 1;
        shapes[2][static_cast<size_t>(axis)] = 5;
        check_concat<TypeParam>(shapes, axis, 2, 11 + static_cast<uint32_t>(axis));
        check_concat<TypeParam>(shapes, axis - 4, 1, 21 + static_cast<uint32_t>(axis));  // negative axis
    }
}

TEST(Concat, OneInputIsACopyAndEmptyInputsAreSkipped) {
    check_concat<float>({{1, 1}}, 0, 2, 1);
    check_concat<float>({{3, 17}}, -1, 2, 2);
    check_concat<int32_t>({{4, 0, 3}, {4, 2, 3}, {4, 0, 3}, {4, 1, 3}}, 1, 2, 3);
    check_concat<float>({{0, 5}, {0, 2}}, 1, 2, 4);  // nothing to write
    check_concat<uint8_t>({{17}, {1}, {23}}, 0, 2, 5);
}

TEST(Concat, LargeChannelConcatOnThreeThreads) {
    // 1 x (19 + 45) x 61 x 67: chunks of the parallel loop straddle the inputs.
    check_concat<f16>({{1, 19, 61, 67}, {1, 45, 61, 67}}, 1, 3, 7);
    check_concat<float>({{3, 1000, 37}, {3, 1000, 5}}, 2, 3, 8);
}

TEST(ConcatArgs, RejectsMalformedLaunches) {
    std::vector<float> a(2 * 3 * 4, 1.0f), b(2 * 5 * 4, 2.0f), y(2 * 8 * 4, 0.0f);
    std::vector<int32_t> bi(2 * 5 * 4, 1);
    KernelLaunch l;
    l.inputs = {ref(a, {2, 3, 4}), ref(b, {2, 5, 4})};
    l.outputs = {ref(y, {2, 9, 4})};
    l.attrs = {{"axis", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "concat: output 0 has shape 2x9x4, expected 2x8x4 (dim 1 is 9, expected 8)");
    l.outputs = {ref(y, {2, 8, 4})};
    l.inputs = {ref(a, {2, 3, 4}), ref(b, {2, 4, 5})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "input 1 is 2x4x5, input 0 is 2x3x4");
    l.inputs = {ref(a, {2, 3, 4}), ref(b, {2, 5, 4})};
    l.attrs = {{"axis", int64_t{3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'axis' = 3 outside [-3, 2]");
    l.attrs = {};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'axis' is required");
    l.attrs = {{"axis", int64_t{1}}, {"dim", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'dim'");
    l.attrs = {{"axis", int64_t{1}}};
    l.inputs = {ref(a, {2, 3, 4}), ref(bi, {2, 5, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "input 1 is i32, input 0 is f32");
    l.inputs = {};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "at least one input");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TensorRef cost_ref(DType dt, const Dims& dims, int tag) {
    static char dummy[8];
    return shape_ref(dt, dims, dummy + tag);
}

KernelLaunch cost_launch(DType dt, int64_t rows, int64_t a, int64_t b, int64_t axis) {
    KernelLaunch l;
    Dims da = {rows, a}, db = {rows, b}, dy = {rows, a + b};
    if (axis == 0) da = {a, rows}, db = {b, rows}, dy = {a + b, rows};
    l.inputs = {cost_ref(dt, da, 0), cost_ref(dt, db, 1)};
    l.outputs = {cost_ref(dt, dy, 2)};
    l.attrs = {{"axis", axis}};
    return l;
}

TEST(ConcatCost, PositiveMonotonicShortRunsCostMoreAndScheduleChecked) {
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16, DType::I8}) {
            double prev = 0;
            for (int64_t rows = 1; rows <= int64_t{1} << 24; rows = rows * 3 + 1) {
                const CycleBreakdown cb = cost_ok(kernel(), cost_launch(dt, rows, 16, 48, 1), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " rows=" << rows;
                prev = cb.total;
            }
            // Same bytes: 1-element runs along the last axis read whole blocks for one element.
            const double short_runs = cost_ok(kernel(), cost_launch(dt, 1 << 20, 1, 1, 1), preset).total;
            const double long_runs = cost_ok(kernel(), cost_launch(dt, 1 << 20, 1, 1, 0), preset).total;
            EXPECT_GT(short_runs, long_runs) << preset;
            KernelLaunch l = cost_launch(dt, 1000, 3, 5, 1);
            expect_schedule_checked(kernel(), l, preset);
        }
}

}  // namespace

}  // namespace test_kernel_concat
