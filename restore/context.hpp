// A device context: one simulated NPU, the thread pool it computes on, its fault plan and a
// cache of the models loaded on it, created once per process (or per test) and passed to every
// engine and pipeline that uses the device. Nothing here is found through a global: two contexts
// in one process have their own pools, fault plans and devices, and engines on one context
// share its device memory accounting and its loaded models.
//
// The model cache: an engine asks for a model by a key that names everything the compiled
// result depends on (the source graph's hash, the compile options' hash, the device spec's
// hash). While any engine holds the model, another engine asking for the same key gets the
// same LoadedModel: compiled once, its weights uploaded once and held once in device memory.
// The cache holds no model itself (weak references, pruned on every look-up), so it never
// grows with the jobs served and a model nobody uses frees its device memory.
//
// Threads: every call may come from any thread. Two engines asking for one key at once wait for
// one build; different keys build concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "compiler/compile.hpp"
#include "device/faults.hpp"
#include "device/runtime.hpp"
#include "executor/executor.hpp"

namespace loom::restore {

struct ContextOptions {
    std::string device = "edge";  // a device preset (edge, dc) or a spec file
    // The context's own thread pool: 0 = one thread per core. Ignored when `pool` is given.
    unsigned threads = 0;
    ThreadPool* pool = nullptr;  // borrow this pool instead (it must outlive the context)
    device::FaultPlan faults;    // this device's fault plan (nothing is read from the environment)
    bool trace = false;          // keep the device's task records for a Perfetto trace
};

// A model loaded on the context's device, as the model cache hands it out.
struct SharedModel {
    std::shared_ptr<executor::LoadedModel> loaded;
    bool reused = false;  // another engine had loaded it: nothing was compiled or uploaded
};

struct ModelCacheStats {
    uint64_t loads = 0;               // models compiled (or read from the compile cache) and uploaded
    uint64_t reuses = 0;              // requests answered with a model already loaded
    size_t models_live = 0;           // models loaded now (held by some engine)
    size_t weight_bytes_live = 0;     // their weights in device memory
    uint64_t weight_bytes_saved = 0;  // device memory reuses did not take (summed over reuses)
};

class DeviceContext {
public:
    using ModelBuild = std::function<Result<std::shared_ptr<const compiler::CompiledModel>>()>;

    // Loads the device spec, starts the pool (unless borrowed) and creates the device. Errors
    // name the preset or spec file.
    static Result<std::shared_ptr<DeviceContext>> create(const ContextOptions& options);
    // Waits for the device's work, then releases the device before the pool.
    ~DeviceContext();
    DeviceContext(const DeviceContext&) = delete;
    DeviceContext& operator=(const DeviceContext&) = delete;

    device::Device& device() const { return *device_; }
    ThreadPool& pool() const { return *pool_; }
    const ContextOptions& options() const { return options_; }

    // Returns the model loaded for `key`: the one an engine already holds, or the result of
    // `build` uploaded to the device (OUT_OF_DEVICE_MEMORY names the model when its weights do
    // not fit). A failed build is not cached.
    Result<SharedModel> model(const std::string& key, const ModelBuild& build);
    // Returns the model cache's counters.
    ModelCacheStats model_cache() const;

private:
    DeviceContext() = default;
    struct Entry {
        std::weak_ptr<executor::LoadedModel> model;
        std::shared_ptr<std::mutex> building = std::make_shared<std::mutex>();  // one build per key
    };
    ContextOptions options_;
    std::unique_ptr<ThreadPool> own_pool_;
    ThreadPool* pool_ = nullptr;
    std::unique_ptr<device::Device> device_;  // after the pool: destroyed before it
    mutable std::mutex mutex_;                // guards entries_ and the counters
    std::map<std::string, Entry> entries_;
    uint64_t loads_ = 0, reuses_ = 0, weight_bytes_saved_ = 0;
};

}  // namespace loom::restore
