// Media engine (device/media.hpp) and the codec lanes.
// resize_bilinear_u8 against a float64 half-pixel bilinear with border clamping, tolerance 1
// level (11-bit fixed-point weights and the final rounding); identity resize exact.
// frame_to_tensor against FFmpeg's swscale (SWS_BILINEAR | SWS_ACCURATE_RND |
// SWS_FULL_CHR_H_INT, MPEG-2 chroma siting) within 1 code at 8 bits, and against a float64
// reference of the documented arithmetic (resize, odd sizes, BGR, mean/std) within 1e-4.
// frame -> tensor -> frame round trips (bars, gradient, noise; every matrix, range, format)
// within 1 code at the frame's depth. Fixed seeds; never all-zero data.
#include <gtest/gtest.h>

extern "C" {
#include <libavutil/opt.h>
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/media.hpp"
#include "device/runtime.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_media {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using loom::test::pageable;
using loom::test::pageable_out;

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
    std::uniform_int_distribution<int> d(0, 255);
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = static_cast<uint8_t>(d(rng));
    return v;
}

// Half-pixel bilinear (OpenCV INTER_LINEAR, ONNX half_pixel): source coordinate
// (x + 0.5) * src_w / dst_w - 0.5, clamped to [0, src_w - 1], neighbours clamped likewise.
std::vector<double> ref_resize(const std::vector<uint8_t>& src, int64_t sw, int64_t sh, int64_t dw, int64_t dh,
                               int64_t ch) {
    auto coord = [](int64_t x, int64_t s, int64_t d, int64_t& i0, int64_t& i1, double& w) {
        double f = (static_cast<double>(x) + 0.5) * static_cast<double>(s) / static_cast<double>(d) - 0.5;
        f = std::clamp(f, 0.0, static_cast<double>(s - 1));
        i0 = static_cast<int64_t>(std::floor(f));
        i1 = std::min(i0 + 1, s - 1);
        w = f - static_cast<double>(i0);
    };
    std::vector<double> out(static_cast<size_t>(dw * dh * ch));
    for (int64_t y = 0; y < dh; ++y) {
        int64_t y0, y1;
        double wy;
        coord(y, sh, dh, y0, y1, wy);
        for (int64_t x = 0; x < dw; ++x) {
            int64_t x0, x1;
            double wx;
            coord(x, sw, dw, x0, x1, wx);
            for (int64_t c = 0; c < ch; ++c) {
                auto px = [&](int64_t yy, int64_t xx) {
                    return static_cast<double>(src[static_cast<size_t>((yy * sw + xx) * ch + c)]);
                };
                double top = px(y0, x0) * (1 - wx) + px(y0, x1) * wx;
                double bot = px(y1, x0) * (1 - wx) + px(y1, x1) * wx;
                out[static_cast<size_t>((y * dw + x) * ch + c)] = top * (1 - wy) + bot * wy;
            }
        }
    }
    return out;
}

struct Size {
    int64_t w, h;
};

void check_resize(Size src, Size dst, int64_t ch, uint32_t seed, ThreadPool& pool) {
    SCOPED_TRACE(std::to_string(src.w) + "x" + std::to_string(src.h) + " -> " + std::to_string(dst.w) + "x" +
                 std::to_string(dst.h) + " x" + std::to_string(ch));
    std::mt19937 rng(seed);
    auto in = random_bytes(rng, static_cast<size_t>(src.w * src.h * ch));
    std::vector<uint8_t> out(static_cast<size_t>(dst.w * dst.h * ch), 0xa5);
    ASSERT_TRUE(check_resize_args(out.size(), dst.w, dst.h, in.size(), src.w, src.h, ch).ok());
    resize_bilinear_u8(out.data(), dst.w, dst.h, in.data(), src.w, src.h, ch, pool);
    auto want = ref_resize(in, src.w, src.h, dst.w, dst.h, ch);
    double worst = 0, sum = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        double e = std::abs(static_cast<double>(out[i]) - want[i]);
        sum += e;
        if (e > worst) worst = e;
        ASSERT_LE(e, 1.0) << "byte " << i << " got " << int(out[i]) << " want " << want[i];
    }
    // Rounding alone averages 0.25 levels; fixed-point error must not bias it much.
    EXPECT_LT(sum / static_cast<double>(out.size()), 0.4);
}

TEST(MediaResize, DownscaleMatchesFloat64Reference) {
    ThreadPool pool(2);
    for (int64_t ch = 1; ch <= 4; ++ch) {
        check_resize({37, 23}, {13, 7}, ch, 10 + uint32_t(ch), pool);
        check_resize({640, 360}, {213, 101}, ch, 20 + uint32_t(ch), pool);  // non-integer ratios, > 16 rows
    }
}

TEST(MediaResize, UpscaleMatchesFloat64Reference) {
    ThreadPool pool(2);
    for (int64_t ch = 1; ch <= 4; ++ch) {
        check_resize({13, 7}, {41, 29}, ch, 30 + uint32_t(ch), pool);
        check_resize({2, 2}, {9, 9}, ch, 40 + uint32_t(ch), pool);
    }
}

TEST(MediaResize, MixedScaleMatchesFloat64Reference) {
    ThreadPool pool(2);
    for (int64_t ch = 1; ch <= 4; ++ch) {
        check_resize({64, 48}, {20, 90}, ch, 50 + uint32_t(ch), pool);
        check_resize({17, 1}, {5, 3}, ch, 60 + uint32_t(ch), pool);
        check_resize({1, 31}, {4, 8}, ch, 70 + uint32_t(ch), pool);
    }
}

TEST(MediaResize, SameSizeIsExactIdentity) {
    ThreadPool pool(3);
    std::mt19937 rng(8);
    for (int64_t ch = 1; ch <= 4; ++ch)
        for (Size s : {Size{17, 11}, Size{1, 1}, Size{101, 67}}) {
            auto in = random_bytes(rng, static_cast<size_t>(s.w * s.h * ch));
            std::vector<uint8_t> out(in.size(), 0);
            resize_bilinear_u8(out.data(), s.w, s.h, in.data(), s.w, s.h, ch, pool);
            EXPECT_EQ(out, in) << s.w << "x" << s.h << " x" << ch;
        }
}

