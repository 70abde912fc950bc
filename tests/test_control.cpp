// loomd's control protocol (common/protocol.hpp) and endpoint (daemon/control.hpp) with the
// client (clients/control_client.hpp): commands answered, every kind of bad request refused
// with a message naming the problem while the server keeps serving, and a client facing no
// server times out with an error instead of hanging.
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "clients/control_client.hpp"
#include "common/protocol.hpp"
#include "daemon/control.hpp"
#include "test_util.hpp"

namespace loom {
namespace {

// A fresh folder with a short path for ipc sockets (a unix socket path holds at most 107 bytes,
// which a test-named TempDir can exceed), removed with its contents.
class SocketDir {
public:
    SocketDir() {
        char name[] = "/tmp/loomctl.XXXXXX";
        LOOM_ASSERT(::mkdtemp(name) != nullptr);
        path_ = name;
    }
    ~SocketDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    SocketDir(const SocketDir&) = delete;
    SocketDir& operator=(const SocketDir&) = delete;
    std::string file(const std::string& name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

TEST(Protocol, RequestsRoundTripAndBadOnesNameTheField) {
    protocol::Request r;
    r.cmd = "status";
    r.id = 42;
    r.args = {{"verbose", true}};
    auto back = protocol::decode_request(protocol::encode_request(r));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->cmd, "status");
    EXPECT_EQ(back->id, 42);
    EXPECT_EQ(back->args, r.args);
    auto refused = [](std::string_view text, StatusCode code, std::string_view needle) {
        auto d = protocol::decode_request(text);
        ASSERT_FALSE(d.ok()) << text;
        EXPECT_EQ(d.status().code(), code) << d.status().to_string();
        EXPECT_NE(d.status().message().find(needle), std::string::npos) << d.status().message();
    };
    refused("{\"protocol\": 1, \"cmd\": ", StatusCode::PARSE_ERROR, "not JSON: byte");
    refused("[1, 2]", StatusCode::INVALID_ARGUMENT, "must be a JSON object, got array");
    refused("{\"cmd\": \"ping\"}", StatusCode::INVALID_ARGUMENT, "field 'protocol'");
    refused("{\"protocol\": 2, \"cmd\": \"ping\"}", StatusCode::UNSUPPORTED, "protocol version 2; this loomd speaks version 1");
    refused("{\"protocol\": 1}", StatusCode::INVALID_ARGUMENT, "field 'cmd'");
    refused("{\"protocol\": 1, \"cmd\": 7}", StatusCode::INVALID_ARGUMENT, "field 'cmd'");
    refused("{\"protocol\": 1, \"cmd\": \"ping\", \"id\": \"x\"}", StatusCode::INVALID_ARGUMENT, "field 'id'");
    refused("{\"protocol\": 1, \"cmd\": \"ping\", \"args\": 3}", StatusCode::INVALID_ARGUMENT, "field 'args'");
    refused("{\"protocol\": 1, \"cmd\": \"ping\", \"verbose\": 3}", StatusCode::INVALID_ARGUMENT, "unknown field 'verbose'");
    refused(std::string(protocol::kMaxMessageBytes + 1, ' '), StatusCode::INVALID_ARGUMENT, "the limit is");
}

TEST(Protocol, RepliesCarryResultsOrTheDaemonsErrorWithItsCode) {
    protocol::Request r;
    r.cmd = "status";
    r.id = 3;
    auto ok = protocol::decode_reply(protocol::encode_result(r, {{"a", 1}}), 3);
    ASSERT_TRUE(ok.ok());
    EXPECT_EQ((*ok)["a"], 1);
    auto err = protocol::decode_reply(protocol::encode_error(&r, make_error(StatusCode::NOT_FOUND, "no job 9")), 3);
    ASSERT_FALSE(err.ok());
    EXPECT_EQ(err.status().code(), StatusCode::NOT_FOUND);
    EXPECT_EQ(err.status().message(), "loomd: no job 9");
    EXPECT_FALSE(protocol::decode_reply(protocol::encode_result(r, {}), 4).ok());  // another request's reply
    EXPECT_FALSE(protocol::decode_reply("garbage", 3).ok());
}

// A ControlServer on an ipc endpoint in a temp folder, serving on its own thread.
class ControlTest : public ::testing::Test {
protected:
    void SetUp() override {
        endpoint_ = "ipc://" + dir_.file("control");
        auto s = daemon::ControlServer::bind(endpoint_);
        ASSERT_TRUE(s.ok()) << s.status().to_string();
        server_ = std::move(*s);
        server_->on("ping", [](const protocol::Request&) -> Result<nlohmann::json> { return nlohmann::json{{"pong", true}}; });
        server_->on("echo", [](const protocol::Request& r) -> Result<nlohmann::json> { return r.args; });
        server_->on("fail", [](const protocol::Request&) -> Result<nlohmann::json> {
            return make_error(StatusCode::FAILED_PRECONDITION, "nothing to do");
        });
        server_->on("throw", [](const protocol::Request&) -> Result<nlohmann::json> {
            return nlohmann::json::parse("{broken");  // a handler bug: throws
        });
        thread_ = std::thread([this] { served_ = server_->serve(stop_, 10); });
    }
    void TearDown() override {
        stop_ = true;
        if (thread_.joinable()) thread_.join();
        EXPECT_TRUE(served_.ok()) << served_.to_string();
    }
    // Sends raw frames from a socket of `type` and returns the reply's payload (the last frame).
    std::string raw(zmq::socket_type type, const std::vector<std::string>& frames) {
        zmq::socket_t s(ctx_, type);
        s.set(zmq::sockopt::linger, 0);
        s.set(zmq::sockopt::rcvtimeo, 2000);
        s.connect(endpoint_);
        for (size_t i = 0; i < frames.size(); ++i)
            s.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
        std::string last;
        zmq::message_t m;
        do {
            if (!s.recv(m)) return "(no reply)";
            last = m.to_string();
        } while (s.get(zmq::sockopt::rcvmore));
        return last;
    }
    SocketDir dir_;
    std::string endpoint_;
    std::unique_ptr<daemon::ControlServer> server_;
    std::atomic<bool> stop_{false};
    Status served_;
    std::thread thread_;
    zmq::context_t ctx_;
};

TEST_F(ControlTest, CommandsAreAnsweredAndErrorsKeepTheirCode) {
    auto c = clients::ControlClient::connect(endpoint_);
    ASSERT_TRUE(c.ok());
    auto pong = (*c)->call("ping");
    ASSERT_TRUE(pong.ok()) << pong.status().to_string();
    EXPECT_EQ((*pong)["pong"], true);
    auto echo = (*c)->call("echo", {{"x", 5}});
    ASSERT_TRUE(echo.ok());
    EXPECT_EQ((*echo)["x"], 5);
    auto fail = (*c)->call("fail");
    ASSERT_FALSE(fail.ok());
    EXPECT_EQ(fail.status().code(), StatusCode::FAILED_PRECONDITION);
    auto unknown = (*c)->call("reboot");
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.status().message().find("unknown cmd 'reboot' (one of: echo, fail, ping, throw)"),
              std::string::npos)
        << unknown.status().message();
    // A request the daemon cannot decode still gets its message to the client (its id is echoed).
    auto bad_args = (*c)->call("echo", 5);
    ASSERT_FALSE(bad_args.ok());
    EXPECT_EQ(bad_args.status().message(), "loomd: request: field 'args' must be an object, got number");
    // A handler that throws fails its request only.
    auto thrown = (*c)->call("throw");
    ASSERT_FALSE(thrown.ok());
    EXPECT_EQ(thrown.status().code(), StatusCode::INTERNAL);
    EXPECT_NE(thrown.status().message().find("loomd: throw: "), std::string::npos) << thrown.status().message();
    EXPECT_TRUE((*c)->call("ping").ok());
}

TEST_F(ControlTest, ASecondServerOnTheSameIpcEndpointIsRefusedAndTheFirstKeepsItsSocket) {
    auto second = daemon::ControlServer::bind(endpoint_);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(second.status().message().find("'" + endpoint_ + "': in use"), std::string::npos)
        << second.status().message();
    auto c = clients::ControlClient::connect(endpoint_);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE((*c)->call("ping").ok());
}

TEST(ControlServer, AStaleSocketFileIsReplaced) {
    SocketDir dir;
    const std::string endpoint = "ipc://" + dir.file("control");
    {
        auto first = daemon::ControlServer::bind(endpoint);
        ASSERT_TRUE(first.ok());
    }
    std::ofstream(dir.file("control")) << "";  // a file left by a killed daemon: nobody listens on it
    auto s = daemon::ControlServer::bind(endpoint);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
}

TEST_F(ControlTest, MalformedMessagesAreRefusedAndTheServerGoesOn) {
    EXPECT_NE(raw(zmq::socket_type::req, {"not json"}).find("request is not JSON"), std::string::npos);
    EXPECT_NE(raw(zmq::socket_type::req, {"{\"protocol\": 1}"}).find("field 'cmd'"), std::string::npos);
    EXPECT_NE(raw(zmq::socket_type::req, {"{\"protocol\": 1, \"cmd\": \"ping\"}", "extra"}).find("frames"),
              std::string::npos);
    // A DEALER without the REQ envelope's empty delimiter.
    EXPECT_NE(raw(zmq::socket_type::dealer, {"{\"protocol\": 1, \"cmd\": \"ping\"}"}).find("frames"), std::string::npos);
    // Over the size limit: dropped by ZeroMQ unread (the client times out; nothing is buffered).
    EXPECT_EQ(raw(zmq::socket_type::req, {std::string(protocol::kMaxMessageBytes + 2, 'x')}), "(no reply)");
    auto c = clients::ControlClient::connect(endpoint_);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE((*c)->call("ping").ok());
    EXPECT_GE(server_->requests_refused(), 4u);
}

TEST(ControlClient, NoServerIsATimeoutNamingTheEndpointAndTheClientRecovers) {
    SocketDir dir;
    const std::string endpoint = "ipc://" + dir.file("nobody");
    auto c = clients::ControlClient::connect(endpoint, 100);
    ASSERT_TRUE(c.ok());
    auto r = (*c)->call("ping");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::IO_ERROR);
    EXPECT_NE(r.status().message().find("no reply from loomd at " + endpoint + " within 100 ms"), std::string::npos)
        << r.status().message();
    // The daemon appears later: the same client gets through.
    auto s = daemon::ControlServer::bind(endpoint);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    (*s)->on("ping", [](const protocol::Request&) -> Result<nlohmann::json> { return nlohmann::json{{"pong", true}}; });
    std::atomic<bool> stop{false};
    std::thread t([&] { (void)(*s)->serve(stop, 10); });
    Result<nlohmann::json> pong = make_error(StatusCode::INTERNAL, "not tried");
    for (int i = 0; i < 20 && !pong.ok(); ++i) pong = (*c)->call("ping");
    stop = true;
    t.join();
    EXPECT_TRUE(pong.ok()) << pong.status().to_string();
}

TEST(ControlServer, AnUnreachableOrMalformedEndpointIsRefusedByName) {
    SocketDir dir;
    auto bad = daemon::ControlServer::bind("ipc://" + dir.file("no/such/folder/control"));
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("no/such/folder/control"), std::string::npos) << bad.status().message();
    auto nonsense = daemon::ControlServer::bind("carrier-pigeon://roof");
    ASSERT_FALSE(nonsense.ok());
    EXPECT_NE(nonsense.status().message().find("carrier-pigeon://roof"), std::string::npos);
}

}  // namespace
}  // namespace loom
