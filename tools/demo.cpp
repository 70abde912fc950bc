#include "tools/demo.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/log.hpp"
#include "device/runtime.hpp"

namespace loom::compiler {

namespace {

using device::DevicePtr;
using device::f16;

// A 128x128 RGB frame cut into 256 patches of 8x8x3 = 192 values.
constexpr int64_t kPatches = 256, kIn = 192, kHidden = 256;

struct Weights {
    std::vector<float> w1, b1, w2, b2;  // [kIn, kHidden], [kHidden], [kHidden, kIn], [kIn]
};

std::vector<float> uniform(std::mt19937& rng, size_t n, float scale) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Rounds through fp16 so the reference sees exactly what the fp16 device path stores.
void round_f16(std::vector<float>& v) {
    for (auto& x : v) x = device::f16_to_f32(device::f32_to_f16(x));
}

// out = x + (relu(x W1 + b1) W2 + b2), in float64.
std::vector<double> reference(const std::vector<float>& x, const Weights& w) {
    std::vector<double> h(static_cast<size_t>(kPatches * kHidden)), out(static_cast<size_t>(kPatches * kIn));
    for (int64_t p = 0; p < kPatches; ++p) {
        for (int64_t j = 0; j < kHidden; ++j) {
            double s = w.b1[static_cast<size_t>(j)];
            for (int64_t k = 0; k < kIn; ++k)
                s += static_cast<double>(x[static_cast<size_t>(p * kIn + k)]) * w.w1[static_cast<size_t>(k * kHidden + j)];
            h[static_cast<size_t>(p * kHidden + j)] = std::max(s, 0.0);
        }
        for (int64_t j = 0; j < kIn; ++j) {
            double s = w.b2[static_cast<size_t>(j)];
            for (int64_t k = 0; k < kHidden; ++k)
                s += h[static_cast<size_t>(p * kHidden + k)] * w.w2[static_cast<size_t>(k * kIn + j)];
            out[static_cast<size_t>(p * kIn + j)] = s + x[static_cast<size_t>(p * kIn + j)];
        }
    }
    return out;
}

struct RunResult {
    device::DeviceStats stats;
    std::vector<std::vector<float>> outputs;
    std::string trace;
};

// Runs every frame through the model on `streams` streams; T is the device storage type.
template <typename T>
Result<RunResult> run_pipeline(const device::DeviceSpec& spec, const DemoOptions& o, int streams,
                               const std::vector<std::vector<float>>& frames, const Weights& w, bool trace) {
    device::DeviceOptions dopt;
    dopt.trace = trace;
    if (!o.faults.empty()) LOOM_TRY(device::parse_fault_plan(o.faults, "--faults", dopt.faults));
    LOOM_TRY(device::apply_fault_environment(dopt.faults));  // LOOM_FAULTS over --faults
    LOOM_ASSIGN_OR_RETURN(auto dev, device::Device::create(spec, dopt));
    const device::KernelDef* matmul = device::find_kernel("matmul");
    const device::KernelDef* binary = device::find_kernel("binary");
    LOOM_ASSERT(matmul && binary);

    auto to_device_type = [](const std::vector<float>& v) {
        device::PinnedBuffer<T> p(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
            if constexpr (std::is_same_v<T, f16>) p[i] = device::f32_to_f16(v[i]);
            else p[i] = v[i];
        }
        return p;
    };
    auto alloc = [&](int64_t elems, const char* name) { return dev->malloc(static_cast<size_t>(elems) * sizeof(T), name); };

    // Weights: uploaded once on stream 0; the other streams wait for the upload's event.
    std::vector<device::Stream> ss;
    for (int s = 0; s < streams; ++s) ss.push_back(dev->create_stream());
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer w1, alloc(kIn * kHidden, "w1"));
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer b1, alloc(kHidden, "b1"));
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer w2, alloc(kHidden * kIn, "w2"));
    LOOM_ASSIGN_OR_RETURN(device::DeviceBuffer b2, alloc(kIn, "b2"));
    auto hw1 = to_device_type(w.w1), hb1 = to_device_type(w.b1), hw2 = to_device_type(w.w2), hb2 = to_device_type(w.b2);
    LOOM_TRY(ss[0].copy_h2d(w1.template as<T>(), device::HostView<const T>(hw1), "upload w1"));
    LOOM_TRY(ss[0].copy_h2d(b1.template as<T>(), device::HostView<const T>(hb1), "upload b1"));
    LOOM_TRY(ss[0].copy_h2d(w2.template as<T>(), device::HostView<const T>(hw2), "upload w2"));
    LOOM_TRY(ss[0].copy_h2d(b2.template as<T>(), device::HostView<const T>(hb2), "upload b2"));
    device::Event weights_ready = dev->create_event();
    LOOM_TRY(ss[0].record(weights_ready));
    for (int s = 1; s < streams; ++s) LOOM_TRY(ss[static_cast<size_t>(s)].wait(weights_ready));

    // Per-stream activations: frames on one stream reuse them in stream order.
    struct Slot {
        device::DeviceBuffer x, h, y, out;
    };
    std::vector<Slot> slots;
    for (int s = 0; s < streams; ++s) {
        Slot sl;
        LOOM_ASSIGN_OR_RETURN(sl.x, alloc(kPatches * kIn, "x"));
        LOOM_ASSIGN_OR_RETURN(sl.h, alloc(kPatches * kHidden, "h"));
        LOOM_ASSIGN_OR_RETURN(sl.y, alloc(kPatches * kIn, "y"));
        LOOM_ASSIGN_OR_RETURN(sl.out, alloc(kPatches * kIn, "out"));
        slots.push_back(std::move(sl));
    }
    std::vector<device::PinnedBuffer<T>> host_in, host_out;
    for (const auto& f : frames) {
        host_in.push_back(to_device_type(f));
        host_out.emplace_back(f.size());
    }

    for (size_t i = 0; i < frames.size(); ++i) {
        device::Stream& st = ss[i % static_cast<size_t>(streams)];
        Slot& sl = slots[i % static_cast<size_t>(streams)];
        std::string tag = fmt::format("frame {}", i);
        LOOM_TRY(st.copy_h2d(sl.x.template as<T>(), device::HostView<const T>(host_in[i]), "h2d " + tag));
        device::KernelLaunch l1, l2, l3;
        LOOM_ASSIGN_OR_RETURN(auto tx, device::tensor_ref(sl.x.template as<T>(), {kPatches, kIn}));
        LOOM_ASSIGN_OR_RETURN(auto tw1, device::tensor_ref(w1.template as<T>(), {kIn, kHidden}));
        LOOM_ASSIGN_OR_RETURN(auto tb1, device::tensor_ref(b1.template as<T>(), {kHidden}));
        LOOM_ASSIGN_OR_RETURN(auto th, device::tensor_ref(sl.h.template as<T>(), {kPatches, kHidden}));
        LOOM_ASSIGN_OR_RETURN(auto tw2, device::tensor_ref(w2.template as<T>(), {kHidden, kIn}));
        LOOM_ASSIGN_OR_RETURN(auto tb2, device::tensor_ref(b2.template as<T>(), {kIn}));
        LOOM_ASSIGN_OR_RETURN(auto ty, device::tensor_ref(sl.y.template as<T>(), {kPatches, kIn}));
        LOOM_ASSIGN_OR_RETURN(auto tout, device::tensor_ref(sl.out.template as<T>(), {kPatches, kIn}));
        l1.inputs = {tx, tw1, tb1};
        l1.outputs = {th};
        l1.attrs = {{"activation", std::string("relu")}};
        l2.inputs = {th, tw2, tb2};
        l2.outputs = {ty};
        l3.inputs = {tx, ty};
        l3.outputs = {tout};
        l3.attrs = {{"op", std::string("add")}};
        LOOM_TRY(st.launch(*matmul, std::move(l1), "fc1+relu " + tag));
        LOOM_TRY(st.launch(*matmul, std::move(l2), "fc2 " + tag));
        LOOM_TRY(st.launch(*binary, std::move(l3), "residual " + tag));
        LOOM_TRY(st.copy_d2h(device::HostView<T>(host_out[i]), DevicePtr<const T>(sl.out.template as<T>()), "d2h " + tag));
    }
    LOOM_TRY(dev->synchronize());

    RunResult r;
    r.stats = dev->stats();
    for (auto& h : host_out) {
        std::vector<float> v(h.size());
        for (size_t i = 0; i < h.size(); ++i) {
            if constexpr (std::is_same_v<T, f16>) v[i] = device::f16_to_f32(h[i]);
            else v[i] = h[i];
        }
        r.outputs.push_back(std::move(v));
    }
    if (trace) r.trace = dev->trace_json();
    return r;
}

}  // namespace

