#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

// The Connect protocol's streaming framing, JSON codec (application/connect+json): every message
// is one flag byte, a 4-byte big-endian length and that many bytes of JSON. The last message of a
// response stream has flag 0x02 and carries the end-of-stream status.
namespace sandboxer::drivers::e2b::connect {

constexpr std::uint8_t k_end_stream = 0x02;

std::string envelope(const nlohmann::json& message, std::uint8_t flags = 0);

// Splits a response body, fed in arbitrary pieces, into messages.
class Decoder {
public:
  using OnMessage = std::function<void(std::uint8_t flags, const nlohmann::json& message)>;
  explicit Decoder(OnMessage on_message) : m_on_message(std::move(on_message)) {}

  // Returns false once the bytes cannot be a Connect stream (an error body sent as plain JSON,
  // say); from then on everything is kept in raw() and nothing is decoded.
  bool feed(std::string_view bytes);
  bool malformed() const { return m_malformed; }
  const std::string& raw() const { return m_buffer; }
  bool ended() const { return m_ended; }

private:
  OnMessage m_on_message;
  std::string m_buffer;
  bool m_malformed = false;
  bool m_ended = false;
};

} // namespace sandboxer::drivers::e2b::connect
