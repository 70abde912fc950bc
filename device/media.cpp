#include "device/media.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/thread_pool.hpp"

namespace loom::device {

namespace {
constexpr int64_t kMaxSide = 1 << 16;
uint8_t clamp_u8(int v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }
}  // namespace

Status check_resize_args(size_t dst_size, int64_t dst_w, int64_t dst_h, size_t src_size, int64_t src_w,
                         int64_t src_h, int64_t channels) {
    if (dst_w <= 0 || dst_h <= 0 || src_w <= 0 || src_h <= 0 || dst_w > kMaxSide || dst_h > kMaxSide ||
        src_w > kMaxSide || src_h > kMaxSide)
        return make_error(StatusCode::INVALID_ARGUMENT, "media_resize: sizes {}x{} -> {}x{} must be in [1, {}]", src_w,
                          src_h, dst_w, dst_h, kMaxSide);
    if (channels < 1 || channels > 4)
        return make_error(StatusCode::INVALID_ARGUMENT, "media_resize: channels = {} must be 1 to 4", channels);
    if (dst_size != static_cast<size_t>(dst_w * dst_h * channels) ||
        src_size != static_cast<size_t>(src_w * src_h * channels))
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "media_resize: buffers of {} and {} bytes do not match {}x{}x{} and {}x{}x{}", dst_size,
                          src_size, dst_w, dst_h, channels, src_w, src_h, channels);
    return {};
}

Status check_nv12_args(size_t dst_size, size_t src_size, int64_t width, int64_t height) {
    if (width <= 0 || height <= 0 || width > kMaxSide || height > kMaxSide || width % 2 || height % 2)
        return make_error(StatusCode::INVALID_ARGUMENT, "nv12_to_rgb: {}x{} must be even and in [2, {}]", width, height,
                          kMaxSide);
    if (src_size != static_cast<size_t>(width * height * 3 / 2) || dst_size != static_cast<size_t>(width * height * 3))
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "nv12_to_rgb: buffers of {} (NV12) and {} (RGB) bytes do not match {}x{}", src_size, dst_size,
                          width, height);
    return {};
}

void resize_bilinear_u8(uint8_t* dst, int64_t dst_w, int64_t dst_h, const uint8_t* src, int64_t src_w,
                        int64_t src_h, int64_t channels, ThreadPool& pool) {
    // Horizontal taps are the same for every row: compute them once (11-bit fixed point).
    struct Tap {
        int64_t x0, x1;
        int w1;
    };
    std::vector<Tap> taps(static_cast<size_t>(dst_w));
    double sx = static_cast<double>(src_w) / static_cast<double>(dst_w);
    for (int64_t x = 0; x < dst_w; ++x) {
        double fx = std::max(0.0, (static_cast<double>(x) + 0.5) * sx - 0.5);
        int64_t x0 = std::min(static_cast<int64_t>(fx), src_w - 1);
        int64_t x1 = std::min(x0 + 1, src_w - 1);
        taps[static_cast<size_t>(x)] = {x0, x1, static_cast<int>(std::lround((fx - static_cast<double>(x0)) * 2048))};
    }
    double sy = static_cast<double>(src_h) / static_cast<double>(dst_h);
    pool.parallel_for(static_cast<size_t>(dst_h), 16, [&](size_t b, size_t e) {
        for (size_t yi = b; yi < e; ++yi) {
            double fy = std::max(0.0, (static_cast<double>(yi) + 0.5) * sy - 0.5);
            int64_t y0 = std::min(static_cast<int64_t>(fy), src_h - 1);
            int64_t y1 = std::min(y0 + 1, src_h - 1);
            int wy1 = static_cast<int>(std::lround((fy - static_cast<double>(y0)) * 2048));
            int wy0 = 2048 - wy1;
            const uint8_t* r0 = src + y0 * src_w * channels;
            const uint8_t* r1 = src + y1 * src_w * channels;
            uint8_t* out = dst + static_cast<int64_t>(yi) * dst_w * channels;
            for (int64_t x = 0; x < dst_w; ++x) {
                const Tap& t = taps[static_cast<size_t>(x)];
                int wx1 = t.w1, wx0 = 2048 - t.w1;
                for (int64_t c = 0; c < channels; ++c) {
                    int64_t top = r0[t.x0 * channels + c] * wx0 + r0[t.x1 * channels + c] * wx1;
                    int64_t bot = r1[t.x0 * channels + c] * wx0 + r1[t.x1 * channels + c] * wx1;
                    int64_t v = (top * wy0 + bot * wy1 + (1 << 21)) >> 22;
                    out[x * channels + c] = clamp_u8(static_cast<int>(v));
                }
            }
        }
    });
}

void nv12_to_rgb_u8(uint8_t* dst_rgb, const uint8_t* src_nv12, int64_t width, int64_t height, ThreadPool& pool) {
    const uint8_t* uv_plane = src_nv12 + width * height;
    pool.parallel_for(static_cast<size_t>(height), 16, [&](size_t b, size_t e) {
        for (size_t yi = b; yi < e; ++yi) {
            const uint8_t* yrow = src_nv12 + static_cast<int64_t>(yi) * width;
            const uint8_t* uv = uv_plane + static_cast<int64_t>(yi / 2) * width;
            uint8_t* out = dst_rgb + static_cast<int64_t>(yi) * width * 3;
            for (int64_t x = 0; x < width; ++x) {
                // BT.601 limited range, 8-bit fixed point (the coefficients of ITU-R BT.601 x 256).
                int c = 298 * (yrow[x] - 16);
                int d = uv[(x & ~int64_t{1})] - 128;
                int f = uv[(x & ~int64_t{1}) + 1] - 128;
                out[3 * x + 0] = clamp_u8((c + 409 * f + 128) >> 8);
                out[3 * x + 1] = clamp_u8((c - 100 * d - 208 * f + 128) >> 8);
                out[3 * x + 2] = clamp_u8((c + 516 * d + 128) >> 8);
            }
        }
    });
}

}  // namespace loom::device
