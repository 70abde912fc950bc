// binary: Y = A op B with numpy (multidirectional) broadcasting, as ONNX Add, Sub, Mul, Div,
// Pow, Max, Min and PRelu. Inputs A, B (ranks may differ); output Y of the broadcast shape.
// prelu: Y = A < 0 ? B * A : A, where the slope B broadcasts to A (unidirectional) and Y has
// A's shape.
// Attribute: op (required) = add|sub|mul|div|pow|max|min|prelu.
// Dtypes: A, B and Y all f32 or all f16 (f16 computed in fp32, rounded once); all i32 or all
// i64 for add, sub, mul, div, max, min: overflow wraps around (two's complement), division
// truncates toward zero, INT_MIN / -1 wraps to INT_MIN and a zero divisor fails the launch
// before anything is written. max/min: a NaN in A propagates, a NaN in B does not (std::max).
// Tiling: VectorSchedule (default: vector_cost's heuristic).
#include <algorithm>
#include <string>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/elementwise.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

using ops::BinaryOp;
using ops::shape_str;

struct Args {
    BinaryOp op;
    DType dtype;
    bool broadcast;  // an input is not of the output's shape
};

std::string op_names() {
    std::string s;
    for (const auto& o : ops::kBinaryOps) s += s.empty() ? o.name : std::string(", ") + o.name;
    return s;
}

Result<Args> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "binary", 2, 2, 1));
    LOOM_TRY(l.attrs.check_known({"op"}).with_context("binary"));
    auto name = l.attrs.get_string("op");
    if (!name.ok()) return name.status().with_context("binary");
    Args a{};
    if (!ops::binary_op_from_name(*name, a.op))
        return make_error(StatusCode::INVALID_ARGUMENT, "binary: op '{}' ({})", *name, op_names());
    const TensorRef &x = l.inputs[0], &y = l.inputs[1], &out = l.outputs[0];
    a.dtype = x.dtype;
    if (y.dtype != a.dtype || out.dtype != a.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "binary: mixed dtypes (A {}, B {}, Y {})", dtype_name(x.dtype),
                          dtype_name(y.dtype), dtype_name(out.dtype));
    if (!ops::is_float(a.dtype)) {
        if (a.dtype != DType::I32 && a.dtype != DType::I64)
            return make_error(StatusCode::UNSUPPORTED, "binary: dtype {} (f32, f16, i32 and i64 are supported)",
                              dtype_name(a.dtype));
        if (!ops::info(a.op).integer)
            return make_error(StatusCode::UNSUPPORTED, "binary: op '{}' on {} (f32 and f16 only)", *name,
                              dtype_name(a.dtype));
    }
    static const std::string names[] = {"A", "B"};
    auto bcast = ops::broadcast_shape(l.inputs, names);
    if (!bcast.ok()) return bcast.status().with_context("binary");
    const TensorRef& want = *bcast;
    if (a.op == BinaryOp::PRELU && !ops::same_shape(want, x))
        return make_error(StatusCode::INVALID_ARGUMENT, "binary: prelu slope B ({}) does not broadcast to X = A ({})",
                          shape_str(y), shape_str(x));
    if (!ops::same_shape(out, want))
        return make_error(StatusCode::INVALID_ARGUMENT, "binary: output Y is {}, want {} (A {} {} B {})",
                          shape_str(out), shape_str(want), shape_str(x), *name, shape_str(y));
    a.broadcast = !ops::same_shape(x, out) || !ops::same_shape(y, out);
    return a;
}

