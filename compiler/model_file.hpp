// The compiled-model file (.loom): a fixed header, a JSON description of the compiled model
// (tensors, steps with kernel attributes, tiling and placement, memory plan, mode, precision,
// the device spec and compiler version it was built for, the compile report) and the weights
// blob in device layout, covered by one checksum. A host-mode model stores its optimised graph
// instead of tensors, steps and plan (a "graph" object: values with dtype, shape with symbolic
// dims and a constant's offset in the weights blob; nodes with op, attributes, value ids and
// fused names; inputs; outputs).
//
// Layout (little-endian):
//   0   8  magic "LOOMMODL"
//   8   4  format version (kModelFormatVersion)
//   12  4  reserved, 0
//   16  8  JSON bytes
//   24  8  weights bytes
//   32  8  FNV-1a 64 checksum of the JSON and weights bytes
//   40  .. JSON, zero padding to a multiple of 64, weights
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.hpp"
#include "compiler/compile.hpp"
#include "device/kernel.hpp"
#include "device/spec.hpp"

namespace loom::compiler {

// Version 2 added host-mode models (the graph section); version 3 the model descriptor
// ("descriptor": compiler/descriptor.hpp); version 4 split regions ("splits": compiler/split.hpp),
// and is written only by models that have one (the others are written as version 3, byte for byte
// as before). Version 2 and 3 files still load, without a descriptor or splits as they lack them.
inline constexpr uint32_t kModelFormatVersion = 4;
inline constexpr uint32_t kModelFormatVersionNoSplits = 3;
inline constexpr uint32_t kModelFormatVersionMin = 2;

// Writes `m` to `path` (atomically: a temporary file renamed into place).
Status save_compiled_model(const std::string& path, const CompiledModel& m);
// Reads and validates a compiled model: magic, version (kModelFormatVersionMin to
// kModelFormatVersion), sizes, checksum, the descriptor's fields, and every tensor, step and plan
// entry (ids, offsets inside their blobs, kernels that exist, a plan whose live
// buffers never overlap; for host mode the graph: ids, constants inside the blob, ops in the op
// table, topological order, shape inference). A corrupt file is refused with a message naming
// the file and part.
Result<CompiledModel> load_compiled_model(const std::string& path);
// Fails unless `m` was built for `spec` by this compiler version (the message names both).
Status check_compatible(const CompiledModel& m, const device::DeviceSpec& spec, const std::string& path);

// A step's tiling as the file stores it: {"kind": "cube", "m_l1": ..} or {"kind": "vector", ..}
// with every field of CubeTiling / VectorSchedule; null for the default heuristic (monostate).
// The tuner's knowledge base stores tilings in the same form.
nlohmann::json tiling_json(const device::Tiling& t);
// Reads what tiling_json wrote; PARSE_ERROR naming the field ("tiling: 'm_l1' is not an
// integer") for a missing or mistyped field or an unknown kind or axis. Checks form, not
// legality (the kernels' checks decide that against a launch and a spec).
Result<device::Tiling> tiling_from_json(const nlohmann::json& j);

// The model's description as JSON (what the file stores, without the weights), for
// `loomc inspect --json`.
nlohmann::json compiled_model_json(const CompiledModel& m);

}  // namespace loom::compiler
