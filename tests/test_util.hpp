// Helpers shared by the GoogleTest files (tests/test_*.cpp): presets and devices, seeded random
// data, host and device tensor descriptors, kernel launches, float64 references, temp
// directories and trace parsing. Header-only; helpers used by one file stay in that file.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/runtime.hpp"
#include "device/spec.hpp"
#include "device/types.hpp"

namespace loom::test {

// ---- presets and devices -------------------------------------------------------------------

// Returns the "edge" or "dc" preset, loaded once per process; any other name aborts.
inline const device::DeviceSpec& preset_spec(std::string_view name) {
    auto load = [](const char* preset) {
        auto s = device::load_device_spec(preset);
        LOOM_ASSERT_MSG(s.ok(), "{}", s.status().to_string());
        return *s;
    };
    static const device::DeviceSpec edge = load("edge"), dc = load("dc");
    LOOM_ASSERT_MSG(name == "edge" || name == "dc", "no cached preset '{}'", name);
    return name == "edge" ? edge : dc;
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
inline device::TensorRef shape_ref(device::DType dt, std::initializer_list<int64_t> dims, void* data = nullptr) {
    device::TensorRef t;
    t.dtype = dt;
    for (int64_t d : dims) t.dims[static_cast<size_t>(t.rank++)] = d;
    t.data = data;
    return t;
}

// Returns a tensor descriptor of shape `dims` over the host vector `v` (no device address).
template <typename T>
device::TensorRef ref(std::vector<T>& v, std::initializer_list<int64_t> dims) {
    return shape_ref(device::dtype_of<T>(), dims, v.data());
}

// Returns a tensor descriptor of shape `dims` over device floats `p`; aborts when they disagree.
inline device::TensorRef ref(device::DevicePtr<float> p, std::initializer_list<int64_t> dims) {
    auto r = device::tensor_ref(p, dims);
    LOOM_ASSERT_MSG(r.ok(), "{}", r.status().to_string());
    return *r;
}

// Returns the registered "eltwise" kernel.
inline const device::KernelDef& eltwise_kernel() {
    const device::KernelDef* k = device::find_kernel("eltwise");
    LOOM_ASSERT(k != nullptr);
    return *k;
}

// Returns the registered "matmul" kernel.
inline const device::KernelDef& matmul_kernel() {
    const device::KernelDef* k = device::find_kernel("matmul");
    LOOM_ASSERT(k != nullptr);
    return *k;
}

// Returns the f32 launch C[m,n] = A[m,k] x B[k,n] over device buffers.
inline device::KernelLaunch matmul_launch(const device::DeviceBuffer& a, const device::DeviceBuffer& b,
                                          const device::DeviceBuffer& c, int64_t m, int64_t k, int64_t n) {
    device::KernelLaunch l;
    l.inputs = {ref(fp(a), {m, k}), ref(fp(b), {k, n})};
    l.outputs = {ref(fp(c), {m, n})};
    return l;
}

// Returns the f32 launch C = A op B over n floats of device buffers (op 0 add, 1 sub, 2 mul; no
// activation) with schedule `tiling`.
inline device::KernelLaunch eltwise_launch(const device::DeviceBuffer& a, const device::DeviceBuffer& b,
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
                                      const char* preset) {
    auto r = k.cost(l, preset_spec(preset));
    EXPECT_TRUE(r.ok()) << preset << ": " << r.status().to_string();
    return r.ok() ? *r : device::CycleBreakdown{};
}

// Returns the error of kernel `k`'s cost of `l` on `preset`, or OK when it costs fine.
inline Status cost_error(const device::KernelDef& k, const device::KernelLaunch& l, const char* preset) {
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
    for (const char* preset : {"edge", "dc"}) {
        auto cost = k.cost(l, preset_spec(preset));
        ASSERT_FALSE(cost.ok());
        EXPECT_EQ(cost.status().code(), code) << cost.status().to_string();
        EXPECT_NE(cost.status().message().find(needle), std::string::npos) << cost.status().to_string();
    }
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

}  // namespace loom::test
