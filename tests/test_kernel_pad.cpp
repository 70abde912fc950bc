// pad (device/kernels/pad.cpp): constant / reflect / edge / wrap padding with negative pads
// cropping first. Exact comparison (a pure copy) against a per-element reference that bounces
// (reflect), clamps (edge) or wraps indices, for every dtype, the ONNX documentation examples,
// odd shapes and a large multi-threaded case; errors name the problem; cost is positive, grows
// with size and checks the schedule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_pad {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("pad"); }

// Index into an axis of size n for padded position i (-1: the fill), per mode.
int64_t source(const std::string& mode, int64_t i, int64_t n) {
    if (i >= 0 && i < n) return i;
    if (mode == "constant") return -1;
    if (mode == "edge") return i < 0 ? 0 : n - 1;
    if (mode == "wrap") {
        while (i < 0) i += n;
        return i % n;
    }
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;  // reflect: bounce off the ends
    return i;
}

template <typename T>
T fill_of(double v) {
    if constexpr (std::is_same_v<T, f16>) return f32_to_f16(static_cast<float>(v));
    else return static_cast<T>(v);
}

template <typename T>
void check_pad(const Dims& in, const Dims& pads, const std::string& mode, double value, unsigned threads,
               uint32_t seed) {
    const size_t r = in.size();
    Dims out(r), crop0(r), kept(r);
    for (size_t d = 0; d < r; ++d) {
        crop0[d] = std::max<int64_t>(0, -pads[d]);
        kept[d] = in[d] - crop0[d] - std::max<int64_t>(0, -pads[d + r]);
        out[d] = in[d] + pads[d] + pads[d + r];
    }
    std::vector<T> x = random_values<T>(static_cast<size_t>(element_count(in)), seed);
    std::vector<T> want(static_cast<size_t>(element_count(out))), y = random_values<T>(want.size(), 3);
    const T fill = fill_of<T>(value);
    for (int64_t flat = 0; flat < element_count(out); ++flat) {
        int64_t rest = flat, src = 0, mul = 1;
        bool is_fill = false;
        for (size_t d = r; d-- > 0;) {
            const int64_t o = rest % out[d];
            rest /= out[d];
            const int64_t s = source(mode, o - std::max<int64_t>(0, pads[d]), kept[d]);
            is_fill = is_fill || s < 0;
            src += (s + crop0[d]) * mul;
            mul *= in[d];
        }
        want[static_cast<size_t>(flat)] = is_fill ? fill : x[static_cast<size_t>(src)];
    }
    KernelLaunch l;
    l.inputs = {shape_ref(dtype_of<T>(), in, x.data())};
    l.outputs = {shape_ref(dtype_of<T>(), out, y.data())};
    l.attrs = {{"pads", pads}, {"mode", mode}};
    if (mode == "constant") l.attrs.set("value", value);
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(want.empty() || std::memcmp(y.data(), want.data(), want.size() * sizeof(T)) == 0) << mode;
}

template <typename T>
class PadTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(PadTyped, AllTypes);

TYPED_TEST(PadTyped, EveryModeOnOddShapes) {
    uint32_t seed = 1;
    for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
        // ONNX's test: 1x3x4x5, pads [0,0,1,3, 0,0,2,4] (constant) / [0,0,1,1, 0,0,1,1].
        if (std::string(mode) == "constant") check_pad<TypeParam>({1, 3, 4, 5}, {0, 0, 1, 3, 0, 0, 2, 4}, mode, 12, 2, seed++);
        check_pad<TypeParam>({1, 3, 4, 5}, {0, 0, 1, 1, 0, 0, 1, 1}, mode, 3, 2, seed++);
        check_pad<TypeParam>({2, 7, 13}, {1, 2, 3, 0, 6, 12}, mode, 5, 2, seed++);
        check_pad<TypeParam>({2, 7, 13}, {0, -2, 3, -1, 4, -5}, mode, 5, 1, seed++);  // crop and pad
        check_pad<TypeParam>({1, 1}, {0, 0, 0, 0}, mode, 1, 1, seed++);
    }
    check_pad<TypeParam>({3, 5}, {2, 7, 4, 9}, "wrap", 0, 2, seed++);        // wrap more than once
    check_pad<TypeParam>({3, 1}, {1, 4, 2, 3}, "edge", 0, 2, seed++);        // size-1 dim
    check_pad<TypeParam>({3, 0, 2}, {1, 2, 0, 1, 1, 1}, "constant", 4, 2, seed++);  // empty input dim
    check_pad<TypeParam>({4, 6}, {-4, 0, 0, 0}, "constant", 4, 2, seed++);   // cropped to nothing
}

