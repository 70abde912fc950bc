// Pipelined inference across frames (executor/frame_scheduler.hpp): every frame's outputs equal
// Session's bit for bit, in the pipeline's buffers or the caller's; frames complete in
// submission order; back-pressure keeps at most k inferences in flight; the trace shows the H2D
// copy of frame n+1 and the D2H copy of frame n-1 overlapping the kernels of frame n; a device
// fault fails only its frame's future; k = 1 is sequential; batching B frames into one
// inference of a model compiled at batch B gives the frames' own results, and a model with a
// fixed N = 1 is refused; destroying the pipeline with frames in flight waits for them; a
// consumer and two producers on other threads; host-placed steps and host-mode models run as
// Session runs them; the simulated timeline is the same on every run.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "compiler/compile.hpp"
#include "executor/executor.hpp"
#include "executor/frame_scheduler.hpp"
#include "tests/test_util.hpp"

namespace loom::test_frame_scheduler {  // apart from the rest of its unity batch
namespace {

using compiler::CompiledModel;
using compiler::Dim;
using compiler::Graph;
using compiler::HostTensor;
using device::KernelAttrs;
using executor::FrameFuture;
using executor::FrameScheduler;
using executor::FrameSchedulerOptions;
using executor::FrameStats;

const KernelAttrs kConv3x3{{"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"kernel_shape", std::vector<int64_t>{3, 3}}};

// A small SR-like network over n x 3 x h x w: conv+prelu, conv+relu with a residual, conv ->
// depth_to_space plus a nearest-upsampled skip; a flattening reshape (a zero-copy alias) as a
// second output.
Graph sr_graph(Dim n = 1, int64_t h = 12, int64_t w = 10) {
    test::GraphBuilder b;
    b.input("x", {n, 3, h, w});
    test::add_sr_body(b);
    b.output("y");
    if (n.known()) {
        b.constant("flat", test::host_i64({n.value, -1}));
        b.node("Reshape", {"y", "flat"}, {"y_flat"});
        b.output("y_flat");
    }
    b.g.source = "sr_graph";
    EXPECT_TRUE(b.g.topo_sort().ok());
    return b.g;
}

// `layers` 3x3 convs with fused relus over 1 x 16 x h x w: the kernels take long enough next to
// the copies for stages to overlap visibly.
Graph conv_chain(int layers, Dim h, Dim w) {
    test::GraphBuilder b;
    b.input("x", {1, 16, h, w});
    std::string prev = "x";
    for (int i = 0; i < layers; ++i) {
        const std::string id = std::to_string(i);
        b.random_f32("w" + id, {16, 16, 3, 3}, 100 + static_cast<uint32_t>(i), -0.2f, 0.2f);
        b.random_f32("b" + id, {16}, 200 + static_cast<uint32_t>(i), 0.0f, 0.1f);
        b.node("Conv", {prev, "w" + id, "b" + id}, {"c" + id}, kConv3x3);
        b.node("Relu", {"c" + id}, {"r" + id});
        prev = "r" + id;
    }
    b.output(prev);
    b.g.source = "conv_chain";
    return b.g;
}

std::shared_ptr<CompiledModel> compile_ok(const Graph& g, compiler::CompileOptions o = {}) {
    auto m = compiler::compile_graph(g, o, test::preset_spec("edge"));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return std::make_shared<CompiledModel>(m.ok() ? std::move(*m) : CompiledModel{});
}

Result<CompiledModel> compile_for_batch_result(const Graph& g, int64_t batch) {
    return compiler::compile_for_batch(g, batch, {}, test::preset_spec("edge"));
}

std::shared_ptr<CompiledModel> compile_for_batch_ok(const Graph& g, int64_t batch) {
    auto m = compile_for_batch_result(g, batch);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return std::make_shared<CompiledModel>(m.ok() ? std::move(*m) : CompiledModel{});
}

FrameSchedulerOptions options(size_t in_flight, int64_t batch = 1, std::vector<std::vector<int64_t>> input_dims = {}) {
    FrameSchedulerOptions o;
    o.in_flight = in_flight;
    o.batch = batch;
    o.input_dims = std::move(input_dims);
    return o;
}

// A device with `model` loaded on it.
struct Loaded {
    std::unique_ptr<device::Device> dev;
    std::shared_ptr<executor::LoadedModel> model;

    explicit Loaded(std::shared_ptr<CompiledModel> m, device::DeviceOptions o = {})
        : dev(test::make_device(std::move(o))) {
        auto l = executor::LoadedModel::load(*dev, std::move(m));
        LOOM_ASSERT_MSG(l.ok(), "{}", l.status().to_string());
        model = *l;
    }
    std::unique_ptr<FrameScheduler> pipeline(FrameSchedulerOptions o = {}) {
        auto p = FrameScheduler::create(model, std::move(o));
        LOOM_ASSERT_MSG(p.ok(), "{}", p.status().to_string());
        return std::move(*p);
    }
};

// Frame i's inputs: random values from seed 1000 + i, never all zero.
std::vector<HostTensor> frame_inputs(const std::vector<std::vector<int64_t>>& dims, int i) {
    std::vector<HostTensor> in;
    for (size_t k = 0; k < dims.size(); ++k)
        in.push_back(test::random_host_f32(dims[k], 1000 + static_cast<uint32_t>(i * 7 + k), -1.0f, 1.0f));
    return in;
}

// What Session gives for each input set, on a device of its own (no faults).
std::vector<std::vector<HostTensor>> session_outputs(std::shared_ptr<CompiledModel> m,
                                                     const std::vector<std::vector<HostTensor>>& inputs) {
    Loaded l(std::move(m));
    auto s = executor::Session::create(l.model);
    LOOM_ASSERT_MSG(s.ok(), "{}", s.status().to_string());
    std::vector<std::vector<HostTensor>> out;
    for (const auto& in : inputs) {
        auto r = (*s)->run(in);
        LOOM_ASSERT_MSG(r.ok(), "{}", r.status().to_string());
        out.push_back(std::move(*r));
    }
    return out;
}

void expect_bit_equal(const std::vector<HostTensor>& got, const std::vector<HostTensor>& want,
                      const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].dtype(), want[i].dtype()) << what << " output " << i;
        ASSERT_EQ(got[i].dims(), want[i].dims()) << what << " output " << i;
        bool nonzero = false;
        for (double v : want[i].to_doubles()) nonzero = nonzero || v != 0.0;
        EXPECT_TRUE(nonzero) << what << " output " << i << " is all zero: a useless comparison";
        EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].bytes()), 0) << what << " output " << i;
    }
}

