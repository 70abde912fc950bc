// The kernel interface a tuner searches through (device/cost.hpp, compiler/tuning.hpp;
// docs/device-model.md, "Tuning interface"): every kernel's cost() is cost_of_work on its work(),
// bit for bit; the tiling spaces enumerate exactly what they count, agree with the legality checks
// point by point, hold every default and every legal tiling up to the problem's size, and larger
// tiles are never cheaper; fused neighbours are checked together, in the cost model and in
// lowering; a tiling source's legal tiling is used, recorded in the .loom and changes time, never
// results, and an illegal one fails naming the step; StepKey is stable across compiles and
// changes with a shape or an attribute. Presets: every embedded one; fixed seeds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "common/hash.hpp"
#include "compiler/compile.hpp"
#include "compiler/compile_cache.hpp"
#include "compiler/model_file.hpp"
#include "compiler/tuning.hpp"
#include "device/cost.hpp"
#include "device/kernel.hpp"
#include "executor/executor.hpp"
#include "tests/test_util.hpp"

namespace loom::test_tuning_interface {  // apart from the rest of its unity batch
namespace {

using device::CubeTiling;
using device::CycleBreakdown;
using device::DType;
using device::KernelAttrs;
using device::KernelLaunch;
using device::KernelWork;
using device::Tiling;
using device::TilingKind;
using device::VectorAxis;
using device::VectorSchedule;
using device::cost::AxisRole;
using device::cost::CubeWork;
using device::cost::VectorWork;
using test::preset_spec;
using test::shape_ref;
using Ints = std::vector<int64_t>;

int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// ---- launches of every kernel ----------------------------------------------------------------

struct Case {
    std::string name;
    const char* kernel;
    KernelLaunch launch;
};

KernelLaunch launch(std::vector<device::TensorRef> in, std::vector<device::TensorRef> out, KernelAttrs attrs = {}) {
    KernelLaunch l;
    l.inputs = std::move(in);
    l.outputs = std::move(out);
    l.attrs = std::move(attrs);
    return l;
}

// At least one launch of every registered kernel (checked below), Cube and Vector forms of conv,
// f32 and f16, shapes small enough to enumerate around.
const std::vector<Case>& cases() {
    static const std::vector<Case> c = [] {
        const DType F = DType::F32, H = DType::F16;
        static int64_t indices[3] = {2, 0, 7};
        const Ints pads1{1, 1, 1, 1}, k3{3, 3};
        std::vector<Case> v;
        v.push_back({"matmul batched f32", "matmul",
                     launch({shape_ref(F, {2, 64, 96}), shape_ref(F, {96, 80})}, {shape_ref(F, {2, 64, 80})})});
        v.push_back({"matmul f16", "matmul",
                     launch({shape_ref(H, {256, 512}), shape_ref(H, {512, 384})}, {shape_ref(H, {256, 384})})});
        v.push_back(
            {"gemm with C", "gemm",
             launch({shape_ref(F, {64, 96}), shape_ref(F, {96, 80}), shape_ref(F, {80})}, {shape_ref(F, {64, 80})})});
        v.push_back({"conv 3x3", "conv",
                     launch({shape_ref(F, {1, 8, 16, 16}), shape_ref(F, {16, 8, 3, 3})},
                            {shape_ref(F, {1, 16, 16, 16})}, {{"pads", pads1}, {"kernel_shape", k3}})});
        v.push_back({"conv 64->64 f16", "conv",
                     launch({shape_ref(H, {1, 64, 60, 80}), shape_ref(H, {64, 64, 3, 3})},
                            {shape_ref(H, {1, 64, 60, 80})}, {{"pads", pads1}, {"kernel_shape", k3}})});
        v.push_back({"conv depthwise (Vector)", "conv",
                     launch({shape_ref(F, {1, 8, 16, 16}), shape_ref(F, {8, 1, 3, 3})}, {shape_ref(F, {1, 8, 16, 16})},
                            {{"pads", pads1}, {"kernel_shape", k3}, {"group", int64_t{8}}})});
        v.push_back({"conv_transpose stride 2", "conv_transpose",
                     launch({shape_ref(F, {1, 8, 8, 8}), shape_ref(F, {8, 4, 2, 2})}, {shape_ref(F, {1, 4, 16, 16})},
                            {{"strides", Ints{2, 2}}, {"kernel_shape", Ints{2, 2}}})});
        v.push_back({"max pool 2x2", "pool",
                     launch({shape_ref(F, {1, 4, 16, 16})}, {shape_ref(F, {1, 4, 8, 8})},
                            {{"op", std::string("max")}, {"kernel_shape", Ints{2, 2}}, {"strides", Ints{2, 2}}})});
        v.push_back(
            {"global avg pool 7x7", "global_pool",
             launch({shape_ref(F, {2, 16, 7, 7})}, {shape_ref(F, {2, 16, 1, 1})}, {{"op", std::string("avg")}})});
        v.push_back({"concat channels", "concat",
                     launch({shape_ref(F, {1, 3, 8, 8}), shape_ref(F, {1, 3, 8, 8})}, {shape_ref(F, {1, 6, 8, 8})},
                            {{"axis", int64_t{1}}})});
        v.push_back({"split channels", "split",
                     launch({shape_ref(F, {1, 6, 8, 8})}, {shape_ref(F, {1, 2, 8, 8}), shape_ref(F, {1, 4, 8, 8})},
                            {{"axis", int64_t{1}}})});
        v.push_back({"slice step 1", "slice",
                     launch({shape_ref(F, {4, 10})}, {shape_ref(F, {4, 5})},
                            {{"starts", Ints{0}}, {"ends", Ints{5}}, {"axes", Ints{1}}})});
        v.push_back({"slice step 2", "slice",
                     launch({shape_ref(F, {4, 10})}, {shape_ref(F, {4, 5})},
                            {{"starts", Ints{0}}, {"ends", Ints{10}}, {"axes", Ints{1}}, {"steps", Ints{2}}})});
        v.push_back({"pad reflect", "pad",
                     launch({shape_ref(F, {1, 3, 8, 8})}, {shape_ref(F, {1, 3, 10, 10})},
                            {{"pads", Ints{0, 0, 1, 1, 0, 0, 1, 1}}, {"mode", std::string("reflect")}})});
        v.push_back({"transpose NCHW -> NHWC", "transpose",
                     launch({shape_ref(F, {1, 3, 8, 8})}, {shape_ref(F, {1, 8, 8, 3})}, {{"perm", Ints{0, 2, 3, 1}}})});
        v.push_back({"transpose rows", "transpose",
                     launch({shape_ref(F, {4, 6, 32})}, {shape_ref(F, {6, 4, 32})}, {{"perm", Ints{1, 0, 2}}})});
        v.push_back({"reshape", "reshape", launch({shape_ref(F, {2, 3, 4})}, {shape_ref(F, {6, 4})})});
        v.push_back({"depth_to_space", "depth_to_space",
                     launch({shape_ref(F, {1, 8, 4, 4})}, {shape_ref(F, {1, 2, 8, 8})}, {{"blocksize", int64_t{2}}})});
        v.push_back({"space_to_depth", "space_to_depth",
                     launch({shape_ref(F, {1, 2, 8, 8})}, {shape_ref(F, {1, 8, 4, 4})}, {{"blocksize", int64_t{2}}})});
        v.push_back(
            {"resize linear", "resize",
             launch({shape_ref(F, {1, 3, 8, 8})}, {shape_ref(F, {1, 3, 16, 16})}, {{"mode", std::string("linear")}})});
        v.push_back({"gather rows", "gather",
                     launch({shape_ref(F, {10, 4}), shape_ref(DType::I64, {3}, indices)}, {shape_ref(F, {3, 4})})});
        v.push_back({"shape", "shape", launch({shape_ref(F, {2, 3, 4})}, {shape_ref(DType::I64, {3})})});
        v.push_back({"binary add", "binary",
                     launch({shape_ref(F, {1, 16, 8, 8}), shape_ref(F, {1, 16, 8, 8})}, {shape_ref(F, {1, 16, 8, 8})},
                            {{"op", std::string("add")}})});
        v.push_back({"binary prelu broadcast f16", "binary",
                     launch({shape_ref(H, {1, 16, 12, 10}), shape_ref(H, {16, 1, 1})}, {shape_ref(H, {1, 16, 12, 10})},
                            {{"op", std::string("prelu")}})});
        v.push_back({"unary relu", "unary",
                     launch({shape_ref(F, {1000})}, {shape_ref(F, {1000})}, {{"op", std::string("relu")}})});
        v.push_back({"cast f32 -> f16", "cast", launch({shape_ref(F, {1000})}, {shape_ref(H, {1000})})});
        v.push_back({"softmax 40-element lines f16", "softmax",
                     launch({shape_ref(H, {400, 40})}, {shape_ref(H, {400, 40})}, {{"axis", int64_t{-1}}})});
        v.push_back({"batchnorm", "batchnorm",
                     launch({shape_ref(F, {1, 4, 8, 8}), shape_ref(F, {4}), shape_ref(F, {4}), shape_ref(F, {4}),
                             shape_ref(F, {4})},
                            {shape_ref(F, {1, 4, 8, 8})})});
        v.push_back({"instancenorm 7x7", "instancenorm",
                     launch({shape_ref(F, {4, 64, 7, 7}), shape_ref(F, {64}), shape_ref(F, {64})},
                            {shape_ref(F, {4, 64, 7, 7})})});
        v.push_back({"reduce mean, 5-element lines", "reduce",
                     launch({shape_ref(F, {2000, 5})}, {shape_ref(F, {2000, 1})},
                            {{"op", std::string("mean")}, {"axes", Ints{1}}})});
        v.push_back({"reduce sum over C", "reduce",
                     launch({shape_ref(F, {2, 16, 8, 8})}, {shape_ref(F, {2, 1, 8, 8})},
                            {{"op", std::string("sum")}, {"axes", Ints{1}}})});
        v.push_back({"eltwise_chain", "eltwise_chain",
                     launch({shape_ref(F, {1, 4, 8, 8}), shape_ref(F, {1, 4, 8, 8})}, {shape_ref(F, {1, 4, 8, 8})},
                            {{"program", std::string("$0 $1 add relu")}})});
        v.push_back({"trans_data to 5HD", "trans_data",
                     launch({shape_ref(F, {1, 3, 8, 8})}, {shape_ref(F, {1, 3, 8, 8})},
                            {{"src", std::string("NCHW")}, {"dst", std::string("NC1HWC0")}})});
        return v;
    }();
    return c;
}

KernelWork work_ok(const Case& c, const device::DeviceSpec& spec) {
    const device::KernelDef& k = test::registered_kernel(c.kernel);
    EXPECT_NE(k.work, nullptr) << c.kernel;
    auto w = k.work(c.launch, spec);
    EXPECT_TRUE(w.ok()) << c.name << ": " << w.status().to_string();
    return w.ok() ? *w : KernelWork{};
}

// Every double of two breakdowns equal bit for bit, the rest equal.
void expect_same(const CycleBreakdown& a, const CycleBreakdown& b, const std::string& what) {
    for (auto field : {&CycleBreakdown::mte_in, &CycleBreakdown::mte_out, &CycleBreakdown::cube,
                       &CycleBreakdown::vector, &CycleBreakdown::scalar, &CycleBreakdown::total,
                       &CycleBreakdown::l2_hit_bytes, &CycleBreakdown::l2_miss_bytes, &CycleBreakdown::flops})
        EXPECT_EQ(std::memcmp(&(a.*field), &(b.*field), sizeof(double)), 0)
            << what << ": " << a.*field << " vs " << b.*field;
    EXPECT_EQ(a.cores_used, b.cores_used) << what;
    EXPECT_EQ(a.blocks, b.blocks) << what;
    EXPECT_EQ(a.rounds, b.rounds) << what;
    EXPECT_EQ(a.tiling, b.tiling) << what;
}

// `count` points of w's space drawn field by field (seeded), legal or not; fusion included.
std::vector<Tiling> sample_space(const KernelWork& w, const device::DeviceSpec& spec, size_t count) {
    std::mt19937 rng(1234);
    auto pick = [&](int64_t lo, int64_t hi) {
        return lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1));
    };
    std::vector<Tiling> out;
    if (w.kind == TilingKind::CUBE) {
        const auto sp = device::cost::cube_space(w.cube, spec);
        for (size_t i = 0; i < count; ++i) {
            CubeTiling t;
            const auto a = static_cast<size_t>(pick(0, static_cast<int64_t>(sp.m_l0.size()) - 1));
            const auto b = static_cast<size_t>(pick(0, static_cast<int64_t>(sp.n_l0.size()) - 1));
            const auto c = static_cast<size_t>(pick(0, static_cast<int64_t>(sp.k_l0.size()) - 1));
            t.m_l0 = sp.m_l0[a], t.m_l1 = t.m_l0 * pick(1, sp.m_l1_count[a]);
            t.n_l0 = sp.n_l0[b], t.n_l1 = t.n_l0 * pick(1, sp.n_l1_count[b]);
            t.k_l0 = sp.k_l0[c], t.k_l1 = t.k_l0 * pick(1, sp.k_l1_count[c]);
            t.n_outer = pick(0, 1), t.double_buffer = pick(0, 1), t.cores = pick(0, sp.cores_max);
            EXPECT_TRUE(sp.contains(t));
            out.push_back(t);
        }
    } else if (w.kind == TilingKind::VECTOR) {
        const auto sp = device::cost::vector_space(w.vector, spec, true);
        while (out.size() < count) {
            VectorSchedule v;
            v.vector_axis = static_cast<VectorAxis>(pick(0, device::kVectorAxisCount - 1));
            v.vector_tile = sp.block * pick(0, sp.vector_tile_count(v.vector_axis));
            const int64_t tiles = sp.ub_tile_count(v.vector_axis, v.vector_tile);
            if (tiles == 0) continue;
            v.ub_tile = (v.vector_tile ? v.vector_tile : sp.block) * pick(1, tiles);
            v.double_buffer = pick(0, 1), v.cores = pick(0, sp.cores_max), v.in_place = sp.in_place && pick(0, 1);
            v.fuse_input = sp.fuse_input && pick(0, 3) == 0, v.fuse_output = sp.fuse_output && pick(0, 3) == 0;
            v.fuse_ub_buffers = v.fuse_input || v.fuse_output ? pick(0, 4) : 0;
            EXPECT_TRUE(sp.contains(v));
            out.push_back(v);
        }
    }
    return out;
}

