#include "compiler/memory_plan.hpp"

#include <algorithm>
#include <bit>
#include <climits>
#include <cstddef>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <queue>
#include <random>
#include <string>
#include <utility>

namespace loom::compiler {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
// Shuffled retries of greedy by size: at most this many rounds, only for plans this small.
constexpr int kShuffleRounds = 32;
constexpr size_t kShuffleBuffersMax = 4096;
constexpr StatusCode kInvalid = StatusCode::INVALID_ARGUMENT;

// The buffers that own storage (requests that alias nothing) in request order; a "slot" indexes them.
struct Roots {
    std::vector<int> slot_of;          // per request: the slot of the root whose storage it uses
    std::vector<int> request;          // per slot: its request index
    std::vector<int64_t> size;         // per slot: bytes rounded up to the alignment
    std::vector<int64_t> first, last;  // per slot: lifetime widened over all its aliases
};

Status check_alignment(int64_t alignment) {
    if (alignment <= 0 || !std::has_single_bit(static_cast<uint64_t>(alignment)))
        return make_error(kInvalid, "alignment {} is not a power of two", alignment);
    return {};
}

// Validates the requests and resolves aliases to their roots; errors name the request index.
Result<Roots> find_roots(std::span<const BufferRequest> requests, int64_t alignment) {
    LOOM_TRY(check_alignment(alignment));
    if (requests.size() > static_cast<size_t>(INT_MAX))
        return make_error(StatusCode::OUT_OF_RANGE, "{} buffers, more than {}", requests.size(), INT_MAX);
    const int n = static_cast<int>(requests.size());
    for (int i = 0; i < n; ++i) {
        const BufferRequest& r = requests[static_cast<size_t>(i)];
        if (r.bytes <= 0) return make_error(kInvalid, "buffer {}: bytes {} is not positive", i, r.bytes);
        if (r.bytes > kInt64Max - (alignment - 1))
            return make_error(kInvalid, "buffer {}: bytes {} overflow int64 when aligned to {}", i, r.bytes, alignment);
        if (r.first > r.last)
            return make_error(kInvalid, "buffer {}: first step {} is after last step {}", i, r.first, r.last);
        if (r.alias_of < -1 || r.alias_of >= n)
            return make_error(kInvalid, "buffer {}: alias_of {} is not -1 or a buffer index (0 to {})", i,
                              r.alias_of, n - 1);
        if (r.alias_of >= 0 && r.bytes > requests[static_cast<size_t>(r.alias_of)].bytes)
            return make_error(kInvalid, "buffer {}: {} bytes do not fit in its alias target, buffer {} ({} bytes)", i,
                              r.bytes, r.alias_of, requests[static_cast<size_t>(r.alias_of)].bytes);
    }
    auto alias_of = [&](int i) { return requests[static_cast<size_t>(i)].alias_of; };

    // root[i]: the root request of i, kUnseen before the walk reaches it, kOnPath while it is on the walk.
    constexpr int kUnseen = -2, kOnPath = -3;
    std::vector<int> root(static_cast<size_t>(n), kUnseen), path;
    for (int i = 0; i < n; ++i) {
        int j = i;
        path.clear();
        while (root[static_cast<size_t>(j)] == kUnseen && alias_of(j) >= 0) {
            root[static_cast<size_t>(j)] = kOnPath;
            path.push_back(j);
            j = alias_of(j);
        }
        if (root[static_cast<size_t>(j)] == kOnPath) {
            std::string cycle = std::to_string(j);
            int k = j;
            do {
                k = alias_of(k);
                cycle += " -> " + std::to_string(k);
            } while (k != j);
            return make_error(kInvalid, "buffer {}: alias cycle {}", j, cycle);
        }
        if (root[static_cast<size_t>(j)] == kUnseen) root[static_cast<size_t>(j)] = j;
        for (int p : path) root[static_cast<size_t>(p)] = root[static_cast<size_t>(j)];
    }

    Roots roots;
    roots.slot_of.assign(static_cast<size_t>(n), -1);
    for (int i = 0; i < n; ++i) {
        if (alias_of(i) >= 0) continue;
        const BufferRequest& r = requests[static_cast<size_t>(i)];
        roots.slot_of[static_cast<size_t>(i)] = static_cast<int>(roots.request.size());
        roots.request.push_back(i);
        roots.size.push_back((r.bytes + alignment - 1) & ~(alignment - 1));
        roots.first.push_back(r.first);
        roots.last.push_back(r.last);
    }
    for (int i = 0; i < n; ++i) {
        if (alias_of(i) < 0) continue;
        const auto s = static_cast<size_t>(roots.slot_of[static_cast<size_t>(root[static_cast<size_t>(i)])]);
        roots.slot_of[static_cast<size_t>(i)] = static_cast<int>(s);
        roots.first[s] = std::min<int64_t>(roots.first[s], requests[static_cast<size_t>(i)].first);
        roots.last[s] = std::max<int64_t>(roots.last[s], requests[static_cast<size_t>(i)].last);
    }
    return roots;
}

// Live-range segments: the sorted distinct points where some root starts (first) or ends (last + 1);
// segment k spans [points[k], points[k + 1]) and the same roots are live throughout it.
struct Segments {
    std::vector<int64_t> points;
    std::vector<int64_t> breadth;  // per segment: summed size of the roots live in it

