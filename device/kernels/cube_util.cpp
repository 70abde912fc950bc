#include "device/kernels/cube_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/thread_pool.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/quantize.hpp"
#include "device/kernels/cpu/vmath.hpp"
#include "device/kernels/op_util.hpp"
#include "device/types.hpp"

namespace loom::device::ops {

Result<Activation> parse_activation(const KernelAttrs& attrs) {
    LOOM_ASSIGN_OR_RETURN(std::string name, attrs.get_string("activation", "none"));
    Activation a;
    if (name == "none") a.act = cpu::Act::NONE;
    else if (name == "relu") a.act = cpu::Act::RELU;
    else if (name == "leaky_relu") a.act = cpu::Act::LEAKY_RELU;
    else if (name == "prelu") a.act = cpu::Act::PRELU;
    else if (name == "clip") a.act = cpu::Act::CLIP;
    else if (name == "sigmoid") a.act = cpu::Act::SIGMOID;
    else if (name == "hard_swish") a.act = cpu::Act::HARD_SWISH;
    else
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "activation '{}' (none, relu, leaky_relu, prelu, clip, sigmoid or hard_swish)", name);
    if (a.act == cpu::Act::LEAKY_RELU) {
        LOOM_ASSIGN_OR_RETURN(double alpha, attrs.get_float("alpha", 0.01));
        a.alpha = static_cast<float>(alpha);
    } else if (attrs.has("alpha")) {
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'alpha' only applies to activation 'leaky_relu'");
    }
    if (a.act == cpu::Act::CLIP) {
        LOOM_ASSIGN_OR_RETURN(double lo, attrs.get_float("min", -3.4028234663852886e38));
        LOOM_ASSIGN_OR_RETURN(double hi, attrs.get_float("max", 3.4028234663852886e38));
        if (lo > hi) return make_error(StatusCode::INVALID_ARGUMENT, "clip: min {} is above max {}", lo, hi);
        a.alpha = static_cast<float>(lo), a.beta = static_cast<float>(hi);
    } else if (attrs.has("min") || attrs.has("max")) {
        return make_error(StatusCode::INVALID_ARGUMENT, "attributes 'min' and 'max' only apply to activation 'clip'");
    }
    return a;
}

Status check_float_operands(const KernelLaunch& l, std::string_view kernel) {
    const DType dtype = l.inputs[0].dtype;
    if (!is_float(dtype))
        return make_error(StatusCode::UNSUPPORTED, "{}: dtype {} (f32 and f16 are supported)", kernel,
                          dtype_name(dtype));
    if (l.outputs[0].dtype != dtype || (l.inputs[1].dtype != dtype && l.inputs[1].dtype != DType::I8))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: mixed dtypes", kernel);
    return {};
}

Result<Quant> parse_quant(const KernelLaunch& l, std::string_view kernel, std::string_view w_name,
                          std::string_view ws_name, size_t ws_index, std::string_view n_name, int64_t n) {
    const DType wt = l.inputs[1].dtype;
    const TensorRef* ws = optional_input(l, ws_index);
    const bool has_x_scale = l.attrs.has("x_scale");
    Quant q;
    if (wt != DType::I8) {
        if (ws)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: {} (input {}) is given but {} is {} (weight scales apply to i8 weights)", kernel,
                              ws_name, ws_index, w_name, dtype_name(wt));
        if (has_x_scale)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{}: attribute 'x_scale' applies to i8 weights only ({} is {})", kernel, w_name,
                              dtype_name(wt));
        return q;
    }
    if (!ws)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} is i8 and needs its per-channel scales {} (input {})",
                          kernel, w_name, ws_name, ws_index);
    if (!has_x_scale)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: {} is i8 and needs attribute 'x_scale' (the activation's quantization step)", kernel,
                          w_name);
    auto xs = l.attrs.get_float("x_scale");
    if (!xs.ok()) return xs.status().with_context(kernel);
    const float x_scale = static_cast<float>(*xs);
    if (!(x_scale > 0) || !std::isfinite(x_scale))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: attribute 'x_scale' is {} (must be finite and > 0)",
                          kernel, *xs);
    if ((ws->elements() != 1 && ws->elements() != n) || ws->dtype != DType::F32)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} is {} {}, must hold 1 or {} = {} f32 values", kernel,
                          ws_name, shape_str(*ws), dtype_name(ws->dtype), n_name, n);
    q.w_scale = ws;
    q.x_scale = x_scale;
    return q;
}

