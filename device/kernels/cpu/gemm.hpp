// Host fp32 GEMM for the Cube-op kernels (matmul, gemm, conv, conv_transpose; their int8 forms
// run on gemm_i8.hpp, which shares the epilogue and the scratch memory below):
// C = epilogue(A x B), with A packed once into MR-row panels, B packed per cache block into
// NR-column panels by a caller-supplied packer (a strided matrix, or im2col read straight from
// an image), and a register-blocked MR x NR micro-kernel chosen per call from isa() (AVX-512,
// AVX2 + FMA or generic C++). MR is the same on every instruction set, so A packed once (a
// model's weights) serves them all; NR is the micro-kernel's, and packers are told it. Every
// kernel sums each output in the same order with the same fused multiply-adds (the generic one
// rounds each multiply), so AVX2 and AVX-512 agree bit for bit. Blocks of C run in parallel on
// the pool; packing buffers are per-thread and reused, so a steady stream of calls does not
// allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "device/kernels/cpu/isa.hpp"
#include "device/types.hpp"

namespace loom {
class ThreadPool;
}

namespace loom::device::cpu {

inline constexpr int64_t kGemmMR = 6;  // micro-tile rows (A panel height), every instruction set
// Micro-tile columns (B panel width): two vectors of the instruction set, 16 floats for generic
// and AVX2, 32 for AVX-512. Buffers sized for any kernel use kGemmNRMax.
inline constexpr int64_t kGemmNRMax = 32;
// Columns of B a blocked GEMM packs at once: a PackB call's nc is at most this.
inline constexpr int64_t kGemmNC = 256;

enum class Act : uint8_t { NONE, RELU, LEAKY_RELU, PRELU, CLIP, SIGMOID, HARD_SWISH };

// A tensor broadcast over the output: element (i, j) is p[i * rs + j * cs] (0 strides broadcast).
struct Addend {
    const float* p = nullptr;
    int64_t rs = 0, cs = 0;
    // Or fp16 storage (an fp16 model's residual map, cs 0 or 1), widened as it is added: no fp32
    // copy of the map. At most one of p and h is set.
    const f16* h = nullptr;

    bool on() const { return p || h; }
};

// Applied to every output element once its sum is complete, in this order: dequant, scale,
// bias, then residual when !residual_after_act, activation, residual when residual_after_act.
struct Epilogue {
    float scale = 1;  // multiplies A x B (Gemm's alpha)
    Addend bias;
    Act act = Act::NONE;
    float alpha = 0, beta = 0;  // LEAKY_RELU slope = alpha; CLIP to [alpha, beta]
    Addend slope;               // PRELU slopes
    Addend residual;
    bool residual_after_act = false;
    Addend dequant;  // multiplies A x B before `scale` (int8 kernels: x_scale x the channel's weight scale)