TEST(Pad, OnnxDocumentationExamples) {
    ThreadPool pool(1);
    std::vector<float> x = {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f};
    auto run = [&](const std::string& mode, Dims pads, Dims out) {
        std::vector<float> y(static_cast<size_t>(element_count(out)), -1.0f);
        KernelLaunch l;
        l.inputs = {ref(x, {3, 2})};
        l.outputs = {shape_ref(DType::F32, out, y.data())};
        l.attrs = {{"pads", pads}, {"mode", mode}};
        EXPECT_TRUE(kernel().run(l, pool).ok());
        return y;
    };
    EXPECT_EQ(run("constant", {0, 2, 0, 0}, {3, 4}),
              (std::vector<float>{0, 0, 1.0f, 1.2f, 0, 0, 2.3f, 3.4f, 0, 0, 4.5f, 5.7f}));
    // The documentation's reflect example pads 2 on a dim of 2 (numpy bounces twice); this kernel
    // keeps reflect to pads < dim, so it is refused, and pad 1 gives the example's last 3 columns.
    {
        std::vector<float> y(12);
        KernelLaunch l;
        l.inputs = {ref(x, {3, 2})};
        l.outputs = {ref(y, {3, 4})};
        l.attrs = {{"pads", Dims{0, 2, 0, 0}}, {"mode", std::string("reflect")}};
        expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mode 'reflect' needs pads < the dim: dim 1 is 2");
    }
    EXPECT_EQ(run("reflect", {0, 1, 0, 0}, {3, 3}),
              (std::vector<float>{1.2f, 1.0f, 1.2f, 3.4f, 2.3f, 3.4f, 5.7f, 4.5f, 5.7f}));
    EXPECT_EQ(run("edge", {0, 2, 0, 0}, {3, 4}),
              (std::vector<float>{1.0f, 1.0f, 1.0f, 1.2f, 2.3f, 2.3f, 2.3f, 3.4f, 4.5f, 4.5f, 4.5f, 5.7f}));
    EXPECT_EQ(run("wrap", {2, 1, 1, 1}, {6, 4}),
              (std::vector<float>{3.4f, 2.3f, 3.4f, 2.3f, 5.7f, 4.5f, 5.7f, 4.5f, 1.2f, 1.0f, 1.2f, 1.0f,
                                  3.4f, 2.3f, 3.4f, 2.3f, 5.7f, 4.5f, 5.7f, 4.5f, 1.2f, 1.0f, 1.2f, 1.0f}));
}

TEST(Pad, LargePadOnThreeThreads) {
    check_pad<float>({1, 19, 130, 131}, {0, 0, 3, 2, 0, 0, 1, 4}, "reflect", 0, 3, 5);
    check_pad<f16>({1, 19, 130, 131}, {0, 1, -3, 2, 0, 2, 1, -4}, "constant", 0.5, 3, 6);
}

TEST(PadArgs, RejectsMalformedLaunches) {
    std::vector<float> x(3 * 4, 1.0f), y(64, 0.0f);
    std::vector<int32_t> xi(3 * 4, 1), yi(5 * 6, 0);
    KernelLaunch l;
    l.inputs = {ref(x, {3, 4})};
    l.outputs = {ref(y, {5, 7})};
    l.attrs = {{"pads", Dims{1, 1, 1, 1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "pad: output 0 has shape 5x7, expected 5x6 (dim 1 is 7, expected 6)");
    l.outputs = {ref(y, {5, 6})};
    l.attrs = {{"pads", Dims{1, 1, 1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'pads' has 3 values, expected 2 x rank = 4");
    l.attrs = {{"pads", Dims{3, 1, 1, 1}}, {"mode", std::string("reflect")}};
    l.outputs = {ref(y, {7, 6})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mode 'reflect' needs pads < the dim: dim 0 is 3");
    l.attrs = {{"pads", Dims{-2, 0, -2, 0}}};
    l.outputs = {ref(y, {0, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "pads -2 and -2 crop more than dim 0 of size 3");
    l.attrs = {{"pads", Dims{1, 1, 1, 1}}, {"mode", std::string("symmetric")}};
    l.outputs = {ref(y, {5, 6})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'mode' = 'symmetric'");
    l.attrs = {{"pads", Dims{1, 1, 1, 1}}, {"mode", std::string("edge")}, {"value", 1.0}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'value' is for mode 'constant'");
    l.attrs = {{"pads", Dims{1, 1, 1, 1}}, {"axes", Dims{0, 1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'axes'");
    l.inputs = {ref(xi, {3, 4})};
    l.outputs = {ref(yi, {5, 6})};
    l.attrs = {{"pads", Dims{1, 1, 1, 1}}, {"value", 1.5}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'value' = 1.5 is not a i32 value");
    l.attrs = {{"pads", Dims{1, 1, 1, 1}}, {"value", 3e10}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "is not a i32 value");
    std::vector<float> e;
    l.inputs = {shape_ref(DType::F32, {0, 4}, nullptr)};
    l.outputs = {ref(y, {2, 4})};
    l.attrs = {{"pads", Dims{1, 0, 1, 0}}, {"mode", std::string("edge")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "mode 'edge' cannot pad dim 0: it is empty");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(PadCost, PositiveMonotonicAndScheduleChecked) {
    static char dummy[4];
    for (std::string_view preset : loom::test::presets())
        for (const char* mode : {"constant", "reflect"})
            for (DType dt : {DType::F32, DType::F16}) {
                double prev = 0;
                for (int64_t rows = 2; rows <= int64_t{1} << 22; rows = rows * 3 + 1) {
                    KernelLaunch l;
                    l.inputs = {shape_ref(dt, {rows, 64}, dummy)};
                    l.outputs = {shape_ref(dt, {rows + 2, 66}, dummy + 1)};
                    l.attrs = {{"pads", Dims{1, 1, 1, 1}}, {"mode", std::string(mode)}};
                    const CycleBreakdown cb = cost_ok(kernel(), l, preset);
                    EXPECT_GT(cb.total, 0);
                    EXPECT_GE(cb.total, prev) << preset << " rows=" << rows;
                    prev = cb.total;
                    if (rows == 41) {
                        expect_schedule_checked(kernel(), l, preset);
                    }
                }
            }
}

}  // namespace

}  // namespace test_kernel_pad
