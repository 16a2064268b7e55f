#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pg/connection.hpp"

// What a command and the machine's connection keeper (keeper.hpp) say to each other over its
// unix socket: a request is one Connection call, a reply its rows or its failure. Frames are a
// 4-byte length and a body of fixed-width integers and length-prefixed strings: a list of 10k
// records crosses it without a parser.
namespace sandboxer::ledger::pg::wire {

// Part of the socket's name (keeper_socket_path()): a binary that speaks another version finds
// another keeper, never this one.
inline constexpr int k_version = 1;
// A frame larger than this is refused as damaged (a reply of 10k records is ~10 MB).
inline constexpr std::uint32_t k_max_frame = 1u << 30;
// A request's limit (the largest, a commit of an import's records, is a few MB): the keeper
// refuses more from a client before reading it.
inline constexpr std::uint32_t k_max_request = 256u << 20;

enum class Call : std::uint8_t { query = 1, script = 2, pipeline = 3, server_version = 4 };

struct Request {
  Call call = Call::query;
  std::chrono::milliseconds timeout{60000};
  std::vector<Connection::Statement> statements; // query, script: exactly one
};

struct Reply {
  std::vector<Rows> results; // one per statement (server_version: its number as one value)
  bool failed = false;
  Failure failure = Failure::statement;
  std::string sqlstate;
  std::string message;
};

// A body that does not decode: a peer of another build, or damage.
class WireError : public std::exception {
public:
  explicit WireError(std::string what) : m_what(std::move(what)) {}
  const char* what() const noexcept override { return m_what.c_str(); }

private:
  std::string m_what;
};

// Frame bodies, without the length prefix (frame() adds it).
std::string encode(const Request& request);
std::string encode(const Reply& reply);
Request decode_request(std::string_view body);
Reply decode_reply(std::string_view body);
std::string frame(std::string body);
// The length a frame's 4-byte prefix announces; throws WireError above k_max_frame.
std::uint32_t frame_length(const char prefix[4]);

} // namespace sandboxer::ledger::pg::wire
