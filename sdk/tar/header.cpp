#include "sdk/tar/header.hpp"

#include <cstring>

namespace sandboxer::tar {

uint64_t checksum_of(const char* block) {
  uint64_t sum = 0;
  for (size_t i = 0; i < k_block; ++i) {
    bool in_field = i >= k_checksum && i < k_checksum + 8;
    sum += in_field ? ' ' : static_cast<unsigned char>(block[i]);
  }
  return sum;
}

bool checksum_ok(const char* block) {
  auto stored = parse_number(block + k_checksum, 8);
  if (!stored) {
    return false;
  }
  if (*stored == checksum_of(block)) {
    return true;
  }
  int64_t signed_sum = 0;
  for (size_t i = 0; i < k_block; ++i) {
    bool in_field = i >= k_checksum && i < k_checksum + 8;
    signed_sum += in_field ? ' ' : static_cast<signed char>(block[i]);
  }
  return static_cast<int64_t>(*stored) == signed_sum;
}

std::optional<uint64_t> parse_number(const char* field, size_t size) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(field);
  if (bytes[0] & 0x80) {
    if (bytes[0] == 0xff) {
      return std::nullopt; // negative
    }
    uint64_t value = bytes[0] & 0x7f;
    for (size_t i = 1; i < size; ++i) {
      if (value > (UINT64_MAX >> 8)) {
        return std::nullopt;
      }
      value = (value << 8) | bytes[i];
    }
    return value;
  }
  size_t i = 0;
  while (i < size && bytes[i] == ' ') {
    ++i;
  }
  uint64_t value = 0;
  for (; i < size && bytes[i] >= '0' && bytes[i] <= '7'; ++i) {
    if (value > (UINT64_MAX >> 3)) {
      return std::nullopt;
    }
    value = value * 8 + (bytes[i] - '0');
  }
  for (; i < size; ++i) {
    if (bytes[i] != ' ' && bytes[i] != 0) {
      return std::nullopt;
    }
  }
  return value;
}

bool is_posix_ustar(const char* block) {
  return std::memcmp(block + k_magic, "ustar\0", 6) == 0;
}

} // namespace sandboxer::tar
