// Device spec contract (device/spec.hpp): presets load with the documented figures, the hash is
// a content hash, and every config error reads `file:line:col: message` (CONTRIBUTING.md: errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "device/spec.hpp"
#include "test_util.hpp"

namespace test_spec {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::StatusCode;
using loom::device::DeviceSpec;
using loom::device::load_device_spec;
using loom::device::parse_device_spec;
using loom::test::TempDir;

std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string edge_toml() { return read_text(std::filesystem::path(LOOM_SOURCE_DIR) / "configs/devices/edge.toml"); }

// Removes the first line that starts with `prefix` (after indentation); the line must exist.
std::string drop_line(const std::string& text, const std::string& prefix) {
    std::istringstream in(text);
    std::string out, line;
    bool dropped = false;
    while (std::getline(in, line)) {
        size_t first = line.find_first_not_of(' ');
        if (!dropped && first != std::string::npos && line.compare(first, prefix.size(), prefix) == 0) {
            dropped = true;
            continue;
        }
        out += line + "\n";
    }
    EXPECT_TRUE(dropped) << "no line starts with " << prefix;
    return out;
}

::testing::AssertionResult fails_with(const loom::Result<DeviceSpec>& r, StatusCode code, const std::string& text) {
    if (r.ok()) return ::testing::AssertionFailure() << "parsed, expected an error containing '" << text << "'";
    if (r.status().code() != code)
        return ::testing::AssertionFailure() << "wrong code: " << r.status().to_string();
    if (r.status().message().find(text) == std::string::npos)
        return ::testing::AssertionFailure() << "message '" << r.status().message() << "' lacks '" << text << "'";
    return ::testing::AssertionSuccess();
}

TEST(SpecPresets, EdgeLoadsWithTwoCoresEightGibAndEightTflops) {
    auto s = load_device_spec("edge");
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->name, "edge");
    EXPECT_EQ(s->aicore_count, 2);
    EXPECT_EQ(s->memory_bytes(), int64_t{8} << 30);
    EXPECT_NEAR(s->peak_fp16_flops() / 1e12, 8.0, 8.0 * 0.05);
}

TEST(SpecPresets, DcLoadsWith32CoresThirtyTwoGibAnd256Tflops) {
    auto s = load_device_spec("dc");
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->name, "dc");
    EXPECT_EQ(s->aicore_count, 32);
    EXPECT_EQ(s->memory_bytes(), int64_t{32} << 30);
    EXPECT_NEAR(s->peak_fp16_flops() / 1e12, 256.0, 256.0 * 0.05);
}

TEST(SpecPresets, PresetNamesListBothPresets) {
    auto names = loom::device::device_preset_names();
    EXPECT_NE(std::find(names.begin(), names.end(), "edge"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "dc"), names.end());
}

TEST(SpecPresets, UnknownPresetIsNotFoundAndListsThePresets) {
    auto r = load_device_spec("tpu9000");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::NOT_FOUND);
    const std::string m = r.status().message();
    EXPECT_NE(m.find("'tpu9000'"), std::string::npos) << m;
    EXPECT_NE(m.find("dc, edge"), std::string::npos) << m;
}

TEST(SpecHash, DiffersBetweenPresets) {
    auto edge = load_device_spec("edge");
    auto dc = load_device_spec("dc");
    ASSERT_TRUE(edge.ok() && dc.ok());
    EXPECT_NE(edge->hash(), dc->hash());
}

TEST(SpecHash, IsStableForTheSameText) {
    std::string text = edge_toml();
    auto a = parse_device_spec(text, "a.toml");
    auto b = parse_device_spec(text, "b.toml");  // the source name is not part of the content
    auto preset = load_device_spec("edge");
    ASSERT_TRUE(a.ok() && b.ok() && preset.ok()) << a.status().to_string();
    EXPECT_EQ(a->hash(), b->hash());
    EXPECT_EQ(a->hash(), preset->hash());
    EXPECT_EQ(a->to_json()["derived"]["spec_hash"], preset->to_json()["derived"]["spec_hash"]);
}

