// loomc: the model compiler's command line. Today: device-info and demo; compile, run,
// inspect and bench arrive with the compiler and executor issues.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/cli.hpp"
#include "compiler/demo.hpp"
#include "device/spec.hpp"

namespace {

loom::Status device_info(const std::string& device, bool json) {
    LOOM_ASSIGN_OR_RETURN(loom::device::DeviceSpec spec, loom::device::load_device_spec(device));
    nlohmann::json j = spec.to_json();
    if (json) {
        std::printf("%s\n", j.dump(2).c_str());
        return {};
    }
    std::printf("%s: %s\n", spec.name.c_str(), spec.description.c_str());
    std::printf("  AI cores        %lld x %.2f GHz, peak %.1f TFLOPS fp16, %.1f TOPS int8\n",
                static_cast<long long>(spec.aicore_count), spec.aicore_clock_ghz, spec.peak_fp16_flops() / 1e12,
                spec.peak_fp16_flops() * static_cast<double>(spec.cube_int8_rate) / 1e12);
    std::printf("  per core        L1 %lld KiB, L0A %lld KiB, L0B %lld KiB, L0C %lld KiB, UB %lld KiB\n",
                static_cast<long long>(spec.l1_kib), static_cast<long long>(spec.l0a_kib),
                static_cast<long long>(spec.l0b_kib), static_cast<long long>(spec.l0c_kib),
                static_cast<long long>(spec.ub_kib));
    std::printf("  memory          %lld MiB at %.1f GB/s, L2 %lld MiB at %.0f GB/s\n",
                static_cast<long long>(spec.memory_capacity_mib), spec.memory_bandwidth_gbps,
                static_cast<long long>(spec.l2_capacity_mib), spec.l2_bandwidth_gbps);
    std::printf("  host link       %.1f GB/s pinned, %.1f GB/s pageable, %.1f us latency\n",
                spec.host_link_bandwidth_gbps, spec.host_link_pageable_bandwidth_gbps, spec.host_link_latency_us);
    std::printf("  launch          %.1f us host-scheduled, %.0f ns per sink task\n", spec.launch_overhead_us,
                spec.launch_sink_task_ns);
    std::printf("  spec hash       %016llx\n", static_cast<unsigned long long>(spec.hash()));
    return {};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"loomc: compile, tune and run models on the simulated NPU", "loomc"};
    loom::cli::CommonOptions common;
    loom::cli::add_common_options(app, common);
    app.require_subcommand(1);

    std::string device = "edge";
    bool json = false;
    auto* info = app.add_subcommand("device-info", "print the resolved device spec");
    info->add_option("--device", device, "preset name (edge, dc) or path to a .toml spec")->capture_default_str();
    info->add_flag("--json", json, "print JSON");

    loom::compiler::DemoOptions demo;
    auto* demo_cmd = app.add_subcommand("demo", "run a small model on the simulated NPU, print both clocks");
    demo_cmd->add_option("--device", demo.device, "preset name or .toml path")->capture_default_str();
    demo_cmd->add_option("--frames", demo.frames, "frames to run")->check(CLI::Range(1, 100000))->capture_default_str();
    demo_cmd->add_option("--streams", demo.streams, "streams (frames in flight)")->check(CLI::Range(1, 64))->capture_default_str();
    demo_cmd->add_option("--precision", demo.precision, "fp32|fp16")->check(CLI::IsMember({"fp32", "fp16"}))->capture_default_str();
    demo_cmd->add_option("--trace", demo.trace_path, "write a Perfetto / Chrome trace JSON here");
    demo_cmd->add_option("--faults", demo.faults, "fault plan, e.g. launch=3,copy=5,alloc=2,stall=aicore:4");
    demo_cmd->add_flag("--json", demo.json, "print the report as JSON");

    return loom::cli::run_main(app, common, argc, argv, [&]() -> loom::Status {
        if (*info) return device_info(device, json);
        if (*demo_cmd) return loom::compiler::run_demo(demo);
        return {};
    });
}