    // Returns the index of `point`, which must be one of the points.
    size_t index(int64_t point) const {
        return static_cast<size_t>(std::lower_bound(points.begin(), points.end(), point) - points.begin());
    }
};

Segments live_segments(const Roots& roots) {
    Segments seg;
    const size_t m = roots.size.size();
    seg.points.reserve(2 * m);
    for (size_t s = 0; s < m; ++s) {
        seg.points.push_back(roots.first[s]);
        seg.points.push_back(roots.last[s] + 1);  // last is an int widened to int64: cannot overflow
    }
    std::sort(seg.points.begin(), seg.points.end());
    seg.points.erase(std::unique(seg.points.begin(), seg.points.end()), seg.points.end());
    std::vector<int64_t> delta(seg.points.size(), 0);
    for (size_t s = 0; s < m; ++s) {
        delta[seg.index(roots.first[s])] += roots.size[s];
        delta[seg.index(roots.last[s] + 1)] -= roots.size[s];
    }
    seg.breadth.resize(seg.points.empty() ? 0 : seg.points.size() - 1);
    int64_t live = 0;
    for (size_t k = 0; k < seg.breadth.size(); ++k) seg.breadth[k] = live += delta[k];
    return seg;
}

// Greedy by size: largest first; equal sizes in order of first step (a chain then reuses in turn).
std::vector<int> order_by_size(const Roots& roots) {
    std::vector<int> order(roots.size.size());
    for (size_t s = 0; s < order.size(); ++s) order[s] = static_cast<int>(s);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        const auto x = static_cast<size_t>(a), y = static_cast<size_t>(b);
        if (roots.size[x] != roots.size[y]) return roots.size[x] > roots.size[y];
        return roots.first[x] < roots.first[y];
    });
    return order;
}

// Greedy by breadth: visit segments from the widest down and take the roots live in each, largest
// first, that no wider segment took. A root is taken by the best-ranked segment it spans, found with
// a sparse table of range minima over the segment ranks.
std::vector<int> order_by_breadth(const Roots& roots, const Segments& seg) {
    const size_t segs = seg.breadth.size();
    std::vector<int> by_width(segs);
    for (size_t k = 0; k < segs; ++k) by_width[k] = static_cast<int>(k);
    std::stable_sort(by_width.begin(), by_width.end(), [&](int a, int b) {
        return seg.breadth[static_cast<size_t>(a)] > seg.breadth[static_cast<size_t>(b)];
    });
    std::vector<std::vector<int>> min_rank(1, std::vector<int>(segs));  // min_rank[j][k]: over [k, k + 2^j)
    for (size_t r = 0; r < segs; ++r) min_rank[0][static_cast<size_t>(by_width[r])] = static_cast<int>(r);
    for (size_t j = 1; (size_t{1} << j) <= segs; ++j) {
        const size_t half = size_t{1} << (j - 1);
        std::vector<int> level(segs - (size_t{1} << j) + 1);
        for (size_t k = 0; k < level.size(); ++k) level[k] = std::min(min_rank[j - 1][k], min_rank[j - 1][k + half]);
        min_rank.push_back(std::move(level));
    }
    const size_t m = roots.size.size();
    std::vector<int> key(m);
    for (size_t s = 0; s < m; ++s) {
        const size_t lo = seg.index(roots.first[s]), hi = seg.index(roots.last[s] + 1);  // segments [lo, hi)
        const auto j = static_cast<size_t>(std::bit_width(hi - lo) - 1);
        key[s] = std::min(min_rank[j][lo], min_rank[j][hi - (size_t{1} << j)]);
    }
    std::vector<int> order(m);
    for (size_t s = 0; s < m; ++s) order[s] = static_cast<int>(s);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        const auto x = static_cast<size_t>(a), y = static_cast<size_t>(b);
        if (key[x] != key[y]) return key[x] < key[y];
        if (roots.size[x] != roots.size[y]) return roots.size[x] > roots.size[y];
        return roots.first[x] < roots.first[y];
    });
    return order;
}