TEST(SpecHash, IsAContentHashSoRestatingAPresetValueKeepsIt) {
    auto edge = load_device_spec("edge");
    auto same = parse_device_spec("base = \"edge\"\n[aicore]\ncount = 2\n", "same.toml");
    ASSERT_TRUE(edge.ok() && same.ok()) << same.status().to_string();
    EXPECT_EQ(same->hash(), edge->hash());
}

TEST(SpecBase, OverridingOneFieldKeepsTheRestAndChangesTheHash) {
    auto edge = load_device_spec("edge");
    auto s = parse_device_spec("base = \"edge\"\n[memory]\ncapacity_mib = 1024\n", "small.toml");
    ASSERT_TRUE(edge.ok() && s.ok()) << s.status().to_string();
    EXPECT_EQ(s->memory_capacity_mib, 1024);
    EXPECT_EQ(s->memory_bytes(), int64_t{1} << 30);
    EXPECT_EQ(s->name, "edge");
    EXPECT_EQ(s->aicore_count, edge->aicore_count);
    EXPECT_EQ(s->host_link_bandwidth_gbps, edge->host_link_bandwidth_gbps);
    EXPECT_EQ(s->watchdog_ms, edge->watchdog_ms);
    EXPECT_NE(s->hash(), edge->hash());
}

TEST(SpecBase, UnknownBasePresetIsReportedAtItsValue) {
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"tpu\"\n", "spec.toml"), StatusCode::PARSE_ERROR,
                           "spec.toml:1:8: unknown base preset 'tpu'"));
}

TEST(SpecErrors, SyntaxErrorCarriesFileLineAndColumn) {
    auto r = parse_device_spec("base = \"edge\"\n[aicore\ncount = 2\n", "spec.toml");
    EXPECT_TRUE(fails_with(r, StatusCode::PARSE_ERROR, "spec.toml:2:"));
    // The message starts with the location: file:line:col: description.
    if (!r.ok()) {
        EXPECT_EQ(r.status().message().rfind("spec.toml:2:", 0), 0u) << r.status().message();
    }
}

TEST(SpecErrors, UnknownKeyIsReportedWithItsLineAndColumn) {
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\n[aicore]\ncnt = 3\n", "spec.toml"),
                           StatusCode::PARSE_ERROR, "spec.toml:3:1: unknown key 'aicore.cnt'"));
    // Indented keys report their own column.
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\n[memory]\n  capacity_gib = 3\n", "spec.toml"),
                           StatusCode::PARSE_ERROR, "spec.toml:3:3: unknown key 'memory.capacity_gib'"));
}

TEST(SpecErrors, UnknownTableIsReported) {
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\n\n[gpu]\ncount = 3\n", "spec.toml"),
                           StatusCode::PARSE_ERROR, "unknown key 'gpu'"));
}

TEST(SpecErrors, WrongTypeIsReportedAtTheValue) {
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\n[aicore]\ncount = \"two\"\n", "spec.toml"),
                           StatusCode::PARSE_ERROR, "spec.toml:3:9: 'aicore.count' must be an integer"));
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\n[memory]\nbandwidth_gbps = \"fast\"\n", "spec.toml"),
                           StatusCode::PARSE_ERROR, "spec.toml:3:18: 'memory.bandwidth_gbps' must be a number"));
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\nname = 7\n", "spec.toml"), StatusCode::PARSE_ERROR,
                           "spec.toml:2:8: 'name' must be a string"));
}

TEST(SpecErrors, OutOfRangeValueIsReportedWithItsRange) {
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\n[aicore]\ncount = 0\n", "spec.toml"),
                           StatusCode::PARSE_ERROR, "spec.toml:3:9: 'aicore.count' = 0 is outside [1, 1024]"));
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\n[watchdog]\ntimeout_ms = -1.5\n", "spec.toml"),
                           StatusCode::PARSE_ERROR, "spec.toml:3:14: 'watchdog.timeout_ms' = -1.5 is outside"));
}

