// Static memory planner (compiler/memory_plan.cpp): hand-made plans with their exact peak (chains,
// branches, aliases, alignment), every refused request with its message, corrupted plans refused by
// check_memory_plan, a seeded random property test against a brute-force reference, 10k buffers, and
// an EDSR-shaped super-resolution workload within 5% of the liveness bound and at least 2x below naive.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/status.hpp"
#include "compiler/memory_plan.hpp"

namespace test_memory_plan {  // this file's names, apart from the rest of its unity batch

namespace {

using loom::Status;
using loom::StatusCode;
using loom::compiler::BufferRequest;
using loom::compiler::check_memory_plan;
using loom::compiler::MemoryPlan;
using loom::compiler::plan_memory;

BufferRequest buf(int64_t bytes, int first, int last, int alias_of = -1) { return {bytes, first, last, alias_of}; }

// Plans `requests`, checks the plan with check_memory_plan and returns it; fails the test (and
// returns an empty plan) on error.
MemoryPlan plan_ok(const std::vector<BufferRequest>& requests, int64_t alignment = 64) {
    auto r = plan_memory(requests, alignment);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return {};
    const Status c = check_memory_plan(requests, *r, alignment);
    EXPECT_TRUE(c.ok()) << c.to_string();
    return *r;
}

// Checks that planning `requests` fails with `code` and a message containing `needle`, and that
// check_memory_plan refuses them the same way.
void expect_refused(const std::vector<BufferRequest>& requests, const std::string& needle, int64_t alignment = 64,
                    StatusCode code = StatusCode::INVALID_ARGUMENT) {
    auto r = plan_memory(requests, alignment);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
    if (code != StatusCode::INVALID_ARGUMENT) return;  // the sum overflow is the planner's alone
    MemoryPlan plan;
    plan.offsets.assign(requests.size(), 0);
    const Status c = check_memory_plan(requests, plan, alignment);
    EXPECT_EQ(c.code(), code) << c.to_string();
    EXPECT_NE(c.message().find(needle), std::string::npos) << c.to_string();
}

// Checks that check_memory_plan refuses `plan` for `requests` with a message containing `needle`.
void expect_corrupt(const std::vector<BufferRequest>& requests, const MemoryPlan& plan, const std::string& needle,
                    int64_t alignment = 64) {
    const Status c = check_memory_plan(requests, plan, alignment);
    EXPECT_EQ(c.code(), StatusCode::INVALID_ARGUMENT) << c.to_string();
    EXPECT_NE(c.message().find(needle), std::string::npos) << c.to_string();
}

// ---- hand-made plans --------------------------------------------------------------------------

TEST(MemoryPlan, ChainReusesTheFirstBufferForTheThird) {
    // a -> b -> c -> d: a step reads one buffer and writes the next; 100 bytes align to 128.
    const std::vector<BufferRequest> r = {buf(100, 0, 1), buf(100, 1, 2), buf(100, 2, 3), buf(100, 3, 4)};
    const MemoryPlan p = plan_ok(r);
    EXPECT_EQ(p.peak, 256);
    EXPECT_EQ(p.lower_bound, 256);
    EXPECT_EQ(p.naive, 512);
    EXPECT_EQ(p.offsets[0], p.offsets[2]);
    EXPECT_EQ(p.offsets[1], p.offsets[3]);
    EXPECT_NE(p.offsets[0], p.offsets[1]);
}

TEST(MemoryPlan, ParallelBranchesNeedTheirWidestStep) {
    // step 0: a = f(in); 1: b = g(a); 2: c = h(a); 3: d = b + c, a graph output (live to step 4).
    const std::vector<BufferRequest> r = {buf(64, -1, 0), buf(128, 0, 2), buf(64, 1, 3), buf(64, 2, 3),
                                          buf(128, 3, 4)};
    const MemoryPlan p = plan_ok(r);
    EXPECT_EQ(p.lower_bound, 256);  // step 2: a, b, c; step 3: b, c, d
    EXPECT_EQ(p.peak, 256);
    EXPECT_EQ(p.naive, 448);
    EXPECT_EQ(p.offsets[1], p.offsets[4]);  // d takes a's place once the branches have read it
}

TEST(MemoryPlan, DisjointLifetimesAllShareOffsetZero) {
    const std::vector<BufferRequest> r = {buf(300, 0, 0), buf(64, 1, 1), buf(1000, 2, 5), buf(7, 6, 6)};
    const MemoryPlan p = plan_ok(r);
    EXPECT_EQ(p.offsets, std::vector<int64_t>(4, 0));
    EXPECT_EQ(p.peak, 1024);
    EXPECT_EQ(p.lower_bound, 1024);
    EXPECT_EQ(p.naive, 320 + 64 + 1024 + 64);
}

TEST(MemoryPlan, NoRequestsIsAnEmptyPlan) {
    const MemoryPlan p = plan_ok({});
    EXPECT_TRUE(p.offsets.empty());
    EXPECT_EQ(p.peak, 0);
    EXPECT_EQ(p.lower_bound, 0);
    EXPECT_EQ(p.naive, 0);
}

TEST(MemoryPlan, InPlaceAliasSharesItsTargetAndExtendsItsLifetime) {
    // 0: a = conv(in); 1: r = relu(a) in place; 2: b = conv(r); 3: c = conv(b).
    const std::vector<BufferRequest> r = {buf(256, 0, 1), buf(256, 1, 2, 0), buf(256, 2, 3), buf(256, 3, 4)};
    const MemoryPlan p = plan_ok(r);
    EXPECT_EQ(p.offsets[1], p.offsets[0]);
    EXPECT_NE(p.offsets[2], p.offsets[0]);  // a lives to step 2 through r
    EXPECT_EQ(p.offsets[3], p.offsets[0]);
    EXPECT_EQ(p.peak, 512);
    EXPECT_EQ(p.lower_bound, 512);
    EXPECT_EQ(p.naive, 768);  // r has no storage of its own
}

TEST(MemoryPlan, AliasChainsResolveTransitively) {
    // a (0..1); v = reshape(a) (1..2), smaller; w = reshape(v) (2..4); b is live at 3, so it cannot
    // reuse a, which lives to step 4 through w; c (5..6) can.
    const std::vector<BufferRequest> r = {buf(512, 0, 1), buf(500, 1, 2, 0), buf(448, 2, 4, 1), buf(512, 3, 3),
                                          buf(512, 5, 6)};
    const MemoryPlan p = plan_ok(r);
    EXPECT_EQ(p.offsets[1], p.offsets[0]);
    EXPECT_EQ(p.offsets[2], p.offsets[0]);
    EXPECT_NE(p.offsets[3], p.offsets[0]);
    EXPECT_EQ(p.peak, 1024);
    EXPECT_EQ(p.lower_bound, 1024);
    EXPECT_EQ(p.naive, 1536);

    // The alias is listed before its target: the same storage sharing.
    const std::vector<BufferRequest> swapped = {buf(256, 1, 3, 1), buf(256, 0, 1), buf(256, 2, 2)};
    const MemoryPlan q = plan_ok(swapped);
    EXPECT_EQ(q.offsets[0], q.offsets[1]);
    EXPECT_EQ(q.peak, 512);
    EXPECT_EQ(q.naive, 512);
}

TEST(MemoryPlan, SizesRoundUpToTheAlignment) {
    // Three buffers live together: 1, 65 and 100 bytes.
    const std::vector<BufferRequest> r = {buf(1, 0, 2), buf(65, 0, 2), buf(100, 1, 2)};
    struct Case {
        int64_t alignment, peak;
    };
    for (const Case c : {Case{1, 166}, Case{64, 64 + 128 + 128}, Case{256, 768}, Case{4096, 3 * 4096}}) {
        const MemoryPlan p = plan_ok(r, c.alignment);
        EXPECT_EQ(p.peak, c.peak) << "alignment " << c.alignment;
        EXPECT_EQ(p.lower_bound, c.peak) << "alignment " << c.alignment;
        EXPECT_EQ(p.naive, c.peak) << "alignment " << c.alignment;
        for (int64_t o : p.offsets) EXPECT_EQ(o % c.alignment, 0) << "alignment " << c.alignment;
    }
}

TEST(MemoryPlan, KeepsTheBetterOfTheSizeAndBreadthOrders) {
    // Step 0 is widest (a, b, d: 960 bytes). Largest first puts c (512) at 0, b above it, a below b,
    // and then d fits in neither gap: 1152. Widest step first packs a, b, d at step 0 and stacks c
    // on a's bytes once a is dead: 960, the bound.
    const std::vector<BufferRequest> r = {buf(320, 0, 1), buf(384, 0, 2), buf(512, 2, 3), buf(256, 0, 0)};
    const MemoryPlan p = plan_ok(r);
    EXPECT_EQ(p.lower_bound, 960);
    EXPECT_EQ(p.peak, 960);
    EXPECT_EQ(p.naive, 1472);
}

// ---- refused requests -------------------------------------------------------------------------

TEST(MemoryPlanErrors, NonPositiveBytes) {
    expect_refused({buf(64, 0, 1), buf(0, 1, 2)}, "buffer 1: bytes 0 is not positive");
    expect_refused({buf(-8, 0, 1)}, "buffer 0: bytes -8 is not positive");
}

TEST(MemoryPlanErrors, BytesOverflowWhenAligned) {
    expect_refused({buf(std::numeric_limits<int64_t>::max() - 10, 0, 1)}, "buffer 0: bytes 9223372036854775797 "
                                                                           "overflow int64 when aligned to 64");
}

TEST(MemoryPlanErrors, FirstAfterLast) {
    expect_refused({buf(64, 0, 1), buf(64, 1, 2), buf(64, 3, 2)}, "buffer 2: first step 3 is after last step 2");
}

TEST(MemoryPlanErrors, AliasOutOfRange) {
    expect_refused({buf(64, 0, 1), buf(64, 1, 2, 2)}, "buffer 1: alias_of 2 is not -1 or a buffer index (0 to 1)");
    expect_refused({buf(64, 0, 1, -2)}, "buffer 0: alias_of -2 is not -1 or a buffer index (0 to 0)");
}

TEST(MemoryPlanErrors, AliasLargerThanItsTarget) {
    expect_refused({buf(128, 0, 1), buf(129, 1, 2, 0)},
                   "buffer 1: 129 bytes do not fit in its alias target, buffer 0 (128 bytes)");
}

TEST(MemoryPlanErrors, AliasCycles) {
    expect_refused({buf(64, 0, 1), buf(64, 1, 2, 1)}, "buffer 1: alias cycle 1 -> 1");
    // 0 leads into the cycle 1 -> 3 -> 2 -> 1 without being on it.
    expect_refused({buf(64, 0, 1, 1), buf(64, 1, 2, 3), buf(64, 2, 3, 1), buf(64, 2, 3, 2)},
                   "buffer 1: alias cycle 1 -> 3 -> 2 -> 1");
}

TEST(MemoryPlanErrors, AlignmentNotAPowerOfTwo) {
    for (int64_t a : {0, -64, 48, 3}) expect_refused({buf(64, 0, 1)}, fmt::format("alignment {} is not", a), a);
    expect_refused({}, "alignment 96 is not a power of two", 96);
}

TEST(MemoryPlanErrors, SizesSummingPastInt64) {
    const int64_t huge = int64_t{1} << 62;
    expect_refused({buf(huge, 0, 1), buf(huge, 2, 3)}, "buffer sizes sum past", 64, StatusCode::OUT_OF_RANGE);
}

// ---- check_memory_plan ------------------------------------------------------------------------

TEST(MemoryPlanCheck, RefusesCorruptedPlans) {
    // 0 and 1 live together, 2 after 0; 3 is an in-place alias of 2.
    const std::vector<BufferRequest> r = {buf(100, 0, 1), buf(64, 1, 2), buf(128, 2, 3), buf(100, 3, 4, 2)};
    const MemoryPlan good = plan_ok(r);
    ASSERT_EQ(good.peak, 192);
    ASSERT_EQ(good.offsets, (std::vector<int64_t>{0, 128, 0, 0}));

    MemoryPlan p = good;
    p.offsets[1] = p.offsets[0] + 64;  // inside buffer 0's 128 bytes, both live at step 1
    p.peak = 512;
    expect_corrupt(r, p, "buffers 0 and 1 share bytes while both live at step 1");

    p = good;
    p.offsets[2] = p.offsets[1];  // 1 and 2 both live at step 2
    p.offsets[3] = p.offsets[1];
    p.peak = 512;
    expect_corrupt(r, p, "buffers 1 and 2 share bytes while both live at step 2");

    p = good;
    p.offsets[1] += 8;
    p.peak += 64;
    expect_corrupt(r, p, "buffer 1: offset " + std::to_string(p.offsets[1]) + " is not a multiple of the alignment 64");

    p = good;
    p.offsets[0] = -128;
    expect_corrupt(r, p, "buffer 0: offset -128 is negative");

    p = good;
    p.peak = 128;
    expect_corrupt(r, p, "buffer 1: offset 128 + 64 bytes ends past the peak 128");

    p = good;
    p.peak = -1;
    expect_corrupt(r, p, "plan peak -1 is negative");

    p = good;
    p.offsets[3] = p.offsets[2] + 64;
    p.peak += 128;
    expect_corrupt(r, p, "buffer 3: offset " + std::to_string(p.offsets[3]) +
                             " differs from that of its alias target, buffer 2 at " + std::to_string(p.offsets[2]));

    p = good;
    p.offsets.pop_back();
    expect_corrupt(r, p, "plan has 3 offsets for 4 buffers");

    p = good;
    p.offsets[0] = std::numeric_limits<int64_t>::max() - 63;  // aligned, but offset + size overflows
    expect_corrupt(r, p, "ends past the peak");
}

TEST(MemoryPlanCheck, AcceptsSharedBytesAcrossDisjointLifetimesAndSlack) {
    // A hand-written plan: 0 and 2 reuse the same bytes at different times; peak has room to spare.
    const std::vector<BufferRequest> r = {buf(64, 0, 1), buf(64, 1, 2), buf(64, 2, 3)};
    MemoryPlan p;
    p.offsets = {128, 0, 128};
    p.peak = 1024;
    EXPECT_TRUE(check_memory_plan(r, p).ok());
    p.offsets = {128, 0, 64};  // 1 and 2 at step 2: adjacent, not overlapping
    EXPECT_TRUE(check_memory_plan(r, p).ok());
    p.offsets = {128, 0, 32};
    expect_corrupt(r, p, "buffer 2: offset 32 is not a multiple of the alignment 64");
    expect_corrupt(r, p, "buffers 1 and 2 share bytes while both live at step 2: [0, 64) and [32, 96)", 32);
}

// ---- properties -------------------------------------------------------------------------------

// Random requests over `steps` steps: sizes log-uniform from 1 byte to 1 MiB, lifetimes of up to a
// third of the steps (some from the start, some to the end), and about one in six an alias of an
// earlier buffer, no larger than it.
std::vector<BufferRequest> random_requests(std::mt19937& rng, int n, int steps) {
    std::uniform_real_distribution<double> log_size(0.0, 20.0);
    std::uniform_int_distribution<int> step(0, steps - 1), length(0, steps / 3), pick(0, 5);
    std::vector<BufferRequest> r;
    for (int i = 0; i < n; ++i) {
        BufferRequest b;
        b.bytes = static_cast<int64_t>(std::exp2(log_size(rng))) + 1;
        b.first = pick(rng) == 0 ? -1 : step(rng);
        b.last = pick(rng) == 0 ? steps : std::min(steps, std::max(b.first, 0) + length(rng));
        if (i > 0 && pick(rng) == 0) {
            b.alias_of = std::uniform_int_distribution<int>(0, i - 1)(rng);
            b.bytes = std::min(b.bytes, r[static_cast<size_t>(b.alias_of)].bytes);
        }
        r.push_back(b);
    }
    return r;
}

// The storage owner of request `i` (following alias_of to a request that aliases nothing).
int root_of(const std::vector<BufferRequest>& r, int i) {
    while (r[static_cast<size_t>(i)].alias_of >= 0) i = r[static_cast<size_t>(i)].alias_of;
    return i;
}

TEST(MemoryPlan, RandomLifetimesGiveValidPlansBetweenTheBounds) {
    std::mt19937 rng(20240611);
    for (int round = 0; round < 60; ++round) {
        const int steps = std::uniform_int_distribution<int>(2, 80)(rng);
        const int n = std::uniform_int_distribution<int>(1, 250)(rng);
        const int64_t alignment = int64_t{1} << std::uniform_int_distribution<int>(0, 12)(rng);
        const std::vector<BufferRequest> r = random_requests(rng, n, steps);
        SCOPED_TRACE(testing::Message() << "round " << round << ": " << n << " buffers, " << steps
                                        << " steps, alignment " << alignment);
        const MemoryPlan p = plan_ok(r, alignment);
        ASSERT_EQ(p.offsets.size(), r.size());

        // Brute-force reference: widen each root over its aliases, then sum per step.
        auto aligned = [&](int64_t b) { return (b + alignment - 1) / alignment * alignment; };
        std::vector<int> lo(r.size()), hi(r.size());
        for (size_t i = 0; i < r.size(); ++i) lo[i] = r[i].first, hi[i] = r[i].last;
        int64_t naive = 0;
        for (int i = 0; i < n; ++i) {
            const auto root = static_cast<size_t>(root_of(r, i));
            lo[root] = std::min(lo[root], r[static_cast<size_t>(i)].first);
            hi[root] = std::max(hi[root], r[static_cast<size_t>(i)].last);
            if (r[static_cast<size_t>(i)].alias_of < 0) naive += aligned(r[static_cast<size_t>(i)].bytes);
            else EXPECT_EQ(p.offsets[static_cast<size_t>(i)], p.offsets[root]) << "alias " << i;
        }
        int64_t bound = 0;
        for (int t = -1; t <= steps; ++t) {
            int64_t live = 0;
            for (size_t i = 0; i < r.size(); ++i)
                if (r[i].alias_of < 0 && lo[i] <= t && t <= hi[i]) live += aligned(r[i].bytes);
            bound = std::max(bound, live);
        }
        EXPECT_EQ(p.naive, naive);
        EXPECT_EQ(p.lower_bound, bound);
        EXPECT_LE(p.lower_bound, p.peak);
        EXPECT_LE(p.peak, p.naive);

        // Every pair of roots live together is apart in memory, and all lie inside the peak.
        int64_t top = 0;
        for (size_t i = 0; i < r.size(); ++i) {
            if (r[i].alias_of >= 0) continue;
            EXPECT_EQ(p.offsets[i] % alignment, 0);
            top = std::max(top, p.offsets[i] + aligned(r[i].bytes));
            for (size_t j = i + 1; j < r.size(); ++j) {
                if (r[j].alias_of >= 0 || lo[i] > hi[j] || lo[j] > hi[i]) continue;
                const bool apart = p.offsets[i] + aligned(r[i].bytes) <= p.offsets[j] ||
                                   p.offsets[j] + aligned(r[j].bytes) <= p.offsets[i];
                EXPECT_TRUE(apart) << "buffers " << i << " and " << j;
            }
        }
        EXPECT_EQ(top, p.peak);
    }
}

TEST(MemoryPlanCheck, RefusesEveryMovedBufferThatLandsOnALiveOne) {
    // Move one root onto another root it is live with: check_memory_plan must name the clash.
    std::mt19937 rng(77);
    int refused = 0;
    for (int round = 0; round < 200; ++round) {
        const std::vector<BufferRequest> r = random_requests(rng, 40, 20);
        const MemoryPlan good = plan_ok(r);
        std::uniform_int_distribution<int> any(0, 39);
        const int a = root_of(r, any(rng)), b = root_of(r, any(rng));
        if (a == b) continue;
        MemoryPlan p = good;
        p.peak = int64_t{1} << 40;  // room for a larger buffer moved up
        for (size_t i = 0; i < r.size(); ++i)
            if (root_of(r, static_cast<int>(i)) == a) p.offsets[i] = good.offsets[static_cast<size_t>(b)];
        const Status c = check_memory_plan(r, p);
        // Lifetimes are widened over aliases: recompute them to know whether a and b are live together.
        int lo_a = r[static_cast<size_t>(a)].first, hi_a = r[static_cast<size_t>(a)].last;
        int lo_b = r[static_cast<size_t>(b)].first, hi_b = r[static_cast<size_t>(b)].last;
        for (size_t i = 0; i < r.size(); ++i) {
            const int root = root_of(r, static_cast<int>(i));
            if (root == a) lo_a = std::min(lo_a, r[i].first), hi_a = std::max(hi_a, r[i].last);
            if (root == b) lo_b = std::min(lo_b, r[i].first), hi_b = std::max(hi_b, r[i].last);
        }
        if (lo_a <= hi_b && lo_b <= hi_a) {
            EXPECT_NE(c.message().find("share bytes"), std::string::npos) << c.to_string();
            ++refused;
        }
    }
    EXPECT_GT(refused, 20);  // the seed gives enough clashing moves to mean something
}

TEST(MemoryPlan, TenThousandBuffersPlanValidly) {
    // The size the compiler must handle: 10k buffers over 5k steps (placement is O(n^2)).
    std::mt19937 rng(5);
    std::vector<BufferRequest> r;
    for (int i = 0; i < 10000; ++i) {
        const int first = i / 2 - 1;
        const int last = first + 1 + std::uniform_int_distribution<int>(0, i % 50 == 0 ? 2000 : 6)(rng);
        r.push_back(buf(std::uniform_int_distribution<int64_t>(1, 1 << 20)(rng), first, last));
    }
    const MemoryPlan p = plan_ok(r);
    EXPECT_LE(p.lower_bound, p.peak);
    EXPECT_LE(p.peak, p.lower_bound + p.lower_bound / 4);
}

// ---- a real model's shape ---------------------------------------------------------------------

// Builds the buffers of a model one step at a time, as the compiler's scheduler would.
struct ModelBuilder {
    std::vector<BufferRequest> buffers;
    int steps = 0;

