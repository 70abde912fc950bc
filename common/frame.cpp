#include "common/frame.hpp"

#include <array>
#include <cstring>
#include <utility>

namespace loom {

namespace {

constexpr std::array<std::pair<PixelFormat, std::string_view>, 6> kFormats{{
    {PixelFormat::YUV420P, "yuv420p"},
    {PixelFormat::NV12, "nv12"},
    {PixelFormat::YUV420P10, "yuv420p10le"},
    {PixelFormat::P010, "p010le"},
    {PixelFormat::RGB24, "rgb24"},
    {PixelFormat::BGR24, "bgr24"},
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
bool yuv_format_from_name(std::string_view name, PixelFormat& out) {
    PixelFormat f{};
    if (!parse(kFormats, name, f) || packed_rgb(f)) return false;
    out = f;
    return true;
}
bool color_matrix_from_name(std::string_view name, ColorMatrix& out) { return parse(kMatrices, name, out); }
bool color_range_from_name(std::string_view name, ColorRange& out) { return parse(kRanges, name, out); }

Status FrameLayout::check() const {
    if (width < 1 || height < 1 || width > kFrameSideMax || height > kFrameSideMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "frame {}x{}: width and height must be in [1, {}]", width,
                          height, kFrameSideMax);
    return {};
}

FrameView FrameView::tight(const FrameLayout& layout, const uint8_t* data, bool pinned,
                           std::shared_ptr<const void> owner) {
    FrameView v;
    v.layout = layout;
    v.owner = std::move(owner);
    v.pinned = pinned;
    v.plane[0] = data;
    v.plane[1] = data && v.planes() > 1 ? data + layout.u_offset() : nullptr;
    v.plane[2] = data && v.planes() > 2 ? data + layout.v_offset() : nullptr;
    for (int p = 0; p < v.planes(); ++p) v.stride[static_cast<size_t>(p)] = static_cast<int64_t>(v.plane_row_bytes(p));
    return v;
}

Status FrameView::check() const {
    LOOM_TRY(layout.check());
    for (int p = 0; p < planes(); ++p) {
        const auto i = static_cast<size_t>(p);
        if (!plane[i])
            return make_error(StatusCode::INVALID_ARGUMENT, "frame view {}x{} {}: plane {} has no address",
                              layout.width, layout.height, pixel_format_name(layout.format), p);
        if (stride[i] < static_cast<int64_t>(plane_row_bytes(p)))
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "frame view {}x{} {}: plane {}'s stride {} is under its {} bytes per row", layout.width,
                              layout.height, pixel_format_name(layout.format), p, stride[i], plane_row_bytes(p));
    }
    return {};
}

bool FrameView::is_tight() const {
    const uint8_t* next = plane[0];
    for (int p = 0; p < planes(); ++p) {
        const auto i = static_cast<size_t>(p);
        if (plane[i] != next || stride[i] != static_cast<int64_t>(plane_row_bytes(p))) return false;
        next += plane_row_bytes(p) * static_cast<size_t>(plane_rows(p));
    }
    return true;
}

void FrameView::copy_to(uint8_t* dst) const {
    for (int p = 0; p < planes(); ++p) {
        const size_t row = plane_row_bytes(p);
        const uint8_t* src = plane[static_cast<size_t>(p)];
        for (int64_t y = 0; y < plane_rows(p); ++y, dst += row, src += stride[static_cast<size_t>(p)])
            std::memcpy(dst, src, row);
    }
}

}  // namespace loom
