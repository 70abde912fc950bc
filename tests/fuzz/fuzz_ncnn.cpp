// An ncnn model: the input is the .param text, a NUL byte, then the .bin weights (no NUL: an
// empty .bin). Imported and compiled for the edge preset as `loomc compile` does.
#include <cstring>

#include "compiler/compile.hpp"
#include "compiler/import_ncnn.hpp"
#include "device/spec.hpp"
#include "tests/fuzz/fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace loom;
    static const device::DeviceSpec spec = device::load_device_spec("edge").value();
    const std::string_view all = fuzz::as_text(data, size);
    const size_t nul = all.find('\0');
    const std::string param = fuzz::scratch_file("model.param", all.substr(0, nul));
    const std::string bin =
        fuzz::scratch_file("model.bin", nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1));
    Result<compiler::Graph> g = compiler::import_ncnn(param, bin);
    if (!g.ok()) return 0;
    (void)compiler::compile_graph(std::move(*g), {}, spec);
    return 0;
}
