// Winograd F(4x4, 3x3) and F(2x2, 3x3) convolution for 3x3, stride 1, dilation 1, ungrouped
// fp32 convs (Lavin & Gray 2016; the transforms below are theirs). F(m x m, 3x3) turns each
// (m + 2) x (m + 2) input tile into (m + 2)^2 transformed values, so an m x m output tile costs
// (m + 2)^2 multiply-adds per input-output channel pair instead of 9 m^2 (F(4,3): 36 for 144,
// F(2,3): 16 for 36); the (m + 2)^2 products are batched GEMMs (transformed weights x
// transformed input) on the GEMM micro-kernel. F(2,3) has cheaper transforms and smaller values
// in them, but 4 transformed values per output pixel to F(4,3)'s 2.25; on the CI machine it lost
// to F(4,3) on every shape that matters (winograd_tile_for has the figures).
//
// Work is cut into blocks of up to 32 tiles along one tile row. A block's transformed input
// ((m + 2)^2 x C x 32 floats), its GEMMs and its output transform all happen on one thread
// while the data stays in L2; blocks run in parallel. The GEMMs take a block's tiles in runs of
// 8 (nr-, 16- and 8-wide panels), so a row whose tile count is not a multiple of 16 costs the
// GEMM at most 7 padding columns (240x320 at F(6,3): 54 tiles a row, 56 columns instead of
// 64); AVX-512's F(4,3) and F(2,3) keep runs of 16 (see winograd_conv). The driver is shared by both tile sizes
// and every instruction set, and takes the GEMM micro-kernel of isa() with its NR (the width of
// the V panels; AVX-512 takes its 6 x 16 kernel for convs with C x K >= 8192, see winograd_conv); the block transforms have an AVX-512 version (sixteen tiles per vector), an
// AVX2 one (eight) and a generic one per tile size. AVX2 and AVX-512 compute every value with
// the same operations in the same order, so their outputs agree bit for bit.
// The input and output maps may be fp32 or fp16 storage (an fp16 model's activations): the
// transforms convert fp16 as they load it (exactly) and round once, to nearest even, as they
// store, so a conv reads and writes half the bytes and needs no conversion passes, with the bits
// that converting the map to fp32 first and rounding the fp32 result after would give.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernels/cpu/gemm.hpp"
#include "device/types.hpp"