    bool trivial() const { return scale == 1 && !bias.on() && act == Act::NONE && !residual.on() && !dequant.on(); }
};

// Applies `ep` to the n outputs c[0..n) of row i, columns j0..j0+n.
void apply_epilogue(const Epilogue& ep, float* c, int64_t i, int64_t j0, int64_t n);

// A strided matrix: element (i, j) at p[i * rs + j * cs].
struct MatView {
    const float* p = nullptr;
    int64_t rs = 0, cs = 0;
};

// Writes the B block rows k0..k0+kc, columns j0..j0+nc into dst as ceil(nc / nr) panels of
// kc x nr floats (panel-major, then k, then column), zero-filling columns past nc; nr is the
// micro-kernel's NR (16 or 32).
using PackB = void (*)(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float* dst);

// The PackB for a strided matrix: ctx points to the MatView of B.
void gemm_pack_b_strided(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float* dst);

// A strided matrix of fp16 storage (an fp16 model's activations), element (i, j) at
// p[i * rs + j * cs].
struct MatViewF16 {
    const f16* p = nullptr;
    int64_t rs = 0, cs = 0;
};
// The PackB for one: ctx points to its MatViewF16; the values are widened (exactly) as they are
// packed, so B needs no fp32 copy.
void gemm_pack_b_strided_f16(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
                             float* dst);

// Packs all of A (M x K) into ceil(M / MR) panels of K x MR floats; rows past M are zero.
// dst must hold gemm_packed_a_floats(M, K).
void gemm_pack_a(int64_t M, int64_t K, MatView a, float* dst);
size_t gemm_packed_a_floats(int64_t M, int64_t K);

// C (M x N, row stride ldc) = ep(A x B) with A pre-packed by gemm_pack_a and B produced by
// pack_b(ctx, ...). Parallel over blocks of C on `pool`.
void gemm_packed(int64_t M, int64_t N, int64_t K, const float* a_packed, PackB pack_b, const void* b_ctx, float* c,
                 int64_t ldc, const Epilogue& ep, ThreadPool& pool);
// The same on the calling thread alone: for a caller that is itself one of many parallel items
// (a transposed conv's input rows), each small enough that its C stays in L2.
void gemm_packed(int64_t M, int64_t N, int64_t K, const float* a_packed, PackB pack_b, const void* b_ctx, float* c,
                 int64_t ldc, const Epilogue& ep);

// The same for a strided B (packs A into a per-thread buffer first).
void gemm(int64_t M, int64_t N, int64_t K, MatView a, MatView b, float* c, int64_t ldc, const Epilogue& ep,
          ThreadPool& pool);

// Per-thread scratch memory, handed out last-in first-out: a scope takes 64-byte aligned
// buffers from its thread's arena and gives them all back when it ends. Buffers taken by an
// enclosing scope never move, so they may be shared with other threads while this thread runs
// unrelated pool jobs (which open their own scopes above). The arena keeps its memory, so a
// steady stream of calls does not allocate.
class ScratchScope {
public:
    ScratchScope();
    ~ScratchScope();
    ScratchScope(const ScratchScope&) = delete;
    ScratchScope& operator=(const ScratchScope&) = delete;
    // Returns `floats` floats of uninitialised memory, valid until this scope ends.
    float* alloc(size_t floats);
    // The same for `count` values of another plain type (int8 activations, int16 panels, int32
    // sums of the int8 kernels).
    template <typename T>
    T* alloc_as(size_t count) {
        static_assert(std::is_trivial_v<T> && alignof(T) <= 64);
        return reinterpret_cast<T*>(alloc((count * sizeof(T) + sizeof(float) - 1) / sizeof(float)));
    }

private:
    size_t block_, used_;
};

// The micro-kernel: c (MR x nr at row stride ldc) = (accumulate ? c : 0) + a_panel x b_panel over
// kc, b_panel 64-byte aligned (32-byte for the 8-wide kernels). Implementations per instruction
// set; gemm_micro() returns the one for isa() with its nr, and MR x 16 and MR x 8 kernels (the
// same instruction set's; AVX2's 6 x 8 under AVX-512) for narrower last panels (Winograd's blocks, whose last 8 or 16
// tiles would otherwise cost a whole panel; the same kernel where nr is 16). Every kernel sums
// each output in the same order, so a column's value does not depend on its panel's width.
using MicroKernel = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);
struct GemmMicro {
    MicroKernel fn;
    int64_t nr;
    MicroKernel narrow;   // MR x 16
    MicroKernel narrow8;  // MR x 8
};
GemmMicro gemm_micro();
GemmMicro gemm_micro(Isa isa);
void gemm_micro_generic(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);  // 6 x 16
void gemm_micro_generic_8(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);  // 6 x 8
void gemm_micro_avx2(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);     // 6 x 16
// 6 x 8, one 8-float vector a row; also AVX-512's (the same fused multiply-adds on half the lanes).
void gemm_micro_avx2_8(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);
void gemm_micro_avx512(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate);   // 6 x 32
void gemm_micro_avx512_16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                          bool accumulate);  // 6 x 16

}  // namespace loom::device::cpu
