// pool (device/kernels/pool.cpp): max / average pooling, 1-D to 3-D, with strides, pads,
// dilations, ceil_mode, count_include_pad and auto_pad. Against an independent float64
// reference that walks every kernel tap: max exactly, f32 average within 4 float ulps of the
// float64 value (fp32 window sums), f16 within 1 f16 ulp of the float64 result rounded to f16.
// Fixed seeds; odd shapes (1x1, 7x13, 19 channels) and a large case on three threads equal to
// one thread bit for bit. ONNX documentation examples with their published outputs. Errors
// name the problem; cost is positive, grows with size and kernel, and checks the schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.hpp"
#include "device/kernel.hpp"
#include "device/types.hpp"
#include "test_util.hpp"

namespace test_kernel_pool {  // this file's names, apart from the rest of its unity batch

namespace {

using namespace loom::device;
using loom::StatusCode;
using loom::ThreadPool;
using namespace loom::test;
using Dims = std::vector<int64_t>;

const KernelDef& kernel() { return registered_kernel("pool"); }

struct PoolCase {
    std::string op;
    Dims in;  // N, C, spatial...
    Dims kernel, strides, pads, dilations;  // strides/pads/dilations empty: attribute absent
    int ceil_mode = 0;
    int count_include_pad = 0;
};

Dims out_shape(const PoolCase& c) {
    const size_t sp = c.in.size() - 2;
    Dims out = {c.in[0], c.in[1]};
    for (size_t i = 0; i < sp; ++i) {
        const int64_t s = c.strides.empty() ? 1 : c.strides[i], d = c.dilations.empty() ? 1 : c.dilations[i];
        const int64_t pb = c.pads.empty() ? 0 : c.pads[i], pe = c.pads.empty() ? 0 : c.pads[i + sp];
        const double span = static_cast<double>(c.in[i + 2] + pb + pe - ((c.kernel[i] - 1) * d + 1)) / static_cast<double>(s);
        int64_t o = static_cast<int64_t>(c.ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
        if (c.ceil_mode && (o - 1) * s >= c.in[i + 2] + pb) --o;
        out.push_back(o);
    }
    return out;
}

// Float64 pooling: every tap of every window, in order.
std::vector<double> reference(const PoolCase& c, const std::vector<double>& x) {
    const size_t sp = c.in.size() - 2;
    const Dims out = out_shape(c);
    std::vector<double> y;
    Dims in_sp(c.in.begin() + 2, c.in.end()), out_sp(out.begin() + 2, out.end());
    const int64_t plane_in = element_count(in_sp), plane_out = element_count(out_sp);
    for (int64_t p = 0; p < c.in[0] * c.in[1]; ++p)
        for (int64_t q = 0; q < plane_out; ++q) {
            Dims o(sp);
            int64_t rest = q;
            for (size_t i = sp; i-- > 0;) {
                o[i] = rest % out_sp[i];
                rest /= out_sp[i];
            }
            double acc = c.op == "max" ? -HUGE_VAL : 0.0;
            int64_t inside = 0, padded = 0;
            for (int64_t t = 0; t < element_count(Dims(c.kernel.begin(), c.kernel.end())); ++t) {
                int64_t tr = t, src = 0;
                bool in = true, in_pad = true;
                for (size_t i = sp; i-- > 0;) {
                    const int64_t ti = tr % c.kernel[i];
                    tr /= c.kernel[i];
                    const int64_t s = c.strides.empty() ? 1 : c.strides[i], d = c.dilations.empty() ? 1 : c.dilations[i];
                    const int64_t pb = c.pads.empty() ? 0 : c.pads[i], pe = c.pads.empty() ? 0 : c.pads[i + sp];
                    const int64_t pos = o[i] * s - pb + ti * d;
                    in = in && pos >= 0 && pos < in_sp[i];
                    in_pad = in_pad && pos >= -pb && pos < in_sp[i] + pe;
                    int64_t stride = 1;
                    for (size_t k = i + 1; k < sp; ++k) stride *= in_sp[k];
                    src += pos * stride;
                }
                padded += in_pad;
                if (!in) continue;
                ++inside;
                const double v = x[static_cast<size_t>(p * plane_in + src)];
                acc = c.op == "max" ? std::max(acc, v) : acc + v;
            }
            y.push_back(c.op == "max" ? acc : acc / static_cast<double>(c.count_include_pad ? padded : inside));
        }
    return y;
}

KernelLaunch launch(const PoolCase& c, TensorRef x, TensorRef y) {
    KernelLaunch l;
    l.inputs = {x};
    l.outputs = {y};
    l.attrs = {{"op", c.op}, {"kernel_shape", c.kernel}};
    if (!c.strides.empty()) l.attrs.set("strides", c.strides);
    if (!c.pads.empty()) l.attrs.set("pads", c.pads);
    if (!c.dilations.empty()) l.attrs.set("dilations", c.dilations);
    if (c.ceil_mode) l.attrs.set("ceil_mode", int64_t{1});
    if (c.count_include_pad) l.attrs.set("count_include_pad", int64_t{1});
    return l;
}

void check_f32(const PoolCase& c, unsigned threads, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> x = random_floats(rng, static_cast<size_t>(element_count(c.in)));
    const std::vector<double> want = reference(c, std::vector<double>(x.begin(), x.end()));
    std::vector<float> y(want.size(), std::nanf(""));
    ThreadPool pool(threads);
    loom::Status st = kernel().run(launch(c, shape_ref(DType::F32, c.in, x.data()), shape_ref(DType::F32, out_shape(c), y.data())), pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double tol = c.op == "max" ? 0.0 : 4 * std::ldexp(std::fabs(want[i]) + 1.0, -24);
        if (!(std::fabs(y[i] - want[i]) <= tol) && bad++ < 5)
            ADD_FAILURE() << c.op << " f32 element " << i << ": " << y[i] << " want " << want[i];
    }
    EXPECT_EQ(bad, 0);
}

void check_f16(const PoolCase& c, unsigned threads, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<float> xf = random_floats(rng, static_cast<size_t>(element_count(c.in)), -4.0f, 4.0f);
    std::vector<f16> x(xf.size());
    std::vector<double> xd(xf.size());
    for (size_t i = 0; i < x.size(); ++i) {
        x[i] = f32_to_f16(xf[i]);
        xd[i] = ref_decode_f16(x[i].bits);
    }
    const std::vector<double> want = reference(c, xd);
    std::vector<f16> y(want.size(), f16{0x7e00});
    ThreadPool pool(threads);
    loom::Status st = kernel().run(launch(c, shape_ref(DType::F16, c.in, x.data()), shape_ref(DType::F16, out_shape(c), y.data())), pool);
    ASSERT_TRUE(st.ok()) << st.to_string();
    int64_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double w = ref_round_f16(want[i]), got = ref_decode_f16(y[i].bits);
        const double tol = c.op == "max" ? 0.0 : f16_ulp(w);
        if (!(std::fabs(got - w) <= tol) && bad++ < 5)
            ADD_FAILURE() << c.op << " f16 element " << i << ": " << got << " want " << w << " (exact " << want[i] << ")";
    }
    EXPECT_EQ(bad, 0);
}

// Average pooling that divides by the taps inside input + padding, ceil mode's extra window
// included (its taps past the end padding are not counted).
std::vector<PoolCase> cases_avg_pad() {
    return {
        {"avg", {1, 3, 7, 13}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 0, 1},
        {"avg", {1, 3, 8, 9}, {3, 2}, {3, 2}, {1, 0, 1, 1}, {}, 1, 1},
        {"avg", {1, 3, 11, 10}, {3, 3}, {1, 2}, {1, 0, 2, 1}, {2, 3}, 1, 1},
        {"avg", {2, 3, 17}, {4}, {3}, {1, 2}, {}, 1, 1},
    };
}

std::vector<PoolCase> cases() {
    std::vector<PoolCase> v;
    for (const char* op : {"max", "avg"}) {
        const std::string o = op;
        v.push_back({o, {1, 1, 1, 1}, {1, 1}, {}, {}, {}});
        v.push_back({o, {2, 19, 7, 13}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}});
        v.push_back({o, {1, 5, 7, 13}, {2, 3}, {2, 1}, {0, 1, 1, 0}, {}, 1});
        v.push_back({o, {1, 3, 8, 9}, {3, 2}, {3, 2}, {}, {}, 1});                // ceil adds a window
        v.push_back({o, {1, 2, 4, 5}, {1, 2}, {2, 2}, {0, 0, 1, 1}, {}, 1});      // ... but none in the end pad
        v.push_back({o, {1, 3, 11, 10}, {3, 3}, {1, 2}, {1, 0, 2, 1}, {2, 3}});    // dilations
        v.push_back({o, {1, 3, 5, 5}, {5, 5}, {}, {2, 2, 2, 2}, {}});
        v.push_back({o, {2, 3, 17}, {4}, {3}, {1, 2}, {}, 1});                     // 1-D
        v.push_back({o, {1, 2, 5, 6, 7}, {2, 3, 2}, {2, 2, 1}, {1, 0, 1, 0, 1, 0}, {}});  // 3-D
        v.push_back({o, {1, 17, 13, 7}, {13, 7}, {}, {}, {}});                     // one window
    }
    for (PoolCase c : cases_avg_pad()) v.push_back(c);
    return v;
}

TEST(PoolF32, MatchesFloat64Reference) {
    uint32_t seed = 1;
    for (const PoolCase& c : cases()) {
        SCOPED_TRACE(c.op + " in " + testing::PrintToString(c.in) + " k " + testing::PrintToString(c.kernel));
        check_f32(c, 2, seed++);
    }
}

TEST(PoolF16, MatchesFloat64ReferenceRoundedToF16WithinOneUlp) {
    uint32_t seed = 101;
    for (const PoolCase& c : cases()) {
        SCOPED_TRACE(c.op + " in " + testing::PrintToString(c.in) + " k " + testing::PrintToString(c.kernel));
        check_f16(c, 2, seed++);
    }
}

TEST(Pool, LargeCaseOnThreeThreadsEqualsOneThread) {
    const PoolCase c{"avg", {1, 19, 67, 61}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {}, 1, 1};
    check_f32(c, 3, 7);
    std::mt19937 rng(8);
    std::vector<float> x = random_floats(rng, static_cast<size_t>(element_count(c.in)));
    std::vector<float> y1(static_cast<size_t>(element_count(out_shape(c)))), y3(y1.size());
    ThreadPool one(1), three(3);
    ASSERT_TRUE(kernel().run(launch(c, shape_ref(DType::F32, c.in, x.data()), shape_ref(DType::F32, out_shape(c), y1.data())), one).ok());
    ASSERT_TRUE(kernel().run(launch(c, shape_ref(DType::F32, c.in, x.data()), shape_ref(DType::F32, out_shape(c), y3.data())), three).ok());
    EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)), 0);
}

