// Subgraph tuning (issue 15): operands resident in L2 (docs/device-model.md 3.3), launches over
// bands of rows, split regions (compiler/split.hpp) run by the executor bit for bit as the unsplit
// model, and the split search (tuner/subgraph.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "common/thread_pool.hpp"
#include "compiler/compile.hpp"
#include "compiler/model_file.hpp"
#include "compiler/split.hpp"
#include "compiler/tuning.hpp"
#include "device/cost.hpp"
#include "device/kernel.hpp"
#include "executor/executor.hpp"
#include "executor/frame_scheduler.hpp"
#include "tests/test_util.hpp"
#include "tuner/subgraph.hpp"

namespace loom::test_tuner_subgraph {  // apart from the rest of its unity batch
namespace {

using compiler::CompiledModel;
using compiler::HostTensor;
using compiler::SplitChoice;
using device::DType;
using device::KernelAttrs;
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

// ---- split regions (compiler/split.hpp) run by the executor ------------------------------------

const KernelAttrs kPad1{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};

// The SRVGGNetCompact shape (test::srvgg_graph): Winograd 3x3 convs with PReLU (fused), a conv to
// 3 s^2 channels, DepthToSpace(s) plus a resized skip (fused into the DepthToSpace as its residual).
test::GraphBuilder srvgg(int convs, int64_t ch, int64_t s, const std::string& resize_mode = "nearest") {
    return test::srvgg_graph(convs, ch, s, resize_mode);
}

// Every conv path the splits cut (test::mixed_conv_chain: Winograd, depthwise, 1x1 and Relu,
// dilated, 5x5, Winograd with a residual), then a Relu and a per-channel Mul.
test::GraphBuilder mixed_chain() {
    test::GraphBuilder b = test::mixed_conv_chain();
    b.g.outputs.clear();
    b.random_f32("scale", {1, 8, 1, 1}, 7, 0.5f, 1.5f);
    b.node("Relu", {"y"}, {"ry"});
    b.node("Mul", {"ry", "scale"}, {"z"});
    b.output("z");
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b;
}

Result<CompiledModel> compile(const compiler::Graph& g, const std::vector<int64_t>& dims,
                              std::vector<SplitChoice> splits = {},
                              compiler::Precision precision = compiler::Precision::FP32,
                              const device::DeviceSpec& spec = preset_spec("edge"), bool optimize = true) {
    compiler::CompileOptions o;
    o.shapes = {{g.value(g.inputs[0]).name, dims}};
    o.precision = precision;
    o.splits = std::move(splits);
    o.optimize = optimize;
    return compiler::compile_graph(g, o, spec);
}

HostTensor run(device::Device& dev, CompiledModel m, const HostTensor& x, executor::RunStats* stats = nullptr) {
    auto lm = executor::LoadedModel::load(dev, std::make_shared<const CompiledModel>(std::move(m)));
    EXPECT_TRUE(lm.ok()) << lm.status().to_string();
    if (!lm.ok()) return {};
    auto s = executor::Session::create(*lm);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    auto y = (*s)->run(std::span<const HostTensor>(&x, 1), stats);
    EXPECT_TRUE(y.ok()) << y.status().to_string();
    return y.ok() ? std::move((*y)[0]) : HostTensor();
}

void expect_identical(const HostTensor& a, const HostTensor& b, const std::string& what) {
    ASSERT_EQ(a.dims(), b.dims()) << what;
    ASSERT_EQ(a.bytes(), b.bytes()) << what;
    if (std::memcmp(a.data(), b.data(), a.bytes()) == 0) return;
    int64_t count = 0, first = -1;
    const auto* x = static_cast<const unsigned char*>(a.data());
    const auto* y = static_cast<const unsigned char*>(b.data());
    const size_t es = device::dtype_size(a.dtype());
    for (int64_t i = 0; i < a.elements(); ++i)
        if (std::memcmp(x + i * es, y + i * es, es) != 0) {
            if (first < 0) first = i;
            ++count;
        }
    const auto& d = a.dims();
    ADD_FAILURE() << what << ": " << count << " of " << a.elements() << " elements differ, the first at row "
                  << first / d[3] % d[2];
}

// A graph compiled whole, its steps' names and its output for `x`: what a split must equal.
struct Baseline {
    std::vector<std::string> names;
    HostTensor ref;
};
Baseline baseline(device::Device& dev, const compiler::Graph& g, const HostTensor& x,
                  compiler::Precision precision = compiler::Precision::FP32, bool optimize = true) {
    auto m = compile(g, x.dims(), {}, precision, preset_spec("edge"), optimize);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return {};
    Baseline b;
    for (const auto& s : m->steps) b.names.push_back(s.name);
    b.ref = run(dev, std::move(*m), x);
    return b;
}

// The names of `m`'s steps, in order.
std::vector<std::string> step_names(const CompiledModel& m) {
    std::vector<std::string> v;
    for (const auto& s : m.steps) v.push_back(s.name);
    return v;
}

// Split regions give the unsplit output bit for bit: Winograd chains with a DepthToSpace and a
// resized skip (the whole model as one region, and parts of it), frames whose sides are multiples
// of nothing, bands of several heights, fp32 and fp16, the Session and the FrameScheduler.
TEST(SplitRegions, EqualTheUnsplitRunBitForBit) {
    auto dev = test::make_device();
    const compiler::Graph g = srvgg(3, 8, 2).g;
    for (compiler::Precision precision : {compiler::Precision::FP32, compiler::Precision::FP16})
        for (auto [h, w] : {std::pair<int64_t, int64_t>{37, 53}, {64, 24}}) {
            const std::vector<int64_t> dims{1, 3, h, w};
            HostTensor x = test::random_host_f32(dims, 7);
            const auto [names, ref] = baseline(*dev, g, x, precision);
            ASSERT_FALSE(names.empty());
            // The whole model, the convs only (Winograd: bands start on 4 rows), the tail.
            const std::vector<std::pair<size_t, size_t>> regions{{0, names.size() - 1}, {1, 4}, {3, names.size() - 1}};
            for (auto [first, last] : regions)
                for (int64_t rows : {4, 8, 12, 28}) {
                    const std::string what = fmt::format("{}x{} {} {}..{} rows {}", h, w,
                                                         compiler::precision_name(precision), names[first], names[last],
                                                         rows);
                    auto m = compile(g, dims, {{names[first], names[last], rows}}, precision);
                    ASSERT_TRUE(m.ok()) << what << ": " << m.status().to_string();
                    ASSERT_EQ(m->splits.size(), 1u) << what;
                    executor::RunStats stats;
                    expect_identical(run(*dev, *m, x, &stats), ref, what);
                    EXPECT_GT(stats.launches, names.size()) << what;  // bands launched
                }
        }
    // The FrameScheduler runs the same band launches.
    const std::vector<int64_t> dims{1, 3, 37, 53};
    HostTensor x = test::random_host_f32(dims, 9);
    const auto [names, ref] = baseline(*dev, g, x);
    ASSERT_FALSE(names.empty());
    auto m = compile(g, dims, {{names.front(), names.back(), 8}});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    auto lm = executor::LoadedModel::load(*dev, std::make_shared<const CompiledModel>(std::move(*m)));
    ASSERT_TRUE(lm.ok());
    auto p = executor::FrameScheduler::create(*lm, {});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    for (int i = 0; i < 3; ++i) {
        auto f = (*p)->submit(std::span<const HostTensor>(&x, 1));
        ASSERT_TRUE(f.ok());
        auto y = f->get();
        ASSERT_TRUE(y.ok()) << y.status().to_string();
        expect_identical((*y)[0], ref, "frame pipeline");
    }
}

TEST(SplitRegions, EveryConvPathAndPointwiseOpsEqualTheUnsplitRun) {
    auto dev = test::make_device();
    const compiler::Graph g = mixed_chain().g;
    const std::vector<int64_t> dims{1, 3, 45, 31};
    HostTensor x = test::random_host_f32(dims, 3);
    for (bool optimize : {true, false}) {  // unfused: Relu, Add and Mul run as steps of their own
        const auto [names, ref] = baseline(*dev, g, x, compiler::Precision::FP32, optimize);
        ASSERT_FALSE(names.empty());
        for (int64_t rows : {1, 3, 5, 16}) {
            const std::string what = fmt::format("fuse {} rows {}", optimize, rows);
            auto m = compile(g, dims, {{names.front(), names.back(), rows}}, compiler::Precision::FP32,
                             preset_spec("edge"), optimize);
            ASSERT_TRUE(m.ok()) << what << ": " << m.status().to_string();
            expect_identical(run(*dev, *m, x), ref, what);
        }
    }
}

// Resize by a whole factor: nearest at 3x, linear at 2x (its coordinates shift exactly), a band of
// several regions side by side.
TEST(SplitRegions, ResizeBandsAndSeveralRegionsEqualTheUnsplitRun) {
    auto dev = test::make_device();
    for (auto [s, mode] : {std::pair<int64_t, std::string>{3, "nearest"}, {2, "linear"}}) {
        const compiler::Graph g = srvgg(2, 8, s, mode).g;
        const std::vector<int64_t> dims{1, 3, 29, 20};
        HostTensor x = test::random_host_f32(dims, 5);
        const auto [names, ref] = baseline(*dev, g, x);
        ASSERT_FALSE(names.empty());
        const size_t n = names.size();
        auto m = compile(g, dims, {{names[0], names[2], 8}, {names[3], names[n - 1], 3 * s}});
        ASSERT_TRUE(m.ok()) << mode << ": " << m.status().to_string();
        EXPECT_EQ(m->splits.size(), 2u);
        expect_identical(run(*dev, *m, x), ref, mode);
    }
}

// Every output row of every step of a region is computed once, band after band; the first band
// starts at the top; the marks say which operands the region keeps in L2.
TEST(SplitRegions, ThePlanComputesEveryRowOnceAndMarksWhatStaysInL2) {
    const compiler::Graph g = srvgg(3, 8, 2).g;
    auto m = compile(g, {1, 3, 37, 53});
    ASSERT_TRUE(m.ok());
    const int last = static_cast<int>(m->steps.size()) - 1;
    for (int64_t rows : {2, 6, 10, 74}) {
        auto p = compiler::plan_split(*m, 0, last, rows);
        ASSERT_TRUE(p.ok()) << p.status().to_string();
        EXPECT_EQ(p->bands, (74 + rows - 1) / rows);
        std::vector<int64_t> next(m->steps.size(), 0);  // the next row each step computes
        int64_t band = 0;
        for (const compiler::BandLaunch& l : p->launches) {
            ASSERT_GE(l.band, band);
            band = l.band;
            const device::RowBand& y = l.outputs[0].band;
            EXPECT_EQ(y.row + y.keep_begin, next[static_cast<size_t>(l.step)]) << "step " << l.step;
            next[static_cast<size_t>(l.step)] = y.row + y.keep_end;
            EXPECT_EQ(l.l2_outputs, l.step != last);
            // Input 0 comes from the step before (in the region) except for the first step's.
            const bool from_region = l.step > 0 && m->steps[static_cast<size_t>(l.step)].op != "Resize";
            EXPECT_EQ((l.l2_inputs & 1u) != 0, from_region) << "step " << l.step;
        }
        for (size_t si = 0; si < m->steps.size(); ++si)
            EXPECT_EQ(next[si], m->tensors[static_cast<size_t>(m->steps[si].outputs[0])].dims[2]) << "step " << si;
        EXPECT_GT(p->l2_bytes, 0);
    }
}

// A split the compiler cannot run bit for bit, asked for from outside, is refused naming the step
// and why.
TEST(SplitRegions, AnIllegalSplitIsRefusedNamingTheStep) {
    const compiler::Graph g = srvgg(3, 8, 2).g;
    const std::vector<int64_t> dims{1, 3, 37, 53};
    auto base = compile(g, dims);
    ASSERT_TRUE(base.ok());
    const std::vector<std::string> names = step_names(*base);
    auto refused = [&](std::vector<SplitChoice> splits, const std::string& want,
                       const device::DeviceSpec& spec = preset_spec("edge")) {
        auto m = compile(g, dims, std::move(splits), compiler::Precision::FP32, spec);
        ASSERT_FALSE(m.ok()) << want << " " << ::testing::PrintToString(names);
        EXPECT_NE(m.status().message().find(want), std::string::npos) << m.status().message();
    };
    // Winograd's blocks: a conv's bands start on multiples of 4 rows.
    refused({{names[1], names[2], 6}}, "bands of 6 rows");
    refused({{names[1], names[2], 6}}, "must start on multiples of 4 rows");
    // An intermediate read after the region (the conv's output feeds the next conv).
    refused({{names[1], names[1], 4}, {names[1], names[2], 4}}, "overlap");
    refused({{"nope", names[2], 4}}, "no step 'nope'");
    // An L2 too small for the bands.
    device::DeviceSpec tiny = preset_spec("edge");
    tiny.l2_capacity_mib = 0;
    refused({{names[1], names[2], 4}}, "split region 'c0' .. 'c1' in bands of 4 rows keeps", tiny);
    refused({{names[1], names[2], 4}}, "bytes live in L2; 'edge' has 0", tiny);
    // A strided conv cannot run band by band.
    test::GraphBuilder b;
    b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
    b.random_f32("w0", {8, 3, 3, 3}, 1);
    b.random_f32("w1", {8, 8, 3, 3}, 2);
    b.node("Conv", {"x", "w0"}, {"c0"}, kPad1);
    KernelAttrs strided = kPad1;
    strided.set("strides", std::vector<int64_t>{2, 2});
    b.node("Conv", {"c0", "w1"}, {"c1"}, strided);
    b.output("c1");
    auto m = compile(b.g, dims, {{"c0", "c1", 4}});
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("'c1', Conv) cannot run band by band: stride 2 along H"), std::string::npos)
        << m.status().message();
}

// A split model's file: version 4 with its regions and band tilings, loaded back equal and run
// equal; a model without one is written as version 3, as before splits existed.
TEST(SplitRegions, AModelFileRoundTripsItsRegions) {
    test::TempDir dir;
    auto dev = test::make_device();
    const compiler::Graph g = srvgg(2, 8, 2).g;
    const std::vector<int64_t> dims{1, 3, 29, 40};
    HostTensor x = test::random_host_f32(dims, 4);
    auto base = compile(g, dims);
    ASSERT_TRUE(base.ok());
    const std::vector<std::string> names = step_names(*base);
    auto m = compile(g, dims, {{names.front(), names.back(), 10}});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    auto version = [](const std::string& path) {
        std::ifstream f(path, std::ios::binary);
        char h[12] = {};
        f.read(h, 12);
        uint32_t v = 0;
        std::memcpy(&v, h + 8, 4);
        return v;
    };
    ASSERT_TRUE(compiler::save_compiled_model(dir.file("split.loom"), *m).ok());
    ASSERT_TRUE(compiler::save_compiled_model(dir.file("whole.loom"), *base).ok());
    EXPECT_EQ(version(dir.file("split.loom")), 4u);
    EXPECT_EQ(version(dir.file("whole.loom")), 3u);
    auto back = compiler::load_compiled_model(dir.file("split.loom"));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->splits.size(), 1u);
    EXPECT_EQ(back->splits[0].first, m->splits[0].first);
    EXPECT_EQ(back->splits[0].last, m->splits[0].last);
    EXPECT_EQ(back->splits[0].rows, 10);
    EXPECT_EQ(back->splits[0].tilings, m->splits[0].tilings);
    EXPECT_EQ(compiler::compiled_model_json(*back).dump(), compiler::compiled_model_json(*m).dump());
    expect_identical(run(*dev, std::move(*back), x), run(*dev, *base, x), "loaded split model");
    // A version-3 file cannot hold regions.
    {
        std::fstream f(dir.file("split.loom"), std::ios::binary | std::ios::in | std::ios::out);
        const uint32_t three = 3;
        f.seekp(8);
        f.write(reinterpret_cast<const char*>(&three), 4);
    }
    auto v3 = compiler::load_compiled_model(dir.file("split.loom"));
    ASSERT_FALSE(v3.ok());
    EXPECT_NE(v3.status().message().find("a version-3 file with split regions"), std::string::npos)
        << v3.status().message();
    // A region whose tilings do not match its band launches is refused.
    CompiledModel bad = *m;
    bad.splits[0].tilings.pop_back();
    ASSERT_TRUE(compiler::save_compiled_model(dir.file("bad.loom"), bad).ok());
    auto refused = compiler::load_compiled_model(dir.file("bad.loom"));
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("tilings for"), std::string::npos) << refused.status().message();
}

