// The demo job: a small residual MLP "patch denoiser" with fixed random weights, run over a
// stream of generated frames on the simulated NPU with copies and compute overlapped across
// streams. Checks every output against a float64 host reference and prints both clocks.
#pragma once

#include <string>

#include "common/status.hpp"
#include "compiler/compile.hpp"

namespace loom::compiler {

struct DemoOptions {
    std::string device = "edge";
    int frames = 32;
    int streams = 3;
    Precision precision = Precision::FP32;  // FP32 or FP16
    std::string trace_path;
    std::string faults;
    bool json = false;
};

// Runs the demo; returns an error if the device fails or an output misses the tolerance.
Status run_demo(const DemoOptions& options);

}  // namespace loom::compiler
