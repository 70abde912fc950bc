#include "daemon/control.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "common/log.hpp"

namespace loom::daemon {

namespace {

// The socket file of an ipc:// endpoint, or "" for other transports.
std::string ipc_path(const std::string& endpoint) { return endpoint.rfind("ipc://", 0) == 0 ? endpoint.substr(6) : ""; }

// True when a process accepts connections on the unix socket at `path` (ZeroMQ's bind would
// silently unlink the file and take the endpoint over).
bool ipc_in_use(const std::string& path) {
    sockaddr_un addr{};
    if (path.size() >= sizeof(addr.sun_path)) return false;  // ZeroMQ's bind reports it
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const bool listening = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
    ::close(fd);
    return listening;
}

uint64_t inode_of(const std::string& path);

// An ipc endpoint leaves its socket file behind; removes it so the next start binds cleanly,
// unless another process has bound that path since (then the file is its).
void remove_socket_file(const std::string& endpoint, uint64_t inode) {
    const std::string path = ipc_path(endpoint);
    if (path.empty() || inode == 0 || inode_of(path) != inode) return;
    std::error_code ec;
    std::filesystem::remove(path, ec);
}

uint64_t inode_of(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::bind(const std::string& endpoint, size_t message_bytes_max) {
    std::unique_ptr<ControlServer> s(new ControlServer());
    s->endpoint_ = endpoint;
    const std::string path = ipc_path(endpoint);
    if (!path.empty() && ipc_in_use(path))
        return make_error(StatusCode::FAILED_PRECONDITION,
                          "control endpoint '{}': in use (another loomd is serving it; loomctl --control {} status)",
                          endpoint, endpoint);
    try {
        s->socket_ = zmq::socket_t(s->ctx_, zmq::socket_type::router);
        s->socket_.set(zmq::sockopt::linger, 0);
        // Messages above the limit are dropped by ZeroMQ before they are read into memory.
        s->socket_.set(zmq::sockopt::maxmsgsize,
                       static_cast<int64_t>(std::min(message_bytes_max, protocol::kMaxMessageBytes)) + 1);
        s->socket_.bind(endpoint);
    } catch (const zmq::error_t& e) {
        return make_error(StatusCode::IO_ERROR, "control endpoint '{}': cannot bind: {}", endpoint, e.what());
    }
    if (!path.empty()) s->ipc_inode_ = inode_of(path);
    return s;
}

ControlServer::~ControlServer() {
    if (!socket_) return;
    socket_.close();
    remove_socket_file(endpoint_, ipc_inode_);
}

void ControlServer::on(const std::string& cmd, Handler handler) { handlers_[cmd] = std::move(handler); }

std::string ControlServer::handle(std::string_view bytes) {
    Result<protocol::Request> r = protocol::decode_request(bytes);
    if (!r.ok()) {
        ++refused_;
        log::warn("control", "refused a request: {}", r.status().message());
        return protocol::encode_error(nullptr, r.status(), protocol::request_id(bytes));
    }
    const auto it = handlers_.find(r->cmd);
    if (it == handlers_.end()) {
        ++refused_;
        std::vector<std::string> names;
        for (const auto& [name, h] : handlers_) names.push_back(name);
        return protocol::encode_error(&*r, make_error(StatusCode::INVALID_ARGUMENT, "request: unknown cmd '{}' (one of: {})",
                                                      r->cmd, fmt::join(names, ", ")));
    }
    Result<nlohmann::json> result = make_error(StatusCode::INTERNAL, "not run");
    try {
        result = it->second(*r);
    } catch (const std::exception& e) {  // a handler's bug fails its request, not the daemon
        result = make_error(StatusCode::INTERNAL, "{}: {}", r->cmd, e.what());
    }
    ++served_;
    if (!result.ok()) return protocol::encode_error(&*r, result.status());
    return protocol::encode_result(*r, std::move(*result));
}

Status ControlServer::serve(const std::atomic<bool>& stop, int poll_ms, const std::function<void()>& tick) {
    while (!stop.load(std::memory_order_relaxed)) {
        if (tick) tick();
        zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
        try {
            zmq::poll(&item, 1, std::chrono::milliseconds(poll_ms));
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR) continue;  // a signal: look at `stop` again
            return make_error(StatusCode::IO_ERROR, "control endpoint '{}': poll: {}", endpoint_, e.what());
        }
        if (!(item.revents & ZMQ_POLLIN)) continue;
        // A REQ client sends [identity, empty, payload]; anything longer is refused whole.
        std::vector<zmq::message_t> parts;
        try {
            zmq::message_t part;
            do {
                if (!socket_.recv(part, zmq::recv_flags::dontwait)) break;
                parts.push_back(std::move(part));
            } while (socket_.get(zmq::sockopt::rcvmore));
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR) continue;
            return make_error(StatusCode::IO_ERROR, "control endpoint '{}': receive: {}", endpoint_, e.what());
        }
        if (parts.size() < 2) continue;  // not a REQ envelope: nothing to answer
        std::string reply;
        if (parts.size() != 3 || parts[1].size() != 0) {
            ++refused_;
            reply = protocol::encode_error(
                nullptr, make_error(StatusCode::INVALID_ARGUMENT,
                                    "request: {} frames after the identity; a request is an empty delimiter and one "
                                    "JSON frame (a REQ socket)",
                                    parts.size() - 1));
        } else {
            reply = handle(std::string_view(static_cast<const char*>(parts[2].data()), parts[2].size()));
        }
        try {
            socket_.send(parts[0], zmq::send_flags::sndmore);
            socket_.send(zmq::message_t(), zmq::send_flags::sndmore);
            socket_.send(zmq::buffer(reply), zmq::send_flags::none);
        } catch (const zmq::error_t& e) {
            log::warn("control", "reply not sent: {}", e.what());  // the client went away
        }
    }
    return {};
}

Result<std::unique_ptr<EventPublisher>> EventPublisher::bind(const std::string& endpoint) {
    std::unique_ptr<EventPublisher> p(new EventPublisher());
    p->endpoint_ = endpoint;
    const std::string path = ipc_path(endpoint);
    if (!path.empty() && ipc_in_use(path))
        return make_error(StatusCode::FAILED_PRECONDITION, "events endpoint '{}': in use (another loomd?)", endpoint);
    try {
        p->socket_ = zmq::socket_t(p->ctx_, zmq::socket_type::pub);
        p->socket_.set(zmq::sockopt::linger, 0);
        p->socket_.set(zmq::sockopt::sndhwm, 10000);  // per subscriber; a slow one loses the excess
        p->socket_.bind(endpoint);
    } catch (const zmq::error_t& e) {
        return make_error(StatusCode::IO_ERROR, "events endpoint '{}': cannot bind: {}", endpoint, e.what());
    }
    if (!path.empty()) p->ipc_inode_ = inode_of(path);
    p->thread_ = std::thread([q = p.get()] { q->run(); });
    return p;
}

EventPublisher::~EventPublisher() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
    socket_.close();
    remove_socket_file(endpoint_, ipc_inode_);
}

void EventPublisher::publish(std::string topic, std::string body, bool droppable) {
    {
        std::lock_guard lock(mutex_);
        if (queue_.size() >= kQueueMax) {
            auto it = std::find_if(queue_.begin(), queue_.end(), [](const Event& e) { return e.droppable; });
            if (it == queue_.end()) it = queue_.begin();  // all state changes: the oldest goes
            queue_.erase(it);
            ++dropped_;
        }
        queue_.push_back({std::move(topic), std::move(body), droppable});
    }
    wake_.notify_one();
}

void EventPublisher::run() {
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, everything sent
        Event e = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        try {
            // A PUB socket never blocks: with no subscriber, or one past its high-water mark,
            // the message is dropped.
            socket_.send(zmq::buffer(e.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
            socket_.send(zmq::buffer(e.body), zmq::send_flags::dontwait);
        } catch (const zmq::error_t& err) {
            log::warn("control", "event not published: {}", err.what());
        }
        lock.lock();
    }
}

}  // namespace loom::daemon