TEST(MediaResize, OnePixelSourceFillsTheFrame) {
    ThreadPool pool(1);
    for (int64_t ch = 1; ch <= 4; ++ch) {
        std::vector<uint8_t> px = {200, 3, 77, 255};
        px.resize(static_cast<size_t>(ch));
        std::vector<uint8_t> out(static_cast<size_t>(5 * 3 * ch), 0);
        resize_bilinear_u8(out.data(), 5, 3, px.data(), 1, 1, ch, pool);
        for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], px[i % static_cast<size_t>(ch)]) << "byte " << i;
    }
}

TEST(MediaResize, ThreadCountDoesNotChangeTheResult) {
    std::mt19937 rng(3);
    auto in = random_bytes(rng, 320 * 240 * 3);
    std::vector<uint8_t> a(131 * 97 * 3), b(a.size());
    ThreadPool one(1), three(3);
    resize_bilinear_u8(a.data(), 131, 97, in.data(), 320, 240, 3, one);
    resize_bilinear_u8(b.data(), 131, 97, in.data(), 320, 240, 3, three);
    EXPECT_EQ(a, b);
}

TEST(MediaArgs, ResizeRejectsBadSizesAndBuffers) {
    EXPECT_TRUE(check_resize_args(13 * 7 * 3, 13, 7, 37 * 23 * 3, 37, 23, 3).ok());  // odd sizes are fine
    struct Bad {
        size_t dst_size;
        int64_t dw, dh;
        size_t src_size;
        int64_t sw, sh, ch;
        const char* needle;
    } bad[] = {
        {0, 0, 7, 37 * 23, 37, 23, 1, "sizes"},
        {13, 13, -1, 37 * 23, 37, 23, 1, "sizes"},
        {13 * 7, 13, 7, 0, 0, 23, 1, "sizes"},
        {13 * 7, 13, 7, 37 * 23, 37, 23, 0, "channels"},
        {13 * 7 * 5, 13, 7, 37 * 23 * 5, 37, 23, 5, "channels"},
        {13 * 7 * 3 - 1, 13, 7, 37 * 23 * 3, 37, 23, 3, "do not match"},
        {13 * 7 * 3, 13, 7, 37 * 23 * 3 + 1, 37, 23, 3, "do not match"},
        {13 * 7, 13, 7, 37 * 23, 37, 23, 3, "do not match"},  // buffers sized for 1 channel
        {65537, 65537, 1, 4, 2, 2, 1, "sizes"},
    };
    for (const Bad& b : bad) {
        loom::Status st = check_resize_args(b.dst_size, b.dw, b.dh, b.src_size, b.sw, b.sh, b.ch);
        EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT) << b.needle;
        EXPECT_NE(st.message().find(b.needle), std::string::npos) << st.to_string();
    }
}

// ---- frames <-> tensors ----------------------------------------------------------------------

using loom::ColorInfo;
using loom::ColorMatrix;
using loom::ColorRange;
using loom::FrameLayout;
using loom::PixelFormat;

constexpr PixelFormat kFormats[] = {PixelFormat::YUV420P, PixelFormat::NV12, PixelFormat::YUV420P10,
                                    PixelFormat::P010};
constexpr ColorMatrix kMatrices[] = {ColorMatrix::BT601, ColorMatrix::BT709, ColorMatrix::BT2020_NCL};
constexpr ColorRange kRanges[] = {ColorRange::LIMITED, ColorRange::FULL};

// Calls fn(format, colour) for every pixel format, matrix and range.
template <typename Fn>
void for_each_format_and_colour(Fn&& fn) {
    for (PixelFormat fmt : kFormats)
        for (ColorMatrix m : kMatrices)
            for (ColorRange r : kRanges) fn(fmt, ColorInfo{m, r});
}

std::string describe(const FrameLayout& l, const ColorInfo& c) {
    return std::to_string(l.width) + "x" + std::to_string(l.height) + " " +
           std::string(loom::pixel_format_name(l.format)) + " " + std::string(loom::color_matrix_name(c.matrix)) + " " +
           std::string(loom::color_range_name(c.range));
}

// A frame buffer with code access by plane (0 = Y, 1 = U, 2 = V) and position.
struct Frame {
    FrameLayout l;
    std::vector<uint8_t> bytes;
    explicit Frame(FrameLayout layout) : l(layout), bytes(layout.bytes(), 0) {}
    size_t offset(int plane, int64_t x, int64_t y) const {
        const size_t sb = loom::sample_bytes(l.format);
        if (plane == 0) return static_cast<size_t>(y * l.width + x) * sb;
        const auto i = static_cast<size_t>(y * l.chroma_width() + x);
        if (loom::semi_planar(l.format)) return l.u_offset() + (2 * i + (plane == 2 ? 1 : 0)) * sb;
        return (plane == 1 ? l.u_offset() : l.v_offset()) + i * sb;
    }
    unsigned get(int plane, int64_t x, int64_t y) const {
        const size_t o = offset(plane, x, y);
        if (loom::sample_bytes(l.format) == 1) return bytes[o];
        const unsigned v = bytes[o] | (unsigned(bytes[o + 1]) << 8);
        return l.format == PixelFormat::P010 ? v >> 6 : v;
    }
    void put(int plane, int64_t x, int64_t y, unsigned code) {
        const size_t o = offset(plane, x, y);
        if (loom::sample_bytes(l.format) == 1) {
            bytes[o] = static_cast<uint8_t>(code);
            return;
        }
        if (l.format == PixelFormat::P010) code <<= 6;
        bytes[o] = static_cast<uint8_t>(code & 0xff);
        bytes[o + 1] = static_cast<uint8_t>(code >> 8);
    }
};

