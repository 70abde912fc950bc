// Operator-library benchmark: Real-ESRGAN animevideov3 (SRVGGNetCompact: 3x3 convs with PReLU,
// a 3x3 conv to 3 r^2 channels, PixelShuffle, plus the nearest-upsampled input), fp32, one frame
// at a time. The model is imported from its ncnn files (.param + .bin from scripts/fetch-models)
// by the compiler, compiled for the edge preset and run by the executor, so the time is Loom's
// whole path on the host: copies, launches and every kernel. bench/realesrgan.sh runs it next
// to ONNX Runtime on the same weights and input and compares speed and accuracy.
//
// Usage: loom_bench_realesrgan --param P --bin B --shape 1x3xHxW [--input in.f32]
//          [--output out.f32] [--threads 2] [--warmup 1] [--iters 5] [--isa generic|avx2|avx512]
//          [--measure-host] [--precision fp32|fp16|int8]
// Prints one JSON line: the host instruction set used, ms per frame (median, min, all), the
// process's CPU ms per frame (median: all threads' busy time, which time-slicing by other work on
// a shared machine inflates much less than wall time), the direct-convolution GFLOP per frame and
// GFLOPS, the FMA peak of the same threads on that instruction set, measured here, and each pool
// worker's busy share of the timed frames' wall time. --precision fp16 compiles the model with fp16
// weights and activations (the host kernels compute in fp32 and store fp16); --precision int8
// quantizes the Cube ops (compiler/quantize.hpp) calibrated on the input frame itself, as `loomc
// run` does; the input and --output stay float32.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "compiler/compile.hpp"
#include "compiler/import_ncnn.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/runtime.hpp"
#include "executor/executor.hpp"

namespace loom::bench {
double fma_peak_gflops_avx2(double seconds);
double fma_peak_gflops_avx512(double seconds);
}  // namespace loom::bench

using namespace loom;
using namespace loom::device;

