// The simulated NPU's description: a TOML file (presets in configs/devices/, embedded in the
// binary) parsed and validated into DeviceSpec. Every number and its source is documented in
// docs/device-model.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.hpp"

namespace loom::device {

// Fields hold the value in the unit their TOML key names (kib, mib, gbps, us, ...); the
// accessors below convert to bytes, bytes per ns and ns for the cost model.
struct DeviceSpec {
    std::string name;
    std::string description;

    // [aicore]
    int64_t aicore_count = 0;
    double aicore_clock_ghz = 0;
    int64_t cube_fractal = 0;          // the Cube does one fractal x fractal x fractal fp16 MMA a cycle
    int64_t cube_int8_rate = 0;        // int8 MACs per fp16 MAC (int8 kernels: the operator issue)
    int64_t vector_bytes_per_cycle = 0;
    int64_t scalar_ops_per_cycle = 0;
    int64_t l1_kib = 0;
    int64_t l0a_kib = 0;
    int64_t l0b_kib = 0;
    int64_t l0c_kib = 0;
    int64_t ub_kib = 0;
    // [aicore.mte], bytes per cycle per core
    int64_t mte_gm_to_l1 = 0;     // MTE2 into L1
    int64_t mte_gm_to_ub = 0;     // MTE2 into the Unified Buffer
    int64_t mte_l1_to_l0 = 0;     // MTE1 from L1 to L0A/L0B
    int64_t mte_l0c_to_ub = 0;    // Cube results to the Vector unit
    int64_t mte_ub_to_gm = 0;     // MTE3 out to global memory
    // [memory]
    int64_t memory_capacity_mib = 0;
    double memory_bandwidth_gbps = 0;
    int64_t memory_alignment_bytes = 0;
    // [l2]
    int64_t l2_capacity_mib = 0;
    double l2_bandwidth_gbps = 0;
    // [host_link]
    double host_link_bandwidth_gbps = 0;           // pinned host memory, one direction
    double host_link_pageable_bandwidth_gbps = 0;  // pageable host memory (staged copy)
    double host_link_latency_us = 0;
    // [launch]
    double launch_overhead_us = 0;                 // host-scheduled kernel launch
    double launch_sink_task_ns = 0;                // one task dispatched by the on-chip scheduler
                                                   // (Stream::launch_sink; D2D copies)
    // [media]
    double media_throughput_mpix_s = 0;          // image processor (VPC): resize, colour conversion
    double media_task_overhead_us = 0;
    double media_vdec_throughput_mpix_s = 0;     // video decoder, all channels together
    double media_vdec_frame_overhead_us = 0;
    double media_venc_throughput_mpix_s = 0;     // video encoder
    double media_venc_frame_overhead_us = 0;
    // [host_cpu]
    double host_cpu_gflops = 0;
    double host_cpu_bandwidth_gbps = 0;
    double host_cpu_task_overhead_us = 0;
    // [watchdog]
    double watchdog_ms = 0;

    int64_t l1_bytes() const { return l1_kib * 1024; }
    int64_t l0a_bytes() const { return l0a_kib * 1024; }
    int64_t l0b_bytes() const { return l0b_kib * 1024; }
    int64_t l0c_bytes() const { return l0c_kib * 1024; }
    int64_t ub_bytes() const { return ub_kib * 1024; }
    int64_t memory_bytes() const { return memory_capacity_mib << 20; }
    int64_t l2_bytes() const { return l2_capacity_mib << 20; }
    // Peak fp16 FLOP/s over all cores (2 per MAC).
    double peak_fp16_flops() const;
    // Returns the content hash (FNV-1a 64 over every field), as compiled models record it.
    uint64_t hash() const;
    // Returns the spec as JSON, fields grouped by TOML table, plus derived figures.
    nlohmann::json to_json() const;
};

// Loads a preset by name ("edge", "dc") or a TOML file by path (anything containing '/' or
// ending in .toml). A file may start from a preset with `base = "edge"` and override fields;
// without `base` every field is required. Errors read `file:line:col: message`.
Result<DeviceSpec> load_device_spec(std::string_view name_or_path);

// Parses TOML text; `source` names it in errors.
Result<DeviceSpec> parse_device_spec(std::string_view toml_text, std::string_view source);

// Returns the names of the embedded presets.
std::vector<std::string> device_preset_names();

}  // namespace loom::device
