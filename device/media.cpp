#include "device/media.hpp"

#include <algorithm>
#include <bit>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
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

// ---- frames and tensors ----------------------------------------------------------------------

namespace {

bool color_valid(const ColorInfo& c) {
    return c.matrix <= ColorMatrix::BT2020_NCL && c.range <= ColorRange::FULL;
}

Status check_frame(const FrameLayout& frame, const ColorInfo& color, size_t frame_bytes) {
    if (frame.format > PixelFormat::BGR24)
        return make_error(StatusCode::INVALID_ARGUMENT, "frame: pixel format {} is not one of yuv420p, nv12, "
                          "yuv420p10le, p010le, rgb24, bgr24", static_cast<int>(frame.format));
    LOOM_TRY(frame.check());
    if (!color_valid(color))
        return make_error(StatusCode::INVALID_ARGUMENT, "frame: colour matrix {} / range {} is not a known value",
                          static_cast<int>(color.matrix), static_cast<int>(color.range));
    if (frame_bytes != frame.bytes())
        return make_error(StatusCode::INVALID_ARGUMENT, "frame {}x{} {}: buffer of {} bytes, the layout needs {}",
                          frame.width, frame.height, pixel_format_name(frame.format), frame_bytes, frame.bytes());
    return {};
}

Status check_tensor(const TensorFormat& tf, size_t tensor_bytes) {
    LOOM_TRY(tf.check());
    if (tensor_bytes != tf.bytes())
        return make_error(StatusCode::INVALID_ARGUMENT, "tensor 1x3x{}x{} {}: buffer of {} bytes, the shape needs {}",
                          tf.height, tf.width, dtype_name(tf.dtype), tensor_bytes, tf.bytes());
    return {};
}

// The arithmetic of one conversion, fixed per call. Normalised values: E'y in [0, 1], E'cb and
// E'cr in [-0.5, 0.5], RGB in [0, 1].
struct YuvMath {
    float y_mul, y_add, c_mul, c_add;  // code -> E'
    float y_scale, y_offset, c_scale, c_offset, code_max;  // E' -> code
    float kr, kg, kb;
    float r_v, g_u, g_v, b_u;  // R = Y + r_v Cr, G = Y + g_u Cb + g_v Cr, B = Y + b_u Cb
    float cb_mul, cr_mul;      // Cb = (B - Y) cb_mul, Cr = (R - Y) cr_mul
    unsigned shift, mask;      // code = (stored >> shift) & mask
};

YuvMath yuv_math(const ColorInfo& c, PixelFormat format) {
    double kr = 0.299, kb = 0.114;  // ITU-R BT.601
    if (c.matrix == ColorMatrix::BT709) kr = 0.2126, kb = 0.0722;
    if (c.matrix == ColorMatrix::BT2020_NCL) kr = 0.2627, kb = 0.0593;
    const double kg = 1 - kr - kb;
    const int depth = bit_depth(format);
    const double unit = static_cast<double>(1 << (depth - 8)), code_max = static_cast<double>((1 << depth) - 1);
    double ys = 219 * unit, yo = 16 * unit, cs = 224 * unit, co = 128 * unit;
    if (c.range == ColorRange::FULL) ys = cs = code_max, yo = 0, co = static_cast<double>(1 << (depth - 1));
    YuvMath m;
    m.y_mul = static_cast<float>(1 / ys), m.y_add = static_cast<float>(-yo / ys);
    m.c_mul = static_cast<float>(1 / cs), m.c_add = static_cast<float>(-co / cs);
    m.y_scale = static_cast<float>(ys), m.y_offset = static_cast<float>(yo);
    m.c_scale = static_cast<float>(cs), m.c_offset = static_cast<float>(co);
    m.code_max = static_cast<float>(code_max);
    m.kr = static_cast<float>(kr), m.kg = static_cast<float>(kg), m.kb = static_cast<float>(kb);
    m.r_v = static_cast<float>(2 * (1 - kr));
    m.g_u = static_cast<float>(-2 * (1 - kb) * kb / kg);
    m.g_v = static_cast<float>(-2 * (1 - kr) * kr / kg);
    m.b_u = static_cast<float>(2 * (1 - kb));
    m.cb_mul = static_cast<float>(1 / (2 * (1 - kb)));
    m.cr_mul = static_cast<float>(1 / (2 * (1 - kr)));
    m.shift = format == PixelFormat::P010 ? 6 : 0;
    m.mask = static_cast<unsigned>(code_max);
    return m;
}

// Where the planes of a frame start, and the element step between chroma samples of one plane
// (2 for the interleaved UV of NV12 / P010).
struct FramePlanes {
    size_t y_row, c_row;  // bytes per row of the Y plane and of the U/V (or UV) plane
    size_t u, v;          // byte offsets of the first U and V sample
};

FramePlanes frame_planes(const FrameLayout& l) {
    const size_t sb = sample_bytes(l.format);
    const size_t cw = static_cast<size_t>(l.chroma_width());
    if (semi_planar(l.format)) return {static_cast<size_t>(l.width) * sb, 2 * cw * sb, l.u_offset(), l.u_offset() + sb};
    return {static_cast<size_t>(l.width) * sb, cw * sb, l.u_offset(), l.v_offset()};
}

template <typename S>
inline unsigned load_sample(const uint8_t* p, size_t i) {
    S v;
    std::memcpy(&v, p + i * sizeof(S), sizeof(S));
    return v;
}

template <typename S>
inline void store_sample(uint8_t* p, size_t i, unsigned v) {
    const S s = static_cast<S>(v);
    std::memcpy(p + i * sizeof(S), &s, sizeof(S));
}

// Clamps to [0, 1], NaN to 0. On the bits with integer selects: float compares would make GCC
// keep branches (they may trap), and this loop body must vectorise.
inline float clamp01(float v) {
    int32_t i = std::bit_cast<int32_t>(v);
    i &= ~(i >> 31);                      // negative (and -NaN) -> +0
    i = i > 0x7f800000 ? 0 : i;           // +NaN -> 0
    i = i < 0x3f800000 ? i : 0x3f800000;  // above 1 (and +inf) -> 1
    return std::bit_cast<float>(i);
}

// Rounds a code to nearest and clamps it to [0, code_max] (integer selects, as above).
inline unsigned round_code(float v, int32_t code_max) {
    int32_t q = static_cast<int32_t>(v + 0.5f);
    q = q > 0 ? q : 0;
    return static_cast<unsigned>(q < code_max ? q : code_max);
}

// out[i] = code(r0, i) * (1 - w1) + code(r1, i) * w1 for n samples `step` elements apart.
template <typename S, size_t kStep>
void lerp_codes(float* out, const uint8_t* r0, const uint8_t* r1, float w1, size_t n, const YuvMath& m) {
    if (w1 == 0.f) r1 = r0;
    const float w0 = 1.f - w1;
    const unsigned shift = m.shift, mask = m.mask;
    for (size_t i = 0; i < n; ++i) {
        const float a = static_cast<float>((load_sample<S>(r0, i * kStep) >> shift) & mask);
        const float b = static_cast<float>((load_sample<S>(r1, i * kStep) >> shift) & mask);
        out[i] = a * w0 + b * w1;
    }
}

// Bilinear taps along one axis: output sample o reads src[i0] * (1 - w) + src[i1] * w.
struct Taps {
    std::vector<int32_t> i0, i1;
    std::vector<float> w;
};

// Taps for n_out samples over n_src luma samples (half-pixel centres, clamped), and for the
// chroma samples at the same points: chroma coordinate = luma coordinate / 2 + chroma_shift.
void make_taps(int64_t n_src, int64_t n_out, int64_t n_chroma, double chroma_shift, Taps& luma, Taps& chroma) {
    auto put = [](Taps& t, double f, int64_t n) {
        f = std::clamp(f, 0.0, static_cast<double>(n - 1));
        const auto i0 = static_cast<int32_t>(f);
        t.i0.push_back(i0);
        t.i1.push_back(std::min<int32_t>(i0 + 1, static_cast<int32_t>(n - 1)));
        t.w.push_back(static_cast<float>(f - i0));
    };
    const double scale = static_cast<double>(n_src) / static_cast<double>(n_out);
    for (int64_t o = 0; o < n_out; ++o) {
        const double f = std::clamp((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0, static_cast<double>(n_src - 1));
        put(luma, f, n_src);
        put(chroma, f * 0.5 + chroma_shift, n_chroma);
    }
}

// Planes of the tensor in R, G, B order with their normalisation (x * scale + offset).
template <typename T>
struct RgbPlanes {
    T* p[3];
    float scale[3], offset[3];
};

template <typename T>
RgbPlanes<T> rgb_planes(T* tensor, const TensorFormat& tf, bool inverse) {
    const size_t plane = static_cast<size_t>(tf.height * tf.width);
    RgbPlanes<T> r;
    for (size_t c = 0; c < 3; ++c) {
        const size_t t = tf.order == ChannelOrder::RGB ? c : 2 - c;  // tensor channel of colour c
        r.p[c] = tensor + t * plane;
        // Forward: (x - mean) / std; inverse: x * std + mean.
        r.scale[c] = inverse ? tf.std[t] : 1.f / tf.std[t];
        r.offset[c] = inverse ? tf.mean[t] : -tf.mean[t] / tf.std[t];
    }
    return r;
}

template <typename S, size_t kStep, typename T>
void frame_to_tensor_impl(T* tensor, const TensorFormat& tf, const uint8_t* frame, const FrameLayout& l,
                          const YuvMath& m, ThreadPool& pool) {
    const FramePlanes fp = frame_planes(l);
    const auto w = static_cast<size_t>(l.width), cw = static_cast<size_t>(l.chroma_width());
    const auto tw = static_cast<size_t>(tf.width);
    const bool same_width = tf.width == l.width;
    Taps lx, cx, ly, cy;
    make_taps(l.width, tf.width, l.chroma_width(), 0.0, lx, cx);       // left-co-sited
    make_taps(l.height, tf.height, l.chroma_height(), -0.25, ly, cy);  // centred between rows
    const RgbPlanes<T> out = rgb_planes(tensor, tf, false);
    pool.parallel_for(static_cast<size_t>(tf.height), 8, [&](size_t b, size_t e) {
        // Rows of codes: luma and chroma at source width, then all three at tensor width.
        std::vector<float> buf(w + 2 * (cw + 1) + 3 * (tw + 1));
        float* src_y = buf.data();
        float* src_u = src_y + w;
        float* src_v = src_u + cw + 1;
        float* row_y = src_v + cw + 1;
        float* row_u = row_y + tw + 1;
        float* row_v = row_u + tw + 1;
        for (size_t oy = b; oy < e; ++oy) {
            lerp_codes<S, 1>(src_y, frame + ly.i0[oy] * fp.y_row, frame + ly.i1[oy] * fp.y_row, ly.w[oy], w, m);
            lerp_codes<S, kStep>(src_u, frame + fp.u + cy.i0[oy] * fp.c_row, frame + fp.u + cy.i1[oy] * fp.c_row,
                                 cy.w[oy], cw, m);
            lerp_codes<S, kStep>(src_v, frame + fp.v + cy.i0[oy] * fp.c_row, frame + fp.v + cy.i1[oy] * fp.c_row,
                                 cy.w[oy], cw, m);
            const float* yy = src_y;
            if (same_width) {
                // Chroma sample c sits on column 2c: copy it there, average into column 2c + 1.
                src_u[cw] = src_u[cw - 1];
                src_v[cw] = src_v[cw - 1];
                for (size_t c = 0; c < cw; ++c) {
                    row_u[2 * c] = src_u[c];
                    row_u[2 * c + 1] = (src_u[c] + src_u[c + 1]) * 0.5f;
                    row_v[2 * c] = src_v[c];
                    row_v[2 * c + 1] = (src_v[c] + src_v[c + 1]) * 0.5f;
                }
            } else {
                for (size_t x = 0; x < tw; ++x) {
                    const float a = lx.w[x], c = cx.w[x];
                    row_y[x] = src_y[lx.i0[x]] * (1.f - a) + src_y[lx.i1[x]] * a;
                    row_u[x] = src_u[cx.i0[x]] * (1.f - c) + src_u[cx.i1[x]] * c;
                    row_v[x] = src_v[cx.i0[x]] * (1.f - c) + src_v[cx.i1[x]] * c;
                }
                yy = row_y;
            }
            // Locals, so that the compiler sees no float store can alias them and vectorises.
            const float y_mul = m.y_mul, y_add = m.y_add, c_mul = m.c_mul, c_add = m.c_add;
            const float r_v = m.r_v, g_u = m.g_u, g_v = m.g_v, b_u = m.b_u;
            const float s0 = out.scale[0], s1 = out.scale[1], s2 = out.scale[2];
            const float o0 = out.offset[0], o1 = out.offset[1], o2 = out.offset[2];
            T* __restrict p0 = out.p[0] + oy * tw;
            T* __restrict p1 = out.p[1] + oy * tw;
            T* __restrict p2 = out.p[2] + oy * tw;
            for (size_t x = 0; x < tw; ++x) {
                const float y = yy[x] * y_mul + y_add;
                const float u = row_u[x] * c_mul + c_add;
                const float v = row_v[x] * c_mul + c_add;
                store_from_f32(p0, x, clamp01(y + r_v * v) * s0 + o0);
                store_from_f32(p1, x, clamp01(y + g_u * u + g_v * v) * s1 + o1);
                store_from_f32(p2, x, clamp01(y + b_u * u) * s2 + o2);
            }
        }
    });
}

// Weights of luma rows 2k-1 .. 2k+2 (clamped to the frame) for chroma row k: the inverse of
// frame_to_tensor's vertical interpolation. An odd height's last chroma row sits half a row
// below the frame and is extrapolated from the last two rows.
std::array<float, 4> chroma_row_weights(int64_t k, int64_t height) {
    if (height % 2 && k == height / 2) {
        if (height == 1) return {0.f, 1.f, 0.f, 0.f};
        return {-0.5f, 1.5f, 0.f, 0.f};
    }
    return {-0.25f, 0.75f, 0.75f, -0.25f};
}

template <typename S, size_t kStep, typename T>
void tensor_to_frame_impl(uint8_t* frame, const FrameLayout& l, const YuvMath& m, const T* tensor,
                          const TensorFormat& tf, ThreadPool& pool) {
    const FramePlanes fp = frame_planes(l);
    const auto w = static_cast<size_t>(l.width), cw = static_cast<size_t>(l.chroma_width());
    const int64_t h = l.height;
    const RgbPlanes<const T> in = rgb_planes(tensor, tf, true);
    pool.parallel_for(static_cast<size_t>(l.chroma_height()), 8, [&](size_t b, size_t e) {
        // Four luma rows of E'y, E'cb, E'cr in a ring (slot = row & 3), and the vertically
        // filtered chroma with two replicated columns either side.
        std::vector<float> buf(12 * w + 2 * (w + 4));
        auto slot = [&](int64_t row, size_t plane) {
            return buf.data() + (static_cast<size_t>(row & 3) * 3 + plane) * w;
        };
        float* acc_u = buf.data() + 12 * w + 2;
        float* acc_v = acc_u + w + 4;
        const auto kb = static_cast<int64_t>(b), ke = static_cast<int64_t>(e);
        int64_t next = 2 * kb - 1;
        for (int64_t k = kb; k < ke; ++k) {
            for (; next <= 2 * k + 2; ++next) {
                const size_t src = static_cast<size_t>(std::clamp<int64_t>(next, 0, h - 1)) * w;
                float* __restrict py = slot(next, 0);
                float* __restrict pu = slot(next, 1);
                float* __restrict pv = slot(next, 2);
                const T* __restrict i0 = in.p[0] + src;
                const T* __restrict i1 = in.p[1] + src;
                const T* __restrict i2 = in.p[2] + src;
                // Locals, so that the compiler sees no float store can alias them and vectorises.
                const float s0 = in.scale[0], s1 = in.scale[1], s2 = in.scale[2];
                const float o0 = in.offset[0], o1 = in.offset[1], o2 = in.offset[2];
                const float wr = m.kr, wg = m.kg, wb = m.kb, cb_mul = m.cb_mul, cr_mul = m.cr_mul;
                for (size_t x = 0; x < w; ++x) {
                    const float r = clamp01(load_as_f32(i0, x) * s0 + o0);
                    const float g = clamp01(load_as_f32(i1, x) * s1 + o1);
                    const float bl = clamp01(load_as_f32(i2, x) * s2 + o2);
                    const float y = wr * r + wg * g + wb * bl;
                    py[x] = y;
                    pu[x] = (bl - y) * cb_mul;
                    pv[x] = (r - y) * cr_mul;
                }
                if (next < 2 * kb || next >= std::min(2 * ke, h)) continue;  // another chunk's row
                uint8_t* dst = frame + static_cast<size_t>(next) * fp.y_row;
                const float y_scale = m.y_scale, y_offset = m.y_offset;
                const auto code_max = static_cast<int32_t>(m.code_max);
                const unsigned shift = m.shift;
                for (size_t x = 0, n = w; x < n; ++x)  // n: a local, which no byte store can alias
                    store_sample<S>(dst, x, round_code(py[x] * y_scale + y_offset, code_max) << shift);
            }
            const std::array<float, 4> wv = chroma_row_weights(k, h);
            const float* u4[4] = {slot(2 * k - 1, 1), slot(2 * k, 1), slot(2 * k + 1, 1), slot(2 * k + 2, 1)};
            const float* v4[4] = {slot(2 * k - 1, 2), slot(2 * k, 2), slot(2 * k + 1, 2), slot(2 * k + 2, 2)};
            for (size_t x = 0; x < w; ++x) {
                acc_u[x] = wv[0] * u4[0][x] + wv[1] * u4[1][x] + wv[2] * u4[2][x] + wv[3] * u4[3][x];
                acc_v[x] = wv[0] * v4[0][x] + wv[1] * v4[1][x] + wv[2] * v4[2][x] + wv[3] * v4[3][x];
            }
            for (float* a : {acc_u, acc_v}) {
                a[-2] = a[-1] = a[0];
                a[w] = a[w + 1] = a[w - 1];
            }
            // LeGall 5/3 low-pass centred on column 2c, the chroma sample's site.
            uint8_t* du = frame + fp.u + static_cast<size_t>(k) * fp.c_row;
            uint8_t* dv = frame + fp.v + static_cast<size_t>(k) * fp.c_row;
            for (size_t c = 0, n = cw; c < n; ++c) {
                const float* a = acc_u + 2 * c - 2;
                const float* z = acc_v + 2 * c - 2;
                const float u = 0.75f * a[2] + 0.25f * (a[1] + a[3]) - 0.125f * (a[0] + a[4]);
                const float v = 0.75f * z[2] + 0.25f * (z[1] + z[3]) - 0.125f * (z[0] + z[4]);
                const auto code_max = static_cast<int32_t>(m.code_max);
                store_sample<S>(du, c * kStep, round_code(u * m.c_scale + m.c_offset, code_max) << m.shift);
                store_sample<S>(dv, c * kStep, round_code(v * m.c_scale + m.c_offset, code_max) << m.shift);
            }
        }
    });
}

// Packed RGB frames (RGB24, BGR24): codes are R'G'B' in [0, 255], normalised as code / 255 (no
// matrix, no range), resized bilinearly with the luma's taps. `red` is the byte of red in a pixel.
template <typename T>
void rgb_frame_to_tensor_impl(T* tensor, const TensorFormat& tf, const uint8_t* frame, const FrameLayout& l,
                              ThreadPool& pool) {
    const auto row = static_cast<size_t>(l.width) * 3, tw = static_cast<size_t>(tf.width);
    const size_t red = l.format == PixelFormat::RGB24 ? 0 : 2;
    const size_t at[3] = {red, 1, 2 - red};  // byte of colour c in a pixel
    Taps lx, cx, ly, cy;
    make_taps(l.width, tf.width, l.chroma_width(), 0.0, lx, cx);
    make_taps(l.height, tf.height, l.chroma_height(), 0.0, ly, cy);
    const RgbPlanes<T> out = rgb_planes(tensor, tf, false);
    pool.parallel_for(static_cast<size_t>(tf.height), 8, [&](size_t b, size_t e) {
        std::vector<float> src(row);
        for (size_t oy = b; oy < e; ++oy) {
            const uint8_t* r0 = frame + static_cast<size_t>(ly.i0[oy]) * row;
            const uint8_t* r1 = frame + static_cast<size_t>(ly.i1[oy]) * row;
            const float w1 = ly.w[oy] == 0.f ? 0.f : ly.w[oy], w0 = 1.f - w1;
            for (size_t i = 0; i < row; ++i) src[i] = static_cast<float>(r0[i]) * w0 + static_cast<float>(r1[i]) * w1;
            for (size_t c = 0; c < 3; ++c) {
                const float s = out.scale[c] * (1.f / 255.f), o = out.offset[c];
                T* __restrict p = out.p[c] + oy * tw;
                const float* q = src.data() + at[c];
                if (tf.width == l.width) {
                    for (size_t x = 0; x < tw; ++x) store_from_f32(p, x, q[3 * x] * s + o);
                } else {
                    for (size_t x = 0; x < tw; ++x) {
                        const float a = lx.w[x];
                        const float v = q[3 * static_cast<size_t>(lx.i0[x])] * (1.f - a) +
                                        q[3 * static_cast<size_t>(lx.i1[x])] * a;
                        store_from_f32(p, x, v * s + o);
                    }
                }
            }
        }
    });
}

template <typename T>
void tensor_to_rgb_frame_impl(uint8_t* frame, const FrameLayout& l, const T* tensor, const TensorFormat& tf,
                              ThreadPool& pool) {
    const auto w = static_cast<size_t>(l.width);
    const size_t red = l.format == PixelFormat::RGB24 ? 0 : 2;
    const size_t at[3] = {red, 1, 2 - red};
    const RgbPlanes<const T> in = rgb_planes(tensor, tf, true);
    pool.parallel_for(static_cast<size_t>(l.height), 8, [&](size_t b, size_t e) {
        for (size_t y = b; y < e; ++y) {
            uint8_t* dst = frame + y * w * 3;
            for (size_t c = 0; c < 3; ++c) {
                const T* __restrict src = in.p[c] + y * w;
                const float s = in.scale[c], o = in.offset[c];
                uint8_t* d = dst + at[c];
                for (size_t x = 0; x < w; ++x)
                    d[3 * x] = static_cast<uint8_t>(round_code(clamp01(load_as_f32(src, x) * s + o) * 255.f, 255));
            }
        }
    });
}

// Calls fn.template operator()<S, kStep>() for the frame's sample type and chroma step (4:2:0
// formats only).
template <typename Fn>
void with_frame_format(PixelFormat f, Fn&& fn) {
    switch (f) {
    case PixelFormat::YUV420P: fn.template operator()<uint8_t, 1>(); return;
    case PixelFormat::NV12: fn.template operator()<uint8_t, 2>(); return;
    case PixelFormat::YUV420P10: fn.template operator()<uint16_t, 1>(); return;
    case PixelFormat::P010: fn.template operator()<uint16_t, 2>(); return;
    case PixelFormat::RGB24:
    case PixelFormat::BGR24: break;
    }
    LOOM_ASSERT_MSG(false, "pixel format {}", static_cast<int>(f));
}

}  // namespace

size_t TensorFormat::bytes() const { return 3 * static_cast<size_t>(height * width) * dtype_size(dtype); }

Status TensorFormat::check() const {
    if (dtype != DType::F32 && dtype != DType::F16)
        return make_error(StatusCode::INVALID_ARGUMENT, "tensor: dtype {} must be f32 or f16", dtype_name(dtype));
    if (order > ChannelOrder::BGR)
        return make_error(StatusCode::INVALID_ARGUMENT, "tensor: channel order {} must be RGB or BGR",
                          static_cast<int>(order));
    if (height < 1 || width < 1 || height > kFrameSideMax || width > kFrameSideMax)
        return make_error(StatusCode::INVALID_ARGUMENT, "tensor: height x width {}x{} must be in [1, {}]", height,
                          width, kFrameSideMax);
    for (size_t c = 0; c < 3; ++c) {
        if (!std::isfinite(mean[c]))
            return make_error(StatusCode::INVALID_ARGUMENT, "tensor: mean[{}] = {} must be finite", c, mean[c]);
        if (!std::isfinite(std[c]) || std[c] == 0.f || !std::isfinite(1.f / std[c]))
            return make_error(StatusCode::INVALID_ARGUMENT, "tensor: std[{}] = {} must be finite and non-zero", c,
                              std[c]);
    }
    return {};
}

Status check_frame_to_tensor_args(const FrameLayout& frame, const ColorInfo& color, size_t frame_bytes,
                                  const TensorFormat& tensor, size_t tensor_bytes) {
    LOOM_TRY(check_frame(frame, color, frame_bytes));
    return check_tensor(tensor, tensor_bytes);
}

Status check_tensor_to_frame_args(const TensorFormat& tensor, size_t tensor_bytes, const FrameLayout& frame,
                                  const ColorInfo& color, size_t frame_bytes) {
    LOOM_TRY(check_tensor(tensor, tensor_bytes));
    LOOM_TRY(check_frame(frame, color, frame_bytes));
    if (tensor.height != frame.height || tensor.width != frame.width)
        return make_error(StatusCode::INVALID_ARGUMENT, "tensor 1x3x{}x{} does not match the frame's {}x{} (no resize "
                          "on the way out)", tensor.height, tensor.width, frame.width, frame.height);
    return {};
}

void frame_to_tensor(uint8_t* tensor, const TensorFormat& tf, const uint8_t* frame, const FrameLayout& layout,
                     const ColorInfo& color, ThreadPool& pool) {
    if (packed_rgb(layout.format)) {
        if (tf.dtype == DType::F16)
            rgb_frame_to_tensor_impl(reinterpret_cast<f16*>(tensor), tf, frame, layout, pool);
        else
            rgb_frame_to_tensor_impl(reinterpret_cast<float*>(tensor), tf, frame, layout, pool);
        return;
    }
    const YuvMath m = yuv_math(color, layout.format);
    with_frame_format(layout.format, [&]<typename S, size_t kStep>() {
        if (tf.dtype == DType::F16)
            frame_to_tensor_impl<S, kStep>(reinterpret_cast<f16*>(tensor), tf, frame, layout, m, pool);
        else
            frame_to_tensor_impl<S, kStep>(reinterpret_cast<float*>(tensor), tf, frame, layout, m, pool);
    });
}

void tensor_to_frame(uint8_t* frame, const FrameLayout& layout, const ColorInfo& color, const uint8_t* tensor,
                     const TensorFormat& tf, ThreadPool& pool) {
    if (packed_rgb(layout.format)) {
        if (tf.dtype == DType::F16)
            tensor_to_rgb_frame_impl(frame, layout, reinterpret_cast<const f16*>(tensor), tf, pool);
        else
            tensor_to_rgb_frame_impl(frame, layout, reinterpret_cast<const float*>(tensor), tf, pool);
        return;
    }
    const YuvMath m = yuv_math(color, layout.format);
    with_frame_format(layout.format, [&]<typename S, size_t kStep>() {
        if (tf.dtype == DType::F16)
            tensor_to_frame_impl<S, kStep>(frame, layout, m, reinterpret_cast<const f16*>(tensor), tf, pool);
        else
            tensor_to_frame_impl<S, kStep>(frame, layout, m, reinterpret_cast<const float*>(tensor), tf, pool);
    });
}


}  // namespace loom::device