Status check_int8_reduction(int64_t k_red, std::string_view kernel, std::string_view what) {
    if (k_red > cpu::kGemmIntKMax)
        return make_error(StatusCode::UNSUPPORTED,
                          "{}: the int8 reduction over {} is {} products long; int32 sums hold {} without overflow",
                          kernel, what, k_red, cpu::kGemmIntKMax);
    return {};
}

void quantize_row_i8(const float* in, int64_t n, float x_scale, int8_t* out) {
    // AVX-512: sixteen at a time, the same steps (cpu/quantize.hpp); the SSE2 loop and the scalar
    // one take the rest.
    int64_t i = cpu::isa() == cpu::Isa::AVX512 ? cpu::quantize_row_i8_avx512(in, n, x_scale, out) : 0;
#if defined(__SSE2__)
    // quantize_value's steps on 4 floats at a time (the compiler keeps the scalar loop scalar:
    // under trapping math it will not if-convert the NaN test and the clamps). Bit-identical:
    // the same IEEE division, NaN -> 0 by mask, the clamps (no NaN left), the same rounding add.
    const __m128 scale = _mm_set1_ps(x_scale), lo = _mm_set1_ps(-127.0f), hi = _mm_set1_ps(127.0f);
    const __m128 round = _mm_set1_ps(12582912.0f);
    auto q4 = [&](const float* p) {
        __m128 t = _mm_div_ps(_mm_loadu_ps(p), scale);
        t = _mm_and_ps(t, _mm_cmpeq_ps(t, t));
        t = _mm_min_ps(_mm_max_ps(t, lo), hi);
        return _mm_cvttps_epi32(_mm_sub_ps(_mm_add_ps(t, round), round));  // whole: exact
    };
    for (; i + 16 <= n; i += 16) {
        const __m128i a = _mm_packs_epi32(q4(in + i), q4(in + i + 4));
        const __m128i b = _mm_packs_epi32(q4(in + i + 8), q4(in + i + 12));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packs_epi16(a, b));  // in range: no saturation
    }
#endif
    for (; i < n; ++i) out[i] = static_cast<int8_t>(quantize_value(in[i], x_scale));
}

void quantize_row_i8(const f16* in, int64_t n, float x_scale, int8_t* out) {
    constexpr int64_t kBlock = 256;
    float buf[kBlock];
    for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
        const int64_t m = std::min(kBlock, n - i0);
        for (int64_t i = 0; i < m; ++i) buf[i] = f16_to_f32(in[i0 + i]);
        quantize_row_i8(buf, m, x_scale, out + i0);
    }
}

namespace {

void quantize_row_f32(const float* in, int64_t n, float x_scale, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = quantize_value(in[i], x_scale);
}

void quantize_row_f32(const f16* in, int64_t n, float x_scale, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = quantize_value(f16_to_f32(in[i]), x_scale);
}

template <typename T>
const T* quantize_as(const TensorRef& x, float x_scale, cpu::ScratchScope& scope, ThreadPool& pool) {
    const int64_t n = x.elements();
    T* dst = scope.alloc_as<T>(static_cast<size_t>(n));
    constexpr int64_t kChunk = int64_t{1} << 16;
    const bool half = x.dtype == DType::F16;
    const void* src = x.data;
    pool.parallel_for(static_cast<size_t>((n + kChunk - 1) / kChunk), 1, [&](size_t b, size_t e) {
        for (size_t chunk = b; chunk < e; ++chunk) {
            const int64_t i0 = static_cast<int64_t>(chunk) * kChunk, m = std::min(n, i0 + kChunk) - i0;
            if constexpr (std::is_same_v<T, int8_t>) {
                if (half) quantize_row_i8(static_cast<const f16*>(src) + i0, m, x_scale, dst + i0);
                else quantize_row_i8(static_cast<const float*>(src) + i0, m, x_scale, dst + i0);
            } else {
                if (half) quantize_row_f32(static_cast<const f16*>(src) + i0, m, x_scale, dst + i0);
                else quantize_row_f32(static_cast<const float*>(src) + i0, m, x_scale, dst + i0);
            }
        }
    });
    return dst;
}

}  // namespace

const float* quantize_f32(const TensorRef& x, float x_scale, cpu::ScratchScope& scope, ThreadPool& pool) {
    return quantize_as<float>(x, x_scale, scope, pool);
}

