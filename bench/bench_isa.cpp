// Host instruction sets against each other, interleaved: each case runs on AVX2 and on AVX-512
// (or the given pair) alternately, round after round in one process, so that a shared machine's
// drifting load hits both alike; prints per level the min and median ms, GFLOP/s (GOP/s for
// int8) at the median, and the median of the per-round ratios. Cases: the fp32 and int8
// micro-kernels alone on a packed block (one call per panel pair, in cache), the Winograd conv
// driver (bias + relu) and the blocked GEMMs through their entry points.
//
// Usage: loom_bench_isa [--threads 2] [--rounds 11] [--filter SUBSTRING] [--isas avx2,avx512]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/thread_pool.hpp"
#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/gemm_i8.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/winograd.hpp"

using namespace loom;
using namespace loom::device;

namespace {

struct AlignedFree {
    void operator()(void* p) const { std::free(p); }
};
template <typename T>
using Buffer = std::unique_ptr<T[], AlignedFree>;

// n random values, 64-byte aligned: floats in [-1, 1), or int8 in [-127, 127].
template <typename T>
Buffer<T> random_buffer(size_t n, uint32_t seed) {
    Buffer<T> b(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64)));
    std::mt19937 rng(seed);
    for (size_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, float>) b[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
        else b[i] = static_cast<T>(static_cast<int>(rng() % 255) - 127);
    }
    return b;
}

