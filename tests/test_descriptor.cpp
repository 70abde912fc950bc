// Model descriptors (compiler/descriptor.hpp): the sidecar's validation names file:line:col and
// the field; the descriptor survives JSON and the .loom file; apply_descriptor's graph (pad,
// network, crop, residual) equals the host's padding, the bare network and the host's crop; the
// executor's tiled restore equals the untiled one bit for bit; the 29 models of waifu2x@1.6.5
// are recognised with their programs' figures (when scripts/fetch-models has run).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/file.hpp"
#include "compiler/compile.hpp"
#include "compiler/descriptor.hpp"
#include "compiler/import.hpp"
#include "compiler/model_file.hpp"
#include "executor/executor.hpp"
#include "executor/tiled.hpp"
#include "tests/run_util.hpp"
#include "tests/test_util.hpp"

namespace loom::test_descriptor {  // apart from the rest of its unity batch
namespace {

using compiler::BorderMode;
using compiler::HostTensor;
using compiler::ModelDescriptor;
using compiler::ModelFamily;
using compiler::ResidualMode;

constexpr const char* kSidecar = R"([model]
family = "custom"
scale = 2
noise = 1
prepad = 7
border = "reflect"
align = 4
crop = 3
residual = "nearest"
channel_order = "bgr"
input_range = [0.0, 255.0]
output_range = [-1.0, 1.0]
)";

TEST(DescriptorSidecar, EveryFieldIsRead) {
    auto d = compiler::parse_descriptor_toml(kSidecar, "m.toml");
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->family, ModelFamily::CUSTOM);
    EXPECT_EQ(d->scale, 2);
    EXPECT_EQ(d->noise, 1);
    EXPECT_EQ(d->prepad, 7);
    EXPECT_EQ(d->border, BorderMode::REFLECT);
    EXPECT_EQ(d->align, 4);
    EXPECT_EQ(d->crop, 3);
    EXPECT_EQ(d->residual, ResidualMode::NEAREST);
    EXPECT_EQ(d->order, compiler::PixelOrder::BGR);
    EXPECT_EQ(d->input_max, 255.0);
    EXPECT_EQ(d->output_min, -1.0);
    EXPECT_EQ(d->described_by, "m.toml");
    EXPECT_FALSE(d->applied);
    // Only scale is required; the rest default to a plain upscaler.
    auto minimal = compiler::parse_descriptor_toml("[model]\nscale = 3\n", "m.toml");
    ASSERT_TRUE(minimal.ok()) << minimal.status().to_string();
    EXPECT_EQ(minimal->scale, 3);
    EXPECT_EQ(minimal->prepad, 0);
    EXPECT_EQ(minimal->align, 1);
}

TEST(DescriptorSidecar, MistakesNameFileLineColumnAndField) {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"[model]\nscale = 2\nscle = 3\n", "m.toml:3:1: field 'scle': unknown (known: "},
        {"[model]\nscale = \"2\"\n", "m.toml:2:9: field 'scale': expected an integer"},
        {"[model]\nscale = 2\nprepad = -1\n", "m.toml:3:10: field 'prepad': -1 is out of range (0..1024)"},
        {"[model]\nscale = 17\n", "m.toml:2:9: field 'scale': 17 is out of range (1..16)"},
        {"[model]\nscale = 2\nborder = \"mirror\"\n",
         "m.toml:3:10: field 'border': unknown value 'mirror' (replicate, reflect, zero)"},
        {"[model]\nscale = 2\ninput_range = [1.0, 0.0]\n", "m.toml:3:15: field 'input_range': [1, 0] is not a range"},
        {"[model]\nscale = 2\noutput_range = [0.0]\n", "m.toml:3:16: field 'output_range': expected [min, max]"},
        {"[model]\nnoise = 1\n", "m.toml:1:1: field 'scale': required"},
        {"scale = 2\n", "m.toml:1:1: unknown table or key 'scale'"},
        {"[model]\nscale = 2\nresidual = 1\n", "m.toml:3:12: field 'residual': expected a string"},
        {"[model\nscale = 2\n", "m.toml:1:"},
    };
    for (const auto& [text, want] : cases) {
        auto d = compiler::parse_descriptor_toml(text, "m.toml");
        ASSERT_FALSE(d.ok()) << text;
        EXPECT_NE(d.status().message().find(want), std::string::npos) << d.status().message() << "\nwanted: " << want;
    }
}

