// Small helpers shared by the operator kernels: argument checks whose errors name the kernel,
// shapes as text, and element access for the float storage types (f32, f16 computed in fp32).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/status.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"

namespace loom::device::ops {

// "1x3x240x320" ("scalar" for rank 0).
inline std::string shape_str(const TensorRef& t) {
    if (t.rank == 0) return "scalar";
    return fmt::format("{}", fmt::join(t.dims.begin(), t.dims.begin() + t.rank, "x"));
}

inline std::vector<int64_t> shape_of(const TensorRef& t) {
    return std::vector<int64_t>(t.dims.begin(), t.dims.begin() + t.rank);
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

// Reads element i of a float tensor (f32 or f16) as fp32; writes one, rounding to the storage.
inline float load_f(const void* p, DType t, int64_t i) {
    return t == DType::F16 ? f16_to_f32(static_cast<const f16*>(p)[i]) : static_cast<const float*>(p)[i];
}
inline void store_f(void* p, DType t, int64_t i, float v) {
    if (t == DType::F16) static_cast<f16*>(p)[i] = f32_to_f16(v);
    else static_cast<float*>(p)[i] = v;
}

}  // namespace loom::device::ops
