// The media engine's conversions against FFmpeg's swscale on the same frame, host wall time:
// frame_to_tensor (yuv420p / yuv420p10le -> planar fp32 RGB) beside swscale's yuv -> gbrpf32le,
// and tensor_to_frame beside swscale's gbrpf32le -> yuv, both with SWS_BILINEAR |
// SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, BT.709 limited range, MPEG-2 chroma siting, at 720x480
// and 1920x1080. Loom runs on a ThreadPool(2), swscale with threads = 2.
#include <benchmark/benchmark.h>

extern "C" {
#include <libavutil/opt.h>
#include <libavutil/pixfmt.h>
#include <libswscale/swscale.h>
}

#include <random>
#include <vector>

#include "common/frame.hpp"
#include "common/thread_pool.hpp"
#include "device/media.hpp"

namespace {

using namespace loom;
using namespace loom::device;

constexpr int kSizes[][2] = {{720, 480}, {1920, 1080}};

#ifndef LOOM_BENCH_MEDIA_THREADS
#define LOOM_BENCH_MEDIA_THREADS 2
#endif
ThreadPool& pool2() {
    static ThreadPool pool(LOOM_BENCH_MEDIA_THREADS);
    return pool;
}

FrameLayout layout(const benchmark::State& st) {
    const bool deep = st.range(1) != 0;
    return {deep ? PixelFormat::YUV420P10 : PixelFormat::YUV420P, kSizes[st.range(0)][0], kSizes[st.range(0)][1]};
}

std::vector<uint8_t> noise_frame(const FrameLayout& l) {
    std::vector<uint8_t> f(l.bytes());
    std::mt19937 rng(5);
    const unsigned mask = (1u << bit_depth(l.format)) - 1;
    if (sample_bytes(l.format) == 1) {
        for (auto& b : f) b = static_cast<uint8_t>(rng());
    } else {
        for (size_t i = 0; i + 1 < f.size(); i += 2) {
            const unsigned v = rng() & mask;
            f[i] = static_cast<uint8_t>(v & 0xff);
            f[i + 1] = static_cast<uint8_t>(v >> 8);
        }
    }
    return f;
}

// A swscale context between the frame's format and gbrpf32le, in either direction.
SwsContext* sws_for(const FrameLayout& l, bool to_rgb) {
    const AVPixelFormat yuv = l.format == PixelFormat::YUV420P ? AV_PIX_FMT_YUV420P : AV_PIX_FMT_YUV420P10LE;
    SwsContext* ctx = sws_alloc_context();
    av_opt_set_int(ctx, "srcw", l.width, 0);
    av_opt_set_int(ctx, "srch", l.height, 0);
    av_opt_set_int(ctx, "dstw", l.width, 0);
    av_opt_set_int(ctx, "dsth", l.height, 0);
    av_opt_set_int(ctx, "src_format", to_rgb ? yuv : AV_PIX_FMT_GBRPF32LE, 0);
    av_opt_set_int(ctx, "dst_format", to_rgb ? AV_PIX_FMT_GBRPF32LE : yuv, 0);
    av_opt_set_int(ctx, "sws_flags", SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, 0);
    av_opt_set_int(ctx, to_rgb ? "src_h_chr_pos" : "dst_h_chr_pos", 0, 0);
    av_opt_set_int(ctx, to_rgb ? "src_v_chr_pos" : "dst_v_chr_pos", 128, 0);
    av_opt_set_int(ctx, "threads", 2, 0);
    if (sws_init_context(ctx, nullptr, nullptr) < 0) return nullptr;
    const int* coeffs = sws_getCoefficients(SWS_CS_ITU709);
    sws_setColorspaceDetails(ctx, coeffs, 0, coeffs, 0, 0, 1 << 16, 1 << 16);
    return ctx;
}

struct Planes {
    const uint8_t* p[4] = {};
    int stride[4] = {};
};

Planes yuv_planes(const FrameLayout& l, const uint8_t* f) {
    const int sb = static_cast<int>(sample_bytes(l.format));
    Planes r;
    r.p[0] = f, r.p[1] = f + l.u_offset(), r.p[2] = f + l.v_offset();
    r.stride[0] = static_cast<int>(l.width) * sb;
    r.stride[1] = r.stride[2] = static_cast<int>(l.chroma_width()) * sb;
    return r;
}

Planes gbr_planes(const FrameLayout& l, const float* t) {
    const size_t plane = static_cast<size_t>(l.width * l.height);
    Planes r;  // G, B, R
    r.p[0] = reinterpret_cast<const uint8_t*>(t + plane);
    r.p[1] = reinterpret_cast<const uint8_t*>(t + 2 * plane);
    r.p[2] = reinterpret_cast<const uint8_t*>(t);
    r.stride[0] = r.stride[1] = r.stride[2] = static_cast<int>(l.width * 4);
    return r;
}

void set_counters(benchmark::State& st, const FrameLayout& l) {
    st.counters["Mpix/s"] = benchmark::Counter(static_cast<double>(l.width * l.height) * double(st.iterations()) / 1e6,
                                               benchmark::Counter::kIsRate);
}

TensorFormat tensor_format(const FrameLayout& l) {
    TensorFormat tf;
    tf.height = l.height;
    tf.width = l.width;
    return tf;
}

void BM_FrameToTensor(benchmark::State& st) {
    const FrameLayout l = layout(st);
    const auto frame = noise_frame(l);
    const TensorFormat tf = tensor_format(l);
    std::vector<float> t(tf.bytes() / 4);
    for (auto _ : st) {
        frame_to_tensor(reinterpret_cast<uint8_t*>(t.data()), tf, frame.data(), l, ColorInfo{}, pool2());
        benchmark::DoNotOptimize(t.data());
    }
    set_counters(st, l);
}

void BM_SwscaleYuvToGbrpf32(benchmark::State& st) {
    const FrameLayout l = layout(st);
    const auto frame = noise_frame(l);
    std::vector<float> t(static_cast<size_t>(3 * l.width * l.height));
    SwsContext* ctx = sws_for(l, true);
    if (!ctx) return st.SkipWithError("sws_init_context failed");
    const Planes src = yuv_planes(l, frame.data());
    Planes dst = gbr_planes(l, t.data());
    for (auto _ : st) {
        sws_scale(ctx, src.p, src.stride, 0, static_cast<int>(l.height), const_cast<uint8_t**>(dst.p), dst.stride);
        benchmark::DoNotOptimize(t.data());
    }
    sws_freeContext(ctx);
    set_counters(st, l);
}

// The tensor of a noise frame, and a frame buffer to convert it back into.
struct TensorInput {
    FrameLayout l;
    TensorFormat tf;
    std::vector<float> t;
    std::vector<uint8_t> out;
    explicit TensorInput(const FrameLayout& layout)
        : l(layout), tf(tensor_format(layout)), t(tf.bytes() / 4), out(layout.bytes()) {
        const auto frame = noise_frame(l);
        frame_to_tensor(reinterpret_cast<uint8_t*>(t.data()), tf, frame.data(), l, ColorInfo{}, pool2());
    }
};

void BM_TensorToFrame(benchmark::State& st) {
    TensorInput in(layout(st));
    const FrameLayout& l = in.l;
    for (auto _ : st) {
        tensor_to_frame(in.out.data(), l, ColorInfo{}, reinterpret_cast<const uint8_t*>(in.t.data()), in.tf, pool2());
        benchmark::DoNotOptimize(in.out.data());
    }
    set_counters(st, l);
}

void BM_SwscaleGbrpf32ToYuv(benchmark::State& st) {
    TensorInput in(layout(st));
    const FrameLayout& l = in.l;
    SwsContext* ctx = sws_for(l, false);
    if (!ctx) return st.SkipWithError("sws_init_context failed");
    const Planes src = gbr_planes(l, in.t.data());
    Planes dst = yuv_planes(l, in.out.data());
    for (auto _ : st) {
        sws_scale(ctx, src.p, src.stride, 0, static_cast<int>(l.height), const_cast<uint8_t**>(dst.p), dst.stride);
        benchmark::DoNotOptimize(in.out.data());
    }
    sws_freeContext(ctx);
    set_counters(st, l);
}

void sizes(benchmark::internal::Benchmark* b) {
    b->ArgNames({"size", "10bit"})->Unit(benchmark::kMillisecond)->UseRealTime();
    for (int64_t deep : {0, 1})
        for (int64_t s : {0, 1}) b->Args({s, deep});
}

}  // namespace

BENCHMARK(BM_FrameToTensor)->Apply(sizes);
BENCHMARK(BM_SwscaleYuvToGbrpf32)->Apply(sizes);
BENCHMARK(BM_TensorToFrame)->Apply(sizes);
BENCHMARK(BM_SwscaleGbrpf32ToYuv)->Apply(sizes);

BENCHMARK_MAIN();
