// Integer Winograd F(4x4, 3x3) for the int8 conv: the weight transform, the exactness check, the
// phase planes, the baseline block transforms and the driver (winograd_i8.hpp).
#include "device/kernels/cpu/winograd_i8.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "device/kernels/cpu/gemm_i8.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/winograd_i8_impl.hpp"

namespace loom::device::cpu {

namespace {

constexpr int64_t MR = kGemmI8MR;
constexpr int64_t kPositions = 36;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t pairs_of(int64_t C) { return std::max<int64_t>(ceil_div(C, 2), 1); }

// The WinogradI8Epilogue for `ep` when that is all it holds (see winograd_i8.hpp), else false.
bool fusable(const Epilogue& ep, WinogradI8Epilogue& out) {
    const bool act_ok = ep.act == Act::NONE || ep.act == Act::RELU || ep.act == Act::LEAKY_RELU ||
                        (ep.act == Act::PRELU && ep.slope.cs == 0);
    if (!act_ok || !ep.dequant.p || ep.dequant.cs != 0 || ep.scale != 1 || ep.residual.on() || ep.bias.h ||
        ep.slope.h || (ep.bias.p && ep.bias.cs != 0))
        return false;
    out.dequant = ep.dequant.p, out.dequant_rs = ep.dequant.rs;
    out.bias = ep.bias.p, out.bias_rs = ep.bias.rs;
    out.act = ep.act, out.alpha = ep.alpha;
    out.slope = ep.slope.p, out.slope_rs = ep.slope.rs;
    return true;
}

// The block transforms per instruction set (rows: Isa).
struct WinogradI8Transforms {
    WinogradI8InputFn* input;
    WinogradI8OutputFn* output;
};
constexpr WinogradI8Transforms kTransforms[kIsaCount] = {
    {winograd_i8_input_generic, winograd_i8_output_generic},
    {winograd_i8_input_avx2, winograd_i8_output_avx2},
    {winograd_i8_input_avx512, winograd_i8_output_avx512},
};

// G' (winograd_i8.hpp): 24 G with its last row 6 instead of 24.
constexpr int32_t kG[6][3] = {{6, 0, 0}, {-4, -4, -4}, {-4, 4, -4}, {1, 2, 4}, {1, -2, 4}, {0, 0, 6}};

}  // namespace

bool winograd_i8_exact(const int8_t* w, int64_t K, int64_t C) {
    for (int64_t k = 0; k < K; ++k) {
        int64_t sum = 0;
        for (int64_t i = 0; i < C * 9; ++i) sum += std::abs(static_cast<int64_t>(w[k * C * 9 + i]));
        if (127 * sum > kWinogradI8SumMax) return false;
    }
    return true;
}

size_t winograd_i8_weights_i16(int64_t K, int64_t C) {
    return static_cast<size_t>(kPositions) * gemm_packed_a_i16(K, C);
}

void winograd_i8_transform_weights(const int8_t* w, int64_t K, int64_t C, int16_t* u) {
    const size_t per = gemm_packed_a_i16(K, C);
    const int64_t k2 = 2 * pairs_of(C);
    std::fill_n(u, kPositions * per, int16_t{0});
    for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c) {
            const int8_t* g = w + (k * C + c) * 9;
            int32_t t[6][3];  // G' g
            for (int i = 0; i < 6; ++i)
                for (int j = 0; j < 3; ++j) t[i][j] = kG[i][0] * g[j] + kG[i][1] * g[3 + j] + kG[i][2] * g[6 + j];
            for (int i = 0; i < 6; ++i)
                for (int j = 0; j < 6; ++j) {
                    const int32_t v = t[i][0] * kG[j][0] + t[i][1] * kG[j][1] + t[i][2] * kG[j][2];  // |v| <= 18432
                    // gemm_pack_a's layout: panel k / MR, pair c / 2, row k % MR, c % 2.
                    u[static_cast<size_t>(i * 6 + j) * per +
                      static_cast<size_t>((k / MR) * k2 * MR + (c / 2) * 2 * MR + 2 * (k % MR) + c % 2)] =
                        static_cast<int16_t>(v);
                }
        }
}

WinogradI8PlaneShape winograd_i8_plane_shape(int64_t Ho, int64_t Wo) {
    const int64_t tiles_y = ceil_div(Ho, 4), tiles_x = ceil_div(Wo, 4);
    // A group of sixteen tiles loads sixteen phase values at t and at t + 1.
    return {4 * tiles_y + 2, ceil_div(tiles_x, 16) * 16 + 16};
}

void winograd_i8_phase_row(const int8_t* padded, int64_t tq, int8_t* dst) {
    // Four columns as one little-endian word: phase b is byte b (a loop GCC vectorises).
    auto* d = reinterpret_cast<uint8_t*>(dst);
    for (int64_t t = 0; t < tq; ++t) {
        uint32_t w;
        std::memcpy(&w, padded + 4 * t, sizeof w);
        d[t] = static_cast<uint8_t>(w), d[tq + t] = static_cast<uint8_t>(w >> 8);
        d[2 * tq + t] = static_cast<uint8_t>(w >> 16), d[3 * tq + t] = static_cast<uint8_t>(w >> 24);
    }
}

