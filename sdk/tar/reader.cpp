#include <algorithm>
#include <charconv>
#include <cstring>
#include <fmt/format.h>
#include <limits>

#include <sandboxer/tar.hpp>

#include "sdk/tar/header.hpp"

namespace sandboxer::tar {
namespace {

// An extension (a pax header, a GNU long name) larger than this is refused: real ones hold a
// path or two, and a hostile stream must not make us hold gigabytes.
constexpr uint64_t k_extension_limit = 1 << 20;

std::string field_text(const char* field, size_t size) {
  return std::string(field, strnlen(field, size));
}

// A decimal value of a pax record ("1700000000.5" keeps its whole seconds).
std::optional<int64_t> pax_number(const std::string& text, bool fraction_allowed) {
  std::string_view whole(text);
  if (fraction_allowed) {
    whole = whole.substr(0, whole.find('.'));
  }
  int64_t value = 0;
  auto [end, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), value);
  if (ec != std::errc() || end != whole.data() + whole.size() || whole.empty()) {
    return std::nullopt;
  }
  return value;
}

} // namespace

Error::Error(uint64_t offset, const std::string& message)
    : std::runtime_error(fmt::format("tar stream, byte {}: {}", offset, message)),
      m_offset(offset) {}

Reader::Reader(Sink& sink) : m_sink(sink) {
  m_block.reserve(k_block);
}

void Reader::fail(const std::string& message) const {
  throw Error(m_offset, message);
}

void Reader::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    switch (m_state) {
    case State::closed:
      // Tools pad an archive to a record (10 KiB) after its end: whatever follows is not read.
      m_offset += bytes.size();
      return;
    case State::header: {
      size_t take = std::min(bytes.size(), k_block - m_block.size());
      m_block.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      m_offset += take;
      if (m_block.size() == k_block) {
        on_header();
        m_block.clear();
      }
      break;
    }
    case State::content: {
      size_t take = static_cast<size_t>(std::min<uint64_t>(bytes.size(), m_remaining));
      if (take > 0) {
        m_sink.data(bytes.substr(0, take));
      }
      bytes.remove_prefix(take);
      m_offset += take;
      m_remaining -= take;
      if (m_remaining == 0) {
        m_sink.end();
        m_state = m_padding > 0 ? State::padding : State::header;
      }
      break;
    }
    case State::extension: {
      size_t take = static_cast<size_t>(std::min<uint64_t>(bytes.size(), m_remaining));
      m_extension.append(bytes.substr(0, take));
      bytes.remove_prefix(take);
      m_offset += take;
      m_remaining -= take;
      if (m_remaining == 0) {
        on_extension_done();
        m_state = m_padding > 0 ? State::padding : State::header;
      }
      break;
    }
    case State::padding: {
      size_t take = static_cast<size_t>(std::min<uint64_t>(bytes.size(), m_padding));
      bytes.remove_prefix(take);
      m_offset += take;
      m_padding -= take;
      if (m_padding == 0) {
        m_state = State::header;
      }
      break;
    }
    }
  }
}

void Reader::finish() {
  if (m_state == State::closed || (m_state == State::header && m_block.empty())) {
    if (m_extension_type != 0) {
      fail("the stream ended after an extended header, before its entry");
    }
    m_state = State::closed;
    return;
  }
  fail(m_state == State::header ? "the stream ended inside a header"
                                : "the stream ended inside an entry's content");
}