// Runs a 1 x 1 x n x n pool on 1 .. n*n with `attrs`; returns Y.
std::vector<float> run_doc(int64_t n, const KernelAttrs& attrs, Dims out) {
    std::vector<float> x(static_cast<size_t>(n * n)), y(static_cast<size_t>(element_count(out)), -1.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i + 1);
    KernelLaunch l;
    l.inputs = {shape_ref(DType::F32, {1, 1, n, n}, x.data())};
    l.outputs = {shape_ref(DType::F32, out, y.data())};
    l.attrs = attrs;
    ThreadPool pool(1);
    loom::Status st = kernel().run(l, pool);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return y;
}

TEST(Pool, OnnxDocumentationExamples) {
    const Dims k3 = {3, 3}, k2 = {2, 2}, k5 = {5, 5}, s2 = {2, 2}, p2 = {2, 2, 2, 2};
    // maxpool_2d_ceil / averagepool_2d_ceil
    EXPECT_EQ(run_doc(4, {{"op", std::string("max")}, {"kernel_shape", k3}, {"strides", s2}, {"ceil_mode", int64_t{1}}}, {1, 1, 2, 2}),
              (std::vector<float>{11, 12, 15, 16}));
    EXPECT_EQ(run_doc(4, {{"op", std::string("avg")}, {"kernel_shape", k3}, {"strides", s2}, {"ceil_mode", int64_t{1}}}, {1, 1, 2, 2}),
              (std::vector<float>{6, 7.5f, 12, 13.5f}));
    // maxpool_2d_dilations
    EXPECT_EQ(run_doc(4, {{"op", std::string("max")}, {"kernel_shape", k2}, {"dilations", s2}}, {1, 1, 2, 2}),
              (std::vector<float>{11, 12, 15, 16}));
    // maxpool_2d_precomputed_pads / averagepool_2d_precomputed_pads
    EXPECT_EQ(run_doc(5, {{"op", std::string("max")}, {"kernel_shape", k5}, {"pads", p2}}, {1, 1, 5, 5}),
              (std::vector<float>{13, 14, 15, 15, 15, 18, 19, 20, 20, 20, 23, 24, 25, 25, 25, 23, 24, 25, 25, 25, 23,
                                  24, 25, 25, 25}));
    EXPECT_EQ(run_doc(5, {{"op", std::string("avg")}, {"kernel_shape", k5}, {"pads", p2}}, {1, 1, 5, 5}),
              (std::vector<float>{7, 7.5f, 8, 8.5f, 9, 9.5f, 10, 10.5f, 11, 11.5f, 12, 12.5f, 13, 13.5f, 14, 14.5f,
                                  15, 15.5f, 16, 16.5f, 17, 17.5f, 18, 18.5f, 19}));
    // maxpool_2d_precomputed_strides / averagepool_2d_precomputed_strides
    EXPECT_EQ(run_doc(5, {{"op", std::string("max")}, {"kernel_shape", k2}, {"strides", s2}}, {1, 1, 2, 2}),
              (std::vector<float>{7, 9, 17, 19}));
    EXPECT_EQ(run_doc(5, {{"op", std::string("avg")}, {"kernel_shape", k2}, {"strides", s2}}, {1, 1, 2, 2}),
              (std::vector<float>{4, 6, 14, 16}));
    // maxpool_2d_precomputed_same_upper / averagepool_2d_precomputed_same_upper
    EXPECT_EQ(run_doc(5, {{"op", std::string("max")}, {"kernel_shape", k3}, {"strides", s2}, {"auto_pad", std::string("SAME_UPPER")}}, {1, 1, 3, 3}),
              (std::vector<float>{7, 9, 10, 17, 19, 20, 22, 24, 25}));
    EXPECT_EQ(run_doc(5, {{"op", std::string("avg")}, {"kernel_shape", k3}, {"strides", s2}, {"auto_pad", std::string("SAME_UPPER")}}, {1, 1, 3, 3}),
              (std::vector<float>{4, 5.5f, 7, 11.5f, 13, 14.5f, 19, 20.5f, 22}));
    // averagepool_2d_pads_count_include_pad: the corner window holds one input and eight pads.
    const std::vector<float> cip = run_doc(5, {{"op", std::string("avg")}, {"kernel_shape", k3}, {"pads", p2}, {"count_include_pad", int64_t{1}}}, {1, 1, 7, 7});
    EXPECT_FLOAT_EQ(cip[0], 1.0f / 9.0f);
    EXPECT_FLOAT_EQ(cip[24], 13.0f);  // the centre window lies inside
    // maxpool_2d_same_lower on 5 x 5 with 2 x 2: pads go before.
    EXPECT_EQ(run_doc(5, {{"op", std::string("max")}, {"kernel_shape", k2}, {"auto_pad", std::string("SAME_LOWER")}}, {1, 1, 5, 5})[0], 1.0f);
}