const Case& case_named(std::string_view name) {
    for (const Case& c : cases())
        if (c.name == name) return c;
    LOOM_ASSERT_MSG(false, "no case '{}'", name);
    return cases().front();
}

TEST(TuningWork, EveryKernelHasAWorkFunctionAndALaunchHere) {
    for (const device::KernelDef* k : device::all_kernels()) {
        EXPECT_NE(k->work, nullptr) << k->name << ": every kernel today tiles its work";
        bool covered = false;
        for (const Case& c : cases()) covered = covered || std::string(c.kernel) == k->name;
        EXPECT_TRUE(covered) << k->name << " has no launch in cases(): add one";
    }
}

TEST(TuningWork, CostIsCostOfWorkBitForBitForEveryKernel) {
    for (std::string_view preset : test::presets()) {
        const device::DeviceSpec& spec = preset_spec(preset);
        for (const Case& c : cases()) {
            SCOPED_TRACE(std::string(preset) + " " + c.name);
            const device::KernelDef& k = test::registered_kernel(c.kernel);
            const KernelWork w = work_ok(c, spec);
            std::vector<Tiling> tilings{std::monostate{}};
            for (const Tiling& t : sample_space(w, spec, 40)) tilings.push_back(t);
            // The default's neighbours, legal where the default is: single-buffered, on one core.
            const Tiling def_tiling = device::cost::default_tiling(w, spec);
            std::visit(
                [&](auto t) {
                    if constexpr (!std::is_same_v<decltype(t), std::monostate>) {
                        t.double_buffer = false;
                        tilings.push_back(t);
                        t.cores = 1;
                        tilings.push_back(t);
                    }
                },
                def_tiling);
            tilings.push_back(CubeTiling{});       // the wrong kind for a Vector op, illegal for a Cube op
            tilings.push_back(VectorSchedule{3});  // the wrong kind, or an illegal ub_tile
            int legal = 0;
            for (const Tiling& t : tilings) {
                KernelLaunch l = c.launch;
                l.tiling = t;
                const auto via_cost = k.cost(l, spec);
                const auto via_work = device::cost::cost_of_work(spec, w, t, k.name);
                ASSERT_EQ(via_cost.ok(), via_work.ok());
                EXPECT_EQ(device::cost::tiling_legal(t, w, spec),
                          via_cost.ok() && !std::holds_alternative<std::monostate>(t));
                if (!via_cost.ok()) {
                    EXPECT_EQ(via_cost.status().message(), via_work.status().message());
                    EXPECT_TRUE(std::isinf(device::cost::work_cycles(spec, w, t)));
                    continue;
                }
                ++legal;
                expect_same(*via_cost, *via_work, c.name);
                EXPECT_EQ(device::cost::work_cycles(spec, w, t), via_cost->total);
            }
            EXPECT_GE(legal, 3) << "the default and its neighbours";
            // The default tiling is the one cost() reports for monostate.
            const CycleBreakdown def = test::cost_ok(k, c.launch, preset);
            EXPECT_EQ(def.tiling, device::cost::default_tiling(w, spec));
            EXPECT_EQ(w.kind, device::tiling_kind_of(def.tiling));
        }
    }
}