// The colour arithmetic in float64, from the definitions (H.273 / BT.601, BT.709, BT.2020).
struct RefColour {
    double kr, kb, kg, ys, yo, cs, co, code_max;
    RefColour(const ColorInfo& c, PixelFormat f) {
        kr = c.matrix == ColorMatrix::BT601 ? 0.299 : c.matrix == ColorMatrix::BT709 ? 0.2126 : 0.2627;
        kb = c.matrix == ColorMatrix::BT601 ? 0.114 : c.matrix == ColorMatrix::BT709 ? 0.0722 : 0.0593;
        kg = 1 - kr - kb;
        const int depth = loom::bit_depth(f);
        const double unit = double(1 << (depth - 8));
        code_max = double((1 << depth) - 1);
        ys = 219 * unit, yo = 16 * unit, cs = 224 * unit, co = 128 * unit;
        if (c.range == ColorRange::FULL) ys = cs = code_max, yo = 0, co = double(1 << (depth - 1));
    }
    // Normalised Y', Cb, Cr -> codes, rounded.
    unsigned y_code(double y) const { return unsigned(std::lround(std::clamp(y * ys + yo, 0.0, code_max))); }
    unsigned c_code(double c) const { return unsigned(std::lround(std::clamp(c * cs + co, 0.0, code_max))); }
    void rgb(double y, double cb, double cr, double out[3]) const {
        out[0] = std::clamp(y + 2 * (1 - kr) * cr, 0.0, 1.0);
        out[1] = std::clamp(y - 2 * (1 - kb) * kb / kg * cb - 2 * (1 - kr) * kr / kg * cr, 0.0, 1.0);
        out[2] = std::clamp(y + 2 * (1 - kb) * cb, 0.0, 1.0);
    }
};

// Bilinear sample of plane `p` (n_w x n_h) at (fx, fy), coordinates clamped to the plane.
double ref_sample(const Frame& f, int plane, int64_t n_w, int64_t n_h, double fx, double fy) {
    fx = std::clamp(fx, 0.0, double(n_w - 1));
    fy = std::clamp(fy, 0.0, double(n_h - 1));
    const auto x0 = int64_t(fx), y0 = int64_t(fy);
    const int64_t x1 = std::min(x0 + 1, n_w - 1), y1 = std::min(y0 + 1, n_h - 1);
    const double wx = fx - double(x0), wy = fy - double(y0);
    auto at = [&](int64_t x, int64_t y) { return double(f.get(plane, x, y)); };
    return (at(x0, y0) * (1 - wx) + at(x1, y0) * wx) * (1 - wy) + (at(x0, y1) * (1 - wx) + at(x1, y1) * wx) * wy;
}

// frame_to_tensor in float64: RGB in [0, 1], planes R, G, B, at th x tw.
std::vector<double> ref_frame_to_rgb(const Frame& f, const ColorInfo& c, int64_t tw, int64_t th) {
    const RefColour rc(c, f.l.format);
    std::vector<double> out(size_t(3 * tw * th));
    const size_t plane = size_t(tw * th);
    for (int64_t oy = 0; oy < th; ++oy)
        for (int64_t ox = 0; ox < tw; ++ox) {
            double sx = (ox + 0.5) * double(f.l.width) / double(tw) - 0.5;
            double sy = (oy + 0.5) * double(f.l.height) / double(th) - 0.5;
            sx = std::clamp(sx, 0.0, double(f.l.width - 1));
            sy = std::clamp(sy, 0.0, double(f.l.height - 1));
            const double y = (ref_sample(f, 0, f.l.width, f.l.height, sx, sy) - rc.yo) / rc.ys;
            // MPEG-2 siting: chroma on even columns, between rows.
            const double cx = sx / 2, cy = sy / 2 - 0.25;
            const double cb = (ref_sample(f, 1, f.l.chroma_width(), f.l.chroma_height(), cx, cy) - rc.co) / rc.cs;
            const double cr = (ref_sample(f, 2, f.l.chroma_width(), f.l.chroma_height(), cx, cy) - rc.co) / rc.cs;
            double rgb[3];
            rc.rgb(y, cb, cr, rgb);
            for (size_t k = 0; k < 3; ++k) out[k * plane + size_t(oy * tw + ox)] = rgb[k];
        }
    return out;
}

// Test patterns in normalised Y', Cb, Cr, all inside the RGB gamut after 4:2:0 interpolation
// so that a round trip has nothing to clamp.
enum class Pattern { BARS, GRADIENT, NOISE };

Frame make_frame(FrameLayout l, const ColorInfo& c, Pattern p, uint32_t seed) {
    Frame f(l);
    const RefColour rc(c, l.format);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> luma(0.3, 0.7), chroma(-0.1, 0.1);
    // 75% colour bars: white, yellow, cyan, green, magenta, red, blue, black; bars start on
    // even columns so that every chroma sample sits inside one bar.
    static const double bars[8][3] = {{.75, .75, .75}, {.75, .75, 0}, {0, .75, .75}, {0, .75, 0},
                                      {.75, 0, .75},   {.75, 0, 0},   {0, 0, .75},   {0, 0, 0}};
    auto bar_ycc = [&](int64_t x, double out[3]) {
        const auto bar = std::min<int64_t>(7, (x / 2 * 2) * 8 / std::max<int64_t>(l.width, 1));
        const double* b = bars[bar];
        out[0] = rc.kr * b[0] + rc.kg * b[1] + rc.kb * b[2];
        out[1] = (b[2] - out[0]) / (2 * (1 - rc.kb));
        out[2] = (b[0] - out[0]) / (2 * (1 - rc.kr));
    };
    for (int64_t y = 0; y < l.height; ++y)
        for (int64_t x = 0; x < l.width; ++x) {
            double v[3];
            if (p == Pattern::BARS) bar_ycc(x, v);
            else if (p == Pattern::GRADIENT) v[0] = 0.1 + 0.8 * double(x) / double(std::max<int64_t>(l.width - 1, 1));
            else v[0] = luma(rng);
            f.put(0, x, y, rc.y_code(v[0]));
        }
    for (int64_t y = 0; y < l.chroma_height(); ++y)
        for (int64_t x = 0; x < l.chroma_width(); ++x) {
            double v[3];
            if (p == Pattern::BARS) {
                bar_ycc(2 * x, v);
            } else if (p == Pattern::GRADIENT) {
                v[1] = 0.05 - 0.1 * double(y) / double(std::max<int64_t>(l.chroma_height() - 1, 1));
                v[2] = 0.1 * double(x + y) / double(l.chroma_width() + l.chroma_height()) - 0.05;
            } else {
                v[1] = chroma(rng), v[2] = chroma(rng);
            }
            f.put(1, x, y, rc.c_code(v[1]));
            f.put(2, x, y, rc.c_code(v[2]));
        }
    return f;
}

