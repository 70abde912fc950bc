#include "compiler/import_onnx.hpp"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/onnx_pb.h>

#include "common/file.hpp"
#include "compiler/ops.hpp"

namespace loom::compiler {

namespace fs = std::filesystem;

namespace {

// Files above this are refused before reading (protobuf's own limit is 2 GiB).
constexpr uintmax_t kModelBytesMax = uintmax_t{2} << 30;


Result<DType> dtype_from_onnx(int32_t t, std::string_view what) {
    switch (t) {
        case onnx::TensorProto_DataType_FLOAT: return DType::F32;
        case onnx::TensorProto_DataType_FLOAT16: return DType::F16;
        case onnx::TensorProto_DataType_INT8: return DType::I8;
        case onnx::TensorProto_DataType_UINT8: return DType::U8;
        case onnx::TensorProto_DataType_BOOL: return DType::U8;
        case onnx::TensorProto_DataType_INT32: return DType::I32;
        case onnx::TensorProto_DataType_INT64: return DType::I64;
        default:
            return make_error(StatusCode::UNSUPPORTED,
                              "{}: ONNX data type {} (float, float16, int8, uint8, bool, int32 and int64 are supported)",
                              what, t);
    }
}

int32_t dtype_to_onnx(DType t) {
    switch (t) {
        case DType::F32: return onnx::TensorProto_DataType_FLOAT;
        case DType::F16: return onnx::TensorProto_DataType_FLOAT16;
        case DType::I8: return onnx::TensorProto_DataType_INT8;
        case DType::U8: return onnx::TensorProto_DataType_UINT8;
        case DType::I32: return onnx::TensorProto_DataType_INT32;
        case DType::I64: return onnx::TensorProto_DataType_INT64;
    }
    return onnx::TensorProto_DataType_UNDEFINED;
}

// Resolves an external-data location inside `dir`; refuses anything that could leave it.
Result<std::string> external_path(const std::string& dir, const std::string& location, std::string_view what) {
    const fs::path rel(location);
    if (location.empty() || rel.is_absolute())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: external data location '{}' must be a relative path", what,
                          location);
    for (const auto& part : rel)
        if (part == "..")
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: external data location '{}' leaves the model's folder",
                              what, location);
    std::error_code ec;
    const fs::path base = fs::canonical(dir.empty() ? fs::path(".") : fs::path(dir), ec);
    if (ec) return make_error(StatusCode::IO_ERROR, "{}: model folder '{}': {}", what, dir, ec.message());
    const fs::path full = fs::canonical(base / rel, ec);
    if (ec) return make_error(StatusCode::NOT_FOUND, "{}: external data '{}': {}", what, location, ec.message());
    const auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
    if (b != base.end())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: external data '{}' resolves to '{}', outside the model's folder (a symlink?)", what,
                          location, full.string());
    return full.string();
}

// Copies a typed data field whose length the caller checked against the shape.
template <typename Src, typename Dst>
void copy_field(const google::protobuf::RepeatedField<Src>& field, HostTensor& t) {
    Dst* dst = t.as<Dst>();
    for (int i = 0; i < field.size(); ++i) {
        if constexpr (std::is_same_v<Dst, device::f16>) dst[i] = device::f16{static_cast<uint16_t>(field[i])};
        else dst[i] = static_cast<Dst>(field[i]);
    }
}

