// Small helpers shared by the operator kernels: argument checks whose errors name the kernel,
// shapes as text, and element access for the float storage types (f32, f16 computed in fp32).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/status.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cost_util.hpp"
#include "device/types.hpp"

namespace loom::device::ops {

// "2x3x4" ("scalar" for no dims).
inline std::string dims_str(std::span<const int64_t> d) {
    if (d.empty()) return "scalar";
    return fmt::format("{}", fmt::join(d, "x"));
}

// "1x3x240x320" ("scalar" for rank 0).
inline std::string shape_str(const TensorRef& t) {
    return dims_str(std::span<const int64_t>(t.dims.data(), static_cast<size_t>(std::max(t.rank, 0))));
}

inline std::vector<int64_t> shape_of(const TensorRef& t) {
    return std::vector<int64_t>(t.dims.begin(), t.dims.begin() + t.rank);
}

// Product of t's dims [first, last) (1 when empty): the outer or inner extent around an axis.
inline int64_t dims_product(const TensorRef& t, int first, int last) {
    int64_t p = 1;
    for (int d = first; d < last; ++d) p *= t.dim(d);
    return p;
}

// Row-major element strides of t's dims (entries past t's rank are 0).
inline std::array<int64_t, kMaxRank> strides_of(const TensorRef& t) {
    std::array<int64_t, kMaxRank> st{};
    int64_t s = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
        st[static_cast<size_t>(d)] = s;
        s *= t.dim(d);
    }
    return st;
}

inline bool same_shape(const TensorRef& a, const TensorRef& b) {
    return a.rank == b.rank && std::equal(a.dims.begin(), a.dims.begin() + a.rank, b.dims.begin());
}

inline bool is_float(DType t) { return t == DType::F32 || t == DType::F16; }

// Checks the number of inputs (between min_in and max_in) and outputs, and that no tensor has a
// bad rank or a negative dimension. Cost-only launches may carry null data; run paths check
// addresses with check_data.
inline Status check_io(const KernelLaunch& l, std::string_view kernel, size_t min_in, size_t max_in, size_t outs) {
    if (l.inputs.size() < min_in || l.inputs.size() > max_in) {
        if (min_in == max_in)
            return make_error(StatusCode::INVALID_ARGUMENT, "{} takes {} input(s), got {}", kernel, min_in,
                              l.inputs.size());
        return make_error(StatusCode::INVALID_ARGUMENT, "{} takes {} to {} inputs, got {}", kernel, min_in, max_in,
                          l.inputs.size());
    }
    if (l.outputs.size() != outs)
        return make_error(StatusCode::INVALID_ARGUMENT, "{} takes {} output(s), got {}", kernel, outs,
                          l.outputs.size());
    auto check = [&](const TensorRef& t, const char* what, size_t i) -> Status {
        if (t.rank < 0 || t.rank > kMaxRank)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} {} has rank {} (0 to {})", kernel, what, i, t.rank,
                              kMaxRank);
        for (int d = 0; d < t.rank; ++d)
            if (t.dim(d) < 0)
                return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} {} has a negative dimension ({})", kernel, what,
                                  i, shape_str(t));
        return {};
    };
    for (size_t i = 0; i < l.inputs.size(); ++i) LOOM_TRY(check(l.inputs[i], "input", i));
    for (size_t i = 0; i < l.outputs.size(); ++i) LOOM_TRY(check(l.outputs[i], "output", i));
    return {};
}

// check_io, then the kernel's own checks `args(l)` (a Result), whose errors get `kernel` as
// their context; returns what `args` returns.
template <typename F>
auto check_launch(const KernelLaunch& l, std::string_view kernel, size_t min_in, size_t max_in, size_t outs, F&& args)
    -> decltype(args(l)) {
    LOOM_TRY(check_io(l, kernel, min_in, max_in, outs));
    auto a = args(l);
    if (!a.ok()) return a.status().with_context(kernel);
    return a;
}

// Checks that every tensor holding elements has an address (for run paths).
inline Status check_data(const KernelLaunch& l, std::string_view kernel) {
    for (size_t i = 0; i < l.inputs.size(); ++i)
        if (!l.inputs[i].data && l.inputs[i].elements() > 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: input {} has no data", kernel, i);
    for (size_t i = 0; i < l.outputs.size(); ++i)
        if (!l.outputs[i].data && l.outputs[i].elements() > 0)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: output {} has no data", kernel, i);
    return {};
}

// Fails unless inputs 1 .. names.size() (the per-channel vectors of a normalisation, named
// `names`) are each [c], f32 or f16; errors name `kernel` and X (input 0).
inline Status check_channel_vectors(const KernelLaunch& l, std::string_view kernel,
                                    std::initializer_list<const char*> names, int64_t c) {
    const TensorRef& x = l.inputs[0];
    size_t i = 1;
    for (const char* name : names) {
        const TensorRef& p = l.inputs[i++];
        if (p.rank != 1 || p.dim(0) != c)
            return make_error(StatusCode::INVALID_ARGUMENT, "{}: {} is {}, want [C] = {} (X {})", kernel, name,
                              shape_str(p), c, shape_str(x));
        if (!is_float(p.dtype))
            return make_error(StatusCode::UNSUPPORTED, "{}: {} dtype {} (f32 or f16)", kernel, name,
                              dtype_name(p.dtype));
    }
    return {};
}

// Work of a two-pass normalisation (statistics, then normalise) over lines of `len` elements
// (stride `inner`; `elements` in all) of dtype `t`: X is read once while a line fits a third of
// UB (it stays there between the passes), else twice; Y is written once, in place of X's tile
// if the schedule asks. `passes`: Vector passes at fp32 width, +2 for f16 (widen, narrow), of
// which `reduce_passes` reduce along the line.
inline KernelWork two_pass_work(const DeviceSpec& s, int64_t elements, int64_t len, int64_t inner, DType t,
                                double passes, double reduce_passes) {
    const int64_t size = static_cast<int64_t>(dtype_size(t));
    const bool fits = 3 * len * size <= s.ub_bytes();
    cost::VectorWork w;
    w.elements = elements;
    w.elem_bytes = size;
    w.in_bytes = static_cast<double>(size * (fits ? 1 : 2));
    w.out_bytes = static_cast<double>(size);
    w.vector_passes = passes + (t == DType::F16 ? 2 : 0);
    w.flops = 5;
    w.ub_buffers = 3;
    if (elements > 0) {
        w.axis_len = len;
        w.inner = inner;
    }
    w.axis_role = cost::AxisRole::REDUCE;
    w.reduce_passes = reduce_passes;
    // A neighbour can hand X over in UB only while the line stays there for both passes.
    w.fusable_in_bytes = fits ? static_cast<double>(size) : 0;
    w.fusable_out = true;
    w.in_place_ok = true;
    return cost::vector_work(w);
}

// Reads element i of a float tensor (f32 or f16) as fp32; writes one, rounding to the storage.
inline float load_f(const void* p, DType t, int64_t i) {
    return t == DType::F16 ? f16_to_f32(static_cast<const f16*>(p)[i]) : static_cast<const float*>(p)[i];
}
inline void store_f(void* p, DType t, int64_t i, float v) {
    if (t == DType::F16) static_cast<f16*>(p)[i] = f32_to_f16(v);
    else static_cast<float*>(p)[i] = v;
}

}  // namespace loom::device::ops
