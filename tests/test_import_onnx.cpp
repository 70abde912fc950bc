// ONNX import (compiler/import_onnx.cpp): models built here with the onnx protobuf classes,
// written to a temp dir and imported. Checks initializers (raw_data and the typed fields, fp16,
// int64, bool), Constant nodes, dim_params, attributes and node naming, opset handling, external
// data confined to the model's folder, every malformed part refused with a message naming the
// file and the node or initializer, and TensorProto files written and read back.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "compiler/compile.hpp"
#include "compiler/graph.hpp"
#include "compiler/import_onnx.hpp"
#include "compiler/model_file.hpp"
#include "compiler/ops.hpp"
#include "test_util.hpp"

namespace test_import_onnx {  // this file's names, apart from the rest of its unity batch

namespace {

namespace fs = std::filesystem;

using loom::StatusCode;
using loom::compiler::Graph;
using loom::compiler::HostTensor;
using loom::compiler::import_onnx;
using loom::compiler::shape_str;
using loom::device::DType;
using loom::test::TempDir;

// A dim of a declared input: a size or a dim_param name.
using DeclaredDim = std::variant<int64_t, std::string>;

// Returns an opset-`opset` model whose graph is named "g".
onnx::ModelProto new_model(int64_t opset = 17) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.set_producer_name("loom-tests");
    auto* os = m.add_opset_import();
    os->set_domain("");
    os->set_version(opset);
    m.mutable_graph()->set_name("g");
    return m;
}

// Declares a tensor value `name` of ONNX `elem_type` and `dims` in `info` (an input or output).
void declare(onnx::ValueInfoProto* info, const std::string& name, const std::vector<DeclaredDim>& dims,
             int elem_type = onnx::TensorProto_DataType_FLOAT) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
        auto* dim = shape->add_dim();
        if (const auto* v = std::get_if<int64_t>(&d)) dim->set_dim_value(*v);
        else if (!std::get<std::string>(d).empty()) dim->set_dim_param(std::get<std::string>(d));
    }
}

void add_input(onnx::ModelProto& m, const std::string& name, const std::vector<DeclaredDim>& dims,
               int elem_type = onnx::TensorProto_DataType_FLOAT) {
    declare(m.mutable_graph()->add_input(), name, dims, elem_type);
}

void add_output(onnx::ModelProto& m, const std::string& name) { m.mutable_graph()->add_output()->set_name(name); }

// Adds node `op` (named `name` unless empty) reading `inputs` and writing `outputs`.
onnx::NodeProto* add_node(onnx::ModelProto& m, const std::string& op, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, const std::string& name = "") {
    auto* n = m.mutable_graph()->add_node();
    n->set_op_type(op);
    if (!name.empty()) n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
}

onnx::AttributeProto* add_attr(onnx::NodeProto* n, const std::string& name, onnx::AttributeProto_AttributeType type) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(type);
    return a;
}

// Fills `t` as a tensor named `name` of `elem_type` and `dims` with `bytes` as raw_data.
void set_raw(onnx::TensorProto* t, const std::string& name, int elem_type, const std::vector<int64_t>& dims,
             const void* bytes, size_t size) {
    t->set_name(name);
    t->set_data_type(elem_type);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(bytes, size);
}

// Adds an f32 initializer holding `v` as raw_data.
onnx::TensorProto* add_f32_init(onnx::ModelProto& m, const std::string& name, const std::vector<int64_t>& dims,
                                const std::vector<float>& v) {
    auto* t = m.mutable_graph()->add_initializer();
    set_raw(t, name, onnx::TensorProto_DataType_FLOAT, dims, v.data(), v.size() * sizeof(float));
    return t;
}

// A minimal valid graph: y = Relu(x), x of shape 1x4.
onnx::ModelProto relu_model(int64_t opset = 17) {
    onnx::ModelProto m = new_model(opset);
    add_input(m, "x", {int64_t{1}, int64_t{4}});
    add_node(m, "Relu", {"x"}, {"y"}, "relu");
    add_output(m, "y");
    return m;
}

// Serializes `m` to `file` inside `dir`; returns the path.
std::string save(const TempDir& dir, const onnx::ModelProto& m, const std::string& file = "model.onnx") {
    const std::string path = dir.file(file);
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    EXPECT_TRUE(m.SerializeToOstream(&f));
    return path;
}

