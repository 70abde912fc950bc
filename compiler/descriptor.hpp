// The model descriptor: how a restoration model is run the way its own program runs it. The
// reference programs (waifu2x-ncnn-vulkan, realcugan-ncnn-vulkan, realesrgan-ncnn-vulkan) pad
// the frame before the network and cut the network's output after it; without that, a model's
// output is not scale x input (Real-CUGAN, CUnet and UpConv7 consume context at the borders)
// or its borders differ from what users know. The figures and their sources: docs/compiler.md
// ("Model descriptors").
//
// Per frame of H x W pixels, in the model's value range and channel order:
//   1. pad: prepad pixels on every side, plus, at the bottom and right, what brings H and W up
//      to multiples of `align` (the network's strided layers need it), filled by `border`;
//   2. run the network on the padded frame;
//   3. keep scale*H x scale*W pixels of its output from (crop, crop);
//   4. with residual NEAREST, add the (unpadded) frame upscaled by nearest neighbour.
// A descriptor comes from recognising a known family on import (by graph structure and the
// blob names its program extracts, see recognise_model), or from a TOML sidecar next to the
// model (MODEL.toml beside MODEL.param or MODEL.onnx), which wins when present.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.hpp"

namespace loom::compiler {

class Graph;

enum class ModelFamily : uint8_t { REAL_ESRGAN, REAL_CUGAN, WAIFU2X_CUNET, WAIFU2X_UPCONV7, CUSTOM };
// How the frame is extended by the pre-padding: REPLICATE repeats the edge pixel (waifu2x's
// BORDER_REPLICATE), REFLECT mirrors without repeating it (ncnn's BORDER_REFLECT, numpy's
// "reflect"), ZERO fills with 0.
enum class BorderMode : uint8_t { REPLICATE, REFLECT, ZERO };
enum class ResidualMode : uint8_t { NONE, NEAREST };
enum class PixelOrder : uint8_t { RGB, BGR };

inline constexpr int64_t kDescriptorScaleMax = 16;
inline constexpr int64_t kDescriptorPadMax = 1024;
inline constexpr int64_t kDescriptorAlignMax = 64;
inline constexpr int64_t kDescriptorCropMax = kDescriptorPadMax * kDescriptorScaleMax;

struct ModelDescriptor {
    ModelFamily family = ModelFamily::CUSTOM;
    std::string described_by;  // "recognised: ..." or the sidecar's path, for messages and listings
    int64_t scale = 1;         // output pixels per input pixel along H and W
    int64_t noise = -1;        // denoise level (0..3); -1: none (a plain upscaler, Real-CUGAN conservative)
    int64_t prepad = 0;        // input pixels added on each side before the network
    BorderMode border = BorderMode::REPLICATE;
    int64_t align = 1;         // H and W are padded at the bottom/right up to multiples of this
    int64_t crop = 0;          // output pixels skipped at the top and left of the network's output
    ResidualMode residual = ResidualMode::NONE;
    PixelOrder order = PixelOrder::RGB;
    double input_min = 0, input_max = 1;    // the values black and white take at the input
    double output_min = 0, output_max = 1;  // and at the output
    // The graph already pads, crops and adds the residual (apply_descriptor): its input is the
    // frame and its output scale x the frame.
    bool applied = false;

    bool operator==(const ModelDescriptor&) const = default;
};

std::string_view model_family_name(ModelFamily f);  // "real-esrgan", "real-cugan", "waifu2x-cunet", ...
std::string_view border_mode_name(BorderMode b);     // "replicate", "reflect", "zero"
std::string_view residual_mode_name(ResidualMode r);  // "none", "nearest"
std::string_view pixel_order_name(PixelOrder o);      // "rgb", "bgr"

// The padding a frame of `h` x `w` gets: top = left = prepad; bottom and right add what rounds
// h and w up to multiples of align.
struct FramePadding {
    int64_t top = 0, left = 0, bottom = 0, right = 0;
};
FramePadding frame_padding(const ModelDescriptor& d, int64_t h, int64_t w);

// Checks every field's range (scale 1..16, prepad 0..1024, align 1..64, crop 0..16384, noise
// -1..3, finite ranges with min < max); the message names the field and `where`.
Status validate_descriptor(const ModelDescriptor& d, std::string_view where);

// One line for listings: "real-cugan x2 noise -1: pad 18 reflect, align 2, crop 0, rgb [0,1] -> [0,1]".
std::string descriptor_summary(const ModelDescriptor& d);
nlohmann::json descriptor_json(const ModelDescriptor& d);
// Reads descriptor_json's form; errors name `where` and the field.
Result<ModelDescriptor> descriptor_from_json(const nlohmann::json& j, std::string_view where);

// Parses a sidecar's text (`source` names it in messages). Every mistake is refused as
// "file:line:col: field 'name': message": unknown keys (the known ones listed), wrong types,
// out-of-range values, unknown names.
//
//   [model]
//   family = "custom"            # optional: real-esrgan | real-cugan | waifu2x-cunet | waifu2x-upconv7 | custom
//   scale = 2                    # required
//   noise = -1
//   prepad = 7
//   border = "replicate"         # replicate | reflect | zero
//   align = 2
//   crop = 0
//   residual = "none"            # none | nearest
//   channel_order = "rgb"        # rgb | bgr
//   input_range = [0.0, 1.0]
//   output_range = [0.0, 1.0]
Result<ModelDescriptor> parse_descriptor_toml(std::string_view text, std::string_view source);
// The sidecar path of a model file: MODEL.toml beside MODEL.param / MODEL.onnx.
std::string descriptor_sidecar_path(const std::string& model_path);

// Recognises the families whose programs Loom follows, from the graph's structure (probed at
// two frame sizes with shape inference: the scale and the context the network consumes;
// global pooling of the squeeze-and-excitation blocks; transposed convs; pixel shuffle) and the
// blob names the program feeds and extracts (realcugan: in0/out0, waifu2x: Input1/Eltwise4,
// realesrgan: data/output or any name). The noise level comes from the file name
// (noiseN, denoiseNx, no-denoise, conservative), which is the only place it is written.
// nullopt: not a known family (the reason in `why` when given).
std::optional<ModelDescriptor> recognise_model(const Graph& g, const std::string& model_path,
                                               std::string* why = nullptr);

// The descriptor of an imported model: its sidecar when one exists (errors in it are errors),
// else recognise_model's, else nullopt.
Result<std::optional<ModelDescriptor>> describe_model(const Graph& g, const std::string& model_path);

// Wraps `g` (one 4-D NCHW input, its descriptor set and not yet applied) for frames of h x w:
// a Pad before the network, a Slice of its output, the nearest-upscaled residual; the input and
// output keep their names, and g.descriptor->applied becomes true. Fails naming the model when
// the network's output for the padded frame is smaller than crop + scale x the frame, or the
// frame is too small for a REFLECT padding.
Status apply_descriptor(Graph& g, int64_t h, int64_t w);

}  // namespace loom::compiler