TEST(DescriptorSidecar, BesideTheModelItWinsOverRecognition) {
    test::TempDir dir;
    const std::string model = dir.file("net.onnx");
    EXPECT_EQ(compiler::descriptor_sidecar_path(model), dir.file("net.toml"));
    EXPECT_EQ(compiler::descriptor_sidecar_path(dir.file("a/up2x.param")), dir.file("a/up2x.toml"));
    test::GraphBuilder b;
    b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
    b.node("Relu", {"x"}, {"y"});
    b.output("y");
    auto none = compiler::describe_model(b.g, model);
    ASSERT_TRUE(none.ok()) << none.status().to_string();
    EXPECT_FALSE(none->has_value());  // not a known family, no sidecar
    std::ofstream(dir.file("net.toml")) << "[model]\nscale = 1\nprepad = 2\nborder = \"zero\"\n";
    auto given = compiler::describe_model(b.g, model);
    ASSERT_TRUE(given.ok()) << given.status().to_string();
    ASSERT_TRUE(given->has_value());
    EXPECT_EQ((*given)->prepad, 2);
    EXPECT_EQ((*given)->border, BorderMode::ZERO);
    std::ofstream(dir.file("net.toml")) << "[model]\nscale = 0\n";
    auto bad = compiler::describe_model(b.g, model);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find(dir.file("net.toml") + ":2:9: field 'scale'"), std::string::npos)
        << bad.status().message();
}

TEST(Descriptor, JsonRoundTripAndRefusals) {
    auto d = compiler::parse_descriptor_toml(kSidecar, "m.toml");
    ASSERT_TRUE(d.ok());
    d->applied = true;
    auto back = compiler::descriptor_from_json(compiler::descriptor_json(*d), "f.loom");
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, *d);
    nlohmann::json j = compiler::descriptor_json(*d);
    j["border"] = "mirror";
    auto bad = compiler::descriptor_from_json(j, "f.loom");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("f.loom: descriptor field 'border': unknown value 'mirror'"),
              std::string::npos)
        << bad.status().message();
    j = compiler::descriptor_json(*d);
    j["align"] = 0;
    bad = compiler::descriptor_from_json(j, "f.loom");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("field 'align': 0 is out of range"), std::string::npos)
        << bad.status().message();
    j = compiler::descriptor_json(*d);
    j.erase("crop");
    EXPECT_FALSE(compiler::descriptor_from_json(j, "f.loom").ok());
}

TEST(Descriptor, FramePaddingRoundsUpToTheAlignment) {
    ModelDescriptor d;
    d.prepad = 18;
    d.align = 4;
    const compiler::FramePadding p = compiler::frame_padding(d, 21, 32);
    EXPECT_EQ(p.top, 18);
    EXPECT_EQ(p.left, 18);
    EXPECT_EQ(p.bottom, 18 + 3);
    EXPECT_EQ(p.right, 18);
}

