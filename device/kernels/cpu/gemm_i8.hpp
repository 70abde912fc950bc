// Host int8 GEMM for the int8 Cube-op kernels (conv, conv_transpose, matmul, gemm): the exact
// int32 sums of int8 x int8 products, as the Cube's int8 path computes them, then the float
// epilogue of gemm.hpp (dequantize, bias, activation, residual) or raw int32.
// Operands are int8 in memory; packing sign-extends them into int16 panels with K in pairs, so
// the micro-kernel takes two products per 32-bit lane with one multiply-add of int16 pairs into
// int32 (pmaddwd) and adds that to int32 accumulators (AVX-512 VNNI's vpdpwssd does both in one
// instruction). Blocking, per-thread packing buffers and parallel blocks of C follow the fp32
// GEMM; the micro-kernel is chosen per call from isa() (AVX-512 with VNNI, AVX2, or generic:
// SSE2's pmaddwd on any x86-64, plain C++ elsewhere; AVX-512 without VNNI runs the AVX2 kernel).
// MR is the same for all, so A packed once serves every instruction set; NR is the kernel's.
// The functions overload the fp32 ones on their int8 operand types.
#pragma once

#include <cstddef>
#include <cstdint>

#include "device/kernels/cpu/gemm.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace loom {
class ThreadPool;
}

namespace loom::device::cpu {

// Exactness bounds of the int8 kernels. A product is a quantized activation in [-127, 127] times
// an int8 weight in [-128, 127], so |a x b| <= kGemmIntProductMax. The int32 sums are exact for
// up to kGemmIntKMax products (callers check with ops::check_int8_reduction); an fp32 sum of up
// to kGemmExactK products stays below 2^24, so exact too (the depthwise loop, conv_transpose's
// col2im).
inline constexpr int64_t kGemmIntProductMax = 127 * 128;
inline constexpr int64_t kGemmIntKMax = ((int64_t{1} << 31) - 1) / kGemmIntProductMax;  // 132104
inline constexpr int64_t kGemmExactK = 1024;  // 1024 * 16256 < 2^24
static_assert(kGemmExactK * kGemmIntProductMax < (int64_t{1} << 24));
// A pmaddwd lane sums two products: at most 2 x 128 x 128 = 2^15 in magnitude, far inside int32,
// whatever the operands' signs (-128 x -128 included).

inline constexpr int64_t kGemmI8MR = 6;  // micro-tile rows, every instruction set
// Micro-tile columns: two vectors of int32 sums, 16 (generic, AVX2) or 32 (AVX-512 VNNI).
inline constexpr int64_t kGemmI8NRMax = 32;

// A strided int8 matrix: element (i, j) at p[i * rs + j * cs].
struct MatViewI8 {
    const int8_t* p = nullptr;
    int64_t rs = 0, cs = 0;
};

// Writes the B block rows k0..k0+kc (k0 even), columns j0..j0+nc into dst as ceil(nc / nr)
// panels of ceil(kc / 2) pair rows, each nr columns of (row k, row k + 1) as int16: element
// (k, j) of a panel at (k / 2) * 2 * nr + j * 2 + k % 2; zero past kc and past nc. nr is the
// micro-kernel's NR (16 or 32).
using PackBI8 = void (*)(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, int16_t* dst);

// The PackBI8 for a strided int8 matrix: ctx points to the MatViewI8 of B.
void gemm_pack_b_strided(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, int16_t* dst);

// Writes 16 columns of a pair row of a B panel: r0[0..16) and r1[0..16) (rows k and k + 1)
// interleaved and sign-extended to int16 (a 32-wide panel's row takes two calls, dst and
// dst + 32). For packers; baseline code only (an *_avx2.cpp file calling it would emit a
// VEX-encoded copy that the linker may pick for every caller).
inline void gemm_i8_pack_pair(const int8_t* r0, const int8_t* r1, int16_t* dst) {
#if defined(__SSE2__)
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1));
    const __m128i lo = _mm_unpacklo_epi8(a, b), hi = _mm_unpackhi_epi8(a, b);  // r0[j], r1[j], ...
    // Each byte doubled into a 16-bit lane, then an arithmetic shift: the byte sign-extended.
    __m128i* d = reinterpret_cast<__m128i*>(dst);
    _mm_storeu_si128(d + 0, _mm_srai_epi16(_mm_unpacklo_epi8(lo, lo), 8));
    _mm_storeu_si128(d + 1, _mm_srai_epi16(_mm_unpackhi_epi8(lo, lo), 8));
    _mm_storeu_si128(d + 2, _mm_srai_epi16(_mm_unpacklo_epi8(hi, hi), 8));
    _mm_storeu_si128(d + 3, _mm_srai_epi16(_mm_unpackhi_epi8(hi, hi), 8));
#else
    for (int64_t j = 0; j < 16; ++j) dst[2 * j] = r0[j], dst[2 * j + 1] = r1[j];
#endif
}

// Packs all of A (M x K) into ceil(M / MR) panels of ceil(K / 2) pair rows of MR x 2 int16;
// rows past M and the odd K's last column are zero. dst must hold gemm_packed_a_i16(M, K) values.
void gemm_pack_a(int64_t M, int64_t K, MatViewI8 a, int16_t* dst);
size_t gemm_packed_a_i16(int64_t M, int64_t K);

// C (M x N, row stride ldc) = ep(float(the exact int32 A x B)) with A pre-packed by gemm_pack_a
// and B produced by pack_b(ctx, ...); K at most kGemmIntKMax. Parallel over blocks of C on `pool`.
void gemm_packed(int64_t M, int64_t N, int64_t K, const int16_t* a_packed, PackBI8 pack_b, const void* b_ctx,
                 float* c, int64_t ldc, const Epilogue& ep, ThreadPool& pool);
// C (M x N int32, row stride ldc) = the exact int32 A x B, no epilogue.
void gemm_packed(int64_t M, int64_t N, int64_t K, const int16_t* a_packed, PackBI8 pack_b, const void* b_ctx,
                 int32_t* c, int64_t ldc, ThreadPool& pool);
// The float-epilogue form for strided A and B (packs A into a per-thread buffer first).
void gemm(int64_t M, int64_t N, int64_t K, MatViewI8 a, MatViewI8 b, float* c, int64_t ldc, const Epilogue& ep,
          ThreadPool& pool);

// The micro-kernel: c (MR x nr int32 at row stride ldc) = (accumulate ? c : 0) + a_panel x
// b_panel over kp pairs of K, b_panel 64-byte aligned. Implementations per instruction set;
// gemm_i8_micro() returns the one for isa() (and whether the CPU has VNNI) with its nr.
using MicroKernelI8 = void (*)(int64_t kp, const int16_t* a, const int16_t* b, int32_t* c, int64_t ldc,
                               bool accumulate);
struct GemmI8Micro {
    MicroKernelI8 fn;
    int64_t nr;
};
GemmI8Micro gemm_i8_micro();
GemmI8Micro gemm_i8_micro(Isa isa);
// 6 x 16 (generic, AVX2) and 6 x 32 (AVX-512 VNNI).
void gemm_i8_micro_generic(int64_t kp, const int16_t* a, const int16_t* b, int32_t* c, int64_t ldc, bool accumulate);
void gemm_i8_micro_avx2(int64_t kp, const int16_t* a, const int16_t* b, int32_t* c, int64_t ldc, bool accumulate);
void gemm_i8_micro_avx512vnni(int64_t kp, const int16_t* a, const int16_t* b, int32_t* c, int64_t ldc, bool accumulate);

}  // namespace loom::device::cpu
