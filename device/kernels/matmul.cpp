// matmul: C[M,N] = act(A[M,K] x B[K,N] + bias[N]) on the Cube unit.
// Inputs: A, B, optional bias (length N). Output: C. All f32, or all f16 (fp32 accumulation,
// rounded to f16 once at the end, as the Cube's L0C -> UB path does).
// Attribute: activation = "none" (default) or "relu". Tiling: CubeTiling (default heuristic below).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"

namespace loom::device {

namespace {

using cost::ceil_div;
using cost::round_up;

struct Dims {
    int64_t m, n, k;
    bool bias;
    int activation;
    DType dtype;
};

Result<Dims> check(const KernelLaunch& l) {
    if (l.inputs.size() < 2 || l.inputs.size() > 3 || l.outputs.size() != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul takes A, B[, bias] and one output, got {} and {}",
                          l.inputs.size(), l.outputs.size());
    const TensorRef &a = l.inputs[0], &b = l.inputs[1], &c = l.outputs[0];
    if (a.rank != 2 || b.rank != 2 || c.rank != 2)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: A, B and C must be 2-D (ranks {}, {}, {})", a.rank,
                          b.rank, c.rank);
    Dims d{a.dim(0), b.dim(1), a.dim(1), l.inputs.size() == 3, 0, a.dtype};
    if (b.dim(0) != d.k || c.dim(0) != d.m || c.dim(1) != d.n)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: shapes A {}x{}, B {}x{}, C {}x{} do not agree", d.m,
                          d.k, b.dim(0), d.n, c.dim(0), c.dim(1));
    if (d.m <= 0 || d.n <= 0 || d.k <= 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: empty shape {}x{}x{}", d.m, d.n, d.k);
    if (d.dtype != DType::F32 && d.dtype != DType::F16)
        return make_error(StatusCode::UNSUPPORTED, "matmul: dtype {} (f32 and f16 are supported)", dtype_name(d.dtype));
    for (const auto* t : {&b, &c})
        if (t->dtype != d.dtype) return make_error(StatusCode::INVALID_ARGUMENT, "matmul: mixed dtypes");
    if (d.bias) {
        const TensorRef& bias = l.inputs[2];
        if (bias.dtype != d.dtype || bias.elements() != d.n)
            return make_error(StatusCode::INVALID_ARGUMENT, "matmul: bias must hold N = {} {} values", d.n,
                              dtype_name(d.dtype));
    }
    LOOM_TRY(l.attrs.check_known({"activation"}).with_context("matmul"));
    auto act = l.attrs.get_string("activation", "none");
    if (!act.ok()) return act.status().with_context("matmul");
    if (*act != "none" && *act != "relu")
        return make_error(StatusCode::INVALID_ARGUMENT, "matmul: activation '{}' (none or relu)", *act);
    d.activation = *act == "relu" ? 1 : 0;
    return d;
}

Status check_tiling(const CubeTiling& t, const Dims& d, const DeviceSpec& s);

// Default tiling: L0 tiles of up to 128 x 128 x 64 (whole fractals), one L0 tile per L1 block
// along M and N, K staged in L1 up to four L0 slices; halve M/N blocks until every core has
// work; then, for small buffer configurations, halve K, then M and N, until the tiling fits.
CubeTiling default_tiling(const Dims& d, const DeviceSpec& s) {
    int64_t f = s.cube_fractal;
    CubeTiling t;
    t.m_l0 = std::min(round_up(d.m, f), round_up(128, f));
    t.n_l0 = std::min(round_up(d.n, f), round_up(128, f));
    t.k_l0 = std::min(round_up(d.k, f), round_up(64, f));
    auto blocks = [&] { return ceil_div(d.m, t.m_l0) * ceil_div(d.n, t.n_l0); };
    while (blocks() < s.aicore_count && (t.m_l0 > f || t.n_l0 > f)) {
        if (t.m_l0 >= t.n_l0 && t.m_l0 > f) t.m_l0 = round_up(t.m_l0 / 2, f);
        else t.n_l0 = round_up(t.n_l0 / 2, f);
    }
    auto set_l1 = [&] {
        t.m_l1 = t.m_l0;
        t.n_l1 = t.n_l0;
        t.k_l1 = std::min(round_up(d.k, t.k_l0), 4 * t.k_l0);
    };
    set_l1();
    while (!check_tiling(t, d, s).ok()) {
        if (t.k_l1 > t.k_l0) t.k_l1 -= t.k_l0;
        else if (t.k_l0 > f) t.k_l0 = round_up(t.k_l0 / 2, f);
        else if (t.m_l0 >= t.n_l0 && t.m_l0 > f) t.m_l0 = round_up(t.m_l0 / 2, f);
        else if (t.n_l0 > f) t.n_l0 = round_up(t.n_l0 / 2, f);
        else break;  // one fractal does not fit: check_tiling reports it to the caller
        if (t.m_l1 != t.m_l0 || t.n_l1 != t.n_l0 || t.k_l1 % t.k_l0) set_l1();
    }
    return t;
}

Status check_tiling(const CubeTiling& t, const Dims& d, const DeviceSpec& s) {
    int64_t f = s.cube_fractal;
    for (int64_t v : {t.m_l0, t.n_l0, t.k_l0})
        if (v <= 0 || v % f)
            return make_error(StatusCode::INVALID_ARGUMENT, "tiling: L0 sizes {}x{}x{} must be positive multiples of {}",
                              t.m_l0, t.n_l0, t.k_l0, f);
    if (t.m_l1 <= 0 || t.n_l1 <= 0 || t.k_l1 <= 0 || t.m_l1 % t.m_l0 || t.n_l1 % t.n_l0 || t.k_l1 % t.k_l0)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "tiling: L1 sizes {}x{}x{} must be positive multiples of the L0 sizes {}x{}x{}", t.m_l1,
                          t.n_l1, t.k_l1, t.m_l0, t.n_l0, t.k_l0);
    if (t.cores < 0 || t.cores > s.aicore_count)
        return make_error(StatusCode::INVALID_ARGUMENT, "tiling: cores = {} outside [0, {}]", t.cores, s.aicore_count);
    int64_t in = static_cast<int64_t>(dtype_size(d.dtype));
    int64_t db = t.double_buffer ? 2 : 1;
    struct Need {
        const char* buffer;
        int64_t need, have;
    } needs[] = {
        {"L1", db * (t.m_l1 * t.k_l1 + t.k_l1 * t.n_l1) * in, s.l1_bytes()},
        {"L0A", db * t.m_l0 * t.k_l0 * in, s.l0a_bytes()},
        {"L0B", db * t.k_l0 * t.n_l0 * in, s.l0b_bytes()},
        // Every L0 output tile of an L1 block accumulates across all K stages, so L0C holds
        // the whole block in fp32 (twice with double buffering, so the epilogue drains one).
        {"L0C", db * t.m_l1 * t.n_l1 * 4, s.l0c_bytes()},
        {"UB", t.m_l0 * t.n_l0 * 4 + t.n_l0 * 4, s.ub_bytes()},
    };
    for (const Need& n : needs)
        if (n.need > n.have)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "tiling: {} needs {} bytes but holds {} (L1 {}x{}x{}, L0 {}x{}x{}, double buffer {})",
                              n.buffer, n.need, n.have, t.m_l1, t.n_l1, t.k_l1, t.m_l0, t.n_l0, t.k_l0,
                              t.double_buffer ? "on" : "off");
    return {};
}

