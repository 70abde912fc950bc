// cast: Y = X converted to Y's dtype, as ONNX Cast (the output tensor's dtype is the target;
// no attributes). Y has X's shape; it may be X itself only when the dtypes are equal.
// Dtypes: any of f32, f16, i8, i32, i64, u8 to any of them.
// - float -> integer truncates toward zero; values beyond the target's range saturate to its
//   nearest end and NaN gives 0 (ONNX leaves out-of-range results implementation-defined).
// - integer -> integer keeps the low bits (two's-complement wraparound, as numpy's astype).
// - to f16 rounds to nearest even (f32_to_f16; integers go through fp32, which is exact below
//   2^24, and everything from 65520 up is infinity either way); to f32 rounds to nearest.
// Tiling: VectorSchedule (default: vector_cost's heuristic).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/op_util.hpp"

namespace loom::device {

namespace {

using ops::shape_str;

struct Args {
    DType from, to;
    int64_t n;
};

bool supported(DType t) {
    switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::I8:
    case DType::I32:
    case DType::I64:
    case DType::U8: return true;
    }
    return false;
}

Result<Args> check(const KernelLaunch& l) {
    LOOM_TRY(ops::check_io(l, "cast", 1, 1, 1));
    if (!l.attrs.empty())
        return make_error(StatusCode::INVALID_ARGUMENT,
                          "cast: unknown attribute '{}' (cast takes none: the output's dtype is the target)",
                          l.attrs.items().front().first);
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    for (const TensorRef* t : {&x, &y})
        if (!supported(t->dtype))
            return make_error(StatusCode::UNSUPPORTED, "cast: {} dtype {} (f32, f16, i8, i32, i64, u8)",
                              t == &x ? "input X" : "output Y", dtype_name(t->dtype));
    if (!ops::same_shape(x, y))
        return make_error(StatusCode::INVALID_ARGUMENT, "cast: output Y is {}, want X's shape {}", shape_str(y),
                          shape_str(x));
    return Args{x.dtype, y.dtype, x.elements()};
}

bool is_int(DType t) { return !ops::is_float(t); }

// Reads and writes every element once at its own width. Vector passes: 0 for equal dtypes (a
// copy), else 1 conversion, +1 to saturate float -> integer, +1 between f16 and an integer
// (two conversions through fp32), +1 when i64 is involved (two lanes per element).
Result<KernelWork> cast_work(const KernelLaunch& l, const DeviceSpec&) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const size_t from = dtype_size(a.from), to = dtype_size(a.to);
    cost::VectorWork w;
    w.elements = a.n;
    w.elem_bytes = static_cast<int64_t>(std::max(from, to));  // UB holds tiles at the wider size
    w.in_bytes = static_cast<double>(from);
    w.out_bytes = static_cast<double>(to);
    double passes = 0;
    if (a.from != a.to) {
        passes = 1;
        if (ops::is_float(a.from) && is_int(a.to)) passes += 1;
        if ((a.from == DType::F16 && is_int(a.to)) || (is_int(a.from) && a.to == DType::F16)) passes += 1;
        if (a.from == DType::I64 || a.to == DType::I64) passes += 1;
    }
    w.vector_passes = passes;
    w.flops = a.from != a.to ? 1 : 0;
    w.ub_buffers = 2;
    w.fusable_in_bytes = static_cast<double>(from);
    w.fusable_out = true;
    w.in_place_ok = true;  // tiles are held at the wider size, so either fits the other's
    return cost::vector_work(w);
}

Result<CycleBreakdown> cast_cost(const KernelLaunch& l, const DeviceSpec& s) {
    return cost::launch_cost(cast_work(l, s), l.tiling, s, "cast");
}

template <typename I>
I float_to_int(float v) {
    constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
    // max + 1, a power of two (for i64 the conversion already rounds max up to 2^63).
    constexpr double hi = static_cast<double>(std::numeric_limits<I>::max()) + 1.0;
    if (std::isnan(v)) return 0;
    if (static_cast<double>(v) >= hi) return std::numeric_limits<I>::max();
    if (static_cast<double>(v) <= lo) return std::numeric_limits<I>::min();
    return static_cast<I>(v);
}

template <typename D, typename S>
D convert(S v) {
    if constexpr (std::is_same_v<S, f16>) {
        return convert<D>(f16_to_f32(v));
    } else if constexpr (std::is_same_v<D, f16>) {
        return f32_to_f16(static_cast<float>(v));
    } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<S>) {
        return float_to_int<D>(v);
    } else {
        return static_cast<D>(v);  // int -> float rounds to nearest; int -> int wraps (C++20)
    }
}

// Calls fn(T{}) for the C++ type of `t`.
template <typename Fn>
void with_type(DType t, Fn&& fn) {
    switch (t) {
    case DType::F32: fn(float{}); break;
    case DType::F16: fn(f16{}); break;
    case DType::I8: fn(int8_t{}); break;
    case DType::I32: fn(int32_t{}); break;
    case DType::I64: fn(int64_t{}); break;
    case DType::U8: fn(uint8_t{}); break;
    }
}

Status cast_run(const KernelLaunch& l, ThreadPool& pool) {
    LOOM_ASSIGN_OR_RETURN(Args a, check(l));
    const TensorRef &x = l.inputs[0], &y = l.outputs[0];
    if (a.n == 0) return {};
    if (a.from == a.to) {
        if (x.data != y.data) std::memmove(y.data, x.data, x.bytes());
        return {};
    }
    with_type(a.from, [&](auto s) {
        using S = decltype(s);
        with_type(a.to, [&](auto d) {
            using D = decltype(d);
            const S* xp = x.as<const S>();
            D* yp = y.as<D>();
            pool.parallel_for(static_cast<size_t>(a.n), 1 << 14, [&](size_t b, size_t e) {
                for (size_t i = b; i < e; ++i) yp[i] = convert<D>(xp[i]);
            });
        });
    });
    return {};
}

}  // namespace

extern const KernelDef kernel_cast;
const KernelDef kernel_cast = {"cast", cast_work, cast_cost, cast_run};

}  // namespace loom::device
