// Fault injection: fail the Nth launch, copy or allocation, or stall an engine, so that error
// paths are exercised on purpose. A plan belongs to the device it is given to (DeviceOptions):
// two devices in one process may have different plans. The programs (loomc, loomd) fill it from
// `--faults` and from LOOM_FAULTS; the library never reads the environment itself.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "device/types.hpp"

namespace loom::device {

struct FaultPlan {
    int64_t fail_launch = 0;  // 1-based index of the kernel launch that faults; 0 = none
    int64_t fail_copy = 0;    // 1-based index of the copy (any direction) that faults
    int64_t fail_alloc = 0;   // 1-based index of the device allocation that fails
    bool stall = false;       // stall_task-th task on stall_engine never finishes
    Engine stall_engine = Engine::AICORE;
    int64_t stall_task = 0;

    bool any() const { return fail_launch || fail_copy || fail_alloc || stall; }
    // Returns the plan in the LOOM_FAULTS syntax.
    std::string to_string() const;
};

// Parses "launch=3,copy=5,alloc=2,stall=aicore:4"; `source` names the origin in errors
// ("LOOM_FAULTS", "--faults"). Later keys override earlier ones and `plan`'s fields.
Status parse_fault_plan(std::string_view text, std::string_view source, FaultPlan& plan);
// Applies the LOOM_FAULTS environment variable, when set, on top of `plan` (for programs: a
// malformed value is an error naming the variable).
Status apply_fault_environment(FaultPlan& plan);

}  // namespace loom::device
