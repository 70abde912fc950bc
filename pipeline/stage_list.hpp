// Every stage type, once: adding a stage is its file in pipeline/stages/ (which defines
// `const StageType kStage<name>`) plus one line here.
#pragma once

#define LOOM_STAGE_LIST(X) \
    X(decode)              \
    X(testsrc)             \
    X(infer)               \
    X(encode)              \
    X(passthrough)         \
    X(tee)                 \
    X(null_sink)
