// depth_to_space (device/kernels/depth_to_space.cpp): DCR and CRD (PixelShuffle) channel-to-
// space moves. Exact comparison against the ONNX definition as reshape -> transpose -> reshape
// (index arithmetic over the 6-D view), the ONNX documentation examples for both modes, every
// dtype, odd shapes and a large multi-threaded case; errors name the problem; cost is positive,
// grows with size and checks the schedule.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_depth_to_space {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;

const KernelDef& kernel() { return registered_kernel("depth_to_space"); }

// ONNX: DCR views X as [N, b, b, C', H, W] and transposes to [N, C', H, b, W, b]; CRD views X
// as [N, C', b, b, H, W]. Walks the transposed 6-D index space in order (= Y's order).
template <typename T>
std::vector<T> reference(const std::vector<T>& x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t b, bool crd) {
    const int64_t cb = c / (b * b);
    std::vector<T> y;
    for (int64_t in = 0; in < n; ++in)
        for (int64_t ic = 0; ic < cb; ++ic)
            for (int64_t ih = 0; ih < h; ++ih)
                for (int64_t i = 0; i < b; ++i)
                    for (int64_t iw = 0; iw < w; ++iw)
                        for (int64_t j = 0; j < b; ++j) {
                            const int64_t ch = crd ? (ic * b + i) * b + j : (i * b + j) * cb + ic;
                            y.push_back(x[static_cast<size_t>(((in * c + ch) * h + ih) * w + iw)]);
                        }
    return y;
}

template <typename T>
void check(int64_t n, int64_t c, int64_t h, int64_t w, int64_t b, bool crd, unsigned threads, uint32_t seed) {
    std::vector<T> x = random_values<T>(static_cast<size_t>(n * c * h * w), seed);
    const std::vector<T> want = reference(x, n, c, h, w, b, crd);
    std::vector<T> y = random_values<T>(want.size(), 3);
    KernelLaunch l;
    l.inputs = {ref(x, {n, c, h, w})};
    l.outputs = {ref(y, {n, c / (b * b), h * b, w * b})};
    l.attrs = {{"blocksize", b}, {"mode", std::string(crd ? "CRD" : "DCR")}};
    ThreadPool pool(threads);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_TRUE(want.empty() || std::memcmp(y.data(), want.data(), want.size() * sizeof(T)) == 0) << (crd ? "CRD" : "DCR") << " b=" << b;
}

template <typename T>
class DepthToSpaceTyped : public testing::Test {};
using AllTypes = testing::Types<float, f16, int8_t, int32_t, int64_t, uint8_t>;
TYPED_TEST_SUITE(DepthToSpaceTyped, AllTypes);

TYPED_TEST(DepthToSpaceTyped, BothModesOnOddShapes) {
    uint32_t seed = 1;
    for (bool crd : {false, true}) {
        check<TypeParam>(1, 4, 7, 13, 2, crd, 2, seed++);
        check<TypeParam>(2, 18, 5, 3, 3, crd, 2, seed++);
        check<TypeParam>(1, 3, 1, 1, 1, crd, 1, seed++);
        check<TypeParam>(1, 48, 1, 1, 4, crd, 1, seed++);
        check<TypeParam>(1, 4, 0, 5, 2, crd, 1, seed++);  // empty
    }
}

TEST(DepthToSpace, OnnxDocumentationExamples) {
    std::vector<float> x;
    for (int c = 0; c < 8; ++c)
        for (int i = 0; i < 6; ++i) x.push_back(static_cast<float>(9 * c + i));
    const std::vector<float> dcr = {0,  18, 1,  19, 2,  20, 36, 54, 37, 55, 38, 56, 3,  21, 4,  22,
                                    5,  23, 39, 57, 40, 58, 41, 59, 9,  27, 10, 28, 11, 29, 45, 63,
                                    46, 64, 47, 65, 12, 30, 13, 31, 14, 32, 48, 66, 49, 67, 50, 68};
    const std::vector<float> crd = {0,  9,  1,  10, 2,  11, 18, 27, 19, 28, 20, 29, 3,  12, 4,  13,
                                    5,  14, 21, 30, 22, 31, 23, 32, 36, 45, 37, 46, 38, 47, 54, 63,
                                    55, 64, 56, 65, 39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68};
    ThreadPool pool(1);
    for (bool is_crd : {false, true}) {
        std::vector<float> y(48, -1.0f);
        KernelLaunch l;
        l.inputs = {ref(x, {1, 8, 2, 3})};
        l.outputs = {ref(y, {1, 2, 4, 6})};
        l.attrs = {{"blocksize", int64_t{2}}};
        if (is_crd) l.attrs.set("mode", std::string("CRD"));
        ASSERT_TRUE(kernel().run(l, pool).ok());
        EXPECT_EQ(y, is_crd ? crd : dcr);
    }
}

TEST(DepthToSpace, LargePixelShuffleOnThreeThreads) {
    check<float>(1, 64 * 4, 67, 61, 2, true, 3, 11);   // Real-ESRGAN style x2 pixel shuffle
    check<f16>(1, 3 * 16, 130, 97, 4, false, 3, 12);
}

