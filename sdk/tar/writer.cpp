#include <cstring>
#include <fmt/format.h>
#include <stdexcept>

#include <sandboxer/tar.hpp>

#include "sdk/tar/header.hpp"

namespace sandboxer::tar {
namespace {

// The largest value an octal field of `size` bytes holds (size - 1 digits and a NUL).
uint64_t octal_limit(size_t size) {
  return (uint64_t{1} << (3 * (size - 1))) - 1;
}

void put_octal(char* field, size_t size, uint64_t value) {
  std::string digits = fmt::format("{:0{}o}", value, size - 1);
  std::memcpy(field, digits.data(), size - 1);
  field[size - 1] = '\0';
}

void put_text(char* field, size_t size, const std::string& text) {
  std::memcpy(field, text.data(), std::min(size, text.size()));
}

// One pax record: its length counts its own digits.
std::string pax_record(const std::string& key, const std::string& value) {
  size_t body = key.size() + value.size() + 3; // ' ', '=', '\n'
  size_t length = body + 1;
  while (std::to_string(length).size() + body != length) {
    length = std::to_string(length).size() + body;
  }
  return fmt::format("{} {}={}\n", length, key, value);
}

// Where a ustar header splits `path` into prefix (155) and name (100), if it can.
std::optional<size_t> ustar_split(const std::string& path) {
  if (path.size() <= 100) {
    return 0;
  }
  for (size_t slash = path.find('/'); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (slash <= 155 && path.size() - slash - 1 <= 100 && slash + 1 < path.size()) {
      return slash;
    }
  }
  return std::nullopt;
}

} // namespace

Writer::Writer(std::function<void(std::string_view)> out) : m_out(std::move(out)) {}

void Writer::emit(std::string_view bytes) {
  m_out(bytes);
  m_written += bytes.size();
}

void Writer::header(const Entry& entry, char type, const std::string& name, const std::string& link,
                    uint64_t size) {
  char block[k_block] = {};
  if (auto split = ustar_split(name); split && *split > 0) {
    put_text(block + k_prefix, 155, name.substr(0, *split));
    put_text(block + k_name, 100, name.substr(*split + 1));
  } else {
    put_text(block + k_name, 100, name);
  }
  put_octal(block + k_mode, 8, entry.mode & 07777);
  put_octal(block + k_uid, 8,
            entry.uid >= 0 && static_cast<uint64_t>(entry.uid) <= octal_limit(8)
                ? static_cast<uint64_t>(entry.uid)
                : 0);
  put_octal(block + k_gid, 8,
            entry.gid >= 0 && static_cast<uint64_t>(entry.gid) <= octal_limit(8)
                ? static_cast<uint64_t>(entry.gid)
                : 0);
  put_octal(block + k_size, 12, size <= octal_limit(12) ? size : 0);
  put_octal(block + k_mtime, 12,
            entry.mtime >= 0 && static_cast<uint64_t>(entry.mtime) <= octal_limit(12)
                ? static_cast<uint64_t>(entry.mtime)
                : 0);
  block[k_type] = type;
  put_text(block + k_link, 100, link);
  std::memcpy(block + k_magic, "ustar\0", 6);
  std::memcpy(block + k_version, "00", 2);
  put_octal(block + k_checksum, 7, checksum_of(block));
  block[k_checksum + 7] = ' ';
  emit(std::string_view(block, k_block));
}

void Writer::begin(const Entry& entry) {
  if (m_open) {
    throw std::logic_error("tar::Writer: begin before the last entry's end");
  }
  if (entry.path.empty() || entry.path.front() == '/') {
    throw std::invalid_argument("tar::Writer: an entry needs a relative path: " + entry.path);
  }
  char type = '0';
  switch (entry.type) {
  case Type::file:
    type = '0';
    break;
  case Type::directory:
    type = '5';
    break;
  case Type::symlink:
    type = '2';
    break;
  case Type::hardlink:
    type = '1';
    break;
  case Type::other:
    throw std::invalid_argument("tar::Writer: only files, directories and links are written");
  }
  const std::string name = entry.type == Type::directory ? entry.path + "/" : entry.path;
  const uint64_t size = entry.type == Type::file ? entry.size : 0;
  // What ustar cannot hold goes in a pax header before the entry.
  std::string pax;
  if (!ustar_split(name)) {
    pax += pax_record("path", name);
  }
  if (entry.link.size() > 100) {
    pax += pax_record("linkpath", entry.link);
  }
  if (size > octal_limit(12)) {
    pax += pax_record("size", std::to_string(size));
  }
  if (entry.mtime < 0 || static_cast<uint64_t>(entry.mtime) > octal_limit(12)) {
    pax += pax_record("mtime", std::to_string(entry.mtime));
  }
  for (auto [key, id] : {std::pair{"uid", entry.uid}, std::pair{"gid", entry.gid}}) {
    if (id < 0 || static_cast<uint64_t>(id) > octal_limit(8)) {
      pax += pax_record(key, std::to_string(id));
    }
  }
  if (!pax.empty()) {
    Entry extension;
    extension.mode = 0644;
    extension.mtime = entry.mtime >= 0 ? entry.mtime : 0;
    std::string short_name = "PaxHeaders/" + name.substr(name.size() > 80 ? name.size() - 80 : 0);
    header(extension, 'x', short_name.substr(0, 100), "", pax.size());
    emit(pax);
    emit(std::string((k_block - pax.size() % k_block) % k_block, '\0'));
  }
  header(entry, type, name, entry.link.size() > 100 ? entry.link.substr(0, 100) : entry.link, size);
  m_size = size;
  m_remaining = size;
  m_open = true;
}

void Writer::data(std::string_view chunk) {
  if (!m_open || chunk.size() > m_remaining) {
    throw std::logic_error("tar::Writer: more content than the entry's size");
  }
  emit(chunk);
  m_remaining -= chunk.size();
}

void Writer::end() {
  if (!m_open || m_remaining != 0) {
    throw std::logic_error(
        fmt::format("tar::Writer: the entry ended {} bytes short of its size", m_remaining));
  }
  emit(std::string((k_block - m_size % k_block) % k_block, '\0'));
  m_open = false;
}

void Writer::finish() {
  if (m_open) {
    throw std::logic_error("tar::Writer: finish inside an entry");
  }
  emit(std::string(2 * k_block, '\0'));
}

} // namespace sandboxer::tar
