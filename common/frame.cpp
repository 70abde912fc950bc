#include "common/frame.hpp"

#include <array>
#include <utility>

namespace loom {

namespace {

constexpr std::array<std::pair<PixelFormat, std::string_view>, 4> kFormats{{
    {PixelFormat::YUV420P, "yuv420p"},
    {PixelFormat::NV12, "nv12"},
    {PixelFormat::YUV420P10, "yuv420p10le"},
    {PixelFormat::P010, "p010le"},
}};
constexpr std::array<std::pair<ColorMatrix, std::string_view>, 3> kMatrices{{
    {ColorMatrix::BT601, "bt601"},
    {ColorMatrix::BT709, "bt709"},
    {ColorMatrix::BT2020_NCL, "bt2020nc"},
}};
constexpr std::array<std::pair<ColorRange, std::string_view>, 2> kRanges{{
    {ColorRange::LIMITED, "limited"},
    {ColorRange::FULL, "full"},
}};

template <typename E, size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& table, E e) {
    for (const auto& [v, n] : table)
        if (v == e) return n;
    return "?";
}

template <typename E, size_t N>
bool parse(const std::array<std::pair<E, std::string_view>, N>& table, std::string_view name, E& out) {
    for (const auto& [v, n] : table)
        if (n == name) {
            out = v;
            return true;
        }
    return false;
}

}  // namespace

std::string_view pixel_format_name(PixelFormat f) { return name_of(kFormats, f); }
std::string_view color_matrix_name(ColorMatrix m) { return name_of(kMatrices, m); }
std::string_view color_range_name(ColorRange r) { return name_of(kRanges, r); }
bool pixel_format_from_name(std::string_view name, PixelFormat& out) { return parse(kFormats, name, out); }
bool color_matrix_from_name(std::string_view name, ColorMatrix& out) { return parse(kMatrices, name, out); }
bool color_range_from_name(std::string_view name, ColorRange& out) { return parse(kRanges, name, out); }

Status FrameLayout::check() const {
    if (width < 1 || height < 1 || width > kFrameSideMax || height > kFrameSideMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "frame {}x{}: width and height must be in [1, {}]", width,
                          height, kFrameSideMax);
    return {};
}

}  // namespace loom
