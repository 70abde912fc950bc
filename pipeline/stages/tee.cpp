// tee: hands every frame to each stage that takes its output; they share the buffer (a counted
// reference each), so a tee copies nothing.
#include "pipeline/stages/passthrough.hpp"

namespace loom::pipeline {

namespace {
Result<std::unique_ptr<Stage>> create(Fields&) { return std::unique_ptr<Stage>(std::make_unique<PassStage>()); }
}  // namespace

extern const StageType kStage_tee;
const StageType kStage_tee{"tee", "hand every frame to each stage that takes this one's output", false, false, true,
                           create};

}  // namespace loom::pipeline
