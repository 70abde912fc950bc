// Runtime benchmarks (issue: Foundation and the simulated NPU runtime).
//
// 1. Overlap: a three-stage frame pipeline (H2D, compute, D2H) over N frames, first on one
//    stream, then with one stream per stage joined by events (and ring-buffer events so a
//    buffer is not overwritten before its frame is consumed). Target: the three-stream
//    simulated makespan is within 10% of N x (slowest stage) + the other two stages once.
// 2. Runtime overhead: wall time of one empty task launch + its completion (launch, then
//    stream synchronize), median over 10k. Target: under 5 us.
//
// 3. Sink submission: host wall time of one launch_sink of 40 small kernels (eltwise_chain and
//    matmul), from a SinkTask list (cost function and launch copy per kernel, per submission,
//    as a compiled model's slot resubmits its launches) and from launches prepared once
//    (prepare_launch); median of the submit call alone, synchronizing outside the timing.
//
// Prints a table and a JSON line; exits 1 when a target is missed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.hpp"
#include "common/thread_pool.hpp"
#include "device/runtime.hpp"

namespace {

using namespace loom;
using namespace loom::device;

using bench::unwrap;

struct OverlapResult {
    double one_stream_ms, three_stream_ms, h2d_ms, compute_ms, d2h_ms, bound_ms;
};

// The compute stage: y = relu(x + background), one fused elementwise kernel over the frame.
KernelLaunch compute_launch(const DeviceBuffer& x, const DeviceBuffer& bg, const DeviceBuffer& y, int64_t elems) {
    KernelLaunch l;
    l.inputs = {unwrap(tensor_ref(x.as<float>(), {elems})), unwrap(tensor_ref(bg.as<float>(), {elems}))};
    l.outputs = {unwrap(tensor_ref(y.as<float>(), {elems}))};
    l.attrs = {{"program", std::string("$0 $1 add relu")}};
    return l;
}

OverlapResult bench_overlap(const DeviceSpec& spec, int frames, int64_t elems) {
    const KernelDef& k = *find_kernel("eltwise_chain");
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<PinnedBuffer<float>> in, out;
    for (int i = 0; i < frames; ++i) {
        in.emplace_back(static_cast<size_t>(elems));
        out.emplace_back(static_cast<size_t>(elems));
        for (int64_t j = 0; j < elems; j += 97) in.back()[static_cast<size_t>(j)] = dist(rng);
    }
    const int ring = 3;
    OverlapResult r{};
    for (int variant = 0; variant < 2; ++variant) {
        auto dev = unwrap(Device::create(spec));
        DeviceBuffer bg = unwrap(dev->malloc(static_cast<size_t>(elems) * 4, "background"));
        std::vector<DeviceBuffer> xs, ys;
        for (int i = 0; i < ring; ++i) {
            xs.push_back(unwrap(dev->malloc(static_cast<size_t>(elems) * 4, "x")));
            ys.push_back(unwrap(dev->malloc(static_cast<size_t>(elems) * 4, "y")));
        }
        Stream h2d = dev->create_stream();
        Stream compute = variant ? dev->create_stream() : h2d;
        Stream d2h = variant ? dev->create_stream() : h2d;
        // Per ring slot: input uploaded, output computed, input consumed, output downloaded.
        std::vector<Event> uploaded, computed, consumed, downloaded;
        for (int i = 0; i < ring; ++i) {
            uploaded.push_back(dev->create_event());
            computed.push_back(dev->create_event());
            consumed.push_back(dev->create_event());
            downloaded.push_back(dev->create_event());
        }
        for (int i = 0; i < frames; ++i) {
            size_t s = static_cast<size_t>(i % ring);
            bool reuse = i >= ring;
            if (variant && reuse) BENCH_CHECK(h2d.wait(consumed[s]));
            BENCH_CHECK(h2d.copy_h2d(xs[s].as<float>(), HostView<const float>(in[static_cast<size_t>(i)]), "h2d"));
            if (variant) {
                BENCH_CHECK(h2d.record(uploaded[s]));
                BENCH_CHECK(compute.wait(uploaded[s]));
                if (reuse) BENCH_CHECK(compute.wait(downloaded[s]));
            }
            BENCH_CHECK(compute.launch(k, compute_launch(xs[s], bg, ys[s], elems), "compute"));
            if (variant) {
                BENCH_CHECK(compute.record(consumed[s]));
                BENCH_CHECK(compute.record(computed[s]));
                BENCH_CHECK(d2h.wait(computed[s]));
            }
            BENCH_CHECK(d2h.copy_d2h(HostView<float>(out[static_cast<size_t>(i)]), DevicePtr<const float>(ys[s].as<float>()), "d2h"));
            if (variant) BENCH_CHECK(d2h.record(downloaded[s]));
        }
        BENCH_CHECK(dev->synchronize());
        DeviceStats st = dev->stats();
        double ms = sim_to_ms(st.sim_now);
        (variant ? r.three_stream_ms : r.one_stream_ms) = ms;
        if (!variant) {
            // Per-stage durations from the engines' busy time (each engine ran one task per frame).
            r.h2d_ms = sim_to_ms(st.engines[static_cast<size_t>(Engine::H2D)].busy) / frames;
            r.d2h_ms = sim_to_ms(st.engines[static_cast<size_t>(Engine::D2H)].busy) / frames;
            auto cost = k.cost(compute_launch(xs[0], bg, ys[0], elems), spec);
            BENCH_CHECK(cost.status());
            r.compute_ms = cost->total / spec.aicore_clock_ghz / 1e6;
        }
    }
    double slowest = std::max({r.h2d_ms, r.compute_ms, r.d2h_ms});
    r.bound_ms = frames * slowest + (r.h2d_ms + r.compute_ms + r.d2h_ms - slowest);
    return r;
}

struct OverheadResult {
    double empty_median_us, empty_p90_us, kernel_median_us, batch_per_task_us;
};

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

OverheadResult bench_overhead(const DeviceSpec& spec, int iterations) {
    auto dev = unwrap(Device::create(spec));
    Stream s = dev->create_stream();
    using clock = std::chrono::steady_clock;
    auto empty = [] { return Status(); };
    for (int i = 0; i < 1000; ++i) BENCH_CHECK(s.launch_host("empty", 0, 0, empty));  // warm up
    BENCH_CHECK(s.synchronize());
    std::vector<double> samples(static_cast<size_t>(iterations));
    for (int i = 0; i < iterations; ++i) {
        auto t0 = clock::now();
        BENCH_CHECK(s.launch_host("empty", 0, 0, empty));
        BENCH_CHECK(s.synchronize());
        samples[static_cast<size_t>(i)] = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
    }
    OverheadResult r{};
    r.empty_median_us = percentile(samples, 0.5);
    r.empty_p90_us = percentile(samples, 0.9);

    // A real (tiny) kernel launch: cost function, range checks, functional run.
    DeviceBuffer a = unwrap(dev->malloc(64 * 4)), b = unwrap(dev->malloc(64 * 4)), c = unwrap(dev->malloc(64 * 4));
    const KernelDef& k = *find_kernel("eltwise_chain");
    std::vector<double> ks(static_cast<size_t>(iterations / 10));
    for (auto& v : ks) {
        auto t0 = clock::now();
        BENCH_CHECK(s.launch(k, compute_launch(a, b, c, 64)));
        BENCH_CHECK(s.synchronize());
        v = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
    }
    r.kernel_median_us = percentile(ks, 0.5);

    // Throughput view: submit everything, synchronize once.
    auto t0 = clock::now();
    for (int i = 0; i < iterations; ++i) BENCH_CHECK(s.launch_host("empty", 0, 0, empty));
    BENCH_CHECK(s.synchronize());
    r.batch_per_task_us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iterations;
    return r;
}

struct SinkSubmitResult {
    double sink_tasks_us, prepared_us;
};

SinkSubmitResult bench_sink_submission(const DeviceSpec& spec, int iterations) {
    constexpr int kKernels = 40;
    constexpr int64_t kElems = 256, kM = 16;
    auto dev = unwrap(Device::create(spec));
    std::vector<DeviceBuffer> bufs;
    for (int i = 0; i < 3; ++i) bufs.push_back(unwrap(dev->malloc(kElems * 4)));
    const KernelDef& eltwise = *find_kernel("eltwise_chain");
    const KernelDef& matmul = *find_kernel("matmul");
    std::vector<SinkTask> tasks;
    for (int i = 0; i < kKernels; ++i) {
        const DeviceBuffer &x = bufs[size_t(i % 3)], &y = bufs[size_t((i + 1) % 3)], &z = bufs[size_t((i + 2) % 3)];
        if (i % 2) {
            KernelLaunch l;
            l.inputs = {unwrap(tensor_ref(x.as<float>(), {kM, kM})), unwrap(tensor_ref(y.as<float>(), {kM, kM}))};
            l.outputs = {unwrap(tensor_ref(z.as<float>(), {kM, kM}))};
            tasks.push_back({&matmul, std::move(l), "mm"});
        } else {
            tasks.push_back({&eltwise, compute_launch(x, y, z, kElems), "add"});
        }
    }
    std::vector<PreparedLaunch> prepared;
    for (const SinkTask& t : tasks) prepared.push_back(unwrap(prepare_launch(*t.kernel, t.launch, t.name, spec)));
    Stream s = dev->create_stream();
    using clock = std::chrono::steady_clock;
    auto measure = [&](auto&& submit) {
        std::vector<double> us(static_cast<size_t>(iterations));
        for (int i = 0; i < 50; ++i) submit();  // warm up
        BENCH_CHECK(s.synchronize());
        for (auto& v : us) {
            auto t0 = clock::now();
            submit();
            v = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
            BENCH_CHECK(s.synchronize());
        }
        return percentile(us, 0.5);
    };
    SinkSubmitResult r{};
    r.sink_tasks_us = measure([&] { BENCH_CHECK(s.launch_sink(tasks, "model")); });  // copies the list, as a slot does
    r.prepared_us = measure([&] { BENCH_CHECK(s.launch_sink(prepared, "model")); });
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    int frames = 100, iterations = 10000;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--frames") && i + 1 < argc) frames = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: %s [--frames N] [--iterations N]\n", argv[0]);
            return 2;
        }
    }
    bool ok = true;
    nlohmann::json report;
    std::printf("Overlap: %d frames of 640x360x3 f32, H2D -> relu(x + bg) -> D2H\n", frames);
    std::printf("%-6s %10s %10s %10s %12s %12s %12s %8s %7s\n", "device", "h2d ms", "comp ms", "d2h ms", "1 stream ms",
                "3 streams ms", "bound ms", "speedup", "vs bound");
    for (const char* name : {"edge", "dc"}) {
        DeviceSpec spec = unwrap(load_device_spec(name));
        OverlapResult r = bench_overlap(spec, frames, 640 * 360 * 3);
        double ratio = r.three_stream_ms / r.bound_ms;
        bool pass = ratio <= 1.10 && ratio >= 0.999;
        ok &= pass;
        std::printf("%-6s %10.4f %10.4f %10.4f %12.3f %12.3f %12.3f %7.2fx %6.3f %s\n", name, r.h2d_ms, r.compute_ms,
                    r.d2h_ms, r.one_stream_ms, r.three_stream_ms, r.bound_ms, r.one_stream_ms / r.three_stream_ms,
                    ratio, pass ? "PASS" : "FAIL");
        report["overlap"][name] = {{"h2d_ms", r.h2d_ms},           {"compute_ms", r.compute_ms},
                                   {"d2h_ms", r.d2h_ms},           {"one_stream_ms", r.one_stream_ms},
                                   {"three_stream_ms", r.three_stream_ms}, {"bound_ms", r.bound_ms},
                                   {"ratio_to_bound", ratio}};
    }
    DeviceSpec edge = unwrap(load_device_spec("edge"));
    OverheadResult o = bench_overhead(edge, iterations);
    bool pass = o.empty_median_us < 5.0;
    ok &= pass;
    std::printf("\nRuntime overhead (wall, %u pool threads, %d launches):\n", ThreadPool::global().size(), iterations);
    std::printf("  empty task launch + synchronize: median %.2f us, p90 %.2f us  %s (target < 5 us)\n",
                o.empty_median_us, o.empty_p90_us, pass ? "PASS" : "FAIL");
    std::printf("  tiny eltwise_chain kernel launch + synchronize: median %.2f us\n", o.kernel_median_us);
    std::printf("  %d empty launches, one synchronize: %.2f us per task\n", iterations, o.batch_per_task_us);
    report["overhead"] = {{"empty_median_us", o.empty_median_us},
                          {"empty_p90_us", o.empty_p90_us},
                          {"kernel_median_us", o.kernel_median_us},
                          {"batch_per_task_us", o.batch_per_task_us}};
    SinkSubmitResult sk = bench_sink_submission(edge, std::max(100, iterations / 10));
    std::printf("\nSink submission of 40 kernels (host wall, median of the submit call):\n");
    std::printf("  from SinkTasks (cost + launch copy per kernel): %.2f us\n", sk.sink_tasks_us);
    std::printf("  prepared once (prepare_launch):                 %.2f us  (%.2fx)\n", sk.prepared_us,
                sk.sink_tasks_us / sk.prepared_us);
    report["sink_submission_40"] = {{"sink_tasks_us", sk.sink_tasks_us}, {"prepared_us", sk.prepared_us}};
    std::printf("\n%s\n", report.dump().c_str());
    return ok ? 0 : 1;
}