int main(int argc, char** argv) {
    CLI::App app("Real-ESRGAN animevideov3 on Loom's host kernels");
    std::string param, bin, shape = "1x3x240x320", input, output, isa_want, precision = "fp32";
    int threads = 2, warmup = 1, iters = 5;
    bool measure_host = false;
    app.add_option("--param", param, "ncnn .param")->required();
    app.add_option("--bin", bin, "ncnn .bin")->required();
    app.add_option("--shape", shape, "input NxCxHxW");
    app.add_option("--input", input, "raw float32 input (default: uniform [0,1), fixed seed)");
    app.add_option("--output", output, "write the output as raw float32");
    app.add_option("--threads", threads, "threads running the kernels");
    app.add_option("--warmup", warmup);
    app.add_option("--iters", iters);
    app.add_option("--isa", isa_want, "generic, avx2 or avx512 (default: LOOM_ISA, else the best the CPU has)")
        ->check(CLI::IsMember({"generic", "avx2", "avx512"}));
    app.add_flag("--measure-host", measure_host,
                 "choose each conv's host algorithm by timing them when compiling (compiler/measure.hpp)");
    app.add_option("--precision", precision, "fp32, fp16 or int8 (calibrated on the input) weights and activations")
        ->check(CLI::IsMember({"fp32", "fp16", "int8"}));
    CLI11_PARSE(app, argc, argv);
    for (int i = 0; i < cpu::kIsaCount && !isa_want.empty(); ++i)
        if (isa_want == cpu::isa_name(static_cast<cpu::Isa>(i))) cpu::set_isa(static_cast<cpu::Isa>(i));

    auto fail = [](const Status& s) {
        std::fprintf(stderr, "loom_bench_realesrgan: %s\n", s.to_string().c_str());
        return 1;
    };
    auto graph = compiler::import_ncnn(param, bin);
    if (!graph.ok()) return fail(graph.status());
    const std::string input_name = graph->value(graph->inputs.at(0)).name;
    auto shape_opt = compiler::parse_shape_option(input_name + "=" + shape);
    if (!shape_opt.ok()) return fail(shape_opt.status());
    const std::vector<int64_t> dims = shape_opt->second;
    if (dims.size() != 4 || dims[1] != 3) return fail(Status(StatusCode::INVALID_ARGUMENT, "--shape must be 1x3xHxW"));
    auto spec = device::load_device_spec("edge");
    if (!spec.ok()) return fail(spec.status());

    compiler::HostTensor x(device::DType::F32, dims);
    if (!input.empty()) {
        std::ifstream f(input, std::ios::binary);
        if (!f.read(static_cast<char*>(x.data()), static_cast<std::streamsize>(x.bytes())))
            return fail(
                Status(StatusCode::IO_ERROR, input + ": cannot read " + std::to_string(x.elements()) + " floats"));
    } else {
        std::mt19937 rng(20261122);
        std::uniform_real_distribution<float> u(0.0f, 1.0f);
        for (int64_t i = 0; i < x.elements(); ++i) x.as<float>()[i] = u(rng);
    }
    compiler::CompileOptions co;
    co.shapes = {*shape_opt};
    co.measure_host = measure_host;
    auto prec = compiler::parse_precision(precision);
    if (!prec.ok()) return fail(prec.status());
    co.precision = *prec;
    if (co.precision == compiler::Precision::INT8) co.calibration = {{x}};
    auto model = compiler::compile_graph(std::move(*graph), co, *spec);
    if (!model.ok()) return fail(model.status());
    double conv_flops = 0;
    for (const auto& st : model->steps)
        if (st.op == "Conv") conv_flops += st.flops;

    // The kernels run on a pool of `threads`, shared by the device's engines as in loomd.
    ThreadPool pool(static_cast<unsigned>(threads));
    device::DeviceOptions dopt;
    dopt.pool = &pool;
    auto dev = device::Device::create(*spec, dopt);
    if (!dev.ok()) return fail(dev.status());
    auto loaded = executor::LoadedModel::load(**dev, std::make_shared<compiler::CompiledModel>(std::move(*model)));
    if (!loaded.ok()) return fail(loaded.status());
    auto session = executor::Session::create(*loaded);
    if (!session.ok()) return fail(session.status());
    auto cpu_ms = [] {
        timespec ts{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
    };
    std::vector<double> ms, cpu;
    std::vector<compiler::HostTensor> y;
    std::vector<int64_t> busy0;
    for (int i = 0; i < warmup + iters; ++i) {
        if (i == warmup) busy0 = pool.busy_ns();
        auto t0 = std::chrono::steady_clock::now();
        const double c0 = cpu_ms();
        auto out = (*session)->run(std::vector<compiler::HostTensor>{x});
        double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const double c = cpu_ms() - c0;
        if (!out.ok()) return fail(out.status());
        if (i >= warmup) ms.push_back(t), cpu.push_back(c);
        y = std::move(*out);
    }
    // Each worker's busy time over the timed frames, as a share of their wall time: how much of
    // each core one frame at a time keeps busy.
    std::vector<double> busy_share;
    {
        const std::vector<int64_t> busy1 = pool.busy_ns();
        double wall = 0;
        for (double t : ms) wall += t;
        for (size_t t = 0; t < busy1.size(); ++t)
            busy_share.push_back(wall > 0 ? static_cast<double>(busy1[t] - busy0[t]) / 1e6 / wall : 0.0);
    }
    if (!output.empty()) {
        std::ofstream f(output, std::ios::binary);
        const std::vector<double> values = y.at(0).to_doubles();  // fp16 outputs widened too
        std::vector<float> f32(values.begin(), values.end());
        f.write(reinterpret_cast<const char*>(f32.data()), static_cast<std::streamsize>(f32.size() * sizeof(float)));
        if (!f) return fail(Status(StatusCode::IO_ERROR, output + ": cannot write"));
    }
    // FMA peak of the same number of threads, measured now.
    double peak = 0;
    if (cpu::isa() >= cpu::Isa::AVX2) {
        const auto fma_peak = cpu::isa() == cpu::Isa::AVX512 ? bench::fma_peak_gflops_avx512
                                                             : bench::fma_peak_gflops_avx2;
        std::vector<std::future<double>> f;
        for (int t = 0; t < threads; ++t)
            f.push_back(std::async(std::launch::async, [fma_peak] { return fma_peak(0.3); }));
        for (auto& x : f) peak += x.get();
    }
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::sort(cpu.begin(), cpu.end());
    nlohmann::json j{{"model", param},
                     {"shape", shape},
                     {"threads", threads},
                     {"isa", cpu::isa_name(cpu::isa())},
                     {"ms_median", median},
                     {"ms_min", sorted.front()},
                     {"ms_all", ms},
                     {"cpu_ms_median", cpu[cpu.size() / 2]},
                     {"conv_gflop", conv_flops / 1e9},
                     {"gflops", conv_flops / 1e9 / (median / 1e3)},
                     {"fma_peak_gflops", peak},
                     {"thread_busy_share", busy_share},
                     {"measure_host", measure_host},
                     {"precision", precision}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
}
