// split (device/kernels/split.cpp): X cut along one axis, the outputs' shapes giving the sizes.
// Exact comparison (a pure copy) against a per-element multi-index reference, for every dtype,
// every axis (negative too), odd and empty pieces and a large multi-threaded case; errors name
// the problem; cost is positive, grows with size and checks the schedule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_split {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("split"); }

// Splits x (shape `in`) along axis into pieces of `sizes` and checks each output element against
// X at the multi-index shifted by the piece's offset.
template <typename T>
void check_split(const Dims& in, const Dims& sizes, int64_t axis_attr, unsigned threads, uint32_t seed,
                 bool with_attr = false) {
    const int rank = static_cast<int>(in.size());
    const size_t axis = static_cast<size_t>(axis_attr < 0 ? axis_attr + rank : axis_attr);
    std::vector<T> x = random_values<T>(static_cast<size_t>(element_count(in)), seed);
    std::vector<std::vector<T>> ys;
    std::vector<Dims> shapes;
    KernelLaunch l;
    l.inputs = {shape_ref(dtype_of<T>(), in, x.data())};
    for (int64_t s : sizes) {
        Dims d = in;
        d[axis] = s;
        shapes.push_back(d);
        ys.push_back(random_values<T>(static_cast<size_t>(element_count(d)), 77));
    }
    for (size_t i = 0; i < sizes.size(); ++i) l.outputs.push_back(shape_ref(dtype_of<T>(), shapes[i], ys[i].data()));
    l.attrs = {{"axis", axis_attr}};
    if (with_attr) l.attrs.set("split", sizes);
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    int64_t offset = 0, bad = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
        for (int64_t flat = 0; flat < element_count(shapes[k]); ++flat) {
            Dims idx(in.size());
            int64_t rest = flat;
            for (size_t d = in.size(); d-- > 0;) {
                idx[d] = rest % shapes[k][d];
                rest /= shapes[k][d];
            }
            idx[axis] += offset;
            int64_t src = 0;
            for (size_t d = 0; d < in.size(); ++d) src = src * in[d] + idx[d];
            if (std::memcmp(&ys[k][static_cast<size_t>(flat)], &x[static_cast<size_t>(src)], sizeof(T)) != 0) ++bad;
        }
        offset += sizes[k];
    }
    EXPECT_EQ(bad, 0) << "axis " << axis_attr;
}

template <typename T>
class SplitTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(SplitTyped, AllTypes);

TYPED_TEST(SplitTyped, EveryAxisOfOddShapes) {
    const Dims in = {3, 7, 13, 5};
    for (int axis = 0; axis < 4; ++axis) {
        const int64_t n = in[static_cast<size_t>(axis)];
        check_split<TypeParam>(in, {1, n - 1}, axis, 2, 3 + static_cast<uint32_t>(axis));
        check_split<TypeParam>(in, {n}, axis - 4, 1, 13 + static_cast<uint32_t>(axis));
    }
    check_split<TypeParam>(in, {2, 0, 4, 1, 6}, 2, 2, 31, true);
}

TEST(Split, LargeSplitOnThreeThreads) {
    check_split<float>({1, 64, 61, 67}, {19, 45}, 1, 3, 5);
    check_split<f16>({3, 1000, 42}, {37, 5}, -1, 3, 6);
    check_split<float>({0, 4}, {1, 3}, 1, 2, 7);
}

TEST(SplitArgs, RejectsMalformedLaunches) {
    std::vector<float> x(2 * 8 * 4, 1.0f), a(2 * 3 * 4, 0.0f), b(2 * 6 * 4, 0.0f);
    std::vector<int32_t> bi(2 * 5 * 4, 0);
    KernelLaunch l;
    l.inputs = {ref(x, {2, 8, 4})};
    l.outputs = {ref(a, {2, 3, 4}), ref(b, {2, 6, 4})};
    l.attrs = {{"axis", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "split: outputs' dims along axis 1 sum to 9 (3 + 6), input 0 has 8");
    l.outputs = {ref(a, {2, 3, 4}), ref(b, {2, 5, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output 1 is 2x5x3, input 0 is 2x8x4");
    l.outputs = {ref(a, {2, 3, 4}), ref(b, {2, 5, 4})};
    l.attrs = {{"axis", int64_t{1}}, {"split", std::vector<int64_t>{4, 4}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'split' = [4, 4] disagrees with the outputs' [3, 5]");
    l.attrs = {{"axis", int64_t{-4}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'axis' = -4 outside [-3, 2]");
    l.attrs = {{"axis", int64_t{1}}, {"num_outputs", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'num_outputs'");
    l.attrs = {{"axis", int64_t{1}}};
    l.outputs = {ref(a, {2, 3, 4}), ref(bi, {2, 5, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output 1 is i32, input 0 is f32");
    l.outputs = {};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "at least one output");
    EXPECT_EQ(a, std::vector<float>(a.size(), 0.0f));
}

TEST(SplitCost, PositiveMonotonicAndScheduleChecked) {
    static char dummy[8];
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16, DType::I64}) {
            double prev = 0;
            for (int64_t rows = 1; rows <= int64_t{1} << 24; rows = rows * 3 + 1) {
                KernelLaunch l;
                l.inputs = {shape_ref(dt, {rows, 64}, dummy)};
                l.outputs = {shape_ref(dt, {rows, 16}, dummy + 1), shape_ref(dt, {rows, 48}, dummy + 2)};
                l.attrs = {{"axis", int64_t{1}}};
                const CycleBreakdown cb = cost_ok(kernel(), l, preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " rows=" << rows;
                prev = cb.total;
                if (rows == 1093) {
                    expect_schedule_checked(kernel(), l, preset);
                }
            }
        }
}

}  // namespace

}  // namespace test_kernel_split