TensorFormat tensor_for(const FrameLayout& l, DType dtype = DType::F32) {
    TensorFormat t;
    t.dtype = dtype;
    t.height = l.height;
    t.width = l.width;
    return t;
}

std::vector<float> to_tensor_f32(const Frame& f, const ColorInfo& c, const TensorFormat& tf, ThreadPool& pool) {
    EXPECT_TRUE(check_frame_to_tensor_args(f.l, c, f.bytes.size(), tf, tf.bytes()).ok());
    std::vector<float> t(tf.bytes() / sizeof(float), -7.f);
    frame_to_tensor(reinterpret_cast<uint8_t*>(t.data()), tf, f.bytes.data(), f.l, c, pool);
    return t;
}

TEST(MediaFrameToTensor, RoundTripWithinOneCodeEveryFormatMatrixRangeAndPattern) {
    ThreadPool pool(2);
    uint32_t seed = 1;
    for_each_format_and_colour([&](PixelFormat fmt, const ColorInfo& c) {
        for (Pattern p : {Pattern::BARS, Pattern::GRADIENT, Pattern::NOISE})
            for (auto [w, h] : {std::pair<int64_t, int64_t>{64, 36}, {37, 23}, {1, 1}, {2, 3}, {5, 1}}) {
                const FrameLayout l{fmt, w, h};
                SCOPED_TRACE(describe(l, c) + " pattern " + std::to_string(int(p)));
                const Frame in = make_frame(l, c, p, seed++);
                const TensorFormat tf = tensor_for(l);
                std::vector<float> t = to_tensor_f32(in, c, tf, pool);
                Frame out(l);
                ASSERT_TRUE(check_tensor_to_frame_args(tf, tf.bytes(), l, c, out.bytes.size()).ok());
                tensor_to_frame(out.bytes.data(), l, c, reinterpret_cast<const uint8_t*>(t.data()), tf, pool);
                int worst = 0;
                for (int plane = 0; plane < 3; ++plane) {
                    const int64_t pw = plane ? l.chroma_width() : w, ph = plane ? l.chroma_height() : h;
                    for (int64_t y = 0; y < ph; ++y)
                        for (int64_t x = 0; x < pw; ++x)
                            worst = std::max(worst, std::abs(int(out.get(plane, x, y)) - int(in.get(plane, x, y))));
                }
                ASSERT_LE(worst, 1);
            }
    });
}

// swscale's planar GBR output of `f` (SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, the
// frame's matrix and range, chroma on even columns and between rows), as R, G, B codes.
std::vector<double> swscale_rgb(const Frame& f, const ColorInfo& c) {
    const bool deep = loom::bit_depth(f.l.format) > 8;
    const AVPixelFormat src_fmt = f.l.format == PixelFormat::YUV420P ? AV_PIX_FMT_YUV420P
                                  : f.l.format == PixelFormat::NV12  ? AV_PIX_FMT_NV12
                                  : f.l.format == PixelFormat::P010  ? AV_PIX_FMT_P010LE
                                                                     : AV_PIX_FMT_YUV420P10LE;
    const AVPixelFormat dst_fmt = deep ? AV_PIX_FMT_GBRP10LE : AV_PIX_FMT_GBRP;
    SwsContext* ctx = sws_alloc_context();
    EXPECT_NE(ctx, nullptr);
    av_opt_set_int(ctx, "srcw", f.l.width, 0);
    av_opt_set_int(ctx, "srch", f.l.height, 0);
    av_opt_set_int(ctx, "src_format", src_fmt, 0);
    av_opt_set_int(ctx, "dstw", f.l.width, 0);
    av_opt_set_int(ctx, "dsth", f.l.height, 0);
    av_opt_set_int(ctx, "dst_format", dst_fmt, 0);
    av_opt_set_int(ctx, "sws_flags", SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, 0);
    av_opt_set_int(ctx, "src_h_chr_pos", 0, 0);    // AVCHROMA_LOC_LEFT: on the even column
    av_opt_set_int(ctx, "src_v_chr_pos", 128, 0);  // and halfway between rows
    EXPECT_GE(sws_init_context(ctx, nullptr, nullptr), 0);
    const int cs = c.matrix == ColorMatrix::BT601 ? SWS_CS_ITU601 : c.matrix == ColorMatrix::BT709 ? SWS_CS_ITU709
                                                                                                    : SWS_CS_BT2020;
    EXPECT_GE(sws_setColorspaceDetails(ctx, sws_getCoefficients(cs), c.range == ColorRange::FULL,
                                       sws_getCoefficients(cs), 1, 0, 1 << 16, 1 << 16),
              0);
    const size_t sb = loom::sample_bytes(f.l.format);
    const int y_stride = int(f.l.width * int64_t(sb)), c_stride = int(f.l.chroma_width() * int64_t(sb));
    const uint8_t* src[4] = {f.bytes.data(), f.bytes.data() + f.l.u_offset(), f.bytes.data() + f.l.v_offset(),
                             nullptr};
    int src_stride[4] = {y_stride, c_stride, c_stride, 0};
    if (loom::semi_planar(f.l.format)) src[2] = nullptr, src_stride[1] = 2 * c_stride, src_stride[2] = 0;
    const size_t plane = size_t(f.l.width * f.l.height);
    std::vector<uint8_t> gbr(3 * plane * sb);
    uint8_t* dst[4] = {gbr.data(), gbr.data() + plane * sb, gbr.data() + 2 * plane * sb, nullptr};
    int dst_stride[4] = {y_stride, y_stride, y_stride, 0};
    sws_scale(ctx, src, src_stride, 0, int(f.l.height), dst, dst_stride);
    sws_freeContext(ctx);
    std::vector<double> rgb(3 * plane);
    auto code = [&](size_t p, size_t i) {
        const uint8_t* q = gbr.data() + (p * plane + i) * sb;
        return sb == 1 ? double(q[0]) : double(q[0] | (q[1] << 8));
    };
    for (size_t i = 0; i < plane; ++i) {
        rgb[i] = code(2, i);              // R
        rgb[plane + i] = code(0, i);      // G
        rgb[2 * plane + i] = code(1, i);  // B
    }
    return rgb;
}