Result<CycleBreakdown> matmul_cost(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Dims d, check(l));
    CubeTiling t;
    if (const auto* given = std::get_if<CubeTiling>(&l.tiling)) t = *given;
    else if (std::holds_alternative<std::monostate>(l.tiling)) t = default_tiling(d, s);
    else return make_error(StatusCode::INVALID_ARGUMENT, "matmul needs a CubeTiling, not a VectorSchedule");
    LOOM_TRY(check_tiling(t, d, s));

    const double in = static_cast<double>(dtype_size(d.dtype));
    const double out = in;
    const int64_t f = s.cube_fractal;
    const int64_t blocks_m = ceil_div(d.m, t.m_l1), blocks_n = ceil_div(d.n, t.n_l1);
    CycleBreakdown cb;
    cb.blocks = blocks_m * blocks_n;
    cb.cores_used = std::min(cb.blocks, t.cores ? t.cores : s.aicore_count);
    cb.rounds = ceil_div(cb.blocks, cb.cores_used);

    // L2: each byte of A and B misses once; re-reads hit when the operand re-read across the
    // inner loop fits in L2 next to the other operand's panel, and miss again otherwise.
    const double a_bytes = static_cast<double>(d.m * d.k) * in, b_bytes = static_cast<double>(d.k * d.n) * in;
    const double a_reads = a_bytes * static_cast<double>(blocks_n), b_reads = b_bytes * static_cast<double>(blocks_m);
    const double l2 = static_cast<double>(s.l2_bytes());
    double refetch = 0;
    if (!t.n_outer) {  // M outer: B is swept once per M block
        double panel = static_cast<double>(t.m_l1 * d.k) * in;
        if (b_bytes + panel > l2) refetch = b_reads - b_bytes;
    } else {
        double panel = static_cast<double>(t.n_l1 * d.k) * in;
        if (a_bytes + panel > l2) refetch = a_reads - a_bytes;
    }
    const double reads = a_reads + b_reads;
    cb.l2_miss_bytes = a_bytes + b_bytes + refetch;
    cb.l2_hit_bytes = reads - cb.l2_miss_bytes;
    const double miss_frac = cb.l2_miss_bytes / reads;

    // One L1 stage: MTE2 brings the A and B slices; MTE1 feeds every L0 tile pair; the Cube
    // runs (m_l0/f) x (n_l0/f) x (k_l0/f) fractals per L0 tile (f32 at half rate).
    const double gm_bpc = cost::gm_bytes_per_cycle(s, s.mte_gm_to_l1, cb.cores_used);
    const double l2_bpc = cost::l2_bytes_per_cycle(s, s.mte_gm_to_l1, cb.cores_used);
    const double stage_bytes = static_cast<double>(t.m_l1 * t.k_l1 + t.k_l1 * t.n_l1) * in;
    const double t_mte2 = stage_bytes * (miss_frac / gm_bpc + (1 - miss_frac) / l2_bpc);
    const double l0_tiles = static_cast<double>((t.m_l1 / t.m_l0) * (t.n_l1 / t.n_l0) * (t.k_l1 / t.k_l0));
    const double t_mte1 = l0_tiles * static_cast<double>(t.m_l0 * t.k_l0 + t.k_l0 * t.n_l0) * in /
                          static_cast<double>(s.mte_l1_to_l0);
    const double rate = d.dtype == DType::F32 ? 2.0 : 1.0;
    const double t_cube =
        l0_tiles * static_cast<double>((t.m_l0 / f) * (t.n_l0 / f) * (t.k_l0 / f)) * rate;
    const double steps = static_cast<double>(ceil_div(d.k, t.k_l1));
    // Double buffering pipelines MTE1 with the Cube tile by tile inside a stage (first tile's
    // load, then the slower of the two), and MTE2 with that across stages: every stage pays
    // once, then each further stage costs only the bottleneck.
    double main;
    if (t.double_buffer) {
        const double load = t_mte1 / l0_tiles, mma = t_cube / l0_tiles;
        double inner = load + (l0_tiles - 1) * std::max(load, mma) + mma;
        main = t_mte2 + inner + (steps - 1) * std::max(t_mte2, inner);
    } else {
        main = steps * (t_mte2 + t_mte1 + t_cube);
    }

    // Epilogue per block: L0C -> UB (fp32), bias + activation + cast on the Vector unit, UB -> GM.
    const double c_elems = static_cast<double>(t.m_l1 * t.n_l1);
    const double t_fix = c_elems * 4 / static_cast<double>(s.mte_l0c_to_ub);
    // Vector passes: bias add, activation, and the fp32 -> f16 cast when storing f16.
    const double vec_ops = (d.bias ? 1 : 0) + (d.activation ? 1 : 0) + (d.dtype == DType::F16 ? 1 : 0);
    const double t_vec = vec_ops * c_elems * 4 / static_cast<double>(s.vector_bytes_per_cycle);
    const double t_out = c_elems * out / cost::gm_bytes_per_cycle(s, s.mte_ub_to_gm, cb.cores_used);
    const double epi = t_fix + t_vec + t_out;

    const double rounds = static_cast<double>(cb.rounds);
    cb.mte_in = rounds * (t_mte2 + t_mte1) * steps;
    cb.cube = rounds * t_cube * steps;
    cb.vector = rounds * t_vec;
    cb.mte_out = rounds * (t_fix + t_out);
    cb.scalar = rounds * (cost::kScalarInstrPerBlock + steps * l0_tiles * cost::kScalarInstrPerTile) /
                static_cast<double>(s.scalar_ops_per_cycle);
    // With double buffering a block's epilogue overlaps the next block's main loop.
    double body = t.double_buffer ? rounds * std::max(main, epi) + std::min(main, epi) : rounds * (main + epi);
    // Overlap cannot beat the bandwidth: the core's loads that miss L2 and its stores share its
    // memory share; its L2 hits share its L2 share.
    const double gm_bytes = rounds * (steps * stage_bytes * miss_frac + c_elems * out);
    const double l2_bytes = rounds * steps * stage_bytes * (1 - miss_frac);
    body = std::max({body, gm_bytes / cost::memory_share_per_cycle(s, cb.cores_used),
                     l2_bytes * s.aicore_clock_ghz * static_cast<double>(cb.cores_used) / s.l2_bandwidth_gbps});
    cb.total = body + cb.scalar;
    cb.flops = 2.0 * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
    return cb;
}