// Imports `path`; fails the test (returning an empty graph) on error.
Graph import_ok(const std::string& path) {
    auto r = import_onnx(path);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(r).value() : Graph{};
}

// Checks that importing `path` fails with `code` and a message naming the file and containing
// every needle.
void expect_refused(const std::string& path, const std::vector<std::string>& needles,
                    StatusCode code = StatusCode::INVALID_ARGUMENT) {
    auto r = import_onnx(path);
    ASSERT_FALSE(r.ok()) << "import succeeded";
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().to_string();
    for (const auto& n : needles)
        EXPECT_NE(r.status().message().find(n), std::string::npos) << n << " in " << r.status().to_string();
}

// Returns the constant named `name` of `g` (failing the test when it is missing or not constant).
const HostTensor& constant(const Graph& g, const std::string& name) {
    static const HostTensor none;
    const int id = g.find_value(name);
    EXPECT_GE(id, 0) << name;
    if (id < 0 || !g.value(id).is_constant()) {
        ADD_FAILURE() << name << " is not a constant";
        return none;
    }
    return *g.value(id).data;
}

TEST(ImportOnnx, InitializersFromRawDataAndTypedFields) {
    TempDir dir;
    onnx::ModelProto m = relu_model();
    auto* g = m.mutable_graph();
    add_f32_init(m, "f32_raw", {2, 3}, {1.5f, -2, 3, -4.25f, 5, 6});
    auto* typed = g->add_initializer();
    typed->set_name("f32_typed");
    typed->set_data_type(onnx::TensorProto_DataType_FLOAT);
    typed->add_dims(3);
    for (float v : {0.5f, -7.0f, 9.25f}) typed->add_float_data(v);

    const std::vector<loom::device::f16> halves = {loom::device::f32_to_f16(1.5f), loom::device::f32_to_f16(-0.125f)};
    set_raw(g->add_initializer(), "f16_raw", onnx::TensorProto_DataType_FLOAT16, {2}, halves.data(), 4);
    auto* f16_typed = g->add_initializer();  // float16 bits go in int32_data
    f16_typed->set_name("f16_typed");
    f16_typed->set_data_type(onnx::TensorProto_DataType_FLOAT16);
    f16_typed->add_dims(2);
    for (auto h : halves) f16_typed->add_int32_data(h.bits);

    const std::vector<int64_t> big = {int64_t{1} << 40, -3};
    set_raw(g->add_initializer(), "i64_raw", onnx::TensorProto_DataType_INT64, {2}, big.data(), 16);
    auto* i64_typed = g->add_initializer();
    i64_typed->set_name("i64_typed");
    i64_typed->set_data_type(onnx::TensorProto_DataType_INT64);
    for (int64_t v : big) i64_typed->add_int64_data(v);
    i64_typed->add_dims(2);
    auto* flags = g->add_initializer();
    flags->set_name("bool_typed");
    flags->set_data_type(onnx::TensorProto_DataType_BOOL);
    flags->add_dims(3);
    for (int v : {1, 0, 1}) flags->add_int32_data(v);
    auto* scalar = g->add_initializer();
    scalar->set_name("scalar");
    scalar->set_data_type(onnx::TensorProto_DataType_INT32);
    scalar->add_int32_data(-17);

    const Graph graph = import_ok(save(dir, m));
    ASSERT_EQ(graph.nodes.size(), 1u);
    const HostTensor& a = constant(graph, "f32_raw");
    EXPECT_EQ(a.dtype(), DType::F32);
    EXPECT_EQ(a.dims(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.to_doubles(), (std::vector<double>{1.5, -2, 3, -4.25, 5, 6}));
    EXPECT_EQ(constant(graph, "f32_typed").to_doubles(), (std::vector<double>{0.5, -7, 9.25}));
    for (const char* name : {"f16_raw", "f16_typed"}) {
        const HostTensor& h = constant(graph, name);
        EXPECT_EQ(h.dtype(), DType::F16) << name;
        EXPECT_EQ(h.to_doubles(), (std::vector<double>{1.5, -0.125})) << name;
    }
    for (const char* name : {"i64_raw", "i64_typed"}) {
        const HostTensor& t = constant(graph, name);
        EXPECT_EQ(t.dtype(), DType::I64) << name;
        ASSERT_TRUE(t.to_ints().ok());
        EXPECT_EQ(*t.to_ints(), big) << name;
    }
    EXPECT_EQ(constant(graph, "bool_typed").dtype(), DType::U8);
    EXPECT_EQ(*constant(graph, "bool_typed").to_ints(), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_TRUE(constant(graph, "scalar").dims().empty());
    EXPECT_EQ(*constant(graph, "scalar").to_ints(), (std::vector<int64_t>{-17}));
    // Initializers are constants, not graph inputs.
    ASSERT_EQ(graph.inputs.size(), 1u);
    EXPECT_EQ(graph.value(graph.inputs[0]).name, "x");
}

TEST(ImportOnnx, InitializerListedAsInputIsNotAnInput) {
    TempDir dir;
    onnx::ModelProto m = new_model(9);  // old exporters list initializers among the inputs too
    add_input(m, "x", {int64_t{1}, int64_t{2}});
    add_input(m, "w", {int64_t{1}, int64_t{2}});
    add_f32_init(m, "w", {1, 2}, {2, 3});
    add_node(m, "Mul", {"x", "w"}, {"y"});
    add_output(m, "y");
    const Graph g = import_ok(save(dir, m));
    ASSERT_EQ(g.inputs.size(), 1u);
    EXPECT_EQ(g.value(g.inputs[0]).name, "x");
    EXPECT_TRUE(g.value(g.find_value("w")).is_constant());
    EXPECT_EQ(g.opset, 9);
}

TEST(ImportOnnx, ConstantNodesBecomeConstants) {
    TempDir dir;
    onnx::ModelProto m = new_model();
    add_input(m, "x", {int64_t{2}, int64_t{3}});
    auto* c = add_node(m, "Constant", {}, {"shape"});
    auto* t = add_attr(c, "value", onnx::AttributeProto_AttributeType_TENSOR)->mutable_t();
    const std::vector<int64_t> shape = {3, -1};
    set_raw(t, "", onnx::TensorProto_DataType_INT64, {2}, shape.data(), 16);
    add_attr(add_node(m, "Constant", {}, {"f"}), "value_float", onnx::AttributeProto_AttributeType_FLOAT)->set_f(2.5f);
    add_attr(add_node(m, "Constant", {}, {"i"}), "value_int", onnx::AttributeProto_AttributeType_INT)->set_i(-4);
    auto* fs_attr =
        add_attr(add_node(m, "Constant", {}, {"fs"}), "value_floats", onnx::AttributeProto_AttributeType_FLOATS);
    fs_attr->add_floats(0.25f);
    fs_attr->add_floats(-1.0f);
    auto* is_attr =
        add_attr(add_node(m, "Constant", {}, {"is"}), "value_ints", onnx::AttributeProto_AttributeType_INTS);
    is_attr->add_ints(7);
    add_node(m, "Reshape", {"x", "shape"}, {"y"}, "reshape");
    add_output(m, "y");

    Graph g = import_ok(save(dir, m));
    ASSERT_EQ(g.nodes.size(), 1u);  // only the Reshape: Constants are values
    EXPECT_EQ(g.nodes[0].op, "Reshape");
    EXPECT_EQ(*constant(g, "shape").to_ints(), shape);
    EXPECT_TRUE(constant(g, "f").dims().empty());
    EXPECT_EQ(constant(g, "f").to_doubles(), std::vector<double>{2.5});
    EXPECT_EQ(constant(g, "i").dtype(), DType::I64);
    EXPECT_EQ(*constant(g, "i").to_ints(), std::vector<int64_t>{-4});
    EXPECT_EQ(constant(g, "fs").to_doubles(), (std::vector<double>{0.25, -1.0}));
    EXPECT_EQ(*constant(g, "is").to_ints(), std::vector<int64_t>{7});
    // The constant shape decides the Reshape's output.
    ASSERT_TRUE(loom::compiler::infer_shapes(g).ok());
    EXPECT_EQ(shape_str(g.value(g.find_value("y")).shape), "3x2");
}

TEST(ImportOnnx, DimParamsBecomeSymbols) {
    TempDir dir;
    onnx::ModelProto m = new_model();
    add_input(m, "x", {std::string("N"), int64_t{3}, std::string("H"), std::string("")});
    auto* w = add_f32_init(m, "w", {4, 3, 3, 3}, std::vector<float>(108, 0.5f));
    (void)w;
    auto* conv = add_node(m, "Conv", {"x", "w"}, {"y"}, "conv");
    auto* pads = add_attr(conv, "pads", onnx::AttributeProto_AttributeType_INTS);
    for (int i = 0; i < 4; ++i) pads->add_ints(1);
    add_output(m, "y");
    Graph g = import_ok(save(dir, m));
    ASSERT_EQ(g.inputs.size(), 1u);
    EXPECT_EQ(shape_str(g.value(g.inputs[0]).shape), "Nx3xHxx.d3");  // an unnamed dim gets a made-up name
    ASSERT_TRUE(loom::compiler::infer_shapes(g).ok());
    EXPECT_EQ(shape_str(g.value(g.find_value("y")).shape), "Nx4xHxx.d3");
}

TEST(ImportOnnx, NodesKeepAttributesAndGetNames) {
    TempDir dir;
    onnx::ModelProto m = new_model();
    add_input(m, "x", {int64_t{1}, int64_t{1}, int64_t{2}, int64_t{2}});
    auto* scales = m.mutable_graph()->add_initializer();
    const std::vector<float> s = {1, 1, 2, 2};
    set_raw(scales, "scales", onnx::TensorProto_DataType_FLOAT, {4}, s.data(), 16);
    auto* r = add_node(m, "Resize", {"x", "", "scales", ""}, {"up"});  // unnamed; trailing "" dropped
    add_attr(r, "mode", onnx::AttributeProto_AttributeType_STRING)->set_s("nearest");
    auto* lr = add_node(m, "LeakyRelu", {"up"}, {"y"});
    add_attr(lr, "alpha", onnx::AttributeProto_AttributeType_FLOAT)->set_f(0.25f);
    add_output(m, "y");
    const Graph g = import_ok(save(dir, m));
    ASSERT_EQ(g.nodes.size(), 2u);
    EXPECT_EQ(g.nodes[0].name, "Resize_1");
    EXPECT_EQ(g.nodes[1].name, "LeakyRelu_2");
    ASSERT_EQ(g.nodes[0].inputs.size(), 3u);
    EXPECT_EQ(g.nodes[0].inputs[1], -1);
    EXPECT_EQ(*g.nodes[0].attrs.get_string("mode"), "nearest");
    EXPECT_DOUBLE_EQ(*g.nodes[1].attrs.get_float("alpha"), 0.25);
    ASSERT_EQ(g.outputs.size(), 1u);
    EXPECT_EQ(g.value(g.outputs[0]).name, "y");
}

TEST(ImportOnnx, NodesAreSortedTopologically) {
    TempDir dir;
    onnx::ModelProto m = new_model();
    add_input(m, "x", {int64_t{4}});
    add_node(m, "Sigmoid", {"a"}, {"y"}, "second");  // reads a value produced by the next node
    add_node(m, "Relu", {"x"}, {"a"}, "first");
    add_output(m, "y");
    const Graph g = import_ok(save(dir, m));
    ASSERT_EQ(g.nodes.size(), 2u);
    EXPECT_EQ(g.nodes[0].name, "first");
    EXPECT_EQ(g.nodes[1].name, "second");
    EXPECT_TRUE(g.validate().ok());
}

TEST(ImportOnnx, OpsetsUpTo17AreRead) {
    TempDir dir;
    EXPECT_EQ(import_ok(save(dir, relu_model(17), "o17.onnx")).opset, 17);
    EXPECT_EQ(import_ok(save(dir, relu_model(11), "o11.onnx")).opset, 11);
    onnx::ModelProto ai = relu_model(13);
    ai.mutable_opset_import(0)->set_domain("ai.onnx");
    auto* ms = ai.add_opset_import();  // another domain's opset alongside is fine
    ms->set_domain("com.microsoft");
    ms->set_version(1);
    EXPECT_EQ(import_ok(save(dir, ai, "ai.onnx")).opset, 13);

    expect_refused(save(dir, relu_model(18), "o18.onnx"), {"opset 18", "up to 17"}, StatusCode::UNSUPPORTED);
    onnx::ModelProto none = relu_model();
    none.mutable_opset_import(0)->set_domain("com.example");
    expect_refused(save(dir, none, "none.onnx"), {"no opset for the default ONNX domain"}, StatusCode::PARSE_ERROR);
}

// Adds initializer `name` (4 floats) whose data lies in `location` at `offset`.
void add_external(onnx::ModelProto& m, const std::string& name, const std::string& location, int64_t offset,
                  int64_t length = 16) {
    auto* t = m.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_FLOAT);
    t->add_dims(4);
    t->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
    auto kv = [&](const char* k, const std::string& v) {
        auto* e = t->add_external_data();
        e->set_key(k);
        e->set_value(v);
    };
    kv("location", location);
    kv("offset", std::to_string(offset));
    if (length >= 0) kv("length", std::to_string(length));
}

// Writes `junk` bytes then the floats {1.5, -2, 3.25, 4} to `path`.
void write_weights(const std::string& path, size_t junk) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    const std::string pad(junk, 'J');
    const float v[4] = {1.5f, -2.0f, 3.25f, 4.0f};
    f.write(pad.data(), static_cast<std::streamsize>(pad.size()));
    f.write(reinterpret_cast<const char*>(v), sizeof v);
}

