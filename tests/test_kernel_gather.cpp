// gather (device/kernels/gather.cpp): Y = X indexed along an axis by i32/i64 indices (negative
// wrap). Exact comparison (a pure copy) against a per-element reference for every data dtype,
// both index dtypes, every axis, scalar and 2-D indices, the ONNX documentation examples and a
// large multi-threaded case; an out-of-range index fails naming its position and value and
// writes nothing; other errors name the problem; cost is positive, grows with size, charges
// single-element rows more and checks the schedule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_gather {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("gather"); }

template <typename T, typename I>
void check_gather(const Dims& in, const Dims& idx_shape, int64_t axis_attr, unsigned threads, uint32_t seed) {
    const size_t r = in.size();
    const size_t axis = static_cast<size_t>(axis_attr < 0 ? axis_attr + static_cast<int64_t>(r) : axis_attr);
    const int64_t dim = in[axis];
    std::mt19937 rng(seed);
    std::vector<I> idx(static_cast<size_t>(element_count(idx_shape)));
    for (auto& i : idx) i = static_cast<I>(static_cast<int64_t>(rng() % static_cast<uint32_t>(2 * dim)) - dim);
    Dims out(in.begin(), in.begin() + static_cast<int64_t>(axis));
    out.insert(out.end(), idx_shape.begin(), idx_shape.end());
    out.insert(out.end(), in.begin() + static_cast<int64_t>(axis) + 1, in.end());
    int64_t inner = 1;
    for (size_t d = axis + 1; d < r; ++d) inner *= in[d];
    std::vector<T> x = random_values<T>(static_cast<size_t>(element_count(in)), seed + 1);
    std::vector<T> want(static_cast<size_t>(element_count(out))), y = random_values<T>(want.size(), 3);
    for (int64_t flat = 0; flat < element_count(out); ++flat) {
        const int64_t i = flat % inner, k = (flat / inner) % static_cast<int64_t>(idx.size()),
                      o = flat / (inner * static_cast<int64_t>(idx.size()));
        int64_t j = static_cast<int64_t>(idx[static_cast<size_t>(k)]);
        if (j < 0) j += dim;
        want[static_cast<size_t>(flat)] = x[static_cast<size_t>((o * dim + j) * inner + i)];
    }
    KernelLaunch l;
    l.inputs = {shape_ref(dtype_of<T>(), in, x.data()), shape_ref(dtype_of<I>(), idx_shape, idx.data())};
    l.outputs = {shape_ref(dtype_of<T>(), out, y.data())};
    l.attrs = {{"axis", axis_attr}};
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(want.empty() || std::memcmp(y.data(), want.data(), want.size() * sizeof(T)) == 0) << "axis " << axis_attr;
}

template <typename T>
class GatherTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(GatherTyped, AllTypes);

TYPED_TEST(GatherTyped, EveryAxisBothIndexTypes) {
    uint32_t seed = 1;
    for (int64_t axis = -3; axis < 3; ++axis) {
        check_gather<TypeParam, int64_t>({7, 13, 5}, {4}, axis, 2, seed++);
        check_gather<TypeParam, int32_t>({7, 13, 5}, {2, 3}, axis, 1, seed++);
        check_gather<TypeParam, int32_t>({7, 13, 5}, {}, axis, 1, seed++);  // scalar index drops the axis
    }
}

TEST(Gather, OddAndEmptyShapes) {
    check_gather<float, int64_t>({1}, {1}, 0, 1, 1);
    check_gather<float, int64_t>({1, 1}, {3}, 1, 1, 2);
    check_gather<float, int64_t>({4, 0, 3}, {2}, 0, 1, 3);  // empty rows
    check_gather<float, int64_t>({4, 5}, {0}, 1, 1, 4);     // no indices
    check_gather<f16, int32_t>({17, 23}, {5, 1, 7}, 1, 2, 5);
}