TEST(MediaFrameToTensor, MatchesSwscaleWithinOneCodeAt8Bits) {
    ThreadPool pool(2);
    uint32_t seed = 100;
    for_each_format_and_colour([&](PixelFormat fmt, const ColorInfo& c) {
        for (Pattern p : {Pattern::BARS, Pattern::NOISE}) {
            // Even sizes: for odd ones swscale scales chroma by ceil(w/2)/w, not 1/2.
            const FrameLayout l{fmt, 96, 54};
            SCOPED_TRACE(describe(l, c) + " pattern " + std::to_string(int(p)));
            Frame f = make_frame(l, c, p, seed++);
            if (p == Pattern::NOISE) {
                // Noise over the range's nominal codes, far outside the RGB gamut, so both
                // must clamp alike. (Beyond them, limited-range super-white with extreme
                // chroma overflows swscale's 32-bit sums and wraps to 0.)
                std::mt19937 rng(seed);
                const unsigned unit = 1u << (loom::bit_depth(fmt) - 8);
                const bool full = c.range == ColorRange::FULL;
                std::uniform_int_distribution<unsigned> luma(full ? 0 : 16 * unit,
                                                             full ? 256 * unit - 1 : 235 * unit);
                std::uniform_int_distribution<unsigned> chroma(full ? 0 : 16 * unit,
                                                               full ? 256 * unit - 1 : 240 * unit);
                for (int plane = 0; plane < 3; ++plane)
                    for (int64_t y = 0; y < (plane ? l.chroma_height() : l.height); ++y)
                        for (int64_t x = 0; x < (plane ? l.chroma_width() : l.width); ++x)
                            f.put(plane, x, y, plane ? chroma(rng) : luma(rng));
            }
            const std::vector<float> t = to_tensor_f32(f, c, tensor_for(l), pool);
            const std::vector<double> want = swscale_rgb(f, c);
            const double code_max = double((1 << loom::bit_depth(fmt)) - 1);
            const double to_8bit = 255.0 / code_max;
            double worst = 0;
            size_t at = 0;
            for (size_t i = 0; i < t.size(); ++i) {
                const double e = std::abs(double(t[i]) * code_max - want[i]) * to_8bit;
                if (e > worst) worst = e, at = i;
            }
            const size_t plane = size_t(l.width * l.height), px = at % plane;
            const int64_t x = int64_t(px) % l.width, y = int64_t(px) / l.width;
            EXPECT_LE(worst, 1.0) << "channel " << at / plane << " at " << x << "," << y << ": "
                                  << t[at] * code_max << " vs swscale " << want[at] << "; Y "
                                  << f.get(0, x, y) << " U " << f.get(1, x / 2, y / 2) << " V "
                                  << f.get(2, x / 2, y / 2);
        }
    });
}

TEST(MediaFrameToTensor, ResizeOddSizesMatchFloat64Reference) {
    ThreadPool pool(3);
    struct Case {
        FrameLayout l;
        int64_t tw, th;
    } cases[] = {
        {{PixelFormat::YUV420P, 37, 23}, 37, 23}, {{PixelFormat::NV12, 64, 48}, 20, 90},
        {{PixelFormat::YUV420P10, 33, 17}, 101, 53}, {{PixelFormat::P010, 128, 72}, 57, 31},
        {{PixelFormat::YUV420P, 1, 1}, 4, 3},     {{PixelFormat::NV12, 17, 1}, 5, 2},
    };
    uint32_t seed = 300;
    for (const Case& k : cases) {
        const ColorInfo c{ColorMatrix::BT709, ColorRange::LIMITED};
        SCOPED_TRACE(describe(k.l, c) + " -> " + std::to_string(k.tw) + "x" + std::to_string(k.th));
        const Frame f = make_frame(k.l, c, Pattern::NOISE, seed++);
        TensorFormat tf = tensor_for(k.l);
        tf.width = k.tw, tf.height = k.th;
        const std::vector<float> t = to_tensor_f32(f, c, tf, pool);
        const std::vector<double> want = ref_frame_to_rgb(f, c, k.tw, k.th);
        for (size_t i = 0; i < t.size(); ++i) ASSERT_NEAR(t[i], want[i], 1e-4) << "element " << i;
    }
}

TEST(MediaFrameToTensor, BgrOrderMeanStdAndFp16) {
    ThreadPool pool(2);
    const FrameLayout l{PixelFormat::NV12, 40, 30};
    const ColorInfo c{ColorMatrix::BT601, ColorRange::FULL};
    const Frame f = make_frame(l, c, Pattern::BARS, 7);
    const TensorFormat rgb = tensor_for(l);
    const std::vector<float> base = to_tensor_f32(f, c, rgb, pool);
    const size_t plane = size_t(l.width * l.height);

    TensorFormat bgr = rgb;
    bgr.order = ChannelOrder::BGR;
    bgr.mean[0] = 0.406f, bgr.mean[1] = 0.456f, bgr.mean[2] = 0.485f;  // ImageNet, in BGR order
    bgr.std[0] = 0.225f, bgr.std[1] = 0.224f, bgr.std[2] = 0.229f;
    const std::vector<float> t = to_tensor_f32(f, c, bgr, pool);
    for (size_t ch = 0; ch < 3; ++ch)
        for (size_t i = 0; i < plane; ++i) {
            const float want = (base[(2 - ch) * plane + i] - bgr.mean[ch]) / bgr.std[ch];
            ASSERT_NEAR(t[ch * plane + i], want, 1e-5) << "channel " << ch << " pixel " << i;
        }

    // fp16: the fp32 values rounded to half precision (2^-11 relative), and back to the same
    // frame within 1 code.
    const TensorFormat h = tensor_for(l, DType::F16);
    std::vector<f16> th(h.bytes() / sizeof(f16));
    ASSERT_TRUE(check_frame_to_tensor_args(l, c, f.bytes.size(), h, h.bytes()).ok());
    frame_to_tensor(reinterpret_cast<uint8_t*>(th.data()), h, f.bytes.data(), l, c, pool);
    for (size_t i = 0; i < th.size(); ++i)
        ASSERT_NEAR(f16_to_f32(th[i]), base[i], std::abs(base[i]) / 2048 + 1e-7) << "element " << i;
    Frame back(l);
    tensor_to_frame(back.bytes.data(), l, c, reinterpret_cast<const uint8_t*>(th.data()), h, pool);
    for (size_t i = 0; i < back.bytes.size(); ++i) ASSERT_NEAR(back.bytes[i], f.bytes[i], 1) << "byte " << i;

    // mean/std on the way back: the normalised BGR tensor gives the same frame.
    Frame from_bgr(l);
    tensor_to_frame(from_bgr.bytes.data(), l, c, reinterpret_cast<const uint8_t*>(t.data()), bgr, pool);
    for (size_t i = 0; i < from_bgr.bytes.size(); ++i) ASSERT_NEAR(from_bgr.bytes[i], f.bytes[i], 1) << "byte " << i;
}