// Allocation order: by first step, larger first at equal steps (what an online allocator sees).
std::vector<int> order_by_first_use(const Roots& roots) {
    std::vector<int> order(roots.size.size());
    for (size_t s = 0; s < order.size(); ++s) order[s] = static_cast<int>(s);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        const auto x = static_cast<size_t>(a), y = static_cast<size_t>(b);
        if (roots.first[x] != roots.first[y]) return roots.first[x] < roots.first[y];
        return roots.size[x] > roots.size[y];
    });
    return order;
}

enum class Fit { BEST, LOWEST };

struct Placement {
    std::vector<int64_t> offset;  // per slot
    int64_t peak = 0;
};

// Places the roots in `order`, each in a gap among the placed roots whose lifetimes overlap it: the
// smallest gap that holds it (BEST) or the lowest (LOWEST), else above them all. O(n^2).
Placement place(const Roots& roots, const std::vector<int>& order, Fit fit) {
    const size_t m = roots.size.size();
    Placement p;
    p.offset.assign(m, 0);
    std::vector<int> placed;  // slots placed so far, by ascending offset
    placed.reserve(m);
    for (int si : order) {
        const auto s = static_cast<size_t>(si);
        const int64_t size = roots.size[s], first = roots.first[s], last = roots.last[s];
        int64_t end = 0;  // highest end among the overlapping roots seen so far
        int64_t best = -1, best_gap = kInt64Max;
        for (int ti : placed) {
            const auto t = static_cast<size_t>(ti);
            if (roots.first[t] > last || roots.last[t] < first) continue;
            const int64_t gap = p.offset[t] - end;
            if (gap >= size && gap < best_gap) {
                best = end;
                best_gap = gap;
                if (fit == Fit::LOWEST || gap == size) break;
            }
            end = std::max(end, p.offset[t] + roots.size[t]);
        }
        const int64_t offset = best >= 0 ? best : end;
        p.offset[s] = offset;
        p.peak = std::max(p.peak, offset + size);
        const auto at = std::upper_bound(placed.begin(), placed.end(), offset,
                                         [&](int64_t o, int t) { return o < p.offset[static_cast<size_t>(t)]; });
        placed.insert(at, si);
    }
    return p;
}

}  // namespace

Result<MemoryPlan> plan_memory(std::span<const BufferRequest> requests, int64_t alignment) {
    LOOM_ASSIGN_OR_RETURN(const Roots roots, find_roots(requests, alignment));
    MemoryPlan plan;
    for (int64_t size : roots.size)
        if (__builtin_add_overflow(plan.naive, size, &plan.naive))
            return make_error(StatusCode::OUT_OF_RANGE, "buffer sizes sum past {} bytes", kInt64Max);
    const Segments seg = live_segments(roots);
    for (int64_t b : seg.breadth) plan.lower_bound = std::max(plan.lower_bound, b);

    // Best fit by size is the standard; the others run only while the plan is above the bound.
    const std::vector<int> by_size = order_by_size(roots);
    Placement best = place(roots, by_size, Fit::BEST);
    auto try_order = [&](const std::vector<int>& order, Fit fit) {
        if (best.peak == plan.lower_bound) return;
        Placement p = place(roots, order, fit);
        if (p.peak < best.peak) best = std::move(p);
    };
    try_order(by_size, Fit::LOWEST);
    if (best.peak > plan.lower_bound) {
        const std::vector<int> by_breadth = order_by_breadth(roots, seg);
        try_order(by_breadth, Fit::BEST);
        try_order(by_breadth, Fit::LOWEST);
    }
    if (best.peak > plan.lower_bound) {
        // Buffers of similar sizes whose lifetimes chain (an SR network's tail) can defeat both
        // size-driven orders; allocation order with lowest fit packs those.
        const std::vector<int> by_first = order_by_first_use(roots);
        try_order(by_first, Fit::LOWEST);
        try_order(by_first, Fit::BEST);
    }
    // Equal-size buffers (a chain of same-shaped feature maps) can be placed at either of two
    // offsets with equal merit, and which one is chosen decides whether later buffers fit.
    // Reorder within runs of equal size with a fixed seed (deterministic) while it pays.
    if (best.peak > plan.lower_bound && roots.size.size() <= kShuffleBuffersMax) {
        std::mt19937 rng(20261123);
        std::vector<int> order = by_size;
        for (int round = 0; round < kShuffleRounds && best.peak > plan.lower_bound; ++round) {
            for (size_t a = 0; a < order.size();) {
                size_t b = a + 1;
                while (b < order.size() && roots.size[static_cast<size_t>(order[b])] ==
                                               roots.size[static_cast<size_t>(order[a])])
                    ++b;
                std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(a), order.begin() + static_cast<std::ptrdiff_t>(b), rng);
                a = b;
            }
            try_order(order, Fit::BEST);
        }
    }
    plan.peak = best.peak;
    plan.offsets.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i)
        plan.offsets[i] = best.offset[static_cast<size_t>(roots.slot_of[i])];
    const Status check = check_memory_plan(requests, plan, alignment);
    LOOM_ASSERT_MSG(check.ok(), "plan_memory made a bad plan: {}", check.to_string());
    return plan;
}

