// Helpers shared by the GoogleTest files (tests/test_*.cpp): presets and devices, seeded random
// data, host and device tensor descriptors, kernel launches, float64 references, temp
// directories, compiler graphs and trace parsing. Header-only; helpers used by one file stay in
// that file.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/sanitizer.hpp"
#include "common/thread_pool.hpp"
#include "compiler/graph.hpp"
#include "device/kernel.hpp"
#include "device/kernels/cpu/isa.hpp"
#include "device/presets.hpp"
#include "device/runtime.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"

namespace loom::test {

// ---- the sanitizer build ---------------------------------------------------------------------

// True in the sanitizer build (ASan + UBSan, SAN=1). That build checks memory and undefined
// behaviour, not accuracy, and runs 3-10x slower; CI runs both builds in its 30 minutes. So a test
// whose cost is a numeric sweep (every k-th float of a range, a large reference convolution, 10^5
// iterations of one loop) takes a sample of it there that still runs every code path (vector
// bodies, masked tails, thread splits); the normal build runs the whole sweep.
inline constexpr bool kSanitized = LOOM_ASAN;

// `full` in the normal build, `sampled` in the sanitizer build.
template <typename T>
constexpr T full_or_sampled(T full, T sampled) {
    return kSanitized ? sampled : full;
}

// ---- presets and devices -------------------------------------------------------------------

// Returns the names of the presets this build embeds (configs/devices/*.toml), sorted: tests
// that hold for every device loop over these, so a new preset is covered without a test edit.
inline const std::vector<std::string_view>& presets() {
    static const std::vector<std::string_view> names = [] {
        std::vector<std::string_view> v;
        for (const device::DevicePreset& p : device::device_presets()) v.push_back(p.name);
        return v;
    }();
    return names;
}

// Returns embedded preset `name`, loaded once per process; a name the build lacks aborts.
inline const device::DeviceSpec& preset_spec(std::string_view name) {
    static const std::vector<std::pair<std::string_view, device::DeviceSpec>> specs = [] {
        std::vector<std::pair<std::string_view, device::DeviceSpec>> v;
        for (std::string_view preset : presets()) {
            auto s = device::load_device_spec(preset);
            LOOM_ASSERT_MSG(s.ok(), "{}", s.status().to_string());
            v.emplace_back(preset, std::move(*s));
        }
        return v;
    }();
    for (const auto& [preset, spec] : specs)
        if (preset == name) return spec;
    LOOM_ASSERT_MSG(false, "no embedded preset '{}'", name);
    return specs.front().second;
}

// Creates a device for `spec` (the "edge" preset by default) with `options`; aborts on failure.
inline std::unique_ptr<device::Device> make_device(device::DeviceOptions options = {},
                                                   const device::DeviceSpec& spec = preset_spec("edge")) {
    auto d = device::Device::create(spec, std::move(options));
    LOOM_ASSERT_MSG(d.ok(), "{}", d.status().to_string());
    return std::move(d).value();
}

// Allocates `bytes` of device memory named `name` on `dev`; aborts on failure. Returns the buffer.
inline device::DeviceBuffer alloc(device::Device& dev, size_t bytes, std::string_view name = {}) {
    auto b = dev.malloc(bytes, name);
    LOOM_ASSERT_MSG(b.ok(), "{}", b.status().to_string());
    return std::move(b).value();
}

// Every host instruction set, lowest first: tests of the kernels' paths run on each
// (INSTANTIATE_TEST_SUITE_P with ::testing::ValuesIn(kAllIsas), or a loop over supported_isas()).
inline constexpr device::cpu::Isa kAllIsas[] = {device::cpu::Isa::GENERIC, device::cpu::Isa::AVX2,
                                                device::cpu::Isa::AVX512};
static_assert(std::size(kAllIsas) == device::cpu::kIsaCount, "a level is missing from kAllIsas");

// Skips the running test with a message when the CPU lacks `want` (use: SKIP_UNLESS_ISA(want)).
#define SKIP_UNLESS_ISA(want)                                                               \
    if (!::loom::device::cpu::isa_supported(want))                                          \
    GTEST_SKIP() << "this CPU lacks " << ::loom::device::cpu::isa_name(want) << " (it has " \
                 << ::loom::device::cpu::isa_name(::loom::device::cpu::isa_detected()) << ")"

// The levels of kAllIsas this CPU supports, for a test that loops over them; says which it skips.
inline std::vector<device::cpu::Isa> supported_isas() {
    std::vector<device::cpu::Isa> out;
    for (device::cpu::Isa i : kAllIsas) {
        if (device::cpu::isa_supported(i)) out.push_back(i);
        else std::printf("[ skipped  ] %s: this CPU lacks it\n", std::string(device::cpu::isa_name(i)).c_str());
    }
    return out;
}

// Selects host instruction set `want` for its lifetime and restores the previous one after.
struct IsaGuard {
    explicit IsaGuard(device::cpu::Isa want) : before(device::cpu::isa()) { device::cpu::set_isa(want); }
    ~IsaGuard() { device::cpu::set_isa(before); }
    IsaGuard(const IsaGuard&) = delete;
    IsaGuard& operator=(const IsaGuard&) = delete;
    device::cpu::Isa before;
};

// Submits a job that keeps one worker of `pool` busy until `release` is true; returns once the
// job runs. `release` must outlive the pool's workers.
inline void occupy_worker(ThreadPool& pool, const std::atomic<bool>& release) {
    std::atomic<bool> started{false};  // the job stops touching it before this returns
    pool.submit([&started, &release] {
        started = true;
        while (!release.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
    while (!started.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

// ---- host data -----------------------------------------------------------------------------

// Returns `n` floats drawn uniformly from [lo, hi) by `rng`, in order.
inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// Returns `n` nonzero values of type T from a generator seeded with `seed`: integers in
// [-100, 99] with 0 replaced by 7, and for f16 the same divided by 8 (all exact).
template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<T> v(n);
    for (auto& e : v) {
        const int32_t r = static_cast<int32_t>(rng() % 200) - 100;
        const int32_t nz = r == 0 ? 7 : r;
        if constexpr (std::is_same_v<T, device::f16>) e = device::f32_to_f16(static_cast<float>(nz) / 8.0f);
        else e = static_cast<T>(nz);
    }
    return v;
}

// Rounds every element of `v` to f16 in place and returns the f16 values, so a float64
// reference computed from `v` sees the same inputs as an f16 kernel.
inline std::vector<device::f16> round_to_f16(std::vector<float>& v) {
    std::vector<device::f16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = device::f32_to_f16(v[i]), v[i] = device::f16_to_f32(h[i]);
    return h;
}

// The values of v widened back to fp32 (exact).
inline std::vector<float> widen_f16(const std::vector<device::f16>& v) {
    std::vector<float> o(v.size());
    for (size_t i = 0; i < v.size(); ++i) o[i] = device::f16_to_f32(v[i]);
    return o;
}

// How many of y16 differ in bits from y32 rounded once to fp16 (an fp16 launch against the fp32
// launch on the same widened values).
inline int64_t count_unlike_rounded(const std::vector<float>& y32, const std::vector<device::f16>& y16) {
    int64_t differ = 0;
    for (size_t i = 0; i < y32.size(); ++i) differ += device::f32_to_f16(y32[i]).bits != y16[i].bits;
    return differ;
}

// Returns the number of elements of a tensor of shape `dims` (1 for rank 0).
inline int64_t element_count(const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

// Returns a view of `v` as pageable host memory to copy from.
template <typename T>
device::HostView<const T> pageable(const std::vector<T>& v) {
    return device::HostView<const T>(std::span<const T>(v));
}

// Returns a view of `v` as pageable host memory to copy into.
template <typename T>
device::HostView<T> pageable_out(std::vector<T>& v) {
    return device::HostView<T>(std::span<T>(v));
}

// Returns `b` as a pointer to device floats.
inline device::DevicePtr<float> fp(const device::DeviceBuffer& b) { return b.as<float>(); }

// Returns `b` as a pointer to read-only device floats.
inline device::DevicePtr<const float> cfp(const device::DeviceBuffer& b) { return b.as<float>(); }

// ---- tensors and launches ------------------------------------------------------------------

// Returns a tensor descriptor of type `dt` and shape `dims` over host `data`; null data is for
// cost-only launches.
inline device::TensorRef shape_ref(device::DType dt, const std::vector<int64_t>& dims, void* data = nullptr) {
    device::TensorRef t;
    t.dtype = dt;
    for (int64_t d : dims) t.dims[static_cast<size_t>(t.rank++)] = d;
    t.data = data;
    return t;
}

// Returns a tensor descriptor of shape `dims` over the host vector `v` (no device address).
template <typename T>
device::TensorRef ref(std::vector<T>& v, const std::vector<int64_t>& dims) {
    return shape_ref(device::dtype_of<T>(), dims, v.data());
}

// Returns a tensor descriptor of shape `dims` over device floats `p`; aborts when they disagree.
inline device::TensorRef ref(device::DevicePtr<float> p, std::initializer_list<int64_t> dims) {
    auto r = device::tensor_ref(p, dims);
    LOOM_ASSERT_MSG(r.ok(), "{}", r.status().to_string());
    return *r;
}

// Returns the registered kernel named `name`; aborts when there is none.
inline const device::KernelDef& registered_kernel(std::string_view name) {
    const device::KernelDef* k = device::find_kernel(name);
    LOOM_ASSERT_MSG(k != nullptr, "no kernel '{}'", name);
    return *k;
}

// Returns the registered "binary" kernel.
inline const device::KernelDef& binary_kernel() { return registered_kernel("binary"); }

// Returns the registered "matmul" kernel.
inline const device::KernelDef& matmul_kernel() { return registered_kernel("matmul"); }

// Returns the f32 launch C[m,n] = A[m,k] x B[k,n] over device buffers.
inline device::KernelLaunch matmul_launch(const device::DeviceBuffer& a, const device::DeviceBuffer& b,
                                          const device::DeviceBuffer& c, int64_t m, int64_t k, int64_t n) {
    device::KernelLaunch l;
    l.inputs = {ref(fp(a), {m, k}), ref(fp(b), {k, n})};
    l.outputs = {ref(fp(c), {m, n})};
    return l;
}

// Returns the binary kernel's f32 launch C = A op B over n floats of device buffers (op 0 add,
// 1 sub, 2 mul, 3 max, 4 min) with schedule `tiling`.
inline device::KernelLaunch binary_launch(const device::DeviceBuffer& a, const device::DeviceBuffer& b,
                                           const device::DeviceBuffer& c, int64_t n, int64_t op,
                                           device::Tiling tiling = {}) {
    device::KernelLaunch l;
    l.inputs = {ref(fp(a), {n}), ref(fp(b), {n})};
    l.outputs = {ref(fp(c), {n})};
    static const char* const names[] = {"add", "sub", "mul", "max", "min"};
    l.attrs = {{"op", std::string(names[op])}};
    l.tiling = tiling;
    return l;
}

// ---- kernel contract checks ----------------------------------------------------------------

// Returns kernel `k`'s cost of `l` on `preset`, failing the test (and returning zeros) on error.
inline device::CycleBreakdown cost_ok(const device::KernelDef& k, const device::KernelLaunch& l,
                                      std::string_view preset) {
    auto r = k.cost(l, preset_spec(preset));
    EXPECT_TRUE(r.ok()) << preset << ": " << r.status().to_string();
    return r.ok() ? *r : device::CycleBreakdown{};
}

// Returns the error of kernel `k`'s cost of `l` on `preset`, or OK when it costs fine.
inline Status cost_error(const device::KernelDef& k, const device::KernelLaunch& l, std::string_view preset) {
    auto r = k.cost(l, preset_spec(preset));
    return r.ok() ? Status() : r.status();
}

// Checks that run and cost (on "edge" and "dc") of kernel `k` both reject `l` with `code` and a
// message containing `needle`.
inline void expect_rejected(const device::KernelDef& k, const device::KernelLaunch& l, StatusCode code,
                            const std::string& needle) {
    ThreadPool pool(1);
    Status run = k.run(l, pool);
    EXPECT_EQ(run.code(), code) << run.to_string();
    EXPECT_NE(run.message().find(needle), std::string::npos) << run.to_string();
    for (std::string_view preset : loom::test::presets()) {
        auto cost = k.cost(l, preset_spec(preset));
        ASSERT_FALSE(cost.ok());
        EXPECT_EQ(cost.status().code(), code) << cost.status().to_string();
        EXPECT_NE(cost.status().message().find(needle), std::string::npos) << cost.status().to_string();
    }
}

// Checks that cost of kernel `k` on `preset` refuses `l` with a VectorSchedule whose ub_tile (3)
// is not a "multiple of" the alignment, and with a CubeTiling (it wants a "VectorSchedule").
inline void expect_schedule_checked(const device::KernelDef& k, device::KernelLaunch l, std::string_view preset) {
    l.tiling = device::VectorSchedule{3, true, 0};
    EXPECT_NE(cost_error(k, l, preset).message().find("multiple of"), std::string::npos);
    l.tiling = device::CubeTiling{};
    EXPECT_NE(cost_error(k, l, preset).message().find("VectorSchedule"), std::string::npos);
}

// A small exhaustive sample of the Vector schedule space (docs/device-model.md 5.2) for elements
// of `elem_bytes` bytes: every vector axis; vector_tile 0 (lines joined, tiles of block x 2^k) or
// block x 2^k up to `vector_tile_max`, with 1 to 16 rows or 2^k rows; tiles up to `tile_max`
// elements; double buffering on and off; all cores or one; in place off and on. `seed` (the
// default schedule, say) adds its own vector tile and row count. Most points are illegal for a
// given op, and its cost function refuses them.
inline std::vector<device::VectorSchedule> vector_schedule_grid(int64_t elem_bytes, int64_t vector_tile_max,
                                                                int64_t tile_max,
                                                                const device::VectorSchedule* seed = nullptr) {
    const int64_t block = 32 / elem_bytes;
    std::vector<int64_t> tiles{0}, rows;
    for (int64_t t = block; t <= vector_tile_max; t *= 2) tiles.push_back(t);
    for (int64_t r = 1; r <= 16; ++r) rows.push_back(r);
    for (int64_t r = 32; r <= tile_max; r *= 2) rows.push_back(r);
    if (seed && seed->vector_tile > 0) {
        tiles.push_back(seed->vector_tile);
        rows.push_back(seed->ub_tile / seed->vector_tile);
    }
    std::vector<device::VectorSchedule> grid;
    for (int axis = 0; axis < device::kVectorAxisCount; ++axis)
        for (int64_t vt : tiles) {
            std::vector<int64_t> sizes;
            if (vt == 0) {
                for (int64_t t = block; t <= tile_max; t *= 2) sizes.push_back(t);
                if (seed && seed->vector_tile == 0) sizes.push_back(seed->ub_tile);
            } else {
                for (int64_t r : rows)
                    if (r * vt <= tile_max) sizes.push_back(r * vt);
            }
            for (int64_t size : sizes)
                for (bool db : {true, false})
                    for (int64_t cores : {int64_t{0}, int64_t{1}})
                        for (bool in_place : {false, true}) {
                            device::VectorSchedule v;
                            v.ub_tile = size;
                            v.double_buffer = db;
                            v.cores = cores;
                            v.vector_axis = static_cast<device::VectorAxis>(axis);
                            v.vector_tile = vt;
                            v.in_place = in_place;
                            grid.push_back(v);
                        }
        }
    return grid;
}

// The cheapest schedule of `grid` that kernel `k` accepts for `l` on `preset`, its total and
// how many were legal (total +inf when none was).
struct VectorSearch {
    double total = std::numeric_limits<double>::infinity();
    device::VectorSchedule best;
    int legal = 0;
};
inline VectorSearch vector_schedule_search(const device::KernelDef& k, device::KernelLaunch l, std::string_view preset,
                                           const std::vector<device::VectorSchedule>& grid) {
    VectorSearch r;
    const device::DeviceSpec& spec = preset_spec(preset);
    for (const device::VectorSchedule& v : grid) {
        l.tiling = v;
        auto cb = k.cost(l, spec);
        if (!cb.ok()) continue;
        ++r.legal;
        if (cb->total < r.total) r.total = cb->total, r.best = v;
    }
    return r;
}

// ---- float64 references --------------------------------------------------------------------

// Returns A[m,k] x B[k,n] (+ bias[n] when `bias` is not null) in float64, summed in order of k.
inline std::vector<double> matmul_reference(const std::vector<float>& a, const std::vector<float>& b,
                                            const std::vector<float>* bias, int64_t m, int64_t n, int64_t k) {
    std::vector<double> c(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
            double s = bias ? static_cast<double>((*bias)[static_cast<size_t>(j)]) : 0.0;
            for (int64_t kk = 0; kk < k; ++kk)
                s += static_cast<double>(a[static_cast<size_t>(i * k + kk)]) * b[static_cast<size_t>(kk * n + j)];
            c[static_cast<size_t>(i * n + j)] = s;
        }
    return c;
}

// Returns the value of an f16 bit pattern by the IEEE 754 formula, in float64.
inline double ref_decode_f16(uint16_t b) {
    const double sign = (b & 0x8000u) ? -1.0 : 1.0;
    const int exp = (b >> 10) & 0x1f;
    const int man = b & 0x3ff;
    if (exp == 0x1f) return man ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
    if (exp == 0) return sign * std::ldexp(man, -24);
    return sign * std::ldexp(1024 + man, exp - 25);
}

// Returns the f16 value nearest to `x` (ties to even) in float64; infinity from 65520 up.
inline double ref_round_f16(double x) {
    if (std::isnan(x)) return x;
    const double a = std::fabs(x);
    if (a >= 65520.0) return std::copysign(HUGE_VAL, x);
    double ulp;
    if (a < std::ldexp(1.0, -14)) {
        ulp = std::ldexp(1.0, -24);  // subnormal grid
    } else {
        int e;
        std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
        ulp = std::ldexp(1.0, e - 1 - 10);
    }
    return std::copysign(std::nearbyint(a / ulp) * ulp, x);  // default mode: ties to even
}

// Returns the flat index into a tensor of shape `in` that numpy-style broadcasting reads for flat
// index `flat` of the output shape `out` (dims of 1 in `in` repeat).
inline int64_t broadcast_source_index(const std::vector<int64_t>& out, int64_t flat, const std::vector<int64_t>& in) {
    int64_t idx = 0, stride = 1;
    for (size_t i = 0; i < out.size(); ++i) {
        const size_t d = out.size() - 1 - i;
        const int64_t o = flat % out[d];
        flat /= out[d];
        if (i < in.size()) {
            const int64_t dim = in[in.size() - 1 - i];
            idx += (dim == 1 ? 0 : o) * stride;
            stride *= dim;
        }
    }
    return idx;
}

// Returns fused activation `act` of `x` as the conv / gemm / matmul tests configure it: relu,
// leaky_relu (alpha 0.125), prelu (`prelu_slope`), clip [-0.25, 0.5], sigmoid, hard_swish; any
// other name (such as "none") returns `x`.
inline double ref_activation(const std::string& act, double x, double prelu_slope) {
    double sum = x;
    if (act == "relu") sum = std::max(sum, 0.0);
    if (act == "leaky_relu" && sum < 0) sum *= 0.125;
    if (act == "prelu" && sum < 0) sum *= prelu_slope;
    if (act == "clip") sum = std::min(std::max(sum, -0.25), 0.5);
    if (act == "sigmoid") sum = 1 / (1 + std::exp(-sum));
    if (act == "hard_swish") sum = sum * std::min(std::max(sum / 6 + 0.5, 0.0), 1.0);
    return sum;
}

// Returns the distance from |x| (rounded to float) to the next float up: one float ulp there.
inline double f32_ulp(double x) {
    const float f = std::fabs(static_cast<float>(x));
    return static_cast<double>(std::nextafter(f, std::numeric_limits<float>::infinity()) - f);
}

// Returns one f16 ulp at |x|: 2^-24 below the normal range, else 2^(exponent - 10).
inline double f16_ulp(double x) {
    const double a = std::fabs(x);
    if (a < std::ldexp(1.0, -14)) return std::ldexp(1.0, -24);
    int e;
    std::frexp(a, &e);
    return std::ldexp(1.0, e - 11);
}

// Checks |y[i] - ref[i]| <= 2e-5 * mag[i] + 1e-7 for f32 outputs (a few fp32 roundings of the
// magnitude bound `mag`); reports the first five misses.
inline void expect_within_bound(const std::vector<float>& y, const std::vector<double>& ref,
                                const std::vector<double>& mag) {
    int64_t bad = 0;
    for (size_t i = 0; i < y.size(); ++i)
        if (!(std::abs(y[i] - ref[i]) <= 2e-5 * mag[i] + 1e-7) && ++bad <= 5)
            ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", want " << ref[i];
    EXPECT_EQ(bad, 0);
}

// Checks f16 outputs against `ref` rounded to f16: within one f16 ulp at the reference's
// magnitude (2^-10 relative, 2^-24 absolute floor) plus the fp32 bound 2e-5 * mag[i]; reports
// the first five misses.
inline void expect_within_bound(const std::vector<device::f16>& y, const std::vector<double>& ref,
                                const std::vector<double>& mag) {
    int64_t bad = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        const float want = device::f16_to_f32(device::f32_to_f16(static_cast<float>(ref[i])));
        const float got = device::f16_to_f32(y[i]);
        const double ulp = std::max(std::ldexp(1.0, -24), std::ldexp(std::abs(double(want)), -10));
        if (!(std::abs(got - want) <= ulp + 2e-5 * mag[i]) && ++bad <= 5)
            ADD_FAILURE() << "y[" << i << "] = " << got << ", want " << want;
    }
    EXPECT_EQ(bad, 0);
}

// ---- int8 Cube kernels (weights with per-channel scales) ---------------------------------------

// Returns x quantized as the int8 Cube kernels specify: clamp(nearbyint(x / x_scale), -127, 127)
// with the division in fp32 and ties to even (NaN gives 0), written independently of the kernels.
inline int32_t ref_quantize(float x, float x_scale) {
    const float t = x / x_scale;
    if (std::isnan(t)) return 0;
    double q = std::nearbyint(static_cast<double>(t));  // default mode: ties to even
    return static_cast<int32_t>(std::min(std::max(q, -127.0), 127.0));
}

// Returns `n` int8 weights drawn uniformly from [-128, 127] by a generator seeded with `seed`,
// 0 replaced by 1 (nonzero data; -128 included).
inline std::vector<int8_t> random_int8(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int8_t> v(n);
    for (auto& e : v) {
        const int32_t r = static_cast<int32_t>(rng() % 256) - 128;
        e = static_cast<int8_t>(r == 0 ? 1 : r);
    }
    return v;
}

// ---- files ---------------------------------------------------------------------------------

// A fresh directory under the system temp dir, named after the running test and removed with
// everything in it.
class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = "loom_test_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name();
        std::replace(name.begin(), name.end(), '/', '_');  // parameterized names contain '/'
        path_ = std::filesystem::temp_directory_path() / name;
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    // Returns the path of `name` inside the directory; the file need not exist.
    std::string file(const std::string& name) const { return (path_ / name).string(); }

    // Writes `text` to the file `name` inside the directory; returns its path.
    std::filesystem::path write(const std::string& name, const std::string& text) const {
        auto p = path_ / name;
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }

private:
    std::filesystem::path path_;
};

// ---- compiler graphs -----------------------------------------------------------------------

// Returns an f32 host tensor of shape `dims` holding `v` (sizes must agree).
inline compiler::HostTensor host_f32(std::vector<int64_t> dims, const std::vector<float>& v) {
    compiler::HostTensor t(device::DType::F32, std::move(dims));
    LOOM_ASSERT(static_cast<size_t>(t.elements()) == v.size());
    std::copy(v.begin(), v.end(), t.as<float>());
    return t;
}

// Returns an f32 host tensor of shape `dims` drawn uniformly from [lo, hi) by a generator
// seeded with `seed`.
inline compiler::HostTensor random_host_f32(std::vector<int64_t> dims, uint32_t seed, float lo = -1.0f,
                                            float hi = 1.0f) {
    std::mt19937 rng(seed);
    const auto v = random_floats(rng, static_cast<size_t>(element_count(dims)), lo, hi);
    return host_f32(std::move(dims), v);
}

// Returns an i64 host tensor holding `v`: 1-D, or a scalar when `scalar` (one value).
inline compiler::HostTensor host_i64(const std::vector<int64_t>& v, bool scalar = false) {
    LOOM_ASSERT(!scalar || v.size() == 1);
    std::vector<int64_t> dims;
    if (!scalar) dims.push_back(static_cast<int64_t>(v.size()));
    compiler::HostTensor t(device::DType::I64, std::move(dims));
    std::copy(v.begin(), v.end(), t.as<int64_t>());
    return t;
}

// Expects `got` to equal `want` (dims, dtype) within rel x max|want| per element; `want` must
// not be all zero.
inline void expect_close(const compiler::HostTensor& got, const compiler::HostTensor& want, double rel) {
    ASSERT_EQ(got.dims(), want.dims());
    ASSERT_EQ(got.dtype(), want.dtype());
    const auto g = got.to_doubles(), w = want.to_doubles();
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0.0);  // never compare all-zero results
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], rel * scale) << "element " << i;
}

// Builds a compiler graph by value names: typed inputs, constants, nodes (named after their
// first output, so errors read "node 'y' (Conv)") and outputs. Names not seen before become
// new values; "" is an absent optional input.
struct GraphBuilder {
    compiler::Graph g;

