// loomctl: the command-line client of loomd's control endpoint.
//
//   loomctl [--control ENDPOINT] [--timeout-ms MS] ping|status|device-info [--json]
#include <cstdio>

#include <fmt/format.h>

#include "clients/control_client.hpp"
#include "common/cli.hpp"
#include "common/json.hpp"
#include "common/protocol.hpp"

namespace {

using namespace loom;

void print_status(const nlohmann::json& s) {
    const auto& d = s.at("device");
    std::printf("loomd %s (%s), pid %lld, up %.1f s, on %s\n", s.at("version").get<std::string>().c_str(),
                s.at("build").get<std::string>().c_str(), static_cast<long long>(json_int(s.at("pid"))),
                s.at("uptime_s").get<double>(), s.at("endpoint").get<std::string>().c_str());
    std::printf("  requests  %llu served, %llu refused\n",
                static_cast<unsigned long long>(json_uint(s.at("requests_served"))),
                static_cast<unsigned long long>(json_uint(s.at("requests_refused"))));
    std::printf("  device    %s (%s), spec hash %s\n", d.at("name").get<std::string>().c_str(),
                d.at("description").get<std::string>().c_str(), d.at("spec_hash").get<std::string>().c_str());
    std::printf("  memory    %.1f MiB used, peak %.1f MiB, of %.0f MiB\n",
                static_cast<double>(json_uint(d.at("memory_used"))) / 1048576.0,
                static_cast<double>(json_uint(d.at("memory_peak"))) / 1048576.0,
                static_cast<double>(json_uint(d.at("memory_capacity"))) / 1048576.0);
    std::printf("  tasks     %llu, simulated clock %.3f us\n", static_cast<unsigned long long>(json_uint(d.at("tasks"))),
                d.at("sim_us").get<double>());
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"loomctl: talk to loomd", "loomctl"};
    cli::CommonOptions common;
    cli::add_common_options(app, common);
    std::string endpoint = protocol::default_endpoint();
    int timeout_ms = 2000;
    bool json = false;
    app.add_option("--control", endpoint, "loomd's control endpoint (default: LOOM_CONTROL, else "
                                          "ipc://$XDG_RUNTIME_DIR/loom-control)")
        ->capture_default_str();
    app.add_option("--timeout-ms", timeout_ms, "give up when loomd does not answer within this")
        ->check(CLI::Range(1, 3600000))
        ->capture_default_str();
    app.add_flag("--json", json, "print the daemon's reply as JSON");
    app.require_subcommand(1);
    app.fallthrough();  // the options above also after the command: `loomctl status --json`
    auto* ping = app.add_subcommand("ping", "check that loomd answers");
    auto* status = app.add_subcommand("status", "loomd's version, uptime, requests and device state");
    auto* info = app.add_subcommand("device-info", "the device spec loomd runs");
    return cli::run_main(app, common, argc, argv, [&]() -> Status {
        LOOM_ASSIGN_OR_RETURN(auto client, clients::ControlClient::connect(endpoint, timeout_ms));
        const std::string cmd = *ping ? "ping" : *status ? "status" : "device-info";
        (void)info;
        LOOM_ASSIGN_OR_RETURN(nlohmann::json result, client->call(cmd));
        if (json || cmd == "device-info") {
            std::printf("%s\n", dump_json(result, 2).c_str());
        } else if (cmd == "ping") {
            std::printf("loomd at %s: pong\n", endpoint.c_str());
        } else {
            try {
                print_status(result);
            } catch (const nlohmann::json::exception& e) {
                return make_error(StatusCode::PARSE_ERROR, "control endpoint '{}': malformed status reply: {}", endpoint,
                                  e.what());
            }
        }
        return {};
    });
}
