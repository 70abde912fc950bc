// Shared pieces of the elementwise kernels (binary, unary, eltwise_chain): the op tables with
// their NPU pass counts, fp32 block implementations of every op, numpy broadcasting of several
// inputs to one output collapsed into contiguous inner segments, and the fp32 block load/store
// that the f16 paths (batchnorm and instancenorm too) go through.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/vmath.hpp"
#include "device/kernels/op_util.hpp"
#include "device/types.hpp"

namespace loom::device::ops {

// Elements per parallel_for chunk at least, and per fp32 block of the f16 and chained paths.
inline constexpr size_t kElementGrain = 1 << 14;
inline constexpr int64_t kBlock = 256;

// Returns true and sets `op` when `name` names an entry of `table` (an op table indexed by the
// op enum Op).
template <typename Op, typename Info, size_t N>
inline bool op_from_name(const Info (&table)[N], std::string_view name, Op& op) {
    for (size_t i = 0; i < N; ++i)
        if (name == table[i].name) {
            op = static_cast<Op>(i);
            return true;
        }
    return false;
}

// ---- binary ops ----------------------------------------------------------------------------

// X(ENUM, name, Vector passes per element at fp32 width, also on i32/i64). Pow is exp(b*log a)
// plus fix-ups; div goes through the reciprocal and a Newton step.
#define LOOM_BINARY_OP_LIST(X)  \
    X(ADD, "add", 1, true)      \
    X(SUB, "sub", 1, true)      \
    X(MUL, "mul", 1, true)      \
    X(DIV, "div", 2, true)      \
    X(POW, "pow", 8, false)     \
    X(MAX, "max", 1, true)      \
    X(MIN, "min", 1, true)      \
    X(PRELU, "prelu", 2, false)

enum class BinaryOp : uint8_t {
#define LOOM_X(e, n, p, i) e,
    LOOM_BINARY_OP_LIST(LOOM_X)
#undef LOOM_X
};

struct BinaryOpInfo {
    const char* name;
    double passes;
    bool integer;
};

inline constexpr BinaryOpInfo kBinaryOps[] = {
#define LOOM_X(e, n, p, i) {n, p, i},
    LOOM_BINARY_OP_LIST(LOOM_X)
#undef LOOM_X
};
inline constexpr int kBinaryOpCount = static_cast<int>(std::size(kBinaryOps));

inline const BinaryOpInfo& info(BinaryOp op) { return kBinaryOps[static_cast<int>(op)]; }

// Returns true and sets `op` when `name` names a binary op.
inline bool binary_op_from_name(std::string_view name, BinaryOp& op) { return op_from_name(kBinaryOps, name, op); }

// One element of a binary op. Integers wrap around (two's complement) instead of overflowing;
// integer division truncates toward zero, INT_MIN / -1 wraps to INT_MIN, and the caller has
// ruled out zero divisors.
template <BinaryOp OP, typename T>
inline T binary_one(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        if constexpr (OP == BinaryOp::ADD) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
        if constexpr (OP == BinaryOp::SUB) return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
        if constexpr (OP == BinaryOp::MUL) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
        if constexpr (OP == BinaryOp::DIV) return b == -1 ? static_cast<T>(U{0} - static_cast<U>(a)) : a / b;
    } else {
        if constexpr (OP == BinaryOp::ADD) return a + b;
        if constexpr (OP == BinaryOp::SUB) return a - b;
        if constexpr (OP == BinaryOp::MUL) return a * b;
        if constexpr (OP == BinaryOp::DIV) return a / b;
        if constexpr (OP == BinaryOp::POW) return std::pow(a, b);
        if constexpr (OP == BinaryOp::PRELU) return a < 0 ? a * b : a;
    }
    if constexpr (OP == BinaryOp::MAX) return a < b ? b : a;
    if constexpr (OP == BinaryOp::MIN) return b < a ? b : a;
    return a;  // unreachable for a supported pair; integer pow/prelu are refused by the kernels
}

