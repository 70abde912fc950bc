// Google Benchmark of the cost model as a tuner calls it (device/cost.hpp): evaluations per second
// of a (work, tiling) pair by work_cycles, against the same tilings costed through the kernel's
// cost() (attribute parsing and shape checks each time), and of the legality checks alone. Works:
// conv 3x3 64 -> 64 f16 on 240 x 320 (Cube) and softmax over 40-element lines f16 (Vector), on
// the edge preset; 1024 legal tilings drawn from each space with a fixed seed, evaluated in turn.
// Single-threaded: a search spreads evaluations over cores itself. Measured (CPU time, shared
// 2-core build machine): work_cycles about 11 M/s (Cube) and 8.4 M/s (Vector); through cost()
// 2.1 M/s and 6.0 M/s; legality alone 84 M/s and 37 M/s (docs/device-model.md 5.6).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "device/cost.hpp"
#include "device/kernel.hpp"
#include "device/spec.hpp"

namespace {

using namespace loom;
using namespace loom::device;

const DeviceSpec& edge() {
    static const DeviceSpec spec = [] {
        auto s = load_device_spec("edge");
        LOOM_ASSERT_MSG(s.ok(), "{}", s.status().to_string());
        return *s;
    }();
    return spec;
}

TensorRef shape(DType t, std::vector<int64_t> dims) {
    TensorRef r;
    r.dtype = t;
    for (int64_t d : dims) r.dims[static_cast<size_t>(r.rank++)] = d;
    return r;
}

KernelLaunch conv_launch() {
    KernelLaunch l;
    l.inputs = {shape(DType::F16, {1, 64, 240, 320}), shape(DType::F16, {64, 64, 3, 3})};
    l.outputs = {shape(DType::F16, {1, 64, 240, 320})};
    l.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1}).set("kernel_shape", std::vector<int64_t>{3, 3});
    return l;
}

KernelLaunch softmax_launch() {
    KernelLaunch l;
    l.inputs = {shape(DType::F16, {4000, 40})};
    l.outputs = {shape(DType::F16, {4000, 40})};
    l.attrs.set("axis", int64_t{-1});
    return l;
}

struct Subject {
    const KernelDef* kernel;
    KernelLaunch launch;
    KernelWork work;
    std::vector<Tiling> legal;  // drawn from the work's space
};

// `count` legal tilings of `l`'s space, drawn field by field with a fixed seed.
Subject subject(const char* kernel, KernelLaunch l, size_t count) {
    Subject s{find_kernel(kernel), std::move(l), {}, {}};
    auto w = s.kernel->work(s.launch, edge());
    LOOM_ASSERT_MSG(w.ok(), "{}", w.status().to_string());
    s.work = *w;
    std::mt19937 rng(5);
    auto pick = [&](int64_t lo, int64_t hi) {
        return lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1));
    };
    const bool is_cube = s.work.kind == TilingKind::CUBE;
    const cost::CubeSpace csp = is_cube ? cost::cube_space(s.work.cube, edge()) : cost::CubeSpace{};
    const cost::VectorSpace vsp = is_cube ? cost::VectorSpace{} : cost::vector_space(s.work.vector, edge());
    while (s.legal.size() < count) {
        Tiling t;
        if (is_cube) {
            const cost::CubeSpace& sp = csp;
            CubeTiling c;
            const auto a = static_cast<size_t>(pick(0, static_cast<int64_t>(sp.m_l0.size()) - 1));
            const auto b = static_cast<size_t>(pick(0, static_cast<int64_t>(sp.n_l0.size()) - 1));
            const auto k = static_cast<size_t>(pick(0, static_cast<int64_t>(sp.k_l0.size()) - 1));
            c.m_l0 = sp.m_l0[a], c.m_l1 = c.m_l0 * pick(1, std::min<int64_t>(4, sp.m_l1_count[a]));
            c.n_l0 = sp.n_l0[b], c.n_l1 = c.n_l0 * pick(1, std::min<int64_t>(4, sp.n_l1_count[b]));
            c.k_l0 = sp.k_l0[k], c.k_l1 = c.k_l0 * pick(1, std::min<int64_t>(8, sp.k_l1_count[k]));
            c.n_outer = pick(0, 1), c.double_buffer = pick(0, 1), c.cores = pick(0, sp.cores_max);
            t = c;
        } else {
            const cost::VectorSpace& sp = vsp;
            VectorSchedule v;
            v.vector_axis = static_cast<VectorAxis>(pick(0, kVectorAxisCount - 1));
            v.vector_tile = sp.block * pick(0, sp.vector_tile_count(v.vector_axis));
            const int64_t tiles = sp.ub_tile_count(v.vector_axis, v.vector_tile);
            if (tiles == 0) continue;
            v.ub_tile = (v.vector_tile ? v.vector_tile : sp.block) * pick(1, tiles);
            v.double_buffer = pick(0, 1), v.cores = pick(0, sp.cores_max), v.in_place = sp.in_place && pick(0, 1);
            t = v;
        }
        if (cost::tiling_legal(t, s.work, edge())) s.legal.push_back(t);
    }
    return s;
}

const Subject& cube() {
    static const Subject s = subject("conv", conv_launch(), 1024);
    return s;
}
const Subject& vector() {
    static const Subject s = subject("softmax", softmax_launch(), 1024);
    return s;
}

void work_cycles(benchmark::State& state, const Subject& s) {
    size_t i = 0;
    double sum = 0;
    for (auto _ : state) {
        sum += cost::work_cycles(edge(), s.work, s.legal[i++ & 1023]);
        benchmark::DoNotOptimize(sum);
    }
    state.counters["evals/s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate);
}

void kernel_cost(benchmark::State& state, const Subject& s) {
    KernelLaunch l = s.launch;
    size_t i = 0;
    double sum = 0;
    for (auto _ : state) {
        l.tiling = s.legal[i++ & 1023];
        sum += s.kernel->cost(l, edge())->total;
        benchmark::DoNotOptimize(sum);
    }
    state.counters["evals/s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate);
}

void legal(benchmark::State& state, const Subject& s) {
    size_t i = 0;
    int n = 0;
    for (auto _ : state) {
        n += cost::tiling_legal(s.legal[i++ & 1023], s.work, edge());
        benchmark::DoNotOptimize(n);
    }
    state.counters["checks/s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                    benchmark::Counter::kIsRate);
}

void BM_WorkCycles_Cube(benchmark::State& state) { work_cycles(state, cube()); }
void BM_WorkCycles_Vector(benchmark::State& state) { work_cycles(state, vector()); }
void BM_KernelCost_Cube(benchmark::State& state) { kernel_cost(state, cube()); }
void BM_KernelCost_Vector(benchmark::State& state) { kernel_cost(state, vector()); }
void BM_Legal_Cube(benchmark::State& state) { legal(state, cube()); }
void BM_Legal_Vector(benchmark::State& state) { legal(state, vector()); }

}  // namespace

BENCHMARK(BM_WorkCycles_Cube);
BENCHMARK(BM_WorkCycles_Vector);
BENCHMARK(BM_KernelCost_Cube);
BENCHMARK(BM_KernelCost_Vector);
BENCHMARK(BM_Legal_Cube);
BENCHMARK(BM_Legal_Vector);

BENCHMARK_MAIN();
