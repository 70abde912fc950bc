// What a tuner needs from the compiler (docs/device-model.md, "Tuning interface"): a key that
// names a kernel launch independently of the graph it came from (a knowledge base stores it), a
// source of tilings that lowering asks instead of the default heuristic, and the lowered steps of
// a compiled model as launches with their kernel, work and key.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "device/cost.hpp"
#include "device/kernel.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"

namespace loom::compiler {

// One tensor of a launch as a StepKey records it.
struct TensorKey {
    DType dtype = DType::F32;
    std::vector<int64_t> dims;

    friend bool operator==(const TensorKey&, const TensorKey&) = default;
};

// Identifies a kernel launch independently of the graph: the kernel, each input's and output's
// dtype and dims (an absent optional input is the empty rank-1 tensor lowering passes), the
// attributes in canonical form, the device spec's hash and the cost model's version. Two
// launches with equal keys have the same work and the same tiling space. The key is syntactic:
// an attribute given at its default value and one left out give different keys.
struct StepKey {
    std::string kernel;
    std::vector<TensorKey> inputs, outputs;
    std::string attrs;  // canonical_attrs()
    // KernelLaunch::l2_inputs and l2_outputs (a split region's band launch): what a launch keeps in
    // L2 changes its cost, so it is part of its key.
    uint32_t l2_inputs = 0;
    bool l2_outputs = false;
    uint64_t spec_hash = 0;
    int cost_model_version = device::cost::kCostModelVersion;

    // The stable text form, one line:
    //   KERNEL|in=DT[d,d,...];DT[...]|out=DT[...]|attrs=ATTRS|spec=HHHHHHHHHHHHHHHH|cost=V
    // with |l2=inI,outO before |spec= when the launch keeps operands in L2 (I: l2_inputs in
    // decimal, O: 0 or 1).
    // e.g. conv|in=f32[1,3,8,8];f32[4,3,3,3]|out=f32[1,4,8,8]|attrs=group=1;pads=[1,1,1,1]|spec=...|cost=1
    std::string text() const;
    // FNV-1a 64 of text(): the same on every platform and in every build.
    uint64_t hash() const;

    friend bool operator==(const StepKey&, const StepKey&) = default;
};

// `attrs` in canonical form: NAME=VALUE pairs sorted by name (bytewise), joined by ';'. An int is
// printed in decimal, a float in its shortest round-trip form always with '.', 'e', "inf" or
// "nan" (1.0, not 1), a string in double quotes with '"', '\' and bytes outside printable ASCII
// escaped (\", \\, \xHH), an int list as [1,2], a float list as f[0.5,1.0].
std::string canonical_attrs(const device::KernelAttrs& attrs);
// The key of `launch` of kernel `kernel` on `spec` (launch.tiling is not part of it).
StepKey step_key(std::string_view kernel, const device::KernelLaunch& launch, const device::DeviceSpec& spec);
// The same for the spec whose DeviceSpec::hash() is `spec_hash` (hashing a spec per launch is not free).
StepKey step_key(std::string_view kernel, const device::KernelLaunch& launch, uint64_t spec_hash);

// Where lowering takes tilings from (CompileOptions::tiling_source): a knowledge base, a tuner's
// candidate, a test's table. Called from the compiling thread only; an implementation shared
// between compiles on several threads must make tiling_for safe for that itself.
class TilingSource {
public:
    virtual ~TilingSource() = default;
    // The tiling to use for the launch `key` names, or nullopt (or monostate) for the default
    // heuristic's. Lowering checks it: an illegal tiling fails the compile.
    virtual std::optional<device::Tiling> tiling_for(const StepKey& key) const = 0;
    // A hash of every tiling tiling_for can give (with its key): the compile cache keys a compiled
    // model on it, so a changed source rebuilds the entry.
    virtual uint64_t content_hash() const = 0;
};

// A TilingSource holding a fixed table of tilings by key (text form).
class TilingTable final : public TilingSource {
public:
    // Sets the tiling for `key`, replacing an earlier one.
    void set(const StepKey& key, const device::Tiling& tiling);
    // Sets every tiling of `other`, replacing those of the same keys.
    void merge(const TilingTable& other);
    size_t size() const { return by_key_.size(); }
    std::optional<device::Tiling> tiling_for(const StepKey& key) const override;
    uint64_t content_hash() const override;

private:
    std::map<std::string, device::Tiling> by_key_;
};

// A hash of every field of `t` (its kind first), stable across runs and builds.
uint64_t tiling_hash(const device::Tiling& t);

// One lowered step, or one band launch of a split region, as a tuner sees it.
struct TuningStep {
    size_t step = 0;         // index into CompiledModel::steps
    int split = -1;          // a band launch: the region's index in CompiledModel::splits, else -1
    size_t band_launch = 0;  // a band launch: its index in the region's plan (and tilings)
    const device::KernelDef* kernel = nullptr;
    // The launch lowering costed: shapes, the constants' bytes (pointing into the model's
    // weights: valid while the model lives), no activation data, the step's recorded tiling.
    device::KernelLaunch launch;
    device::KernelWork work;  // device::kernel_launch_work(*kernel, launch, spec)
    StepKey key;
};

// Every step of sink model `m` (compiled for `spec`) that a tuner can tune: placed on the device,
// not an alias, its kernel's work taking a tiling (kind CUBE or VECTOR); in step order, the steps
// of a split region replaced by the region's band launches (compiler/split.hpp) in the plan's
// order. Fails for a host-mode model (lowered per input shape at run time), a model compiled for
// another spec, or a step whose kernel this build lacks or refuses.
Result<std::vector<TuningStep>> tuning_steps(const CompiledModel& m, const device::DeviceSpec& spec);

}  // namespace loom::compiler