// Submits `inputs` in order and returns the futures.
std::vector<FrameFuture> submit_all(FrameScheduler& p, const std::vector<std::vector<HostTensor>>& inputs) {
    std::vector<FrameFuture> futures;
    for (const auto& in : inputs) {
        auto f = p.submit(in);
        LOOM_ASSERT_MSG(f.ok(), "{}", f.status().to_string());
        futures.push_back(*f);
    }
    return futures;
}

std::vector<std::vector<HostTensor>> inputs_for(const FrameScheduler& p, int frames) {
    std::vector<std::vector<HostTensor>> in;
    for (int i = 0; i < frames; ++i) in.push_back(frame_inputs(p.frame_dims(), i));
    return in;
}

// ---- results --------------------------------------------------------------------------------

TEST(FrameScheduler, SubmitDeviceRunsTheCallersDeviceWorkAroundTheModelAndCompletesByCallback) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    auto p = l.pipeline(options(2));
    const auto in = inputs_for(*p, 6);
    const auto want = session_outputs(m, in);
    // The caller's own pinned buffers, per frame: what a media pipeline's pooled frames are.
    std::vector<device::PinnedBuffer<uint8_t>> ins, outs;
    std::vector<std::atomic<int>> done(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        ins.emplace_back(in[i][0].bytes());
        std::memcpy(ins.back().data(), in[i][0].data(), in[i][0].bytes());
        outs.emplace_back(static_cast<size_t>(want[i][0].bytes()));
        done[i] = 0;
    }
    std::vector<FrameFuture> futures;
    for (size_t i = 0; i < in.size(); ++i) {
        const executor::SlotWork before = [&](const executor::SlotIo& io) {
            EXPECT_EQ(io.slot, i % 2);
            EXPECT_EQ(io.frame, i);
            return io.stream->copy_h2d(io.inputs[0], device::HostView<const uint8_t>(ins[i]));
        };
        const executor::SlotWork after = [&](const executor::SlotIo& io) {
            LOOM_TRY(io.stream->copy_d2h(device::HostView<uint8_t>(outs[i]), device::DevicePtr<const uint8_t>(io.outputs[0])));
            return io.stream->add_callback([&done, i](Status st) { done[i] = st.ok() ? 1 : 2; });
        };
        auto f = p->submit_device(before, after);
        ASSERT_TRUE(f.ok()) << f.status().to_string();
        futures.push_back(*f);
    }
    p->flush();
    for (size_t i = 0; i < in.size(); ++i) {
        EXPECT_EQ(done[i].load(), 1) << "frame " << i;
        auto r = futures[i].get();
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_TRUE(r->empty());
        EXPECT_EQ(std::memcmp(outs[i].data(), want[i][0].data(), want[i][0].bytes()), 0) << "frame " << i;
    }
}