// y[i] = a[i*sa] op b[i*sb] for i < n, strides 0 (broadcast) or 1. Each stride pattern is its
// own loop so the contiguous ones vectorise.
template <BinaryOp OP, typename T>
inline void binary_segment(const T* a, int64_t sa, const T* b, int64_t sb, T* y, int64_t n) {
    if (sa && sb) {
        for (int64_t i = 0; i < n; ++i) y[i] = binary_one<OP>(a[i], b[i]);
    } else if (sa) {
        const T v = b[0];
        for (int64_t i = 0; i < n; ++i) y[i] = binary_one<OP>(a[i], v);
    } else if (sb) {
        const T u = a[0];
        for (int64_t i = 0; i < n; ++i) y[i] = binary_one<OP>(u, b[i]);
    } else {
        const T r = binary_one<OP>(a[0], b[0]);
        for (int64_t i = 0; i < n; ++i) y[i] = r;
    }
}

// Calls fn(std::integral_constant<BinaryOp, op>{}) so that fn can instantiate per op.
template <typename Fn>
inline decltype(auto) dispatch_binary(BinaryOp op, Fn&& fn) {
    switch (op) {
#define LOOM_X(e, n, p, i) \
    case BinaryOp::e: return fn(std::integral_constant<BinaryOp, BinaryOp::e>{});
        LOOM_BINARY_OP_LIST(LOOM_X)
#undef LOOM_X
    }
    return fn(std::integral_constant<BinaryOp, BinaryOp::ADD>{});
}

// binary_segment over fp32 with the op chosen at run time (once per segment, not per element).
inline void binary_apply(BinaryOp op, const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
    dispatch_binary(op, [&](auto k) { binary_segment<decltype(k)::value, float>(a, sa, b, sb, y, n); });
}

// ---- unary ops -----------------------------------------------------------------------------

// X(ENUM, name, float parameters, Vector passes per element at fp32 width). Transcendentals
// count the table/polynomial steps of their Vector-unit sequences (exp 3, log 3, erf 6).
#define LOOM_UNARY_OP_LIST(X)                  \
    X(RELU, "relu", 0, 1)                      \
    X(LEAKY_RELU, "leaky_relu", 1, 2)          \
    X(SIGMOID, "sigmoid", 0, 5)                \
    X(TANH, "tanh", 0, 5)                      \
    X(CLIP, "clip", 2, 2)                      \
    X(HARD_SIGMOID, "hard_sigmoid", 2, 3)      \
    X(HARD_SWISH, "hard_swish", 0, 4)          \
    X(SQRT, "sqrt", 0, 2)                      \
    X(EXP, "exp", 0, 3)                        \
    X(LOG, "log", 0, 3)                        \
    X(NEG, "neg", 0, 1)                        \
    X(ABS, "abs", 0, 1)                        \
    X(IDENTITY, "identity", 0, 0)              \
    X(ERF, "erf", 0, 6)                        \
    X(SOFTPLUS, "softplus", 0, 7)              \
    X(ELU, "elu", 1, 5)

enum class UnaryOp : uint8_t {
#define LOOM_X(e, n, k, p) e,
    LOOM_UNARY_OP_LIST(LOOM_X)
#undef LOOM_X
};

struct UnaryOpInfo {
    const char* name;
    int params;
    double passes;
};

inline constexpr UnaryOpInfo kUnaryOps[] = {
#define LOOM_X(e, n, k, p) {n, k, p},
    LOOM_UNARY_OP_LIST(LOOM_X)
#undef LOOM_X
};
inline constexpr int kUnaryOpCount = static_cast<int>(std::size(kUnaryOps));

inline const UnaryOpInfo& info(UnaryOp op) { return kUnaryOps[static_cast<int>(op)]; }

// Returns true and sets `op` when `name` names a unary op.
inline bool unary_op_from_name(std::string_view name, UnaryOp& op) { return op_from_name(kUnaryOps, name, op); }

// The float parameters of a unary op, in table order: leaky_relu (alpha), clip (min, max),
// hard_sigmoid (alpha, beta), elu (alpha).
struct UnaryParams {
    float p0 = 0, p1 = 0;
};

