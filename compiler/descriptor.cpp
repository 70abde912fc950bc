#include "compiler/descriptor.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "common/file.hpp"
#include "common/json.hpp"
#include "compiler/graph.hpp"
#include "compiler/ops.hpp"
#include "compiler/passes.hpp"

namespace loom::compiler {

namespace {

template <typename E, size_t N>
std::optional<E> enum_from_name(std::string_view s, const std::array<std::pair<E, std::string_view>, N>& table) {
    for (const auto& [e, name] : table)
        if (name == s) return e;
    return std::nullopt;
}
template <typename E, size_t N>
std::string_view enum_name(E e, const std::array<std::pair<E, std::string_view>, N>& table) {
    for (const auto& [v, name] : table)
        if (v == e) return name;
    return "?";
}
template <typename E, size_t N>
std::string enum_names(const std::array<std::pair<E, std::string_view>, N>& table) {
    std::string out;
    for (const auto& [e, name] : table) out += (out.empty() ? "" : ", ") + std::string(name);
    return out;
}

constexpr std::array<std::pair<ModelFamily, std::string_view>, 5> kFamilies{{{ModelFamily::REAL_ESRGAN, "real-esrgan"},
                                                                              {ModelFamily::REAL_CUGAN, "real-cugan"},
                                                                              {ModelFamily::WAIFU2X_CUNET, "waifu2x-cunet"},
                                                                              {ModelFamily::WAIFU2X_UPCONV7, "waifu2x-upconv7"},
                                                                              {ModelFamily::CUSTOM, "custom"}}};
constexpr std::array<std::pair<BorderMode, std::string_view>, 3> kBorders{
    {{BorderMode::REPLICATE, "replicate"}, {BorderMode::REFLECT, "reflect"}, {BorderMode::ZERO, "zero"}}};
constexpr std::array<std::pair<ResidualMode, std::string_view>, 2> kResiduals{
    {{ResidualMode::NONE, "none"}, {ResidualMode::NEAREST, "nearest"}}};
constexpr std::array<std::pair<PixelOrder, std::string_view>, 2> kOrders{{{PixelOrder::RGB, "rgb"}, {PixelOrder::BGR, "bgr"}}};

int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Types `g` for `dims` at its input `name`, folding what that makes constant (ncnn's Crop to a
// reference blob and Interp by a factor compute sizes with Shape ops).
Status static_shapes(Graph& g, const std::string& name, const std::vector<int64_t>& dims) {
    LOOM_TRY(set_input_shapes(g, {{name, dims}}));
    LOOM_TRY(infer_shapes(g));
    LOOM_TRY(fold_constants(g).status());
    return infer_shapes(g);
}

// The first output's H and W when the input is 1 x C x n x n; nullopt when shapes fail.
std::optional<std::pair<int64_t, int64_t>> probe_output(const Graph& g, int64_t n) {
    Graph probe = g;
    const Value& in = probe.value(probe.inputs[0]);
    if (in.shape.size() != 4 || !in.shape[1].known()) return std::nullopt;
    const std::vector<int64_t> dims{1, in.shape[1].value, n, n};
    if (!static_shapes(probe, in.name, dims).ok()) return std::nullopt;
    const Value& out = probe.value(probe.outputs[0]);
    if (!out.typed || out.shape.size() != 4 || !shape_static(out.shape)) return std::nullopt;
    return std::pair{out.shape[2].value, out.shape[3].value};
}

// The noise level the file name states (the only place it is written): waifu2x "noiseN_...",
// Real-CUGAN "denoiseNx", "no-denoise" (0) and "conservative" (-1).
int64_t noise_from_name(const std::string& model_path) {
    const std::string stem = std::filesystem::path(model_path).stem().string();
    if (stem.find("no-denoise") != std::string::npos) return 0;
    if (stem.find("conservative") != std::string::npos) return -1;
    for (std::string_view key : {"denoise", "noise"}) {
        const size_t at = stem.find(key);
        if (at != std::string::npos && at + key.size() < stem.size()) {
            const char c = stem[at + key.size()];
            if (c >= '0' && c <= '9') return c - '0';
        }
    }
    return -1;
}

std::string where_of(std::string_view source, const toml::source_region& r) {
    return fmt::format("{}:{}:{}", source, r.begin.line, r.begin.column);
}

}  // namespace

std::string_view model_family_name(ModelFamily f) { return enum_name(f, kFamilies); }
std::string_view border_mode_name(BorderMode b) { return enum_name(b, kBorders); }
std::string_view residual_mode_name(ResidualMode r) { return enum_name(r, kResiduals); }
std::string_view pixel_order_name(PixelOrder o) { return enum_name(o, kOrders); }

FramePadding frame_padding(const ModelDescriptor& d, int64_t h, int64_t w) {
    return {d.prepad, d.prepad, d.prepad + round_up(h, d.align) - h, d.prepad + round_up(w, d.align) - w};
}

Status validate_descriptor(const ModelDescriptor& d, std::string_view where) {
    auto range = [&](std::string_view field, int64_t v, int64_t lo, int64_t hi) -> Status {
        if (v >= lo && v <= hi) return {};
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: field '{}': {} is out of range ({}..{})", where, field, v, lo,
                          hi);
    };
    LOOM_TRY(range("scale", d.scale, 1, kDescriptorScaleMax));
    LOOM_TRY(range("noise", d.noise, -1, 3));
    LOOM_TRY(range("prepad", d.prepad, 0, kDescriptorPadMax));
    LOOM_TRY(range("align", d.align, 1, kDescriptorAlignMax));
    LOOM_TRY(range("crop", d.crop, 0, kDescriptorCropMax));
    for (const auto& [field, lo, hi] : {std::tuple{"input_range", d.input_min, d.input_max},
                                        std::tuple{"output_range", d.output_min, d.output_max}})
        if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi) || std::abs(lo) > 1e6 || std::abs(hi) > 1e6)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: field '{}': [{}, {}] is not a range (finite, |v| <= 1e6, min < max)", where, field, lo,
                              hi);
    return {};
}

