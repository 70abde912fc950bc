#include "device/timeline.hpp"

#include <algorithm>

#include "common/status.hpp"

namespace loom::device {

LaneSet::LaneSet(size_t lanes) : lanes_(lanes) { LOOM_ASSERT(lanes > 0 && lanes <= 65535); }

bool LaneSet::free_at(size_t lane, SimTime t, SimTime end) const {
    const auto& iv = lanes_[lane];
    // Intervals are disjoint and sorted, so their ends are sorted too: find the first that ends
    // after t; the lane is free iff it starts at or after `end`.
    auto it = std::upper_bound(iv.begin(), iv.end(), t, [](SimTime v, const Interval& i) { return v < i.end; });
    return it == iv.end() || it->start >= end;
}

SimTime LaneSet::place(SimTime ready, SimTime duration, size_t count, std::vector<uint16_t>& lanes_out) {
    LOOM_ASSERT(duration > 0 && count >= 1 && count <= lanes_.size());
    candidates_.clear();
    candidates_.push_back(ready);
    for (const auto& iv : lanes_) {
        auto it = std::upper_bound(iv.begin(), iv.end(), ready, [](SimTime v, const Interval& i) { return v < i.end; });
        for (; it != iv.end(); ++it) candidates_.push_back(it->end);
    }
    std::sort(candidates_.begin(), candidates_.end());
    candidates_.erase(std::unique(candidates_.begin(), candidates_.end()), candidates_.end());
    for (SimTime t : candidates_) {
        lanes_out.clear();
        for (size_t l = 0; l < lanes_.size() && lanes_out.size() < count; ++l)
            if (free_at(l, t, t + duration)) lanes_out.push_back(static_cast<uint16_t>(l));
        if (lanes_out.size() < count) continue;
        for (uint16_t l : lanes_out) {
            auto& iv = lanes_[l];
            auto pos = std::lower_bound(iv.begin(), iv.end(), t, [](const Interval& i, SimTime v) { return i.start < v; });
            iv.insert(pos, Interval{t, t + duration});
            if (iv.size() > kLaneIntervalsMax) {
                // Merge the oldest half (and the gaps between) into one busy interval.
                const size_t half = kLaneIntervalsMax / 2;
                iv[half - 1].start = iv.front().start;
                iv.erase(iv.begin(), iv.begin() + static_cast<std::ptrdiff_t>(half - 1));
            }
        }
        return t;
    }
    // The last candidate is the latest end of any interval, where every lane is free.
    LOOM_ASSERT_MSG(false, "no placement found");
}

void LaneSet::prune(SimTime horizon) {
    for (auto& iv : lanes_) {
        auto it = std::upper_bound(iv.begin(), iv.end(), horizon, [](SimTime v, const Interval& i) { return v < i.end; });
        iv.erase(iv.begin(), it);
    }
}

size_t LaneSet::intervals() const {
    size_t n = 0;
    for (const auto& iv : lanes_) n += iv.size();
    return n;
}

}  // namespace loom::device
