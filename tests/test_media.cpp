// Media engine (device/media.hpp): bilinear resize and NV12 -> RGB of 8-bit frames.
// resize_bilinear_u8 against a float64 half-pixel bilinear with border clamping, tolerance 1
// level (11-bit fixed-point weights and the final rounding); identity resize exact.
// nv12_to_rgb_u8 against float64 BT.601 limited range, tolerance 2 levels (8-bit fixed-point
// coefficients). Fixed seeds, odd sizes, 1 to 4 channels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/media.hpp"
#include "device/runtime.hpp"
#include "device/spec.hpp"
#include "test_util.hpp"

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

// BT.601 limited range: Y in [16, 235] and Cb, Cr in [16, 240] map to full-range RGB.
std::vector<double> ref_nv12(const std::vector<uint8_t>& nv12, int64_t w, int64_t h) {
    const double kr = 0.299, kb = 0.114, kg = 1 - kr - kb;
    const double ys = 255.0 / 219.0, cs = 255.0 / 224.0;
    std::vector<double> out(static_cast<size_t>(w * h * 3));
    for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
            double yy = (nv12[static_cast<size_t>(y * w + x)] - 16.0) * ys;
            size_t uv = static_cast<size_t>(w * h + (y / 2) * w + (x / 2) * 2);
            double cb = (nv12[uv] - 128.0) * cs, cr = (nv12[uv + 1] - 128.0) * cs;
            double r = yy + 2 * (1 - kr) * cr;
            double b = yy + 2 * (1 - kb) * cb;
            double g = yy - 2 * (1 - kb) * kb / kg * cb - 2 * (1 - kr) * kr / kg * cr;
            double* o = &out[static_cast<size_t>((y * w + x) * 3)];
            o[0] = std::clamp(r, 0.0, 255.0);
            o[1] = std::clamp(g, 0.0, 255.0);
            o[2] = std::clamp(b, 0.0, 255.0);
        }
    return out;
}

TEST(MediaNv12, RandomFramesMatchFloat64Bt601) {
    ThreadPool pool(2);
    std::mt19937 rng(601);
    for (Size s : {Size{2, 2}, Size{38, 22}, Size{320, 182}}) {
        SCOPED_TRACE(std::to_string(s.w) + "x" + std::to_string(s.h));
        auto in = random_bytes(rng, static_cast<size_t>(s.w * s.h * 3 / 2));
        std::vector<uint8_t> out(static_cast<size_t>(s.w * s.h * 3), 0xa5);
        ASSERT_TRUE(check_nv12_args(out.size(), in.size(), s.w, s.h).ok());
        nv12_to_rgb_u8(out.data(), in.data(), s.w, s.h, pool);
        auto want = ref_nv12(in, s.w, s.h);
        for (size_t i = 0; i < out.size(); ++i)
            ASSERT_LE(std::abs(out[i] - want[i]), 2.0)
                << "pixel " << i / 3 << " channel " << i % 3 << " got " << int(out[i]) << " want " << want[i];
    }
}

// One 2x2 block of a known colour, in an 2x2 NV12 frame.
std::vector<uint8_t> solid(int y, int u, int v) {
    return {uint8_t(y), uint8_t(y), uint8_t(y), uint8_t(y), uint8_t(u), uint8_t(v)};
}

