// loomd serve: the service around the job manager. One device context for the whole daemon;
// the journal replayed before anything is served; the control endpoint (common/protocol.hpp:
// ping, status, device-info, submit, list, cancel, watch); job events on a PUB socket; /metrics,
// /healthz and /readyz over HTTP when configured; systemd's notify protocol (READY, STATUS,
// RELOADING, STOPPING, WATCHDOG) when NOTIFY_SOCKET is set.
//
// Signals (the caller's handlers set the flags): stop drains (running jobs stop at a point they
// resume from) and returns; reload re-reads the configuration file: a valid one replaces the
// settings for new jobs, an invalid one is refused whole and the old settings stay.
#pragma once

#include <atomic>
#include <chrono>
#include <string>

#include "common/status.hpp"
#include "daemon/control.hpp"
#include "daemon/jobs.hpp"
#include "device/faults.hpp"
#include "restore/context.hpp"

namespace loom::daemon {

struct ServeOptions {
    std::string config;           // the configuration file ("" = embedded defaults)
    std::string control;          // overrides the file's control endpoint when set
    std::string device;           // overrides the file's device when set
    device::FaultPlan faults;     // the device's fault plan (--faults, LOOM_FAULTS)
};

struct ServeSignals {
    const std::atomic<bool>* stop = nullptr;
    std::atomic<bool>* reload = nullptr;  // cleared when handled
};

// What the control commands answer from; every pointer outlives the server's handlers.
struct ServiceParts {
    JobManager* jobs = nullptr;
    restore::DeviceContext* context = nullptr;
    EventPublisher* events = nullptr;
    std::string metrics_address;            // as bound; "" = off
    const std::atomic<bool>* ready = nullptr;
    std::chrono::steady_clock::time_point started;
};
// Registers ping, status, device-info, submit, list, cancel and watch on `server`: each
// command's args are read strictly (typed, unknown fields refused by name).
void register_commands(ControlServer& server, const ServiceParts& parts);

// Reads the configuration and self-tests the device (loomd serve --check, systemd's
// ExecStartPre); prints what it found.
Status check_service(const ServeOptions& options);
// Runs the service until `signals.stop`.
Status serve(const ServeOptions& options, const ServeSignals& signals);

}  // namespace loom::daemon
