// The shared Vector-op cost (formulas in docs/device-model.md, "Vector ops").
#include "device/kernels/cost_util.hpp"

#include <algorithm>
#include <cmath>
#include <variant>

namespace loom::device::cost {

Result<CycleBreakdown> vector_cost(const DeviceSpec& s, const VectorWork& w, const Tiling& tiling,
                                   std::string_view kernel) {
    const int64_t block = 32 / std::max<int64_t>(1, w.elem_bytes);  // UB moves whole 32-byte blocks
    const int64_t buffers = std::max<int64_t>(1, w.ub_buffers);
    VectorSchedule v;
    if (const auto* given = std::get_if<VectorSchedule>(&tiling)) {
        v = *given;
    } else if (std::holds_alternative<std::monostate>(tiling)) {
        // Largest tile that double-buffers every live tile in UB, no larger than one core's share.
        int64_t fit = s.ub_bytes() / (2 * buffers * w.elem_bytes) / block * block;
        int64_t share = round_up(ceil_div(std::max<int64_t>(w.elements, 1), s.aicore_count), block);
        v.ub_tile = std::max(block, std::min(fit, share));
    } else {
        return make_error(StatusCode::INVALID_ARGUMENT, "{} needs a VectorSchedule, not a CubeTiling", kernel);
    }
    if (v.ub_tile <= 0 || v.ub_tile % block)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: schedule: ub_tile = {} must be a positive multiple of {}",
                          kernel, v.ub_tile, block);
    if (v.cores < 0 || v.cores > s.aicore_count)
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: schedule: cores = {} outside [0, {}]", kernel, v.cores,
                          s.aicore_count);
    const int64_t db = v.double_buffer ? 2 : 1;
    if (db * buffers * v.ub_tile * w.elem_bytes > s.ub_bytes())
        return make_error(StatusCode::INVALID_ARGUMENT, "{}: schedule: UB needs {} bytes for ub_tile = {} but holds {}",
                          kernel, db * buffers * v.ub_tile * w.elem_bytes, v.ub_tile, s.ub_bytes());

    CycleBreakdown cb;
    cb.blocks = std::max<int64_t>(1, ceil_div(w.elements, v.ub_tile));
    cb.cores_used = std::min(cb.blocks, v.cores ? v.cores : s.aicore_count);
    cb.rounds = ceil_div(cb.blocks, cb.cores_used);
    const double tile = static_cast<double>(v.ub_tile);
    const double t_in = tile * w.in_bytes / gm_bytes_per_cycle(s, s.mte_gm_to_ub, cb.cores_used);
    const double t_out = tile * w.out_bytes / gm_bytes_per_cycle(s, s.mte_ub_to_gm, cb.cores_used);
    // Loads and stores run on separate MTEs but share the core's memory bandwidth.
    const double t_mem = tile * (w.in_bytes + w.out_bytes) / memory_share_per_cycle(s, cb.cores_used);
    const double t_vec = w.vector_passes * tile * 4 / static_cast<double>(s.vector_bytes_per_cycle);
    const double rounds = static_cast<double>(cb.rounds);
    cb.mte_in = rounds * t_in;
    cb.mte_out = rounds * t_out;
    cb.vector = rounds * t_vec;
    cb.scalar = (kScalarInstrPerBlock + rounds * kScalarInstrPerTile) / static_cast<double>(s.scalar_ops_per_cycle);
    // Double buffering: the first tile's load and the last tile's store are exposed, every tile
    // in between costs the slowest of load, compute, store and the shared memory bandwidth.
    double body = v.double_buffer ? t_in + t_vec + t_out + (rounds - 1) * std::max({t_in, t_vec, t_out, t_mem})
                                  : rounds * (t_in + t_vec + t_out);
    cb.total = body + cb.scalar;
    cb.flops = static_cast<double>(w.elements) * w.flops;
    // Streaming data: every byte comes from and goes to global memory once.
    cb.l2_miss_bytes = static_cast<double>(w.elements) * (w.in_bytes + w.out_bytes);
    return cb;
}


int64_t cube_k0(const CubeWork& d, const DeviceSpec& s) {
    return d.int8 ? s.cube_fractal * s.cube_int8_rate : s.cube_fractal;
}

