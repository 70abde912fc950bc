// The passthrough stage's body, shared with tee (a passthrough whose output several stages take).
#pragma once

#include "pipeline/stage.hpp"

namespace loom::pipeline {

class PassStage final : public Stage {
public:
    explicit PassStage(double delay_ms = 0) : delay_ms_(delay_ms) {}
    Result<Caps> prepare(const Caps* in, const Env&) override { return *in; }
    Status run(StageRun& run) override;

private:
    double delay_ms_;
};

}  // namespace loom::pipeline
