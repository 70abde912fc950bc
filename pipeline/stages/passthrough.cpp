// passthrough, tee and null_sink: the plumbing stages. passthrough hands every frame on
// (optionally after a fixed delay: a stand-in for a slow stage when testing queue policies);
// tee hands every frame to each stage that takes its output (they share the buffer); null_sink
// waits for each frame to be ready and drops it (timing the stages before it).
//
//   passthrough.delay_ms   wall milliseconds to hold each frame (default 0)
#include <thread>

#include "pipeline/stage.hpp"

namespace loom::pipeline {
namespace {

class PassStage final : public Stage {
public:
    explicit PassStage(double delay_ms = 0) : delay_ms_(delay_ms) {}
    Result<Caps> prepare(const Caps* in, const Env&) override { return *in; }
    Status run(StageRun& run) override {
        while (FrameRef f = run.take()) {
            if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms_));
            if (!run.emit(std::move(f))) break;
        }
        return {};
    }
    double delay_ms_;
};

class NullSink final : public Stage {
public:
    Result<Caps> prepare(const Caps* in, const Env&) override { return *in; }
    Status run(StageRun& run) override {
        while (FrameRef f = run.take()) {
            {
                auto w = run.waiting();
                LOOM_TRY(f->wait_ready().with_context(fmt::format("frame {}", f->meta.index)));
            }
            run.consumed(f.get());
        }
        return {};
    }
};

Result<std::unique_ptr<Stage>> create_passthrough(Fields& f) {
    LOOM_ASSIGN_OR_RETURN(double delay, f.number("delay_ms", 0, 0, 60'000));
    return std::unique_ptr<Stage>(std::make_unique<PassStage>(delay));
}
Result<std::unique_ptr<Stage>> create_tee(Fields&) { return std::unique_ptr<Stage>(std::make_unique<PassStage>()); }
Result<std::unique_ptr<Stage>> create_null_sink(Fields&) {
    return std::unique_ptr<Stage>(std::make_unique<NullSink>());
}

}  // namespace

extern const StageType kStage_passthrough, kStage_tee, kStage_null_sink;
const StageType kStage_passthrough{"passthrough", "hand frames on unchanged (optionally delayed)", false, false, false,
                                   create_passthrough};
const StageType kStage_tee{"tee", "hand every frame to each stage that takes this one's output", false, false, true,
                           create_tee};
const StageType kStage_null_sink{"null_sink", "wait for each frame to be ready and drop it", false, true, false,
                                 create_null_sink};

}  // namespace loom::pipeline
