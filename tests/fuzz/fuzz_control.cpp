// A control-protocol message both ways: a request through loomd's ControlServer::handle with
// loomd serve's own commands registered (submit, status, list, cancel, watch over a real job
// manager, its journal and allowed folder in the scratch folder) and a reply through the
// client's decode_reply. The server is bound once to an ipc socket in the scratch folder.
#include <cstdlib>
#include <filesystem>

#include "common/json.hpp"
#include "common/protocol.hpp"
#include "daemon/control.hpp"
#include "daemon/service.hpp"
#include "tests/fuzz/fuzz.hpp"

namespace {

loom::daemon::ControlServer& server() {
    using namespace loom;
    static std::unique_ptr<daemon::ControlServer> s = [] {
        const std::string socket = fuzz::scratch_file("control", "");
        auto bound = daemon::ControlServer::bind("ipc://" + socket);
        LOOM_ASSERT_MSG(bound.ok(), "{}", bound.status().to_string());
        auto server = std::move(*bound);
        // The daemon's commands over a job manager of its own: a journal and an allowed folder
        // in the scratch folder, one job at a time.
        const std::string root = std::filesystem::path(socket).parent_path().string() + "/jobs-root";
        static daemon::DaemonConfig config = daemon::default_config();
        config.state_dir = root + "/state";
        config.allow = {root};
        config.control = "ipc://" + socket;
        config.events = "ipc://" + socket + "-events";
        std::filesystem::create_directories(config.state_dir);
        static std::atomic<bool> ready{true};
        auto journal = daemon::Journal::open(config.journal_path());
        LOOM_ASSERT_MSG(journal.ok(), "{}", journal.status().to_string());
        auto context = restore::DeviceContext::create({});
        LOOM_ASSERT_MSG(context.ok(), "{}", context.status().to_string());
        auto events = daemon::EventPublisher::bind(config.events);
        LOOM_ASSERT_MSG(events.ok(), "{}", events.status().to_string());
        static std::shared_ptr<restore::DeviceContext> ctx = *context;
        static std::unique_ptr<daemon::EventPublisher> pub = std::move(*events);
        auto jobs = daemon::JobManager::start(config, ctx, std::move(*journal), {});
        LOOM_ASSERT_MSG(jobs.ok(), "{}", jobs.status().to_string());
        static std::unique_ptr<daemon::JobManager> manager = std::move(*jobs);
        daemon::register_commands(*server, {manager.get(), ctx.get(), pub.get(), "", &ready,
                                            std::chrono::steady_clock::now()});
        // Answers with what it was sent, as a handler quoting a client's path or name would.
        server->on("echo", [](const protocol::Request& r) -> Result<nlohmann::json> { return r.args; });
        server->on("fail", [](const protocol::Request& r) -> Result<nlohmann::json> {
            return make_error(StatusCode::NOT_FOUND, "no such thing: {}", dump_json(r.args));
        });
        return server;
    }();
    return *s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace loom;
    const std::string_view bytes = fuzz::as_text(data, size);
    const std::string reply = server().handle(bytes);
    // The daemon's reply must read back on the client's side: an error reply or a result.
    const Result<nlohmann::json> back = protocol::decode_reply(reply, protocol::request_id(bytes));
    LOOM_ASSERT_MSG(back.ok() || back.status().message().rfind("loomd: ", 0) == 0,
                    "the client cannot read loomd's reply {}: {}", reply, back.status().to_string());
    (void)protocol::decode_reply(bytes, 0);
    return 0;
}