// A small SR network: 3x3 convs (zero-padded), PixelShuffle by s; H and W symbolic.
compiler::Graph sr_net(int64_t s, ModelDescriptor d) {
    test::GraphBuilder b;
    b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
    b.random_f32("w0", {8, 3, 3, 3}, 11, -0.5f, 0.5f);
    b.random_f32("w1", {3 * s * s, 8, 3, 3}, 12, -0.5f, 0.5f);
    const device::KernelAttrs pad1{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    b.node("Conv", {"x", "w0"}, {"c0"}, pad1);
    b.node("Relu", {"c0"}, {"r0"});
    b.node("Conv", {"r0", "w1"}, {"c1"}, pad1);
    b.node("DepthToSpace", {"c1"}, {"y"}, {{"blocksize", s}, {"mode", std::string("CRD")}});
    b.output("y");
    b.g.source = "sr_net";
    EXPECT_TRUE(b.g.topo_sort().ok());
    d.scale = s;
    b.g.descriptor = d;
    return std::move(b.g);
}

void expect_equal(const HostTensor& a, const HostTensor& b, const std::string& what) {
    ASSERT_EQ(a.dims(), b.dims()) << what;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << what;
}

// The wrapped graph equals the host's pad, the bare network on the padded frame and the host's
// crop and residual; every border mode, alignment, crop and residual; a tiled restore equals it.
TEST(Descriptor, AppliedGraphEqualsPadNetworkCropAndTilesEqualIt) {
    auto dev = test::make_device();
    for (BorderMode border : {BorderMode::REPLICATE, BorderMode::REFLECT, BorderMode::ZERO})
        for (auto [s, align, crop, residual] :
             {std::tuple<int64_t, int64_t, int64_t, ResidualMode>{2, 1, 0, ResidualMode::NONE},
              {2, 4, 6, ResidualMode::NEAREST},
              {3, 2, 3, ResidualMode::NONE}}) {
            ModelDescriptor d;
            d.prepad = 5;
            d.border = border;
            d.align = align;
            d.crop = crop;
            d.residual = residual;
            const compiler::Graph net = sr_net(s, d);
            d = *net.descriptor;  // with its scale
            const int64_t h = 29, w = 38;
            const HostTensor x = test::random_host_f32({1, 3, h, w}, static_cast<uint32_t>(s * 7 + align));
            const std::string what = fmt::format("{} x{} align {} crop {} residual {}",
                                                 compiler::border_mode_name(border), s, align, crop,
                                                 compiler::residual_mode_name(residual));
            // Host form: pad, the bare network, crop and residual.
            const HostTensor padded = executor::pad_frame(x, d, compiler::frame_padding(d, h, w));
            EXPECT_EQ(padded.dims()[2], h + 10 + (-h % align + align) % align) << what;
            // Into a buffer that held something else (the tiled runner reuses one per frame):
            // every element written, the same tensor.
            HostTensor reused = test::random_host_f32(padded.dims(), 99);
            const void* buffer = reused.data();
            executor::pad_frame(x, d, compiler::frame_padding(d, h, w), reused);
            EXPECT_EQ(reused.data(), buffer) << what;
            expect_equal(reused, padded, what + ": padded into a used buffer");
            compiler::Graph bare = net;
            bare.descriptor.reset();
            const HostTensor want = executor::finish_restore(test::run_compiled(bare, padded, *dev), x, d);
            ASSERT_EQ(want.dims(), (std::vector<int64_t>{1, 3, s * h, s * w})) << what;
            // Graph form.
            compiler::Graph wrapped = net;
            ASSERT_TRUE(compiler::apply_descriptor(wrapped, h, w).ok()) << what;
            EXPECT_TRUE(wrapped.descriptor->applied);
            EXPECT_EQ(wrapped.value(wrapped.inputs[0]).name, "x");
            EXPECT_EQ(wrapped.value(wrapped.outputs[0]).name, "y");
            const HostTensor got = test::run_compiled(wrapped, x, *dev);
            expect_equal(got, want, what + ": applied graph vs host");
            EXPECT_FALSE(compiler::apply_descriptor(wrapped, h, w).ok()) << "applied twice";
            // Tiled form (the bare network is tileable: zero-padded convs, pixel shuffle).
            executor::TiledOptions to;
            to.tile = 12;
            to.restore = true;
            auto runner = executor::TiledRunner::create(*dev, net, x.dims(), to);
            ASSERT_TRUE(runner.ok()) << runner.status().to_string();
            EXPECT_GT((*runner)->plan().tiles(), 1u);
            EXPECT_EQ((*runner)->output_dims().at(0), (std::vector<int64_t>{1, 3, s * h, s * w}));
            auto tiled = (*runner)->run(x);
            ASSERT_TRUE(tiled.ok()) << tiled.status().to_string();
            expect_equal(tiled->at(0), got, what + ": tiled vs untiled");
        }
}

TEST(Descriptor, ApplyRefusesWhatCannotWork) {
    ModelDescriptor d;
    d.prepad = 4;
    d.border = BorderMode::REFLECT;
    compiler::Graph g = sr_net(2, d);
    Status st = compiler::apply_descriptor(g, 4, 30);  // 4 rows cannot reflect 4 pixels
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("too small for the model's reflected padding"), std::string::npos) << st.message();
    d.border = BorderMode::ZERO;
    d.crop = 17;  // the network gives 2 x (h + 8) = 36 pixels; 17 + 2h is 37
    g = sr_net(2, d);
    st = compiler::apply_descriptor(g, 10, 10);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("the network gives 1x3x36x36"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("keeps 20x20 from (17, 17)"), std::string::npos) << st.message();
}