TEST(TuningWork, ConvSwitchesKindPerLaunchAndReduceAddsItsEpilogue) {
    const device::DeviceSpec& spec = preset_spec("edge");
    for (const Case& c : cases()) {
        const KernelWork w = work_ok(c, spec);
        if (c.name == "conv 3x3") {
            EXPECT_EQ(w.kind, TilingKind::CUBE);
        }
        if (c.name == "conv depthwise (Vector)") {
            EXPECT_EQ(w.kind, TilingKind::VECTOR);
        }
        if (c.name == "reduce mean, 5-element lines") {
            // 2000 f32 outputs written after the stream, at the chip's memory bandwidth.
            EXPECT_EQ(w.fixed.l2_miss_bytes, 8000.0);
            EXPECT_GT(w.fixed.total, 0.0);
            EXPECT_EQ(w.fixed.total, w.fixed.mte_out);
        }
        if (c.kernel != std::string("reduce")) {
            EXPECT_EQ(w.fixed.total, 0.0) << c.name;
        }
    }
}

// ---- spaces ------------------------------------------------------------------------------------

CubeWork cube_work(int64_t m, int64_t n, int64_t k, DType dt, bool int8 = false) {
    CubeWork w;
    w.m = m, w.n = n, w.k = k, w.dtype = dt, w.int8 = int8;
    w.epilogue_passes = 1;
    return w;
}

