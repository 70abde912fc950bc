// The Vector ops' schedule space (cost::vector_cost, docs/device-model.md 5): every field's legal
// range refused by name, the cost effects each field models (lanes wasted on a short vector axis,
// whole 32-byte blocks gathered along a strided one, the multi-core tail, a fused neighbour's GM
// bytes removed, in-place buffers making room), the default legal for random works and for every
// Vector kernel on random shapes, a small exhaustive search never worse than the default and
// better on constructed cases, determinism, and the compiled-model file's round trip.
// Presets "edge" (2 cores) and "dc" (32 cores); fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "compiler/compile.hpp"
#include "compiler/model_file.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "tests/test_util.hpp"

namespace loom::test_vector_schedule {  // apart from the rest of its unity batch
namespace {

using device::CycleBreakdown;
using device::DType;
using device::KernelLaunch;
using device::VectorAxis;
using device::VectorSchedule;
using device::cost::AxisRole;
using device::cost::VectorWork;
using test::preset_spec;
using test::shape_ref;

// A flat elementwise op like eltwise: C = A + B in f32, n elements.
VectorWork eltwise_work(int64_t n) {
    VectorWork w;
    w.elements = n;
    w.elem_bytes = 4;
    w.in_bytes = 8;
    w.out_bytes = 4;
    w.vector_passes = 1;
    w.ub_buffers = 3;
    w.fusable_in_bytes = 4;
    w.fusable_out = true;
    w.in_place_ok = true;
    return w;
}

// A reduction like reduce over the last axis: `lines` lines of `len` f32 elements each; the
// outputs are the kernel's epilogue, not the schedule's.
VectorWork reduce_work(int64_t lines, int64_t len, int64_t elem_bytes = 4) {
    VectorWork w;
    w.elements = lines * len;
    w.elem_bytes = elem_bytes;
    w.in_bytes = static_cast<double>(elem_bytes);
    w.out_bytes = 0;
    w.vector_passes = 1;
    w.ub_buffers = 2;
    w.axis_len = len;
    w.inner = 1;
    w.axis_role = AxisRole::REDUCE;
    w.reduce_passes = 1;
    return w;
}

VectorSchedule lines_of(VectorAxis axis, int64_t vector_tile, int64_t rows) {
    VectorSchedule v;
    v.vector_axis = axis;
    v.vector_tile = vector_tile;
    v.ub_tile = vector_tile * rows;
    return v;
}

VectorSchedule joined(int64_t ub_tile) {
    VectorSchedule v;
    v.ub_tile = ub_tile;
    return v;
}

CycleBreakdown cost_ok(const VectorWork& w, const VectorSchedule& v, std::string_view preset = "edge") {
    auto r = device::cost::vector_cost(preset_spec(preset), w, v, "test");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : CycleBreakdown{};
}

// Checks that `v` is refused for `w` with a message holding every one of `needles`.
void expect_refused(const VectorWork& w, const VectorSchedule& v, std::initializer_list<const char*> needles,
                    std::string_view preset = "edge") {
    const Status st = device::cost::vector_schedule_check(v, w, preset_spec(preset));
    ASSERT_FALSE(st.ok()) << "accepted";
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    for (const char* n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
    auto r = device::cost::vector_cost(preset_spec(preset), w, v, "kern");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message().rfind("kern: schedule: ", 0), 0u) << r.status().message();
}

void expect_legal(const VectorWork& w, const VectorSchedule& v, std::string_view preset = "edge") {
    const Status st = device::cost::vector_schedule_check(v, w, preset_spec(preset));
    EXPECT_TRUE(st.ok()) << st.to_string();
}

// ---- legal ranges --------------------------------------------------------------------------

TEST(VectorScheduleCheck, UbTileCoresAndVectorAxisAreRefusedByName) {
    const VectorWork w = eltwise_work(100000);
    for (int64_t t : {int64_t{0}, int64_t{-8}, int64_t{12}}) expect_refused(w, joined(t), {"ub_tile = ", "multiple of 8"});
    for (std::string_view preset : loom::test::presets()) {
        VectorSchedule v = joined(1024);
        for (int64_t c : {int64_t{-1}, preset_spec(preset).aicore_count + 1}) {
            v.cores = c;
            expect_refused(w, v, {"cores = "}, preset);
        }
        v.cores = preset_spec(preset).aicore_count;
        expect_legal(w, v, preset);
    }
    VectorSchedule v = joined(1024);
    v.vector_axis = static_cast<VectorAxis>(3);
    expect_refused(w, v, {"vector_axis = 3"});
}

TEST(VectorScheduleCheck, VectorTileIsZeroOrWholeBlocksUpToTheAxis) {
    const VectorWork w = reduce_work(1000, 20);  // axis 20 f32: up to 24
    for (int64_t t : {int64_t{-8}, int64_t{12}, int64_t{32}}) {
        VectorSchedule v = lines_of(VectorAxis::AXIS, t, 4);
        v.ub_tile = 96;
        expect_refused(w, v, {"vector_tile = ", "up to 24", "vector_axis = axis has 20"});
    }
    expect_legal(w, lines_of(VectorAxis::AXIS, 24, 4));
    expect_legal(w, lines_of(VectorAxis::AXIS, 8, 4));  // chunks of a line
    // OUTER has 1000 elements: tiles up to 1000.
    expect_legal(w, lines_of(VectorAxis::OUTER, 1000, 8));
    expect_refused(w, lines_of(VectorAxis::OUTER, 1008, 1), {"vector_tile = 1008", "up to 1000"});
    // Whole rows only.
    VectorSchedule v = lines_of(VectorAxis::AXIS, 16, 4);
    v.ub_tile = 72;
    expect_refused(w, v, {"ub_tile = 72", "whole number of rows of vector_tile = 16"});
}

TEST(VectorScheduleCheck, JoiningLinesNeedsAContiguousAxisAndNoReduction) {
    expect_refused(reduce_work(1000, 20), joined(1024), {"vector_tile = 0", "reduction"});
    VectorWork w = eltwise_work(64 * 1000);
    w.axis_len = 64;
    w.inner = 10;
    for (VectorAxis a : {VectorAxis::AXIS, VectorAxis::OUTER}) {  // strided by 10 and 640
        VectorSchedule v = joined(1024);
        v.vector_axis = a;
        expect_refused(w, v, {"vector_tile = 0", "contiguous"});
    }
    expect_legal(w, joined(1024));
    // A transposing op has no axis contiguous on both sides.
    w.in_axis_contiguous = true;
    VectorSchedule v = joined(1024);
    expect_refused(w, v, {"vector_tile = 0", "(inner) contiguous"});
    v.vector_axis = VectorAxis::AXIS;
    expect_refused(w, v, {"vector_tile = 0", "(axis) contiguous"});
}

TEST(VectorScheduleCheck, FusionAndInPlaceOnlyWhereTheOpAllowsThem) {
    const VectorWork r = reduce_work(1000, 64);  // no fusable side, no in-place
    VectorSchedule v = lines_of(VectorAxis::AXIS, 64, 8);
    v.fuse_input = true;
    expect_refused(r, v, {"fuse_input"});
    v = lines_of(VectorAxis::AXIS, 64, 8);
    v.fuse_output = true;
    expect_refused(r, v, {"fuse_output"});
    v = lines_of(VectorAxis::AXIS, 64, 8);
    v.in_place = true;
    expect_refused(r, v, {"in_place"});

    const VectorWork w = eltwise_work(100000);
    for (int64_t b : {int64_t{-1}, device::kFuseUbBuffersMax + 1}) {
        VectorSchedule f = joined(256);
        f.fuse_input = true;
        f.fuse_ub_buffers = b;
        expect_refused(w, f, {"fuse_ub_buffers = ", "outside [0, 64]"});
    }
    VectorSchedule f = joined(256);
    f.fuse_ub_buffers = 2;
    expect_refused(w, f, {"fuse_ub_buffers = 2", "needs fuse_input or fuse_output"});
    f.fuse_output = true;
    expect_legal(w, f);
    f.in_place = true;
    expect_legal(w, f);
}

// ---- cost effects --------------------------------------------------------------------------

TEST(VectorScheduleCost, ALongerVectorAxisWastesFewerLanes) {
    // Lines along the reduced axis, one line per UB row: every row takes whole 64-lane repeats,
    // so the Vector cycles per element fall as the line grows to 64 and stay there on multiples.
    for (std::string_view preset : loom::test::presets()) {
        double prev = 1e300;
        for (int64_t len = 1; len <= 64; ++len) {
            const int64_t vt = (len + 7) / 8 * 8;
            const double per = cost_ok(reduce_work(4096, len), lines_of(VectorAxis::AXIS, vt, 16), preset).vector /
                               static_cast<double>(16 * len);
            EXPECT_LT(per, prev) << preset << " len " << len;
            prev = per;
        }
        // With every lane busy, the passes cost the same per element however long the line (the
        // folds, one per row, aside).
        VectorWork a = reduce_work(4096, 64), b = reduce_work(1024, 256);
        a.reduce_passes = b.reduce_passes = 0;
        EXPECT_DOUBLE_EQ(cost_ok(a, lines_of(VectorAxis::AXIS, 64, 16), preset).vector,
                         cost_ok(b, lines_of(VectorAxis::AXIS, 256, 4), preset).vector)
            << preset;
    }
}

TEST(VectorScheduleCost, AStridedVectorAxisGathersWholeBlocks) {
    // 512 x 64 x 2 f32, lanes along the middle axis (stride 2): one row a tile reads one element
    // per 32-byte block; two rows cover the inner pair and read whole blocks.
    VectorWork w = eltwise_work(512 * 64 * 2);
    w.axis_len = 64;
    w.inner = 2;
    const CycleBreakdown one = cost_ok(w, lines_of(VectorAxis::AXIS, 64, 1));
    const CycleBreakdown two = cost_ok(w, lines_of(VectorAxis::AXIS, 64, 2));
    const double n = static_cast<double>(w.elements);
    EXPECT_DOUBLE_EQ(one.l2_miss_bytes, n * 12 * 8);
    EXPECT_DOUBLE_EQ(two.l2_miss_bytes, n * 12);
    EXPECT_GT(one.total, 2 * two.total);
    // The same tile with the contiguous axis in the lanes needs no transposition.
    const CycleBreakdown inner = cost_ok(w, joined(128));
    EXPECT_DOUBLE_EQ(inner.l2_miss_bytes, n * 12);
    EXPECT_LT(inner.vector, two.vector);
}

TEST(VectorScheduleCost, TheMultiCoreSplitHasATail) {
    for (std::string_view preset : loom::test::presets()) {
        const int64_t cores = preset_spec(preset).aicore_count, tile = 1024;
        // cores + 1 tiles take two rounds, as 2 x cores tiles do; cores tiles take one.
        const CycleBreakdown tail = cost_ok(eltwise_work((cores + 1) * tile), joined(tile), preset);
        const CycleBreakdown full = cost_ok(eltwise_work(2 * cores * tile), joined(tile), preset);
        const CycleBreakdown one = cost_ok(eltwise_work(cores * tile), joined(tile), preset);
        EXPECT_EQ(tail.rounds, 2);
        EXPECT_EQ(tail.cores_used, cores);
        EXPECT_DOUBLE_EQ(tail.total, full.total) << preset;
        EXPECT_LT(one.total, tail.total) << preset;
    }
}

TEST(VectorScheduleCost, FusingANeighbourRemovesItsGmBytes) {
    const VectorWork w = eltwise_work(1 << 20);
    const double n = static_cast<double>(w.elements);
    for (std::string_view preset : loom::test::presets()) {
        VectorSchedule v = joined(4096);
        const CycleBreakdown alone = cost_ok(w, v, preset);
        v.fuse_input = true;
        const CycleBreakdown in = cost_ok(w, v, preset);
        v.fuse_input = false;
        v.fuse_output = true;
        const CycleBreakdown out = cost_ok(w, v, preset);
        v.fuse_input = true;
        const CycleBreakdown both = cost_ok(w, v, preset);
        EXPECT_DOUBLE_EQ(alone.l2_miss_bytes, 12 * n);
        EXPECT_DOUBLE_EQ(in.l2_miss_bytes, 8 * n);  // A from the neighbour's UB tile
        EXPECT_DOUBLE_EQ(out.l2_miss_bytes, 8 * n);
        EXPECT_DOUBLE_EQ(both.l2_miss_bytes, 4 * n);  // only B from GM
        EXPECT_DOUBLE_EQ(in.mte_in, alone.mte_in / 2);
        EXPECT_DOUBLE_EQ(out.mte_out, 0);
        EXPECT_DOUBLE_EQ(in.vector, alone.vector);  // the arithmetic stays
        EXPECT_LT(in.total, alone.total) << preset;
        EXPECT_LT(out.total, alone.total) << preset;
        EXPECT_LT(both.total, std::min(in.total, out.total)) << preset;
    }
}

TEST(VectorScheduleCost, FusedNeighboursMustFitInUbTogether) {
    // UB 256 KiB: double-buffered A, B and C of f32 take 10920 elements a tile; a neighbour's
    // extra tile makes four, which holds 8192.
    const VectorWork w = eltwise_work(1 << 20);
    VectorSchedule v = joined(10920);
    expect_legal(w, v);
    v.fuse_input = true;
    v.fuse_ub_buffers = 1;
    expect_refused(w, v, {"UB needs 349440 bytes", "ub_tile = 10920", "4 live tiles"});
    v.ub_tile = 8192;
    expect_legal(w, v);
    v.ub_tile = 10920;  // the output written over A's tile makes room again
    v.in_place = true;
    expect_legal(w, v);
}

TEST(VectorScheduleCost, InPlaceAllowsATileThatOtherwiseDoesNotFit) {
    const VectorWork w = eltwise_work(1 << 20);
    for (std::string_view preset : loom::test::presets()) {
        VectorSchedule v = joined(16376);  // 2 x 2 x 16376 x 4 fits; 2 x 3 x 16376 x 4 does not
        expect_refused(w, v, {"UB needs 393024 bytes", "3 live tiles"}, preset);
        v.in_place = true;
        expect_legal(w, v, preset);
        v.ub_tile = 16392;
        expect_refused(w, v, {"UB needs", "2 live tiles"}, preset);
        // Bigger tiles, fewer rounds: in place with the largest tile beats the largest without.
        v.ub_tile = 16384;
        EXPECT_LT(cost_ok(w, v, preset).rounds, cost_ok(w, joined(10920), preset).rounds);
    }
}

TEST(VectorScheduleCost, ReducingAlongTheLanesFoldsEveryRow) {
    // The same tile with the reduction in the lanes (a fold per row) and across them (lanes hold
    // different lines: no fold, but a transposition, here of a 16 KiB tile read whole).
    const VectorWork w = reduce_work(64 * 1024, 64);
    const CycleBreakdown along = cost_ok(w, lines_of(VectorAxis::AXIS, 64, 64));
    const CycleBreakdown across = cost_ok(w, lines_of(VectorAxis::OUTER, 64, 64));
    EXPECT_DOUBLE_EQ(along.vector / static_cast<double>(along.rounds), 64 * (1 + 1));  // pass + fold per row
    EXPECT_DOUBLE_EQ(across.vector / static_cast<double>(across.rounds), 64 * (1 + 2));  // pass + transposition
    EXPECT_DOUBLE_EQ(along.l2_miss_bytes, across.l2_miss_bytes);
}

// ---- the default ---------------------------------------------------------------------------

TEST(VectorScheduleDefault, LegalAndDeterministicForRandomWorks) {
    std::mt19937 rng(20260501);
    auto pick = [&](std::initializer_list<int64_t> xs) { return *(xs.begin() + rng() % xs.size()); };
    for (int i = 0; i < 3000; ++i) {
        VectorWork w;
        w.elem_bytes = pick({1, 2, 4, 8});
        const int64_t outer = pick({0, 1, 2, 3, 7, 64, 1000, 4099});
        w.axis_len = pick({1, 2, 3, 5, 10, 16, 49, 64, 100, 1000, 76800});
        w.inner = pick({1, 2, 3, 7, 49, 64, 1000, 19200});
        w.elements = outer * w.axis_len * w.inner;
        if (w.elements > (int64_t{1} << 28)) continue;
        w.in_bytes = static_cast<double>(w.elem_bytes) * static_cast<double>(pick({0, 1, 2, 3}));
        w.out_bytes = static_cast<double>(w.elem_bytes) * static_cast<double>(pick({0, 1}));
        w.vector_passes = static_cast<double>(pick({0, 1, 3, 9}));
        w.ub_buffers = pick({1, 2, 3, 5, 9});
        w.axis_role = static_cast<AxisRole>(rng() % 3);
        w.reduce_passes = w.axis_role == AxisRole::REDUCE ? std::min(w.vector_passes, 2.0) : 0;
        w.in_axis_contiguous = w.axis_role == AxisRole::NONE && rng() % 3 == 0;
        for (std::string_view preset : loom::test::presets()) {
            const auto& spec = preset_spec(preset);
            const VectorSchedule v = device::cost::vector_default_schedule(w, spec);
            const Status st = device::cost::vector_schedule_check(v, w, spec);
            ASSERT_TRUE(st.ok()) << preset << " elements " << w.elements << " = " << outer << " x " << w.axis_len
                                 << " x " << w.inner << " bytes " << w.elem_bytes << " role "
                                 << static_cast<int>(w.axis_role) << ": " << st.to_string();
            const VectorSchedule again = device::cost::vector_default_schedule(w, spec);
            EXPECT_EQ(v, again);
            const CycleBreakdown cb = cost_ok(w, v, preset);
            EXPECT_GT(cb.total, 0);
            EXPECT_TRUE(std::isfinite(cb.total));
            const auto* used = std::get_if<VectorSchedule>(&cb.tiling);
            ASSERT_NE(used, nullptr);
            EXPECT_EQ(*used, v);
        }
    }
}

TEST(VectorScheduleDefault, KeepsTheFlatStreamForElementwiseOps) {
    // The flat stream with lines joined, tiles as large as UB and
    // one core's share allow: 10920 f32 elements on edge.
    const VectorSchedule v = device::cost::vector_default_schedule(eltwise_work(1 << 20), preset_spec("edge"));
    EXPECT_EQ(v.vector_tile, 0);
    EXPECT_EQ(v.vector_axis, VectorAxis::INNER);
    EXPECT_EQ(v.ub_tile, 10920);
    EXPECT_FALSE(v.in_place || v.fuse_input || v.fuse_output);
    // Worked example of docs/device-model.md 5.5.
    EXPECT_DOUBLE_EQ(cost_ok(eltwise_work(1 << 20), v).total, 126564.375);
}

TEST(VectorScheduleDefault, ShortReductionLinesGoAcrossTheLanes) {
    // 5-element lines waste 59 of 64 lanes along the line: the default puts lines in the lanes.
    const VectorWork w = reduce_work(100000, 5);
    const VectorSchedule v = device::cost::vector_default_schedule(w, preset_spec("edge"));
    EXPECT_EQ(v.vector_axis, VectorAxis::OUTER);
    EXPECT_EQ(v.ub_tile / v.vector_tile, 5);  // rows cover the line: whole-block reads
    // Long lines stay along the lanes.
    EXPECT_EQ(device::cost::vector_default_schedule(reduce_work(64, 4096), preset_spec("edge")).vector_axis,
              VectorAxis::AXIS);
}

// ---- search --------------------------------------------------------------------------------

struct SearchCase {
    std::string name;
    KernelLaunch launch;
    const char* kernel;
    int64_t vector_tile_max;
};

KernelLaunch launch(std::vector<device::TensorRef> in, std::vector<device::TensorRef> out, device::KernelAttrs attrs) {
    KernelLaunch l;
    l.inputs = std::move(in);
    l.outputs = std::move(out);
    l.attrs = std::move(attrs);
    return l;
}

std::vector<SearchCase> search_cases() {
    const DType F = DType::F32, H = DType::F16;
    using Ints = std::vector<int64_t>;
    std::vector<SearchCase> c;
    c.push_back({"binary add f32", launch({shape_ref(F, {300000}), shape_ref(F, {300000})}, {shape_ref(F, {300000})},
                                       {{"op", std::string("add")}}),
                 "binary", 1 << 14});
    c.push_back({"reduce mean, 5-element lines", launch({shape_ref(F, {20000, 5})}, {shape_ref(F, {20000, 1})},
                                                        {{"op", std::string("mean")}, {"axes", Ints{1}}}),
                 "reduce", 1 << 14});
    c.push_back({"reduce sum over C of NCHW", launch({shape_ref(F, {2, 64, 28, 28})}, {shape_ref(F, {2, 1, 28, 28})},
                                                     {{"op", std::string("sum")}, {"axes", Ints{1}}}),
                 "reduce", 1 << 12});
    c.push_back({"softmax, 40-element lines f16", launch({shape_ref(H, {4000, 40})}, {shape_ref(H, {4000, 40})},
                                                         {{"axis", int64_t{-1}}}),
                 "softmax", 1 << 12});
    c.push_back({"softmax over C of NCHW", launch({shape_ref(F, {1, 32, 30, 40})}, {shape_ref(F, {1, 32, 30, 40})},
                                                  {{"axis", int64_t{1}}}),
                 "softmax", 1 << 12});
    c.push_back({"instancenorm 7x7 planes", launch({shape_ref(F, {4, 64, 7, 7}), shape_ref(F, {64}), shape_ref(F, {64})},
                                                   {shape_ref(F, {4, 64, 7, 7})}, {}),
                 "instancenorm", 1 << 12});
    c.push_back({"global_pool 7x7", launch({shape_ref(F, {8, 256, 7, 7})}, {shape_ref(F, {8, 256, 1, 1})},
                                           {{"op", std::string("avg")}}),
                 "global_pool", 1 << 12});
    c.push_back({"prelu slope per channel", launch({shape_ref(F, {1, 16, 60, 80}), shape_ref(F, {16, 1, 1})},
                                                   {shape_ref(F, {1, 16, 60, 80})}, {{"op", std::string("prelu")}}),
                 "binary", 1 << 13});
    c.push_back({"pow f16 by a per-channel exponent", launch({shape_ref(H, {1, 16, 60, 80}), shape_ref(H, {16, 1, 1})},
                                                             {shape_ref(H, {1, 16, 60, 80})}, {{"op", std::string("pow")}}),
                 "binary", 1 << 13});
    c.push_back({"transpose NCHW -> NHWC, 3 channels",
                 launch({shape_ref(F, {1, 3, 60, 80})}, {shape_ref(F, {1, 60, 80, 3})}, {{"perm", Ints{0, 2, 3, 1}}}),
                 "transpose", 1 << 13});
    c.push_back({"transpose 2-D 96 x 200", launch({shape_ref(F, {96, 200})}, {shape_ref(F, {200, 96})}, {{"perm", Ints{1, 0}}}),
                 "transpose", 1 << 12});
    return c;
}

TEST(VectorScheduleSearch, BestOfASmallExhaustiveSearchIsNeverWorseThanTheDefault) {
    for (std::string_view preset : loom::test::presets())
        for (const SearchCase& c : search_cases()) {
            SCOPED_TRACE(std::string(preset) + " " + c.name);
            const device::KernelDef& k = test::registered_kernel(c.kernel);
            const CycleBreakdown def = test::cost_ok(k, c.launch, preset);
            const auto* seed = std::get_if<VectorSchedule>(&def.tiling);
            ASSERT_NE(seed, nullptr);
            const int64_t bytes = static_cast<int64_t>(device::dtype_size(c.launch.inputs[0].dtype));
            const auto grid = test::vector_schedule_grid(bytes, c.vector_tile_max, 1 << 15, seed);
            const test::VectorSearch best = test::vector_schedule_search(k, c.launch, preset, grid);
            EXPECT_GT(best.legal, 100);
            EXPECT_LE(best.total, def.total);
        }
}

TEST(VectorScheduleSearch, BeatsTheDefaultOnConstructedCases) {
    // The default joins lines for a broadcast (the flat stream) and pays the operand's
    // expansion; a vector-bound pow does better with the lanes along the broadcast axis
    // (vector-scalar, no expansion). A softmax over 40-element lines in f16 wastes lanes along
    // the line and pays a transposition across the lines; the default takes the cheaper of the
    // two and the search finds a tile shape with less of both.
    const std::vector<SearchCase> cases = search_cases();
    for (const char* name : {"pow f16 by a per-channel exponent", "softmax, 40-element lines f16"}) {
        const SearchCase& c = *std::find_if(cases.begin(), cases.end(), [&](const SearchCase& x) { return x.name == name; });
        const device::KernelDef& k = test::registered_kernel(c.kernel);
        const CycleBreakdown def = test::cost_ok(k, c.launch, "edge");
        const auto grid = test::vector_schedule_grid(2, c.vector_tile_max, 1 << 15, std::get_if<VectorSchedule>(&def.tiling));
        const test::VectorSearch best = test::vector_schedule_search(k, c.launch, "edge", grid);
        EXPECT_LT(best.total, 0.95 * def.total) << name << ": best " << best.total << " default " << def.total;
    }
}

TEST(VectorScheduleSearch, CostsAreDeterministic) {
    for (const SearchCase& c : search_cases()) {
        const device::KernelDef& k = test::registered_kernel(c.kernel);
        KernelLaunch l = c.launch;
        l.tiling = lines_of(VectorAxis::OUTER, 64, 8);
        for (std::string_view preset : loom::test::presets()) {
            const auto a = k.cost(c.launch, preset_spec(preset)), b = k.cost(c.launch, preset_spec(preset));
            ASSERT_TRUE(a.ok() && b.ok());
            EXPECT_EQ(std::memcmp(&a->total, &b->total, sizeof(double)), 0) << c.name;
            EXPECT_EQ(a->l2_miss_bytes, b->l2_miss_bytes);
            const auto x = k.cost(l, preset_spec(preset)), y = k.cost(l, preset_spec(preset));
            ASSERT_EQ(x.ok(), y.ok());
            if (x.ok()) EXPECT_EQ(std::memcmp(&x->total, &y->total, sizeof(double)), 0) << c.name;
            else EXPECT_EQ(x.status().message(), y.status().message());
        }
    }
}

// ---- the compiled-model file ---------------------------------------------------------------

TEST(VectorScheduleFile, EveryFieldSurvivesTheRoundTrip) {
    test::GraphBuilder b;
    b.input("x", {1, 4, 8, 8});
    b.node("Softmax", {"x"}, {"y"}, {{"axis", int64_t{1}}});
    b.output("y");
    b.g.source = "softmax_graph";
    ASSERT_TRUE(b.g.topo_sort().ok());
    compiler::CompileOptions o;
    auto m = compiler::compile_graph(std::move(b.g), o, preset_spec("edge"));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_FALSE(m->steps.empty());
    VectorSchedule v;
    v.ub_tile = 64;
    v.double_buffer = false;
    v.cores = 1;
    v.vector_axis = VectorAxis::OUTER;
    v.vector_tile = 16;
    v.fuse_input = true;
    v.fuse_output = true;
    v.fuse_ub_buffers = 2;
    v.in_place = true;
    m->steps[0].tiling = v;
    test::TempDir dir;
    const std::string path = dir.file("m.loom");
    ASSERT_TRUE(compiler::save_compiled_model(path, *m).ok());
    auto back = compiler::load_compiled_model(path);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    const auto* got = std::get_if<VectorSchedule>(&back->steps[0].tiling);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->ub_tile, 64);
    EXPECT_FALSE(got->double_buffer);
    EXPECT_EQ(got->cores, 1);
    EXPECT_EQ(got->vector_axis, VectorAxis::OUTER);
    EXPECT_EQ(got->vector_tile, 16);
    EXPECT_TRUE(got->fuse_input && got->fuse_output && got->in_place);
    EXPECT_EQ(got->fuse_ub_buffers, 2);
    EXPECT_EQ(compiler::compiled_model_json(*back), compiler::compiled_model_json(*m));
    // A vector axis the reader does not know is refused, naming it.
    v.vector_axis = static_cast<VectorAxis>(7);
    m->steps[0].tiling = v;
    ASSERT_TRUE(compiler::save_compiled_model(path, *m).ok());
    auto bad = compiler::load_compiled_model(path);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("unknown vector_axis '?'"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace loom::test_vector_schedule