Result<HostTensor> tensor_from_proto(const onnx::TensorProto& p, const std::string& dir, std::string_view what) {
    LOOM_ASSIGN_OR_RETURN(DType dtype, dtype_from_onnx(p.data_type(), what));
    std::vector<int64_t> dims;
    int64_t n = 1;
    for (int64_t d : p.dims()) {
        if (d < 0) return make_error(StatusCode::INVALID_ARGUMENT, "{}: negative dimension {}", what, d);
        if (d != 0 && n > kTensorElementsMax / d)
            return make_error(StatusCode::OUT_OF_RANGE, "{}: dims [{}] hold more than 2^40 elements", what,
                              fmt::join(p.dims(), ", "));
        n *= d;
        dims.push_back(d);
    }
    const size_t bytes = static_cast<size_t>(n) * device::dtype_size(dtype);
    if (p.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
        std::string location;
        int64_t offset = 0, length = -1;
        for (const auto& kv : p.external_data()) {
            if (kv.key() == "location") location = kv.value();
            else if (kv.key() == "offset" || kv.key() == "length") {
                int64_t v = 0;
                const auto* end = kv.value().data() + kv.value().size();
                if (std::from_chars(kv.value().data(), end, v).ptr != end || v < 0)
                    return make_error(StatusCode::INVALID_ARGUMENT, "{}: external data {} '{}' is not a size", what,
                                      kv.key(), kv.value());
                (kv.key() == "offset" ? offset : length) = v;
            }
        }
        LOOM_ASSIGN_OR_RETURN(std::string path, external_path(dir, location, what));
        if (length >= 0 && static_cast<size_t>(length) != bytes)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: external data length {} but the shape needs {} bytes", what,
                              length, bytes);
        std::error_code ec;
        const uintmax_t size = fs::file_size(path, ec);
        if (ec || static_cast<uintmax_t>(offset) > size || size - static_cast<uintmax_t>(offset) < bytes)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: external file '{}' holds {} bytes, {} needed at offset {}",
                              what, location, ec ? 0 : size, bytes, offset);
        HostTensor t(dtype, dims);
        std::ifstream f(path, std::ios::binary);
        if (!f.seekg(offset) || !f.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(bytes)))
            return make_error(StatusCode::IO_ERROR, "{}: reading external file '{}' failed", what, location);
        return t;
    }
    // The data must be in the file before the tensor is allocated: a shape claiming 2^40
    // elements over a few bytes is refused here, not after a failed allocation.
    if (p.has_raw_data()) {
        if (p.raw_data().size() != bytes)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: raw_data holds {} bytes, the shape {} of {} needs {}", what,
                              p.raw_data().size(), fmt::join(dims, "x"), device::dtype_name(dtype), bytes);
        HostTensor t(dtype, dims);
        if (bytes) std::memcpy(t.data(), p.raw_data().data(), bytes);
        return t;
    }
    const bool f32 = dtype == DType::F32, i64 = dtype == DType::I64;
    const int present = f32 ? p.float_data_size() : i64 ? p.int64_data_size() : p.int32_data_size();
    if (present != n)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} holds {} values, the shape {} needs {}", what,
                          f32 ? "float_data" : i64 ? "int64_data" : "int32_data", present, fmt::join(dims, "x"), n);
    HostTensor t(dtype, dims);
    switch (dtype) {
        case DType::F32: copy_field<float, float>(p.float_data(), t); break;
        case DType::F16: copy_field<int32_t, device::f16>(p.int32_data(), t); break;
        case DType::I8: copy_field<int32_t, int8_t>(p.int32_data(), t); break;
        case DType::U8: copy_field<int32_t, uint8_t>(p.int32_data(), t); break;
        case DType::I32: copy_field<int32_t, int32_t>(p.int32_data(), t); break;
        case DType::I64: copy_field<int64_t, int64_t>(p.int64_data(), t); break;
    }
    return t;
}