    // Adds a typed graph input of `shape` (sizes, or Dim::sym for symbols); returns its id.
    int input(const std::string& name, compiler::Shape shape, device::DType dtype = device::DType::F32) {
        const int id = g.add_value(name);
        compiler::Value& v = g.value(id);
        v.shape = std::move(shape);
        v.dtype = dtype;
        v.typed = true;
        g.inputs.push_back(id);
        return id;
    }
    // Adds a constant; returns its id.
    int constant(const std::string& name, compiler::HostTensor t) { return g.add_constant(name, std::move(t)); }
    // Adds an f32 constant of shape `dims` with values from [lo, hi) seeded by `seed`; returns its id.
    int random_f32(const std::string& name, std::vector<int64_t> dims, uint32_t seed, float lo = -1.0f,
                   float hi = 1.0f) {
        return constant(name, random_host_f32(std::move(dims), seed, lo, hi));
    }
    // Adds node `op` reading `inputs` and writing `outputs`; returns it (valid until the next node).
    compiler::Node& node(std::string op, const std::vector<std::string>& inputs,
                         const std::vector<std::string>& outputs, device::KernelAttrs attrs = {}) {
        compiler::Node n;
        n.op = std::move(op);
        n.name = outputs.empty() ? n.op : outputs[0];
        n.attrs = std::move(attrs);
        for (const auto& name : inputs) n.inputs.push_back(name.empty() ? -1 : value_id(name));
        for (const auto& name : outputs) n.outputs.push_back(value_id(name));
        g.nodes.push_back(std::move(n));
        return g.nodes.back();
    }
    // Marks `name` as a graph output.
    void output(const std::string& name) { g.outputs.push_back(value_id(name)); }

