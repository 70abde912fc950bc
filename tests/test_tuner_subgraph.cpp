// Subgraph tuning (issue 15): operands resident in L2 (docs/device-model.md 3.3), launches over
// bands of rows, split regions (compiler/split.hpp) run by the executor bit for bit as the unsplit
// model, and the split search (tuner/subgraph.hpp).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "device/cost.hpp"
#include "device/kernel.hpp"
#include "test_util.hpp"

namespace loom {
namespace {

using device::DType;
using device::KernelLaunch;
using test::preset_spec;
using test::registered_kernel;
using test::shape_ref;

// A 3x3 pad-1 conv launch of C -> K channels on an H x W map (shapes only).
KernelLaunch conv_launch(int64_t C, int64_t K, int64_t H, int64_t W, DType dt = DType::F32) {
    KernelLaunch l;
    l.inputs = {shape_ref(dt, {1, C, H, W}), shape_ref(dt, {K, C, 3, 3})};
    l.outputs = {shape_ref(dt, {1, K, H, W})};
    l.attrs = {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    return l;
}

KernelLaunch add_launch(int64_t n) {
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {1, 16, n / 16, 1}), shape_ref(DType::F32, {1, 16, n / 16, 1})};
    l.outputs = {shape_ref(DType::F32, {1, 16, n / 16, 1})};
    l.attrs = {{"op", std::string("add")}};
    return l;
}

double launch_total(const device::KernelDef& k, const KernelLaunch& l, const device::DeviceSpec& s) {
    auto c = device::kernel_launch_cost(k, l, s);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? c->total : 0;
}

// Without marks the launch costs what the kernel says, bit for bit; each mark makes it cheaper.
TEST(L2Residency, MarksOnlyEverMakeALaunchCheaperAndNothingChangesWithout) {
    for (std::string_view preset : test::presets()) {
        const device::DeviceSpec& s = preset_spec(preset);
        const device::KernelDef& conv = registered_kernel("conv");
        for (DType dt : {DType::F32, DType::F16}) {
            KernelLaunch l = conv_launch(64, 64, 48, 320, dt);
            auto plain = conv.cost(l, s);
            ASSERT_TRUE(plain.ok());
            auto same = device::kernel_launch_cost(conv, l, s);
            ASSERT_TRUE(same.ok());
            EXPECT_EQ(same->total, plain->total);
            EXPECT_EQ(same->l2_hit_bytes, plain->l2_hit_bytes);
            KernelLaunch in = l;
            in.l2_inputs = 1;
            KernelLaunch out = l;
            out.l2_outputs = true;
            KernelLaunch both = in;
            both.l2_outputs = true;
            const double t = plain->total, ti = launch_total(conv, in, s), to = launch_total(conv, out, s),
                         tb = launch_total(conv, both, s);
            EXPECT_LE(ti, t) << preset;
            EXPECT_LE(to, t) << preset;
            EXPECT_LT(tb, t) << preset;
            EXPECT_LE(tb, std::min(ti, to)) << preset;
            auto w = device::kernel_launch_work(conv, both, s);
            ASSERT_TRUE(w.ok());
            EXPECT_TRUE(w->cube.a_l2 && w->cube.c_l2 && !w->cube.residual_l2);
            // A resident A hits L2 on its first read.
            auto cb = device::kernel_launch_cost(conv, in, s);
            EXPECT_GT(cb->l2_hit_bytes, plain->l2_hit_bytes);
            EXPECT_LT(cb->l2_miss_bytes, plain->l2_miss_bytes);
        }
        const device::KernelDef& bin = registered_kernel("binary");
        KernelLaunch a = add_launch(1 << 20);
        const double t = bin.cost(a, s)->total;
        EXPECT_EQ(launch_total(bin, a, s), t);
        KernelLaunch one = a;
        one.l2_inputs = 0b10;
        KernelLaunch all = a;
        all.l2_inputs = 0b11;
        all.l2_outputs = true;
        const double t1 = launch_total(bin, one, s), ta = launch_total(bin, all, s);
        EXPECT_LT(t1, t) << preset;
        EXPECT_LT(ta, t1) << preset;
        auto w = device::kernel_launch_work(bin, one, s);
        ASSERT_TRUE(w.ok());
        EXPECT_DOUBLE_EQ(w->vector.l2_in_bytes, 4.0);  // one of the two f32 inputs
        auto cb = device::kernel_launch_cost(bin, all, s);
        EXPECT_EQ(cb->l2_miss_bytes, 0);
        EXPECT_GT(cb->l2_hit_bytes, 0);
    }
}

// A memory-bound Vector op gains the ratio of the L2 rates to the memory rate (3.3). An add
// moves 8 bytes in and 4 out per element: on edge they shared 51.2 B/cycle of memory and now take
// a 64 B/cycle MTE port each (12 / 51.2 against 8 / 64: 1.86x); on dc 37.5 against 125 B/cycle
// shared (3.24x).
TEST(L2Residency, AResidentStreamMovesAtTheL2Rate) {
    const device::KernelDef& bin = registered_kernel("binary");
    for (auto [preset, lo, hi] : {std::tuple{"edge", 1.8, 1.9}, std::tuple{"dc", 3.1, 3.4}}) {
        const device::DeviceSpec& s = preset_spec(preset);
        KernelLaunch a = add_launch(1 << 22);
        KernelLaunch r = a;
        r.l2_inputs = 0b11;
        r.l2_outputs = true;
        const double gain = launch_total(bin, a, s) / launch_total(bin, r, s);
        EXPECT_GT(gain, lo) << preset;
        EXPECT_LT(gain, hi) << preset;
    }
}

TEST(L2Residency, AMarkPastTheInputsIsRefusedNamingTheKernel) {
    const device::KernelDef& bin = registered_kernel("binary");
    KernelLaunch a = add_launch(1024);
    a.l2_inputs = 0b100;
    auto w = device::kernel_launch_work(bin, a, preset_spec("edge"));
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find("binary: l2_inputs"), std::string::npos) << w.status().message();
}