TEST(SpecErrors, MissingKeyWithoutBaseNamesTheKey) {
    std::string text = drop_line(edge_toml(), "latency_us");
    EXPECT_TRUE(fails_with(parse_device_spec(text, "spec.toml"), StatusCode::PARSE_ERROR,
                           "spec.toml: missing required key 'host_link.latency_us'"));
}

TEST(SpecErrors, EmptyFileWithoutBaseIsMissingEveryKeyStartingWithName) {
    EXPECT_TRUE(fails_with(parse_device_spec("", "empty.toml"), StatusCode::PARSE_ERROR,
                           "empty.toml: missing required key 'name'"));
}

TEST(SpecErrors, CrossFieldRulePageableFasterThanPinnedIsRejected) {
    auto r = parse_device_spec("base = \"edge\"\n[host_link]\npageable_bandwidth_gbps = 30.0\n", "spec.toml");
    EXPECT_TRUE(fails_with(r, StatusCode::PARSE_ERROR, "spec.toml: host_link.pageable_bandwidth_gbps exceeds"));
    // Equal bandwidths are allowed: the rule is strict.
    EXPECT_TRUE(parse_device_spec("base = \"edge\"\n[host_link]\npageable_bandwidth_gbps = 25.0\n", "spec.toml").ok());
}

TEST(SpecErrors, CrossFieldRuleAlignmentMustBeAPowerOfTwo) {
    EXPECT_TRUE(fails_with(parse_device_spec("base = \"edge\"\n[memory]\nalignment_bytes = 384\n", "spec.toml"),
                           StatusCode::PARSE_ERROR, "memory.alignment_bytes = 384 must be a power of two"));
}

TEST(SpecLoad, PathToATempFileLoadsAndAppliesTheBase) {
    TempDir dir;
    auto path = dir.write("mine.toml", "base = \"edge\"\nname = \"mine\"\n[aicore]\ncount = 4\n");
    auto s = load_device_spec(path.string());
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->name, "mine");
    EXPECT_EQ(s->aicore_count, 4);
    EXPECT_NEAR(s->peak_fp16_flops(), 2 * load_device_spec("edge")->peak_fp16_flops(), 1.0);
}

TEST(SpecLoad, ErrorsInAFileNameThePathLineAndColumn) {
    TempDir dir;
    auto path = dir.write("bad.toml", "base = \"edge\"\n[aicore]\ncount = 0\n");
    auto r = load_device_spec(path.string());
    EXPECT_TRUE(fails_with(r, StatusCode::PARSE_ERROR, path.string() + ":3:9: 'aicore.count' = 0"));
}

TEST(SpecLoad, MissingFileIsNotFoundNamingThePath) {
    auto path = (std::filesystem::temp_directory_path() / "loom_no_such_dir" / "none.toml").string();
    EXPECT_TRUE(fails_with(load_device_spec(path), StatusCode::NOT_FOUND, path + ": cannot open"));
    // A bare name ending in .toml is a path, not a preset name.
    EXPECT_TRUE(fails_with(load_device_spec("no_such_spec.toml"), StatusCode::NOT_FOUND, "no_such_spec.toml"));
}

TEST(SpecJson, GroupsFieldsByTableAndAddsDerivedFigures) {
    auto s = load_device_spec("edge");
    ASSERT_TRUE(s.ok());
    nlohmann::json j = s->to_json();
    EXPECT_EQ(j["aicore"]["count"], 2);
    EXPECT_EQ(j["aicore"]["mte"]["gm_to_l1"], 64);
    EXPECT_EQ(j["memory"]["capacity_mib"], 8192);
    EXPECT_NEAR(j["derived"]["peak_fp16_tflops"].get<double>(), s->peak_fp16_flops() / 1e12, 1e-9);
}

}  // namespace

}  // namespace test_spec