std::string descriptor_summary(const ModelDescriptor& d) {
    return fmt::format("{} x{} noise {}: pad {} {}, align {}, crop {}{}, {} [{:g},{:g}] -> [{:g},{:g}]",
                       model_family_name(d.family), d.scale, d.noise, d.prepad, border_mode_name(d.border), d.align,
                       d.crop, d.residual == ResidualMode::NEAREST ? ", + nearest input" : "", pixel_order_name(d.order),
                       d.input_min, d.input_max, d.output_min, d.output_max);
}

nlohmann::json descriptor_json(const ModelDescriptor& d) {
    return {{"family", std::string(model_family_name(d.family))},
            {"described_by", d.described_by},
            {"scale", d.scale},
            {"noise", d.noise},
            {"prepad", d.prepad},
            {"border", std::string(border_mode_name(d.border))},
            {"align", d.align},
            {"crop", d.crop},
            {"residual", std::string(residual_mode_name(d.residual))},
            {"channel_order", std::string(pixel_order_name(d.order))},
            {"input_range", {d.input_min, d.input_max}},
            {"output_range", {d.output_min, d.output_max}},
            {"applied", d.applied}};
}

Result<ModelDescriptor> descriptor_from_json(const nlohmann::json& j, std::string_view where) {
    ModelDescriptor d;
    try {
        auto named = [&](const char* field, auto& out, const auto& table) -> Status {
            const std::string s = j.at(field).get<std::string>();
            const auto e = enum_from_name(s, table);
            if (!e)
                return make_error(StatusCode::PARSE_ERROR, "{}: descriptor field '{}': unknown value '{}' ({})", where,
                                  field, s, enum_names(table));
            out = *e;
            return {};
        };
        LOOM_TRY(named("family", d.family, kFamilies));
        LOOM_TRY(named("border", d.border, kBorders));
        LOOM_TRY(named("residual", d.residual, kResiduals));
        LOOM_TRY(named("channel_order", d.order, kOrders));
        d.described_by = j.at("described_by").get<std::string>();
        d.scale = json_int(j.at("scale"));
        d.noise = json_int(j.at("noise"));
        d.prepad = json_int(j.at("prepad"));
        d.align = json_int(j.at("align"));
        d.crop = json_int(j.at("crop"));
        const auto in = j.at("input_range").get<std::array<double, 2>>();
        const auto out = j.at("output_range").get<std::array<double, 2>>();
        d.input_min = in[0], d.input_max = in[1], d.output_min = out[0], d.output_max = out[1];
        d.applied = j.at("applied").get<bool>();
    } catch (const std::exception& e) {
        return make_error(StatusCode::PARSE_ERROR, "{}: malformed descriptor: {}", where, e.what());
    }
    if (Status st = validate_descriptor(d, where); !st.ok()) return Status(StatusCode::PARSE_ERROR, st.message());
    return d;
}

