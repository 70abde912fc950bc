// shape (device/kernels/shape.cpp): Y = X's dims [start, end) as i64, ONNX opset-15 clamping.
// Exact comparison; errors name the problem; cost is positive.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_shape {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

const KernelDef& kernel() { return registered_kernel("shape"); }

// Runs shape on a 1x3x7x13 f16 tensor with `attrs`; returns Y (of `len` values).
std::vector<int64_t> shape_of(const KernelAttrs& attrs, int64_t len) {
    ThreadPool pool(1);
    std::vector<f16> x(1 * 3 * 7 * 13, f32_to_f16(1.5f));
    std::vector<int64_t> y(static_cast<size_t>(len), -99);
    KernelLaunch l;
    l.inputs = {ref(x, {1, 3, 7, 13})};
    l.outputs = {shape_ref(DType::I64, {len}, y.data())};
    l.attrs = attrs;
    loom::Status st = kernel().run(l, pool);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return y;
}

TEST(Shape, AllDimsByDefault) { EXPECT_EQ(shape_of({}, 4), (std::vector<int64_t>{1, 3, 7, 13})); }

TEST(Shape, StartAndEndFollowOnnxClamping) {
    EXPECT_EQ(shape_of({{"start", int64_t{1}}}, 3), (std::vector<int64_t>{3, 7, 13}));
    EXPECT_EQ(shape_of({{"start", int64_t{-2}}}, 2), (std::vector<int64_t>{7, 13}));
    EXPECT_EQ(shape_of({{"end", int64_t{-1}}}, 3), (std::vector<int64_t>{1, 3, 7}));
    EXPECT_EQ(shape_of({{"start", int64_t{1}}, {"end", int64_t{3}}}, 2), (std::vector<int64_t>{3, 7}));
    EXPECT_EQ(shape_of({{"start", int64_t{-10}}, {"end", int64_t{10}}}, 4), (std::vector<int64_t>{1, 3, 7, 13}));
    EXPECT_EQ(shape_of({{"start", int64_t{3}}, {"end", int64_t{1}}}, 0), std::vector<int64_t>{});
    EXPECT_EQ(shape_of({{"start", int64_t{4}}}, 0), std::vector<int64_t>{});
}

TEST(Shape, ScalarAndEmptyInputs) {
    ThreadPool pool(1);
    float s = 2.0f;
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {}, &s)};
    l.outputs = {shape_ref(DType::I64, {0}, nullptr)};
    EXPECT_TRUE(kernel().run(l, pool).ok());
    std::vector<int64_t> y(3, -1);
    l.inputs = {shape_ref(DType::U8, {2, 0, 5}, nullptr)};
    l.outputs = {shape_ref(DType::I64, {3}, y.data())};
    ASSERT_TRUE(kernel().run(l, pool).ok());
    EXPECT_EQ(y, (std::vector<int64_t>{2, 0, 5}));
}

TEST(ShapeArgs, RejectsMalformedLaunches) {
    std::vector<float> x(6, 1.0f);
    std::vector<int64_t> y(3, 0);
    std::vector<int32_t> yi(2, 0);
    KernelLaunch l;
    l.inputs = {ref(x, {2, 3})};
    l.outputs = {shape_ref(DType::I64, {3}, y.data())};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "shape: output 0 has shape 3, expected 2 (dim 0 is 3");
    l.outputs = {ref(yi, {2})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "output 0 is i32, must be i64");
    l.outputs = {shape_ref(DType::I64, {2}, y.data())};
    l.attrs = {{"begin", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'begin'");
    l.attrs = {{"start", 1.5}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'start' must be an int");
}

TEST(ShapeCost, PositiveAndScheduleChecked) {
    static char dummy[4];
    for (std::string_view preset : loom::test::presets()) {
        KernelLaunch l;
        l.inputs = {shape_ref(DType::F32, {1, 3, 224, 224}, dummy)};
        l.outputs = {shape_ref(DType::I64, {4}, dummy + 1)};
        const double four = cost_ok(kernel(), l, preset).total;
        EXPECT_GT(four, 0);
        l.attrs = {{"start", int64_t{2}}};
        l.outputs = {shape_ref(DType::I64, {2}, dummy + 1)};
        EXPECT_LE(cost_ok(kernel(), l, preset).total, four);
        l.tiling = VectorSchedule{3, true, 0};
        EXPECT_NE(cost_error(kernel(), l, preset).message().find("multiple of"), std::string::npos);
    }
}

}  // namespace

}  // namespace test_kernel_shape
