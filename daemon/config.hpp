// loomd serve's configuration: a TOML file (configs/loomd/loomd.toml documents every field), or
// embedded defaults when there is none. Every mistake is a `file:line:col` error naming the
// field; a file is taken whole or not at all (SIGHUP's reload keeps the old settings when the
// new file is refused).
//
//   [device]   preset = "edge"        device preset or spec file; threads = 0 (one per core)
//   [control]  endpoint = "ipc://..." the control socket (default: LOOM_CONTROL, else
//                                     ipc://$XDG_RUNTIME_DIR/loom-control)
//              events = "ipc://..."   job events (PUB): default the control endpoint + "-events"
//              message_bytes_max      largest request read (4 KiB .. 1 MiB, the default)
//   [paths]    state                  the journal and the jobs' part files (default
//                                     $STATE_DIRECTORY, else $XDG_STATE_HOME/loom, else
//                                     ~/.local/state/loom)
//              pipelines              where pipeline names resolve (default: the shipped ones)
//              models, cache          model folder, compile cache (defaults as loomd run's)
//              allow = ["/srv/video"] the folders jobs may read and write (default: $HOME)
//   [limits]   jobs_running = 1       jobs run at once on the device
//              jobs_queued = 64       jobs waiting; a submit beyond is RESOURCE_EXHAUSTED
//              pixels_per_frame_max   larger input frames are refused at submit
//   [jobs]     segment_seconds = 10   a job is cut into keyframe segments of about this
//              keep_finished = 1000   finished jobs kept in the journal (oldest pruned)
//   [metrics]  address = ""           HOST:PORT of /metrics, /healthz, /readyz ("" = off)
//
// Relative paths in the file are relative to the file's folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"

namespace loom::daemon {

struct DaemonConfig {
    std::string source = "(defaults)";  // the file it came from
    std::string device = "edge";
    unsigned threads = 0;
    std::string control, events;
    int64_t message_bytes_max = int64_t{1} << 20;
    std::string state_dir, pipelines_dir, models_dir, cache_dir;
    std::vector<std::string> allow;
    int64_t jobs_running = 1;
    int64_t jobs_queued = 64;
    int64_t pixels_per_frame_max = int64_t{7680} * 4320;
    double segment_seconds = 10;
    int64_t keep_finished = 1000;
    std::string metrics;

    std::string journal_path() const { return state_dir + "/journal.db"; }
    std::string jobs_dir() const { return state_dir + "/jobs"; }
};

// The embedded defaults (see above), for the current user.
DaemonConfig default_config();
// Reads `path` over the defaults ("" = the defaults alone). `control_override`, when set, wins
// over the file's endpoint (loomd serve --control).
Result<DaemonConfig> load_config(const std::string& path);
// The shipped pipelines: the installed folder when there is one, else the source tree's.
std::string default_pipelines_dir();

}  // namespace loom::daemon
