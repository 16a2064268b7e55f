#include "drivers/compose-ssh/tar.hpp"

#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <stdexcept>

namespace sandboxer::drivers::compose_ssh {
namespace {

constexpr size_t k_block = 512;

void put_octal(char* field, size_t width, unsigned long long value) {
  // width - 1 digits and a NUL, as tar writes them.
  std::string digits = fmt::format("{:0{}o}", value, width - 1);
  if (digits.size() > width - 1) {
    throw std::invalid_argument("tar: a value does not fit its header field");
  }
  std::memcpy(field, digits.data(), digits.size());
}

// ustar keeps a long path as prefix (155) + '/' + name (100).
void put_path(char* header, const std::string& path) {
  if (path.empty() || path.front() == '/') {
    throw std::invalid_argument("tar: an entry needs a relative path: " + path);
  }
  if (path.size() <= 100) {
    std::memcpy(header, path.data(), path.size());
    return;
  }
  size_t split = path.rfind('/', path.size() - 2);
  while (split != std::string::npos && (split > 155 || path.size() - split - 1 > 100)) {
    split = split == 0 ? std::string::npos : path.rfind('/', split - 1);
  }
  if (split == std::string::npos || split > 155 || path.size() - split - 1 > 100) {
    throw std::invalid_argument("tar: path too long: " + path);
  }
  std::memcpy(header + 345, path.data(), split);
  std::memcpy(header, path.data() + split + 1, path.size() - split - 1);
}

} // namespace

std::string tar_archive(const std::vector<TarEntry>& entries) {
  std::string archive;
  for (const auto& entry : entries) {
    const bool directory = !entry.path.empty() && entry.path.back() == '/';
    char header[k_block] = {};
    put_path(header, entry.path);
    put_octal(header + 100, 8, static_cast<unsigned>(entry.mode) & 07777);
    put_octal(header + 108, 8, 0);
    put_octal(header + 116, 8, 0);
    put_octal(header + 124, 12, directory ? 0 : entry.content.size());
    put_octal(header + 136, 12, static_cast<unsigned long long>(std::time(nullptr)));
    header[156] = directory ? '5' : '0';
    std::memcpy(header + 257, "ustar", 6);
    std::memcpy(header + 263, "00", 2);
    // The checksum is computed with its own field as eight spaces.
    std::memset(header + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : header) {
      sum += c;
    }
    std::string checksum = fmt::format("{:06o}", sum);
    std::memcpy(header + 148, checksum.data(), 6);
    header[154] = '\0';
    header[155] = ' ';
    archive.append(header, k_block);
    if (!directory) {
      archive += entry.content;
      archive.append((k_block - entry.content.size() % k_block) % k_block, '\0');
    }
  }
  archive.append(2 * k_block, '\0');
  return archive;
}

} // namespace sandboxer::drivers::compose_ssh
