// Placement of tasks on an engine's lanes in simulated time. Each lane keeps its busy
// intervals; a task goes to the earliest start >= its ready time at which enough lanes are
// free for its whole duration (so independent work fills gaps, as hardware queues would).
//
// Memory stays bounded however far the work runs ahead of the host clock (prune's horizon): a
// lane keeps at most kLaneIntervalsMax intervals, and beyond that its oldest half is merged
// into one busy interval, so a gap older than the last few hundred tasks on a lane is no longer
// offered to new work. Placement stays a function of the submission order alone.
#pragma once

#include <cstdint>
#include <vector>

#include "device/types.hpp"

namespace loom::device {

inline constexpr size_t kLaneIntervalsMax = 256;

class LaneSet {
public:
    explicit LaneSet(size_t lanes);

    // Places a task needing `count` lanes for `duration` (> 0) at the earliest start >= ready;
    // marks them busy, writes their indices (ascending) to `lanes_out`, returns the start.
    SimTime place(SimTime ready, SimTime duration, size_t count, std::vector<uint16_t>& lanes_out);
    // Forgets intervals that end at or before `horizon`; no task may be ready before it again.
    void prune(SimTime horizon);
    // Returns the busy intervals kept over all lanes.
    size_t intervals() const;

private:
    struct Interval {
        SimTime start, end;
    };
    bool free_at(size_t lane, SimTime t, SimTime end) const;
    std::vector<std::vector<Interval>> lanes_;  // each sorted by start, non-overlapping
    std::vector<SimTime> candidates_;           // scratch, reused across calls
};

}  // namespace loom::device
