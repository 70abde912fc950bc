// The on-disk compile cache (compiler/compile_cache.hpp): a miss compiles and stores, the same
// request from a fresh cache object (a restart) loads without compiling, and every part of the
// key that can change (the model's contents, the device spec, the compiler build, calibration
// data, specialised input values) rebuilds the entry with a reason; a corrupt entry is rebuilt,
// a cache folder that cannot be written only costs the store.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/version.hpp"
#include "compiler/compile_cache.hpp"
#include "compiler/model_file.hpp"
#include "test_util.hpp"

namespace loom::test_compile_cache {  // apart from the rest of its unity batch
namespace {

using compiler::CacheOutcome;
using compiler::CacheResult;
using compiler::CompileCache;
using compiler::CompileOptions;
using compiler::Dim;
using compiler::Graph;

// The executor tests' SR body over a symbolic input, as if imported from `source`.
Graph sr_model(const std::string& source, uint32_t weight_seed = 4) {
    test::GraphBuilder b;
    b.input("x", {1, 3, Dim::sym("H"), Dim::sym("W")});
    test::add_sr_body(b);
    b.output("y");
    // add_sr_body draws w1 with seed 4; another seed is another model of the same shape.
    b.g.value(b.g.find_value("w1")).data =
        std::make_shared<compiler::HostTensor>(test::random_host_f32({8, 8, 3, 3}, weight_seed, -0.3f, 0.3f));
    b.g.source = source;
    b.g.name = "sr";
    return b.g;
}

CompileOptions at(int64_t h, int64_t w, compiler::Precision precision = compiler::Precision::FP32) {
    CompileOptions o;
    o.shapes = {{"x", {1, 3, h, w}}};
    o.precision = precision;
    return o;
}

CacheResult compile(const CompileCache& c, Graph g, const CompileOptions& o, std::string_view preset = "edge") {
    Result<CacheResult> r = c.compile(std::move(g), o, test::preset_spec(preset));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(*r) : CacheResult{};
}

// Two compiled models describe the same program: steps, plan and weights alike.
void expect_same_model(const compiler::CompiledModel& a, const compiler::CompiledModel& b) {
    EXPECT_EQ(compiler::compiled_model_json(a).dump(), compiler::compiled_model_json(b).dump());
    ASSERT_EQ(a.weights.bytes(), b.weights.bytes());
    EXPECT_EQ(std::memcmp(a.weights.data(), b.weights.data(), a.weights.bytes()), 0);
}

TEST(CompileCache, MissStoresAndARestartHitsWithoutCompiling) {
    test::TempDir dir;
    const std::string model = dir.file("sr.onnx");
    CacheResult first = compile(CompileCache(dir.file("cache")), sr_model(model), at(16, 24));
    EXPECT_EQ(first.outcome, CacheOutcome::MISS);
    EXPECT_TRUE(first.stored);
    EXPECT_TRUE(std::filesystem::exists(first.path)) << first.path;
    EXPECT_EQ(first.path.rfind(dir.file("cache") + "/sr.edge.fp32.", 0), 0u) << first.path;
    EXPECT_NE(first.model.source_hash, 0u);
    EXPECT_EQ(first.model.compiler_build, build_id());

    // A new cache object on the same folder: what a restarted process sees.
    CacheResult second = compile(CompileCache(dir.file("cache")), sr_model(model), at(16, 24));
    EXPECT_EQ(second.outcome, CacheOutcome::HIT);
    EXPECT_EQ(second.path, first.path);
    EXPECT_EQ(second.compile_ms, 0.0);
    expect_same_model(first.model, second.model);
}

TEST(CompileCache, RequestsThatDifferGetEntriesOfTheirOwn) {
    test::TempDir dir;
    const CompileCache cache(dir.file("cache"));
    const std::string model = dir.file("sr.onnx");
    const std::string base = compile(cache, sr_model(model), at(16, 24)).path;
    EXPECT_NE(compile(cache, sr_model(model), at(16, 32)).path, base);
    EXPECT_NE(compile(cache, sr_model(model), at(16, 24, compiler::Precision::FP16)).path, base);
    EXPECT_NE(compile(cache, sr_model(model), at(16, 24), "dc").path, base);
    EXPECT_NE(compile(cache, sr_model(dir.file("other/sr.onnx")), at(16, 24)).path, base);
    CompileOptions unfused = at(16, 24);
    unfused.optimize = false;
    EXPECT_NE(compile(cache, sr_model(model), unfused).path, base);
    // Each request hits its own entry.
    EXPECT_EQ(compile(cache, sr_model(model), at(16, 24)).outcome, CacheOutcome::HIT);
    EXPECT_EQ(compile(cache, sr_model(model), at(16, 32)).outcome, CacheOutcome::HIT);
    EXPECT_EQ(compile(cache, sr_model(model), at(16, 24), "dc").outcome, CacheOutcome::HIT);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("cache")), {}), 6);
}

