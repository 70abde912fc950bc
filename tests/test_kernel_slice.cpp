// slice (device/kernels/slice.cpp): X[starts:ends:steps] along axes with ONNX clamping.
// Exact comparison (a pure copy) against a reference that lists each axis's selected indices by
// stepping from the clamped start, for every dtype, the ONNX documentation cases (including
// negative steps and INT64_MAX/INT64_MIN ends), odd shapes and a large multi-threaded case;
// errors name the problem; cost is positive, grows with size, charges strided reads more and
// checks the schedule.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_slice {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();

const KernelDef& kernel() { return registered_kernel("slice"); }

// The indices ONNX Slice takes from an axis of size n.
Dims selected(int64_t n, int64_t start, int64_t end, int64_t step) {
    if (start < 0) start += n;
    if (end < 0) end += n;
    Dims v;
    if (step > 0) {
        start = std::max<int64_t>(0, std::min(start, n));
        end = std::max<int64_t>(0, std::min(end, n));
        for (int64_t i = start; i < end; i += step) v.push_back(i);
    } else {
        start = std::max<int64_t>(0, std::min(start, n - 1));
        end = std::max<int64_t>(-1, std::min(end, n - 1));
        for (int64_t i = start; i > end; i += step) v.push_back(i);
    }
    return v;
}

struct SliceCase {
    Dims in, starts, ends, axes, steps;  // axes/steps empty: attribute absent
};

template <typename T>
void check_slice(const SliceCase& c, unsigned threads, uint32_t seed) {
    const size_t r = c.in.size();
    std::vector<Dims> pick(r);
    for (size_t d = 0; d < r; ++d)
        for (int64_t i = 0; i < c.in[d]; ++i) pick[d].push_back(i);
    for (size_t k = 0; k < c.starts.size(); ++k) {
        int64_t axis = c.axes.empty() ? static_cast<int64_t>(k) : c.axes[k];
        if (axis < 0) axis += static_cast<int64_t>(r);
        const int64_t step = c.steps.empty() ? 1 : c.steps[k];
        pick[static_cast<size_t>(axis)] = selected(c.in[static_cast<size_t>(axis)], c.starts[k], c.ends[k], step);
    }
    Dims out(r);
    for (size_t d = 0; d < r; ++d) out[d] = static_cast<int64_t>(pick[d].size());
    std::vector<T> x = random_values<T>(static_cast<size_t>(element_count(c.in)), seed);
    std::vector<T> want(static_cast<size_t>(element_count(out))), y = random_values<T>(want.size(), 5);
    for (int64_t flat = 0; flat < element_count(out); ++flat) {
        int64_t rest = flat, src = 0, mul = 1;
        for (size_t d = r; d-- > 0;) {
            src += pick[d][static_cast<size_t>(rest % out[d])] * mul;
            rest /= out[d];
            mul *= c.in[d];
        }
        want[static_cast<size_t>(flat)] = x[static_cast<size_t>(src)];
    }
    KernelLaunch l;
    l.inputs = {shape_ref(dtype_of<T>(), c.in, x.data())};
    l.outputs = {shape_ref(dtype_of<T>(), out, y.data())};
    l.attrs = {{"starts", c.starts}, {"ends", c.ends}};
    if (!c.axes.empty()) l.attrs.set("axes", c.axes);
    if (!c.steps.empty()) l.attrs.set("steps", c.steps);
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(want.empty() || std::memcmp(y.data(), want.data(), want.size() * sizeof(T)) == 0);
}

// The cases of the ONNX Slice documentation, on a 20 x 10 x 5 tensor.
const std::vector<SliceCase>& onnx_cases() {
    static const std::vector<SliceCase> v = {
        {{20, 10, 5}, {0, 0}, {3, 10}, {0, 1}, {1, 1}},                 // slice
        {{20, 10, 5}, {0, 0, 3}, {20, 10, 4}, {}, {}},                  // slice_default_axes
        {{20, 10, 5}, {0, 0, 3}, {20, 10, 4}, {0, 1, 2}, {}},           // slice_default_steps
        {{20, 10, 5}, {1}, {1000}, {1}, {1}},                           // slice_end_out_of_bounds
        {{20, 10, 5}, {0}, {-1}, {1}, {1}},                             // slice_neg
        {{20, 10, 5}, {20, 10, 4}, {0, 0, 1}, {0, 1, 2}, {-1, -3, -2}}, // slice_neg_steps
        {{20, 10, 5}, {0, 0, 3}, {20, 10, 4}, {0, -2, -1}, {}},         // slice_negative_axes
        {{20, 10, 5}, {1000}, {1000}, {1}, {1}},                        // slice_start_out_of_bounds
    };
    return v;
}