TEST(FrameScheduler, SubmitDeviceFailsTheFrameWhoseWorkFailsAndTheNextOneRuns) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    auto p = l.pipeline(options(2));
    const executor::SlotWork bad = [](const executor::SlotIo&) {
        return Status(StatusCode::INVALID_ARGUMENT, "no frame to upload");
    };
    const executor::SlotWork nothing = [](const executor::SlotIo&) { return Status(); };
    auto f0 = p->submit_device(bad, nothing);
    ASSERT_TRUE(f0.ok());
    auto f1 = p->submit_device(nothing, nothing);
    ASSERT_TRUE(f1.ok());
    auto r0 = f0->get();
    ASSERT_FALSE(r0.ok());
    EXPECT_NE(r0.status().message().find("no frame to upload"), std::string::npos) << r0.status().to_string();
    EXPECT_TRUE(f1->get().ok());
}


TEST(FrameScheduler, OutputsEqualSessionsForEveryFrame) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    auto p = l.pipeline();
    const auto in = inputs_for(*p, 8);
    const auto want = session_outputs(m, in);
    auto futures = submit_all(*p, in);
    for (size_t i = 0; i < futures.size(); ++i) {
        FrameStats st;
        auto out = futures[i].get(&st);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        expect_bit_equal(*out, want[i], "frame " + std::to_string(i));
        EXPECT_EQ(st.frame, i);
        EXPECT_EQ(st.slot, i % 3);
        EXPECT_LT(st.sim_start_ms, st.sim_input_done_ms);
        EXPECT_LT(st.sim_input_done_ms, st.sim_compute_done_ms);
        EXPECT_LT(st.sim_compute_done_ms, st.sim_end_ms);
    }
    const auto s = p->stats();
    EXPECT_EQ(s.frames_submitted, 8u);
    EXPECT_EQ(s.frames_completed, 8u);
    EXPECT_EQ(s.frames_failed, 0u);
    EXPECT_EQ(s.inferences, 8u);
}

TEST(FrameScheduler, CallerBuffersReceiveTheOutputsAndCanBeReused) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    auto p = l.pipeline(options(2));
    EXPECT_EQ(p->output_dims(), (std::vector<std::vector<int64_t>>{{1, 3, 24, 20}, {1, 1440}}));
    std::vector<std::vector<HostTensor>> sets{p->make_outputs(), p->make_outputs()};
    const auto in = inputs_for(*p, 6);
    const auto want = session_outputs(m, in);
    // Two buffer sets in turn: frame i writes set i % 2, taken before the set is handed on.
    std::deque<FrameFuture> pending;
    for (size_t i = 0; i < in.size(); ++i) {
        if (pending.size() == 2) {
            const size_t j = pending.front().frame();
            auto out = pending.front().get();
            ASSERT_TRUE(out.ok()) << out.status().to_string();
            expect_bit_equal(*out, want[j], "frame " + std::to_string(j));
            EXPECT_EQ((*out)[0].data(), sets[j % 2][0].data()) << "the caller's buffer, not a copy";
            pending.pop_front();
        }
        auto f = p->submit(in[i], sets[i % 2]);
        ASSERT_TRUE(f.ok()) << f.status().to_string();
        pending.push_back(*f);
    }
    for (auto& f : pending) {
        auto out = f.get();
        ASSERT_TRUE(out.ok());
        expect_bit_equal(*out, want[f.frame()], "frame " + std::to_string(f.frame()));
    }
    std::vector<HostTensor> wrong{HostTensor(device::DType::F32, {1, 3, 24, 20})};
    auto bad = p->submit(in[0], wrong);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("1 outputs given, the model has 2"), std::string::npos)
        << bad.status().message();
}

TEST(FrameScheduler, FramesCompleteInSubmissionOrder) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    auto p = l.pipeline(options(4));
    auto futures = submit_all(*p, inputs_for(*p, 4));
    for (const auto& f : futures) EXPECT_FALSE(f.done()) << "nothing waited yet, frame " << f.frame();
    // Waiting for the newest frame completes every older one first, oldest first.
    FrameStats last;
    ASSERT_TRUE(futures.back().get(&last).ok());
    double prev_done = 0;
    for (auto& f : futures) {
        EXPECT_TRUE(f.done()) << "frame " << f.frame();
        FrameStats st;
        ASSERT_TRUE(f.get(&st).ok());
        EXPECT_GE(st.wall_done_ms, prev_done) << "frame " << f.frame() << " completed before an older one";
        prev_done = st.wall_done_ms;
    }
}

// ---- back-pressure ----------------------------------------------------------------------------