std::vector<CubeWork> small_cube_works() {
    return {cube_work(40, 50, 70, DType::F16), cube_work(33, 17, 64, DType::F32),
            cube_work(20, 24, 100, DType::F16, true)};
}

VectorWork vector_work(int64_t n, int64_t axis_len, int64_t inner, AxisRole role, int64_t elem_bytes = 4) {
    VectorWork w;
    w.elements = n;
    w.elem_bytes = elem_bytes;
    w.in_bytes = static_cast<double>(2 * elem_bytes);
    w.out_bytes = static_cast<double>(elem_bytes);
    w.ub_buffers = 3;
    w.axis_len = axis_len;
    w.inner = inner;
    w.axis_role = role;
    w.reduce_passes = role == AxisRole::REDUCE ? 1 : 0;
    w.fusable_in_bytes = static_cast<double>(elem_bytes);
    w.fusable_out = true;
    w.in_place_ok = true;
    return w;
}

std::vector<VectorWork> small_vector_works() {
    std::vector<VectorWork> v;
    v.push_back(vector_work(200, 1, 0, AxisRole::NONE));         // flat elementwise
    v.push_back(vector_work(24 * 10, 10, 1, AxisRole::REDUCE));  // 24 lines of 10, reduced
    v.push_back(vector_work(4 * 6 * 5, 6, 5, AxisRole::BROADCAST, 2));
    VectorWork t = vector_work(6 * 20, 6, 20, AxisRole::NONE);  // a transpose
    t.in_axis_contiguous = true;
    t.fusable_in_bytes = 0;
    t.fusable_out = false;
    t.in_place_ok = false;
    v.push_back(t);
    return v;
}

// Enumerates `sp`: as many points as size(), each one it contains, `legal` and `check` agreeing on
// each, some legal.
template <typename Space, typename Legal, typename Check>
void expect_enumeration_agrees(const Space& sp, Legal&& legal, Check&& check) {
    double points = 0;
    int64_t legal_points = 0, disagree = 0;
    sp.for_each([&](const auto& t) {
        ++points;
        const bool ok = legal(t);
        legal_points += ok;
        disagree += ok != check(t).ok() || !sp.contains(t);
        return true;
    });
    EXPECT_EQ(points, sp.size());
    EXPECT_EQ(disagree, 0);
    EXPECT_GT(legal_points, 0);
}

TEST(TuningSpace, EnumerationCountsSizeAndAgreesWithTheChecksPointByPoint) {
    namespace cost = device::cost;
    for (std::string_view preset : test::presets()) {
        const device::DeviceSpec& spec = preset_spec(preset);
        for (const CubeWork& w : small_cube_works()) {
            SCOPED_TRACE(fmt::format("{} cube {}x{}x{} int8 {}", preset, w.m, w.n, w.k, w.int8));
            expect_enumeration_agrees(
                cost::cube_space(w, spec), [&](const CubeTiling& t) { return cost::cube_tiling_legal(t, w, spec); },
                [&](const CubeTiling& t) { return cost::cube_tiling_check(t, w, spec); });
        }
        for (const VectorWork& w : small_vector_works())
            for (bool fusion : {false, true}) {
                SCOPED_TRACE(
                    fmt::format("{} vector {} elements axis {} fusion {}", preset, w.elements, w.axis_len, fusion));
                const auto sp = cost::vector_space(w, spec, fusion);
                if (fusion && sp.size() > 1.5e6) continue;  // enumerated without fusion; too long with it
                expect_enumeration_agrees(
                    sp, [&](const VectorSchedule& v) { return cost::vector_schedule_legal(v, w, spec); },
                    [&](const VectorSchedule& v) { return cost::vector_schedule_check(v, w, spec); });
            }
    }
}

TEST(TuningSpace, DefaultsOfEveryKernelAreLegalAndInTheSpace) {
    for (std::string_view preset : test::presets()) {
        const device::DeviceSpec& spec = preset_spec(preset);
        for (const Case& c : cases()) {
            SCOPED_TRACE(std::string(preset) + " " + c.name);
            const KernelWork w = work_ok(c, spec);
            const Tiling def = device::cost::default_tiling(w, spec);
            EXPECT_TRUE(device::cost::tiling_legal(def, w, spec));
            if (const auto* t = std::get_if<CubeTiling>(&def)) {
                const auto sp = device::cost::cube_space(w.cube, spec);
                EXPECT_TRUE(sp.contains(*t));
                EXPECT_GT(sp.size(), 1.0);
            } else {
                const auto* v = std::get_if<VectorSchedule>(&def);
                ASSERT_NE(v, nullptr);
                const auto sp = device::cost::vector_space(w.vector, spec);
                EXPECT_TRUE(sp.contains(*v));
                EXPECT_GT(sp.size(), 1.0);
            }
        }
    }
}