// y[i] = op(x[i]) in fp32 for i < n; x and y may be the same array. One loop per op; sigmoid,
// tanh and exp are vectorised (cpu/vmath.hpp).
inline void unary_apply(UnaryOp op, UnaryParams p, const float* x, float* y, int64_t n) {
    const float a = p.p0, b = p.p1;
    switch (op) {
    case UnaryOp::RELU:
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? 0.0f : x[i];  // keeps NaN
        break;
    case UnaryOp::LEAKY_RELU:
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? a * x[i] : x[i];
        break;
    case UnaryOp::SIGMOID: cpu::vec_sigmoid(x, y, n); break;
    case UnaryOp::TANH: cpu::vec_tanh(x, y, n); break;
    case UnaryOp::CLIP:  // ONNX order: max with min first, then min with max
        for (int64_t i = 0; i < n; ++i) {
            const float v = x[i] < a ? a : x[i];
            y[i] = b < v ? b : v;
        }
        break;
    case UnaryOp::HARD_SIGMOID:
        for (int64_t i = 0; i < n; ++i) y[i] = std::clamp(a * x[i] + b, 0.0f, 1.0f);
        break;
    case UnaryOp::HARD_SWISH:
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * std::clamp(x[i] * (1.0f / 6.0f) + 0.5f, 0.0f, 1.0f);
        break;
    case UnaryOp::SQRT:
        for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
        break;
    case UnaryOp::EXP: cpu::vec_exp(x, y, n); break;
    case UnaryOp::LOG:
        for (int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]);
        break;
    case UnaryOp::NEG:
        for (int64_t i = 0; i < n; ++i) y[i] = -x[i];
        break;
    case UnaryOp::ABS:
        for (int64_t i = 0; i < n; ++i) y[i] = std::fabs(x[i]);
        break;
    case UnaryOp::IDENTITY:
        if (x != y) std::copy(x, x + n, y);
        break;
    case UnaryOp::ERF:
        for (int64_t i = 0; i < n; ++i) y[i] = std::erf(x[i]);
        break;
    case UnaryOp::SOFTPLUS:  // log(1 + e^x) without overflow for large x
        for (int64_t i = 0; i < n; ++i)
            y[i] = x[i] > 0 ? x[i] + std::log1p(std::exp(-x[i])) : std::log1p(std::exp(x[i]));
        break;
    case UnaryOp::ELU:
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? a * std::expm1(x[i]) : x[i];
        break;
    }
}

// ---- broadcasting --------------------------------------------------------------------------

inline constexpr int kMaxBroadcastInputs = 16;

// Returns the numpy broadcast of the shapes of `ts` (ranks aligned on the right) as a
// shape-only TensorRef, or an error naming the two tensors (`names`) and the dim that disagree.
inline Result<TensorRef> broadcast_shape(std::span<const TensorRef> ts, std::span<const std::string> names) {
    TensorRef out;
    for (const TensorRef& t : ts) out.rank = std::max(out.rank, t.rank);
    for (int d = 0; d < out.rank; ++d) {
        int64_t dim = 1;
        size_t from = 0;
        for (size_t i = 0; i < ts.size(); ++i) {
            const int k = d - (out.rank - ts[i].rank);
            if (k < 0) continue;
            const int64_t v = ts[i].dim(k);
            if (v == 1 || v == dim) continue;
            if (dim != 1)
                return make_error(StatusCode::INVALID_ARGUMENT,
                                  "{} ({}) and {} ({}) do not broadcast: dim {} from the right is {} vs {}",
                                  names[from], shape_str(ts[from]), names[i], shape_str(ts[i]), out.rank - d, dim, v);
            dim = v;
            from = i;
        }
        out.dims[static_cast<size_t>(d)] = dim;
    }
    return out;
}

// Inputs broadcast to an output, with the output's dims of size 1 dropped and adjacent dims
// merged wherever every input stays linear across them. The innermost dim is what the kernels
// loop over; there every input's stride is 1 (it has the dim) or 0 (it is broadcast).
struct BroadcastPlan {
    int rank = 1;  // collapsed dims, >= 1
    std::array<int64_t, kMaxRank> dims{};
    int inputs = 0;
    std::array<std::array<int64_t, kMaxRank>, kMaxBroadcastInputs> strides{};  // elements; 0 = broadcast
    int64_t total = 0;  // output elements

    int64_t inner() const { return dims[static_cast<size_t>(rank - 1)]; }
    int64_t inner_stride(int i) const { return strides[static_cast<size_t>(i)][static_cast<size_t>(rank - 1)]; }
};

