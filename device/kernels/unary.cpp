// unary: Y = op(X) elementwise, as the ONNX activations and math ops. Y has X's shape and
// dtype and may be X itself (in place).
// Attributes: op (required) = relu | leaky_relu (alpha, default 0.01) | sigmoid | tanh |
// clip (min, max; defaults -inf, +inf; Y = min(max(X, min), max)) | hard_sigmoid (alpha 0.2,
// beta 0.5) | hard_swish | sqrt | exp | log | neg | abs | identity | erf | softplus |
// elu (alpha 1.0). An attribute the op does not take is refused.
// Dtypes: f32, f16 (computed in fp32, rounded once); identity, neg and abs also i32 and i64
// (neg and abs of the most negative value wrap to itself).
// Tiling: VectorSchedule (default: vector_cost's heuristic).
#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/elementwise.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

using ops::shape_str;
using ops::UnaryOp;

// The attribute names and defaults of an op's float parameters, in UnaryParams order.
struct ParamSpec {
    const char* name[2];
    double fallback[2];
};

ParamSpec param_spec(UnaryOp op) {
    constexpr double inf = std::numeric_limits<double>::infinity();
    switch (op) {
    case UnaryOp::LEAKY_RELU: return {{"alpha", nullptr}, {0.01, 0}};
    case UnaryOp::CLIP: return {{"min", "max"}, {-inf, inf}};
    case UnaryOp::HARD_SIGMOID: return {{"alpha", "beta"}, {0.2, 0.5}};
    case UnaryOp::ELU: return {{"alpha", nullptr}, {1.0, 0}};
    default: return {{nullptr, nullptr}, {0, 0}};
    }
}

struct Args {
    UnaryOp op;
    ops::UnaryParams params;
    DType dtype;
    int64_t n;
};

std::string op_names() {
    std::string s;
    for (const auto& o : ops::kUnaryOps) s += s.empty() ? o.name : std::string(", ") + o.name;
    return s;
}

Result<Args> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "unary", 1, 1, 1));
    auto name = l.attrs.get_string("op");
    if (!name.ok()) return name.status().with_context("unary");
    Args a{};
    if (!ops::unary_op_from_name(*name, a.op))
        return make_error(StatusCode::INVALID_ARGUMENT, "unary: op '{}' ({})", *name, op_names());
    const ParamSpec spec = param_spec(a.op);
    for (const auto& [attr, value] : l.attrs.items()) {
        if (attr == "op" || (spec.name[0] && attr == spec.name[0]) || (spec.name[1] && attr == spec.name[1])) continue;
        std::string known = "op";
        for (const char* p : spec.name)
            if (p) known += std::string(", ") + p;
        return make_error(StatusCode::INVALID_ARGUMENT, "unary: unknown attribute '{}' for op '{}' (known: {})", attr,
                          *name, known);
    }
    float* dst[2] = {&a.params.p0, &a.params.p1};
    for (int i = 0; i < 2; ++i) {
        if (!spec.name[i]) continue;
        auto v = l.attrs.get_float(spec.name[i], spec.fallback[i]);
        if (!v.ok()) return v.status().with_context("unary");
        *dst[i] = static_cast<float>(*v);
    }
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    a.dtype = x.dtype;
    a.n = x.elements();
    if (y.dtype != x.dtype)
        return make_error(StatusCode::INVALID_ARGUMENT, "unary: mixed dtypes (X {}, Y {})", dtype_name(x.dtype),
                          dtype_name(y.dtype));
    if (!ops::is_float(a.dtype)) {
        if (a.dtype != DType::I32 && a.dtype != DType::I64)
            return make_error(StatusCode::UNSUPPORTED, "unary: dtype {} (f32, f16; i32 and i64 for identity, neg, abs)",
                              dtype_name(a.dtype));
        if (a.op != UnaryOp::IDENTITY && a.op != UnaryOp::NEG && a.op != UnaryOp::ABS)
            return make_error(StatusCode::UNSUPPORTED, "unary: op '{}' on {} (f32 and f16 only)", *name,
                              dtype_name(a.dtype));
    }
    if (!ops::same_shape(x, y))
        return make_error(StatusCode::INVALID_ARGUMENT, "unary: output Y is {}, want X's shape {}", shape_str(y),
                          shape_str(x));
    return a;
}

