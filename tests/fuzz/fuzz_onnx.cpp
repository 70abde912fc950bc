// An ONNX model file through what `loomc compile` does: import, compile for the edge preset,
// write the .loom file. Every input must end in a result or a Status, never a crash.
#include "compiler/compile.hpp"
#include "compiler/import_onnx.hpp"
#include "compiler/model_file.hpp"
#include "device/spec.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace loom;
    static const device::DeviceSpec spec = device::load_device_spec("edge").value();
    const std::string path = fuzz::scratch_file("model.onnx", fuzz::as_text(data, size));
    Result<compiler::Graph> g = compiler::import_onnx(path);
    if (!g.ok()) return 0;
    Result<compiler::CompiledModel> m = compiler::compile_graph(std::move(*g), {}, spec);
    if (!m.ok()) return 0;
    (void)compiler::save_compiled_model(fuzz::scratch_file("model.loom", ""), *m);
    return 0;
}