TEST(DepthToSpaceArgs, RejectsMalformedLaunches) {
    std::vector<float> x(1 * 8 * 2 * 3, 1.0f), y(48, 0.0f);
    KernelLaunch l;
    l.inputs = {ref(x, {1, 8, 2, 3})};
    l.outputs = {ref(y, {1, 2, 6, 4})};
    l.attrs = {{"blocksize", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "depth_to_space: output 0 has shape 1x2x6x4, expected 1x2x4x6 (dim 2 is 6, expected 4)");
    l.outputs = {ref(y, {1, 2, 4, 6})};
    l.attrs = {{"blocksize", int64_t{3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "input 0 has 8 channels, not a multiple of blocksize^2 = 3^2");
    l.attrs = {{"blocksize", int64_t{0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'blocksize' = 0 must be >= 1");
    l.attrs = {};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'blocksize' is required");
    l.attrs = {{"blocksize", int64_t{2}}, {"mode", std::string("RCD")}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'mode' = 'RCD' (DCR or CRD)");
    l.attrs = {{"blocksize", int64_t{2}}, {"upscale", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'upscale'");
    l.attrs = {{"blocksize", int64_t{2}}};
    l.inputs = {ref(x, {8, 2, 3})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "input 0 is 8x2x3, must be 4-D");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(DepthToSpaceCost, PositiveMonotonicAndScheduleChecked) {
    static char dummy[4];
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            double prev = 0;
            for (int64_t h = 1; h <= int64_t{1} << 14; h = h * 3 + 1) {
                KernelLaunch l;
                l.inputs = {shape_ref(dt, {1, 64, h, 64}, dummy)};
                l.outputs = {shape_ref(dt, {1, 16, h * 2, 128}, dummy + 1)};
                l.attrs = {{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}};
                const CycleBreakdown cb = cost_ok(kernel(), l, preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " h=" << h;
                prev = cb.total;
                expect_schedule_checked(kernel(), l, preset);
            }
        }
}

}  // namespace

namespace {

// The fused residual: Y = depth_to_space(X) + R, against the reference plus R in float64
// (f32: exact to one rounding; f16: the sum rounded once to f16).
template <typename T>
void check_residual(int64_t n, int64_t c, int64_t h, int64_t w, int64_t b, bool crd, uint32_t seed) {
    std::vector<T> x = random_values<T>(static_cast<size_t>(n * c * h * w), seed);
    const std::vector<T> moved = reference(x, n, c, h, w, b, crd);
    std::vector<T> r = random_values<T>(moved.size(), seed + 100);
    std::vector<T> y(moved.size());
    KernelLaunch l;
    const std::vector<int64_t> out = {n, c / (b * b), h * b, w * b};
    l.inputs = {ref(x, {n, c, h, w}), ref(r, out)};
    l.outputs = {ref(y, out)};
    l.attrs = {{"blocksize", b}, {"mode", std::string(crd ? "CRD" : "DCR")}};
    ThreadPool pool(2);
    loom::Status st = kernel().run(l, pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    for (size_t i = 0; i < y.size(); ++i) {
        if constexpr (std::is_same_v<T, float>) {
            ASSERT_EQ(y[i], static_cast<float>(static_cast<double>(moved[i]) + static_cast<double>(r[i]))) << i;
        } else {
            const double want = ref_round_f16(ref_decode_f16(moved[i].bits) + ref_decode_f16(r[i].bits));
            ASSERT_EQ(ref_decode_f16(y[i].bits), want) << i;
        }
    }
}

TEST(DepthToSpace, FusedResidualAddsAfterTheMove) {
    check_residual<float>(1, 12, 5, 7, 2, true, 41);
    check_residual<float>(2, 27, 3, 4, 3, false, 42);
    check_residual<f16>(1, 48, 4, 5, 4, true, 43);
}

TEST(DepthToSpace, FusedResidualIsCheckedAndCosted) {
    std::vector<float> x(1 * 8 * 3 * 3), r(2 * 6 * 6), y(2 * 6 * 6);
    KernelLaunch l;
    l.inputs = {ref(x, {1, 8, 3, 3}), ref(r, {1, 2, 6, 5})};
    l.outputs = {ref(y, {1, 2, 6, 6})};
    l.attrs = {{"blocksize", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "residual R");
    std::vector<int32_t> xi(8 * 9), ri(2 * 36), yi(2 * 36);
    l.inputs = {ref(xi, {1, 8, 3, 3}), ref(ri, {1, 2, 6, 6})};
    l.outputs = {ref(yi, {1, 2, 6, 6})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "residual R with dtype i32");
    // The residual costs more than the plain move: R is read and added.
    std::vector<float> xb(1 * 64 * 60 * 80), rb(16 * 120 * 160), yb(16 * 120 * 160);
    KernelLaunch plain;
    plain.inputs = {ref(xb, {1, 64, 60, 80})};
    plain.outputs = {ref(yb, {1, 16, 120, 160})};
    plain.attrs = {{"blocksize", int64_t{2}}};
    KernelLaunch fused = plain;
    fused.inputs.push_back(ref(rb, {1, 16, 120, 160}));
    EXPECT_GT(cost_ok(kernel(), fused, "edge").total, cost_ok(kernel(), plain, "edge").total);
}

}  // namespace

}  // namespace test_kernel_depth_to_space
