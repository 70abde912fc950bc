// A control-protocol message both ways: a request through loomd's ControlServer::handle (what
// the daemon answers, handlers like loomd's registered) and a reply through the client's
// decode_reply. The server is bound once to an ipc socket in the scratch folder.
#include <cstdlib>

#include "common/json.hpp"
#include "common/protocol.hpp"
#include "daemon/control.hpp"
#include "tests/fuzz/fuzz.hpp"

namespace {

loom::daemon::ControlServer& server() {
    using namespace loom;
    static std::unique_ptr<daemon::ControlServer> s = [] {
        const std::string socket = fuzz::scratch_file("control", "");
        auto bound = daemon::ControlServer::bind("ipc://" + socket);
        LOOM_ASSERT_MSG(bound.ok(), "{}", bound.status().to_string());
        auto server = std::move(*bound);
        server->on("ping", [](const protocol::Request&) -> Result<nlohmann::json> { return nlohmann::json{{"pong", true}}; });
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