// A launch over a band of rows reads exactly the band and writes back exactly its kept rows.
TEST(LaunchBands, ABandRunsOnItsRowsAndWritesBackTheKeptOnes) {
    std::mt19937 rng(11);
    const int64_t N = 2, C = 3, H = 13, W = 7;
    std::vector<float> x = test::random_floats(rng, static_cast<size_t>(N * C * H * W));
    std::vector<float> y(x.size(), -7.0f);
    const device::KernelDef& relu = registered_kernel("unary");
    KernelLaunch l;
    const int64_t row = 4, rows = 5;
    l.inputs = {shape_ref(DType::F32, {N, C, rows, W}, x.data())};
    l.outputs = {shape_ref(DType::F32, {N, C, rows, W}, y.data())};
    l.attrs = {{"op", std::string("relu")}};
    auto bands = std::make_shared<device::LaunchBands>();
    bands->inputs = {{H, row, 0, 0}};
    bands->outputs = {{H, row, 1, 4}};  // keeps rows 5 .. 7
    l.bands = bands;
    ASSERT_TRUE(device::check_launch_bands(relu, l).ok());
    ThreadPool pool(2);
    ASSERT_TRUE(device::run_kernel_launch(relu, l, pool).ok());
    for (int64_t p = 0; p < N * C; ++p)
        for (int64_t r = 0; r < H; ++r)
            for (int64_t c = 0; c < W; ++c) {
                const size_t i = static_cast<size_t>((p * H + r) * W + c);
                const float want = r >= row + 1 && r < row + 4 ? std::max(x[i], 0.0f) : -7.0f;
                ASSERT_EQ(y[i], want) << p << " " << r << " " << c;
            }
    // A band past the tensor's rows, or kept rows past the band, is refused.
    bands->outputs = {{H, row, 1, 6}};
    EXPECT_FALSE(device::check_launch_bands(relu, l).ok());
    bands->outputs = {{H, 9, 0, 1}};
    EXPECT_FALSE(device::check_launch_bands(relu, l).ok());
}

}  // namespace
}  // namespace loom
