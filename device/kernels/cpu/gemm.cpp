// Blocked GEMM driver (BLIS loop order): per block of C, K in slices of KC; each slice packs
// its B block, then every NR-wide B micro-panel (in L1) meets every MR-high A micro-panel
// (streamed from L2) in the micro-kernel. The epilogue runs on a block once its last K slice
// is summed, while the block is still in cache.
#include "device/kernels/cpu/gemm.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "common/sanitizer.hpp"
#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/kernels/cpu/vmath.hpp"

namespace loom::device::cpu {

namespace {

// Under AddressSanitizer the scratch arena poisons what it has not handed out, and a redzone after
// every buffer, so a kernel that writes or reads past one of its scratch buffers (into the next,
// or into memory the arena keeps for later) is reported like a heap overflow.
#if LOOM_ASAN
constexpr size_t kRedzoneFloats = 16;
void poison(float* p, size_t floats) { ASAN_POISON_MEMORY_REGION(p, floats * sizeof(float)); }
void unpoison(float* p, size_t floats) { ASAN_UNPOISON_MEMORY_REGION(p, floats * sizeof(float)); }
#else
constexpr size_t kRedzoneFloats = 0;
void poison(float*, size_t) {}
void unpoison(float*, size_t) {}
#endif

constexpr int64_t MR = kGemmMR;
// K slice: a B micro-panel of KC x NR floats is 16 KiB (L1), so KC = 256 for NR = 16 and 128
// for NR = 32. Slicing K never changes a result: a slice's sums go to C exactly and the next
// slice continues them in the same order.
constexpr int64_t kc_for(int64_t nr) { return 4096 / nr; }
constexpr int64_t MC = 96;   // rows per block: an A block of MC x KC floats is at most 96 KiB (L2)
constexpr int64_t NC = kGemmNC;  // columns per block

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct AlignedFree {
    void operator()(float* p) const { std::free(p); }
};

// The thread's LIFO arena: blocks[cur] is being filled; blocks after it are empty.
struct Arena {
    struct Block {
        std::unique_ptr<float, AlignedFree> p;
        size_t cap = 0, used = 0;
    };
    std::vector<Block> blocks;
    size_t cur = 0;

    static Arena& local() {
        thread_local Arena a;
        return a;
    }

