#include "common/protocol.hpp"

#include <cstdlib>
#include <unistd.h>

#include <fmt/format.h>

#include "common/json.hpp"

namespace loom::protocol {

namespace {

Result<StatusCode> code_from_name(std::string_view name) {
    for (int c = 0; c <= static_cast<int>(StatusCode::INTERNAL); ++c)
        if (status_code_name(static_cast<StatusCode>(c)) == name) return static_cast<StatusCode>(c);
    return make_error(StatusCode::PARSE_ERROR, "unknown status code '{}'", name);
}

}  // namespace

std::string default_endpoint() {
    if (const char* e = std::getenv("LOOM_CONTROL"); e && *e) return e;
    if (const char* r = std::getenv("XDG_RUNTIME_DIR"); r && *r) return fmt::format("ipc://{}/loom-control", r);
    return fmt::format("ipc:///tmp/loom-control-{}", ::getuid());
}

std::string encode_request(const Request& r) {
    nlohmann::json j = {{"protocol", kVersion}, {"cmd", r.cmd}, {"id", r.id}};
    if (!r.args.empty()) j["args"] = r.args;
    return dump_json(j);
}

Result<Request> decode_request(std::string_view bytes) {
    if (bytes.size() > kMaxMessageBytes)
        return make_error(StatusCode::INVALID_ARGUMENT, "request of {} bytes; the limit is {}", bytes.size(),
                          kMaxMessageBytes);
    LOOM_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json(bytes, "request"));
    if (!j.is_object()) return make_error(StatusCode::INVALID_ARGUMENT, "request must be a JSON object, got {}", j.type_name());
    const auto version = j.find("protocol");
    if (version == j.end() || !version->is_number_integer())
        return make_error(StatusCode::INVALID_ARGUMENT, "request: field 'protocol' must be an integer (this is version {})",
                          kVersion);
    if (version->get<int64_t>() != kVersion)
        return make_error(StatusCode::UNSUPPORTED, "request: protocol version {}; this loomd speaks version {}",
                          version->get<int64_t>(), kVersion);
    Request r;
    const auto cmd = j.find("cmd");
    if (cmd == j.end() || !cmd->is_string() || cmd->get<std::string>().empty())
        return make_error(StatusCode::INVALID_ARGUMENT, "request: field 'cmd' must be a non-empty string");
    r.cmd = cmd->get<std::string>();
    if (const auto id = j.find("id"); id != j.end()) {
        if (!id->is_number_integer())
            return make_error(StatusCode::INVALID_ARGUMENT, "request: field 'id' must be an integer, got {}", id->type_name());
        r.id = id->get<int64_t>();
    }
    if (const auto args = j.find("args"); args != j.end()) {
        if (!args->is_object())
            return make_error(StatusCode::INVALID_ARGUMENT, "request: field 'args' must be an object, got {}",
                              args->type_name());
        r.args = *args;
    }
    for (const auto& [key, value] : j.items())
        if (key != "protocol" && key != "cmd" && key != "id" && key != "args")
            return make_error(StatusCode::INVALID_ARGUMENT, "request: unknown field '{}'", key);
    return r;
}

std::string encode_result(const Request& r, nlohmann::json result) {
    // Replies quote what clients sent (a cmd, a path): invalid UTF-8 is replaced, never thrown.
    return dump_json(
        nlohmann::json{{"protocol", kVersion}, {"id", r.id}, {"ok", true}, {"cmd", r.cmd}, {"result", std::move(result)}});
}

int64_t request_id(std::string_view bytes) {
    if (bytes.size() > kMaxMessageBytes) return 0;
    const Result<nlohmann::json> parsed = parse_json(bytes, "request");
    if (!parsed.ok() || !parsed->is_object()) return 0;
    const nlohmann::json& j = *parsed;
    const auto id = j.find("id");
    return id != j.end() && id->is_number_integer() ? id->get<int64_t>() : 0;
}

std::string encode_error(const Request* r, const Status& error, int64_t id) {
    nlohmann::json j = {{"protocol", kVersion},
                        {"id", r ? r->id : id},
                        {"ok", false},
                        {"error", {{"code", std::string(status_code_name(error.code()))}, {"message", error.message()}}}};
    if (r) j["cmd"] = r->cmd;
    return dump_json(j);
}

Result<nlohmann::json> decode_reply(std::string_view bytes, int64_t id) {
    const Result<nlohmann::json> parsed = parse_json(bytes, "loomd's reply");
    if (!parsed.ok() || !parsed->is_object())
        return make_error(StatusCode::PARSE_ERROR, "loomd replied with something that is not a JSON object");
    const nlohmann::json& j = *parsed;
    try {
        if (json_int(j.at("protocol")) != kVersion)
            return make_error(StatusCode::UNSUPPORTED, "loomd speaks protocol version {}, this client {}",
                              json_int(j.at("protocol")), kVersion);
        const bool ok = j.at("ok").get<bool>();
        const int64_t replied = json_int(j.at("id"));
        // A refusal of a request whose id could not be read carries id 0.
        if (replied != id && (ok || replied != 0))
            return make_error(StatusCode::PARSE_ERROR, "loomd replied to request {}, expected {}", replied, id);
        if (ok) return j.at("result");
        const auto& e = j.at("error");
        LOOM_ASSIGN_OR_RETURN(StatusCode code, code_from_name(e.at("code").get<std::string>()));
        return Status(code, "loomd: " + e.at("message").get<std::string>());
    } catch (const nlohmann::json::exception& e) {
        return make_error(StatusCode::PARSE_ERROR, "loomd's reply is malformed: {}", e.what());
    }
}

}  // namespace loom::protocol