TEST(CompileCache, AChangedModelIsRebuiltWithAReason) {
    test::TempDir dir;
    const CompileCache cache(dir.file("cache"));
    const std::string model = dir.file("sr.onnx");
    const CacheResult old = compile(cache, sr_model(model), at(16, 24));
    const CacheResult changed = compile(cache, sr_model(model, 99), at(16, 24));
    EXPECT_EQ(changed.outcome, CacheOutcome::STALE);
    EXPECT_EQ(changed.path, old.path);  // replaced in place, not a second entry
    EXPECT_NE(changed.reason.find("the model changed"), std::string::npos) << changed.reason;
    EXPECT_NE(changed.model.source_hash, old.model.source_hash);
    EXPECT_EQ(compile(cache, sr_model(model, 99), at(16, 24)).outcome, CacheOutcome::HIT);
    // The rebuilt entry holds the new weights: the old model is now the stale one.
    EXPECT_EQ(compile(cache, sr_model(model), at(16, 24)).outcome, CacheOutcome::STALE);
}

TEST(CompileCache, AChangedDeviceSpecIsRebuilt) {
    test::TempDir dir;
    const CompileCache cache(dir.file("cache"));
    const std::string model = dir.file("sr.onnx");
    device::DeviceSpec spec = test::preset_spec("edge");
    ASSERT_TRUE(cache.compile(sr_model(model), at(16, 24), spec).ok());
    spec.memory_bandwidth_gbps *= 2;  // same name, other numbers
    Result<CacheResult> r = cache.compile(sr_model(model), at(16, 24), spec);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->outcome, CacheOutcome::STALE);
    EXPECT_NE(r->reason.find("spec"), std::string::npos) << r->reason;
    EXPECT_EQ(r->model.spec_hash, spec.hash());
}

TEST(CompileCache, AnEntryFromAnotherCompilerBuildIsRebuilt) {
    test::TempDir dir;
    const CompileCache cache(dir.file("cache"));
    const std::string model = dir.file("sr.onnx");
    CacheResult first = compile(cache, sr_model(model), at(16, 24));
    first.model.compiler_build = "g000000000000";
    ASSERT_TRUE(compiler::save_compiled_model(first.path, first.model).ok());
    const CacheResult r = compile(cache, sr_model(model), at(16, 24));
    EXPECT_EQ(r.outcome, CacheOutcome::STALE);
    EXPECT_NE(r.reason.find("g000000000000"), std::string::npos) << r.reason;
    EXPECT_NE(r.reason.find(build_id()), std::string::npos) << r.reason;
    EXPECT_EQ(compiler::load_compiled_model(r.path)->compiler_build, build_id());
}