TEST(MediaTensorToFrame, RoundsToNearestAndClampsOutOfRangeAndNaN) {
    ThreadPool pool(1);
    const FrameLayout l{PixelFormat::YUV420P, 4, 2};
    const ColorInfo c{ColorMatrix::BT709, ColorRange::FULL};
    const TensorFormat tf = tensor_for(l);
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    // Grey pixels (R = G = B): full-range Y = round(255 v), chroma neutral (128).
    struct Grey {
        float v;
        unsigned y;
    } greys[] = {{100.49f / 255, 100}, {100.51f / 255, 101}, {-0.5f, 0}, {1.7f, 255},
                 {nan, 0},             {inf, 255},           {-inf, 0},  {0.5f / 255 - 1e-4f, 0}};
    for (const Grey& g : greys) {
        std::vector<float> t(tf.bytes() / sizeof(float), g.v);
        Frame out(l);
        tensor_to_frame(out.bytes.data(), l, c, reinterpret_cast<const uint8_t*>(t.data()), tf, pool);
        for (int64_t x = 0; x < 4; ++x) EXPECT_EQ(out.get(0, x, 1), g.y) << "value " << g.v;
        EXPECT_EQ(out.get(1, 1, 0), 128u) << "value " << g.v;
        EXPECT_EQ(out.get(2, 0, 0), 128u) << "value " << g.v;
    }
    // Limited range, 10 bits, P010: black and white land on 64 and 940 (Y) in the high bits,
    // saturated red's Cr on 960; a NaN in one channel counts as 0 there.
    const FrameLayout l10{PixelFormat::P010, 2, 2};
    const ColorInfo c10{ColorMatrix::BT709, ColorRange::LIMITED};
    const TensorFormat tf10 = tensor_for(l10);
    std::vector<float> red = {1.2f, 1, 1, 1, nan, -3, 0, 0, 0, 0, -1, nan};  // R plane, G plane, B plane
    Frame out(l10);
    tensor_to_frame(out.bytes.data(), l10, c10, reinterpret_cast<const uint8_t*>(red.data()), tf10, pool);
    const RefColour rc(c10, PixelFormat::P010);
    EXPECT_EQ(out.get(0, 0, 0), rc.y_code(rc.kr));
    EXPECT_EQ(out.get(2, 0, 0), 960u);
    EXPECT_EQ(out.bytes[0] & 0x3f, 0) << "P010 keeps the low 6 bits clear";
}

// Packed RGB frames: codes / 255 in the tensor's channels (RGB24's bytes in order, BGR24's
// reversed; no matrix, no range), back to exactly the same codes, and a resize equal to the
// float64 bilinear reference; a model's values out of [0, 1] are clamped.
TEST(MediaPackedRgb, CodesOver255InTheSameCodesOutAndResizes) {
    ThreadPool pool(2);
    std::mt19937 rng(3);
    for (const PixelFormat fmt : {PixelFormat::RGB24, PixelFormat::BGR24}) {
        SCOPED_TRACE(std::string(loom::pixel_format_name(fmt)));
        const FrameLayout l{fmt, 37, 23};
        const ColorInfo c;
        const std::vector<uint8_t> frame = random_bytes(rng, l.bytes());
        ASSERT_EQ(l.bytes(), size_t(37 * 23 * 3));
        TensorFormat tf;
        tf.height = l.height, tf.width = l.width;
        std::vector<float> t(tf.bytes() / 4);
        ASSERT_TRUE(check_frame_to_tensor_args(l, c, frame.size(), tf, tf.bytes()).ok());
        frame_to_tensor(reinterpret_cast<uint8_t*>(t.data()), tf, frame.data(), l, c, pool);
        const size_t plane = size_t(l.width * l.height);
        for (size_t i = 0; i < plane; ++i)
            for (size_t ch = 0; ch < 3; ++ch) {
                const size_t byte = fmt == PixelFormat::RGB24 ? ch : 2 - ch;
                ASSERT_NEAR(t[ch * plane + i], frame[3 * i + byte] / 255.0, 1e-6) << "pixel " << i << " channel " << ch;
            }
        std::vector<uint8_t> back(l.bytes());
        ASSERT_TRUE(check_tensor_to_frame_args(tf, tf.bytes(), l, c, back.size()).ok());
        tensor_to_frame(back.data(), l, c, reinterpret_cast<const uint8_t*>(t.data()), tf, pool);
        EXPECT_EQ(back, frame);

        TensorFormat big = tf;
        big.height = 41, big.width = 60;
        std::vector<float> r(big.bytes() / 4);
        frame_to_tensor(reinterpret_cast<uint8_t*>(r.data()), big, frame.data(), l, c, pool);
        const std::vector<double> want = ref_resize(frame, l.width, l.height, big.width, big.height, 3);
        const size_t big_plane = size_t(big.width * big.height);
        for (size_t i = 0; i < big_plane; ++i)
            for (size_t ch = 0; ch < 3; ++ch) {
                const size_t byte = fmt == PixelFormat::RGB24 ? ch : 2 - ch;
                ASSERT_NEAR(r[ch * big_plane + i], want[3 * i + byte] / 255.0, 1e-5) << "pixel " << i;
            }

        t[0] = -0.5f, t[1] = 2.0f, t[2] = std::numeric_limits<float>::quiet_NaN();
        tensor_to_frame(back.data(), l, c, reinterpret_cast<const uint8_t*>(t.data()), tf, pool);
        const size_t red = fmt == PixelFormat::RGB24 ? 0 : 2;
        EXPECT_EQ(back[red], 0);
        EXPECT_EQ(back[3 + red], 255);
        EXPECT_EQ(back[6 + red], 0);
    }
}

