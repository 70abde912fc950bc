// Blocked int8 GEMM driver, the fp32 driver's loop order (gemm.cpp): per block of C, K in slices
// of KC; each slice packs its B block, then every NR-wide B micro-panel meets every MR-high A
// micro-panel in the micro-kernel, which sums into the block's int32 buffer. Once the last slice
// is in, the block is converted to float and the epilogue runs on it while it is in cache.
#include "device/kernels/cpu/gemm_i8.hpp"

#include <algorithm>
#include <cstring>

#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "device/kernels/cpu/isa.hpp"

namespace loom::device::cpu {

namespace {

constexpr int64_t MR = kGemmI8MR;
// K slice (even): a B micro-panel of KC x NR int16 is 16 KiB (L1): 512 for NR = 16, 256 for 32.
constexpr int64_t kc_for(int64_t nr) { return 8192 / nr; }
constexpr int64_t MC = 96;   // rows per block: an A block of MC x KC int16 is at most 96 KiB (L2)
constexpr int64_t NC = 256;  // columns per block
static_assert(kc_for(16) % 2 == 0 && kc_for(kGemmI8NRMax) % 2 == 0, "slices start on a pair of K");

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_even(int64_t k) { return k + (k & 1); }

void gemm_blocked(int64_t M, int64_t N, int64_t K, const int16_t* a_packed, PackBI8 pack_b, const void* b_ctx,
                  float* c_f32, int32_t* c_i32, int64_t ldc, const Epilogue& ep, ThreadPool& pool) {
    if (M <= 0 || N <= 0) return;
    LOOM_ASSERT_MSG(K <= kGemmIntKMax, "int8 GEMM with K = {} may overflow int32", K);
    const GemmI8Micro um = gemm_i8_micro();
    const MicroKernelI8 micro = um.fn;
    const int64_t NR = um.nr, KC = kc_for(NR);
    const int64_t mb = ceil_div(M, MC), nb = ceil_div(N, NC), k2 = round_even(K);
    auto block = [&](int64_t task) {
        const int64_t ic = (task % mb) * MC, jc = (task / mb) * NC;
        const int64_t mc = std::min(MC, M - ic), nc = std::min(NC, N - jc);
        ScratchScope scope;
        // int32 sums: C itself when it is int32, else a block buffer converted at the end.
        int32_t* ci;
        int64_t ldi;
        if (c_i32) ci = c_i32 + ic * ldc + jc, ldi = ldc;
        else ci = scope.alloc_as<int32_t>(static_cast<size_t>(mc * nc)), ldi = nc;
        if (K == 0)
            for (int64_t i = 0; i < mc; ++i) std::fill_n(ci + i * ldi, nc, 0);
        int16_t* bp =
            scope.alloc_as<int16_t>(static_cast<size_t>(ceil_div(nc, NR) * NR * std::min(KC, std::max<int64_t>(k2, 2))));
        alignas(64) int32_t tmp[MR * kGemmI8NRMax];
        for (int64_t pc = 0; pc < K; pc += KC) {
            const int64_t kc = std::min(KC, K - pc), kp = ceil_div(kc, 2);
            const bool acc = pc > 0;
            pack_b(b_ctx, pc, kc, jc, nc, NR, bp);
            for (int64_t jr = 0; jr < nc; jr += NR) {
                const int64_t cols = std::min(NR, nc - jr);
                const int16_t* bpanel = bp + (jr / NR) * kp * 2 * NR;
                for (int64_t ir = 0; ir < mc; ir += MR) {
                    const int64_t rows = std::min(MR, mc - ir);
                    const int16_t* apanel = a_packed + ((ic + ir) / MR) * k2 * MR + pc * MR;
                    int32_t* cp = ci + ir * ldi + jr;
                    if (rows == MR && cols == NR) {
                        micro(kp, apanel, bpanel, cp, ldi, acc);
                        continue;
                    }
                    if (acc)
                        for (int64_t i = 0; i < rows; ++i) std::memcpy(tmp + i * NR, cp + i * ldi, cols * sizeof(int32_t));
                    micro(kp, apanel, bpanel, tmp, NR, acc);
                    for (int64_t i = 0; i < rows; ++i) std::memcpy(cp + i * ldi, tmp + i * NR, cols * sizeof(int32_t));
                }
            }
        }
        if (c_i32) return;
        for (int64_t i = 0; i < mc; ++i) {
            float* row = c_f32 + (ic + i) * ldc + jc;
            const int32_t* s = ci + i * ldi;
            for (int64_t j = 0; j < nc; ++j) row[j] = static_cast<float>(s[j]);
            apply_epilogue(ep, row, ic + i, jc, nc);
        }
    };
    const int64_t tasks = mb * nb;
    if (tasks == 1) {
        block(0);
        return;
    }
    pool.parallel_for(static_cast<size_t>(tasks), 1, [&](size_t b, size_t e) {
        for (size_t t = b; t < e; ++t) block(static_cast<int64_t>(t));
    });
}

}  // namespace

size_t gemm_packed_a_i16(int64_t M, int64_t K) {
    return static_cast<size_t>(ceil_div(M, MR) * MR * std::max<int64_t>(round_even(K), 2));
}

void gemm_pack_a(int64_t M, int64_t K, MatViewI8 a, int16_t* dst) {
    const int64_t k2 = round_even(K);
    for (int64_t p = 0; p < ceil_div(M, MR); ++p) {
        int16_t* d = dst + p * k2 * MR;
        const int64_t i0 = p * MR, rows = std::min(MR, M - i0);
        for (int64_t k = 0; k < k2; k += 2, d += 2 * MR)
            for (int64_t r = 0; r < MR; ++r) {
                if (r >= rows) {
                    d[2 * r] = d[2 * r + 1] = 0;
                    continue;
                }
                const int8_t* s = a.p + (i0 + r) * a.rs + k * a.cs;
                d[2 * r] = s[0];
                d[2 * r + 1] = k + 1 < K ? s[a.cs] : 0;
            }
    }
}

void gemm_pack_b_strided(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, int16_t* dst) {
    const MatViewI8& b = *static_cast<const MatViewI8*>(ctx);
    const int64_t kp = ceil_div(kc, 2);
    for (int64_t p = 0; p < ceil_div(nc, nr); ++p) {
        const int64_t jb = j0 + p * nr, cols = std::min(nr, nc - p * nr);
        int16_t* d = dst + p * kp * 2 * nr;
        for (int64_t k = 0; k < kc; k += 2, d += 2 * nr) {
            const int8_t* s0 = b.p + (k0 + k) * b.rs + jb * b.cs;
            const bool pair = k + 1 < kc;
            if (pair && cols == nr && b.cs == 1) {
                for (int64_t j = 0; j < nr; j += 16) gemm_i8_pack_pair(s0 + j, s0 + b.rs + j, d + 2 * j);
                continue;
            }
            for (int64_t j = 0; j < nr; ++j) {
                d[2 * j] = j < cols ? s0[j * b.cs] : 0;
                d[2 * j + 1] = j < cols && pair ? s0[b.rs + j * b.cs] : 0;
            }
        }
    }
}

GemmI8Micro gemm_i8_micro(Isa i) {
    switch (i) {
    case Isa::GENERIC: break;
    case Isa::AVX2: return {gemm_i8_micro_avx2, 16};
    case Isa::AVX512:
        return isa_has_vnni() ? GemmI8Micro{gemm_i8_micro_avx512vnni, 32} : GemmI8Micro{gemm_i8_micro_avx2, 16};
    }
    return {gemm_i8_micro_generic, 16};
}

GemmI8Micro gemm_i8_micro() { return gemm_i8_micro(isa()); }

// Baseline x86-64 has pmaddwd (SSE2), which GCC does not find on its own here (the scalar loop
// stays scalar, 4x slower than the fp32 generic kernel): 4-lane vectors, 24 accumulators.
void gemm_i8_micro_generic(int64_t kp, const int16_t* a, const int16_t* b, int32_t* c, int64_t ldc, bool accumulate) {
    constexpr int64_t NR = 16;
#if defined(__SSE2__)
    __m128i acc[MR][NR / 4];
    for (int64_t i = 0; i < MR; ++i)
        for (int64_t q = 0; q < NR / 4; ++q)
            acc[i][q] = accumulate ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i * ldc + 4 * q))
                                   : _mm_setzero_si128();
    for (int64_t p = 0; p < kp; ++p, a += 2 * MR, b += 2 * NR) {
        __m128i bv[NR / 4];
        for (int64_t q = 0; q < NR / 4; ++q) bv[q] = _mm_load_si128(reinterpret_cast<const __m128i*>(b + 8 * q));
        for (int64_t i = 0; i < MR; ++i) {
            int32_t pair;
            std::memcpy(&pair, a + 2 * i, sizeof pair);
            const __m128i x = _mm_set1_epi32(pair);
            for (int64_t q = 0; q < NR / 4; ++q) acc[i][q] = _mm_add_epi32(acc[i][q], _mm_madd_epi16(x, bv[q]));
        }
    }
    for (int64_t i = 0; i < MR; ++i)
        for (int64_t q = 0; q < NR / 4; ++q) _mm_storeu_si128(reinterpret_cast<__m128i*>(c + i * ldc + 4 * q), acc[i][q]);
