// Direct convolution for few output channels (direct_conv.hpp): weights, the baseline row and the
// driver.
#include "device/kernels/cpu/direct_conv.hpp"

#include <algorithm>

#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "device/kernels/cpu/direct_conv_impl.hpp"
#include "device/kernels/cpu/isa.hpp"

namespace loom::device::cpu {

namespace {

int64_t blocks_of(int64_t K) { return (K + kDirectBlockK - 1) / kDirectBlockK; }

constexpr DirectRowFn kRows[kIsaCount] = {direct_conv_row_generic, direct_conv_row_avx2, direct_conv_row_avx512};

}  // namespace

void direct_conv_row_generic(const DirectRow& r) { dc_row(r); }

size_t direct_conv_weights_floats(int64_t K, int64_t C, int64_t th, int64_t tw) {
    return static_cast<size_t>(blocks_of(K) * C * th * tw * kDirectBlockK);
}

void direct_conv_pack_weights(const float* w, int64_t K, int64_t C, int64_t th, int64_t tw, float* out) {
    std::fill_n(out, direct_conv_weights_floats(K, C, th, tw), 0.0f);
    for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t t = 0; t < th * tw; ++t)
                out[((k / kDirectBlockK * C + c) * th * tw + t) * kDirectBlockK + k % kDirectBlockK] =
                    w[(k * C + c) * th * tw + t];
}

void direct_conv(const Conv2dShape& s, int64_t th, int64_t tw, WinogradIn x, const float* wp, float* y,
                 ThreadPool& pool) {
    LOOM_ASSERT(th >= 1 && tw >= 1 && tw <= 64);
    const DirectRowFn row = kRows[static_cast<int>(isa())];
    const int64_t blocks = blocks_of(s.K), plane = s.Ho * s.Wo;
    pool.parallel_for(static_cast<size_t>(blocks * s.Ho), 1, [&](size_t i0, size_t i1) {
        for (size_t item = i0; item < i1; ++item) {
            const int64_t kb = static_cast<int64_t>(item) / s.Ho, oy = static_cast<int64_t>(item) % s.Ho;
            DirectRow r;
            r.x = x.f32, r.xh = x.half, r.C = s.C, r.H = s.H, r.W = s.W, r.th = th, r.tw = tw;
            r.iy0 = oy - s.pad_top, r.ix0 = -s.pad_left, r.Wo = s.Wo;
            r.w = wp + kb * s.C * th * tw * kDirectBlockK;
            r.y = y + kb * kDirectBlockK * plane + oy * s.Wo;
            r.plane = plane;
            r.channels = std::min(kDirectBlockK, s.K - kb * kDirectBlockK);
            row(r);
        }
    });
}

}  // namespace loom::device::cpu