// Every legal tiling of a box reaching twice past the problem is in the space when its sizes stay
// within the problem rounded up, and the cheapest tiling of the box is no cheaper than the
// space's: tiles past the problem are never worth it.
TEST(TuningSpace, HoldsEveryLegalTilingUpToTheProblemAndLargerOnesAreNeverCheaper) {
    for (std::string_view preset : test::presets()) {
        const device::DeviceSpec& spec = preset_spec(preset);
        const int64_t f = spec.cube_fractal;
        for (const CubeWork& w : small_cube_works()) {
            SCOPED_TRACE(fmt::format("{} cube {}x{}x{}", preset, w.m, w.n, w.k));
            const auto sp = device::cost::cube_space(w, spec);
            const int64_t k0 = device::cost::cube_k0(w, spec);
            double best_space = std::numeric_limits<double>::infinity(), best_box = best_space;
            sp.for_each([&](const CubeTiling& t) {
                if (t.cores == 0)
                    best_space = std::min(best_space,
                                          device::cost::work_cycles(spec, {TilingKind::CUBE, w, {}, {}}, t));
                return true;
            });
            int64_t missing = 0;
            for (int64_t m0 = f; m0 <= 2 * round_up(w.m, f); m0 += f)
                for (int64_t n0 = f; n0 <= 2 * round_up(w.n, f); n0 += f)
                    for (int64_t k0s = k0; k0s <= 2 * round_up(w.k, k0); k0s += k0)
                        for (int64_t mm : {1, 2, 3})
                            for (int64_t kk : {1, 2, 4})
                                for (bool db : {false, true}) {
                                    CubeTiling t;
                                    t.m_l0 = m0, t.m_l1 = m0 * mm, t.n_l0 = n0, t.n_l1 = n0;
                                    t.k_l0 = k0s, t.k_l1 = k0s * kk, t.double_buffer = db;
                                    if (!device::cost::cube_tiling_legal(t, w, spec)) continue;
                                    const bool within = t.m_l0 <= round_up(w.m, f) && t.n_l0 <= round_up(w.n, f) &&
                                                        t.k_l0 <= round_up(w.k, k0) &&
                                                        t.m_l1 <= round_up(w.m, t.m_l0) &&
                                                        t.k_l1 <= round_up(w.k, t.k_l0);
                                    if (within && !sp.contains(t)) ++missing;
                                    best_box = std::min(
                                        best_box, device::cost::work_cycles(spec, {TilingKind::CUBE, w, {}, {}}, t));
                                }
            EXPECT_EQ(missing, 0);
            EXPECT_GE(best_box, best_space);
        }
        for (const VectorWork& w : small_vector_works()) {
            SCOPED_TRACE(fmt::format("{} vector {} elements axis {}", preset, w.elements, w.axis_len));
            const auto sp = device::cost::vector_space(w, spec);
            const int64_t block = sp.block;
            const KernelWork kw{TilingKind::VECTOR, {}, w, {}};
            double best_space = std::numeric_limits<double>::infinity(), best_box = best_space;
            sp.for_each([&](const VectorSchedule& v) {
                best_space = std::min(best_space, device::cost::work_cycles(spec, kw, v));
                return true;
            });
            int64_t missing = 0;
            for (int ai = 0; ai < device::kVectorAxisCount; ++ai) {
                const auto a = static_cast<VectorAxis>(ai);
                const int64_t e = device::cost::vector_axis_extent(w, a), lines = std::max<int64_t>(1, w.elements / e);
                for (int64_t vt = 0; vt <= 2 * round_up(e, block); vt += block)
                    for (int64_t rows = 1; rows <= (vt ? 2 * lines : 2 * round_up(w.elements, block) / block); ++rows)
                        for (bool in_place : {false, true}) {
                            VectorSchedule v;
                            v.vector_axis = a, v.vector_tile = vt, v.ub_tile = (vt ? vt : block) * rows,
                            v.in_place = in_place;
                            if (!device::cost::vector_schedule_legal(v, w, spec)) continue;
                            const bool within = vt ? rows <= lines : v.ub_tile <= round_up(w.elements, block);
                            if (within && !sp.contains(v)) ++missing;
                            best_box = std::min(best_box, device::cost::work_cycles(spec, kw, v));
                        }
            }
            EXPECT_EQ(missing, 0);
            EXPECT_GE(best_box, best_space);
        }
    }
}

TEST(TuningSpace, LegalityNeverOverflowsOnAbsurdSizes) {
    const device::DeviceSpec& spec = preset_spec("edge");
    CubeTiling t;
    t.m_l0 = t.n_l0 = t.k_l0 = 16;
    t.m_l1 = t.k_l1 = int64_t{1} << 60;  // from a corrupt file, say
    t.n_l1 = 16;
    const CubeWork w = cube_work(64, 64, 64, DType::F16);
    EXPECT_FALSE(device::cost::cube_tiling_legal(t, w, spec));
    EXPECT_NE(device::cost::cube_tiling_check(t, w, spec).message().find("L1 needs 9223372036854775807 bytes"),
              std::string::npos);
    VectorSchedule v;
    v.ub_tile = int64_t{1} << 62;
    EXPECT_FALSE(device::cost::vector_schedule_legal(v, vector_work(200, 1, 0, AxisRole::NONE), spec));
}

// ---- fused neighbours ----------------------------------------------------------------------

// relu (2 live tiles) -> add (3 live tiles) over n f32 elements, lines joined.
struct Pair {
    VectorWork pw = vector_work(4096, 1, 0, AxisRole::NONE), cw = vector_work(4096, 1, 0, AxisRole::NONE);
    VectorSchedule p, c;
    Pair() {
        pw.ub_buffers = 2;
        p.ub_tile = c.ub_tile = 1024;
        p.fuse_output = true;
        c.fuse_input = true;
        p.fuse_ub_buffers = 2;  // the add's 3 tiles, less the one handed over
        c.fuse_ub_buffers = 1;  // the relu's 2, less the one handed over
    }
    Status check(const device::DeviceSpec& spec = preset_spec("edge")) const {
        return device::cost::check_fused_pair(p, pw, c, cw, spec);
    }
};

void expect_refused(const Status& st, std::string_view needle) {
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
}

TEST(TuningFusedPair, AcceptsNeighboursThatShareTheirTilesAndFitUB) {
    for (std::string_view preset : test::presets())
        EXPECT_TRUE(Pair().check(preset_spec(preset)).ok()) << Pair().check().to_string();
}