TEST(FrameScheduler, BackPressureKeepsAtMostKInFlightAndLosesNothing) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    const size_t k = 2;
    auto p = l.pipeline(options(k));
    const auto in = inputs_for(*p, 7);
    std::vector<FrameFuture> futures;
    for (size_t i = 0; i < in.size(); ++i) {
        auto f = p->submit(in[i]);
        ASSERT_TRUE(f.ok()) << f.status().to_string();
        futures.push_back(*f);
        // Submitting frame i needed frame i-k's slot: submit blocked until that frame completed.
        if (i >= k) {
            EXPECT_TRUE(futures[i - k].done()) << "frame " << i - k << " after submitting frame " << i;
        }
        if (i + 1 >= k) {
            EXPECT_FALSE(futures[i + 1 - k].done()) << "frame " << i + 1 - k << " completed early";
        }
    }
    p->flush();
    const auto s = p->stats();
    EXPECT_EQ(s.in_flight_max, k);
    EXPECT_EQ(s.submits_blocked, in.size() - k);
    EXPECT_EQ(s.frames_completed, in.size());
    // On the simulated timeline too: an inference starts only once the one k before it (same
    // slot) has ended, so at no time are more than k between start and end.
    std::vector<FrameStats> st(in.size());
    const auto want = session_outputs(m, in);
    for (size_t i = 0; i < in.size(); ++i) {
        auto out = futures[i].get(&st[i]);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        expect_bit_equal(*out, want[i], "frame " + std::to_string(i));
    }
    for (size_t i = k; i < in.size(); ++i) EXPECT_GE(st[i].sim_start_ms, st[i - k].sim_end_ms) << "frame " << i;
    for (const auto& a : st) {
        size_t live = 0;
        for (const auto& b : st) {
            live += b.sim_start_ms <= a.sim_start_ms && a.sim_start_ms < b.sim_end_ms;
        }
        EXPECT_LE(live, k) << "at " << a.sim_start_ms << " ms";
    }
}

// ---- overlap on the simulated timeline -----------------------------------------------------------

struct Interval {
    double start = 0, end = 0;  // simulated us
    bool overlaps(const Interval& o) const { return start < o.end && o.start < end; }
};

// Per frame, from the trace's stream lanes: its H2D and D2H copies (named after the frame) and
// the span of the kernels on its stream between them.
struct FrameIntervals {
    std::vector<Interval> h2d, d2h, compute;
};

