// ncnn import: a text .param (magic 7767517) and its .bin weights become a Graph of ONNX ops
// (opset-17 forms), for the layers super-resolution and restoration models use.
//
// ncnn blobs are C x H x W (or H x W, or W) per image; the graph keeps the same dims behind a
// batch axis of 1, so an ncnn axis a >= 0 is graph axis a + 1. Graph inputs are [1, C, H, W]
// with H and W symbolic: ncnn's Input w/h/c are hints and Net runs any size, so --shape or the
// frame binds them (C comes from the first layer's weights, else the hint). Graph outputs are
// the blobs no layer consumes. Weights become F32 constants (fp16 and quantised-table storage convert exactly).
// A layer option that has no exact ONNX form is refused, never approximated.
#pragma once

#include <string>

#include "common/status.hpp"
#include "compiler/graph.hpp"

namespace loom::compiler {

// Reads `param_path` and `bin_path` into a topologically sorted Graph whose intermediate values
// are untyped. Every malformed or unsupported part is refused with a Status naming the file,
// line, layer and type (PARSE_ERROR: bad syntax, counts or .bin sizes; INVALID_ARGUMENT:
// inconsistent values; UNSUPPORTED: valid ncnn with no exact ONNX form here).
Result<Graph> import_ncnn(const std::string& param_path, const std::string& bin_path);

}  // namespace loom::compiler