template <typename T>
float load(const T* p, int64_t i) {
    if constexpr (std::is_same_v<T, f16>) return f16_to_f32(p[i]);
    else return p[i];
}

template <typename T>
void store(T* p, int64_t i, float v) {
    if constexpr (std::is_same_v<T, f16>) p[i] = f32_to_f16(v);
    else p[i] = v;
}

// Row panels of C computed in parallel; each row accumulates A[i,k] * B[k,:] in fp32 (the
// inner loop over N is contiguous and vectorises).
template <typename T>
Status matmul_run_typed(const KernelLaunch& l, const Dims& d, ThreadPool& pool) {
    const T* a = l.inputs[0].as<const T>();
    const T* b = l.inputs[1].as<const T>();
    const T* bias = d.bias ? l.inputs[2].as<const T>() : nullptr;
    T* c = l.outputs[0].as<T>();
    std::vector<float> bf;  // B widened once when stored as f16
    const float* bw;
    if constexpr (std::is_same_v<T, f16>) {
        bf.resize(static_cast<size_t>(d.k * d.n));
        for (int64_t i = 0; i < d.k * d.n; ++i) bf[static_cast<size_t>(i)] = f16_to_f32(b[i]);
        bw = bf.data();
    } else {
        bw = b;
    }
    size_t grain = static_cast<size_t>(std::max<int64_t>(1, 65536 / std::max<int64_t>(1, d.n * d.k / 64)));
    pool.parallel_for(static_cast<size_t>(d.m), grain, [&](size_t r0, size_t r1) {
        std::vector<float> acc(static_cast<size_t>(d.n));
        for (size_t r = r0; r < r1; ++r) {
            int64_t i = static_cast<int64_t>(r);
            for (int64_t j = 0; j < d.n; ++j) acc[static_cast<size_t>(j)] = bias ? load(bias, j) : 0.0f;
            for (int64_t kk = 0; kk < d.k; ++kk) {
                float av = load(a, i * d.k + kk);
                const float* brow = bw + kk * d.n;
                float* ac = acc.data();
                for (int64_t j = 0; j < d.n; ++j) ac[j] += av * brow[j];
            }
            for (int64_t j = 0; j < d.n; ++j) {
                float v = acc[static_cast<size_t>(j)];
                if (d.activation == 1) v = std::max(v, 0.0f);
                store(c, i * d.n + j, v);
            }
        }
    });
    return {};
}

Status matmul_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Dims d, check(l));
    return d.dtype == DType::F16 ? matmul_run_typed<f16>(l, d, pool) : matmul_run_typed<float>(l, d, pool);
}

}  // namespace

extern const KernelDef kernel_matmul;
const KernelDef kernel_matmul = {"matmul", matmul_cost, matmul_run};

}  // namespace loom::device
