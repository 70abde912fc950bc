// eltwise: C = act(A op B) on the Vector unit, A, B and C of the same shape, all f32 or all f16
// (f16 computed in fp32, rounded once).
// Attributes: op = "add" (default), "sub", "mul", "max" or "min"; activation = "none"
// (default) or "relu". Tiling: VectorSchedule (default below).
#include <algorithm>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"

namespace loom::device {

namespace {

using cost::ceil_div;
using cost::round_up;

enum Op : int { ADD = 0, SUB, MUL, MAX, MIN, OP_COUNT };
constexpr const char* kOpNames[OP_COUNT] = {"add", "sub", "mul", "max", "min"};

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
    LOOM_TRY(l.attrs.check_known({"op", "activation"}).with_context("eltwise"));
    auto op_name = l.attrs.get_string("op", "add");
    if (!op_name.ok()) return op_name.status().with_context("eltwise");
    auto act = l.attrs.get_string("activation", "none");
    if (!act.ok()) return act.status().with_context("eltwise");
    int64_t op = -1;
    for (int64_t i = 0; i < OP_COUNT; ++i)
        if (*op_name == kOpNames[i]) op = i;
    if (op < 0)
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise: op '{}' (add, sub, mul, max or min)", *op_name);
    if (*act != "none" && *act != "relu")
        return make_error(StatusCode::INVALID_ARGUMENT, "eltwise: activation '{}' (none or relu)", *act);
    const int act_id = *act == "relu" ? 1 : 0;
    return Args{a.elements(), static_cast<Op>(op), act_id, a.dtype};
}

Result<CycleBreakdown> eltwise_cost(const KernelLaunch& l, const DeviceSpec& s) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double b = static_cast<double>(dtype_size(a.dtype));
    cost::VectorWork w;
    w.elements = a.n;
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = 2 * b;
    w.out_bytes = b;
    // f16 is widened to f32 and narrowed back: two extra passes at the f32 width.
    w.vector_passes = 1.0 + (a.activation ? 1 : 0) + (a.dtype == DType::F16 ? 2 : 0);
    w.flops = a.activation ? 2 : 1;
    w.fusable_in_bytes = b;
    w.fusable_out = true;
    w.in_place_ok = true;
    return cost::vector_cost(s, w, l.tiling, "eltwise");
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
