// eltwise: C = act(A op B) on the Vector unit, A, B and C of the same shape, all f32 or all f16
// (f16 computed in fp32, rounded once).
// attrs.ints[0]: op, 0 = add, 1 = sub, 2 = mul, 3 = max, 4 = min.
// attrs.ints[1]: activation, 0 = none, 1 = relu. Tiling: VectorSchedule (default below).
#include <algorithm>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"

namespace loom::device {

namespace {

using cost::ceil_div;
using cost::round_up;

enum Op : int { ADD = 0, SUB, MUL, MAX, MIN, OP_COUNT };

struct Args {
    int64_t n;
    Op op;
    int activation;
    DType dtype;
};

Result<Args> check(const KernelLaunch& l) {
    if (l.inputs.size() != 2 || l.outputs.size() != 1)
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise takes two inputs and one output");
    const TensorRef &a = l.inputs[0], &b = l.inputs[1], &c = l.outputs[0];
    if (a.rank != b.rank || a.rank != c.rank || !std::equal(a.dims.begin(), a.dims.begin() + a.rank, b.dims.begin()) ||
        !std::equal(a.dims.begin(), a.dims.begin() + a.rank, c.dims.begin()))
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise: A, B and C must have the same shape");
    if (a.dtype != b.dtype || a.dtype != c.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise: mixed dtypes");
    if (a.dtype != DType::F32 && a.dtype != DType::F16)
        return make_error(StatusCode::UNSUPPORTED, "eltwise: dtype {} (f32 and f16 are supported)", dtype_name(a.dtype));
    int64_t op = l.attrs.ints.size() > 0 ? l.attrs.ints[0] : 0;
    int64_t act = l.attrs.ints.size() > 1 ? l.attrs.ints[1] : 0;
    if (op < 0 || op >= OP_COUNT)
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise: op {} (0 add, 1 sub, 2 mul, 3 max, 4 min)", op);
    if (act < 0 || act > 1) return make_error(StatusCode::INVALID_ARGUMENT, "eltwise: activation {} (0, 1 = relu)", act);
    return Args{a.elements(), static_cast<Op>(op), static_cast<int>(act), a.dtype};
}

Result<CycleBreakdown> eltwise_cost(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const int64_t bytes = static_cast<int64_t>(dtype_size(a.dtype));
    const int64_t block = 32 / bytes;  // UB moves whole 32-byte blocks
    VectorSchedule v;
    if (const auto* given = std::get_if<VectorSchedule>(&l.tiling)) {
        v = *given;
    } else if (std::holds_alternative<std::monostate>(l.tiling)) {
        // Largest tile that double-buffers two inputs and one output in UB, no larger than one
        // core's share.
        int64_t fit = s.ub_bytes() / (2 * 3 * bytes) / block * block;
        int64_t share = round_up(ceil_div(std::max<int64_t>(a.n, 1), s.aicore_count), block);
        v.ub_tile = std::max(block, std::min(fit, share));
    } else {
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise needs a VectorSchedule, not a CubeTiling");
    }
    if (v.ub_tile <= 0 || v.ub_tile % block)
        return make_error(StatusCode::INVALID_ARGUMENT, "schedule: ub_tile = {} must be a positive multiple of {}",
                          v.ub_tile, block);
    if (v.cores < 0 || v.cores > s.aicore_count)
        return make_error(StatusCode::INVALID_ARGUMENT, "schedule: cores = {} outside [0, {}]", v.cores, s.aicore_count);
    const int64_t db = v.double_buffer ? 2 : 1;
    if (db * 3 * v.ub_tile * bytes > s.ub_bytes())
        return make_error(StatusCode::INVALID_ARGUMENT, "schedule: UB needs {} bytes for ub_tile = {} but holds {}",
                          db * 3 * v.ub_tile * bytes, v.ub_tile, s.ub_bytes());

    CycleBreakdown cb;
    cb.blocks = std::max<int64_t>(1, ceil_div(a.n, v.ub_tile));
    cb.cores_used = std::min(cb.blocks, v.cores ? v.cores : s.aicore_count);
    cb.rounds = ceil_div(cb.blocks, cb.cores_used);
    const double tile = static_cast<double>(v.ub_tile), b = static_cast<double>(bytes);
    const double t_in = 2 * tile * b / cost::gm_bytes_per_cycle(s, s.mte_gm_to_ub, cb.cores_used);
    const double t_out = tile * b / cost::gm_bytes_per_cycle(s, s.mte_ub_to_gm, cb.cores_used);
    // Loads and stores run on separate MTEs but share the core's memory bandwidth.
    const double t_mem = 3 * tile * b / cost::memory_share_per_cycle(s, cb.cores_used);
    // f16 is widened to f32 and narrowed back: two extra passes at the f32 width.
    const double passes = 1.0 + (a.activation ? 1 : 0) + (a.dtype == DType::F16 ? 2 : 0);
    const double t_vec = passes * tile * 4 / static_cast<double>(s.vector_bytes_per_cycle);
    const double rounds = static_cast<double>(cb.rounds);
    cb.mte_in = rounds * t_in;
    cb.mte_out = rounds * t_out;
    cb.vector = rounds * t_vec;
    cb.scalar = (cost::kScalarInstrPerBlock + rounds * cost::kScalarInstrPerTile) /
                static_cast<double>(s.scalar_ops_per_cycle);
    // Double buffering: the first tile's load and the last tile's store are exposed, every tile
    // in between costs the slowest of load, compute, store and the shared memory bandwidth.
    double body = v.double_buffer ? t_in + t_vec + t_out + (rounds - 1) * std::max({t_in, t_vec, t_out, t_mem})
                                  : rounds * (t_in + t_vec + t_out);
    cb.total = body + cb.scalar;
    cb.flops = static_cast<double>(a.n) * (a.activation ? 2 : 1);
    // Streaming data: every byte comes from and goes to global memory once.
    cb.l2_miss_bytes = 3 * static_cast<double>(a.n) * b;
    return cb;
}

template <typename T>
Status eltwise_run_typed(const KernelLaunch& l, const Args& a, ThreadPool& pool) {
    const T* x = l.inputs[0].as<const T>();
    const T* y = l.inputs[1].as<const T>();
    T* z = l.outputs[0].as<T>();
    auto apply = [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
            float u, w;
            if constexpr (std::is_same_v<T, f16>) u = f16_to_f32(x[i]), w = f16_to_f32(y[i]);
            else u = x[i], w = y[i];
            float r = 0;
            switch (a.op) {
            case ADD: r = u + w; break;
            case SUB: r = u - w; break;
            case MUL: r = u * w; break;
            case MAX: r = std::max(u, w); break;
            case MIN: r = std::min(u, w); break;
            case OP_COUNT: break;
            }
            if (a.activation == 1) r = std::max(r, 0.0f);
            if constexpr (std::is_same_v<T, f16>) z[i] = f32_to_f16(r);
            else z[i] = r;
        }
    };
    pool.parallel_for(static_cast<size_t>(a.n), 1 << 15, apply);
    return {};
}

Status eltwise_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    return a.dtype == DType::F16 ? eltwise_run_typed<f16>(l, a, pool) : eltwise_run_typed<float>(l, a, pool);
}

}  // namespace

extern const KernelDef kernel_eltwise;
const KernelDef kernel_eltwise = {"eltwise", eltwise_cost, eltwise_run};

}  // namespace loom::device
