// An ONNX TensorProto file (`loomc run --input x.pb`, the backend test data) through its reader.
#include "compiler/import_onnx.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    (void)loom::compiler::read_tensor_file(loom::fuzz::scratch_file("tensor.pb", loom::fuzz::as_text(data, size)));
    return 0;
}
