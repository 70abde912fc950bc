// null_sink: waits for each frame to be ready and drops it (timing the stages before it).
#include "pipeline/stage.hpp"

namespace loom::pipeline {
namespace {

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

Result<std::unique_ptr<Stage>> create(Fields&) { return std::unique_ptr<Stage>(std::make_unique<NullSink>()); }

}  // namespace

extern const StageType kStage_null_sink;
const StageType kStage_null_sink{"null_sink", "wait for each frame to be ready and drop it", false, true, false, create};

}  // namespace loom::pipeline
