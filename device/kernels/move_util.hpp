// Helpers shared by the layout and data-movement kernels (concat, split, slice, pad, transpose,
// reshape, depth_to_space, space_to_depth, gather, resize, pool): axis normalisation, moving
// elements of any dtype as raw bits, the parallel chunk size and the MTE block-granularity factor
// their cost models use.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/status.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"

namespace loom::device::move {

// Elements per parallel_for chunk, at least: below this, handing work to another thread costs
// more than it saves.
inline constexpr size_t kGrain = size_t{1} << 14;

// Rows of `row_elems` elements per chunk so that a chunk holds about kGrain elements.
inline size_t row_grain(int64_t row_elems) {
    return row_elems >= static_cast<int64_t>(kGrain) ? 1 : kGrain / static_cast<size_t>(std::max<int64_t>(row_elems, 1));
}

// Returns `axis` (ONNX: -rank <= axis < rank) as 0 <= axis < rank, or an error naming `attr`.
inline Result<int> normalize_axis(int64_t axis, int rank, std::string_view attr = "axis") {
    if (axis < -rank || axis >= rank)
        return make_error(StatusCode::INVALID_ARGUMENT, "attribute '{}' = {} outside [{}, {}] for rank {}", attr, axis,
                          -rank, rank - 1, rank);
    return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Unsigned integer of N bytes: data-movement kernels copy elements as bits, never as values.
template <size_t N> struct BitsOf;
template <> struct BitsOf<1> { using type = uint8_t; };
template <> struct BitsOf<2> { using type = uint16_t; };
template <> struct BitsOf<4> { using type = uint32_t; };
template <> struct BitsOf<8> { using type = uint64_t; };

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

// MTE traffic moves whole 32-byte blocks: a contiguous run of `run_bytes` costs
// ceil(run_bytes / 32) blocks. Returns the factor (>= 1) by which that inflates the bytes moved.
inline double block_factor(double run_bytes) {
    if (run_bytes <= 0) return 1.0;
    double blocks = static_cast<double>(static_cast<int64_t>((run_bytes + 31.0) / 32.0));
    return blocks * 32.0 / run_bytes;
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

// "2x3x4" ("scalar" for no dims).
inline std::string dims_str(std::span<const int64_t> d) {
    if (d.empty()) return "scalar";
    return fmt::format("{}", fmt::join(d, "x"));
}

// Fails unless `t` has exactly the shape `want`; the message names `what` ("output 0"), both
// shapes and the first dimension that differs.
inline Status check_shape(const TensorRef& t, std::span<const int64_t> want, std::string_view what) {
    std::span<const int64_t> got(t.dims.data(), static_cast<size_t>(std::max(t.rank, 0)));
    if (got.size() != want.size())
        return make_error(StatusCode::INVALID_ARGUMENT, "{} has shape {} (rank {}), expected {} (rank {})", what,
                          dims_str(got), got.size(), dims_str(want), want.size());
    for (size_t i = 0; i < want.size(); ++i)
        if (got[i] != want[i])
            return make_error(StatusCode::INVALID_ARGUMENT, "{} has shape {}, expected {} (dim {} is {}, expected {})",
                              what, dims_str(got), dims_str(want), i, got[i], want[i]);
    return {};
}

}  // namespace loom::device::move