FrameIntervals frame_intervals(const device::Device& dev, int frames) {
    const auto slices = test::stream_slices(dev);
    FrameIntervals f;
    f.h2d.resize(static_cast<size_t>(frames));
    f.d2h.resize(static_cast<size_t>(frames));
    f.compute.resize(static_cast<size_t>(frames));
    std::vector<int> stream(static_cast<size_t>(frames), -1);
    for (const auto& e : slices) {
        const std::string name = e["name"];
        const Interval iv{e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
        for (size_t n = 0; n < static_cast<size_t>(frames); ++n) {
            if (name == "frame " + std::to_string(n) + " in") {
                EXPECT_EQ(e["args"]["engine"], "h2d");
                f.h2d[n] = iv;
                stream[n] = e["args"]["stream"];
            }
            if (name == "frame " + std::to_string(n) + " out") {
                EXPECT_EQ(e["args"]["engine"], "d2h");
                f.d2h[n] = iv;
            }
        }
    }
    for (const auto& e : slices) {
        if (e["args"]["engine"] != "aicore") continue;
        const double ts = e["ts"].get<double>(), end = ts + e["dur"].get<double>();
        for (size_t n = 0; n < static_cast<size_t>(frames); ++n) {
            // Kernels of frame n run on its stream after its input arrived and before its output
            // left (1e-6 us: the trace's float rounding).
            if (e["args"]["stream"] != stream[n] || ts < f.h2d[n].end - 1e-6 || end > f.d2h[n].start + 1e-6) continue;
            Interval& c = f.compute[n];
            c = c.end == 0 ? Interval{ts, end} : Interval{std::min(c.start, ts), std::max(c.end, end)};
        }
    }
    for (size_t n = 0; n < static_cast<size_t>(frames); ++n) {
        EXPECT_GE(stream[n], 0) << "no H2D slice for frame " << n;
        EXPECT_GT(f.compute[n].end, f.compute[n].start) << "no kernels for frame " << n;
        EXPECT_GT(f.d2h[n].end, f.d2h[n].start) << "no D2H slice for frame " << n;
    }
    return f;
}

std::string str(const Interval& iv) { return "[" + std::to_string(iv.start) + ", " + std::to_string(iv.end) + ") us"; }

// Runs `frames` frames of `m` with tracing on, k = 3, and returns each frame's intervals.
FrameIntervals traced_frames(std::shared_ptr<CompiledModel> m, int frames) {
    device::DeviceOptions o;
    o.trace = true;
    Loaded l(std::move(m), o);
    {
        auto p = l.pipeline(options(3));
        auto futures = submit_all(*p, inputs_for(*p, frames));
        for (auto& f : futures) EXPECT_TRUE(f.get().ok());
    }
    return frame_intervals(*l.dev, frames);
}

// Stages of similar length (a sigmoid over a 256 KiB frame: 13.3 us of kernel next to 12.5 us
// copies each way on edge): the textbook pipeline, H2D of frame n+1 and D2H of frame n-1 while the
// AI cores run frame n.
TEST(FrameScheduler, TraceShowsTheNextInputAndThePreviousOutputCopiedDuringCompute) {
    test::GraphBuilder b;
    b.input("x", {1, 16, 64, 64});
    b.node("Sigmoid", {"x"}, {"y"});
    b.output("y");
    b.g.source = "pointwise";
    const int frames = 6;
    const FrameIntervals f = traced_frames(compile_ok(b.g), frames);
    for (size_t n = 0; n < static_cast<size_t>(frames); ++n) {
        if (n + 1 < static_cast<size_t>(frames)) {
            EXPECT_TRUE(f.h2d[n + 1].overlaps(f.compute[n]))
                << "H2D of frame " << n + 1 << " " << str(f.h2d[n + 1]) << ", kernels of frame " << n << " "
                << str(f.compute[n]);
        }
        if (n >= 1) {
            EXPECT_TRUE(f.d2h[n - 1].overlaps(f.compute[n]))
                << "D2H of frame " << n - 1 << " " << str(f.d2h[n - 1]) << ", kernels of frame " << n << " "
                << str(f.compute[n]);
        }
    }
}

// Compute-bound (the kernels far longer than the copies): k = 3 fetches ahead, so every copy
// but the first input and the last output runs while the AI cores compute some frame.
TEST(FrameScheduler, TraceShowsCopiesHiddenUnderComputeWhenComputeBound) {
    const int frames = 6;
    const FrameIntervals f = traced_frames(compile_ok(conv_chain(4, 32, 32)), frames);
    EXPECT_TRUE(f.h2d[1].overlaps(f.compute[0])) << str(f.h2d[1]) << " vs " << str(f.compute[0]);
    auto hidden = [&](const Interval& copy) {
        return std::any_of(f.compute.begin(), f.compute.end(), [&](const Interval& c) { return copy.overlaps(c); });
    };
    for (size_t n = 0; n < static_cast<size_t>(frames); ++n) {
        if (n > 0) {
            EXPECT_TRUE(hidden(f.h2d[n])) << "H2D of frame " << n << " " << str(f.h2d[n]);
        }
        if (n + 1 < static_cast<size_t>(frames)) {
            EXPECT_TRUE(hidden(f.d2h[n])) << "D2H of frame " << n << " " << str(f.d2h[n]);
        }
        // The kernels run back to back: each frame's start where the previous one's end.
        if (n > 0) {
            EXPECT_NEAR(f.compute[n].start, f.compute[n - 1].end, 1.0) << "frame " << n;
        }
    }
}

TEST(FrameScheduler, OneInFlightIsSequentialAndThreeOverlap) {
    auto m = compile_ok(conv_chain(4, 32, 32));
    auto makespan = [&](size_t k, std::vector<FrameStats>& st) {
        Loaded l(m);
        auto p = l.pipeline(options(k));
        auto futures = submit_all(*p, inputs_for(*p, 6));
        st.assign(futures.size(), {});
        for (size_t i = 0; i < futures.size(); ++i) EXPECT_TRUE(futures[i].get(&st[i]).ok());
        return st.back().sim_end_ms - st.front().sim_start_ms;
    };
    std::vector<FrameStats> one, three;
    const double serial = makespan(1, one), overlapped = makespan(3, three);
    double sum = 0;
    for (size_t i = 0; i < one.size(); ++i) {
        if (i > 0) {
            EXPECT_GE(one[i].sim_input_done_ms, one[i - 1].sim_end_ms) << "frame " << i;
        }
        const double latency = one[i].sim_end_ms - one[i].sim_start_ms;
        EXPECT_NEAR(latency, one[0].sim_end_ms - one[0].sim_start_ms, 1e-9) << "frame " << i;
        sum += latency;
    }
    // k = 1: frames run back to back, each as long as alone.
    EXPECT_NEAR(serial, sum, 1e-6);
    // k = 3: the copies hide under the kernels.
    EXPECT_LT(overlapped, 0.9 * serial);
}

TEST(FrameScheduler, SimulatedTimelineIsTheSameOnEveryRun) {
    auto m = compile_ok(conv_chain(3, 16, 16));
    auto run = [&] {
        Loaded l(m);
        auto p = l.pipeline(options(3));
        auto futures = submit_all(*p, inputs_for(*p, 9));
        std::vector<double> t;
        for (auto& f : futures) {
            FrameStats st;
            EXPECT_TRUE(f.get(&st).ok());
            t.insert(t.end(), {st.sim_start_ms, st.sim_input_done_ms, st.sim_compute_done_ms, st.sim_end_ms});
        }
        return t;
    };
    const auto first = run();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(run(), first) << "run " << i + 2;
}

// ---- errors -----------------------------------------------------------------------------------

size_t device_steps(const CompiledModel& m) {
    size_t n = 0;
    for (const auto& s : m.steps) n += !s.alias && s.placement == compiler::Placement::DEVICE;
    return n;
}

TEST(FrameScheduler, InjectedKernelFaultFailsOnlyThatFramesFuture) {
    auto m = compile_ok(sr_graph());
    device::DeviceOptions o;
    o.faults.fail_launch = static_cast<int64_t>(2 * device_steps(*m) + 2);  // frame 2's second kernel
    Loaded l(m, o);
    auto p = l.pipeline(options(3));
    const auto in = inputs_for(*p, 6);
    const auto want = session_outputs(m, in);
    auto futures = submit_all(*p, in);
    for (size_t i = 0; i < futures.size(); ++i) {
        auto out = futures[i].get();
        if (i == 2) {
            ASSERT_FALSE(out.ok());
            EXPECT_EQ(out.status().code(), StatusCode::DEVICE_FAULT) << out.status().to_string();
            EXPECT_NE(out.status().message().find("sr_graph: frame 2: AI core exception"), std::string::npos)
                << out.status().message();
            continue;
        }
        ASSERT_TRUE(out.ok()) << "frame " << i << ": " << out.status().to_string();
        expect_bit_equal(*out, want[i], "frame " + std::to_string(i));
    }
    EXPECT_EQ(p->stats().frames_failed, 1u);
}

TEST(FrameScheduler, InjectedCopyFaultFailsOnlyThatFramesFuture) {
    auto m = compile_ok(sr_graph());
    device::DeviceOptions o;
    // Copy 1 uploads the weights; each frame then copies 1 input in and 2 outputs out.
    o.faults.fail_copy = 1 + 3 * 4 + 1;  // frame 4's input
    Loaded l(m, o);
    auto p = l.pipeline(options(2));
    const auto in = inputs_for(*p, 7);
    const auto want = session_outputs(m, in);
    auto futures = submit_all(*p, in);
    for (size_t i = 0; i < futures.size(); ++i) {
        auto out = futures[i].get();
        if (i == 4) {
            ASSERT_FALSE(out.ok());
            EXPECT_NE(out.status().message().find("frame 4: DMA error in h2d copy 'frames in'"), std::string::npos)
                << out.status().message();
            continue;
        }
        ASSERT_TRUE(out.ok()) << "frame " << i << ": " << out.status().to_string();
        expect_bit_equal(*out, want[i], "frame " + std::to_string(i));
    }
}

TEST(FrameScheduler, WrongInputsAreRefusedBeforeAnythingRuns) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    auto p = l.pipeline();
    const std::vector<HostTensor> bad{test::random_host_f32({1, 3, 10, 12}, 5)};
    auto f = p->submit(bad);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(f.status().message().find("input 0 ('x') is f32 1x3x10x12, a frame of the pipeline is f32 1x3x12x10"),
              std::string::npos)
        << f.status().message();
    EXPECT_FALSE(p->submit(std::vector<HostTensor>{}).ok());
    EXPECT_EQ(l.dev->stats().engines[static_cast<size_t>(device::Engine::AICORE)].tasks, 0u);
    EXPECT_EQ(p->stats().frames_submitted, 0u);
}