const int8_t* quantize_i8(const TensorRef& x, float x_scale, cpu::ScratchScope& scope, ThreadPool& pool) {
    return quantize_as<int8_t>(x, x_scale, scope, pool);
}

const int8_t* winograd_i8_phase_planes(const TensorRef& x, int64_t N, int64_t C, int64_t H, int64_t W,
                                       int64_t pad_top, int64_t pad_left, float x_scale,
                                       cpu::WinogradI8PlaneShape ps, cpu::ScratchScope& scope, ThreadPool& pool) {
    const int64_t planes = N * C, row = 4 * ps.tq;
    int8_t* dst = scope.alloc_as<int8_t>(static_cast<size_t>(planes) * cpu::winograd_i8_plane_bytes(1, ps));
    const bool half = x.dtype == DType::F16;
    LOOM_ASSERT(pad_left >= 0 && pad_left + W <= row);
    pool.parallel_for(static_cast<size_t>(planes), 1, [&](size_t b, size_t e) {
        cpu::ScratchScope local;
        // One padded row: the quantized values between zero columns, which stay zero.
        int8_t* padded = local.alloc_as<int8_t>(static_cast<size_t>(row));
        std::fill_n(padded, row, int8_t{0});
        int8_t* q = padded + pad_left;
        for (size_t pi = b; pi < e; ++pi) {
            const int64_t plane = static_cast<int64_t>(pi);
            for (int64_t r = 0; r < ps.rows; ++r) {
                const int64_t iy = r - pad_top;
                int8_t* out = dst + (plane * ps.rows + r) * row;
                if (iy < 0 || iy >= H) {
                    std::fill_n(out, row, int8_t{0});
                    continue;
                }
                const int64_t i0 = (plane * H + iy) * W;
                if (half) quantize_row_i8(x.as<const f16>() + i0, W, x_scale, q);
                else quantize_row_i8(x.as<const float>() + i0, W, x_scale, q);
                cpu::winograd_i8_phase_row(padded, ps.tq, out);
            }
        }
    });
    return dst;
}

const float* dequant_factors(const Quant& q, cpu::ScratchScope& scope) {
    const int64_t n = q.w_scale->elements();
    float* dst = scope.alloc(static_cast<size_t>(n));
    const float* ws = q.w_scale->as<const float>();
    for (int64_t i = 0; i < n; ++i) dst[i] = q.x_scale * ws[i];
    return dst;
}

Status check_prelu_slope(const Activation& act, const TensorRef* slope, std::string_view kernel,
                         std::string_view n_name, int64_t n, DType dtype) {
    if ((act.act == cpu::Act::PRELU) != (slope != nullptr))
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "{}: activation 'prelu' and the slope input S come together (activation is {}, S is {})",
                          kernel, act.act == cpu::Act::PRELU ? "prelu" : "not prelu", slope ? "given" : "absent");
    if (slope && ((slope->elements() != 1 && slope->elements() != n) || slope->dtype != dtype))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: prelu slopes S are {}, must hold 1 or {} = {} {} values",
                          kernel, shape_str(*slope), n_name, n, dtype_name(dtype));
    return {};
}

Result<ChannelEpilogue> parse_channel_epilogue(const KernelLaunch& l, std::string_view kernel, int64_t K, DType dtype,
                                               const TensorRef& y) {
    ChannelEpilogue e;
    e.bias = optional_input(l, 2);
    e.residual = optional_input(l, 3);
    e.slope = optional_input(l, 4);
    if (e.bias && (e.bias->elements() != K || e.bias->dtype != dtype))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: B is {} {}, must hold K = {} {} values", kernel,
                          shape_str(*e.bias), dtype_name(e.bias->dtype), K, dtype_name(dtype));
    if (e.residual && (!same_shape(*e.residual, y) || e.residual->dtype != dtype))
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: residual R is {} {}, must match Y {} {}", kernel,
                          shape_str(*e.residual), dtype_name(e.residual->dtype), shape_str(y), dtype_name(dtype));
    auto act = parse_activation(l.attrs);
    if (!act.ok()) return act.status().with_context(kernel);
    e.act = *act;
    LOOM_TRY(check_prelu_slope(e.act, e.slope, kernel, "K", K, dtype));
    LOOM_ASSIGN_OR_RETURN(int64_t after, l.attrs.get_int("residual_after_activation", 0));
    if (after != 0 && after != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: attribute 'residual_after_activation' is {} (0 or 1)",
                          kernel, after);
    e.residual_after_act = after == 1;
    return e;
}

