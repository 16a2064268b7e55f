#include "drivers/e2b/connect.hpp"

#include <stdexcept>

namespace sandboxer::drivers::e2b::connect {
namespace {

constexpr std::string_view k_alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
// A message larger than this is a framing error, not output: envd sends output in small chunks.
constexpr std::uint32_t k_max_message = 64u << 20;

int value_of(char c) {
  if (c == '-') {
    return 62; // the URL-safe alphabet, which protobuf JSON parsers accept too
  }
  if (c == '_') {
    return 63;
  }
  auto at = k_alphabet.find(c);
  return at == std::string_view::npos ? -1 : static_cast<int>(at);
}

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

std::string base64_encode(std::string_view bytes) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    unsigned n = (static_cast<unsigned char>(bytes[i]) << 16) |
                 (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                 static_cast<unsigned char>(bytes[i + 2]);
    for (int shift = 18; shift >= 0; shift -= 6) {
      out += k_alphabet[(n >> shift) & 63];
    }
  }
  if (size_t rest = bytes.size() - i; rest > 0) {
    unsigned n = static_cast<unsigned char>(bytes[i]) << 16;
    if (rest == 2) {
      n |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    }
    out += k_alphabet[(n >> 18) & 63];
    out += k_alphabet[(n >> 12) & 63];
    out += rest == 2 ? k_alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view text) {
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') {
      break;
    }
    int v = value_of(c);
    if (v < 0) {
      throw std::invalid_argument("invalid base64");
    }
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  return out;
}

} // namespace sandboxer::drivers::e2b::connect