namespace {

// The default heuristic with L0 M tiles of up to `m_cap` rows: one L0 tile per L1 block along M
// and N, K staged in L1 up to four L0 slices; halve M/N blocks until every core has work; then,
// for small buffer configurations, halve K, then M and N, until the tiling fits.
CubeTiling default_tiling(const CubeWork& d, const DeviceSpec& s, int64_t m_cap) {
    int64_t f = s.cube_fractal, k0 = cube_k0(d, s);
    CubeTiling t;
    t.m_l0 = std::min(round_up(d.m, f), round_up(m_cap, f));
    t.n_l0 = std::min(round_up(d.n, f), round_up(128, f));
    t.k_l0 = std::min(round_up(d.k, k0), round_up(d.int8 ? 128 : 64, k0));
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
    while (!cube_tiling_check(t, d, s).ok()) {
        if (t.k_l1 > t.k_l0) t.k_l1 -= t.k_l0;
        else if (t.k_l0 > k0) t.k_l0 = round_up(t.k_l0 / 2, k0);
        else if (t.m_l0 >= t.n_l0 && t.m_l0 > f) t.m_l0 = round_up(t.m_l0 / 2, f);
        else if (t.n_l0 > f) t.n_l0 = round_up(t.n_l0 / 2, f);
        else break;  // one fractal does not fit: check_tiling reports it to the caller
        if (t.m_l1 != t.m_l0 || t.n_l1 != t.n_l0 || t.k_l1 % t.k_l0) set_l1();
    }
    return t;
}

}  // namespace

// Default tiling: L0 tiles of up to 128 x 128 x 64 in whole fractals (see default_tiling). int8
// holds 1-byte elements, so L0 k tiles of 128 fill the bytes fp16's 64 do, and an M tile of 256
// fits too: fewer re-reads of B, but coarser blocks that may leave a tail round; the model's own
// cost picks between the 256- and 128-row tilings.
CubeTiling cube_default_tiling(const CubeWork& d, const DeviceSpec& s) {
    const CubeTiling t = default_tiling(d, s, 128);
    if (!d.int8) return t;
    const CubeTiling tall = default_tiling(d, s, 256);
    if (tall.m_l0 == t.m_l0) return t;
    auto a = cube_cost(s, d, tall, "int8 default tiling"), b = cube_cost(s, d, t, "int8 default tiling");
    return a.ok() && (!b.ok() || a->total < b->total) ? tall : t;
}

Status cube_tiling_check(const CubeTiling& t, const CubeWork& d, const DeviceSpec& s) {
    const int64_t f = s.cube_fractal, k0 = cube_k0(d, s);
    if (t.m_l0 <= 0 || t.n_l0 <= 0 || t.k_l0 <= 0 || t.m_l0 % f || t.n_l0 % f || t.k_l0 % k0) {
        if (k0 == f)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "tiling: L0 sizes {}x{}x{} must be positive multiples of {}", t.m_l0, t.n_l0, t.k_l0, f);
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "tiling: L0 sizes {}x{}x{} must be positive multiples of the int8 fractal {}x{}x{}", t.m_l0,
                          t.n_l0, t.k_l0, f, f, k0);
    }
    if (t.m_l1 <= 0 || t.n_l1 <= 0 || t.k_l1 <= 0 || t.m_l1 % t.m_l0 || t.n_l1 % t.n_l0 || t.k_l1 % t.k_l0)
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "tiling: L1 sizes {}x{}x{} must be positive multiples of the L0 sizes {}x{}x{}", t.m_l1,
                          t.n_l1, t.k_l1, t.m_l0, t.n_l0, t.k_l0);
    if (t.cores < 0 || t.cores > s.aicore_count)
        return make_error(StatusCode::INVALID_ARGUMENT, "tiling: cores = {} outside [0, {}]", t.cores, s.aicore_count);
    // L1 and L0 hold int8 operands as 1-byte elements.
    const int64_t in = d.int8 ? 1 : static_cast<int64_t>(dtype_size(d.dtype));
    const int64_t db = t.double_buffer ? 2 : 1;
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
        // One fp32 L0C tile and a bias row (int8: and a row of dequantize factors).
        {"UB", t.m_l0 * t.n_l0 * 4 + t.n_l0 * 4 * (d.int8 ? 2 : 1), s.ub_bytes()},
    };
    for (const Need& n : needs)
        if (n.need > n.have)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "tiling: {} needs {} bytes but holds {} (L1 {}x{}x{}, L0 {}x{}x{}, double buffer {})",
                              n.buffer, n.need, n.have, t.m_l1, t.n_l1, t.k_l1, t.m_l0, t.n_l0, t.k_l0,
                              t.double_buffer ? "on" : "off");
    return {};
}