TEST(CompileCache, ACorruptEntryIsRebuilt) {
    test::TempDir dir;
    const CompileCache cache(dir.file("cache"));
    const std::string model = dir.file("sr.onnx");
    const CacheResult first = compile(cache, sr_model(model), at(16, 24));
    {
        std::fstream f(first.path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(-3, std::ios::end);
        f.put('\x5a');
    }
    const CacheResult r = compile(cache, sr_model(model), at(16, 24));
    EXPECT_EQ(r.outcome, CacheOutcome::STALE);
    EXPECT_NE(r.reason.find("checksum"), std::string::npos) << r.reason;
    expect_same_model(first.model, r.model);
    EXPECT_TRUE(compiler::load_compiled_model(r.path).ok());
    std::filesystem::resize_file(r.path, 20);
    EXPECT_EQ(compile(cache, sr_model(model), at(16, 24)).outcome, CacheOutcome::STALE);
    EXPECT_EQ(compile(cache, sr_model(model), at(16, 24)).outcome, CacheOutcome::HIT);
}

TEST(CompileCache, OtherCalibrationDataRebuildsAnInt8Entry) {
    test::TempDir dir;
    const CompileCache cache(dir.file("cache"));
    const std::string model = dir.file("sr.onnx");
    CompileOptions o = at(8, 8, compiler::Precision::INT8);
    o.calibration = {{test::random_host_f32({1, 3, 8, 8}, 7, 0.0f, 1.0f)}};
    EXPECT_EQ(compile(cache, sr_model(model), o).outcome, CacheOutcome::MISS);
    EXPECT_EQ(compile(cache, sr_model(model), o).outcome, CacheOutcome::HIT);
    o.calibration = {{test::random_host_f32({1, 3, 8, 8}, 8, 0.0f, 1.0f)}};
    const CacheResult r = compile(cache, sr_model(model), o);
    EXPECT_EQ(r.outcome, CacheOutcome::STALE);
    EXPECT_NE(r.reason.find("calibration"), std::string::npos) << r.reason;
}

TEST(CompileCache, OnlySpecialisedInputValuesNameTheEntry) {
    // y = Reshape(x, shape): `shape` must be constant, so its value is part of the request;
    // the value of x (a frame) is not.
    auto model = [](const std::string& source) {
        test::GraphBuilder b;
        b.input("x", {2, 6});
        b.input("shape", {2}, device::DType::I64);
        b.node("Reshape", {"x", "shape"}, {"y"});
        b.output("y");
        b.g.source = source;
        return b.g;
    };
    test::TempDir dir;
    const CompileCache cache(dir.file("cache"));
    auto request = [&](std::vector<int64_t> shape, uint32_t frame_seed) {
        CompileOptions o;
        o.input_values = {{"x", test::random_host_f32({2, 6}, frame_seed)}, {"shape", test::host_i64(shape)}};
        return compile(cache, model(dir.file("reshape.onnx")), o);
    };
    const CacheResult a = request({3, 4}, 1);
    EXPECT_EQ(a.outcome, CacheOutcome::MISS);
    EXPECT_EQ(request({3, 4}, 2).outcome, CacheOutcome::HIT);  // another frame, same program
    const CacheResult b = request({4, 3}, 1);
    EXPECT_EQ(b.outcome, CacheOutcome::MISS);
    EXPECT_NE(b.path, a.path);
}

TEST(CompileCache, AFolderThatCannotBeWrittenOnlyCostsTheStore) {
    test::TempDir dir;
    const std::string blocker = dir.write("not_a_folder", "x").string();
    const CompileCache cache(blocker + "/cache");
    Result<CacheResult> r = cache.compile(sr_model(dir.file("sr.onnx")), at(16, 24), test::preset_spec("edge"));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_FALSE(r->stored);
    EXPECT_EQ(r->outcome, CacheOutcome::MISS);
    EXPECT_FALSE(r->model.steps.empty());
}

TEST(CompileCache, CompileErrorsPassThroughAndStoreNothing) {
    test::TempDir dir;
    const CompileCache cache(dir.file("cache"));
    CompileOptions o = at(16, 24);
    o.precision = compiler::Precision::INT8;  // without calibration sets
    Result<CacheResult> r = cache.compile(sr_model(dir.file("sr.onnx")), o, test::preset_spec("edge"));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("calibration"), std::string::npos) << r.status().to_string();
    EXPECT_FALSE(std::filesystem::exists(dir.file("cache")));
}

TEST(GraphHash, CoversWeightsAttributesAndWiringButNotTheSourcePath) {
    const uint64_t base = compiler::graph_hash(sr_model("a.onnx"));
    EXPECT_EQ(compiler::graph_hash(sr_model("b/c.onnx")), base);
    EXPECT_NE(compiler::graph_hash(sr_model("a.onnx", 5)), base);
    Graph attr = sr_model("a.onnx");
    attr.nodes[0].attrs.set("pads", std::vector<int64_t>{0, 1, 1, 1});
    EXPECT_NE(compiler::graph_hash(attr), base);
    Graph wiring = sr_model("a.onnx");
    std::swap(wiring.nodes[3].inputs[0], wiring.nodes[3].inputs[1]);  // Add(c1, p0) -> Add(p0, c1)
    EXPECT_NE(compiler::graph_hash(wiring), base);
}

}  // namespace
}  // namespace loom::test_compile_cache