TEST(FrameScheduler, BadOptionsAndArenasBeyondMemoryAreRefused) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    EXPECT_EQ(FrameScheduler::create(l.model, options(0)).status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(FrameScheduler::create(l.model, options(65)).status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(FrameScheduler::create(l.model, options(3, 0)).status().code(), StatusCode::INVALID_ARGUMENT);
    device::DeviceOptions o;
    o.faults.fail_alloc = 3;  // weights, slot 1's arena, slot 2's arena
    Loaded full(m, o);
    auto p = FrameScheduler::create(full.model, options(3));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::OUT_OF_DEVICE_MEMORY);
    EXPECT_NE(p.status().message().find("frame pipeline of sr_graph: arena of slot 2 of 3"), std::string::npos)
        << p.status().message();
}

// ---- lifetime and threads -------------------------------------------------------------------------

TEST(FrameScheduler, DestroyingWithFramesInFlightWaitsForThem) {
    auto m = compile_ok(sr_graph());
    Loaded l(m);
    const size_t before = l.dev->stats().memory_used;
    std::vector<std::vector<HostTensor>> in;
    std::vector<FrameFuture> futures;
    {
        auto p = l.pipeline(options(3));
        EXPECT_GT(l.dev->stats().memory_used, before);
        in = inputs_for(*p, 5);
        futures = submit_all(*p, in);
        EXPECT_FALSE(futures.back().done());
    }
    EXPECT_EQ(l.dev->stats().memory_used, before) << "the slots' arenas are freed with the pipeline";
    const auto want = session_outputs(m, in);
    for (size_t i = 0; i < futures.size(); ++i) {
        EXPECT_TRUE(futures[i].done()) << "frame " << i;
        auto out = futures[i].get();
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        expect_bit_equal(*out, want[i], "frame " + std::to_string(i));
    }
}

