// Google Benchmark micro-benchmarks of the main host kernels, each reporting GFLOPS or GB/s, on
// every instruction set level (isa:0 generic, 1 avx2, 2 avx512; a level the CPU lacks is
// skipped with an error line), so AVX2 against AVX-512 and the fast paths against the
// unoptimised one are visible in one run, back to back:
//   conv 3x3 64->64 on 1x64x120x160 (Winograd; GFLOPS counted as a direct convolution),
//   Winograd F(2x2, 3x3) against F(4x4, 3x3) on 240x320 for few and many channels,
//   GEMM 512^3, elementwise add (binary), sigmoid and softmax (vectorised exp against <cmath>),
//   nearest x4 resize;
//   int8 (i8 weights, per-channel scales, activations quantized in the kernel, exact int32
//   sums) on the conv and on GEMM 512^3, reporting GOPS (one multiply-add = 2 ops);
//   the conv's own GEMM shape (M = 64 output channels, K = 576, N = 19200 pixels) as a matmul in
//   fp32 and int8, i.e. the conv without Winograd and without im2col.
// Threads: the kernels run on a pool of LOOM_THREADS workers (default: one per core).
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/winograd.hpp"

namespace {

using namespace loom;
using namespace loom::device;

TensorRef tensor(std::vector<float>& v, std::vector<int64_t> dims) {
    TensorRef t;
    t.dtype = DType::F32;
    for (int64_t d : dims) t.dims[static_cast<size_t>(t.rank++)] = d;
    t.data = v.data();
    return t;
}

std::vector<float> random(size_t n) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

std::vector<int8_t> random_int8(size_t n) {
    std::mt19937 rng(11);
    std::vector<int8_t> v(n);
    for (int8_t& x : v) x = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
    return v;
}

TensorRef tensor_i8(std::vector<int8_t>& v, std::vector<int64_t> dims) {
    TensorRef t;
    t.dtype = DType::I8;
    for (int64_t d : dims) t.dims[static_cast<size_t>(t.rank++)] = d;
    t.data = v.data();
    return t;
}

benchmark::Counter rate(double ops) {
    return benchmark::Counter(ops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

const KernelDef& kernel(const char* name) {
    const KernelDef* k = find_kernel(name);
    LOOM_ASSERT_MSG(k != nullptr, "no kernel {}", name);
    return *k;
}

void run(benchmark::State& state, const KernelDef& k, const KernelLaunch& l, cpu::Isa isa) {
    const cpu::Isa before = cpu::isa();
    if (cpu::set_isa(isa) != isa) {
        state.SkipWithError("instruction set not available");
        return;
    }
    ThreadPool& pool = ThreadPool::global();
    for (auto _ : state) {
        Status s = k.run(l, pool);
        if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    }
    cpu::set_isa(before);
}

void BM_Conv3x3_64to64(benchmark::State& state) {
    const int64_t h = 120, w = 160;
    auto x = random(64 * h * w), wt = random(64 * 64 * 9), b = random(64), y = std::vector<float>(64 * h * w);
    KernelLaunch l;
    l.inputs = {tensor(x, {1, 64, h, w}), tensor(wt, {64, 64, 3, 3}), tensor(b, {64})};
    l.outputs = {tensor(y, {1, 64, h, w})};
    l.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"activation", std::string("relu")}};
    run(state, kernel("conv"), l, static_cast<cpu::Isa>(state.range(0)));
    state.counters["GFLOPS"] = benchmark::Counter(
        2.0 * h * w * 64 * 64 * 9, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// The Winograd driver alone (weights transformed once, outside the loop), bias + relu:
// args instruction set, tile edge m (2, 4 or 6), C, K.
void BM_Winograd3x3(benchmark::State& state) {
    const auto level = static_cast<cpu::Isa>(state.range(0));
    const auto tile = static_cast<cpu::WinogradTile>(state.range(1));
    const int64_t C = state.range(2), K = state.range(3), h = 240, w = 320;
    auto x = random(C * h * w), wt = random(K * C * 9), b = random(K), y = std::vector<float>(K * h * w);
    std::vector<float> u(cpu::winograd_weights_floats(tile, K, C));
    cpu::winograd_transform_weights(tile, wt.data(), K, C, u.data());
    cpu::Epilogue ep;
    ep.bias = {b.data(), 1, 0}, ep.act = cpu::Act::RELU;
    const cpu::Conv2dShape s{C, h, w, K, h, w, 1, 1};
    const cpu::Isa before = cpu::isa();
    if (cpu::set_isa(level) != level) {
        state.SkipWithError("instruction set not available");
        return;
    }
    ThreadPool& pool = ThreadPool::global();
    for (auto _ : state) cpu::winograd_conv(tile, s, x.data(), u.data(), y.data(), ep, pool);
    cpu::set_isa(before);
    state.counters["GFLOPS"] = benchmark::Counter(
        2.0 * h * w * C * K * 9, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_Gemm512(benchmark::State& state) {
    const int64_t n = 512;
    auto a = random(n * n), b = random(n * n), c = std::vector<float>(n * n);
    KernelLaunch l;
    l.inputs = {tensor(a, {n, n}), tensor(b, {n, n})};
    l.outputs = {tensor(c, {n, n})};
    run(state, kernel("matmul"), l, static_cast<cpu::Isa>(state.range(0)));
    state.counters["GFLOPS"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate,
                                                  benchmark::Counter::kIs1000);
}

void BM_Add(benchmark::State& state) {
    const int64_t n = int64_t{1} << 22;
    auto a = random(n), b = random(n), c = std::vector<float>(n);
    KernelLaunch l;
    l.inputs = {tensor(a, {n}), tensor(b, {n})};
    l.outputs = {tensor(c, {n})};
    l.attrs = {{"op", std::string("add")}};
    run(state, kernel("binary"), l, cpu::isa_detected());
    state.counters["GB/s"] = benchmark::Counter(3.0 * 4 * n, benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
}

// Sigmoid over 4M floats (unary op), and softmax over rows of 1000 (4M floats), each on the
// vectorised exp (avx2) and on <cmath> (generic).
void BM_Sigmoid(benchmark::State& state) {
    const int64_t n = int64_t{1} << 22;
    auto x = random(n), y = std::vector<float>(n);
    for (float& v : x) v *= 8;
    KernelLaunch l;
    l.inputs = {tensor(x, {n})};
    l.outputs = {tensor(y, {n})};
    l.attrs = {{"op", std::string("sigmoid")}};
    run(state, kernel("unary"), l, static_cast<cpu::Isa>(state.range(0)));
    state.counters["Gelem/s"] = benchmark::Counter(double(n), benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
}

void BM_Softmax(benchmark::State& state) {
    const int64_t rows = 4096, len = 1024;
    auto x = random(rows * len), y = std::vector<float>(rows * len);
    for (float& v : x) v *= 8;
    KernelLaunch l;
    l.inputs = {tensor(x, {rows, len})};
    l.outputs = {tensor(y, {rows, len})};
    run(state, kernel("softmax"), l, static_cast<cpu::Isa>(state.range(0)));
    state.counters["Gelem/s"] = benchmark::Counter(double(rows * len), benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
}

void BM_ResizeNearestX4(benchmark::State& state) {
    const int64_t h = 240, w = 320;
    auto x = random(3 * h * w), y = std::vector<float>(3 * h * w * 16);
    KernelLaunch l;
    l.inputs = {tensor(x, {1, 3, h, w})};
    l.outputs = {tensor(y, {1, 3, 4 * h, 4 * w})};
    l.attrs = {{"mode", std::string("nearest")},
               {"coordinate_transformation_mode", std::string("asymmetric")},
               {"nearest_mode", std::string("floor")},
               {"scales", std::vector<double>{1, 1, 4, 4}}};
    run(state, kernel("resize"), l, cpu::isa_detected());
    state.counters["GB/s"] = benchmark::Counter(
        4.0 * (3 * h * w + 3 * h * w * 16), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

// x_scale 1/128 on values in [-1, 1): activations quantize to the whole int8 range.
void BM_Conv3x3_64to64_Int8(benchmark::State& state) {
    const int64_t h = 120, w = 160;
    auto x = random(64 * h * w), b = random(64), y = std::vector<float>(64 * h * w), empty = std::vector<float>();
    auto wt = random_int8(64 * 64 * 9);
    auto ws = std::vector<float>(64, 0.01f);
    KernelLaunch l;
    l.inputs = {tensor(x, {1, 64, h, w}), tensor_i8(wt, {64, 64, 3, 3}),
                tensor(b, {64}),          tensor(empty, {0}),
                tensor(empty, {0}),       tensor(ws, {64})};
    l.outputs = {tensor(y, {1, 64, h, w})};
    l.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"activation", std::string("relu")}, {"x_scale", 1.0 / 128}};
    run(state, kernel("conv"), l, static_cast<cpu::Isa>(state.range(0)));
    state.counters["GOPS"] = rate(2.0 * h * w * 64 * 64 * 9);
}

// A 3x3 conv at 240x320 (pads 1, bias + relu) through the conv kernel, int8 against fp32 on the
// same shape: args instruction set, path (0: the int8 GEMM, 4: the integer Winograd F(4,3),
// -1: fp32, whose own rule picks its Winograd tile), C, K. Random int8 weights keep every sum
// inside winograd_i8_exact's bound up to 256 channels.
void BM_Conv3x3_Int8Paths(benchmark::State& state) {
    const int64_t path = state.range(1), C = state.range(2), K = state.range(3), h = 240, w = 320;
    auto x = random(C * h * w), b = random(K), y = std::vector<float>(K * h * w), empty = std::vector<float>();
    auto wf = random(K * C * 9);
    auto wt = random_int8(K * C * 9);
    auto ws = std::vector<float>(K, 0.01f);
    KernelLaunch l;
    if (path < 0) {
        l.inputs = {tensor(x, {1, C, h, w}), tensor(wf, {K, C, 3, 3}), tensor(b, {K})};
        l.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"activation", std::string("relu")}};
    } else {
        l.inputs = {tensor(x, {1, C, h, w}), tensor_i8(wt, {K, C, 3, 3}), tensor(b, {K}),
                    tensor(empty, {0}),      tensor(empty, {0}),          tensor(ws, {K})};
        l.attrs = {{"pads", std::vector<int64_t>{1, 1, 1, 1}},
                   {"activation", std::string("relu")},
                   {"x_scale", 1.0 / 128},
                   {"winograd", path}};
    }
    l.outputs = {tensor(y, {1, K, h, w})};
    // Weights laid out once, as a compiled model's are (what prepare_launch does with W constant).
    const KernelDef& k = kernel("conv");
    l.constant_inputs = 1u << 1;
    auto state_or = k.prepare(l);
    if (!state_or.ok()) return state.SkipWithError(state_or.status().to_string().c_str());
    l.state = *state_or;
    run(state, k, l, static_cast<cpu::Isa>(state.range(0)));
    state.counters["GOPS"] = rate(2.0 * h * w * C * K * 9);
}

// The U-Nets' resampling layers (Real-CUGAN, waifu2x CUnet) at their shapes for a padded
// 276x356 frame (UpConv7's last layer at 254x334): args instruction set, op (0: the 2x2
// stride-2 conv, 1: the 2x2 stride-2 transposed conv, 2: the 4x4 stride-2 pads-3 transposed
// conv, 3: the same to 3 channels, the models' last layer), C (= K but for op 3), input H, W;
// bias and leaky relu as the models fuse them (bias only on the 4x4 ones). GFLOPS counted
// as the op's direct multiply-adds.
void BM_UNetResample(benchmark::State& state) {
    const int64_t op = state.range(1), C = state.range(2), h = state.range(3), w = state.range(4);
    const int64_t k = op >= 2 ? 4 : 2;
    const int64_t ho = op == 0 ? h / 2 : op == 1 ? 2 * h : 2 * h - 4, wo = op == 0 ? w / 2 : op == 1 ? 2 * w : 2 * w - 4;
    const int64_t K = op == 3 ? 3 : C;  // op 3: UpConv7's last layer, C -> 3
    auto x = random(C * h * w), wt = random(C * K * k * k), b = random(K), y = std::vector<float>(K * ho * wo);
    KernelLaunch l;
    l.inputs = {tensor(x, {1, C, h, w}), tensor(wt, {C, K, k, k}), tensor(b, {K})};
    l.outputs = {tensor(y, {1, K, ho, wo})};
    l.attrs = {{"strides", std::vector<int64_t>{2, 2}}};
    if (op >= 2) l.attrs.set("pads", std::vector<int64_t>{3, 3, 3, 3});
    else l.attrs.set("activation", std::string("leaky_relu")).set("alpha", 0.1);
    const KernelDef& kd = kernel(op == 0 ? "conv" : "conv_transpose");
    l.constant_inputs = 1u << 1;
    // Prepared on the level it runs on: a transposed conv's state is laid out for its path there.
    const cpu::Isa before = cpu::isa();
    cpu::set_isa(static_cast<cpu::Isa>(state.range(0)));
    auto state_or = kd.prepare(l);
    cpu::set_isa(before);
    if (!state_or.ok()) return state.SkipWithError(state_or.status().to_string().c_str());
    l.state = *state_or;
    run(state, kd, l, static_cast<cpu::Isa>(state.range(0)));
    state.counters["GFLOPS"] = rate(2.0 * (op == 0 ? ho * wo : h * w) * C * K * k * k);
}

// A [m, k] f32 x B [k, n], B f32 or (int8) i8 with per-column scales.
void matmul_bench(benchmark::State& state, int64_t m, int64_t k, int64_t n, bool int8) {
    auto a = random(m * k), bf = random(k * n), c = std::vector<float>(m * n), empty = std::vector<float>();
    auto bi = random_int8(k * n);
    auto bs = std::vector<float>(n, 0.01f);
    KernelLaunch l;
    if (int8) {
        l.inputs = {tensor(a, {m, k}), tensor_i8(bi, {k, n}), tensor(empty, {0}), tensor(empty, {0}), tensor(bs, {n})};
        l.attrs = {{"x_scale", 1.0 / 128}};
    } else {
        l.inputs = {tensor(a, {m, k}), tensor(bf, {k, n})};
    }
    l.outputs = {tensor(c, {m, n})};
    run(state, kernel("matmul"), l, static_cast<cpu::Isa>(state.range(0)));
    state.counters[int8 ? "GOPS" : "GFLOPS"] = rate(2.0 * m * n * k);
}

void BM_Gemm512_Int8(benchmark::State& state) { matmul_bench(state, 512, 512, 512, true); }
void BM_ConvGemmShape(benchmark::State& state) { matmul_bench(state, 64, 576, 120 * 160, false); }
void BM_ConvGemmShape_Int8(benchmark::State& state) { matmul_bench(state, 64, 576, 120 * 160, true); }

const int kAvx512 = static_cast<int>(cpu::Isa::AVX512), kAvx2 = static_cast<int>(cpu::Isa::AVX2),
          kGeneric = static_cast<int>(cpu::Isa::GENERIC);
// Arg isa: the AVX-512 and AVX2 paths back to back, then (every_isa) the unoptimised one.
void fast_isas(benchmark::internal::Benchmark* b) {
    b->Arg(kAvx512)->Arg(kAvx2)->ArgName("isa")->Unit(benchmark::kMillisecond)->UseRealTime();
}
void every_isa(benchmark::internal::Benchmark* b) { fast_isas(b), b->Arg(kGeneric); }

BENCHMARK(BM_Conv3x3_64to64)->Apply(every_isa);
BENCHMARK(BM_Winograd3x3)
    ->ArgsProduct({{kAvx512, kAvx2}, {2, 4, 6}, {3}, {16, 32, 64}})
    ->ArgsProduct({{kAvx512, kAvx2}, {2, 4, 6}, {16, 32, 64, 128}, {16, 32, 64, 128}})
    ->ArgsProduct({{kAvx512, kAvx2}, {4, 6}, {128, 256}, {256}})  // UpConv7's and the U-Nets' widest
    ->ArgNames({"isa", "m", "C", "K"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Gemm512)->Apply(every_isa);
BENCHMARK(BM_Conv3x3_64to64_Int8)->Apply(every_isa);
BENCHMARK(BM_Gemm512_Int8)->Apply(every_isa);
BENCHMARK(BM_Conv3x3_Int8Paths)
    ->ArgsProduct({{kAvx512, kAvx2}, {-1, 0, 4}, {3, 16, 32, 64}, {32, 64}})
    ->ArgsProduct({{kAvx512, kAvx2}, {-1, 0, 4}, {64, 128, 256}, {128, 256}})
    ->ArgNames({"isa", "path", "C", "K"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ConvGemmShape)->Apply(fast_isas);
BENCHMARK(BM_UNetResample)
    ->Args({kAvx512, 0, 64, 516, 676})
    ->Args({kAvx512, 0, 128, 254, 334})
    ->Args({kAvx512, 1, 64, 242, 322})
    ->Args({kAvx512, 1, 128, 123, 163})
    ->Args({kAvx512, 2, 64, 264, 344})
    ->Args({kAvx512, 3, 256, 242, 322})
    ->Args({kAvx512, 3, 64, 262, 342})
    ->Args({kAvx2, 0, 64, 516, 676})
    ->Args({kAvx2, 1, 64, 242, 322})
    ->Args({kAvx2, 2, 64, 264, 344})
    ->Args({kAvx2, 3, 256, 242, 322})
    ->ArgNames({"isa", "op", "C", "H", "W"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ConvGemmShape_Int8)->Apply(fast_isas);
BENCHMARK(BM_Add)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Sigmoid)->Apply(every_isa);
BENCHMARK(BM_Softmax)->Apply(every_isa);
BENCHMARK(BM_ResizeNearestX4)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