TEST(PoolArgs, RejectsMalformedLaunches) {
    std::vector<float> x(1 * 2 * 5 * 5, 1.0f), y(64, 0.0f);
    std::vector<int32_t> xi(50, 1), yi(64, 0);
    KernelLaunch l;
    l.inputs = {ref(x, {1, 2, 5, 5})};
    l.outputs = {ref(y, {1, 2, 3, 2})};
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{3, 3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT,
                    "pool: output 0 has shape 1x2x3x2, expected 1x2x3x3 (dim 3 is 2, expected 3)");
    l.outputs = {ref(y, {1, 2, 3, 3})};
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'kernel_shape' has 1 values, input 0 (1x2x5x5) has 2 spatial dims");
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{3, 3}}, {"strides", Dims{1, 0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'strides' = [1, 0] has a value below 1");
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{3, 3}}, {"pads", Dims{0, -1, 0, 0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'pads' = [0, -1, 0, 0] has a value below 0");
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{2, 2}}, {"pads", Dims{2, 0, 0, 0}}};
    l.outputs = {ref(y, {1, 2, 6, 4})};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "spatial axis 0: window 0 covers no input position");
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{7, 3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "spatial axis 0: the padded input (5) is smaller than the window extent (7)");
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{3, 3}}, {"count_include_pad", int64_t{1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "'count_include_pad' is for op 'avg'");
    l.attrs = {{"op", std::string("avg")}, {"kernel_shape", Dims{3, 3}}, {"auto_pad", std::string("SAME_UPPER")}, {"pads", Dims{1, 1, 1, 1}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'auto_pad' = 'SAME_UPPER' excludes 'pads'");
    l.attrs = {{"op", std::string("avg")}, {"kernel_shape", Dims{3, 3}}, {"ceil_mode", int64_t{2}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'ceil_mode' = 2 (0 or 1)");
    l.attrs = {{"op", std::string("lp")}, {"kernel_shape", Dims{3, 3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'op' = 'lp' (max or avg)");
    l.attrs = {{"kernel_shape", Dims{3, 3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "attribute 'op' is required");
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{3, 3}}, {"storage_order", int64_t{0}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "unknown attribute 'storage_order'");
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{3, 3}}};
    l.inputs = {ref(xi, {1, 2, 5, 5})};
    l.outputs = {ref(yi, {1, 2, 3, 3})};
    expect_rejected(kernel(), l, StatusCode::UNSUPPORTED, "pool: dtype i32 (f32 and f16 are supported)");
    l.inputs = {ref(x, {10, 5})};
    l.outputs = {ref(y, {8, 3})};
    l.attrs = {{"op", std::string("max")}, {"kernel_shape", Dims{3}}};
    expect_rejected(kernel(), l, StatusCode::INVALID_ARGUMENT, "input 0 is 10x5, needs rank 3, 4 or 5");
    EXPECT_EQ(y, std::vector<float>(y.size(), 0.0f));
}

TEST(PoolCost, PositiveMonotonicBiggerKernelsCostMoreAndScheduleChecked) {
    static char dummy[4];
    auto cost_launch = [](DType dt, int64_t c, int64_t k) {
        PoolCase pc{"avg", {1, c, 64, 64}, {k, k}, {1, 1}, {k / 2, k / 2, k / 2, k / 2}, {}};
        return launch(pc, shape_ref(dt, pc.in, dummy), shape_ref(dt, out_shape(pc), dummy + 1));
    };
    for (std::string_view preset : loom::test::presets())
        for (DType dt : {DType::F32, DType::F16}) {
            double prev = 0;
            for (int64_t c = 1; c <= int64_t{1} << 14; c = c * 3 + 1) {
                const CycleBreakdown cb = cost_ok(kernel(), cost_launch(dt, c, 3), preset);
                EXPECT_GT(cb.total, 0);
                EXPECT_GE(cb.total, prev) << preset << " c=" << c;
                prev = cb.total;
            }
            EXPECT_GT(cost_ok(kernel(), cost_launch(dt, 256, 5), preset).total,
                      cost_ok(kernel(), cost_launch(dt, 256, 3), preset).total);
            KernelLaunch l = cost_launch(dt, 16, 3);
            expect_schedule_checked(kernel(), l, preset);
        }
    // A huge stride-equals-kernel pool still has a legal default schedule.
    PoolCase big{"max", {1, 4, 1024, 1024}, {64, 64}, {64, 64}, {}, {}};
    EXPECT_GT(cost_ok(kernel(), launch(big, shape_ref(DType::F32, big.in, dummy), shape_ref(DType::F32, out_shape(big), dummy + 1)), "edge").total, 0);
}

}  // namespace

}  // namespace test_kernel_pool