    float* alloc(size_t requested) {
        // keep every buffer 64-byte aligned (and, under ASan, followed by a poisoned redzone)
        const size_t floats = (std::max<size_t>(requested, 1) + 15) / 16 * 16 + kRedzoneFloats;
        for (;;) {
            if (cur == blocks.size()) blocks.emplace_back();
            Block& b = blocks[cur];
            if (b.cap - b.used >= floats) {
                float* p = b.p.get() + b.used;
                b.used += floats;
                unpoison(p, requested);
                return p;
            }
            if (b.used == 0) {  // an empty block can be regrown: nobody holds memory from it
                size_t want = std::max(floats, std::max<size_t>(b.cap * 2, size_t{1} << 18));
                if (b.p) unpoison(b.p.get(), b.cap);  // back to the allocator as it gave it
                b.p.reset(static_cast<float*>(std::aligned_alloc(64, want * sizeof(float))));
                LOOM_ASSERT_MSG(b.p != nullptr, "out of host memory for {} bytes of kernel scratch",
                                want * sizeof(float));
                b.cap = want;
                poison(b.p.get(), b.cap);
                continue;
            }
            ++cur;
        }
    }
    // Gives back everything past `used` in block i (a scope ending).
    void release(size_t i, size_t used) {
        Block& b = blocks[i];
        if (b.used > used) poison(b.p.get() + used, b.used - used);
        b.used = used;
    }
};

float activate(const Epilogue& ep, float v, float slope) {
    switch (ep.act) {
    case Act::NONE: return v;
    case Act::RELU: return v > 0 ? v : 0;
    case Act::LEAKY_RELU: return v > 0 ? v : v * ep.alpha;
    case Act::PRELU: return v > 0 ? v : v * slope;
    case Act::CLIP: return std::min(std::max(v, ep.alpha), ep.beta);
    case Act::SIGMOID: return 1.0f / (1.0f + std::exp(-v));
    case Act::HARD_SWISH: return v * std::min(std::max(v / 6.0f + 0.5f, 0.0f), 1.0f);
    }
    return v;
}

}  // namespace

ScratchScope::ScratchScope() {
    Arena& a = Arena::local();
    block_ = a.cur;
    used_ = a.cur < a.blocks.size() ? a.blocks[a.cur].used : 0;
}

ScratchScope::~ScratchScope() {
    Arena& a = Arena::local();
    for (size_t i = block_ + 1; i < a.blocks.size(); ++i) a.release(i, 0);
    if (block_ < a.blocks.size()) a.release(block_, used_);
    a.cur = block_;
}

float* ScratchScope::alloc(size_t floats) { return Arena::local().alloc(floats); }

void apply_epilogue(const Epilogue& ep, float* c, int64_t i, int64_t j0, int64_t n) {
    if (ep.trivial()) return;
    if (ep.dequant.p) {  // dequant, bias and slope are fp32
        const float* p = ep.dequant.p + i * ep.dequant.rs + j0 * ep.dequant.cs;
        if (ep.dequant.cs == 0) {
            const float v = *p;
            for (int64_t j = 0; j < n; ++j) c[j] *= v;
        } else {
            for (int64_t j = 0; j < n; ++j) c[j] *= p[j * ep.dequant.cs];
        }
    }
    if (ep.scale != 1)
        for (int64_t j = 0; j < n; ++j) c[j] *= ep.scale;
    auto add = [&](const Addend& a) {
        if (a.h) {  // fp16: widened a run at a time
            const f16* h = a.h + i * a.rs + j0 * a.cs;
            if (a.cs == 0) {
                const float v = f16_to_f32(*h);
                for (int64_t j = 0; j < n; ++j) c[j] += v;
                return;
            }
            LOOM_ASSERT(a.cs == 1);
            constexpr int64_t kRun = 256;
            float w[kRun];
            for (int64_t j = 0; j < n; j += kRun) {
                const int64_t m = std::min(kRun, n - j);
                vec_f16_to_f32(h + j, w, m);
                for (int64_t t = 0; t < m; ++t) c[j + t] += w[t];
            }
            return;
        }
        const float* p = a.p + i * a.rs + j0 * a.cs;
        if (a.cs == 0) {
            const float v = *p;
            for (int64_t j = 0; j < n; ++j) c[j] += v;
        } else if (a.cs == 1) {
            for (int64_t j = 0; j < n; ++j) c[j] += p[j];
        } else {
            for (int64_t j = 0; j < n; ++j) c[j] += p[j * a.cs];
        }
    };
    if (ep.bias.p) add(ep.bias);
    if (ep.residual.on() && !ep.residual_after_act) add(ep.residual);
    switch (ep.act) {
    case Act::NONE: break;
    // Branch-free forms (max/min) so the loops vectorise: a data-dependent branch per element
    // mispredicts on half of them.
    case Act::RELU:
        for (int64_t j = 0; j < n; ++j) c[j] = std::max(c[j], 0.0f);
        break;
    case Act::LEAKY_RELU:
        for (int64_t j = 0; j < n; ++j) c[j] = std::max(c[j], 0.0f) + std::min(c[j], 0.0f) * ep.alpha;
        break;
    case Act::PRELU: {
        const float* s = ep.slope.p + i * ep.slope.rs + j0 * ep.slope.cs;
        if (ep.slope.cs == 0) {
            const float v = *s;
            for (int64_t j = 0; j < n; ++j) c[j] = std::max(c[j], 0.0f) + std::min(c[j], 0.0f) * v;
        } else {
            for (int64_t j = 0; j < n; ++j) c[j] = std::max(c[j], 0.0f) + std::min(c[j], 0.0f) * s[j * ep.slope.cs];
        }
        break;
    }
    case Act::SIGMOID: vec_sigmoid(c, c, n); break;
    default:
        for (int64_t j = 0; j < n; ++j) c[j] = activate(ep, c[j], 0);
    }
    if (ep.residual.on() && ep.residual_after_act) add(ep.residual);
}

size_t gemm_packed_a_floats(int64_t M, int64_t K) {
    return static_cast<size_t>(ceil_div(M, MR) * MR * std::max<int64_t>(K, 1));
}

void gemm_pack_a(int64_t M, int64_t K, MatView a, float* dst) {
    for (int64_t p = 0; p < ceil_div(M, MR); ++p) {
        float* d = dst + p * K * MR;
        const int64_t i0 = p * MR, rows = std::min(MR, M - i0);
        for (int64_t k = 0; k < K; ++k) {
            for (int64_t r = 0; r < rows; ++r) d[k * MR + r] = a.p[(i0 + r) * a.rs + k * a.cs];
            for (int64_t r = rows; r < MR; ++r) d[k * MR + r] = 0;
        }
    }
}

namespace {

// B's panels from a strided matrix of T (float, or f16 widened as it is copied).
template <typename T, typename View>
void pack_b_strided(const View& b, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float* dst) {
    for (int64_t p = 0; p < ceil_div(nc, nr); ++p) {
        const int64_t jb = j0 + p * nr, cols = std::min(nr, nc - p * nr);
        float* d = dst + p * kc * nr;
        for (int64_t k = 0; k < kc; ++k, d += nr) {
            const T* s = b.p + (k0 + k) * b.rs + jb * b.cs;
            if (b.cs != 1)
                for (int64_t j = 0; j < cols; ++j) d[j] = load_as_f32(s, j * b.cs);
            else if constexpr (std::is_same_v<T, f16>) vec_f16_to_f32(s, d, cols);
            else std::memcpy(d, s, static_cast<size_t>(cols) * sizeof(float));
            for (int64_t j = cols; j < nr; ++j) d[j] = 0;
        }
    }
}

}  // namespace

void gemm_pack_b_strided(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr, float* dst) {
    pack_b_strided<float>(*static_cast<const MatView*>(ctx), k0, kc, j0, nc, nr, dst);
}

void gemm_pack_b_strided_f16(const void* ctx, int64_t k0, int64_t kc, int64_t j0, int64_t nc, int64_t nr,
                             float* dst) {
    pack_b_strided<f16>(*static_cast<const MatViewF16*>(ctx), k0, kc, j0, nc, nr, dst);
}

GemmMicro gemm_micro(Isa i) {
    switch (i) {
    case Isa::GENERIC: break;
    case Isa::AVX2: return {gemm_micro_avx2, 16, gemm_micro_avx2, gemm_micro_avx2_8};
    case Isa::AVX512: return {gemm_micro_avx512, 32, gemm_micro_avx512_16, gemm_micro_avx2_8};
    }
    return {gemm_micro_generic, 16, gemm_micro_generic, gemm_micro_generic_8};
}

GemmMicro gemm_micro() { return gemm_micro(isa()); }

namespace {

template <int64_t NR>
void micro_generic(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
    float acc[MR][NR];
    for (int64_t i = 0; i < MR; ++i)
        for (int64_t j = 0; j < NR; ++j) acc[i][j] = accumulate ? c[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; ++k, a += MR, b += NR)
        for (int64_t i = 0; i < MR; ++i) {
            const float ai = a[i];
            for (int64_t j = 0; j < NR; ++j) acc[i][j] += ai * b[j];
        }
    for (int64_t i = 0; i < MR; ++i)
        for (int64_t j = 0; j < NR; ++j) c[i * ldc + j] = acc[i][j];
}

}  // namespace

void gemm_micro_generic(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
    micro_generic<16>(kc, a, b, c, ldc, accumulate);
}

void gemm_micro_generic_8(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
    micro_generic<8>(kc, a, b, c, ldc, accumulate);
}

namespace {

// pool nullptr: every block on the calling thread.
void gemm_blocked(int64_t M, int64_t N, int64_t K, const float* a_packed, PackB pack_b, const void* b_ctx, float* c,
                  int64_t ldc, const Epilogue& ep, ThreadPool* pool) {
    if (M <= 0 || N <= 0) return;
    const GemmMicro um = gemm_micro();
    const MicroKernel micro = um.fn;
    const int64_t NR = um.nr, KC = kc_for(NR);
    const int64_t mb = ceil_div(M, MC), nb = ceil_div(N, NC);
    // A task per column block packs all of its B (K x NC, at most kWholeBBytes: it stays in L2)
    // once and runs every row block against it, when there are enough column blocks to keep
    // every thread busy. B's packing is an im2col gather for a strided conv and a copy of a
    // whole map for a deconv; a task per (row block, column block) packed it once per row block.
    constexpr int64_t kWholeBBytes = int64_t{512} << 10;
    const int64_t threads = pool ? static_cast<int64_t>(pool->size()) : 1;
    const bool whole = mb > 1 && nb >= 4 * threads &&
                       K * ceil_div(NC, NR) * NR * static_cast<int64_t>(sizeof(float)) <= kWholeBBytes;
    // C rows ic..ic+mc, columns jc..jc+nc (+)= A's rows x the packed K slice pc..pc+kc of B (bk).
    auto multiply = [&](int64_t ic, int64_t mc, int64_t jc, int64_t nc, int64_t pc, int64_t kc, const float* bk) {
        const bool acc = pc > 0;
        alignas(64) float tmp[MR * kGemmNRMax];
        for (int64_t jr = 0; jr < nc; jr += NR) {
            const int64_t cols = std::min(NR, nc - jr);
            const float* bpanel = bk + (jr / NR) * kc * NR;
            for (int64_t ir = 0; ir < mc; ir += MR) {
                const int64_t rows = std::min(MR, mc - ir);
                const float* apanel = a_packed + ((ic + ir) / MR) * K * MR + pc * MR;
                float* cp = c + (ic + ir) * ldc + jc + jr;
                if (rows == MR && cols == NR) {
                    micro(kc, apanel, bpanel, cp, ldc, acc);
                    continue;
                }
                if (acc)
                    for (int64_t i = 0; i < rows; ++i) std::memcpy(tmp + i * NR, cp + i * ldc, cols * sizeof(float));
                micro(kc, apanel, bpanel, tmp, NR, acc);
                for (int64_t i = 0; i < rows; ++i) std::memcpy(cp + i * ldc, tmp + i * NR, cols * sizeof(float));
            }
        }
    };
    auto block = [&](int64_t jb, int64_t ib0, int64_t ib1) {
        const int64_t jc = jb * NC, nc = std::min(NC, N - jc);
        const int64_t width = ceil_div(nc, NR) * NR;  // floats per row of k in a packed block
        ScratchScope scope;
        if (K == 0)
            for (int64_t i = ib0 * MC; i < std::min(M, ib1 * MC); ++i) std::fill_n(c + i * ldc + jc, nc, 0.0f);
        float* bp = scope.alloc(static_cast<size_t>(width * (whole ? K : std::min(KC, std::max<int64_t>(K, 1)))));
        if (whole)
            for (int64_t pc = 0; pc < K; pc += KC) pack_b(b_ctx, pc, std::min(KC, K - pc), jc, nc, NR, bp + pc * width);
        for (int64_t ib = ib0; ib < ib1; ++ib) {
            const int64_t ic = ib * MC, mc = std::min(MC, M - ic);
            for (int64_t pc = 0; pc < K; pc += KC) {
                const int64_t kc = std::min(KC, K - pc);
                if (!whole) pack_b(b_ctx, pc, kc, jc, nc, NR, bp);
                multiply(ic, mc, jc, nc, pc, kc, whole ? bp + pc * width : bp);
            }
            for (int64_t i = ic; i < ic + mc; ++i) apply_epilogue(ep, c + i * ldc + jc, i, jc, nc);
        }
    };
    const int64_t tasks = whole ? nb : mb * nb;
    auto run = [&](int64_t t) {
        if (whole) block(t, 0, mb);
        else block(t / mb, t % mb, t % mb + 1);
    };
    if (tasks == 1 || !pool) {
        for (int64_t t = 0; t < tasks; ++t) run(t);
        return;
    }
    pool->parallel_for(static_cast<size_t>(tasks), 1, [&](size_t b, size_t e) {
        for (size_t t = b; t < e; ++t) run(static_cast<int64_t>(t));
    });
}

}  // namespace

void gemm_packed(int64_t M, int64_t N, int64_t K, const float* a_packed, PackB pack_b, const void* b_ctx, float* c,
                 int64_t ldc, const Epilogue& ep, ThreadPool& pool) {
    gemm_blocked(M, N, K, a_packed, pack_b, b_ctx, c, ldc, ep, &pool);
}

void gemm_packed(int64_t M, int64_t N, int64_t K, const float* a_packed, PackB pack_b, const void* b_ctx, float* c,
                 int64_t ldc, const Epilogue& ep) {
    gemm_blocked(M, N, K, a_packed, pack_b, b_ctx, c, ldc, ep, nullptr);
}

void gemm(int64_t M, int64_t N, int64_t K, MatView a, MatView b, float* c, int64_t ldc, const Epilogue& ep,
          ThreadPool& pool) {
    if (M <= 0 || N <= 0) return;
    ScratchScope scope;
    float* ap = scope.alloc(gemm_packed_a_floats(M, K));
    gemm_pack_a(M, K, a, ap);
    gemm_packed(M, N, K, ap, gemm_pack_b_strided, &b, c, ldc, ep, pool);
}

}  // namespace loom::device::cpu