    // Adds a graph input of `bytes` (live from the start); returns its index.
    int input(int64_t bytes) {
        buffers.push_back(buf(bytes, -1, -1));
        return static_cast<int>(buffers.size()) - 1;
    }
    // Adds a step reading `inputs` and writing a new buffer of `bytes`, in the storage of
    // `in_place` when >= 0; returns its index.
    int op(std::initializer_list<int> inputs, int64_t bytes, int in_place = -1) {
        for (int i : inputs) buffers[static_cast<size_t>(i)].last = steps;
        buffers.push_back(buf(bytes, steps, steps, in_place));
        ++steps;
        return static_cast<int>(buffers.size()) - 1;
    }
    // Marks buffer `b` a graph output: live to the end.
    void output(int b) { buffers[static_cast<size_t>(b)].last = steps; }
};

TEST(MemoryPlan, SuperResolutionIsWithinFivePercentOfTheBoundAndHalvesNaive) {
    // EDSR-shaped x4 super-resolution of a 320x240 f32 image: a head conv to 64 channels, 8 residual
    // blocks (conv, in-place relu, conv, in-place add of the block input: 16 convs at 64x240x320),
    // a tail conv plus the global skip from the head, an upsampling conv to 48 channels and
    // depth_to_space to the 3x960x1280 output.
    const int64_t image = 3 * 240 * 320 * 4, feature = 64 * 240 * 320 * 4, up = 48 * 240 * 320 * 4;
    ModelBuilder m;
    const int in = m.input(image);
    const int head = m.op({in}, feature);
    int x = head;
    for (int block = 0; block < 8; ++block) {
        const int c1 = m.op({x}, feature);
        const int relu = m.op({c1}, feature, c1);
        const int c2 = m.op({relu}, feature);
        x = m.op({c2, x}, feature, c2);
    }
    const int tail = m.op({x}, feature);
    const int skip = m.op({tail, head}, feature, tail);
    const int upsampled = m.op({skip}, up);
    const int out = m.op({upsampled}, up);
    m.output(out);

    const MemoryPlan p = plan_ok(m.buffers);
    // Widest step: the second conv of a block reads the relu and the block input, writes, and the
    // head waits for the global skip: four feature maps.
    EXPECT_EQ(p.lower_bound, 4 * feature);
    EXPECT_EQ(p.naive, image + 18 * feature + 2 * up);
    EXPECT_LE(p.peak, p.lower_bound + p.lower_bound / 20);
    EXPECT_LE(2 * p.peak, p.naive);
    std::printf("super-resolution plan: peak %lld, lower bound %lld, naive %lld bytes\n",
                static_cast<long long>(p.peak), static_cast<long long>(p.lower_bound),
                static_cast<long long>(p.naive));
}

}  // namespace

}  // namespace test_memory_plan
