// int8 Winograd F(4x4, 3x3) in exact integer arithmetic, for the int8 conv (3x3, stride 1,
// dilation 1, ungrouped): the same int32 sums as the int8 im2col GEMM, so the same output bits,
// with 2.25 multiply-adds per output pixel and channel pair instead of 9.
//
// F(4,3)'s input and output transforms (B^T, A^T: points 0, +-1, +-2, inf) have integer entries;
// its weight transform G has denominators 4, 6, 12 and 24. So the weights are transformed with
// G' = 24 G (rows [6 0 0], [-4 -4 -4], [-4 4 -4], [1 2 4], [1 -2 4]) except its last row, [0 0 6]
// (6 instead of 24 keeps U' in int16), and the output transform takes A' = A with its last row
// times 4 to make up for that row. Then
//   U' = G' g G'^T      |U'| <= 12 x 12 x 128 = 18432        int16
//   V  = B^T d B        |V|  <= 10 x 10 x 127 = 12700        int16 (d: quantized X, |d| <= 127)
//   M' = sum_c U' V     int32, wrapping                      the int8 GEMM's micro-kernels
//   R  = A'^T M' A'     = 576 Y (mod 2^32)                   Y: the exact direct sum
// A pair of products is at most 2 x 18432 x 12700 < 2^31, so pmaddwd never saturates, and every
// later step is a ring operation mod 2^32: M' may wrap (and does, for wide layers), R is still
// 576 Y mod 2^32. 576 = 9 x 64: multiplying by 9's inverse mod 2^32 gives 64 Y mod 2^32, and an
// arithmetic shift by 6 gives Y itself whenever |Y| < 2^25. winograd_i8_exact checks that bound
// from the weights (|Y| <= 127 x sum |w| over an output channel's taps); the conv kernel takes
// the GEMM for a layer that fails it.
//
// Work is cut like the float driver's (winograd.hpp): blocks of up to 32 tiles along a tile row;
// a block's V (int16 GEMM B panels, channel pairs interleaved), its 36 GEMMs and its output
// transform run on one thread while the data stays in L2. The transforms work on one vector of
// tiles at a time in int32 lanes (GCC vector extensions of the instruction set's width: one
// source, winograd_i8_impl.hpp), read X from phase planes (below) so a tile's six columns are six
// plain loads, and write float(Y) through the conv's epilogue with the GEMM path's bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernels/cpu/gemm.hpp"
#include "device/kernels/cpu/winograd.hpp"

