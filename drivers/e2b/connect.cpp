#include "drivers/e2b/connect.hpp"

#include <stdexcept>

namespace sandboxer::drivers::e2b::connect {
namespace {

// A message larger than this is a framing error, not output: envd sends output in small chunks.
constexpr std::uint32_t k_max_message = 64u << 20;

} // namespace

std::string envelope(const nlohmann::json& message, std::uint8_t flags) {
  std::string payload = message.dump();
  auto size = static_cast<std::uint32_t>(payload.size());
  std::string out;
  out += static_cast<char>(flags);
  for (int shift = 24; shift >= 0; shift -= 8) {
    out += static_cast<char>((size >> shift) & 0xff);
  }
  return out + payload;
}

bool Decoder::feed(std::string_view bytes) {
  m_buffer.append(bytes);
  if (m_malformed) {
    return false;
  }
  while (m_buffer.size() >= 5) {
    auto flags = static_cast<std::uint8_t>(m_buffer[0]);
    if ((flags & ~std::uint8_t{0x03}) != 0 || (flags & 0x01) != 0) {
      // 0x01 is a compressed message, which we never ask for (no Connect-Accept-Encoding).
      m_malformed = true;
      return false;
    }
    std::uint32_t size = 0;
    for (int i = 1; i <= 4; ++i) {
      size = (size << 8) | static_cast<unsigned char>(m_buffer[i]);
    }
    if (size > k_max_message) {
      m_malformed = true;
      return false;
    }
    if (m_buffer.size() < 5 + size) {
      break;
    }
    auto message = nlohmann::json::parse(m_buffer.substr(5, size), nullptr, false);
    if (message.is_discarded()) {
      m_malformed = true;
      return false;
    }
    m_buffer.erase(0, 5 + size);
    if (flags & k_end_stream) {
      m_ended = true;
    }
    m_on_message(flags, message);
  }
  return true;
}

} // namespace sandboxer::drivers::e2b::connect