TEST(TuningFusedPair, RefusesWhatDoesNotPair) {
    {
        Pair x;
        x.c.fuse_input = false;
        x.c.fuse_ub_buffers = 0;
        expect_refused(x.check(), "fused op 1: fuse_input is off");
    }
    {
        Pair x;
        x.p.fuse_output = false;
        x.p.fuse_ub_buffers = 0;
        expect_refused(x.check(), "fused op 0: fuse_output is off");
    }
    {
        Pair x;
        x.c.ub_tile = 512;
        expect_refused(x.check(), "fused ops share their tiles");
    }
    {
        Pair x;
        x.c.double_buffer = false;
        expect_refused(x.check(), "fused ops share their tiles");
    }
    {
        Pair x;
        x.cw.elements = 2048;
        expect_refused(x.check(), "iterates over 2048 elements, op 0 over 4096");
    }
    {
        Pair x;
        x.p.fuse_ub_buffers = 1;  // declares one of the add's two extra tiles
        expect_refused(x.check(), "fused op 0: fuse_ub_buffers = 1, but the other ops of the chain keep 2 tiles live");
    }
    {
        Pair x;
        x.cw.fusable_in_bytes = 0;  // the consumer cannot take an input in UB
        expect_refused(x.check(), "fuse_input: no input of this op can come from a neighbour");
    }
    {
        Pair x;  // both fit alone, not with the neighbour's tiles: 2 x 4 x 8200 x 4 bytes > 256 KiB
        x.p.ub_tile = x.c.ub_tile = 8200;
        expect_refused(x.check(), "UB needs");
    }
    {
        Pair x;  // a chain of two fused further is not a pair
        x.pw.fusable_in_bytes = 4;
        x.p.fuse_input = true;
        expect_refused(x.check(), "fused op 0: fuse_input is on but no op before it is fused");
    }
}

TEST(TuningFusedPair, PerLineTilesNeedTheSameIterationSpace) {
    Pair x;
    x.p.vector_tile = x.c.vector_tile = 32;
    x.pw.axis_len = 64, x.pw.inner = 1;  // 64 lines of 64
    x.cw.axis_len = 64, x.cw.inner = 1;
    x.p.vector_axis = x.c.vector_axis = VectorAxis::AXIS;
    EXPECT_TRUE(x.check().ok()) << x.check().to_string();
    x.cw.axis_len = 32;  // 128 lines of 32: as many elements, other tiles
    expect_refused(x.check(), "tiles of lines need the same iteration space");
}

// ---- lowering: fused steps, the tiling source, StepKey -------------------------------------

// x -> Relu -> r; (r, x) -> Add -> y, unfused (optimize off), 1x4x16x16 f32.
compiler::Graph relu_add_graph(bool r_is_output = false) {
    test::GraphBuilder b;
    b.input("x", {1, 4, 16, 16});
    b.node("Relu", {"x"}, {"r"});
    b.node("Add", {"r", "x"}, {"y"});
    b.output("y");
    if (r_is_output) b.output("r");
    b.g.source = "relu_add";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b.g;
}

compiler::CompileOptions unfused(std::shared_ptr<const compiler::TilingSource> source = nullptr) {
    compiler::CompileOptions o;
    o.optimize = false;
    o.tiling_source = std::move(source);
    return o;
}

// A table with `tilings[i]` for tuning step i of `m` (monostate: none).
std::shared_ptr<compiler::TilingTable> table_for(const compiler::CompiledModel& m, const std::vector<Tiling>& tilings) {
    auto steps = compiler::tuning_steps(m, preset_spec("edge"));
    EXPECT_TRUE(steps.ok()) << steps.status().to_string();
    auto table = std::make_shared<compiler::TilingTable>();
    for (size_t i = 0; steps.ok() && i < steps->size() && i < tilings.size(); ++i)
        if (!std::holds_alternative<std::monostate>(tilings[i])) table->set((*steps)[i].key, tilings[i]);
    return table;
}

TEST(TuningLowering, FusedNeighboursFromTheSourceAreCheckedAndRecorded) {
    const device::DeviceSpec& spec = preset_spec("edge");
    auto plain = compiler::compile_graph(relu_add_graph(), unfused(), spec);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    ASSERT_EQ(plain->steps.size(), 2u);
    auto steps = compiler::tuning_steps(*plain, spec);
    ASSERT_TRUE(steps.ok());
    ASSERT_EQ(steps->size(), 2u);
    // The relu keeps 2 tiles live (in place: 1), the add 3 (in place: 2).
    VectorSchedule p, c;
    p.ub_tile = c.ub_tile = 512;
    p.fuse_output = true, p.fuse_ub_buffers = 2;
    c.fuse_input = true, c.fuse_ub_buffers = 1;
    ASSERT_TRUE(device::cost::check_fused_pair(p, (*steps)[0].work.vector, c, (*steps)[1].work.vector, spec).ok());
    auto fused = compiler::compile_graph(relu_add_graph(), unfused(table_for(*plain, {p, c})), spec);
    ASSERT_TRUE(fused.ok()) << fused.status().to_string();
    EXPECT_EQ(std::get<VectorSchedule>(fused->steps[0].tiling), p);
    EXPECT_EQ(std::get<VectorSchedule>(fused->steps[1].tiling), c);
    EXPECT_LT(fused->steps[0].cost_ns, plain->steps[0].cost_ns);  // the relu's output never reaches GM
    {
        // It runs, and a file whose consumer was edited to stop fusing is refused on load.
        auto dev = test::make_device();
        auto model = std::make_shared<compiler::CompiledModel>(*fused);
        EXPECT_TRUE(executor::LoadedModel::load(*dev, model).ok());
        std::get<VectorSchedule>(model->steps[1].tiling).fuse_input = false;
        std::get<VectorSchedule>(model->steps[1].tiling).fuse_ub_buffers = 0;
        auto refused = executor::LoadedModel::load(*dev, model);
        ASSERT_FALSE(refused.ok());
        EXPECT_NE(refused.status().message().find("fused steps 'r' (unary) -> 'y' (binary)"), std::string::npos)
            << refused.status().message();
    }

    // Only the producer fuses: refused naming both steps.
    VectorSchedule c_alone = c;
    c_alone.fuse_input = false, c_alone.fuse_ub_buffers = 0;
    auto half = compiler::compile_graph(relu_add_graph(), unfused(table_for(*plain, {p, c_alone})), spec);
    ASSERT_FALSE(half.ok());
    EXPECT_NE(half.status().message().find("fused steps 'r' (unary) -> 'y' (binary)"), std::string::npos)
        << half.status().message();
    // The producer's output is a graph output: it must reach memory.
    auto out_plain = compiler::compile_graph(relu_add_graph(true), unfused(), spec);
    ASSERT_TRUE(out_plain.ok());
    auto out = compiler::compile_graph(relu_add_graph(true), unfused(table_for(*out_plain, {p, c})), spec);
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.status().message().find("is a graph output"), std::string::npos) << out.status().message();
    // A pair whose UB accounting is short: refused by check_fused_chain, naming both steps.
    VectorSchedule p_short = p;
    p_short.fuse_ub_buffers = 0;
    auto short_ub = compiler::compile_graph(relu_add_graph(), unfused(table_for(*plain, {p_short, c})), spec);
    ASSERT_FALSE(short_ub.ok());
    EXPECT_NE(short_ub.status().message().find("0 'r' (unary) -> 1 'y' (binary)"), std::string::npos)
        << short_ub.status().message();
    EXPECT_NE(short_ub.status().message().find("fuse_ub_buffers = 0"), std::string::npos);
}

