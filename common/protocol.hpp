// The control protocol between loomd and its clients (loomctl), version 2. Transport: ZeroMQ,
// the daemon's ROUTER socket against a client's REQ; one single-frame JSON message each way.
//
//   request  {"protocol": 2, "cmd": "status", "id": 7, "args": {...}}     id and args optional
//   reply    {"protocol": 2, "id": 7, "ok": true, "cmd": "status", "result": {...}}
//            {"protocol": 2, "id": 7, "ok": false, "error": {"code": "INVALID_ARGUMENT",
//                                                            "message": "..."}}
//
// A malformed request gets an error reply naming the field (or the JSON parse position) and
// nothing else happens; the daemon keeps serving. This file holds the encoding and its checks,
// with no transport, so the daemon, the clients and the tests share one definition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.hpp"

namespace loom::protocol {

inline constexpr int kVersion = 2;
// Larger messages are refused unread (frames will travel separately from the data plane).
inline constexpr size_t kMaxMessageBytes = size_t{1} << 20;

struct Request {
    std::string cmd;
    int64_t id = 0;
    nlohmann::json args = nlohmann::json::object();
};

// The endpoint loomd binds and loomctl connects to by default: $LOOM_CONTROL, else
// ipc://$XDG_RUNTIME_DIR/loom-control, else ipc:///tmp/loom-control-<uid>.
std::string default_endpoint();

// Encodes a request.
std::string encode_request(const Request& r);
// Decodes and checks a request: JSON (numbers in range, nesting at most kJsonDepthMax deep),
// an object, protocol version, "cmd" a non-empty string, "id" an integer, "args" an object;
// errors name the field or the byte. Never throws.
Result<Request> decode_request(std::string_view bytes);

// Encodes a success reply to `r` carrying `result` (invalid UTF-8 replaced by U+FFFD).
std::string encode_result(const Request& r, nlohmann::json result);
// The "id" of a request that may not decode, or 0 when it cannot be read.
int64_t request_id(std::string_view bytes);
// Encodes an error reply (invalid UTF-8 in a quoted cmd or message replaced) to `r`, or, when the request could not be decoded (r null), to `id`.
std::string encode_error(const Request* r, const Status& error, int64_t id = 0);
// Decodes a reply to the request with `id`: its result, or the daemon's error as a Status
// (code kept) prefixed with "loomd: " (an error reply with id 0 is accepted: the daemon could
// not read the id).
Result<nlohmann::json> decode_reply(std::string_view bytes, int64_t id);

}  // namespace loom::protocol