ChannelEpilogueData channel_epilogue_f32(const ChannelEpilogue& e, cpu::ScratchScope& scope, ThreadPool& pool) {
    ChannelEpilogueData d;
    d.bias = e.bias ? as_f32(*e.bias, scope) : nullptr;
    if (e.residual && e.residual->dtype == DType::F16) d.residual_h = e.residual->as<const f16>();
    else if (e.residual) d.residual = as_f32(*e.residual, scope, &pool);
    d.slope = e.slope ? as_f32(*e.slope, scope) : nullptr;
    return d;
}

cpu::Epilogue channel_epilogue(const ChannelEpilogue& e, const ChannelEpilogueData& d, int64_t k0,
                               int64_t residual_offset, int64_t plane) {
    cpu::Epilogue ep = activation_epilogue(e.act);
    if (d.bias) ep.bias = {d.bias + k0, 1, 0};
    if (d.slope) ep.slope = e.slope->elements() == 1 ? cpu::Addend{d.slope, 0, 0} : cpu::Addend{d.slope + k0, 1, 0};
    if (d.residual) ep.residual = {d.residual + residual_offset, plane, 1};
    if (d.residual_h) ep.residual = {nullptr, plane, 1, d.residual_h + residual_offset};
    if (d.dequant) ep.dequant = d.dequant_count == 1 ? cpu::Addend{d.dequant, 0, 0} : cpu::Addend{d.dequant + k0, 1, 0};
    ep.residual_after_act = e.residual_after_act;
    return ep;
}

Status check_conv_output(const ConvShape& c, int64_t ho, int64_t wo, const TensorRef& x, const TensorRef& w,
                         const TensorRef& y, std::string_view kernel) {
    if (y.dim(0) != c.N || y.dim(1) != c.K || c.Ho != ho || c.Wo != wo)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: Y is {} but X {} and W {} give {}x{}{}", kernel,
                          shape_str(y), shape_str(x), shape_str(w), c.N, c.K,
                          c.g.spatial == 2 ? fmt::format("x{}x{}", ho, wo) : fmt::format("x{}", wo));
    return {};
}

namespace {

Result<std::vector<int64_t>> sized_list(const KernelAttrs& attrs, std::string_view name, size_t n, int64_t fallback,
                                        int64_t min) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> v, attrs.get_ints(name, std::vector<int64_t>(n, fallback)));
    if (v.size() != n)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' needs {} values, got {}", name, n, v.size());
    for (int64_t x : v)
        if (x < min)
            return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' holds {} (at least {})", name, x, min);
    return v;
}

}  // namespace

