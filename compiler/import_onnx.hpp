// ONNX import (opsets 11 to 17 of the default domain; older node forms are accepted where the
// op table knows them) through Debian's libonnx protobuf classes, and ONNX TensorProto files
// (the `input_0.pb` layout of ONNX's backend test data).
#pragma once

#include <string>

#include "common/status.hpp"
#include "compiler/graph.hpp"

namespace loom::compiler {

// Reads an ONNX model into a Graph: initializers become constants (external data files must
// lie inside the model's folder: absolute paths, `..` and escaping symlinks are refused),
// Constant nodes become constants, graph inputs keep their declared types with dim_params as
// symbols, and nodes keep their op types and attributes. Every malformed part is refused with
// a message naming the file and the node, initializer or input.
Result<Graph> import_onnx(const std::string& path);

// Reads one TensorProto file.
Result<HostTensor> read_tensor_file(const std::string& path);
// Writes `t` as a TensorProto named `name`.
Status write_tensor_file(const std::string& path, const HostTensor& t, const std::string& name);

}  // namespace loom::compiler