template <typename T>
class SliceTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(SliceTyped, AllTypes);

TYPED_TEST(SliceTyped, OnnxDocumentationCases) {
    uint32_t seed = 1;
    for (const SliceCase& c : onnx_cases()) check_slice<TypeParam>(c, 2, seed++);
}

TEST(Slice, ExtremeEndsAndNegativeSteps) {
    // Reverse a whole axis: start -1, end INT64_MIN, step -1.
    check_slice<float>({{7, 13}, {-1}, {kMin}, {1}, {-1}}, 2, 1);
    check_slice<float>({{7, 13}, {0, kMin}, {kMax, kMax}, {0, 1}, {2, 3}}, 2, 2);
    check_slice<f16>({{7, 13}, {kMax, 5}, {kMin, -100}, {0, 1}, {-2, -4}}, 2, 3);
    check_slice<int32_t>({{7, 13}, {kMin}, {kMax}, {-1}, {kMax}}, 2, 4);  // one element
    check_slice<int32_t>({{7, 13}, {kMax}, {kMin}, {-1}, {kMin}}, 2, 5);  // one element, backwards
    check_slice<float>({{1, 1}, {0, 0}, {1, 1}, {}, {}}, 1, 6);
    check_slice<float>({{3, 0, 5}, {1}, {3}, {0}, {}}, 1, 7);  // empty axis elsewhere
    check_slice<float>({{3, 4, 5}, {3}, {1}, {1}, {1}}, 1, 8);   // empty result
    check_slice<float>({{2, 3, 5, 7, 11, 13}, {1, -1, 0}, {5, kMin, 12}, {2, 3, 4}, {1, -2, 5}}, 2, 9);
}

TEST(Slice, LargeSliceOnThreeThreads) {
    check_slice<float>({{1, 64, 130, 131}, {3, 1, 2}, {60, -1, 129}, {1, 2, 3}, {1, 1, 1}}, 3, 11);
    check_slice<f16>({{1, 64, 130, 131}, {0, -1}, {64, kMin}, {1, 3}, {2, -3}}, 3, 12);
}

TEST(SliceArgs, RejectsMalformedLaunches) {
    std::vector<float> x(20 * 10, 1.0f), y(20 * 10, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {20, 10})};
    l.outputs = {ref(y, {3, 9})};
    l.attrs = {{"starts", Dims{0, 0}}, {"ends", Dims{3, 10}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "slice: output 0 has shape 3x9, expected 3x10 (dim 1 is 9, expected 10)");
    l.outputs = {ref(y, {3, 10})};
    l.attrs = {{"starts", Dims{0, 0}}, {"ends", Dims{3, 10}}, {"steps", Dims{1, 0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'steps' has 0 for axis 1");
    l.attrs = {{"starts", Dims{0, 0}}, {"ends", Dims{3, 10}}, {"axes", Dims{0, -2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'axes' names axis 0 twice");
    l.attrs = {{"starts", Dims{0, 0}}, {"ends", Dims{3, 10}}, {"axes", Dims{0, 2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'axes' = 2 outside [-2, 1]");
    l.attrs = {{"starts", Dims{0}}, {"ends", Dims{3, 10}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "must have one length, got 1, 2, 1, 1");
    l.attrs = {{"ends", Dims{3, 10}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'starts' is required");
    l.attrs = {{"starts", Dims{0, 0}}, {"ends", Dims{3, 10}}, {"strides", Dims{1, 1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'strides'");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(SliceCost, PositiveMonotonicStridedCostsMoreAndScheduleChecked) {
    static char dummy[4];
    auto launch = [](DType dt, int64_t rows, int64_t step) {
        KernelLaunch l;
        l.inputs = {shape_ref(dt, {rows, 256}, dummy)};
        l.outputs = {shape_ref(dt, {rows, 256 / step}, dummy + 1)};
        l.attrs = {{"starts", Dims{0}}, {"ends", Dims{256}}, {"axes", Dims{1}}, {"steps", Dims{step}}};
        return l;
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16, DType::U8}) {
            double prev = 0;
            for (int64_t rows = 1; rows <= int64_t{1} << 22; rows = rows * 3 + 1) {
                const CycleBreakdown cb = cost_ok(kernel(), launch(dt, rows, 1), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " rows=" << rows;
                prev = cb.total;
            }
            // As many output elements: every 4th element of 4x the rows costs more than whole rows.
            EXPECT_GT(cost_ok(kernel(), launch(dt, 1 << 18, 4), preset).total,
                      cost_ok(kernel(), launch(dt, 1 << 16, 1), preset).total);
            KernelLaunch l = launch(dt, 100, 1);
            expect_schedule_checked(kernel(), l, preset);
        }
}

}  // namespace

}  // namespace test_kernel_slice