Result<ConvGeometry> parse_conv_geometry(const KernelAttrs& attrs, int spatial, int64_t kh, int64_t kw, int64_t in_h,
                                         int64_t in_w, bool transpose, int64_t out_h, int64_t out_w) {
    ConvGeometry g;
    g.spatial = spatial;
    const size_t n = static_cast<size_t>(spatial);
    LOOM_ASSIGN_OR_RETURN(g.group, attrs.get_int("group", 1));
    if (g.group < 1) return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'group' is {} (at least 1)", g.group);
    const std::vector<int64_t> kernel = spatial == 1 ? std::vector<int64_t>{kw} : std::vector<int64_t>{kh, kw};
    if (attrs.has("kernel_shape")) {
        LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> ks, attrs.get_ints("kernel_shape"));
        if (ks != kernel)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "attribute 'kernel_shape' disagrees with the weights' kernel");
    }
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> strides, sized_list(attrs, "strides", n, 1, 1));
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> dil, sized_list(attrs, "dilations", n, 1, 1));
    LOOM_ASSIGN_OR_RETURN(std::string auto_pad, attrs.get_string("auto_pad", "NOTSET"));
    if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID")
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "attribute 'auto_pad' is '{}' (NOTSET, SAME_UPPER, SAME_LOWER or VALID)", auto_pad);
    if (auto_pad != "NOTSET" && attrs.has("pads"))
        return make_error(StatusCode::INVALID_ARGUMENT, "attributes 'pads' and 'auto_pad' = '{}' exclude each other",
                          auto_pad);
    std::vector<int64_t> out_pad(n, 0);
    if (transpose) {
        LOOM_ASSIGN_OR_RETURN(out_pad, sized_list(attrs, "output_padding", n, 0, 0));
    } else if (attrs.has("output_padding") || attrs.has("output_shape")) {
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "attributes 'output_padding' and 'output_shape' belong to conv_transpose");
    }
    const std::vector<int64_t> in = spatial == 1 ? std::vector<int64_t>{in_w} : std::vector<int64_t>{in_h, in_w};
    const std::vector<int64_t> out = spatial == 1 ? std::vector<int64_t>{out_w} : std::vector<int64_t>{out_h, out_w};
    std::vector<int64_t> pads(2 * n, 0);
    const bool from_shape = transpose && attrs.has("output_shape");
    if (from_shape) {
        LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> os, attrs.get_ints("output_shape"));
        if (os.size() != n && os.size() != n + 2)
            return make_error(StatusCode::INVALID_ARGUMENT, "attribute 'output_shape' needs {} values, got {}", n,
                              os.size());
        if (std::vector<int64_t>(os.end() - static_cast<std::ptrdiff_t>(n), os.end()) != out)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "attribute 'output_shape' disagrees with the output tensor's spatial sizes");
    }
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || from_shape) {
        const bool upper = auto_pad != "SAME_LOWER";
        for (size_t i = 0; i < n; ++i) {
            const int64_t span = (kernel[i] - 1) * dil[i] + 1;
            int64_t total;
            if (transpose) {
                const int64_t target = from_shape ? out[i] : in[i] * strides[i];
                total = strides[i] * (in[i] - 1) + out_pad[i] + span - target;
            } else {
                const int64_t target = (in[i] + strides[i] - 1) / strides[i];
                total = std::max<int64_t>(0, (target - 1) * strides[i] + span - in[i]);
            }
            if (total < 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "output size {} needs negative padding ({})", out[i],
                                  total);
            pads[i] = upper ? total / 2 : total - total / 2;
            pads[i + n] = total - pads[i];
        }
    } else if (auto_pad == "NOTSET") {
        LOOM_ASSIGN_OR_RETURN(pads, sized_list(attrs, "pads", 2 * n, 0, 0));
    }
    for (size_t i = 0; i < n; ++i)
        if (transpose && out_pad[i] >= std::max(strides[i], dil[i]))
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "attribute 'output_padding' {} must be below the stride or dilation", out_pad[i]);
    const size_t w = n - 1;  // the last spatial axis is W
    g.kw = kw, g.sw = strides[w], g.dw = dil[w], g.pad_left = pads[w], g.pad_right = pads[w + n],
    g.out_pad_w = out_pad[w];
    if (spatial == 2) {
        g.kh = kh, g.sh = strides[0], g.dh = dil[0], g.pad_top = pads[0], g.pad_bottom = pads[n],
        g.out_pad_h = out_pad[0];
    }
    return g;
}

namespace {

// f(i0, i1) over [0, n): split over `pool` in chunks of at least 64 Ki values when given.
template <typename F>
void for_slices(int64_t n, ThreadPool* pool, F f) {
    if (!pool) return f(0, n);
    pool->parallel_for(static_cast<size_t>(n), 64 * 1024,
                       [&](size_t b, size_t e) { f(static_cast<int64_t>(b), static_cast<int64_t>(e)); });
}

}  // namespace

const float* as_f32(const TensorRef& t, cpu::ScratchScope& scope, ThreadPool* pool) {
    if (t.dtype == DType::F32) return t.as<const float>();
    const int64_t n = t.elements();
    float* dst = scope.alloc(static_cast<size_t>(n));
    if (t.dtype == DType::I8) {
        const int8_t* src = t.as<const int8_t>();
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
        return dst;
    }
    const f16* src = t.as<const f16>();
    for_slices(n, pool, [&](int64_t i0, int64_t i1) { cpu::vec_f16_to_f32(src + i0, dst + i0, i1 - i0); });
    return dst;
}

float* f32_output(const TensorRef& t, cpu::ScratchScope& scope) {
    return t.dtype == DType::F32 ? t.as<float>() : scope.alloc(static_cast<size_t>(t.elements()));
}

void store_f32(const float* src, const TensorRef& t, ThreadPool* pool) {
    const int64_t n = t.elements();
    if (t.dtype == DType::F32) {
        if (src != t.as<float>()) std::copy_n(src, n, t.as<float>());
        return;
    }
    f16* dst = t.as<f16>();
    for_slices(n, pool, [&](int64_t i0, int64_t i1) { cpu::vec_f32_to_f16(src + i0, dst + i0, i1 - i0); });
}

}  // namespace loom::device::ops