namespace loom::device::cpu {

// The output tile edge m of F(m x m, 3x3); NONE: not Winograd.
enum class WinogradTile : uint8_t { NONE = 0, F23 = 2, F43 = 4, F63 = 6 };

// Returns the variant a 3x3 stride-1 dilation-1 ungrouped fp32 conv with C input and K output
// channels runs as (NONE: the im2col GEMM). A function of C and K only, so a tile of a frame
// takes the variant the whole frame takes (compiler/halo.cpp relies on it for bit-exact tiling).
WinogradTile winograd_tile_for(int64_t C, int64_t K);

// Transformed positions per tile, (m + 2)^2.
inline int64_t winograd_positions(WinogradTile t) {
    const int64_t n = static_cast<int64_t>(t) + 2;
    return n * n;
}

// Floats needed for the transformed weights of a K x C x 3 x 3 filter.
size_t winograd_weights_floats(WinogradTile t, int64_t K, int64_t C);
// Transforms w (K x C x 3 x 3) into U = G w G^T for each position, laid out as GEMM A panels
// (positions x ceil(K/6) panels of C x 6) for winograd_conv. Done once per weight tensor; the
// same on every instruction set.
void winograd_transform_weights(WinogradTile t, const float* w, int64_t K, int64_t C, float* u);

// The map a conv reads (C x H x W of one image): fp32, or fp16 storage; exactly one is set.
struct WinogradIn {
    const float* f32 = nullptr;
    const f16* half = nullptr;
    WinogradIn() = default;
    WinogradIn(const float* p) : f32(p) {}  // NOLINT(google-explicit-constructor): either type reads as a map
    WinogradIn(const f16* p) : half(p) {}   // NOLINT(google-explicit-constructor)
};
// The map a conv writes (K x Ho x Wo of one image): fp32, or fp16 storage; exactly one is set.
struct WinogradOut {
    float* f32 = nullptr;
    f16* half = nullptr;
    // AVX2's and AVX-512's F(6,3) output transforms write whole lines with non-temporal stores
    // (winograd_conv sets it, see kWinogradStreamBytes).
    bool stream = false;
    WinogradOut() = default;
    WinogradOut(float* p) : f32(p) {}  // NOLINT(google-explicit-constructor)
    WinogradOut(f16* p) : half(p) {}   // NOLINT(google-explicit-constructor)
};

// The driver's blocks hold at most this many tiles of one tile row (their V and M stay in L2
// up to 64 channels); the output transforms size their row buffers by it.
inline constexpr int64_t kWinogradBlockTiles = 32;

struct Conv2dShape {
    int64_t C = 0, H = 0, W = 0;  // input channels and size (one image)
    int64_t K = 0, Ho = 0, Wo = 0;
    int64_t pad_top = 0, pad_left = 0;
};

// y (K x Ho x Wo) = epilogue(conv3x3(x (C x H x W), w)) for one image, with u from
// winograd_transform_weights for the same t. The epilogue sees rows i = output channel,
// columns j = oy * Wo + ox. With an fp16 y the epilogue runs on the fp32 values before the one
// rounding.
void winograd_conv(WinogradTile t, const Conv2dShape& s, WinogradIn x, const float* u, WinogradOut y,
                   const Epilogue& ep, ThreadPool& pool);

// The block transforms, per tile size and instruction set (internal; exposed for the driver
// and tests).
struct WinogradBlock {
    WinogradIn x;              // image, C x H x W
    int64_t C = 0, H = 0, W = 0;
    int64_t iy0 = 0, ix0 = 0;  // input coordinate of the first tile's top-left (may be outside)
    int64_t tiles = 0;         // tiles in this block, <= tiles_gemm
    int64_t tiles_gemm = 0;    // tiles in V and the GEMMs: tiles rounded up to 8
    int64_t tiles_padded = 0;  // tiles rounded up to 16, the transforms' groups
    int64_t nr = 16;           // the GEMM's NR: V's panel width (16, or 32 for AVX-512's narrower convs)
    int64_t panel_stride = 0;  // winograd_panel_stride(C, nr)
};
// The input transforms write V: for each position, GEMM B panels of C x width floats over the
// block's tiles_gemm tiles: nr-wide panels, then a 16-wide one when 16 or more tiles are left
// (nr 32), then an 8-wide one for a last 8 (so a row of 55 tiles costs the GEMM 56 columns, not
// 64), each panel starting panel_stride floats after the previous one (padded by one cache line:
// panels 4 KiB apart would all land in the same L1 set). `work` holds
// winograd_work_floats(tiles_padded) floats.
inline int64_t winograd_panel_stride(int64_t C, int64_t nr) { return C * nr + 16; }
inline int64_t winograd_panel_count(int64_t tiles_gemm, int64_t nr) {
    const int64_t rest = tiles_gemm % nr;
    return tiles_gemm / nr + (rest >= 16 ? 1 : 0) + (rest % 16 != 0 ? 1 : 0);
}
// The panel that holds `tile` (a multiple of 8 starts a run of at least 8 in the same panel):
// its index, width (nr, 16 or 8) and the tile's column in it.
struct WinogradPanel {
    int64_t q, width, at;
};
inline WinogradPanel winograd_panel(int64_t tile, int64_t tiles_gemm, int64_t nr) {
    const int64_t full = tiles_gemm / nr * nr;
    if (tile < full) return {tile / nr, nr, tile % nr};
    const int64_t q = tiles_gemm / nr;
    if (tiles_gemm - full >= 16) {
        if (tile < full + 16) return {q, 16, tile - full};
        return {q + 1, 8, tile - full - 16};
    }
    return {q, 8, tile - full};
}
inline size_t winograd_input_floats(WinogradTile t, int64_t C, int64_t tiles_gemm, int64_t nr) {
    return static_cast<size_t>(winograd_positions(t) * winograd_panel_count(tiles_gemm, nr) *
                               winograd_panel_stride(C, nr));
}
// Enough for every tile size: 8 rows of the block's input columns plus their transforms.
inline size_t winograd_work_floats(int64_t tiles_padded) { return static_cast<size_t>(16 * (6 * tiles_padded + 16)); }
void winograd43_input_generic(const WinogradBlock& b, float* v, float* work);
void winograd43_input_avx2(const WinogradBlock& b, float* v, float* work);
void winograd23_input_generic(const WinogradBlock& b, float* v, float* work);
void winograd23_input_avx2(const WinogradBlock& b, float* v, float* work);
void winograd43_input_avx512(const WinogradBlock& b, float* v, float* work);
void winograd23_input_avx512(const WinogradBlock& b, float* v, float* work);
void winograd63_input_generic(const WinogradBlock& b, float* v, float* work);
void winograd63_input_avx2(const WinogradBlock& b, float* v, float* work);
void winograd63_input_avx512(const WinogradBlock& b, float* v, float* work);
// The part of an Epilogue that the output transforms apply while the values are in registers,
// sparing the driver a second pass over the block's output: y = act(y + bias[k * bias_rs]) per
// output channel k, act NONE, RELU, LEAKY_RELU (alpha) or PRELU (slope[k * slope_rs]), with
// apply_epilogue's operations in its order, so the results are the same bits. The driver passes
// one when the Epilogue has nothing else (no scale, residual or dequant), else nullptr and runs
// apply_epilogue after.
struct WinogradEpilogue {
    const float* bias = nullptr;  // nullptr: none
    int64_t bias_rs = 0;
    Act act = Act::NONE;
    float alpha = 0;
    const float* slope = nullptr;
    int64_t slope_rs = 0;
};
// winograd_conv streams an F(6,3) output map (fp32 or fp16) of at least this many bytes (the CI machine's
// last-level cache) when the transform applies the whole epilogue (else apply_epilogue would read
// the lines straight back): the next layer reads such a map from memory anyway, and ordinary
// stores would first read every line they fill.
// Measured on UpConv7 x2 at 254x334 (128- and 256-channel maps of 42-80 MB), alternated: best
// min 168.8 against 179.2 ms on AVX-512 (6 rounds), 171.8 against 180.8 on AVX2 (4); a 16 MiB
// bound (CUnet's and Real-CUGAN's 25 MB maps too) changed nothing on those models.
inline constexpr int64_t kWinogradStreamBytes = int64_t{32} << 20;
// The output transforms read M, the GEMMs' products: the value of output channel k, position e,
// tile t at m[k * ks + e * es + t] (the driver lays M out channel-major, ks = positions x es + 16,
// so one channel's values are one contiguous run for the transform to stream; es and ks are
// multiples of 16). They must not read a block's columns past tiles_gemm, which the GEMMs leave
// unwritten (AVX-512's F(6,3) masks its last group's loads at `tiles`). They write output
// rows oy0..oy0+m-1, columns ox0..ox0 + m * tiles (clipped to Ho x Wo) of every output channel of
// y (K x Ho x Wo), through `ep` when it is not nullptr (an fp16 y rounded after it).
using WinogradOutput = void (*)(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                                int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd43_output_generic(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                               int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd43_output_avx2(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                            int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd23_output_generic(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                               int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd23_output_avx2(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                            int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd43_output_avx512(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                              int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd23_output_avx512(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                              int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd63_output_generic(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                               int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd63_output_avx2(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                            int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);
void winograd63_output_avx512(const float* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, WinogradOut y,
                              int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradEpilogue* ep);

}  // namespace loom::device::cpu