void winograd_i8_input_generic(const WinogradI8Block& b, int16_t* v) { wi8_input(b, v); }

void winograd_i8_output_generic(const int32_t* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, float* y,
                                int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradI8Epilogue* ep,
                                bool stream) {
    wi8_output(m, es, ks, tiles, K, y, Ho, Wo, oy0, ox0, ep, stream);
}

void winograd_i8_conv(const Conv2dShape& s, WinogradI8Planes x, const int16_t* u, float* y, const Epilogue& ep,
                      ThreadPool& pool) {
    const Isa level = isa();
    WinogradI8InputFn* const input = kTransforms[static_cast<int>(level)].input;
    WinogradI8OutputFn* const output = kTransforms[static_cast<int>(level)].output;
    const GemmI8Micro um = gemm_i8_micro(level);
    // A 16-wide panel next to 32-wide ones (AVX-512 VNNI) takes the AVX2 kernel, which it has.
    const MicroKernelI8 narrow = um.nr == 32 ? gemm_i8_micro_avx2 : um.fn;
    const int64_t NR = um.nr, kp = pairs_of(s.C), kpad = ceil_div(s.K, MR) * MR;
    const int64_t a_size = static_cast<int64_t>(gemm_packed_a_i16(s.K, s.C));
    const int64_t ps = 2 * kp * NR + 32;  // int16 values; one cache line past the panel
    const int64_t tiles_y = ceil_div(s.Ho, 4), tiles_x = ceil_div(s.Wo, 4);
    const int64_t blocks_x = ceil_div(tiles_x, kWinogradBlockTiles);
    const int64_t per_block = std::min(kWinogradBlockTiles, ceil_div(ceil_div(tiles_x, blocks_x), 16) * 16);
    WinogradI8Epilogue fused;
    const bool fuse = fusable(ep, fused);
    const bool stream = fuse && s.K * s.Ho * s.Wo * 4 >= kWinogradStreamBytes;
    auto run_block = [&](int64_t item) {
        const int64_t ty = item / blocks_x, tx0 = (item % blocks_x) * per_block;
        const int64_t tiles = std::min(per_block, tiles_x - tx0), groups = ceil_div(tiles, 16);
        const int64_t tiles_gemm = 16 * groups;
        WinogradI8Block b;
        b.x = x, b.C = s.C, b.row0 = 4 * ty, b.t0 = tx0, b.groups = groups, b.nr = NR;
        b.panels = winograd_panel_count(tiles_gemm, NR), b.panel_stride = ps;
        ScratchScope scope;
        int16_t* v = scope.alloc_as<int16_t>(static_cast<size_t>(kPositions * b.panels * ps));
        const int64_t es = tiles_gemm, ks = kPositions * es + 16;
        int32_t* m = scope.alloc_as<int32_t>(static_cast<size_t>(kpad * ks));
        input(b, v);
        for (int64_t e = 0; e < kPositions; ++e) {
            const int16_t* ue = u + e * a_size;
            for (int64_t tile = 0; tile < tiles_gemm;) {
                // The float driver's panels: nr-wide ones, then a 16-wide one (no 8-wide one, as
                // tiles_gemm is a multiple of 16).
                const WinogradPanel pn = winograd_panel(tile, tiles_gemm, NR);
                const MicroKernelI8 micro = pn.width == NR ? um.fn : narrow;
                const int16_t* vp = v + (e * b.panels + pn.q) * ps;
                for (int64_t p = 0; p < kpad / MR; ++p)
                    micro(kp, ue + p * 2 * kp * MR, vp, m + p * MR * ks + e * es + tile, ks, false);
                tile += pn.width;
            }
        }
        const int64_t oy0 = 4 * ty, ox0 = 4 * tx0;
        output(m, es, ks, tiles, s.K, y, s.Ho, s.Wo, oy0, ox0, fuse ? &fused : nullptr, stream);
        if (fuse) return;
        // The GEMM path's epilogue on the same float(Y), so the same bits.
        const int64_t rows = std::min<int64_t>(4, s.Ho - oy0), run = std::min(4 * tiles, s.Wo - ox0);
        for (int64_t k = 0; k < s.K; ++k)
            for (int64_t oy = oy0; oy < oy0 + rows; ++oy)
                apply_epilogue(ep, y + (k * s.Ho + oy) * s.Wo + ox0, k, oy * s.Wo + ox0, run);
    };
    pool.parallel_for(static_cast<size_t>(tiles_y * blocks_x), 1, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) run_block(static_cast<int64_t>(i));
    });
}

}  // namespace loom::device::cpu