TEST(MediaArgs, FrameAndTensorChecksNameTheProblem) {
    const FrameLayout l{PixelFormat::NV12, 64, 48};
    const ColorInfo c;
    const TensorFormat tf = tensor_for(l);
    EXPECT_TRUE(check_frame_to_tensor_args(l, c, l.bytes(), tf, tf.bytes()).ok());
    auto expect_error = [](loom::Status st, const char* needle) {
        EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT) << needle;
        EXPECT_NE(st.message().find(needle), std::string::npos) << st.to_string();
    };
    expect_error(check_frame_to_tensor_args(l, c, l.bytes() - 1, tf, tf.bytes()), "buffer of 4607 bytes");
    expect_error(check_frame_to_tensor_args(l, c, l.bytes(), tf, tf.bytes() + 4), "the shape needs");
    expect_error(check_frame_to_tensor_args({PixelFormat::NV12, 0, 48}, c, 0, tf, tf.bytes()), "must be in [1, 16384]");
    expect_error(check_frame_to_tensor_args({PixelFormat::NV12, 1 << 20, 1 << 20}, c, 0, tf, tf.bytes()),
                 "must be in [1, 16384]");
    expect_error(check_frame_to_tensor_args({static_cast<PixelFormat>(9), 64, 48}, c, l.bytes(), tf, tf.bytes()),
                 "pixel format 9");
    expect_error(check_frame_to_tensor_args(l, ColorInfo{static_cast<ColorMatrix>(7)}, l.bytes(), tf, tf.bytes()),
                 "colour matrix 7");
    TensorFormat bad = tf;
    bad.dtype = DType::I8;
    expect_error(check_frame_to_tensor_args(l, c, l.bytes(), bad, tf.bytes()), "dtype i8 must be f32 or f16");
    bad = tf;
    bad.height = 0;
    expect_error(check_frame_to_tensor_args(l, c, l.bytes(), bad, 0), "tensor: height x width 0x64");
    bad = tf;
    bad.std[2] = 0;
    expect_error(check_frame_to_tensor_args(l, c, l.bytes(), bad, tf.bytes()), "std[2] = 0");
    bad = tf;
    bad.mean[1] = std::numeric_limits<float>::quiet_NaN();
    expect_error(check_frame_to_tensor_args(l, c, l.bytes(), bad, tf.bytes()), "mean[1]");
    bad = tf;
    bad.width = 32;
    EXPECT_TRUE(check_frame_to_tensor_args(l, c, l.bytes(), bad, bad.bytes()).ok()) << "a resize";
    expect_error(check_tensor_to_frame_args(bad, bad.bytes(), l, c, l.bytes()), "does not match the frame's 64x48");
}

// ---- through the runtime -------------------------------------------------------------------

SimTime media_ns(const DeviceSpec& sp, double pixels) {
    return sim_from_ns(sp.media_task_overhead_us * 1e3 + pixels / (sp.media_throughput_mpix_s * 1e-3));
}

