#include "clients/control_client.hpp"

#include <fmt/format.h>

#include "common/protocol.hpp"

namespace loom::clients {

Result<std::unique_ptr<ControlClient>> ControlClient::connect(const std::string& endpoint, int timeout_ms) {
    std::unique_ptr<ControlClient> c(new ControlClient());
    c->endpoint_ = endpoint;
    c->timeout_ms_ = timeout_ms;
    LOOM_TRY(c->open());
    return c;
}

Status ControlClient::open() {
    try {
        socket_ = zmq::socket_t(ctx_, zmq::socket_type::req);
        socket_.set(zmq::sockopt::linger, 0);
        socket_.set(zmq::sockopt::sndtimeo, timeout_ms_);
        socket_.set(zmq::sockopt::rcvtimeo, timeout_ms_);
        socket_.connect(endpoint_);
    } catch (const zmq::error_t& e) {
        return make_error(StatusCode::INVALID_ARGUMENT, "control endpoint '{}': {}", endpoint_, e.what());
    }
    return {};
}

Result<nlohmann::json> ControlClient::call(const std::string& cmd, nlohmann::json args) {
    protocol::Request r;
    r.cmd = cmd;
    r.id = next_id_++;
    r.args = std::move(args);
    const std::string request = protocol::encode_request(r);
    zmq::message_t reply;
    try {
        const bool sent = socket_.send(zmq::buffer(request), zmq::send_flags::none).has_value();
        const bool received = sent && socket_.recv(reply, zmq::recv_flags::none).has_value();
        if (!received) {
            LOOM_TRY(open());  // a REQ socket that missed its reply cannot send again
            return make_error(StatusCode::IO_ERROR,
                              "no reply from loomd at {} within {} ms: is it running? (systemctl status loomd, or "
                              "loomd --control {})",
                              endpoint_, timeout_ms_, endpoint_);
        }
    } catch (const zmq::error_t& e) {
        LOOM_TRY(open());
        return make_error(StatusCode::IO_ERROR, "control endpoint '{}': {}", endpoint_, e.what());
    }
    Result<nlohmann::json> result =
        protocol::decode_reply(std::string_view(static_cast<const char*>(reply.data()), reply.size()), r.id);
    // The daemon's own refusals already say "loomd: ..."; say which loomd for everything else.
    if (!result.ok() && result.status().message().rfind("loomd: ", 0) != 0)
        return result.status().with_context(fmt::format("control endpoint '{}'", endpoint_));
    return result;
}

}  // namespace loom::clients
