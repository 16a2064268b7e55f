#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include <sandboxer/driver.hpp>
#include <sandboxer/error.hpp>

// The driver protocol, version 1 (docs/driver-protocol.md): what both ends agree on. sandboxer's
// client (core/external/) and the SDK's server (sdk/) share it, so the two cannot drift.
namespace sandboxer::protocol {

inline constexpr int k_version = 1;
// JSON-RPC 2.0's own codes that the protocol uses.
inline constexpr int k_parse_error = -32700;
inline constexpr int k_invalid_request = -32600;
inline constexpr int k_method_not_found = -32601;
inline constexpr int k_invalid_params = -32602;
// Every error of a driver's own: the kind is in `data.kind`.
inline constexpr int k_driver_error = -32000;
// A line longer than this is a broken driver, not a message.
inline constexpr size_t k_max_line = 64u << 20;
// The most raw bytes one chunk of a copy's tar stream carries (an `input` notification of copy_in,
// an `output` of copy_out), before base64: each side holds one chunk and a pipe's worth at most.
inline constexpr size_t k_copy_chunk = 64u << 10;
// The `stream` of copy_out's `output` notifications.
inline constexpr const char* k_copy_stream = "tar";

// The error kinds of the protocol ("not_found", "invalid_spec", "backend", "unavailable",
// "unsupported", and "refused", "timeout", "auth", "conflict") and sandboxer's DriverError kinds.
std::string kind_name(DriverError::Kind kind);
// An unknown name is "backend": a newer driver's kind still fails the call.
DriverError::Kind kind_of(std::string_view name);

// A JSON-RPC error object for `error`: {code, message, data: {kind[, pointer]}}.
nlohmann::json error_object(DriverError::Kind kind, const std::string& message,
                            const std::string& pointer = "");

nlohmann::json capabilities_json(const Capabilities& caps);
Capabilities capabilities_of(const nlohmann::json& caps);

// The optional methods `pause` and `resume` (capability `pause`): the params and results both ends
// write and read. The params lack `spec` and `secrets`, which the client adds to every call.
nlohmann::json pause_params(const SandboxHandle& sandbox, const PauseRequest& request);
PauseRequest pause_request_of(const nlohmann::json& params);
nlohmann::json pause_result_json(const PauseResult& result);
// Throws DriverError (Kind::error) "the driver's pause result: ..." for a result of the wrong
// shape.
PauseResult pause_result_of(const nlohmann::json& result);
// `name` is the sandbox's name: a driver that makes the resource anew names it so again.
nlohmann::json resume_params(const SandboxHandle& sandbox, const ResumeRequest& request,
                             const std::string& name);
ResumeRequest resume_request_of(const nlohmann::json& params);
nlohmann::json resume_result_json(const ResumeResult& result);
// Throws DriverError (Kind::error) "the driver's resume result: ..." for a result of the wrong
// shape: ports, when there, each whole, as a create's.
ResumeResult resume_result_of(const nlohmann::json& result);

// Splits a byte stream into lines: feed() what a read returned, then take whole lines out.
class LineBuffer {
public:
  // Throws std::length_error when a line grows past k_max_line.
  void feed(std::string_view bytes);
  // The next whole line, without its '\n', or false.
  bool next(std::string& line);
  // What is left after the stream ended (a last line without '\n').
  std::string rest();

private:
  // Whether a '\n' lies past what was searched already; remembers how far it searched.
  bool has_newline();

  std::string m_data;
  size_t m_start = 0;   // where the next line begins
  size_t m_scanned = 0; // no '\n' in [m_start, m_scanned)
};

// One line a driver wrote on stdout, read by sandboxer as the answer to request `id`.
struct Message {
  enum class Type {
    ignored,  // an empty line, a notification of no interest, a response to another id
    output,   // an `output` notification of request `id`: `params` holds it
    result,   // the response's `result`, in `value`
    error,    // the response's error: kind, message and pointer filled in
    malformed // not JSON-RPC: `message` says what is wrong
  };
  Type type = Type::ignored;
  nlohmann::json value;
  DriverError::Kind kind = DriverError::Kind::error;
  std::string message;
  std::string pointer;
  // JSON-RPC's -32601 (kind unsupported): told apart from a driver's own `unsupported`, since a
  // driver that declared an optional method and does not have it is refused, not unsupported.
  bool method_not_found = false;
};
// Never throws: a driver may write anything.
Message read_message(std::string_view line, long id);

// The bytes of one chunk of a copy's stream (`params.data`, base64), checked: throws
// std::invalid_argument saying what is wrong (not base64, over k_copy_chunk).
std::string copy_chunk_of(const nlohmann::json& params);
// The `input` notification that carries `bytes` (at most k_copy_chunk) of request `id`'s stream.
nlohmann::json input_chunk(long id, std::string_view bytes);
// The `input` notification that ends request `id`'s stream.
nlohmann::json input_end(long id);

// Writes `message` and a '\n' to `fd` in full (blocking). Returns false when the reader is gone.
bool write_line(int fd, const nlohmann::json& message);

} // namespace sandboxer::protocol
