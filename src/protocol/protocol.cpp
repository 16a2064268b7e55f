#include "src/protocol/protocol.hpp"

#include <cerrno>
#include <stdexcept>
#include <unistd.h>

namespace sandboxer::protocol {

std::string kind_name(DriverError::Kind kind) {
  // The protocol says "backend" where sandboxer says "error"; the other names are the same.
  return kind == DriverError::Kind::error ? "backend" : to_string(kind);
}

DriverError::Kind kind_of(std::string_view name) {
  using Kind = DriverError::Kind;
  for (Kind kind : {Kind::timeout, Kind::auth, Kind::not_found, Kind::unsupported, Kind::conflict,
                    Kind::invalid_spec, Kind::refused}) {
    if (name == to_string(kind)) {
      return kind;
    }
  }
  // "backend", "unavailable" (the backend cannot be reached: exit 4 like any backend failure),
  // and any kind a newer driver may send.
  return Kind::error;
}

nlohmann::json error_object(DriverError::Kind kind, const std::string& message,
                            const std::string& pointer) {
  nlohmann::json data = {{"kind", kind_name(kind)}};
  if (!pointer.empty()) {
    data["pointer"] = pointer;
  }
  return {{"code", k_driver_error}, {"message", message}, {"data", data}};
}

nlohmann::json capabilities_json(const Capabilities& caps) {
  return {{"snapshot", caps.snapshot},
          {"exec", caps.exec},
          {"native_ttl", caps.native_ttl},
          {"list_by_label", caps.list_by_label}};
}

Capabilities capabilities_of(const nlohmann::json& caps) {
  auto flag = [&](const char* key) {
    return caps.is_object() && caps.contains(key) && caps[key].is_boolean() &&
           caps[key].get<bool>();
  };
  Capabilities out;
  out.snapshot = flag("snapshot");
  out.exec = flag("exec");
  out.native_ttl = flag("native_ttl");
  out.list_by_label = flag("list_by_label");
  return out;
}

void LineBuffer::feed(std::string_view bytes) {
  if (m_start > 0 && m_start == m_data.size()) {
    m_data.clear();
    m_start = 0;
  }
  m_data.append(bytes);
  if (m_data.size() - m_start > k_max_line && m_data.find('\n', m_start) == std::string::npos) {
    throw std::length_error("a line longer than 64 MiB");
  }
}

bool LineBuffer::next(std::string& line) {
  size_t end = m_data.find('\n', m_start);
  if (end == std::string::npos) {
    if (m_start > 0) {
      m_data.erase(0, m_start);
      m_start = 0;
    }
    return false;
  }
  line.assign(m_data, m_start, end - m_start);
  if (!line.empty() && line.back() == '\r') {
    line.pop_back();
  }
  m_start = end + 1;
  return true;
}

std::string LineBuffer::rest() {
  std::string out = m_data.substr(m_start);
  m_data.clear();
  m_start = 0;
  return out;
}

bool write_line(int fd, const nlohmann::json& message) {
  std::string text = message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text += '\n';
  std::string_view rest = text;
  while (!rest.empty()) {
    ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

} // namespace sandboxer::protocol