// The keys of band launches carry their L2 marks, in the text a knowledge base stores.
TEST(SplitRegions, BandLaunchKeysCarryTheirL2Marks) {
    compiler::StepKey k;
    k.kernel = "conv";
    k.inputs = {{DType::F32, {1, 8, 6, 8}}};
    k.outputs = {{DType::F32, {1, 8, 4, 8}}};
    k.attrs = "pads=[0,1,0,1]";
    k.spec_hash = 0x0123456789abcdefull;
    k.cost_model_version = 2;
    const std::string plain = k.text();
    k.l2_inputs = 1;
    k.l2_outputs = true;
    EXPECT_EQ(k.text(),
              "conv|in=f32[1,8,6,8]|out=f32[1,8,4,8]|attrs=pads=[0,1,0,1]|l2=in1,out1|spec=0123456789abcdef|cost=2");
    EXPECT_NE(k.text(), plain);
    EXPECT_EQ(tuner::kb_key(k).attrs, "pads=[0,1,0,1];~l2=in1,out1");
}

// ---- the split search (tuner/subgraph.hpp) -----------------------------------------------------

// Elementwise steps on a 16-channel map (memory-bound; left unfused when compiled without the
// fusion passes): Relu, a per-channel Mul, an Add of the input, and a Sigmoid when `sigmoid`.
test::GraphBuilder pointwise_chain(bool sigmoid) {
    test::GraphBuilder b;
    b.input("x", {1, 16, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
    b.random_f32("k", {1, 16, 1, 1}, 3, 0.5f, 1.5f);
    b.node("Relu", {"x"}, {"r"});
    b.node("Mul", {"r", "k"}, {"m"});
    b.node("Add", {"m", "x"}, {sigmoid ? "a" : "y"});
    if (sigmoid) b.node("Sigmoid", {"a"}, {"y"});
    b.output("y");
    b.g.source = "pointwise";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b;
}

// Memory-bound steps (unfused elementwise ops on a map larger than L2): the search splits them,
// the split is cheaper and runs equal; the same model on a frame that fits L2 is left whole; two
// searches choose the same.
TEST(SplitSearch, SplitsChainsWhoseIntermediatesOverflowL2AndNothingElse) {
    const test::GraphBuilder b = pointwise_chain(true);
    const device::DeviceSpec& spec = preset_spec("edge");
    for (auto [h, w, split] : {std::tuple{512, 512, true}, {64, 64, false}}) {
        const std::vector<int64_t> dims{1, 16, h, w};
        auto m = compile(b.g, dims, {}, compiler::Precision::FP32, spec, false);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        auto r = tuner::choose_splits(*m, spec);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_EQ(!r->regions.empty(), split) << h;
        if (!split) continue;
        EXPECT_LT(r->split_ns, 0.9 * r->whole_ns);
        for (const tuner::RegionReport& g : r->regions) {
            EXPECT_LT(g.split_ns, g.whole_ns);
            EXPECT_LE(g.l2_bytes, spec.l2_bytes());
            EXPECT_GT(g.overflow_bytes, spec.l2_bytes());
        }
        auto again = tuner::choose_splits(*m, spec);
        ASSERT_TRUE(again.ok());
        ASSERT_EQ(again->choices.size(), r->choices.size());
        for (size_t i = 0; i < r->choices.size(); ++i) {
            EXPECT_EQ(again->choices[i].first, r->choices[i].first);
            EXPECT_EQ(again->choices[i].last, r->choices[i].last);
            EXPECT_EQ(again->choices[i].rows, r->choices[i].rows);
        }
        auto s = compile(b.g, dims, r->choices, compiler::Precision::FP32, spec, false);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        EXPECT_NEAR(tuner::model_kernels_ns(*s, spec), r->split_ns, 1e-6 * r->split_ns);
        auto dev = test::make_device();
        HostTensor x = test::random_host_f32(dims, 8);
        expect_identical(run(*dev, std::move(*s), x), run(*dev, std::move(*m), x), "searched split");
    }
}

// Op tuning on top of the split (--mode all): the tuned split is no slower than op tuning alone,
// and every region kept beats its steps op-tuned whole.
TEST(SplitSearch, OpTuningOnTopKeepsOnlyRegionsThatStillWin) {
    const test::GraphBuilder b = pointwise_chain(false);
    const device::DeviceSpec& spec = preset_spec("dc");
    compiler::CompileOptions base;
    base.shapes = {{"x", {1, 16, 1024, 768}}};
    base.optimize = false;
    auto compile_fn = [&](const compiler::CompileOptions& o) { return compiler::compile_graph(b.g, o, spec); };
    ThreadPool pool(2);
    tuner::TuneOptions t;
    t.trials = 60;
    t.pool = &pool;
    auto r = tuner::tune_subgraphs(compile_fn, base, spec, true, t);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_LE(r->final_ns, r->op_ns);
    EXPECT_LT(r->op_ns, r->default_ns);
    ASSERT_FALSE(r->search.regions.empty());
    for (const tuner::RegionReport& g : r->search.regions)
        if (g.kept) {
            EXPECT_LT(g.op_split_ns, g.op_whole_ns);
        }
    EXPECT_EQ(r->final_options.splits.size(),
              static_cast<size_t>(std::count_if(r->search.regions.begin(), r->search.regions.end(),
                                                [](const tuner::RegionReport& g) { return g.kept; })));
    // Deterministic: the same figures again.
    auto again = tuner::tune_subgraphs(compile_fn, base, spec, true, t);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->final_ns, r->final_ns);
}

}  // namespace
}  // namespace loom::test_tuner_subgraph
