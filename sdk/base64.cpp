#include <stdexcept>

#include <sandboxer/base64.hpp>

namespace sandboxer {
namespace {

constexpr std::string_view k_alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
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

} // namespace sandboxer