// The programs' figures, written out here from their sources (docs/compiler.md), for every
// model scripts/fetch-models fetches: recognition must find each family and these numbers.
TEST(DescriptorRecognition, The29ModelsOfWaifu2xPackageGetTheirProgramsFigures) {
    const std::filesystem::path root = default_models_dir();
    if (!std::filesystem::exists(root / "waifu2x-upconv7" / "scale2.0x_model.param"))
        GTEST_SKIP() << "the models are not in " << root << " (run scripts/fetch-models)";
    struct Want {
        ModelFamily family;
        int64_t scale, noise, prepad;
        BorderMode border;
        int64_t align, crop;
        ResidualMode residual;
    };
    const auto R = BorderMode::REFLECT, E = BorderMode::REPLICATE;
    const auto N = ResidualMode::NONE;
    std::map<std::string, Want> want{
        {"realesr-animevideov3/realesr-animevideov3-x2", {ModelFamily::REAL_ESRGAN, 2, -1, 10, R, 1, 20, N}},
        {"realesr-animevideov3/realesr-animevideov3-x3", {ModelFamily::REAL_ESRGAN, 3, -1, 10, R, 1, 30, N}},
        {"realesr-animevideov3/realesr-animevideov3-x4", {ModelFamily::REAL_ESRGAN, 4, -1, 10, R, 1, 40, N}},
        {"realesr-animevideov3/realesrgan-x4plus-anime", {ModelFamily::REAL_ESRGAN, 4, -1, 10, R, 1, 40, N}},
    };
    for (const char* n : {"conservative", "no-denoise", "denoise1x", "denoise2x", "denoise3x"}) {
        const std::string name(n);
        const int64_t noise = name == "conservative" ? -1 : name == "no-denoise" ? 0 : name[7] - '0';
        want[fmt::format("realcugan-se/up2x-{}", name)] = {ModelFamily::REAL_CUGAN, 2, noise, 18, R, 2, 0, N};
        if (noise == 1 || noise == 2) continue;  // x3 and x4 ship conservative, no-denoise, denoise3x
        want[fmt::format("realcugan-se/up3x-{}", name)] = {ModelFamily::REAL_CUGAN, 3, noise, 14, R, 4, 0, N};
        want[fmt::format("realcugan-se/up4x-{}", name)] = {ModelFamily::REAL_CUGAN, 4, noise, 19, R, 2, 0,
                                                            ResidualMode::NEAREST};
    }
    for (int64_t noise = 0; noise <= 3; ++noise) {
        want[fmt::format("waifu2x-cunet/noise{}_model", noise)] = {ModelFamily::WAIFU2X_CUNET, 1, noise, 28, E, 4, 0, N};
        want[fmt::format("waifu2x-cunet/noise{}_scale2.0x_model", noise)] = {ModelFamily::WAIFU2X_CUNET, 2, noise, 18,
                                                                              E, 2, 0, N};
        want[fmt::format("waifu2x-upconv7/noise{}_scale2.0x_model", noise)] = {ModelFamily::WAIFU2X_UPCONV7, 2, noise,
                                                                                7, E, 2, 0, N};
    }
    want["waifu2x-cunet/scale2.0x_model"] = {ModelFamily::WAIFU2X_CUNET, 2, -1, 18, E, 2, 0, N};
    want["waifu2x-upconv7/scale2.0x_model"] = {ModelFamily::WAIFU2X_UPCONV7, 2, -1, 7, E, 2, 0, N};
    ASSERT_EQ(want.size(), 29u);
    for (const auto& [name, w] : want) {
        const std::string path = (root / (name + ".param")).string();
        auto g = compiler::import_model(path);
        ASSERT_TRUE(g.ok()) << g.status().to_string();
        ASSERT_TRUE(g->descriptor.has_value()) << name;
        const ModelDescriptor& d = *g->descriptor;
        EXPECT_EQ(d.family, w.family) << name;
        EXPECT_EQ(d.scale, w.scale) << name;
        EXPECT_EQ(d.noise, w.noise) << name;
        EXPECT_EQ(d.prepad, w.prepad) << name;
        EXPECT_EQ(d.border, w.border) << name;
        EXPECT_EQ(d.align, w.align) << name;
        EXPECT_EQ(d.crop, w.crop) << name;
        EXPECT_EQ(d.residual, w.residual) << name;
        EXPECT_EQ(d.order, compiler::PixelOrder::RGB) << name;
        EXPECT_EQ(d.input_min, 0.0) << name;
        EXPECT_EQ(d.output_max, 1.0) << name;
        EXPECT_NE(d.described_by.find("recognised"), std::string::npos) << name;
        // Structure, not the file name: the same graph under another name is the same family.
        compiler::Graph renamed = *g;
        std::string why;
        auto again = compiler::recognise_model(renamed, "/elsewhere/model.param", &why);
        ASSERT_TRUE(again.has_value()) << name << ": " << why;
        EXPECT_EQ(again->family, w.family) << name;
        EXPECT_EQ(again->prepad, w.prepad) << name;
    }
}

}  // namespace
}  // namespace loom::test_descriptor