TEST(MediaNv12, KnownColours) {
    ThreadPool pool(1);
    struct Colour {
        const char* name;
        int y, u, v;
        int r, g, b;
    } colours[] = {
        {"white", 235, 128, 128, 255, 255, 255}, {"black", 16, 128, 128, 0, 0, 0},
        {"grey", 126, 128, 128, 128, 128, 128},  {"red", 81, 90, 240, 255, 0, 0},
        {"green", 145, 54, 34, 0, 255, 0},       {"blue", 41, 240, 110, 0, 0, 255},
        {"superwhite", 255, 128, 128, 255, 255, 255},  // clamped, not wrapped
        {"superblack", 0, 128, 128, 0, 0, 0},
    };
    for (const Colour& c : colours) {
        auto in = solid(c.y, c.u, c.v);
        std::vector<uint8_t> out(12, 0xa5);
        nv12_to_rgb_u8(out.data(), in.data(), 2, 2, pool);
        for (int p = 0; p < 4; ++p) {
            EXPECT_NEAR(out[size_t(p * 3 + 0)], c.r, 2) << c.name;
            EXPECT_NEAR(out[size_t(p * 3 + 1)], c.g, 2) << c.name;
            EXPECT_NEAR(out[size_t(p * 3 + 2)], c.b, 2) << c.name;
        }
    }
    // Neutral chroma gives grey for every luma: R = G = B.
    std::vector<uint8_t> in(16 * 2 * 3 / 2, 128), out(16 * 2 * 3);
    for (int i = 0; i < 32; ++i) in[size_t(i)] = uint8_t(16 + i * 7);
    nv12_to_rgb_u8(out.data(), in.data(), 16, 2, pool);
    for (int p = 0; p < 32; ++p) {
        EXPECT_EQ(out[size_t(p * 3)], out[size_t(p * 3 + 1)]);
        EXPECT_EQ(out[size_t(p * 3)], out[size_t(p * 3 + 2)]);
    }
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

TEST(MediaArgs, Nv12RejectsOddSizesAndBadBuffers) {
    EXPECT_TRUE(check_nv12_args(38 * 22 * 3, 38 * 22 * 3 / 2, 38, 22).ok());
    struct Bad {
        size_t dst_size, src_size;
        int64_t w, h;
        const char* needle;
    } bad[] = {
        {37 * 22 * 3, 37 * 22 * 3 / 2, 37, 22, "even"},
        {38 * 21 * 3, 38 * 21 * 3 / 2, 38, 21, "even"},
        {0, 0, 0, 22, "even"},
        {3, 1, 1, 1, "even"},
        {38 * 22 * 3, 38 * 22, 38, 22, "do not match"},           // Y plane only
        {38 * 22 * 3, 38 * 22 * 3 / 2 + 2, 38, 22, "do not match"},
        {38 * 22 * 4, 38 * 22 * 3 / 2, 38, 22, "do not match"},   // RGBA-sized output
    };
    for (const Bad& b : bad) {
        loom::Status st = check_nv12_args(b.dst_size, b.src_size, b.w, b.h);
        EXPECT_EQ(st.code(), StatusCode::INVALID_ARGUMENT) << b.needle;
        EXPECT_NE(st.message().find(b.needle), std::string::npos) << st.to_string();
    }
}

// ---- through the runtime -------------------------------------------------------------------

TEST(MediaStream, ResizeAndNv12OnTheMediaEngine) {
    auto spec = load_device_spec("edge");
    ASSERT_TRUE(spec.ok());
    ThreadPool pool(2);
    DeviceOptions opt;
    opt.pool = &pool;
    auto dev_r = Device::create(*spec, opt);
    ASSERT_TRUE(dev_r.ok()) << dev_r.status().to_string();
    auto& dev = *dev_r;

    const int64_t w = 64, h = 48, dw = 40, dh = 30;
    std::mt19937 rng(12);
    auto nv12 = random_bytes(rng, size_t(w * h * 3 / 2));
    auto d_nv12 = dev->malloc(nv12.size(), "nv12"), d_rgb = dev->malloc(size_t(w * h * 3), "rgb"),
         d_small = dev->malloc(size_t(dw * dh * 3), "small");
    ASSERT_TRUE(d_nv12.ok() && d_rgb.ok() && d_small.ok());
    Stream st = dev->create_stream();
    Event before = dev->create_event(), after_convert = dev->create_event(), after_resize = dev->create_event();
    ASSERT_TRUE(st.copy_h2d(d_nv12->as<uint8_t>(), pageable(nv12)).ok());
    ASSERT_TRUE(st.record(before).ok());
    ASSERT_TRUE(st.media_nv12_to_rgb(d_rgb->as<uint8_t>(), d_nv12->as<uint8_t>(), w, h).ok());
    ASSERT_TRUE(st.record(after_convert).ok());
    ASSERT_TRUE(st.media_resize(d_small->as<uint8_t>(), dw, dh, d_rgb->as<uint8_t>(), w, h, 3).ok());
    ASSERT_TRUE(st.record(after_resize).ok());
    std::vector<uint8_t> got(size_t(dw * dh * 3));
    ASSERT_TRUE(st.copy_d2h(pageable_out(got), DevicePtr<const uint8_t>(d_small->as<uint8_t>())).ok());
    // Submission checks the sizes at once.
    loom::Status odd = st.media_nv12_to_rgb(d_rgb->as<uint8_t>(), d_nv12->as<uint8_t>(), w - 1, h);
    EXPECT_EQ(odd.code(), StatusCode::INVALID_ARGUMENT);
    loom::Status wrong = st.media_resize(d_small->as<uint8_t>(), dw, dh, d_rgb->as<uint8_t>(), w, h, 4);
    EXPECT_EQ(wrong.code(), StatusCode::INVALID_ARGUMENT);
    ASSERT_TRUE(st.synchronize().ok());

    // The same two steps on the host give the same bytes.
    std::vector<uint8_t> rgb(size_t(w * h * 3)), want(got.size());
    nv12_to_rgb_u8(rgb.data(), nv12.data(), w, h, pool);
    resize_bilinear_u8(want.data(), dw, dh, rgb.data(), w, h, 3, pool);
    EXPECT_EQ(got, want);

    // Each task takes at least the media engine's per-task overhead of simulated time.
    auto convert_ms = Event::elapsed_ms(before, after_convert);
    auto resize_ms = Event::elapsed_ms(after_convert, after_resize);
    ASSERT_TRUE(convert_ms.ok() && resize_ms.ok());
    EXPECT_GE(*convert_ms * 1e3, spec->media_task_overhead_us);
    EXPECT_GE(*resize_ms * 1e3, spec->media_task_overhead_us);
    EXPECT_LT(*resize_ms * 1e3, spec->media_task_overhead_us + 100.0);  // 3072 pixels at 500 Mpix/s: ~6 us more
    DeviceStats s = dev->stats();
    EXPECT_EQ(s.engines[static_cast<size_t>(Engine::MEDIA)].tasks, 2u);
    EXPECT_GE(s.engines[static_cast<size_t>(Engine::MEDIA)].busy,
              2 * sim_from_ns(spec->media_task_overhead_us * 1e3));
    EXPECT_GT(s.sim_now, sim_from_ns(spec->media_task_overhead_us * 1e3));
}

}  // namespace