// Reads and writes every element once. Vector passes from the op table (relu/neg/abs 1,
// clip/leaky_relu/sqrt 2, exp/log 3, sigmoid/tanh/elu 5, erf 6, softplus 7; identity 0: a pure
// copy through UB), i64 twice its lanes, +2 for f16 (widen, narrow; not for identity).
Result<KernelWork> unary_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const double size = static_cast<double>(dtype_size(a.dtype));
    cost::VectorWork w;
    w.elements = a.n;
    w.elem_bytes = static_cast<int64_t>(dtype_size(a.dtype));
    w.in_bytes = size;
    w.out_bytes = size;
    double passes = ops::info(a.op).passes;
    if (a.dtype == DType::I64) passes *= 2;
    if (a.dtype == DType::F16 && a.op != UnaryOp::IDENTITY) passes += 2;
    w.vector_passes = passes;
    w.flops = a.op == UnaryOp::IDENTITY ? 0 : 1;
    w.ub_buffers = 2;
    w.fusable_in_bytes = size;
    w.fusable_out = true;
    w.in_place_ok = true;
    return cost::vector_work(w);
}

Result<CycleBreakdown> unary_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(unary_work(l, s), l.tiling, s, "unary");
}

template <typename T>
void run_int(const Args& a, const T* x, T* y, ThreadPool& pool) {
    using U = std::make_unsigned_t<T>;
    pool.parallel_for(static_cast<size_t>(a.n), ops::kElementGrain, [&](size_t b, size_t e) {
        switch (a.op) {
        case UnaryOp::NEG:
            for (size_t i = b; i < e; ++i) y[i] = static_cast<T>(U{0} - static_cast<U>(x[i]));
            break;
        case UnaryOp::ABS:
            for (size_t i = b; i < e; ++i) y[i] = x[i] < 0 ? static_cast<T>(U{0} - static_cast<U>(x[i])) : x[i];
            break;
        default:  // identity
            if (x != y) std::memcpy(y + b, x + b, (e - b) * sizeof(T));
            break;
        }
    });
}

Status unary_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (a.n == 0) return {};
    switch (a.dtype) {
    case DType::F32: {
        const float* xp = x.as<const float>();
        float* yp = y.as<float>();
        pool.parallel_for(static_cast<size_t>(a.n), ops::kElementGrain, [&](size_t b, size_t e) {
            ops::unary_apply(a.op, a.params, xp + b, yp + b, static_cast<int64_t>(e - b));
        });
        return {};
    }
    case DType::F16: {
        const f16* xp = x.as<const f16>();
        f16* yp = y.as<f16>();
        if (a.op == UnaryOp::IDENTITY) {
            if (xp != yp) std::memcpy(yp, xp, static_cast<size_t>(a.n) * sizeof(f16));
            return {};
        }
        pool.parallel_for(static_cast<size_t>(a.n), ops::kElementGrain, [&](size_t b, size_t e) {
            float buf[ops::kBlock];
            for (size_t i = b; i < e; i += ops::kBlock) {
                const int64_t m = std::min<int64_t>(ops::kBlock, static_cast<int64_t>(e - i));
                ops::load_block(xp + i, 1, buf, m);
                ops::unary_apply(a.op, a.params, buf, buf, m);
                ops::store_block(buf, yp + i, m);
            }
        });
        return {};
    }
    case DType::I32: run_int(a, x.as<const int32_t>(), y.as<int32_t>(), pool); return {};
    case DType::I64: run_int(a, x.as<const int64_t>(), y.as<int64_t>(), pool); return {};
    default: break;
    }
    return make_error(StatusCode::INTERNAL, "unary: dtype {} passed the check", dtype_name(a.dtype));
}

}  // namespace

extern const KernelDef kernel_unary;
const KernelDef kernel_unary = {"unary", unary_work, unary_cost, unary_run};

}  // namespace loom::device
