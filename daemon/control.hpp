// loomd's control endpoint: a ZeroMQ ROUTER socket speaking common/protocol.hpp. Requests are
// served one at a time on the thread that calls serve(); each command is a handler returning a
// JSON result or an error (a handler that throws fails its request), which goes back to that
// client alone. A malformed message (not JSON, wrong fields, several frames) gets an error
// reply naming the problem, and the server goes on with the next one; a message over
// protocol::kMaxMessageBytes is dropped by ZeroMQ unread (no reply).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/protocol.hpp"
#include "common/status.hpp"

namespace loom::daemon {

class ControlServer {
public:
    using Handler = std::function<Result<nlohmann::json>(const protocol::Request&)>;

    // Binds `endpoint` (ipc://PATH, tcp://HOST:PORT); an ipc path's folder must exist. Fails
    // naming the endpoint when it cannot bind: in use (for ipc: a process accepts connections on
    // the socket file; a stale file is replaced), no such folder, bad form.
    static Result<std::unique_ptr<ControlServer>> bind(const std::string& endpoint);
    ~ControlServer();

    // Registers `cmd`; replaces an earlier handler of that name.
    void on(const std::string& cmd, Handler handler);
    // Serves requests until `stop` becomes true (checked at least every `poll_ms`).
    Status serve(const std::atomic<bool>& stop, int poll_ms = 100);

    // Returns the reply to one request payload, as serve() sends it: a handler's result or an
    // error naming the problem; never throws. Called by serve()'s thread (and the fuzzer).
    std::string handle(std::string_view bytes);

    const std::string& endpoint() const { return endpoint_; }
    // Readable from any thread while serve() runs.
    uint64_t requests_served() const { return served_.load(std::memory_order_relaxed); }
    uint64_t requests_refused() const { return refused_.load(std::memory_order_relaxed); }

private:
    ControlServer() = default;
    zmq::context_t ctx_;
    zmq::socket_t socket_;
    std::string endpoint_;
    std::map<std::string, Handler> handlers_;
    std::atomic<uint64_t> served_{0}, refused_{0};
    uint64_t ipc_inode_ = 0;  // the socket file bound (ipc), removed on exit only if still ours
};

}  // namespace loom::daemon
