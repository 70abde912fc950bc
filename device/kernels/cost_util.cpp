// The shared Vector-op cost (formulas in docs/device-model.md, "Vector ops").
#include "device/kernels/cost_util.hpp"

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

}  // namespace loom::device::cost