TEST(TuningLowering, StepsOfAModelMatchWhatLoweringCosted) {
    for (std::string_view preset : test::presets()) {
        test::GraphBuilder b;
        b.input("x", {1, 3, 12, 10});
        test::add_sr_body(b);
        b.output("y");
        b.g.source = "sr";
        ASSERT_TRUE(b.g.topo_sort().ok());
        const device::DeviceSpec& spec = preset_spec(preset);
        auto m = compiler::compile_graph(std::move(b.g), {}, spec);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        auto steps = compiler::tuning_steps(*m, spec);
        ASSERT_TRUE(steps.ok()) << steps.status().to_string();
        ASSERT_FALSE(steps->empty());
        bool cube = false, vector = false;
        for (const compiler::TuningStep& t : *steps) {
            const compiler::CompiledStep& s = m->steps[t.step];
            EXPECT_EQ(t.kernel->name, s.kernel);
            EXPECT_EQ(t.launch.tiling, s.tiling);
            auto cb = device::cost::cost_of_work(spec, t.work, s.tiling, s.kernel);
            ASSERT_TRUE(cb.ok()) << cb.status().to_string();
            EXPECT_EQ(cb->total / spec.aicore_clock_ghz, s.cost_ns) << s.name;
            EXPECT_EQ(t.key, compiler::step_key(s.kernel, t.launch, spec));
            cube = cube || t.work.kind == TilingKind::CUBE;
            vector = vector || t.work.kind == TilingKind::VECTOR;
        }
        EXPECT_TRUE(cube && vector);
        auto other = compiler::tuning_steps(*m, preset_spec(preset == "edge" ? "dc" : "edge"));
        EXPECT_FALSE(other.ok());
    }
}

compiler::Graph sr_graph(int64_t h = 12, int64_t w = 10) {
    test::GraphBuilder b;
    b.input("x", {1, 3, h, w});
    test::add_sr_body(b);
    b.output("y");
    b.g.source = "sr";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b.g;
}

// A legal tiling other than the default for each tuning step: the space's first legal point
// that differs from it.
std::vector<Tiling> other_tilings(const compiler::CompiledModel& m, const device::DeviceSpec& spec) {
    auto steps = compiler::tuning_steps(m, spec);
    EXPECT_TRUE(steps.ok());
    std::vector<Tiling> out;
    for (const compiler::TuningStep& t : *steps) {
        Tiling pick;
        const Tiling def = device::cost::default_tiling(t.work, spec);
        auto keep = [&](const auto& x) {
            if (Tiling(x) == def || !device::cost::tiling_legal(x, t.work, spec)) return true;
            pick = x;
            return false;
        };
        if (t.work.kind == TilingKind::CUBE) device::cost::cube_space(t.work.cube, spec).for_each(keep);
        else device::cost::vector_space(t.work.vector, spec).for_each(keep);
        EXPECT_FALSE(std::holds_alternative<std::monostate>(pick)) << m.steps[t.step].name;
        out.push_back(pick);
    }
    return out;
}

std::vector<compiler::HostTensor> run_model(std::shared_ptr<const compiler::CompiledModel> m,
                                            const std::vector<compiler::HostTensor>& in, double* sim_ms) {
    auto dev = test::make_device();
    auto loaded = executor::LoadedModel::load(*dev, std::move(m));
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    if (!loaded.ok()) return {};
    auto session = executor::Session::create(*loaded);
    EXPECT_TRUE(session.ok()) << session.status().to_string();
    executor::RunStats stats;
    auto out = (*session)->run(in, &stats);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    *sim_ms = stats.sim_ms;
    return out.ok() ? *out : std::vector<compiler::HostTensor>{};
}

TEST(TuningLowering, ALegalTilingFromTheSourceIsUsedRecordedAndChangesTimeNeverResults) {
    const device::DeviceSpec& spec = preset_spec("edge");
    auto plain = compiler::compile_graph(sr_graph(), {}, spec);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    const std::vector<Tiling> tilings = other_tilings(*plain, spec);
    compiler::CompileOptions o;
    o.tiling_source = table_for(*plain, tilings);
    auto tuned = compiler::compile_graph(sr_graph(), o, spec);
    ASSERT_TRUE(tuned.ok()) << tuned.status().to_string();
    auto steps = compiler::tuning_steps(*tuned, spec);
    ASSERT_TRUE(steps.ok());
    ASSERT_EQ(steps->size(), tilings.size());
    for (size_t i = 0; i < tilings.size(); ++i) EXPECT_EQ(tuned->steps[(*steps)[i].step].tiling, tilings[i]);
    // The .loom records the tilings.
    test::TempDir dir;
    const std::string path = dir.file("tuned.loom");
    ASSERT_TRUE(compiler::save_compiled_model(path, *tuned).ok());
    auto back = compiler::load_compiled_model(path);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    for (size_t i = 0; i < tilings.size(); ++i) EXPECT_EQ(back->steps[(*steps)[i].step].tiling, tilings[i]);
    // Same bytes out, another simulated time.
    const std::vector<compiler::HostTensor> in{test::random_host_f32({1, 3, 12, 10}, 11, 0.0f, 1.0f)};
    double plain_ms = 0, tuned_ms = 0;
    const auto a = run_model(std::make_shared<compiler::CompiledModel>(std::move(*plain)), in, &plain_ms);
    const auto b = run_model(std::make_shared<compiler::CompiledModel>(std::move(*back)), in, &tuned_ms);
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    ASSERT_EQ(a[0].bytes(), b[0].bytes());
    EXPECT_EQ(std::memcmp(a[0].data(), b[0].data(), a[0].bytes()), 0);
    EXPECT_NE(plain_ms, tuned_ms);
}