TEST(FrameScheduler, ConsumerWaitsWhileProducerKeepsSubmitting) {
    auto m = compile_ok(conv_chain(3, 16, 16));
    Loaded l(m);
    auto p = l.pipeline(options(3));
    const auto in = inputs_for(*p, 12);
    const auto want = session_outputs(m, in);
    std::mutex mu;
    std::condition_variable cv;
    std::deque<FrameFuture> queue;
    bool finished = false;
    std::thread producer([&] {
        for (const auto& frame : in) {
            auto f = p->submit(frame);
            LOOM_ASSERT_MSG(f.ok(), "{}", f.status().to_string());
            std::lock_guard lock(mu);
            queue.push_back(*f);
            cv.notify_one();
        }
        std::lock_guard lock(mu);
        finished = true;
        cv.notify_one();
    });
    size_t got = 0;
    for (;;) {
        FrameFuture f;
        {
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return !queue.empty() || finished; });
            if (queue.empty()) break;
            f = queue.front();
            queue.pop_front();
        }
        auto out = f.get();
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        expect_bit_equal(*out, want[f.frame()], "frame " + std::to_string(f.frame()));
        EXPECT_EQ(f.frame(), got++);
    }
    producer.join();
    EXPECT_EQ(got, in.size());
    EXPECT_LE(p->stats().in_flight_max, 3u);
}

TEST(FrameScheduler, TwoProducersShareTheSlotsAndBatches) {
    const Graph g = sr_graph(Dim::sym("N"));
    auto batched = compile_for_batch_ok(g, 2);
    auto single = compile_for_batch_ok(g, 1);
    Loaded l(batched);
    auto p = l.pipeline(options(2, 2));
    const auto in = inputs_for(*p, 16);
    const auto want = session_outputs(single, in);
    // Producer t submits frames t, t + 2, ...; frame numbers follow the order they got the lock.
    std::vector<std::vector<std::pair<size_t, FrameFuture>>> mine(2);
    std::vector<std::thread> producers;
    for (size_t t = 0; t < 2; ++t)
        producers.emplace_back([&, t] {
            for (size_t i = t; i < in.size(); i += 2) {
                auto f = p->submit(in[i]);
                LOOM_ASSERT_MSG(f.ok(), "{}", f.status().to_string());
                mine[t].emplace_back(i, *f);
            }
        });
    for (auto& t : producers) t.join();
    p->flush();
    for (auto& list : mine)
        for (auto& [i, f] : list) {
            auto out = f.get();
            ASSERT_TRUE(out.ok()) << out.status().to_string();
            expect_bit_equal(*out, want[i], "input " + std::to_string(i));
        }
    const auto s = p->stats();
    EXPECT_EQ(s.frames_completed, in.size());
    EXPECT_EQ(s.inferences, in.size() / 2);
    EXPECT_LE(s.in_flight_max, 2u);
}

// ---- host-placed steps and host mode ----------------------------------------------------------------

TEST(FrameScheduler, HostPlacedStepsRunBetweenSinkRunsAsInSession) {
    test::GraphBuilder b;
    b.input("a", {3}, device::DType::I64);
    b.input("x", {2, 3});
    b.constant("one", test::host_i64({1, 1, 1}));
    b.node("Add", {"a", "one"}, {"shape_sum"});
    b.node("Relu", {"x"}, {"y"});
    b.output("shape_sum");
    b.output("y");
    b.g.source = "tiny";
    auto m = compile_ok(b.g);
    ASSERT_EQ(m->steps.size(), 2u);
    ASSERT_EQ(m->steps[0].placement, compiler::Placement::HOST);
    Loaded l(m);
    auto p = l.pipeline(options(2));
    std::vector<std::vector<HostTensor>> in;
    for (int i = 0; i < 4; ++i) in.push_back({test::host_i64({4 + i, 5, 6}), test::random_host_f32({2, 3}, 10 + i)});
    const auto want = session_outputs(m, in);
    auto futures = submit_all(*p, in);
    for (size_t i = 0; i < futures.size(); ++i) {
        auto out = futures[i].get();
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        expect_bit_equal(*out, want[i], "frame " + std::to_string(i));
    }
    EXPECT_EQ(l.dev->stats().engines[static_cast<size_t>(device::Engine::HOST_CPU)].tasks, in.size());
}