    // Returns the id of `name`, adding an untyped value when it is new.
    int value_id(const std::string& name) {
        const int id = g.find_value(name);
        return id >= 0 ? id : g.add_value(name);
    }
};

// The SRVGGNetCompact shape on a 1x3xHxW input "x" (H and W symbolic), fixed seeds: `convs` 3x3
// pad-1 convs of `ch` channels with PReLU ("c0", "p0", ...; source "conv_chain", the last PReLU the
// output); with s > 0 then a 3x3 conv to 3 s^2 channels, DepthToSpace(s) and a skip upsampled by
// a Resize of mode `resize_mode` added, writing "y" (source "srvgg").
inline GraphBuilder srvgg_graph(int convs, int64_t ch, int64_t s, const std::string& resize_mode = "nearest") {
    const device::KernelAttrs pad1{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    GraphBuilder b;
    b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
    std::string prev = "x";
    int64_t c_in = 3;
    for (int i = 0; i < convs; ++i) {
        const std::string n = std::to_string(i);
        b.random_f32("w" + n, {ch, c_in, 3, 3}, static_cast<uint32_t>(i + 1), -0.5f, 0.5f);
        b.random_f32("b" + n, {ch}, static_cast<uint32_t>(i + 20), -0.1f, 0.1f);
        b.random_f32("s" + n, {ch, 1, 1}, static_cast<uint32_t>(i + 50), 0.1f, 0.2f);
        b.node("Conv", {prev, "w" + n, "b" + n}, {"c" + n}, pad1);
        b.node("PRelu", {"c" + n, "s" + n}, {"p" + n});
        prev = "p" + n;
        c_in = ch;
    }
    b.g.source = "conv_chain";
    if (s > 0) {
        b.random_f32("wl", {3 * s * s, ch, 3, 3}, 99, -0.5f, 0.5f);
        b.node("Conv", {prev, "wl"}, {"cl"}, pad1);
        b.node("DepthToSpace", {"cl"}, {"d"}, {{"blocksize", s}, {"mode", std::string("CRD")}});
        b.constant("scales", host_f32({4}, {1, 1, static_cast<float>(s), static_cast<float>(s)}));
        b.node("Resize", {"x", "", "scales"}, {"up"}, {{"mode", resize_mode}});
        b.node("Add", {"d", "up"}, {"y"});
        prev = "y";
        b.g.source = "srvgg";
    }
    b.output(prev);
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b;
}

// Every conv path and reach in one chain on a 1x3xHxW input "x" (H and W symbolic), fixed seeds:
// Winograd from 3 channels ("a"), depthwise, 1x1, Relu, dilated and 5x5 (GEMM), and Winograd
// again, with a residual Add of "a" across them writing "y" (source "mixed_chain").
inline GraphBuilder mixed_conv_chain() {
    const device::KernelAttrs pad1{{"pads", std::vector<int64_t>{1, 1, 1, 1}}};
    GraphBuilder b;
    b.input("x", {1, 3, compiler::Dim::sym("H"), compiler::Dim::sym("W")});
    auto conv = [&](const std::string& in, const std::string& out, int64_t c_in, int64_t c_out, int64_t k,
                    device::KernelAttrs attrs, uint32_t seed) {
        b.random_f32("w" + out, {c_out, c_in, k, k}, seed, -0.5f, 0.5f);
        b.node("Conv", {in, "w" + out}, {out}, std::move(attrs));
    };
    conv("x", "a", 3, 8, 3, pad1, 1);
    conv("a", "dw", 1, 8, 3, {{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"group", int64_t{8}}}, 2);  // depthwise
    conv("dw", "pw", 8, 8, 1, {}, 3);
    b.node("Relu", {"pw"}, {"r"});
    const device::KernelAttrs pad2{{"pads", std::vector<int64_t>{2, 2, 2, 2}}};
    device::KernelAttrs dilated = pad2;
    dilated.set("dilations", std::vector<int64_t>{2, 2});
    conv("r", "dil", 8, 8, 3, dilated, 4);
    conv("dil", "k5", 8, 8, 5, pad2, 5);
    conv("k5", "wino", 8, 8, 3, pad1, 6);
    b.node("Add", {"wino", "a"}, {"y"});
    b.output("y");
    b.g.source = "mixed_chain";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b;
}

// Adds the small SR-like body the executor tests share to `b`, reading its 3-channel NCHW input
// "x": conv+prelu, conv with a residual and relu, conv -> depth_to_space (CRD, 2) plus a
// nearest-upsampled skip, writing "y". Fixed seeds.
inline void add_sr_body(GraphBuilder& b) {
    b.random_f32("w0", {8, 3, 3, 3}, 1, -0.5f, 0.5f);
    b.random_f32("b0", {8}, 2);
    b.random_f32("s0", {8, 1, 1}, 3, 0.05f, 0.3f);
    b.random_f32("w1", {8, 8, 3, 3}, 4, -0.3f, 0.3f);
    b.random_f32("w2", {12, 8, 3, 3}, 5, -0.3f, 0.3f);
    const device::KernelAttrs conv{{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"kernel_shape", std::vector<int64_t>{3, 3}}};
    b.node("Conv", {"x", "w0", "b0"}, {"c0"}, conv);
    b.node("PRelu", {"c0", "s0"}, {"p0"});
    b.node("Conv", {"p0", "w1"}, {"c1"}, conv);
    b.node("Add", {"c1", "p0"}, {"a1"});
    b.node("Relu", {"a1"}, {"r1"});
    b.node("Conv", {"r1", "w2"}, {"c2"}, conv);
    b.node("DepthToSpace", {"c2"}, {"d2"}, {{"blocksize", int64_t{2}}, {"mode", std::string("CRD")}});
    b.constant("scales", test::host_f32({4}, {1, 1, 2, 2}));
    b.node("Resize", {"x", "", "scales"}, {"up"}, {{"mode", std::string("nearest")}});
    b.node("Add", {"d2", "up"}, {"y"});
}

// ---- traces --------------------------------------------------------------------------------

// Trace process ids: the engine lanes and the per-stream lanes.
inline constexpr int kPidEngines = 1, kPidStreams = 2;

// Returns the events of phase `ph` in trace document `doc`, in file order.
inline std::vector<nlohmann::json> events_with_ph(const nlohmann::json& doc, const std::string& ph) {
    std::vector<nlohmann::json> v;
    for (const auto& e : doc["traceEvents"])
        if (e["ph"] == ph) v.push_back(e);
    return v;
}

// Returns the complete ("X") events on the stream lanes of `dev`'s trace: one per recorded task.
inline std::vector<nlohmann::json> stream_slices(const device::Device& dev) {
    std::vector<nlohmann::json> v;
    for (auto& e : events_with_ph(nlohmann::json::parse(dev.trace_json()), "X"))
        if (e["pid"] == kPidStreams) v.push_back(std::move(e));
    return v;
}

// Returns the events of `dev`'s trace without their wall-clock arguments: what must be identical
// between two runs of the same submissions.
inline nlohmann::json simulated_trace_events(const device::Device& dev) {
    nlohmann::json events = nlohmann::json::parse(dev.trace_json())["traceEvents"];
    for (auto& e : events)
        if (e.contains("args")) {
            e["args"].erase("wall_start_us");
            e["args"].erase("wall_dur_us");
        }
    return events;
}

}  // namespace loom::test