TEST(MediaStream, ConversionsRunOnTheMediaEngineWithTheSpecDurations) {
    const DeviceSpec& spec = loom::test::preset_spec("edge");
    ThreadPool pool(2);
    DeviceOptions opt;
    opt.pool = &pool;
    auto dev = loom::test::make_device(opt, spec);

    const FrameLayout l{PixelFormat::YUV420P10, 64, 48};
    const ColorInfo c{ColorMatrix::BT2020_NCL, ColorRange::LIMITED};
    const Frame f = make_frame(l, c, Pattern::NOISE, 21);
    TensorFormat tf = tensor_for(l, DType::F16);
    TensorFormat small = tf;
    small.width = 40, small.height = 30;
    auto d_frame = dev->malloc(l.bytes(), "frame"), d_tensor = dev->malloc(tf.bytes(), "tensor"),
         d_small = dev->malloc(small.bytes(), "small"), d_back = dev->malloc(l.bytes(), "back");
    ASSERT_TRUE(d_frame.ok() && d_tensor.ok() && d_small.ok() && d_back.ok());
    Stream st = dev->create_stream();
    Event e0 = dev->create_event(), e1 = dev->create_event(), e2 = dev->create_event(), e3 = dev->create_event();
    ASSERT_TRUE(st.copy_h2d(d_frame->as<uint8_t>(), pageable(f.bytes)).ok());
    ASSERT_TRUE(st.record(e0).ok());
    ASSERT_TRUE(st.media_frame_to_tensor(d_frame->as<uint8_t>(), l, c, d_tensor->as<uint8_t>(), tf).ok());
    ASSERT_TRUE(st.record(e1).ok());
    ASSERT_TRUE(st.media_frame_to_tensor(d_frame->as<uint8_t>(), l, c, d_small->as<uint8_t>(), small).ok());
    ASSERT_TRUE(st.record(e2).ok());
    ASSERT_TRUE(st.media_tensor_to_frame(d_tensor->as<uint8_t>(), tf, d_back->as<uint8_t>(), l, c).ok());
    ASSERT_TRUE(st.record(e3).ok());
    std::vector<uint8_t> back(l.bytes()), tensor(tf.bytes());
    ASSERT_TRUE(st.copy_d2h(pageable_out(back), DevicePtr<const uint8_t>(d_back->as<uint8_t>())).ok());
    ASSERT_TRUE(st.copy_d2h(pageable_out(tensor), DevicePtr<const uint8_t>(d_tensor->as<uint8_t>())).ok());

    // Submission checks sizes against the buffers and names the task.
    loom::Status wrong = st.media_frame_to_tensor(d_frame->as<uint8_t>(), l, c, d_small->as<uint8_t>(), tf, "f2t");
    EXPECT_EQ(wrong.code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(wrong.message().find("media_frame_to_tensor 'f2t'"), std::string::npos) << wrong.to_string();
    EXPECT_NE(wrong.message().find("the shape needs"), std::string::npos) << wrong.to_string();
    loom::Status mismatch = st.media_tensor_to_frame(d_small->as<uint8_t>(), small, d_back->as<uint8_t>(), l, c);
    EXPECT_NE(mismatch.message().find("does not match"), std::string::npos) << mismatch.to_string();
    ASSERT_TRUE(st.synchronize().ok());

    // The same work on the host gives the same bytes.
    std::vector<uint8_t> want_tensor(tf.bytes()), want_back(l.bytes());
    frame_to_tensor(want_tensor.data(), tf, f.bytes.data(), l, c, pool);
    tensor_to_frame(want_back.data(), l, c, want_tensor.data(), tf, pool);
    EXPECT_EQ(tensor, want_tensor);
    EXPECT_EQ(back, want_back);

    const double frame_px = double(l.width * l.height);
    auto ms = [](const Event& a, const Event& b) { return *Event::elapsed_ms(a, b); };
    EXPECT_DOUBLE_EQ(ms(e0, e1), sim_to_ms(media_ns(spec, frame_px)));
    EXPECT_DOUBLE_EQ(ms(e1, e2), sim_to_ms(media_ns(spec, frame_px)));  // max(src, dst) pixels
    EXPECT_DOUBLE_EQ(ms(e2, e3), sim_to_ms(media_ns(spec, frame_px)));
    const DeviceStats s = dev->stats();
    EXPECT_EQ(s.engines[static_cast<size_t>(Engine::MEDIA)].tasks, 3u);
    EXPECT_EQ(s.engines[static_cast<size_t>(Engine::MEDIA)].busy, 3 * media_ns(spec, frame_px));
}

TEST(MediaStream, CodecTasksLandOnVdecAndVencWithTheSpecDurations) {
    for (std::string_view preset : loom::test::presets()) {
        SCOPED_TRACE(preset);
        const DeviceSpec& spec = loom::test::preset_spec(preset);
        DeviceOptions opt;
        opt.trace = true;
        auto dev = loom::test::make_device(opt, spec);
        Stream st = dev->create_stream();
        Event a = dev->create_event(), b = dev->create_event(), c = dev->create_event();
        ASSERT_TRUE(st.record(a).ok());
        ASSERT_TRUE(st.video_decode(1920, 1080).ok());
        ASSERT_TRUE(st.record(b).ok());
        ASSERT_TRUE(st.video_encode(1920, 1080, "venc frame 0").ok());
        ASSERT_TRUE(st.record(c).ok());
        loom::Status bad = st.video_decode(0, 1080, "vdec x");
        EXPECT_EQ(bad.code(), StatusCode::INVALID_ARGUMENT);
        EXPECT_NE(bad.message().find("video_decode 'vdec x': frame 0x1080"), std::string::npos) << bad.to_string();
        EXPECT_EQ(st.video_encode(1920, 1 << 15).code(), StatusCode::INVALID_ARGUMENT);
        ASSERT_TRUE(st.synchronize().ok());
        const double px = 1920.0 * 1080.0;
        const SimTime dec =
            sim_from_ns(spec.media_vdec_frame_overhead_us * 1e3 + px / (spec.media_vdec_throughput_mpix_s * 1e-3));
        const SimTime enc =
            sim_from_ns(spec.media_venc_frame_overhead_us * 1e3 + px / (spec.media_venc_throughput_mpix_s * 1e-3));
        EXPECT_DOUBLE_EQ(*Event::elapsed_ms(a, b), sim_to_ms(dec));
        EXPECT_DOUBLE_EQ(*Event::elapsed_ms(b, c), sim_to_ms(enc));
        const DeviceStats s = dev->stats();
        EXPECT_EQ(s.engines[static_cast<size_t>(Engine::VDEC)].tasks, 1u);
        EXPECT_EQ(s.engines[static_cast<size_t>(Engine::VENC)].tasks, 1u);
        EXPECT_EQ(s.engines[static_cast<size_t>(Engine::VDEC)].busy, dec);
        EXPECT_EQ(s.engines[static_cast<size_t>(Engine::VENC)].busy, enc);
        const std::string trace = dev->trace_json();
        EXPECT_NE(trace.find("\"engine\":\"vdec\""), std::string::npos);
        EXPECT_NE(trace.find("venc frame 0"), std::string::npos);
    }
    // The presets' published rates: the 310 decodes 1080p at 480 fps in total, encodes 1080p30.
    const DeviceSpec& edge = loom::test::preset_spec("edge");
    EXPECT_NEAR(edge.media_vdec_throughput_mpix_s * 1e6 / (1920 * 1080), 480, 0.1);
    EXPECT_NEAR(edge.media_venc_throughput_mpix_s * 1e6 / (1920 * 1080), 30, 0.1);
}

TEST(MediaSpec, CodecFieldsAreValidatedAndHashed) {
    auto base = load_device_spec("edge");
    ASSERT_TRUE(base.ok());
    auto faster = parse_device_spec("base = \"edge\"\n[media]\nvdec_throughput_mpix_s = 2000\n", "t.toml");
    ASSERT_TRUE(faster.ok()) << faster.status().to_string();
    EXPECT_EQ(faster->media_vdec_throughput_mpix_s, 2000);
    EXPECT_NE(faster->hash(), base->hash());
    auto enc = parse_device_spec("base = \"edge\"\n[media]\nvenc_frame_overhead_us = 31\n", "t.toml");
    ASSERT_TRUE(enc.ok());
    EXPECT_NE(enc->hash(), base->hash());
    auto bad = parse_device_spec("base = \"edge\"\n[media]\nvenc_throughput_mpix_s = 0\n", "t.toml");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("t.toml:3:"), std::string::npos) << bad.status().to_string();
    EXPECT_NE(bad.status().message().find("media.venc_throughput_mpix_s"), std::string::npos);
    auto typo = parse_device_spec("base = \"edge\"\n[media]\nvdec_mpix_s = 5\n", "t.toml");
    ASSERT_FALSE(typo.ok());
    EXPECT_NE(typo.status().message().find("unknown key 'media.vdec_mpix_s'"), std::string::npos);
}

}  // namespace

}  // namespace test_media