TEST(FrameScheduler, HostModeModelLaunchesEveryKernelAndMatchesSession) {
    const Graph g = conv_chain(4, Dim::sym("H"), Dim::sym("W"));
    auto host = compile_ok(g);
    ASSERT_EQ(host->mode, compiler::ExecMode::HOST);
    Loaded l(host);
    auto refused = FrameScheduler::create(l.model, {});
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("fixed input shapes: 0 input dims given, the model has 1 inputs"),
              std::string::npos)
        << refused.status().message();
    const std::vector<int64_t> dims{1, 16, 16, 16};
    auto p = l.pipeline(options(3, 1, {dims}));
    const auto in = inputs_for(*p, 6);
    const auto want = session_outputs(host, in);
    auto futures = submit_all(*p, in);
    std::vector<FrameStats> st(futures.size());
    for (size_t i = 0; i < futures.size(); ++i) {
        auto out = futures[i].get(&st[i]);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        expect_bit_equal(*out, want[i], "frame " + std::to_string(i));
    }
    // Every kernel was its own host launch, as many as Session launches; the same model in sink
    // mode pipelines faster.
    executor::RunStats one;
    {
        Loaded ref(host);
        auto session = executor::Session::create(ref.model);
        ASSERT_TRUE(session.ok());
        ASSERT_TRUE((*session)->run(in[0], &one).ok());
        EXPECT_EQ(one.submissions, one.launches);
    }
    EXPECT_EQ(l.dev->stats().engines[static_cast<size_t>(device::Engine::AICORE)].tasks, one.launches * in.size());
    compiler::CompileOptions sink;
    sink.shapes = {{"x", dims}};
    Loaded ls(compile_ok(g, sink));
    auto ps = ls.pipeline(options(3));
    auto sink_futures = submit_all(*ps, in);
    FrameStats sink_last;
    for (size_t i = 0; i < sink_futures.size(); ++i) {
        auto out = sink_futures[i].get(&sink_last);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        expect_bit_equal(*out, want[i], "sink frame " + std::to_string(i));
    }
    EXPECT_LT(sink_last.sim_end_ms, st.back().sim_end_ms);
}

// ---- batching ------------------------------------------------------------------------------------

TEST(FrameScheduler, BatchOfFourGivesEachFrameItsOwnResults) {
    const Graph g = sr_graph(Dim::sym("N"));
    auto batched = compile_for_batch_ok(g, 4);
    ASSERT_EQ(batched->tensors[static_cast<size_t>(batched->inputs[0])].dims, (std::vector<int64_t>{4, 3, 12, 10}));
    auto single = compile_for_batch_ok(g, 1);
    Loaded l(batched);
    auto p = l.pipeline(options(2, 4));
    EXPECT_EQ(p->frame_dims(), (std::vector<std::vector<int64_t>>{{1, 3, 12, 10}}));
    const auto in = inputs_for(*p, 10);  // two full batches and a partial one of 2
    const auto want = session_outputs(single, in);
    auto futures = submit_all(*p, in);
    for (size_t i = 0; i < futures.size(); ++i) {
        FrameStats st;
        auto out = futures[i].get(&st);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        ASSERT_EQ((*out)[0].dims(), (std::vector<int64_t>{1, 3, 24, 20}));
        expect_bit_equal(*out, want[i], "frame " + std::to_string(i));
        EXPECT_EQ(st.inference, i / 4);
        EXPECT_EQ(st.batch_row, i % 4);
        EXPECT_EQ(st.batch_frames, i < 8 ? 4u : 2u);
    }
    const auto s = p->stats();
    EXPECT_EQ(s.frames_completed, 10u);
    EXPECT_EQ(s.inferences, 3u);
}

TEST(FrameScheduler, BatchingAModelWithAFixedBatchDimIsRefused) {
    // ncnn-like: N fixed at 1.
    auto fixed = compile_for_batch_result(sr_graph(1), 4);
    ASSERT_FALSE(fixed.ok());
    EXPECT_EQ(fixed.status().code(), StatusCode::UNSUPPORTED);
    EXPECT_NE(fixed.status().message().find("input 'x' fixes its batch dim at 1 (1x3x12x10)"), std::string::npos)
        << fixed.status().message();
    EXPECT_NE(fixed.status().message().find("ncnn models are imported with N = 1"), std::string::npos);
    // The pipeline itself refuses to batch a model compiled for one frame.
    auto m = compile_ok(sr_graph(1));
    Loaded l(m);
    auto p = FrameScheduler::create(l.model, options(3, 4));
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(p.status().message().find("cannot batch 4 frames per inference: input 0 ('x') is 1x3x12x10"),
              std::string::npos)
        << p.status().message();
    // An output whose dim 0 is not the batch: rows would not map to frames.
    test::GraphBuilder b;
    b.input("x", {Dim::sym("N"), 3, 4, 4});
    b.node("Relu", {"x"}, {"r"});
    b.node("Flatten", {"r"}, {"y"}, {{"axis", int64_t{0}}});
    b.output("y");
    b.g.source = "flat";
    auto flat = compile_for_batch_result(b.g, 2);
    ASSERT_FALSE(flat.ok());
    EXPECT_NE(flat.status().message().find("output 'y' has the shape 1x"), std::string::npos)
        << flat.status().message();
}

}  // namespace
}  // namespace loom::test_frame_scheduler
