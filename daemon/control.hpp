// loomd's control endpoint: a ZeroMQ ROUTER socket speaking common/protocol.hpp. Requests are
// served one at a time on the thread that calls serve(); each command is a handler returning a
// JSON result or an error (a handler that throws fails its request), which goes back to that
// client alone. A malformed message (not JSON, wrong fields, several frames) gets an error
// reply naming the problem, and the server goes on with the next one; a message over
// protocol::kMaxMessageBytes is dropped by ZeroMQ unread (no reply).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

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
    // Requests over `message_bytes_max` (at most protocol::kMaxMessageBytes) are dropped unread.
    static Result<std::unique_ptr<ControlServer>> bind(const std::string& endpoint,
                                                       size_t message_bytes_max = protocol::kMaxMessageBytes);
    ~ControlServer();

    // Registers `cmd`; replaces an earlier handler of that name.
    void on(const std::string& cmd, Handler handler);
    // Serves requests until `stop` becomes true (checked at least every `poll_ms`), calling
    // `tick` (when given) on this thread between requests at least that often.
    Status serve(const std::atomic<bool>& stop, int poll_ms = 100, const std::function<void()>& tick = {});

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

// Job events for subscribers (loomctl watch): a ZeroMQ PUB socket beside the control one. Each
// message is two frames, a topic "job.ID." (a SUB socket subscribes to one job by that prefix,
// or to "job." for all) and a JSON object {"event": "state" | "progress", "job": {...}}.
// publish() may be called from any thread; a thread of its own sends. Bounded: when
// subscribers are slower than the jobs, the oldest progress events waiting are dropped (state
// changes never are, up to kQueueMax of them).
class EventPublisher {
public:
    static constexpr size_t kQueueMax = 1024;
    static Result<std::unique_ptr<EventPublisher>> bind(const std::string& endpoint);
    ~EventPublisher();
    void publish(std::string topic, std::string body, bool droppable);
    const std::string& endpoint() const { return endpoint_; }
    uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

private:
    EventPublisher() = default;
    void run();
    struct Event {
        std::string topic, body;
        bool droppable;
    };
    zmq::context_t ctx_;
    zmq::socket_t socket_;
    std::string endpoint_;
    uint64_t ipc_inode_ = 0;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Event> queue_;  // guarded by mutex_
    bool stopping_ = false;    // guarded by mutex_
    std::atomic<uint64_t> dropped_{0};
    std::thread thread_;
};

}  // namespace loom::daemon
