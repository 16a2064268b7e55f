#include "drivers/vm-packer/agent/wire.hpp"

#include <algorithm>
#include <cstring>

namespace sandboxer::vm_agent {
namespace {

constexpr std::size_t k_max_strings = 4096;

bool known_type(std::uint8_t type) {
  switch (static_cast<FrameType>(type)) {
  case FrameType::hello:
  case FrameType::hello_ack:
  case FrameType::start:
  case FrameType::stdin_data:
  case FrameType::resize:
  case FrameType::signal:
  case FrameType::stdout_data:
  case FrameType::stderr_data:
  case FrameType::exit:
    return true;
  }
  return false;
}

void put_u32(std::string& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((value >> shift) & 0xff));
  }
}

void put_u16(std::string& out, std::uint16_t value) {
  out.push_back(static_cast<char>(value >> 8));
  out.push_back(static_cast<char>(value & 0xff));
}

void put_text(std::string& out, std::string_view text) {
  put_u32(out, static_cast<std::uint32_t>(text.size()));
  out.append(text);
}

// Reads the fields of a payload in order; running past its end is a WireError.
class Fields {
public:
  explicit Fields(std::string_view data) : m_data(data) {}

  std::uint8_t u8() { return static_cast<std::uint8_t>(take(1)[0]); }
  std::uint16_t u16() {
    auto bytes = take(2);
    return static_cast<std::uint16_t>((static_cast<std::uint8_t>(bytes[0]) << 8) |
                                      static_cast<std::uint8_t>(bytes[1]));
  }
  std::uint32_t u32() {
    auto bytes = take(4);
    std::uint32_t value = 0;
    for (char byte : bytes) {
      value = (value << 8) | static_cast<std::uint8_t>(byte);
    }
    return value;
  }
  std::string text() {
    std::uint32_t size = u32();
    return std::string(take(size));
  }
  std::uint32_t count() {
    std::uint32_t n = u32();
    if (n > k_max_strings) {
      throw WireError("too many strings in a frame");
    }
    return n;
  }
  void end() const {
    if (m_offset != m_data.size()) {
      throw WireError("trailing bytes in a frame");
    }
  }

private:
  std::string_view take(std::size_t size) {
    if (size > m_data.size() - m_offset) {
      throw WireError("a frame ends in the middle of a field");
    }
    auto part = m_data.substr(m_offset, size);
    m_offset += size;
    return part;
  }

  std::string_view m_data;
  std::size_t m_offset = 0;
};

} // namespace

std::string encode(const Frame& frame) {
  if (frame.payload.size() > k_max_payload) {
    throw WireError("frame payload over the limit");
  }
  std::string out;
  out.reserve(k_header_size + frame.payload.size());
  put_u32(out, static_cast<std::uint32_t>(5 + frame.payload.size()));
  out.push_back(static_cast<char>(frame.type));
  put_u32(out, frame.channel);
  out.append(frame.payload);
  return out;
}

void FrameReader::feed(std::string_view bytes) {
  if (m_offset > 0 && m_offset == m_buffer.size()) {
    m_buffer.clear();
    m_offset = 0;
  } else if (m_offset > (1u << 16)) {
    m_buffer.erase(0, m_offset);
    m_offset = 0;
  }
  m_buffer.append(bytes);
}

std::optional<Frame> FrameReader::next() {
  if (buffered() < 4) {
    return std::nullopt;
  }
  Fields header(std::string_view(m_buffer).substr(m_offset, 4));
  std::uint32_t body = header.u32();
  if (body < 5 || body - 5 > k_max_payload) {
    throw WireError("bad frame length " + std::to_string(body));
  }
  if (buffered() < 4 + static_cast<std::size_t>(body)) {
    return std::nullopt;
  }
  Fields fields(std::string_view(m_buffer).substr(m_offset + 4, body));
  std::uint8_t type = fields.u8();
  if (!known_type(type)) {
    throw WireError("unknown frame type " + std::to_string(type));
  }
  Frame frame;
  frame.type = static_cast<FrameType>(type);
  frame.channel = fields.u32();
  frame.payload = m_buffer.substr(m_offset + k_header_size, body - 5);
  m_offset += 4 + body;
  return frame;
}

bool FrameReader::skip_to(std::string_view marker) {
  std::string_view rest = std::string_view(m_buffer).substr(m_offset);
  auto at = rest.find(marker);
  if (at != std::string_view::npos) {
    m_offset += at;
    return true;
  }
  std::size_t keep = std::min(rest.size(), marker.empty() ? 0 : marker.size() - 1);
  m_offset = m_buffer.size() - keep;
  return false;
}

std::string encode_start(const StartRequest& request) {
  std::string out;
  out.push_back(static_cast<char>((request.tty ? 1 : 0) | (request.attach_stdin ? 2 : 0)));
  put_u16(out, request.rows);
  put_u16(out, request.cols);
  put_text(out, request.workdir);
  put_u32(out, static_cast<std::uint32_t>(request.argv.size()));
  for (const auto& arg : request.argv) {
    put_text(out, arg);
  }
  put_u32(out, static_cast<std::uint32_t>(request.env.size()));
  for (const auto& [key, value] : request.env) {
    put_text(out, key);
    put_text(out, value);
  }
  return out;
}

StartRequest decode_start(std::string_view payload) {
  Fields fields(payload);
  StartRequest request;
  std::uint8_t flags = fields.u8();
  request.tty = flags & 1;
  request.attach_stdin = flags & 2;
  request.rows = fields.u16();
  request.cols = fields.u16();
  request.workdir = fields.text();
  for (std::uint32_t n = fields.count(); n > 0; --n) {
    request.argv.push_back(fields.text());
  }
  for (std::uint32_t n = fields.count(); n > 0; --n) {
    std::string key = fields.text();
    request.env.emplace_back(std::move(key), fields.text());
  }
  fields.end();
  if (request.argv.empty()) {
    throw WireError("a start request without a command");
  }
  return request;
}

std::string encode_exit(const ExitReport& report) {
  std::string out;
  out.push_back(static_cast<char>(report.kind));
  put_u32(out, static_cast<std::uint32_t>(report.value));
  put_text(out, report.message);
  return out;
}

ExitReport decode_exit(std::string_view payload) {
  Fields fields(payload);
  ExitReport report;
  std::uint8_t kind = fields.u8();
  if (kind > static_cast<std::uint8_t>(ExitReport::Kind::not_startable)) {
    throw WireError("unknown exit kind " + std::to_string(kind));
  }
  report.kind = static_cast<ExitReport::Kind>(kind);
  const std::uint32_t value = fields.u32();
  // An exit status is a byte and a signal number below 128 (the shell's 128+N): a value past
  // either would come back as success (256) or overflow (near 2^31).
  if (report.kind == ExitReport::Kind::exited && value > 255) {
    throw WireError("exit status " + std::to_string(value) + " is outside 0-255");
  }
  if (report.kind == ExitReport::Kind::signaled && (value == 0 || value > 127)) {
    throw WireError("signal number " + std::to_string(value) + " is outside 1-127");
  }
  report.value = static_cast<std::int32_t>(value);
  report.message = fields.text();
  fields.end();
  return report;
}

std::string encode_size(std::uint16_t rows, std::uint16_t cols) {
  std::string out;
  put_u16(out, rows);
  put_u16(out, cols);
  return out;
}

std::pair<std::uint16_t, std::uint16_t> decode_size(std::string_view payload) {
  Fields fields(payload);
  auto rows = fields.u16();
  auto cols = fields.u16();
  fields.end();
  return {rows, cols};
}

} // namespace sandboxer::vm_agent
