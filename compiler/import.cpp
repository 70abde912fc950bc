#include "compiler/import.hpp"

#include <filesystem>

#include "compiler/import_ncnn.hpp"
#include "compiler/import_onnx.hpp"

namespace loom::compiler {

namespace {

Result<Graph> import_graph(const std::string& path) {
    const std::filesystem::path p(path);
    const std::string ext = p.extension().string();
    if (ext == ".onnx") return import_onnx(path);
    if (ext == ".param") {
        std::filesystem::path bin = p;
        bin.replace_extension(".bin");
        return import_ncnn(path, bin.string());
    }
    return make_error(StatusCode::INVALID_ARGUMENT, "{}: unknown model format (expected .onnx or an ncnn .param)", path);
}

}  // namespace

Result<Graph> import_model(const std::string& path) {
    LOOM_ASSIGN_OR_RETURN(Graph g, import_graph(path));
    LOOM_ASSIGN_OR_RETURN(g.descriptor, describe_model(g, path));
    return g;
}

Result<CompiledModel> compile_model(const std::string& path, const CompileOptions& options,
                                    const device::DeviceSpec& spec) {
    LOOM_ASSIGN_OR_RETURN(Graph g, import_model(path));
    return compile_graph(std::move(g), options, spec);
}

}  // namespace loom::compiler