void Reader::on_header() {
  const char* block = m_block.data();
  const uint64_t at = m_offset - k_block;
  if (std::all_of(m_block.begin(), m_block.end(), [](char c) { return c == 0; })) {
    if (++m_zero_blocks == 2) {
      m_state = State::closed;
    }
    return;
  }
  if (m_zero_blocks > 0) {
    throw Error(at, "an entry after the end-of-archive block");
  }
  if (!checksum_ok(block)) {
    throw Error(at, "bad header checksum (not a tar stream, or a damaged one)");
  }
  auto number = [&](size_t offset, size_t size, const char* what) {
    auto value = parse_number(block + offset, size);
    if (!value) {
      throw Error(at, fmt::format("bad {} field", what));
    }
    return *value;
  };
  const char type = block[k_type];
  uint64_t size = number(k_size, 12, "size");
  if (!m_pax_size.empty()) {
    auto pax = pax_number(m_pax_size, false);
    if (!pax || *pax < 0) {
      throw Error(at, "bad size in the pax header");
    }
    size = static_cast<uint64_t>(*pax);
  }
  if (size > std::numeric_limits<uint64_t>::max() - k_block) {
    throw Error(at, "entry size out of range");
  }
  m_remaining = size;
  m_padding = (k_block - size % k_block) % k_block;

  if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
    if (size > k_extension_limit) {
      throw Error(
          at, fmt::format("an extended header of {} bytes (at most {})", size, k_extension_limit));
    }
    m_pax_size.clear();
    m_extension_type = type;
    m_extension.clear();
    if (size == 0) {
      on_extension_done();
      m_state = State::header;
    } else {
      m_state = State::extension;
    }
    return;
  }
  if (type == 'S' || type == 'M') {
    throw Error(at, type == 'S' ? "sparse files are not supported"
                                : "multi-volume archives are not supported");
  }

  Entry entry;
  std::string path = field_text(block + k_name, 100);
  if (is_posix_ustar(block)) {
    std::string prefix = field_text(block + k_prefix, 155);
    if (!prefix.empty()) {
      path = prefix + "/" + path;
    }
  }
  if (!m_next_path.empty()) {
    path = std::move(m_next_path);
  }
  entry.link = m_next_link.empty() ? field_text(block + k_link, 100) : std::move(m_next_link);
  m_next_path.clear();
  m_next_link.clear();
  switch (type) {
  case '0':
  case '\0':
  case '7':
    entry.type = Type::file;
    break;
  case '1':
    entry.type = Type::hardlink;
    break;
  case '2':
    entry.type = Type::symlink;
    break;
  case '5':
    entry.type = Type::directory;
    break;
  default:
    entry.type = Type::other;
  }
  // Before ustar a directory was a file whose name ends in '/'.
  if (path.size() > 1 && path.back() == '/' && entry.type == Type::file && size == 0) {
    entry.type = Type::directory;
  }
  while (path.size() > 1 && path.back() == '/') {
    path.pop_back();
  }
  if (path.empty()) {
    throw Error(at, "an entry without a name");
  }
  entry.path = std::move(path);
  entry.mode = static_cast<uint32_t>(number(k_mode, 8, "mode") & 07777);
  entry.uid = static_cast<int64_t>(number(k_uid, 8, "uid"));
  entry.gid = static_cast<int64_t>(number(k_gid, 8, "gid"));
  entry.mtime = static_cast<int64_t>(number(k_mtime, 12, "mtime"));
  auto pax_override = [&](std::string& text, int64_t& into, bool fraction, const char* what) {
    if (!text.empty()) {
      auto value = pax_number(text, fraction);
      if (!value) {
        throw Error(at, fmt::format("bad {} in the pax header", what));
      }
      into = *value;
      text.clear();
    }
  };
  pax_override(m_pax_mtime, entry.mtime, true, "mtime");
  pax_override(m_pax_uid, entry.uid, false, "uid");
  pax_override(m_pax_gid, entry.gid, false, "gid");
  m_extension_type = 0;
  entry.size = (entry.type == Type::file || entry.type == Type::other) ? size : 0;
  m_sink.begin(entry);
  if (size == 0) {
    m_sink.end();
    m_state = State::header;
  } else {
    // A link or a directory that carries content (GNU's dumpdir): the content is skipped.
    m_state = State::content;
    if (entry.size == 0) {
      m_sink.end();
      m_padding += m_remaining;
      m_remaining = 0;
      m_state = m_padding > 0 ? State::padding : State::header;
    }
  }
}

void Reader::on_extension_done() {
  const char type = m_extension_type;
  if (type == 'L' || type == 'K') {
    std::string text = m_extension.substr(0, m_extension.find('\0'));
    (type == 'L' ? m_next_path : m_next_link) = std::move(text);
    m_extension.clear();
    return;
  }
  // pax records: "LEN key=value\n", LEN counting the whole record.
  std::string_view rest(m_extension);
  while (!rest.empty()) {
    size_t space = rest.find(' ');
    uint64_t length = 0;
    auto [end, ec] =
        std::from_chars(rest.data(), rest.data() + std::min(space, rest.size()), length);
    if (space == std::string_view::npos || ec != std::errc() || end != rest.data() + space ||
        length <= space + 1 || length > rest.size() || rest[length - 1] != '\n') {
      fail("a malformed pax record");
    }
    std::string_view record = rest.substr(space + 1, length - space - 2);
    rest.remove_prefix(length);
    size_t equals = record.find('=');
    if (equals == std::string_view::npos) {
      fail("a pax record without '='");
    }
    std::string_view key = record.substr(0, equals);
    std::string value(record.substr(equals + 1));
    if (type == 'g') {
      continue; // global defaults: no tool we read from relies on them
    }
    if (value.find('\0') != std::string::npos) {
      fail(fmt::format("a pax {} holding a NUL byte", key));
    }
    if (key == "path") {
      m_next_path = std::move(value);
    } else if (key == "linkpath") {
      m_next_link = std::move(value);
    } else if (key == "size") {
      m_pax_size = std::move(value);
    } else if (key == "mtime") {
      m_pax_mtime = std::move(value);
    } else if (key == "uid") {
      m_pax_uid = std::move(value);
    } else if (key == "gid") {
      m_pax_gid = std::move(value);
    }
  }
  m_extension.clear();
  if (type == 'g') {
    m_extension_type = 0; // nothing is pending for the next entry
  }
}

} // namespace sandboxer::tar