#else
    int32_t acc[MR][NR];
    for (int64_t i = 0; i < MR; ++i)
        for (int64_t j = 0; j < NR; ++j) acc[i][j] = accumulate ? c[i * ldc + j] : 0;
    for (int64_t p = 0; p < kp; ++p, a += 2 * MR, b += 2 * NR)
        for (int64_t i = 0; i < MR; ++i) {
            const int32_t a0 = a[2 * i], a1 = a[2 * i + 1];
            for (int64_t j = 0; j < NR; ++j) acc[i][j] += a0 * b[2 * j] + a1 * b[2 * j + 1];
        }
    for (int64_t i = 0; i < MR; ++i)
        for (int64_t j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j];
#endif
}

void gemm_packed(int64_t M, int64_t N, int64_t K, const int16_t* a_packed, PackBI8 pack_b, const void* b_ctx,
                 float* c, int64_t ldc, const Epilogue& ep, ThreadPool& pool) {
    gemm_blocked(M, N, K, a_packed, pack_b, b_ctx, c, nullptr, ldc, ep, pool);
}

void gemm_packed(int64_t M, int64_t N, int64_t K, const int16_t* a_packed, PackBI8 pack_b, const void* b_ctx,
                 int32_t* c, int64_t ldc, ThreadPool& pool) {
    gemm_blocked(M, N, K, a_packed, pack_b, b_ctx, nullptr, c, ldc, Epilogue{}, pool);
}

void gemm(int64_t M, int64_t N, int64_t K, MatViewI8 a, MatViewI8 b, float* c, int64_t ldc, const Epilogue& ep,
          ThreadPool& pool) {
    if (M <= 0 || N <= 0) return;
    ScratchScope scope;
    int16_t* ap = scope.alloc_as<int16_t>(gemm_packed_a_i16(M, K));
    gemm_pack_a(M, K, a, ap);
    gemm_packed(M, N, K, ap, static_cast<PackBI8>(gemm_pack_b_strided), &b, c, ldc, ep, pool);
}

}  // namespace loom::device::cpu