Result<ModelDescriptor> parse_descriptor_toml(std::string_view text, std::string_view source) {
    toml::table root;
    try {
        root = toml::parse(text, source);
    } catch (const toml::parse_error& e) {
        return make_error(StatusCode::PARSE_ERROR, "{}: {}", where_of(source, e.source()), e.description());
    }
    static const std::set<std::string_view> kKnown{"family", "scale",    "noise",         "prepad",      "border",
                                                   "align",  "crop",     "residual",      "channel_order", "input_range",
                                                   "output_range"};
    const std::string known = fmt::format("{}", fmt::join(kKnown, ", "));
    for (const auto& [k, v] : root)
        if (k.str() != "model")
            return make_error(StatusCode::PARSE_ERROR, "{}: unknown table or key '{}' (a descriptor has [model])",
                              where_of(source, k.source()), k.str());
    const toml::table* m = root["model"].as_table();
    if (!m) return make_error(StatusCode::PARSE_ERROR, "{}:1:1: no [model] table", source);
    for (const auto& [k, v] : *m)
        if (!kKnown.count(k.str()))
            return make_error(StatusCode::PARSE_ERROR, "{}: field '{}': unknown (known: {})", where_of(source, k.source()),
                              k.str(), known);
    ModelDescriptor d;
    d.described_by = std::string(source);
    auto at = [&](const toml::node& n) { return where_of(source, n.source()); };
    auto integer = [&](const char* field, int64_t& out, int64_t lo, int64_t hi, bool required) -> Status {
        const toml::node* n = m->get(field);
        if (!n) {
            if (required)
                return make_error(StatusCode::PARSE_ERROR, "{}: field '{}': required", where_of(source, m->source()),
                                  field);
            return {};
        }
        if (!n->is_integer())
            return make_error(StatusCode::PARSE_ERROR, "{}: field '{}': expected an integer", at(*n), field);
        const int64_t v = n->as_integer()->get();
        if (v < lo || v > hi)
            return make_error(StatusCode::PARSE_ERROR, "{}: field '{}': {} is out of range ({}..{})", at(*n), field, v,
                              lo, hi);
        out = v;
        return {};
    };
    auto named = [&](const char* field, auto& out, const auto& table) -> Status {
        const toml::node* n = m->get(field);
        if (!n) return {};
        if (!n->is_string())
            return make_error(StatusCode::PARSE_ERROR, "{}: field '{}': expected a string ({})", at(*n), field,
                              enum_names(table));
        const std::string s = n->as_string()->get();
        const auto e = enum_from_name(s, table);
        if (!e)
            return make_error(StatusCode::PARSE_ERROR, "{}: field '{}': unknown value '{}' ({})", at(*n), field, s,
                              enum_names(table));
        out = *e;
        return {};
    };
    auto range = [&](const char* field, double& lo, double& hi) -> Status {
        const toml::node* n = m->get(field);
        if (!n) return {};
        const toml::array* a = n->as_array();
        if (!a || a->size() != 2 || !(*a)[0].is_number() || !(*a)[1].is_number())
            return make_error(StatusCode::PARSE_ERROR, "{}: field '{}': expected [min, max] (two numbers)", at(*n), field);
        lo = (*a)[0].value<double>().value_or(0);
        hi = (*a)[1].value<double>().value_or(0);
        if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi) || std::abs(lo) > 1e6 || std::abs(hi) > 1e6)
            return make_error(StatusCode::PARSE_ERROR, "{}: field '{}': [{}, {}] is not a range (finite, min < max)",
                              at(*n), field, lo, hi);
        return {};
    };
    LOOM_TRY(named("family", d.family, kFamilies));
    LOOM_TRY(integer("scale", d.scale, 1, kDescriptorScaleMax, true));
    LOOM_TRY(integer("noise", d.noise, -1, 3, false));
    LOOM_TRY(integer("prepad", d.prepad, 0, kDescriptorPadMax, false));
    LOOM_TRY(named("border", d.border, kBorders));
    LOOM_TRY(integer("align", d.align, 1, kDescriptorAlignMax, false));
    LOOM_TRY(integer("crop", d.crop, 0, kDescriptorCropMax, false));
    LOOM_TRY(named("residual", d.residual, kResiduals));
    LOOM_TRY(named("channel_order", d.order, kOrders));
    LOOM_TRY(range("input_range", d.input_min, d.input_max));
    LOOM_TRY(range("output_range", d.output_min, d.output_max));
    if (Status st = validate_descriptor(d, source); !st.ok()) return Status(StatusCode::PARSE_ERROR, st.message());
    return d;
}