struct Case {
    std::string name;
    double gops;                // per call
    std::function<void()> run;  // on the level set at the time
};

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app("AVX2 against AVX-512 host kernels, interleaved");
    int threads = 2, rounds = 11;
    std::string filter, isas_arg = "avx2,avx512";
    app.add_option("--threads", threads, "pool workers");
    app.add_option("--rounds", rounds, "rounds (each runs every level once)")->check(CLI::Range(1, 10000));
    app.add_option("--filter", filter, "run the cases whose name contains this");
    app.add_option("--isas", isas_arg, "two levels, comma-separated")
        ->check(CLI::IsMember(
            {"generic,avx2", "generic,avx512", "avx2,avx512", "avx2,generic", "avx512,generic", "avx512,avx2"}));
    CLI11_PARSE(app, argc, argv);
    cpu::Isa levels[2];
    for (int l = 0; l < 2; ++l) {
        const std::string name = l == 0 ? isas_arg.substr(0, isas_arg.find(','))
                                        : isas_arg.substr(isas_arg.find(',') + 1);
        for (int i = 0; i < cpu::kIsaCount; ++i)
            if (name == cpu::isa_name(static_cast<cpu::Isa>(i))) levels[l] = static_cast<cpu::Isa>(i);
        if (!cpu::isa_supported(levels[l])) {
            std::fprintf(stderr, "loom_bench_isa: this CPU lacks %s\n", name.c_str());
            return 1;
        }
    }
    ThreadPool pool(static_cast<unsigned>(threads));
    std::vector<Case> cases;

    // Micro-kernels: a packed 96 x 256 block (every A panel against every B panel), K deep, 50
    // times a call.
    constexpr int kMicroRepeat = 50;
    for (int64_t k : {16, 64, 256}) {
        auto a = std::make_shared<Buffer<float>>(random_buffer<float>(96 * k, 1));
        auto b = std::make_shared<Buffer<float>>(random_buffer<float>(256 * k, 2));
        auto c = std::make_shared<Buffer<float>>(random_buffer<float>(96 * 256, 3));
        cases.push_back({"micro fp32 96x256 K " + std::to_string(k), kMicroRepeat * 2.0 * 96 * 256 * k / 1e9, [=] {
                             const cpu::GemmMicro um = cpu::gemm_micro();
                             for (int rep = 0; rep < kMicroRepeat; ++rep)
                                 for (int64_t j = 0; j < 256; j += um.nr)
                                     for (int64_t i = 0; i < 96; i += cpu::kGemmMR)
                                         um.fn(k, a->get() + i * k, b->get() + j * k, c->get() + i * 256 + j, 256,
                                               false);
                         }});
    }
    for (int64_t k : {64, 512}) {
        auto a = std::make_shared<Buffer<int16_t>>(random_buffer<int16_t>(96 * k, 4));
        auto b = std::make_shared<Buffer<int16_t>>(random_buffer<int16_t>(256 * k, 5));
        auto c = std::make_shared<Buffer<int32_t>>(random_buffer<int32_t>(96 * 256, 6));
        cases.push_back({"micro int8 96x256 K " + std::to_string(k), kMicroRepeat * 2.0 * 96 * 256 * k / 1e9, [=] {
                             const cpu::GemmI8Micro um = cpu::gemm_i8_micro();
                             for (int rep = 0; rep < kMicroRepeat; ++rep)
                                 for (int64_t j = 0; j < 256; j += um.nr)
                                     for (int64_t i = 0; i < 96; i += cpu::kGemmI8MR)
                                         um.fn(k / 2, a->get() + i * k, b->get() + j * k, c->get() + i * 256 + j, 256,
                                               false);
                         }});
    }
    // The Winograd driver, bias + relu, pads 1.
    for (auto [C, K, h, w] : {std::array<int64_t, 4>{64, 64, 240, 320},
                              {64, 64, 120, 160},
                              {32, 32, 240, 320},
                              {3, 64, 240, 320},
                              {64, 48, 240, 320}}) {
        auto x = std::make_shared<Buffer<float>>(random_buffer<float>(C * h * w, 7));
        auto wt = random_buffer<float>(K * C * 9, 8);
        auto bias = std::make_shared<Buffer<float>>(random_buffer<float>(K, 9));
        auto y = std::make_shared<Buffer<float>>(random_buffer<float>(K * h * w, 10));
        auto u = std::make_shared<std::vector<float>>(cpu::winograd_weights_floats(cpu::WinogradTile::F43, K, C));
        cpu::winograd_transform_weights(cpu::WinogradTile::F43, wt.get(), K, C, u->data());
        cases.push_back({"winograd F(4,3) " + std::to_string(C) + "->" + std::to_string(K) + " " + std::to_string(h) +
                             "x" + std::to_string(w),
                         2.0 * C * K * 9 * h * w / 1e9, [=, &pool] {
                             cpu::Epilogue ep;
                             ep.bias = {bias->get(), 1, 0}, ep.act = cpu::Act::RELU;
                             const cpu::Conv2dShape s{C, h, w, K, h, w, 1, 1};
                             cpu::winograd_conv(cpu::WinogradTile::F43, s, x->get(), u->data(), y->get(), ep, pool);
                         }});
    }
    // Blocked GEMMs, strided row-major A and B.
    for (auto [M, N, K] : {std::array<int64_t, 3>{64, 19200, 576}, {512, 512, 512}, {64, 19200, 64}}) {
        const std::string shape = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
        auto a = std::make_shared<Buffer<float>>(random_buffer<float>(M * K, 11));
        auto b = std::make_shared<Buffer<float>>(random_buffer<float>(K * N, 12));
        auto c = std::make_shared<Buffer<float>>(random_buffer<float>(M * N, 13));
        cases.push_back({"gemm fp32 " + shape, 2.0 * M * N * K / 1e9, [=, &pool] {
                             cpu::gemm(M, N, K, {a->get(), K, 1}, {b->get(), N, 1}, c->get(), N, cpu::Epilogue{}, pool);
                         }});
        auto a8 = std::make_shared<Buffer<int8_t>>(random_buffer<int8_t>(M * K, 14));
        auto b8 = std::make_shared<Buffer<int8_t>>(random_buffer<int8_t>(K * N, 15));
        cases.push_back({"gemm int8 " + shape, 2.0 * M * N * K / 1e9, [=, &pool] {
                             cpu::gemm(M, N, K, cpu::MatViewI8{a8->get(), K, 1}, cpu::MatViewI8{b8->get(), N, 1},
                                       c->get(), N, cpu::Epilogue{}, pool);
                         }});
    }

    std::printf("%-34s %9s %9s %9s %9s %8s %8s %7s   (%d threads, %d rounds; ratio = %s / %s per round)\n", "case",
                "min 1", "med 1", "min 2", "med 2", "G/s 1", "G/s 2", "ratio", threads, rounds,
                std::string(cpu::isa_name(levels[0])).c_str(), std::string(cpu::isa_name(levels[1])).c_str());
    for (const Case& c : cases) {
        if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
        std::vector<double> t[2], ratio;
        for (cpu::Isa l : levels) cpu::set_isa(l), c.run();  // warm-up
        for (int r = 0; r < rounds; ++r) {
            double ms[2];
            for (int step = 0; step < 2; ++step) {
                const int l = (r + step) % 2;  // alternate which level goes first
                cpu::set_isa(levels[l]);
                const auto t0 = std::chrono::steady_clock::now();
                c.run();
                ms[l] = ms_since(t0);
                t[l].push_back(ms[l]);
            }
            ratio.push_back(ms[0] / ms[1]);
        }
        for (auto& v : t) std::sort(v.begin(), v.end());
        std::sort(ratio.begin(), ratio.end());
        const size_t mid = static_cast<size_t>(rounds / 2);
        std::printf("%-34s %9.3f %9.3f %9.3f %9.3f %8.1f %8.1f %7.3f\n", c.name.c_str(), t[0][0], t[0][mid], t[1][0],
                    t[1][mid], c.gops / t[0][mid] * 1e3, c.gops / t[1][mid] * 1e3, ratio[mid]);
    }
    return 0;
}