TEST(Gather, OnnxDocumentationExamples) {
    ThreadPool pool(1);
    std::vector<float> data = {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f};
    std::vector<int64_t> i0 = {0, 1, 1, 2};
    std::vector<float> y0(8);
    KernelLaunch l;
    l.inputs = {ref(data, {3, 2}), ref(i0, {2, 2})};
    l.outputs = {ref(y0, {2, 2, 2})};
    l.attrs = {{"axis", int64_t{0}}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(y0, (std::vector<float>{1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f}));
    std::vector<float> data1 = {1.0f, 1.2f, 1.9f, 2.3f, 3.4f, 3.9f, 4.5f, 5.7f, 5.9f};
    std::vector<int32_t> i1 = {0, 2};
    std::vector<float> y1(6);
    l.inputs = {ref(data1, {3, 3}), ref(i1, {1, 2})};
    l.outputs = {ref(y1, {3, 1, 2})};
    l.attrs = {{"axis", int64_t{1}}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(y1, (std::vector<float>{1.0f, 1.9f, 2.3f, 3.9f, 4.5f, 5.9f}));
    std::vector<int64_t> neg = {0, -3};  // gather_negative_indices: -3 wraps to 7 of 10
    std::vector<float> data2 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, y2(2);
    l.inputs = {ref(data2, {10}), ref(neg, {2})};
    l.outputs = {ref(y2, {2})};
    l.attrs = {{"axis", int64_t{0}}};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(y2, (std::vector<float>{0.0f, 7.0f}));
}

TEST(Gather, LargeGatherOnThreeThreads) {
    check_gather<float, int64_t>({1000, 97}, {3000}, 0, 3, 7);
    check_gather<f16, int32_t>({64, 3000}, {2, 700}, 1, 3, 8);
}

TEST(GatherArgs, OutOfRangeIndexNamesItAndWritesNothing) {
    std::vector<float> x(7 * 3, 1.0f), y(4 * 3, 0.0f);
    std::vector<int64_t> idx = {0, 6, 7, 1};
    std::vector<int32_t> idx32 = {0, -8, 1, 2};
    KernelLaunch l;
    l.inputs = {ref(x, {7, 3}), ref(idx, {4})};
    l.outputs = {ref(y, {4, 3})};
    ThreadPool pool(2);
    loom::Status st = kernel().run(l, pool);
    EXPECT_EQ(st.code(), StatusCode::OUT_OF_RANGE);
    EXPECT_NE(st.message().find("gather: indices element 2 = 7 is outside [-7, 6]"), std::string::npos) << st.to_string();
    l.inputs = {ref(x, {7, 3}), ref(idx32, {4})};
    st = kernel().run(l, pool);
    EXPECT_NE(st.message().find("indices element 1 = -8"), std::string::npos) << st.to_string();
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
    EXPECT_GT(cost_ok(kernel(), l, "edge").total, 0);  // the cost does not read indices
}

TEST(GatherArgs, RejectsMalformedLaunches) {
    std::vector<float> x(7 * 3, 1.0f), y(4 * 3, 0.0f);
    std::vector<int64_t> idx = {0, 1, 2, 3};
    std::vector<float> fidx = {0, 1, 2, 3};
    std::vector<int32_t> yi(12, 0);
    KernelLaunch l;
    l.inputs = {ref(x, {7, 3}), ref(idx, {4})};
    l.outputs = {ref(y, {3, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "gather: output 0 has shape 3x4, expected 4x3 (dim 0 is 3, expected 4)");
    l.outputs = {ref(y, {4, 3})};
    l.inputs = {ref(x, {7, 3}), ref(fidx, {4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "input 1 (indices) is f32, must be i32 or i64");
    l.inputs = {ref(x, {7, 3}), ref(idx, {4})};
    l.outputs = {ref(yi, {4, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output 0 is i32, input 0 (data) is f32");
    l.outputs = {ref(y, {4, 3})};
    l.attrs = {{"axis", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'axis' = 2 outside [-2, 1]");
    l.attrs = {{"batch_dims", int64_t{0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'batch_dims'");
    l.attrs = {};
    l.inputs = {ref(x, {7, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "gather takes 2 input(s), got 1");
    std::vector<float> big(2 * 2 * 2 * 2 * 2);
    std::vector<int64_t> idx3(8, 0);
    l.inputs = {ref(big, {2, 2, 2, 2, 2}), ref(idx3, {2, 2, 2})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output rank 7");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(GatherCost, PositiveMonotonicElementRowsCostMoreAndScheduleChecked) {
    static char dummy[4];
    auto launch = [](DType dt, int64_t n, int64_t inner) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {1000, inner}, dummy), shape_ref(DType::I64, {n}, dummy + 1)};
        l.outputs = {shape_ref(dt, {n, inner}, dummy + 2)};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16, DType::U8}) {
            double prev = 0;
            for (int64_t n = 1; n <= int64_t{1} << 22; n = n * 3 + 1) {
                const CycleBreakdown cb = cost_ok(kernel(), launch(dt, n, 64), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " n=" << n;
                prev = cb.total;
            }
            EXPECT_GT(cost_ok(kernel(), launch(dt, 1 << 20, 1), preset).total,
                      cost_ok(kernel(), launch(dt, 1 << 14, 64), preset).total);
            KernelLaunch l = launch(dt, 100, 64);
            expect_schedule_checked(kernel(), l, preset);
        }
}

}  // namespace

}  // namespace test_kernel_gather
