#pragma once

// UTF-8 and the byte classes shared by the JSON reader and writer.

#include <cstdint>
#include <cstring>
#include <string>

namespace sandboxer::json_text {

// The length of the valid UTF-8 sequence at `p` (at most `available` bytes), or 0.
inline size_t utf8_sequence_length(const unsigned char* p, size_t available) {
  const unsigned char c = p[0];
  size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    length = 2;
  } else if (c == 0xE0) {
    length = 3;
    low = 0xA0; // no overlong forms
  } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
    length = 3;
  } else if (c == 0xED) {
    length = 3;
    high = 0x9F; // no UTF-16 surrogates
  } else if (c == 0xF0) {
    length = 4;
    low = 0x90;
  } else if (c >= 0xF1 && c <= 0xF3) {
    length = 4;
  } else if (c == 0xF4) {
    length = 4;
    high = 0x8F; // nothing beyond U+10FFFF
  } else {
    return 0;
  }
  if (available < length || p[1] < low || p[1] > high) {
    return 0;
  }
  for (size_t i = 2; i < length; ++i) {
    if ((p[i] & 0xC0) != 0x80) {
      return 0;
    }
  }
  return length;
}

inline void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Bytes a string may hold without escaping or UTF-8 checks: the fast path of both directions.
inline bool is_plain(unsigned char c) {
  return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

// The first byte from `p` on that is not plain, or `end`. Eight bytes at a time, with the
// "has a zero byte" trick applied to each condition: strings are most of a ledger's bytes.
inline const char* skip_plain(const char* p, const char* end) {
  constexpr std::uint64_t k_ones = 0x0101010101010101ULL;
  constexpr std::uint64_t k_highs = 0x8080808080808080ULL;
  while (end - p >= 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, p, sizeof(word));
    const std::uint64_t quote = word ^ (k_ones * '"');
    const std::uint64_t backslash = word ^ (k_ones * '\\');
    const std::uint64_t special = ((quote - k_ones) & ~quote) |
                                  ((backslash - k_ones) & ~backslash) |
                                  ((word - k_ones * 0x20) & ~word) | word;
    if (special & k_highs) {
      break;
    }
    p += sizeof(word);
  }
  while (p < end && is_plain(static_cast<unsigned char>(*p))) {
    ++p;
  }
  return p;
}

} // namespace sandboxer::json_text
