// The executor: runs compiled models (compiler/compile.hpp) on the simulated NPU. A
// LoadedModel holds one model's weights on a device, uploaded once and shared by every Session
// of that model; a Session owns one activation arena (the memory plan's peak) and a stream,
// and runs inferences on it one after another.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "device/runtime.hpp"

namespace loom::executor {

using compiler::CompiledModel;
using compiler::HostTensor;

// A compiled model resident on a device. Thread-safe to share between sessions.
class LoadedModel {
public:
    // Checks the model was built for the device's spec, uploads its weights and resolves every
    // step's kernel; OUT_OF_DEVICE_MEMORY names the model when the weights do not fit.
    static Result<std::shared_ptr<LoadedModel>> load(device::Device& dev, std::shared_ptr<const CompiledModel> model);

    const CompiledModel& model() const { return *model_; }
    device::Device& device() const { return *dev_; }
    const device::DeviceBuffer& weights() const { return weights_; }
    // The kernel of step i (nullptr for alias steps).
    const device::KernelDef* kernel(size_t step) const { return kernels_[step]; }

private:
    LoadedModel() = default;
    device::Device* dev_ = nullptr;
    std::shared_ptr<const CompiledModel> model_;
    device::DeviceBuffer weights_;
    std::vector<const device::KernelDef*> kernels_;
};

struct RunStats {
    double sim_ms = 0;   // simulated device time from the first copy in to the last copy out
    double wall_ms = 0;  // host wall time of run()
    size_t launches = 0;
    size_t host_steps = 0;
};

// One inference context: an activation arena and a stream. Not thread-safe; use one per thread.
class Session {
public:
    // Allocates the arena; OUT_OF_DEVICE_MEMORY names the model and the bytes needed.
    static Result<std::unique_ptr<Session>> create(std::shared_ptr<LoadedModel> model);

    // Copies `inputs` (one per graph input, matching dtype and dims) to the device, runs every
    // step in order (device steps as kernel launches, host-placed steps on the host engine),
    // copies the outputs back and waits. A device error fails this inference only; the session
    // stays usable.
    Result<std::vector<HostTensor>> run(std::span<const HostTensor> inputs, RunStats* stats = nullptr);

private:
    Session() = default;
    Status submit(std::span<const HostTensor> inputs, std::vector<HostTensor>& outputs, RunStats& stats);
    std::shared_ptr<LoadedModel> model_;
    device::DeviceBuffer arena_;
    device::Stream stream_;
    device::Event start_, end_;
};

}  // namespace loom::executor