TEST(TuningLowering, AnIllegalTilingFromTheSourceFailsNamingTheStep) {
    const device::DeviceSpec& spec = preset_spec("edge");
    auto plain = compiler::compile_graph(sr_graph(), {}, spec);
    ASSERT_TRUE(plain.ok());
    auto steps = compiler::tuning_steps(*plain, spec);
    ASSERT_TRUE(steps.ok());
    const auto conv = std::find_if(steps->begin(), steps->end(),
                                   [](const compiler::TuningStep& t) { return t.work.kind == TilingKind::CUBE; });
    ASSERT_NE(conv, steps->end());
    CubeTiling bad = std::get<CubeTiling>(conv->launch.tiling);
    bad.m_l0 = 15;
    auto table = std::make_shared<compiler::TilingTable>();
    table->set(conv->key, bad);
    compiler::CompileOptions o;
    o.tiling_source = table;
    auto r = compiler::compile_graph(sr_graph(), o, spec);
    ASSERT_FALSE(r.ok());
    const std::string msg = r.status().message();
    EXPECT_NE(msg.find("node '" + plain->steps[conv->step].name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the tiling from the tiling source is refused"), std::string::npos) << msg;
    EXPECT_NE(msg.find("L0 sizes 15x"), std::string::npos) << msg;
    // A tiling of the wrong kind, too.
    table->set(conv->key, VectorSchedule{64});
    r = compiler::compile_graph(sr_graph(), o, spec);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("needs a CubeTiling, not a VectorSchedule"), std::string::npos)
        << r.status().message();
}

TEST(TuningLowering, ASourceChangesTheCompileCacheHashOnlyWhenGiven) {
    const compiler::Graph g = sr_graph();
    const uint64_t none = compiler::CompileCache::options_hash(g, {});
    compiler::CompileOptions o;
    auto t = std::make_shared<compiler::TilingTable>();
    o.tiling_source = t;
    const uint64_t empty = compiler::CompileCache::options_hash(g, o);
    EXPECT_NE(none, empty);
    compiler::StepKey k;
    k.kernel = "conv";
    t->set(k, CubeTiling{});
    EXPECT_NE(compiler::CompileCache::options_hash(g, o), empty);
}

TEST(TuningStepKey, StableAcrossCompilesAndDifferentWhenAShapeOrAttributeDiffers) {
    const device::DeviceSpec& spec = preset_spec("edge");
    auto keys = [&](compiler::Graph g) {
        auto m = compiler::compile_graph(std::move(g), {}, spec);
        EXPECT_TRUE(m.ok()) << m.status().to_string();
        std::vector<compiler::StepKey> out;
        auto steps = compiler::tuning_steps(*m, spec);
        EXPECT_TRUE(steps.ok());
        for (const auto& s : *steps) out.push_back(s.key);
        return out;
    };
    const auto a = keys(sr_graph()), b = keys(sr_graph());
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i], b[i]);
        EXPECT_EQ(a[i].text(), b[i].text());
        EXPECT_EQ(a[i].hash(), b[i].hash());
        EXPECT_EQ(a[i].hash(), fnv1a(kFnvBasis, a[i].text().data(), a[i].text().size()));
    }
    // Another input shape: every key changes.
    const auto c = keys(sr_graph(16, 10));
    ASSERT_EQ(c.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i].hash(), c[i].hash()) << a[i].text();
    // Another attribute, the same shapes.
    KernelLaunch l = case_named("conv 3x3").launch;
    const compiler::StepKey base = compiler::step_key("conv", l, spec);
    l.attrs.set("activation", std::string("relu"));
    EXPECT_NE(compiler::step_key("conv", l, spec).hash(), base.hash());
    // Another spec, or the tiling only: the key names the device; the tiling is not part of it.
    EXPECT_NE(compiler::step_key("conv", case_named("conv 3x3").launch, preset_spec("dc")).hash(), base.hash());
    l = case_named("conv 3x3").launch;
    l.tiling = CubeTiling{};
    EXPECT_EQ(compiler::step_key("conv", l, spec), base);
}

TEST(TuningStepKey, TextIsCanonicalAndPinned) {
    // The attributes' order does not matter; their kinds do (1 and 1.0 differ).
    KernelAttrs x{{"pads", Ints{1, 1}}, {"alpha", 0.5}, {"mode", std::string("a\"b")}, {"group", int64_t{1}}};
    KernelAttrs y{{"group", int64_t{1}}, {"mode", std::string("a\"b")}, {"alpha", 0.5}, {"pads", Ints{1, 1}}};
    EXPECT_EQ(compiler::canonical_attrs(x), compiler::canonical_attrs(y));
    EXPECT_EQ(compiler::canonical_attrs(x), "alpha=0.5;group=1;mode=\"a\\\"b\";pads=[1,1]");
    EXPECT_NE(compiler::canonical_attrs({{"v", int64_t{1}}}), compiler::canonical_attrs({{"v", 1.0}}));
    EXPECT_EQ(compiler::canonical_attrs({{"v", 1.0}}), "v=1.0");
    EXPECT_EQ(compiler::canonical_attrs({{"v", std::vector<double>{0.25, 2}}}), "v=f[0.25,2.0]");
    EXPECT_NE(compiler::canonical_attrs({{"v", std::vector<double>{}}}), compiler::canonical_attrs({{"v", Ints{}}}));
    // The text form a knowledge base stores: changing it makes every stored key stale.
    compiler::StepKey k;
    k.kernel = "binary";
    k.inputs = {{DType::F32, {1, 16, 8, 8}}, {DType::F16, {}}};
    k.outputs = {{DType::F32, {1, 16, 8, 8}}};
    k.attrs = "op=\"add\"";
    k.spec_hash = 0x0123456789abcdefull;
    k.cost_model_version = 1;
    EXPECT_EQ(k.text(),
              "binary|in=f32[1,16,8,8];f16[]|out=f32[1,16,8,8]|attrs=op=\"add\"|spec=0123456789abcdef|cost=1");
}

}  // namespace
}  // namespace loom::test_tuning_interface
