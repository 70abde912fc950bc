// A client of loomd's control endpoint (common/protocol.hpp): a ZeroMQ REQ socket with send and
// receive timeouts, so a daemon that is not running or not answering is an IO_ERROR naming the
// endpoint, never a hang.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/status.hpp"

namespace loom::clients {

class ControlClient {
public:
    // Connects (lazily: ZeroMQ connects in the background) to `endpoint`.
    static Result<std::unique_ptr<ControlClient>> connect(const std::string& endpoint, int timeout_ms = 2000);

    // Sends `cmd` with `args` and returns the result; the daemon's errors come back with their
    // code. After a timeout the socket is rebuilt, so the client stays usable.
    Result<nlohmann::json> call(const std::string& cmd, nlohmann::json args = nlohmann::json::object());

private:
    ControlClient() = default;
    Status open();
    zmq::context_t ctx_;
    zmq::socket_t socket_;
    std::string endpoint_;
    int timeout_ms_ = 2000;
    int64_t next_id_ = 1;
};

}  // namespace loom::clients