namespace loom::device::cpu {

// The largest |Y| (an output value's exact int32 sum) that R = 576 Y mod 2^32 gives back.
inline constexpr int64_t kWinogradI8SumMax = (int64_t{1} << 25) - 1;

// Whether every output channel k of w (K x C x 3 x 3 int8) has 127 x sum |w[k]| <=
// kWinogradI8SumMax, so that the integer F(4,3) gives the exact sums for any quantized X.
bool winograd_i8_exact(const int8_t* w, int64_t K, int64_t C);

// int16 values of the transformed weights: 36 positions of GEMM A panels (gemm_i8.hpp's
// gemm_pack_a layout of a K x C matrix).
size_t winograd_i8_weights_i16(int64_t K, int64_t C);
void winograd_i8_transform_weights(const int8_t* w, int64_t K, int64_t C, int16_t* u);

// X quantized into phase planes: for channel c, row r (input row r - pad_top) and phase b
// (0..3), the int8 values at input columns 4t + b - pad_left for t = 0..tq-1, zero outside the
// image, at p[((c * rows + r) * 4 + b) * tq + t]. A tile t of tile row ty reads rows 4ty..4ty+5,
// and its six columns are phases 0..3 at t and phases 0, 1 at t + 1.
struct WinogradI8Planes {
    const int8_t* p = nullptr;
    int64_t rows = 0, tq = 0;
};
// The phase planes' rows and tq for a conv's output size (enough for every tile and every
// sixteen-tile group's loads), and their size in bytes for C channels.
struct WinogradI8PlaneShape {
    int64_t rows, tq;
};
WinogradI8PlaneShape winograd_i8_plane_shape(int64_t Ho, int64_t Wo);
inline size_t winograd_i8_plane_bytes(int64_t C, WinogradI8PlaneShape ps) {
    return static_cast<size_t>(C * ps.rows * 4 * ps.tq);
}
// Writes one row of phase planes (4 x tq values at dst) from `padded`, 4 x tq values of one
// quantized input row with its pad_left zero columns before it and zeros after it (4 x tq always
// covers pad_left + W, since 4 x tiles_x >= Wo = W + pads - 2).
void winograd_i8_phase_row(const int8_t* padded, int64_t tq, int8_t* dst);

// y (K x Ho x Wo fp32 of one image) = ep(float(Y)), Y the exact int32 conv sums of the quantized
// X in x (phase planes of s.C channels) and the int8 weights behind u (winograd_i8_weights,
// which passed winograd_i8_exact). The epilogue sees rows i = output channel, columns j =
// oy * Wo + ox, as for the GEMM.
void winograd_i8_conv(const Conv2dShape& s, WinogradI8Planes x, const int16_t* u, float* y, const Epilogue& ep,
                      ThreadPool& pool);

// The block transforms per instruction set (internal; exposed for the driver).
struct WinogradI8Block {
    WinogradI8Planes x;
    int64_t C = 0;
    int64_t row0 = 0;          // first plane row of the tile row (4 ty)
    int64_t t0 = 0;            // first tile of the block
    int64_t groups = 0;        // sixteen-tile groups in the block
    int64_t nr = 16;           // the GEMM's NR: V's full panel width (16 or 32)
    int64_t panels = 0;        // panels per position
    int64_t panel_stride = 0;  // int16 values from one panel to the next
};
// Writes V: for position e and group g (tiles 16 g .. 16 g + 15 of the block), the int32 words
// (pair of channels 2 p, 2 p + 1 as two int16: 2 p low) at v[(e * panels + q) * panel_stride / 2
// + p * width + at .. + 16] where (q, width, at) place tile 16 g in the panels (nr-wide ones, then
// a 16-wide one).
using WinogradI8InputFn = void(const WinogradI8Block& b, int16_t* v);
WinogradI8InputFn winograd_i8_input_generic, winograd_i8_input_avx2, winograd_i8_input_avx512;
// The part of the conv's Epilogue the output transform applies while the values are in
// registers: y = act(float(Y) x dequant[k] + bias[k]), act NONE, RELU, LEAKY_RELU (alpha) or
// PRELU (slope[k]), in apply_epilogue's order, so the same bits. The driver passes one when the
// Epilogue holds nothing else (no residual, no scale), else nullptr and runs apply_epilogue after.
// The float transforms' fused part (bias, activation) with the dequantize factor before it.
struct WinogradI8Epilogue : WinogradEpilogue {
    const float* dequant = nullptr;  // always set
    int64_t dequant_rs = 0;
};
// Reads M' (output channel k, position e, tile t at m[k * ks + e * es + t]) for the block's
// tiles (in groups of sixteen) and writes float(Y), through `ep` when it is not nullptr, to
// output rows oy0..oy0+3, columns ox0..ox0 + 4 x tiles (clipped to Ho x Wo) of the K channels of
// y; with `stream`, whole cache lines through non-temporal stores (the driver sets it for a map of
// at least kWinogradStreamBytes when `ep` is the whole epilogue, as the float driver does).
using WinogradI8OutputFn = void(const int32_t* m, int64_t es, int64_t ks, int64_t tiles, int64_t K, float* y,
                                int64_t Ho, int64_t Wo, int64_t oy0, int64_t ox0, const WinogradI8Epilogue* ep,
                                bool stream);
WinogradI8OutputFn winograd_i8_output_generic, winograd_i8_output_avx2, winograd_i8_output_avx512;

}  // namespace loom::device::cpu