std::string descriptor_sidecar_path(const std::string& model_path) {
    std::filesystem::path p(model_path);
    p.replace_extension(".toml");
    return p.string();
}

std::optional<ModelDescriptor> recognise_model(const Graph& g, const std::string& model_path, std::string* why) {
    auto no = [&](std::string reason) -> std::optional<ModelDescriptor> {
        if (why) *why = std::move(reason);
        return std::nullopt;
    };
    if (g.inputs.size() != 1 || g.outputs.size() != 1) return no("not one input and one output");
    const std::string in_name = g.value(g.inputs[0]).name, out_name = g.value(g.outputs[0]).name;
    bool global_pool = false, transposed = false;
    for (const Node& n : g.nodes) {
        global_pool |= n.op == "GlobalAveragePool";
        transposed |= n.op == "ConvTranspose";
    }
    // out(n) = scale * n - consumed, from two frame sizes whose padded forms every family takes.
    const int64_t n1 = 96, n2 = 128;
    const auto o1 = probe_output(g, n1), o2 = probe_output(g, n2);
    if (!o1 || !o2) return no("its shapes do not follow from a square frame");
    if (o1->first != o1->second || o2->first != o2->second) return no("it does not treat H and W alike");
    const int64_t d = o2->first - o1->first;
    if (d <= 0 || d % (n2 - n1) != 0) return no("its output is not a whole multiple of its input");
    ModelDescriptor m;
    m.scale = d / (n2 - n1);
    const int64_t consumed = m.scale * n1 - o1->first;
    m.noise = noise_from_name(model_path);
    auto structure = [&] {
        return fmt::format("x{}, consumes {} output pixels{}{}, blobs '{}' -> '{}'", m.scale, consumed,
                           global_pool ? ", squeeze-and-excitation" : "", transposed ? ", transposed convs" : "", in_name,
                           out_name);
    };
    if (global_pool && transposed && in_name == "in0" && out_name == "out0" && m.scale >= 2 && m.scale <= 4) {
        // realcugan-ncnn-vulkan (main.cpp, realcugan.cpp process_cpu): 18 / 14 / 19 pixels by
        // scale, reflected; tiles rounded up to 2 (x2, x4) or 4 (x3); the output's top-left
        // s*H x s*W; x4 adds the input upscaled by nearest.
        m.family = ModelFamily::REAL_CUGAN;
        m.prepad = m.scale == 2 ? 18 : m.scale == 3 ? 14 : 19;
        m.border = BorderMode::REFLECT;
        m.align = m.scale == 3 ? 4 : 2;
        m.residual = m.scale == 4 ? ResidualMode::NEAREST : ResidualMode::NONE;
        if (consumed > 2 * m.scale * m.prepad) return no("a Real-CUGAN network that consumes more than its padding");
    } else if (global_pool && transposed && in_name == "Input1" && out_name == "Eltwise4" &&
               (m.scale == 1 || m.scale == 2)) {
        // waifu2x-ncnn-vulkan (main.cpp, waifu2x.cpp): CUnet 28 pixels at x1, 18 at x2,
        // replicated; tiles rounded up to 4 (x1) or 2 (x2); the network consumes the padding.
        m.family = ModelFamily::WAIFU2X_CUNET;
        m.prepad = m.scale == 1 ? 28 : 18;
        m.align = m.scale == 1 ? 4 : 2;
        if (consumed != 2 * m.scale * m.prepad) return no("a CUnet network that does not consume its padding exactly");
    } else if (!global_pool && transposed && in_name == "Input1" && (m.scale == 1 || m.scale == 2)) {
        // waifu2x-ncnn-vulkan: UpConv7 7 pixels, replicated, consumed by its unpadded convs.
        m.family = ModelFamily::WAIFU2X_UPCONV7;
        m.prepad = 7;
        m.align = m.scale == 1 ? 4 : 2;
        if (consumed != 2 * m.scale * m.prepad) return no("an UpConv7 network that does not consume its padding exactly");
    } else if (!global_pool && consumed == 0 && in_name == "data" && out_name == "output") {
        // realesrgan-ncnn-vulkan (main.cpp, realesrgan.cpp): 10 pixels, reflected, the output
        // cut at 10 * scale.
        m.family = ModelFamily::REAL_ESRGAN;
        m.prepad = 10;
        m.border = BorderMode::REFLECT;
        m.crop = 10 * m.scale;
    } else {
        return no("not a known family (" + structure() + ")");
    }
    m.described_by = "recognised: " + structure();
    if (!validate_descriptor(m, model_path).ok()) return no("descriptor out of range");
    return m;
}

