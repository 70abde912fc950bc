// Helpers shared by the layout and data-movement kernels (concat, split, slice, pad, transpose,
// reshape, depth_to_space, space_to_depth, gather, resize, pool): axis normalisation, moving
// elements of any dtype as raw bits, the parallel chunk size and the MTE block-granularity factor
// and the works their cost models use.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/status.hpp"
#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/kernels/op_util.hpp"
#include "device/types.hpp"

namespace loom::device::move {

// Elements per parallel_for chunk, at least: below this, handing work to another thread costs
// more than it saves.
inline constexpr size_t kGrain = size_t{1} << 14;

// Rows of `row_elems` elements per chunk so that a chunk holds about kGrain elements.
inline size_t row_grain(int64_t row_elems) {
    return row_elems >= static_cast<int64_t>(kGrain) ? 1
                                                     : kGrain / static_cast<size_t>(std::max<int64_t>(row_elems, 1));
}

// Returns `axis` (ONNX: -rank <= axis < rank) as 0 <= axis < rank, or an error naming `attr`.
inline Result<int> normalize_axis(int64_t axis, int rank, std::string_view attr = "axis") {
    if (axis < -rank || axis >= rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' = {} outside [{}, {}] for rank {}", attr, axis,
                          -rank, rank - 1, rank);
    return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Unsigned integer of N bytes: data-movement kernels copy elements as bits, never as values.
template <size_t N>
struct BitsOf;
template <>
struct BitsOf<1> {
    using type = uint8_t;
};
template <>
struct BitsOf<2> {
    using type = uint16_t;
};
template <>
struct BitsOf<4> {
    using type = uint32_t;
};
template <>
struct BitsOf<8> {
    using type = uint64_t;
};

// Calls fn(U{}) with U the unsigned type as wide as one element of `t` (every DType is 1, 2, 4
// or 8 bytes); returns what fn returns.
template <typename F>
decltype(auto) with_bits(DType t, F&& fn) {
    switch (dtype_size(t)) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 8: return fn(uint64_t{});
    default: return fn(uint32_t{});
    }
}

// The factor (>= 1) by which whole 32-byte MTE blocks inflate a contiguous run of `run_bytes`.
inline double block_factor(double run_bytes) { return cost::block_factor(run_bytes); }

// Work of a data-movement op (no arithmetic): `elements` output elements of dtype `t`, `in_bytes`
// and `out_bytes` GM bytes per output element (32-byte block rounding included), `passes` Vector
// passes rearranging elements in UB, `ub_buffers` tiles live in UB at once.
inline KernelWork move_work(int64_t elements, DType t, double in_bytes, double out_bytes, double passes,
                            int64_t ub_buffers) {
    cost::VectorWork w;
    w.elements = elements;
    w.elem_bytes = static_cast<int64_t>(dtype_size(t));
    w.in_bytes = in_bytes;
    w.out_bytes = out_bytes;
    w.vector_passes = passes;
    w.flops = 0;
    w.ub_buffers = ub_buffers;
    return cost::vector_work(w);
}

// Fails unless every input and output has dtype `t`; names the first tensor that differs.
inline Status check_dtypes(const KernelLaunch& l, DType t, size_t first_input = 0, size_t inputs = SIZE_MAX) {
    size_t end = std::min(l.inputs.size(), inputs == SIZE_MAX ? l.inputs.size() : first_input + inputs);
    for (size_t i = first_input; i < end; ++i)
        if (l.inputs[i].dtype != t)
            return make_error(StatusCode::INVALID_ARGUMENT, "input {} is {}, input {} is {} (mixed dtypes)", i,
                              dtype_name(l.inputs[i].dtype), first_input, dtype_name(t));
    for (size_t i = 0; i < l.outputs.size(); ++i)
        if (l.outputs[i].dtype != t)
            return make_error(StatusCode::INVALID_ARGUMENT, "output {} is {}, input {} is {} (mixed dtypes)", i,
                              dtype_name(l.outputs[i].dtype), first_input, dtype_name(t));
    return {};
}

// Fails unless `t` has exactly the shape `want`; the message names `what` ("output 0"), both
// shapes and the first dimension that differs.
inline Status check_shape(const TensorRef& t, std::span<const int64_t> want, std::string_view what) {
    std::span<const int64_t> got(t.dims.data(), static_cast<size_t>(std::max(t.rank, 0)));
    if (got.size() != want.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "{} has shape {} (rank {}), expected {} (rank {})", what,
                          ops::dims_str(got), got.size(), ops::dims_str(want), want.size());
    for (size_t i = 0; i < want.size(); ++i)
        if (got[i] != want[i])
            return make_error(StatusCode::INVALID_ARGUMENT, "{} has shape {}, expected {} (dim {} is {}, expected {})",
                              what, ops::dims_str(got), ops::dims_str(want), i, got[i], want[i]);
    return {};
}

// Concat's inputs, split's outputs: the pieces joined along `axis`. Fails unless every piece
// agrees with input 0 (`x0`) in every dim but axis; `what` ("input", "output") names the pieces
// in the message. Returns the pieces' dims along axis.
inline Result<std::vector<int64_t>> piece_sizes(std::span<const TensorRef> pieces, const TensorRef& x0, int axis,
                                                std::string_view what) {
    std::vector<int64_t> sizes;
    for (size_t i = 0; i < pieces.size(); ++i) {
        const TensorRef& p = pieces[i];
        bool ok = p.rank == x0.rank;
        for (int d = 0; ok && d < p.rank; ++d) ok = d == axis || p.dim(d) == x0.dim(d);
        if (!ok)
            return make_error(StatusCode::INVALID_ARGUMENT,
                              "{} {} is {}, input 0 is {}: they must agree in every dim but axis {}", what, i,
                              ops::shape_str(p), ops::shape_str(x0), axis);
        sizes.push_back(p.dim(axis));
    }
    return sizes;
}

// Work of joining `pieces` into `whole` along `axis` (concat: `join`) or cutting `whole` into
// them (split): pure MTE traffic, no Vector pass. `whole` moves in whole rows, each piece in
// contiguous runs of dim(axis) x inner elements, each run costing whole 32-byte blocks.
inline KernelWork pieces_work(const TensorRef& whole, std::span<const TensorRef> pieces, int axis, int64_t inner,
                              DType dtype, bool join) {
    const double b = static_cast<double>(dtype_size(dtype));
    double moved = 0;  // piece bytes per row of `whole`, whole blocks
    for (const TensorRef& p : pieces) {
        const double run = static_cast<double>(p.dim(axis) * inner) * b;
        moved += run * block_factor(run);
    }
    const double row = static_cast<double>(whole.dim(axis) * inner);
    const double piece_bytes = row > 0 ? moved / row : b;
    return move_work(whole.elements(), dtype, join ? piece_bytes : b, join ? b : piece_bytes, 0, 1);
}

// Copies between `whole` and the `pieces` it is cut into along `axis` (`outer`, `inner`: the
// products of the dims before and after it): Join gathers the pieces into whole (concat), else
// whole is scattered into the pieces (split). Raw bytes, any dtype.
template <bool Join>
void copy_pieces(ThreadPool& pool, const TensorRef& whole, std::span<const TensorRef> pieces, int axis, int64_t outer,
                 int64_t inner) {
    const size_t es = dtype_size(whole.dtype);
    const int64_t row = whole.dim(axis) * inner;  // elements of one row of whole (one outer index)
    const int64_t total = outer * row;
    if (total == 0) return;
    // begin[i]: where piece i starts within a row of whole; begin[n] = row.
    const size_t n = pieces.size();
    std::vector<int64_t> begin(n + 1, 0);
    std::vector<unsigned char*> piece(n);
    for (size_t i = 0; i < n; ++i) {
        begin[i + 1] = begin[i] + pieces[i].dim(axis) * inner;
        piece[i] = static_cast<unsigned char*>(pieces[i].data);
    }
    auto* base = static_cast<unsigned char*>(whole.data);
    // Each chunk of whole's elements is a sequence of runs, each within one piece's row.
    pool.parallel_for(static_cast<size_t>(total), kGrain, [&](size_t b, size_t e) {
        int64_t pos = static_cast<int64_t>(b);
        const int64_t stop = static_cast<int64_t>(e);
        while (pos < stop) {
            const int64_t o = pos / row, r = pos % row;
            // The last piece starting at or before r; empty pieces share their begin with the next.
            const size_t i = static_cast<size_t>(std::upper_bound(begin.begin(), begin.end(), r) - begin.begin()) - 1;
            const int64_t len_i = begin[i + 1] - begin[i];
            const int64_t count = std::min(begin[i + 1] - r, stop - pos);
            unsigned char* w = base + static_cast<size_t>(pos) * es;
            unsigned char* p = piece[i] + static_cast<size_t>(o * len_i + r - begin[i]) * es;
            if constexpr (Join) std::memcpy(w, p, static_cast<size_t>(count) * es);
            else std::memcpy(p, w, static_cast<size_t>(count) * es);
            pos += count;
        }
    });
}

}  // namespace loom::device::move
