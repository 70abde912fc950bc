// The model importers' entry point: the only part of the compiler that reads model formats
// (ONNX through protobuf, ncnn's .param/.bin). It is a library of its own (loom_import) so that
// loading and running a compiled .loom file (executor/) needs no importer, as TVM's runtime
// needs no compiler.
#pragma once

#include <string>

#include "common/status.hpp"
#include "compiler/compile.hpp"

namespace loom::compiler {

// Loads a model by extension: .onnx, or .param (ncnn, with the .bin beside it), with its
// descriptor (compiler/descriptor.hpp: a sidecar MODEL.toml, else a recognised family; an error
// in a sidecar fails the import).
Result<Graph> import_model(const std::string& path);
// Imports and compiles.
Result<CompiledModel> compile_model(const std::string& path, const CompileOptions& options,
                                    const device::DeviceSpec& spec);

}  // namespace loom::compiler