// Returns the plan for `ins` broadcast to `out`; the shapes must already be checked.
inline BroadcastPlan make_broadcast_plan(const TensorRef& out, std::span<const TensorRef> ins) {
    LOOM_ASSERT(ins.size() <= static_cast<size_t>(kMaxBroadcastInputs));
    BroadcastPlan p;
    p.inputs = static_cast<int>(ins.size());
    p.total = out.elements();
    std::array<std::array<int64_t, kMaxRank>, kMaxBroadcastInputs> full{};
    for (size_t i = 0; i < ins.size(); ++i) {
        const int off = out.rank - ins[i].rank;
        int64_t s = 1;
        for (int d = out.rank - 1; d >= off; --d) {
            const int64_t dim = ins[i].dim(d - off);
            full[i][static_cast<size_t>(d)] = dim == 1 ? 0 : s;
            s *= dim;
        }
    }
    int k = 0;
    for (int d = 0; d < out.rank; ++d) {
        const auto ud = static_cast<size_t>(d);
        const int64_t dim = out.dim(d);
        if (dim == 1) continue;
        bool merge = k > 0;
        for (size_t i = 0; merge && i < ins.size(); ++i)
            merge = p.strides[i][static_cast<size_t>(k - 1)] == full[i][ud] * dim;
        const size_t slot = static_cast<size_t>(merge ? k - 1 : k++);
        p.dims[slot] = merge ? p.dims[slot] * dim : dim;
        for (size_t i = 0; i < ins.size(); ++i) p.strides[i][slot] = full[i][ud];
    }
    if (k == 0) {  // a single element
        p.dims[0] = 1;
        k = 1;
    }
    p.rank = k;
    return p;
}

// Calls fn(offsets, out_pos, len) for each run of output elements [out_pos, out_pos + len)
// within [begin, end) that lies in one innermost row; offsets[i] is input i's element offset of
// the run's first element (advance it by inner_stride(i) per element).
template <typename Fn>
inline void for_each_segment(const BroadcastPlan& p, int64_t begin, int64_t end, Fn&& fn) {
    const int outer = p.rank - 1;
    const int n = p.inputs;
    const int64_t len_row = p.inner();
    std::array<int64_t, kMaxRank> idx{};
    std::array<int64_t, kMaxBroadcastInputs> off{}, seg{};
    int64_t row = begin / len_row, col = begin % len_row;
    for (int d = outer - 1; d >= 0; --d) {
        const auto ud = static_cast<size_t>(d);
        idx[ud] = row % p.dims[ud];
        row /= p.dims[ud];
        for (int i = 0; i < n; ++i) off[static_cast<size_t>(i)] += idx[ud] * p.strides[static_cast<size_t>(i)][ud];
    }
    for (int64_t pos = begin; pos < end;) {
        const int64_t len = std::min(len_row - col, end - pos);
        for (int i = 0; i < n; ++i) {
            const auto ui = static_cast<size_t>(i);
            seg[ui] = off[ui] + col * p.strides[ui][static_cast<size_t>(outer)];
        }
        fn(seg.data(), pos, len);
        pos += len;
        col = 0;
        for (int d = outer - 1; d >= 0; --d) {
            const auto ud = static_cast<size_t>(d);
            for (int i = 0; i < n; ++i) off[static_cast<size_t>(i)] += p.strides[static_cast<size_t>(i)][ud];
            if (++idx[ud] < p.dims[ud]) break;
            for (int i = 0; i < n; ++i)
                off[static_cast<size_t>(i)] -= p.strides[static_cast<size_t>(i)][ud] * p.dims[ud];
            idx[ud] = 0;
        }
    }
}

// Reads n elements of x (stride 0 or 1) into fp32 `out`; stride 0 reads one element.
template <typename T>
inline void load_block(const T* x, int64_t stride, float* out, int64_t n) {
    if constexpr (std::is_same_v<T, f16>) {
        if (!stride) out[0] = f16_to_f32(x[0]);
        else cpu::vec_f16_to_f32(x, out, n);
    } else {
        if (!stride) out[0] = x[0];
        else std::copy(x, x + n, out);
    }
}

// Writes n fp32 values to y, rounding once to T (to nearest even, vmath.hpp).
template <typename T>
inline void store_block(const float* v, T* y, int64_t n) {
    if constexpr (std::is_same_v<T, f16>) {
        cpu::vec_f32_to_f16(v, y, n);
    } else {
        std::copy(v, v + n, y);
    }
}

}  // namespace loom::device::ops