Result<CycleBreakdown> cube_cost(const DeviceSpec& s, const CubeWork& d, const Tiling& tiling, std::string_view kernel) {
    CubeTiling t;
    if (const auto* given = std::get_if<CubeTiling>(&tiling)) t = *given;
    else if (std::holds_alternative<std::monostate>(tiling)) t = cube_default_tiling(d, s);
    else return make_error(StatusCode::INVALID_ARGUMENT, "{} needs a CubeTiling, not a VectorSchedule", kernel);
    LOOM_TRY(cube_tiling_check(t, d, s).with_context(kernel));

    // Bytes per element: A (X) and C in GM are `dtype`; B in GM and both operands in L1/L0 are
    // 1 byte for int8 (the Vector unit quantizes A on its way in).
    const double out = static_cast<double>(dtype_size(d.dtype)), a_in = out;
    const double b_in = d.int8 ? 1.0 : out, l_in = d.int8 ? 1.0 : out;
    const int64_t f = s.cube_fractal, k0 = cube_k0(d, s);
    const int64_t blocks_m = ceil_div(d.m, t.m_l1), blocks_n = ceil_div(d.n, t.n_l1);
    CycleBreakdown cb;
    const double batch = static_cast<double>(d.batch);
    cb.blocks = d.batch * blocks_m * blocks_n;
    cb.cores_used = std::min(cb.blocks, t.cores ? t.cores : s.aicore_count);
    cb.rounds = ceil_div(cb.blocks, cb.cores_used);

    // L2: each byte of A and B misses once; re-reads hit when the operand re-read across the
    // inner loop fits in L2 next to the other operand's panel, and miss again otherwise.
    const double a_bytes = static_cast<double>(d.m * d.k) * a_in * d.a_gm_scale,
                 b_bytes = static_cast<double>(d.k * d.n) * b_in;
    const double a_reads = a_bytes * static_cast<double>(blocks_n), b_reads = b_bytes * static_cast<double>(blocks_m);
    const double l2 = static_cast<double>(s.l2_bytes());
    double refetch = 0;
    if (!t.n_outer) {  // M outer: B is swept once per M block
        double panel = static_cast<double>(t.m_l1 * d.k) * a_in;
        if (b_bytes + panel > l2) refetch = b_reads - b_bytes;
    } else {
        double panel = static_cast<double>(t.n_l1 * d.k) * b_in;
        if (a_bytes + panel > l2) refetch = a_reads - a_bytes;
    }
    const double reads = a_reads + b_reads;
    cb.l2_miss_bytes = batch * (a_bytes + b_bytes + refetch);
    cb.l2_hit_bytes = batch * reads - cb.l2_miss_bytes;
    const double miss_frac = (a_bytes + b_bytes + refetch) / reads;

    // One L1 stage: MTE2 brings the A and B slices; MTE1 feeds every L0 tile pair; the Cube
    // runs (m_l0/f) x (n_l0/f) x (k_l0/k0) fractals per L0 tile (f32 at half rate).
    const double gm_bpc = gm_bytes_per_cycle(s, s.mte_gm_to_l1, cb.cores_used);
    const double l2_bpc = l2_bytes_per_cycle(s, s.mte_gm_to_l1, cb.cores_used);
    const double stage_bytes = static_cast<double>(t.m_l1 * t.k_l1) * d.a_gm_scale * a_in +
                               static_cast<double>(t.k_l1 * t.n_l1) * b_in;
    const double t_mte2 = stage_bytes * (miss_frac / gm_bpc + (1 - miss_frac) / l2_bpc);
    const double l0_tiles = static_cast<double>((t.m_l1 / t.m_l0) * (t.n_l1 / t.n_l0) * (t.k_l1 / t.k_l0));
    const double t_mte1 = l0_tiles * static_cast<double>(t.m_l0 * t.k_l0 + t.k_l0 * t.n_l0) * l_in /
                          static_cast<double>(s.mte_l1_to_l0);
    const double rate = d.dtype == DType::F32 && !d.int8 ? 2.0 : 1.0;
    const double t_cube =
        l0_tiles * static_cast<double>((t.m_l0 / f) * (t.n_l0 / f) * (t.k_l0 / k0)) * rate;
    const double steps = static_cast<double>(ceil_div(d.k, t.k_l1));
    const double rounds = static_cast<double>(cb.rounds);
    // int8: the Vector unit quantizes every element of the raw A (X) once (one pass at fp32
    // width, +1 to widen f16); the critical core's share is spread evenly over its stages.
    double t_quant = 0;
    if (d.int8) {
        const double x_elems = batch * static_cast<double>(d.m * d.k) * d.a_gm_scale;
        const double passes = d.dtype == DType::F16 ? 2.0 : 1.0;
        const double core_share = std::ceil(x_elems / static_cast<double>(cb.cores_used));
        t_quant = core_share * passes * 4 / static_cast<double>(s.vector_bytes_per_cycle) / (rounds * steps);
    }
    // Double buffering pipelines MTE1 with the Cube tile by tile inside a stage (first tile's
    // load, then the slower of the two), and MTE2, the quantize pass and that across stages:
    // every stage pays once, then each further stage costs only the bottleneck.
    double main;
    if (t.double_buffer) {
        const double load = t_mte1 / l0_tiles, mma = t_cube / l0_tiles;
        double inner = load + (l0_tiles - 1) * std::max(load, mma) + mma;
        main = t_mte2 + t_quant + inner + (steps - 1) * std::max({t_mte2, t_quant, inner});
    } else {
        main = steps * (t_mte2 + t_quant + t_mte1 + t_cube);
    }

    // Epilogue per block: L0C -> UB (fp32), bias + activation + cast on the Vector unit, UB -> GM.
    const double c_elems = static_cast<double>(t.m_l1 * t.n_l1);
    const double t_fix = c_elems * 4 / static_cast<double>(s.mte_l0c_to_ub);
    // Vector passes (bias add, activation, residual add, the fp32 -> f16 cast), given by the kernel.
    const double t_vec = d.epilogue_passes * c_elems * 4 / static_cast<double>(s.vector_bytes_per_cycle);
    const double t_out = c_elems * out / gm_bytes_per_cycle(s, s.mte_ub_to_gm, cb.cores_used);
    const double t_res = c_elems * d.epilogue_in_bytes / gm_bytes_per_cycle(s, s.mte_gm_to_ub, cb.cores_used);
    const double epi = t_fix + t_vec + t_out + t_res;

    cb.mte_in = rounds * (t_mte2 + t_mte1) * steps;
    cb.cube = rounds * t_cube * steps;
    cb.vector = rounds * (t_vec + steps * t_quant);
    cb.mte_in += rounds * t_res;
    cb.mte_out = rounds * (t_fix + t_out);
    cb.scalar = rounds * (kScalarInstrPerBlock + steps * l0_tiles * kScalarInstrPerTile) /
                static_cast<double>(s.scalar_ops_per_cycle);
    // With double buffering a block's epilogue overlaps the next block's main loop.
    double body = t.double_buffer ? rounds * std::max(main, epi) + std::min(main, epi) : rounds * (main + epi);
    // Overlap cannot beat the bandwidth: the core's loads that miss L2 and its stores share its
    // memory share; its L2 hits share its L2 share.
    const double gm_bytes = rounds * (steps * stage_bytes * miss_frac + c_elems * (out + d.epilogue_in_bytes));
    const double l2_bytes = rounds * steps * stage_bytes * (1 - miss_frac);
    body = std::max({body, gm_bytes / memory_share_per_cycle(s, cb.cores_used),
                     l2_bytes * s.aicore_clock_ghz * static_cast<double>(cb.cores_used) / s.l2_bandwidth_gbps});
    cb.total = body + cb.scalar;
    cb.flops = 2.0 * batch * static_cast<double>(d.m) * static_cast<double>(d.n) * static_cast<double>(d.k);
    return cb;
}

}  // namespace loom::device::cost