// Every input byte is read from GM once (a broadcast operand stays in UB) and every output
// byte written once. Vector passes: the op's count from the table (pow 8, div 2, prelu 2,
// others 1), integer division 4 (no integer divider: via fp32 with a correction step), i64
// twice its lanes, +2 for f16 (widen, narrow); a broadcast operand costs +1 where the schedule
// joins lines (expanded in UB; the default), nothing along lines (vector-scalar or a reused row).
// With broadcasting, the schedule's axis is the innermost run of output dims along which an
// operand is constant, inner the dims after it.
Result<KernelWork> binary_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double size = static_cast<double>(dtype_size(a.dtype));
    const int64_t n = l.outputs[0].elements();
    const bool full_input = l.inputs[0].elements() == n || l.inputs[1].elements() == n;
    cost::VectorWork w;
    w.elements = n;
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = n > 0 ? size * static_cast<double>(l.inputs[0].elements() + l.inputs[1].elements()) /
                             static_cast<double>(n)
                       : 2 * size;
    w.out_bytes = size;
    double passes = ops::info(a.op).passes;
    if (!ops::is_float(a.dtype) && a.op == BinaryOp::DIV) passes = 4;
    if (a.dtype == DType::I64) passes *= 2;
    w.vector_passes = passes + (a.dtype == DType::F16 ? 2 : 0);
    w.flops = 1;
    w.ub_buffers = 3;
    if (a.broadcast && n > 0) {
        const ops::BroadcastPlan p = ops::make_broadcast_plan(l.outputs[0], l.inputs);
        int k = p.rank - 1;  // innermost collapsed dim where an operand is broadcast
        while (k >= 0 && p.strides[0][static_cast<size_t>(k)] != 0 && p.strides[1][static_cast<size_t>(k)] != 0) --k;
        if (k >= 0) {
            w.axis_role = cost::AxisRole::BROADCAST;
            w.axis_len = p.dims[static_cast<size_t>(k)];
            w.inner = 1;
            for (int d = k + 1; d < p.rank; ++d) w.inner *= p.dims[static_cast<size_t>(d)];
        }
    }
    // The full-size operand can come from a neighbour in UB and be overwritten by the output.
    w.fusable_in_bytes = full_input ? size : 0;
    w.fusable_out = true;
    w.in_place_ok = full_input;
    return cost::vector_work(w);
}

Result<CycleBreakdown> binary_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(binary_work(l, s), l.tiling, s, "binary");
}

template <BinaryOp OP, typename T>
void run_typed(const ops::BroadcastPlan& p, const T* a, const T* b, T* y, ThreadPool& pool) {
    const int64_t sa = p.inner_stride(0), sb = p.inner_stride(1);
    auto body = [&](size_t begin, size_t end) {
        ops::for_each_segment(p, static_cast<int64_t>(begin), static_cast<int64_t>(end),
                              [&](const int64_t* off, int64_t pos, int64_t len) {
                                  const T* pa = a + off[0];
                                  const T* pb = b + off[1];
                                  T* py = y + pos;
                                  if constexpr (std::is_same_v<T, f16>) {
                                      float fa[ops::kBlock], fb[ops::kBlock], fy[ops::kBlock];
                                      for (int64_t j = 0; j < len; j += ops::kBlock) {
                                          const int64_t m = std::min(ops::kBlock, len - j);
                                          ops::load_block(pa + j * sa, sa, fa, m);
                                          ops::load_block(pb + j * sb, sb, fb, m);
                                          ops::binary_segment<OP, float>(fa, sa, fb, sb, fy, m);
                                          ops::store_block(fy, py + j, m);
                                      }
                                  } else {
                                      ops::binary_segment<OP, T>(pa, sa, pb, sb, py, len);
                                  }
                              });
    };
    pool.parallel_for(static_cast<size_t>(p.total), ops::kElementGrain, body);
}

template <typename T>
Status run_dtype(const KernelLaunch& l, const Args& a, ThreadPool& pool) {
    const TensorRef &x = l.inputs[0], &y = l.inputs[1], &out = l.outputs[0];
    if constexpr (std::is_integral_v<T>) {
        if (a.op == BinaryOp::DIV) {  // before writing anything, so a failed launch leaves Y alone
            const T* d = y.as<const T>();
            const int64_t n = y.elements();
            for (int64_t i = 0; i < n; ++i)
                if (d[i] == 0)
                    return make_error(StatusCode::INVALID_ARGUMENT, "binary: integer division by zero (B element {})",
                                      i);
        }
    }
    const ops::BroadcastPlan p = ops::make_broadcast_plan(out, l.inputs);
    ops::dispatch_binary(a.op, [&](auto k) {
        constexpr BinaryOp OP = decltype(k)::value;
        if constexpr (std::is_integral_v<T> && (OP == BinaryOp::POW || OP == BinaryOp::PRELU)) return;  // refused
        else run_typed<OP, T>(p, x.as<const T>(), y.as<const T>(), out.as<T>(), pool);
    });
    return {};
}

Status binary_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    if (l.outputs[0].elements() == 0) return {};
    switch (a.dtype) {
    case DType::F32: return run_dtype<float>(l, a, pool);
    case DType::F16: return run_dtype<f16>(l, a, pool);
    case DType::I32: return run_dtype<int32_t>(l, a, pool);
    case DType::I64: return run_dtype<int64_t>(l, a, pool);
    default: break;
    }
    return make_error(StatusCode::INTERNAL, "binary: dtype {} passed the check", dtype_name(a.dtype));
}

}  // namespace

extern const KernelDef kernel_binary;
const KernelDef kernel_binary = {"binary", binary_work, binary_cost, binary_run};

}  // namespace loom::device