Status check_memory_plan(std::span<const BufferRequest> requests, const MemoryPlan& plan, int64_t alignment) {
    LOOM_ASSIGN_OR_RETURN(const Roots roots, find_roots(requests, alignment));
    if (plan.offsets.size() != requests.size())
        return make_error(kInvalid, "plan has {} offsets for {} buffers", plan.offsets.size(), requests.size());
    if (plan.peak < 0) return make_error(kInvalid, "plan peak {} is negative", plan.peak);
    for (size_t i = 0; i < requests.size(); ++i) {
        const int64_t offset = plan.offsets[i];
        const int alias_of = requests[i].alias_of;
        if (offset < 0) return make_error(kInvalid, "buffer {}: offset {} is negative", i, offset);
        if ((offset & (alignment - 1)) != 0)
            return make_error(kInvalid, "buffer {}: offset {} is not a multiple of the alignment {}", i, offset,
                              alignment);
        if (alias_of >= 0 && offset != plan.offsets[static_cast<size_t>(alias_of)])
            return make_error(kInvalid, "buffer {}: offset {} differs from that of its alias target, buffer {} at {}",
                              i, offset, alias_of, plan.offsets[static_cast<size_t>(alias_of)]);
        const int64_t size = roots.size[static_cast<size_t>(roots.slot_of[i])];
        if (offset > plan.peak - size)
            return make_error(kInvalid, "buffer {}: offset {} + {} bytes ends past the peak {}", i, offset, size,
                              plan.peak);
    }

    // Sweep the roots by first step, keeping those still live in a map by offset. Their byte ranges
    // are disjoint, so a new root can only collide with its neighbours there.
    const size_t m = roots.size.size();
    std::vector<size_t> by_first(m);
    for (size_t s = 0; s < m; ++s) by_first[s] = s;
    std::stable_sort(by_first.begin(), by_first.end(),
                     [&](size_t a, size_t b) { return roots.first[a] < roots.first[b]; });
    auto offset_of = [&](size_t s) { return plan.offsets[static_cast<size_t>(roots.request[s])]; };
    auto overlap = [&](size_t a, size_t b, int64_t step) {
        if (roots.request[a] > roots.request[b]) std::swap(a, b);
        return make_error(kInvalid, "buffers {} and {} share bytes while both live at step {}: [{}, {}) and [{}, {})",
                          roots.request[a], roots.request[b], step, offset_of(a), offset_of(a) + roots.size[a],
                          offset_of(b), offset_of(b) + roots.size[b]);
    };
    std::map<int64_t, size_t> live;  // offset -> slot
    using Ending = std::pair<int64_t, size_t>;  // (last step, slot)
    std::priority_queue<Ending, std::vector<Ending>, std::greater<>> endings;
    for (size_t s : by_first) {
        const int64_t step = roots.first[s];
        while (!endings.empty() && endings.top().first < step) {
            live.erase(offset_of(endings.top().second));
            endings.pop();
        }
        const int64_t offset = offset_of(s), end = offset + roots.size[s];
        auto next = live.lower_bound(offset);
        if (next != live.end() && next->first < end) return overlap(s, next->second, step);
        if (next != live.begin()) {
            const size_t prev = std::prev(next)->second;
            if (offset_of(prev) + roots.size[prev] > offset) return overlap(s, prev, step);
        }
        live.emplace(offset, s);
        endings.emplace(roots.last[s], s);
    }
    return {};
}

}  // namespace loom::compiler