Status run_demo(const DemoOptions& o) {
    LOOM_ASSIGN_OR_RETURN(device::DeviceSpec spec, device::load_device_spec(o.device));
    const bool fp16 = o.precision == Precision::FP16;
    std::mt19937 rng(20261122);
    Weights w{uniform(rng, kIn * kHidden, 1.0f / std::sqrt(float(kIn))), uniform(rng, kHidden, 0.1f),
              uniform(rng, kHidden * kIn, 1.0f / std::sqrt(float(kHidden))), uniform(rng, kIn, 0.1f)};
    std::vector<std::vector<float>> frames;
    for (int i = 0; i < o.frames; ++i) frames.push_back(uniform(rng, kPatches * kIn, 1.0f));
    if (fp16) {
        for (auto* v : {&w.w1, &w.b1, &w.w2, &w.b2}) round_f16(*v);
        for (auto& f : frames) round_f16(f);
    }

    auto run = [&](int streams, bool trace) {
        return fp16 ? run_pipeline<f16>(spec, o, streams, frames, w, trace)
                    : run_pipeline<float>(spec, o, streams, frames, w, trace);
    };
    log::info("demo", "device={} frames={} streams={} precision={}", spec.name, o.frames, o.streams,
              precision_name(o.precision));
    LOOM_ASSIGN_OR_RETURN(RunResult serial, run(1, false));
    LOOM_ASSIGN_OR_RETURN(RunResult overlapped, run(o.streams, !o.trace_path.empty()));

    // Every output against the float64 reference; the two runs must agree bit for bit.
    double max_rel = 0;
    for (size_t i = 0; i < frames.size(); ++i) {
        std::vector<double> ref = reference(frames[i], w);
        double scale = 0;
        for (double v : ref) scale = std::max(scale, std::abs(v));
        for (size_t j = 0; j < ref.size(); ++j)
            max_rel = std::max(max_rel, std::abs(overlapped.outputs[i][j] - ref[j]) / scale);
        if (overlapped.outputs[i] != serial.outputs[i])
            return make_error(StatusCode::INTERNAL, "demo: frame {} differs between 1 and {} streams", i, o.streams);
    }
    const double tolerance = fp16 ? 2e-3 : 1e-5;
    if (max_rel > tolerance)
        return make_error(StatusCode::INTERNAL, "demo: max relative error {:.3g} exceeds {:.0e}", max_rel, tolerance);

    const auto& s = overlapped.stats;
    double sim_ms = device::sim_to_ms(s.sim_now), serial_ms = device::sim_to_ms(serial.stats.sim_now);
    if (!o.trace_path.empty()) {
        std::FILE* f = std::fopen(o.trace_path.c_str(), "wb");
        if (!f) return make_error(StatusCode::IO_ERROR, "{}: cannot open for writing", o.trace_path);
        std::fwrite(overlapped.trace.data(), 1, overlapped.trace.size(), f);
        if (std::fclose(f) != 0) return make_error(StatusCode::IO_ERROR, "{}: write failed", o.trace_path);
    }
    nlohmann::json report{{"device", spec.name},
                          {"frames", o.frames},
                          {"streams", o.streams},
                          {"precision", std::string(precision_name(o.precision))},
                          {"sim_ms", sim_ms},
                          {"sim_ms_per_frame", sim_ms / o.frames},
                          {"sim_ms_one_stream", serial_ms},
                          {"overlap_speedup", serial_ms / sim_ms},
                          {"wall_ms", s.wall_ms},
                          {"wall_ms_per_frame", s.wall_ms / o.frames},
                          {"max_rel_error", max_rel},
                          {"memory_peak_bytes", s.memory_peak},
                          {"tasks", s.tasks}};
    nlohmann::json engines;
    for (size_t e = 0; e < device::kEngineCount; ++e) {
        double lanes = static_cast<device::Engine>(e) == device::Engine::AICORE ? double(spec.aicore_count) : 1.0;
        engines[std::string(device::engine_name(static_cast<device::Engine>(e)))] = {
            {"tasks", s.engines[e].tasks},
            {"busy_ms", device::sim_to_ms(s.engines[e].busy)},
            {"utilisation", s.sim_now ? double(s.engines[e].busy) / (lanes * double(s.sim_now)) : 0.0}};
    }
    report["engines"] = engines;
    if (!o.trace_path.empty()) report["trace"] = o.trace_path;
    if (o.json) {
        std::printf("%s\n", report.dump(2).c_str());
        return {};
    }
    std::printf("Loom demo: residual MLP patch denoiser, %d frames of 128x128 RGB, %s, device '%s'\n", o.frames,
                std::string(precision_name(o.precision)).c_str(), spec.name.c_str());
    std::printf("  simulated device time  %9.3f ms  (%.3f ms/frame; 1 stream: %.3f ms, overlap speedup %.2fx)\n",
                sim_ms, sim_ms / o.frames, serial_ms, serial_ms / sim_ms);
    std::printf("  wall time on this host %9.3f ms  (%.3f ms/frame)\n", s.wall_ms, s.wall_ms / o.frames);
    std::printf("  max relative error vs float64 reference: %.3g (tolerance %.0e)\n", max_rel, tolerance);
    std::printf("  device memory peak %.2f MiB of %.0f MiB, %llu tasks\n", double(s.memory_peak) / (1 << 20),
                double(s.memory_capacity) / (1 << 20), static_cast<unsigned long long>(s.tasks));
    for (auto& [name, e] : engines.items())
        if (e["tasks"].get<uint64_t>() > 0)
            std::printf("  engine %-9s %5llu tasks, busy %8.3f ms, utilisation %5.1f%%\n", name.c_str(),
                        static_cast<unsigned long long>(e["tasks"].get<uint64_t>()), e["busy_ms"].get<double>(),
                        100 * e["utilisation"].get<double>());
    if (!o.trace_path.empty()) std::printf("  trace: %s (open in ui.perfetto.dev)\n", o.trace_path.c_str());
    return {};
}

}  // namespace loom::compiler
