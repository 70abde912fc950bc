// passthrough: hands every frame on, optionally after a fixed delay (a stand-in for a slow stage
// when testing queue policies); also the body of tee.
//
//   delay_ms   wall milliseconds to hold each frame (default 0)
#include "pipeline/stages/passthrough.hpp"

#include <thread>

namespace loom::pipeline {

Status PassStage::run(StageRun& run) {
    while (FrameRef f = run.take()) {
        if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms_));
        if (!run.emit(std::move(f))) break;
    }
    return {};
}

namespace {
Result<std::unique_ptr<Stage>> create(Fields& f) {
    LOOM_ASSIGN_OR_RETURN(double delay, f.number("delay_ms", 0, 0, 60'000));
    return std::unique_ptr<Stage>(std::make_unique<PassStage>(delay));
}
}  // namespace

extern const StageType kStage_passthrough;
const StageType kStage_passthrough{"passthrough", "hand frames on unchanged (optionally delayed)", false, false, false,
                                   create};

}  // namespace loom::pipeline