Result<std::optional<ModelDescriptor>> describe_model(const Graph& g, const std::string& model_path) {
    const std::string sidecar = descriptor_sidecar_path(model_path);
    std::error_code ec;
    if (sidecar != model_path && std::filesystem::exists(sidecar, ec)) {
        LOOM_ASSIGN_OR_RETURN(std::string text, read_file(sidecar, 1 << 20));
        LOOM_ASSIGN_OR_RETURN(ModelDescriptor d, parse_descriptor_toml(text, sidecar));
        return std::optional<ModelDescriptor>(std::move(d));
    }
    return recognise_model(g, model_path);
}

Status apply_descriptor(Graph& g, int64_t h, int64_t w) {
    LOOM_ASSERT(g.descriptor.has_value());
    ModelDescriptor& d = *g.descriptor;
    if (d.applied) return make_error(StatusCode::INVALID_ARGUMENT, "{}: the descriptor is already applied", g.source);
    if (g.inputs.size() != 1 || g.outputs.size() != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: a descriptor applies to one input and one output", g.source);
    if (h <= 0 || w <= 0 || h > (int64_t{1} << 20) || w > (int64_t{1} << 20))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: frame {}x{} out of range", g.source, w, h);
    const FramePadding p = frame_padding(d, h, w);
    if (d.border == BorderMode::REFLECT && (std::max(p.top, p.bottom) >= h || std::max(p.left, p.right) >= w))
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: a {}x{} frame is too small for the model's reflected padding ({} pixels; frames of at "
                          "least {}x{})",
                          g.source, w, h, d.prepad, std::max(p.left, p.right) + 1, std::max(p.top, p.bottom) + 1);
    const int net_in = g.inputs[0], net_out = g.outputs[0];
    Value& in = g.value(net_in);
    if (in.shape.size() != 4 || !in.shape[1].known())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: input '{}' is {}, a descriptor applies to 1xCxHxW", g.source,
                          in.name, shape_str(in.shape));
    const int64_t c = in.shape[1].value;
    const std::string in_name = in.name, out_name = g.value(net_out).name;
    const Value frame_type = in;
    g.value(net_in).name = g.unique_name(in_name + ".padded");
    g.value(net_out).name = g.unique_name(out_name + ".network");
    g.reindex();
    const int frame = g.add_value(in_name);
    {
        Value& f = g.value(frame);
        f.dtype = frame_type.dtype;
        f.shape = frame_type.shape;
        f.typed = frame_type.typed;
    }
    auto i64 = [&](std::string_view what, std::vector<int64_t> v) {
        HostTensor t(DType::I64, {static_cast<int64_t>(v.size())});
        std::copy(v.begin(), v.end(), t.as<int64_t>());
        return g.add_constant(g.unique_name(fmt::format("descriptor.{}", what)), std::move(t));
    };
    const char* mode = d.border == BorderMode::REPLICATE ? "edge" : d.border == BorderMode::REFLECT ? "reflect" : "constant";
    Node pad;
    pad.op = "Pad";
    pad.name = g.unique_name("descriptor.pad");
    pad.inputs = {frame, i64("pads", {0, 0, p.top, p.left, 0, 0, p.bottom, p.right})};
    pad.outputs = {net_in};
    pad.attrs.set("mode", std::string(mode));
    g.nodes.insert(g.nodes.begin(), std::move(pad));

    const int64_t s = d.scale;
    const int cut = d.residual == ResidualMode::NONE ? g.add_value(out_name) : g.add_value(g.unique_name(out_name + ".cut"));
    Node slice;
    slice.op = "Slice";
    slice.name = g.unique_name("descriptor.crop");
    slice.inputs = {net_out, i64("crop_starts", {d.crop, d.crop}), i64("crop_ends", {d.crop + s * h, d.crop + s * w}),
                    i64("crop_axes", {2, 3})};
    slice.outputs = {cut};
    g.nodes.push_back(std::move(slice));
    int result = cut;
    if (d.residual == ResidualMode::NEAREST) {
        HostTensor scales(DType::F32, {4});
        float* sc = scales.as<float>();
        sc[0] = sc[1] = 1.f;
        sc[2] = sc[3] = static_cast<float>(s);
        const int scales_id = g.add_constant(g.unique_name("descriptor.residual_scales"), std::move(scales));
        const int up = g.add_value(g.unique_name(out_name + ".nearest"));
        Node resize;
        resize.op = "Resize";
        resize.name = g.unique_name("descriptor.residual_up");
        resize.inputs = {frame, -1, scales_id};
        resize.outputs = {up};
        resize.attrs.set("mode", std::string("nearest"))
            .set("coordinate_transformation_mode", std::string("asymmetric"))
            .set("nearest_mode", std::string("floor"));
        g.nodes.push_back(std::move(resize));
        result = g.add_value(out_name);
        Node add;
        add.op = "Add";
        add.name = g.unique_name("descriptor.residual_add");
        add.inputs = {cut, up};
        add.outputs = {result};
        g.nodes.push_back(std::move(add));
    }
    g.inputs = {frame};
    g.outputs = {result};
    LOOM_TRY(g.topo_sort());
    d.applied = true;

    // ONNX Slice clamps ends silently: check that the network's output covers the crop.
    Graph probe = g;
    LOOM_TRY(static_shapes(probe, in_name, {1, c, h, w})
                 .with_context(fmt::format("{}: the network on the padded {}x{} frame", g.source, w, h)));
    const Shape& net_shape = probe.value(probe.find_value(g.value(net_out).name)).shape;
    if (net_shape.size() != 4 || !shape_static(net_shape) || net_shape[2].value < d.crop + s * h ||
        net_shape[3].value < d.crop + s * w)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: the network gives {} for the padded {}x{} frame; the descriptor ({}) keeps {}x{} from "
                          "({}, {})",
                          g.source, shape_str(net_shape), w + p.left + p.right, h + p.top + p.bottom, d.described_by,
                          s * w, s * h, d.crop, d.crop);
    return {};
}

}  // namespace loom::compiler