TEST(ImportOnnx, ExternalDataInsideTheFolder) {
    TempDir dir;
    write_weights(dir.file("m/weights.bin"), 24);
    write_weights(dir.file("m/data/more.bin"), 0);
    onnx::ModelProto m = relu_model();
    add_external(m, "w", "weights.bin", 24);
    add_external(m, "v", "data/more.bin", 0, -1);  // no length: the shape decides
    const Graph g = import_ok(save(dir, m, "m/model.onnx"));
    EXPECT_EQ(constant(g, "w").to_doubles(), (std::vector<double>{1.5, -2, 3.25, 4}));
    EXPECT_EQ(constant(g, "v").to_doubles(), (std::vector<double>{1.5, -2, 3.25, 4}));
}

TEST(ImportOnnx, ExternalDataEscapingTheFolderIsRefused) {
    TempDir dir;
    write_weights(dir.file("outside.bin"), 0);
    write_weights(dir.file("m/short.bin"), 0);
    {
        onnx::ModelProto m = relu_model();
        add_external(m, "w", dir.file("outside.bin"), 0);
        expect_refused(save(dir, m, "m/abs.onnx"), {"initializer 'w'", "must be a relative path"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_external(m, "w", "../outside.bin", 0);
        expect_refused(save(dir, m, "m/dotdot.onnx"), {"initializer 'w'", "leaves the model's folder"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_external(m, "w", "sub/../../outside.bin", 0);
        expect_refused(save(dir, m, "m/inner_dotdot.onnx"), {"initializer 'w'", "leaves the model's folder"});
    }
    {
        fs::create_symlink(dir.file("outside.bin"), dir.file("m/link.bin"));
        onnx::ModelProto m = relu_model();
        add_external(m, "w", "link.bin", 0);
        expect_refused(save(dir, m, "m/link.onnx"), {"initializer 'w'", "outside the model's folder"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_external(m, "w", "short.bin", 4);  // 16 bytes needed, 12 left after the offset
        expect_refused(save(dir, m, "m/short.onnx"), {"initializer 'w'", "holds 16 bytes, 16 needed at offset 4"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_external(m, "w", "short.bin", 0, 12);
        expect_refused(save(dir, m, "m/length.onnx"), {"initializer 'w'", "length 12"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_external(m, "w", "missing.bin", 0);
        expect_refused(save(dir, m, "m/missing.onnx"), {"initializer 'w'", "missing.bin"}, StatusCode::NOT_FOUND);
    }
}

TEST(ImportOnnx, TruncatedFileIsRefused) {
    TempDir dir;
    onnx::ModelProto m = relu_model();
    add_f32_init(m, "w", {64}, std::vector<float>(64, 0.75f));
    const std::string bytes = m.SerializeAsString();
    const std::string path = dir.write("cut.onnx", bytes.substr(0, bytes.size() / 2)).string();
    expect_refused(path, {"not a valid ONNX model"}, StatusCode::PARSE_ERROR);
    expect_refused(dir.file("absent.onnx"), {}, StatusCode::IO_ERROR);
}

TEST(ImportOnnx, MalformedInitializersAreRefused) {
    TempDir dir;
    {
        onnx::ModelProto m = relu_model();
        auto* t = add_f32_init(m, "w", {2, 3}, {1, 2, 3, 4, 5});  // 20 bytes for 6 floats
        (void)t;
        expect_refused(save(dir, m, "size.onnx"), {"initializer 'w'", "raw_data holds 20 bytes", "needs 24"});
    }
    {
        onnx::ModelProto m = relu_model();
        auto* t = m.mutable_graph()->add_initializer();
        t->set_name("w");
        t->set_data_type(onnx::TensorProto_DataType_FLOAT);
        t->add_dims(3);
        t->add_float_data(1);
        expect_refused(save(dir, m, "typed.onnx"), {"initializer 'w'", "float_data holds 1 values, the shape 3 needs 3"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_f32_init(m, "w", {-2}, {});
        expect_refused(save(dir, m, "negative.onnx"), {"initializer 'w'", "negative dimension -2"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_f32_init(m, "w", {1}, {1});
        add_f32_init(m, "w", {1}, {2});
        expect_refused(save(dir, m, "twice.onnx"), {"initializer 'w'", "defined twice"});
    }
    {
        onnx::ModelProto m = relu_model();
        auto* t = m.mutable_graph()->add_initializer();
        t->set_name("d");
        t->set_data_type(onnx::TensorProto_DataType_DOUBLE);
        expect_refused(save(dir, m, "double.onnx"), {"initializer 'd'", "ONNX data type 11"}, StatusCode::UNSUPPORTED);
    }
}

TEST(ImportOnnx, MalformedGraphsAreRefused) {
    TempDir dir;
    {
        onnx::ModelProto m = new_model();
        add_input(m, "x", {int64_t{1}, int64_t{-3}});
        add_node(m, "Relu", {"x"}, {"y"});
        add_output(m, "y");
        expect_refused(save(dir, m, "negdim.onnx"), {"graph input", "'x' has the negative dim -3"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_node(m, "Gelu", {"y"}, {"z"}, "custom")->set_domain("com.example");
        expect_refused(save(dir, m, "domain.onnx"), {"node 'custom' (Gelu)", "domain 'com.example'"},
                       StatusCode::UNSUPPORTED);
    }
    {
        onnx::ModelProto m = relu_model();
        add_node(m, "Add", {"y", "ghost"}, {"z"}, "adder");
        expect_refused(save(dir, m, "undefined.onnx"), {"node 'adder' (Add)", "reads 'ghost'"});
    }
    {
        onnx::ModelProto m = new_model();
        add_input(m, "x", {int64_t{4}});
        add_node(m, "Add", {"x", "b"}, {"a"}, "loop_a");
        add_node(m, "Relu", {"a"}, {"b"}, "loop_b");
        add_output(m, "b");
        expect_refused(save(dir, m, "cycle.onnx"), {"node 'loop_a' (Add) is on a cycle"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_node(m, "Sigmoid", {"x"}, {"y"}, "again");
        expect_refused(save(dir, m, "twice.onnx"), {"value 'y' is produced by both node 'relu' and 'again'"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_node(m, "Sigmoid", {"y"}, {"x"}, "clobber");
        expect_refused(save(dir, m, "input.onnx"), {"node 'clobber'", "graph input 'x'"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_output(m, "nowhere");
        expect_refused(save(dir, m, "output.onnx"), {"graph output 'nowhere' is never produced"});
    }
    {
        onnx::ModelProto m = relu_model();
        auto* c = add_node(m, "Constant", {}, {"k"}, "two_values");
        add_attr(c, "value_int", onnx::AttributeProto_AttributeType_INT)->set_i(1);
        add_attr(c, "value_float", onnx::AttributeProto_AttributeType_FLOAT)->set_f(1);
        expect_refused(save(dir, m, "constant.onnx"), {"node 'two_values' (Constant)", "exactly one value"});
    }
    {
        onnx::ModelProto m = relu_model();
        auto* n = m.mutable_graph()->mutable_node(0);
        add_attr(n, "alpha", onnx::AttributeProto_AttributeType_FLOAT)->set_f(1);
        add_attr(n, "alpha", onnx::AttributeProto_AttributeType_FLOAT)->set_f(2);
        expect_refused(save(dir, m, "attr.onnx"), {"node 'relu' (Relu)", "attribute 'alpha' repeats"});
    }
    {
        onnx::ModelProto m = relu_model();
        add_f32_init(m, "y", {1}, {1});  // the Relu would overwrite an initializer
        expect_refused(save(dir, m, "overwrite.onnx"), {"node 'relu' (Relu)", "overwrites a constant"});
    }
}

TEST(ImportOnnx, TensorFilesRoundTrip) {
    TempDir dir;
    HostTensor f = loom::test::random_host_f32({2, 3, 4}, 5);
    HostTensor i(DType::I64, {3});
    const int64_t iv[3] = {-(int64_t{1} << 50), 0, 42};
    std::memcpy(i.data(), iv, sizeof iv);
    HostTensor h(DType::F16, {2});
    h.as<loom::device::f16>()[0] = loom::device::f32_to_f16(-3.5f);
    h.as<loom::device::f16>()[1] = loom::device::f32_to_f16(0.0625f);
    HostTensor s(DType::F32, {});
    *s.as<float>() = 2.75f;
    const std::vector<std::pair<std::string, HostTensor>> tensors = {{"f", f}, {"i", i}, {"h", h}, {"s", s}};
    for (const auto& [name, t] : tensors) {
        const std::string path = dir.file(name + ".pb");
        ASSERT_TRUE(loom::compiler::write_tensor_file(path, t, name).ok());
        auto back = loom::compiler::read_tensor_file(path);
        ASSERT_TRUE(back.ok()) << back.status().to_string();
        EXPECT_EQ(back->dtype(), t.dtype()) << name;
        EXPECT_EQ(back->dims(), t.dims()) << name;
        ASSERT_EQ(back->bytes(), t.bytes()) << name;
        EXPECT_EQ(std::memcmp(back->data(), t.data(), t.bytes()), 0) << name;
        onnx::TensorProto p;  // a real TensorProto with the name, readable by ONNX tools
        std::ifstream in(path, std::ios::binary);
        ASSERT_TRUE(p.ParseFromIstream(&in));
        EXPECT_EQ(p.name(), name);
    }
    const std::string junk = dir.write("junk.pb", std::string("\xff\xff\xff\xff", 4)).string();
    auto bad = loom::compiler::read_tensor_file(junk);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find(junk), std::string::npos) << bad.status().to_string();
}

// Hostile models (issue 14): each is refused with a typed error naming the file and the field,
// quickly and without allocating what the file claims.
TEST(ImportOnnxHostile, InvalidUtf8InANameIsRefusedNamingTheFileAndField) {
    TempDir dir;
    onnx::ModelProto m = relu_model();
    m.mutable_graph()->mutable_node(0)->set_name("re\xff" "lu");
    const std::string path = save(dir, m);
    auto r = import_onnx(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::INVALID_ARGUMENT);
    for (const char* needle : {path.c_str(), "node name 're\\xFFlu' is not valid UTF-8 (byte 2)"})
        EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();

    onnx::ModelProto v = relu_model();
    v.mutable_graph()->mutable_node(0)->set_output(0, "y\xc0");
    v.mutable_graph()->mutable_output(0)->set_name("y\xc0");
    auto rv = import_onnx(save(dir, v, "value.onnx"));
    ASSERT_FALSE(rv.ok());
    EXPECT_NE(rv.status().message().find("value name 'y\\xC0' is not valid UTF-8"), std::string::npos)
        << rv.status().message();
}

TEST(ImportOnnxHostile, InitializerClaiming2e40ElementsIsRefusedBeforeAllocating) {
    TempDir dir;
    for (const bool raw : {false, true}) {
        onnx::ModelProto m = relu_model();
        m.mutable_graph()->mutable_node(0)->set_op_type("Add");
        m.mutable_graph()->mutable_node(0)->add_input("w");
        auto* w = m.mutable_graph()->add_initializer();
        w->set_name("w");
        w->set_data_type(onnx::TensorProto_DataType_FLOAT);
        w->add_dims(int64_t{1} << 20);
        w->add_dims(int64_t{1} << 20);
        if (raw) w->set_raw_data(std::string(16, '\0'));
        const std::string path = save(dir, m, raw ? "raw.onnx" : "typed.onnx");
        const auto start = std::chrono::steady_clock::now();
        auto r = import_onnx(path);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.status().code(), StatusCode::INVALID_ARGUMENT);
        const std::string field = raw ? "raw_data holds 16 bytes" : "float_data holds 0 values";
        for (const std::string& needle : {path, std::string("initializer 'w'"), field, std::string("1048576x1048576")})
            EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
        EXPECT_LT(seconds, 2.0) << "4 TiB were allocated before the check";
    }
    // Past 2^40 elements the dims alone are refused.
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto_DataType_FLOAT);
    for (int i = 0; i < 3; ++i) t.add_dims(int64_t{1} << 30);
    const std::string path = dir.file("huge.pb");
    {
        std::ofstream f(path, std::ios::binary);
        ASSERT_TRUE(t.SerializeToOstream(&f));
    }
    auto r = loom::compiler::read_tensor_file(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::OUT_OF_RANGE);
    EXPECT_NE(r.status().message().find(path + ": dims [1073741824, 1073741824, 1073741824] hold more than 2^40"),
              std::string::npos)
        << r.status().message();
}

TEST(ImportOnnxHostile, ShapeArithmeticThatOverflowsIsAnErrorNamingTheFileAndNode) {
    TempDir dir;
    const auto& spec = loom::test::preset_spec("edge");
    struct Case {
        const char* what;
        std::function<void(onnx::ModelProto&)> build;
        const char* needle;
    };
    const std::vector<Case> cases = {
        {"DepthToSpace blocksize 2^32 (blocksize^2 wrapped to 0: SIGFPE)",
         [](onnx::ModelProto& m) {
             auto* n = add_node(m, "DepthToSpace", {"x"}, {"y"}, "d2s");
             auto* a = add_attr(n, "blocksize", onnx::AttributeProto_AttributeType_INT);
             a->set_i(int64_t{1} << 32);
         },
         "node 'd2s' (DepthToSpace): blocksize^2 (4294967296) overflows 64-bit arithmetic"},
        {"Pad by INT64_MAX",
         [](onnx::ModelProto& m) {
             add_node(m, "Pad", {"x", "pads"}, {"y"}, "pad");
             auto* t = m.mutable_graph()->add_initializer();
             const int64_t big = std::numeric_limits<int64_t>::max();
             const std::vector<int64_t> pads = {0, 0, 0, big, 0, 0, 0, big};
             set_raw(t, "pads", onnx::TensorProto_DataType_INT64, {8}, pads.data(), pads.size() * 8);
         },
         "node 'pad' (Pad): the padded size of axis 3 overflows 64-bit arithmetic"},
        {"ConvTranspose stride 2^62",
         [](onnx::ModelProto& m) {
             auto* n = add_node(m, "ConvTranspose", {"x", "w"}, {"y"}, "deconv");
             auto* a = add_attr(n, "strides", onnx::AttributeProto_AttributeType_INTS);
             a->add_ints(int64_t{1} << 62);
             a->add_ints(int64_t{1} << 62);
             add_f32_init(m, "w", {4, 1, 1, 1}, {1, 2, 3, 4});
         },
         "node 'deconv' (ConvTranspose): the output size overflows 64-bit arithmetic"},
    };
    for (const Case& c : cases) {
        onnx::ModelProto m = new_model();
        add_input(m, "x", {int64_t{1}, int64_t{4}, int64_t{8}, int64_t{8}});
        c.build(m);
        add_output(m, "y");
        const std::string path = save(dir, m);
        auto g = import_onnx(path);
        ASSERT_TRUE(g.ok()) << c.what << ": " << g.status().to_string();
        auto compiled = loom::compiler::compile_graph(std::move(*g), {}, spec);
        ASSERT_FALSE(compiled.ok()) << c.what;
        EXPECT_EQ(compiled.status().code(), StatusCode::OUT_OF_RANGE) << compiled.status().to_string();
        EXPECT_NE(compiled.status().message().find(path + ": "), std::string::npos) << compiled.status().message();
        EXPECT_NE(compiled.status().message().find(c.needle), std::string::npos) << compiled.status().message();
    }
}

TEST(ImportOnnxHostile, TheCompiledModelWriterRefusesInvalidUtf8NamingTheField) {
    TempDir dir;
    auto g = import_onnx(save(dir, relu_model()));
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    auto m = loom::compiler::compile_graph(std::move(*g), {}, loom::test::preset_spec("edge"));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_FALSE(m->steps.empty());
    m->steps[0].name = "relu\xfe";  // as a model imported without the check would carry it
    const std::string out = dir.file("model.loom");
    loom::Status st = loom::compiler::save_compiled_model(out, *m);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(st.message(), out + ": cannot write: the model's field /steps/0/name is not valid UTF-8");
    EXPECT_FALSE(fs::exists(out));
}

}  // namespace

}  // namespace test_import_onnx