Result<AttrValue> attr_from_proto(const onnx::AttributeProto& a, std::string_view what) {
    switch (a.type()) {
        case onnx::AttributeProto_AttributeType_INT: return AttrValue(static_cast<int64_t>(a.i()));
        case onnx::AttributeProto_AttributeType_FLOAT: return AttrValue(static_cast<double>(a.f()));
        case onnx::AttributeProto_AttributeType_STRING: return AttrValue(a.s());
        case onnx::AttributeProto_AttributeType_INTS: return AttrValue(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
        case onnx::AttributeProto_AttributeType_FLOATS: {
            std::vector<double> v(a.floats().begin(), a.floats().end());
            return AttrValue(std::move(v));
        }
        default:
            return make_error(StatusCode::UNSUPPORTED, "{}: attribute '{}' of type {} (graphs, tensors and string lists are not supported)",
                              what, a.name(), static_cast<int>(a.type()));
    }
}

// Turns a Constant node into its tensor.
Result<HostTensor> constant_value(const onnx::NodeProto& n, const std::string& dir, std::string_view what) {
    if (n.attribute_size() != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: Constant needs exactly one value attribute", what);
    const onnx::AttributeProto& a = n.attribute(0);
    if (a.name() == "value") return tensor_from_proto(a.t(), dir, what);
    if (a.name() == "value_float") {
        HostTensor t(DType::F32, {});
        *t.as<float>() = a.f();
        return t;
    }
    if (a.name() == "value_int") {
        HostTensor t(DType::I64, {});
        *t.as<int64_t>() = a.i();
        return t;
    }
    if (a.name() == "value_floats") {
        HostTensor t(DType::F32, {a.floats_size()});
        std::copy(a.floats().begin(), a.floats().end(), t.as<float>());
        return t;
    }
    if (a.name() == "value_ints") {
        HostTensor t(DType::I64, {a.ints_size()});
        std::copy(a.ints().begin(), a.ints().end(), t.as<int64_t>());
        return t;
    }
    return make_error(StatusCode::UNSUPPORTED, "{}: Constant attribute '{}' is not supported", what, a.name());
}

Status type_from_proto(const onnx::TypeProto& tp, Value& v, std::string_view what) {
    if (!tp.has_tensor_type())
        return make_error(StatusCode::UNSUPPORTED, "{}: '{}' is not a tensor (sequences and maps are not supported)",
                          what, v.name);
    const auto& tt = tp.tensor_type();
    LOOM_ASSIGN_OR_RETURN(v.dtype, dtype_from_onnx(tt.elem_type(), fmt::format("{} '{}'", what, v.name)));
    v.shape.clear();
    if (!tt.has_shape()) return make_error(StatusCode::UNSUPPORTED, "{}: '{}' has no shape (unknown rank)", what, v.name);
    for (int i = 0; i < tt.shape().dim_size(); ++i) {
        const auto& d = tt.shape().dim(i);
        if (d.has_dim_value()) {
            if (d.dim_value() < 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: '{}' has the negative dim {}", what, v.name,
                                  d.dim_value());
            v.shape.push_back(Dim(d.dim_value()));
        } else {
            v.shape.push_back(Dim::sym(d.has_dim_param() && !d.dim_param().empty() ? d.dim_param()
                                                                                  : fmt::format("{}.d{}", v.name, i)));
        }
    }
    v.typed = true;
    return {};
}

}  // namespace

Result<Graph> import_onnx(const std::string& path) {
    LOOM_ASSIGN_OR_RETURN(std::string bytes, read_file(path, kModelBytesMax));
    onnx::ModelProto model;
    if (!model.ParseFromString(bytes))
        return make_error(StatusCode::PARSE_ERROR, "{}: not a valid ONNX model (protobuf parse failed)", path);
    if (!model.has_graph()) return make_error(StatusCode::PARSE_ERROR, "{}: the model has no graph", path);
    const std::string dir = fs::path(path).parent_path().string();
    Graph g;
    g.source = path;
    const onnx::GraphProto& gp = model.graph();
    g.name = gp.name();
    bool have_opset = false;
    for (const auto& os : model.opset_import()) {
        if (os.domain().empty() || os.domain() == "ai.onnx") {
            g.opset = os.version();
            have_opset = true;
        }
    }
    if (!have_opset) return make_error(StatusCode::PARSE_ERROR, "{}: no opset for the default ONNX domain", path);
    if (g.opset > 17)
        return make_error(StatusCode::UNSUPPORTED, "{}: opset {} (Loom reads opsets up to 17)", path, g.opset);

    for (const auto& init : gp.initializer()) {
        const std::string what = fmt::format("{}: initializer '{}'", path, init.name());
        if (init.name().empty()) return make_error(StatusCode::INVALID_ARGUMENT, "{}: an initializer has no name", path);
        if (g.find_value(init.name()) >= 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "{} is defined twice", what);
        LOOM_ASSIGN_OR_RETURN(HostTensor t, tensor_from_proto(init, dir, what));
        g.add_constant(init.name(), std::move(t));
    }
    for (const auto& in : gp.input()) {
        if (g.find_value(in.name()) >= 0) continue;  // an initializer (an input only for old exporters)
        const int id = g.add_value(in.name());
        LOOM_TRY(type_from_proto(in.type(), g.value(id), fmt::format("{}: graph input", path)));
        g.inputs.push_back(id);
    }

    int index = 0;
    for (const auto& np : gp.node()) {
        ++index;
        Node n;
        n.op = np.op_type();
        n.name = np.name().empty() ? fmt::format("{}_{}", np.op_type(), index) : np.name();
        const std::string what = fmt::format("{}: node '{}' ({})", path, n.name, n.op);
        if (!np.domain().empty() && np.domain() != "ai.onnx")
            return make_error(StatusCode::UNSUPPORTED, "{}: domain '{}' is not supported", what, np.domain());
        if (n.op == "Constant") {
            if (np.output_size() != 1) return make_error(StatusCode::INVALID_ARGUMENT, "{}: needs one output", what);
            if (g.find_value(np.output(0)) >= 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: value '{}' is defined twice", what, np.output(0));
            LOOM_ASSIGN_OR_RETURN(HostTensor t, constant_value(np, dir, what));
            g.add_constant(np.output(0), std::move(t));
            continue;
        }
        for (const auto& name : np.input()) {
            if (name.empty()) {
                n.inputs.push_back(-1);
                continue;
            }
            int id = g.find_value(name);
            if (id < 0) id = g.add_value(name);  // produced later (topo_sort checks it is produced at all)
            n.inputs.push_back(id);
        }
        while (!n.inputs.empty() && n.inputs.back() < 0) n.inputs.pop_back();
        int outputs = np.output_size();
        while (outputs > 0 && np.output(outputs - 1).empty()) --outputs;
        for (int i = 0; i < outputs; ++i) {
            const std::string& name = np.output(i);
            if (name.empty())
                return make_error(StatusCode::UNSUPPORTED, "{}: optional output {} is skipped while a later one is used", what, i);
            int id = g.find_value(name);
            if (id < 0) id = g.add_value(name);
            else if (g.value(id).is_constant())
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: output '{}' overwrites a constant", what, name);
            n.outputs.push_back(id);
        }
        for (const auto& a : np.attribute()) {
            LOOM_ASSIGN_OR_RETURN(AttrValue v, attr_from_proto(a, what));
            if (n.attrs.has(a.name())) return make_error(StatusCode::INVALID_ARGUMENT, "{}: attribute '{}' repeats", what, a.name());
            n.attrs.set(a.name(), std::move(v));
        }
        g.nodes.push_back(std::move(n));
    }
    for (const auto& out : gp.output()) {
        const int id = g.find_value(out.name());
        if (id < 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: graph output '{}' is never produced", path, out.name());
        Value& v = g.value(id);
        if (!v.is_constant() && out.has_type() && out.type().has_tensor_type() && out.type().tensor_type().has_shape())
            LOOM_TRY(type_from_proto(out.type(), v, fmt::format("{}: graph output", path)));
        g.outputs.push_back(id);
    }
    LOOM_TRY(g.topo_sort());
    LOOM_TRY(check_graph_utf8(g));
    return g;
}

Result<HostTensor> read_tensor_file(const std::string& path) {
    LOOM_ASSIGN_OR_RETURN(std::string bytes, read_file(path, kModelBytesMax));
    onnx::TensorProto p;
    if (!p.ParseFromString(bytes)) return make_error(StatusCode::PARSE_ERROR, "{}: not a TensorProto", path);
    return tensor_from_proto(p, fs::path(path).parent_path().string(), path);
}

Status write_tensor_file(const std::string& path, const HostTensor& t, const std::string& name) {
    onnx::TensorProto p;
    p.set_name(name);
    p.set_data_type(dtype_to_onnx(t.dtype()));
    for (int64_t d : t.dims()) p.add_dims(d);
    p.set_raw_data(t.data(), t.bytes());
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f || !p.SerializeToOstream(&f)) return make_error(StatusCode::IO_ERROR, "{}: cannot write", path);
    return {};
}

}  // namespace loom::compiler
