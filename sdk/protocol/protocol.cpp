#include "sdk/protocol/protocol.hpp"

#include <algorithm>
#include <cerrno>
#include <fmt/format.h>
#include <stdexcept>
#include <unistd.h>

#include <sandboxer/base64.hpp>
#include <sandboxer/clock.hpp>
#include <sandboxer/ports.hpp>

#include "sdk/json/limits.hpp"

namespace sandboxer::protocol {

std::string kind_name(DriverError::Kind kind) {
  // The protocol says "backend" where sandboxer says "error"; the other names are the same.
  return kind == DriverError::Kind::error ? "backend" : to_string(kind);
}

DriverError::Kind kind_of(std::string_view name) {
  using Kind = DriverError::Kind;
  for (Kind kind : {Kind::timeout, Kind::auth, Kind::not_found, Kind::unsupported, Kind::conflict,
                    Kind::invalid_spec, Kind::refused, Kind::unavailable}) {
    if (name == to_string(kind)) {
      return kind;
    }
  }
  // "backend", and any kind a newer driver may send.
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
  nlohmann::json out = {{"snapshot", caps.snapshot},
                        {"exec", caps.exec},
                        {"native_ttl", caps.native_ttl},
                        {"list_by_label", caps.list_by_label},
                        {"exec_user", caps.exec_user},
                        {"logs", caps.logs},
                        {"copy", caps.copy},
                        {"copy_owner", caps.copy_owner},
                        {"ports", caps.ports}};
  // Only when true: what a driver without them said before stays as it was (`drivers -o json`).
  if (caps.pause) {
    out["pause"] = true;
    if (caps.pause_emulated) {
      out["pause_emulated"] = true;
    }
  }
  return out;
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
  // Optional (added with exec -u): a driver that does not say it honours `user` is never sent one.
  out.exec_user = flag("exec_user");
  out.logs = flag("logs");
  // Optional (added with `sandboxer cp`): stat_path, copy_in and copy_out. Without it the core
  // copies over exec; copy_owner means copy_in honours `owner`.
  out.copy = flag("copy");
  out.copy_owner = out.copy && flag("copy_owner");
  // Optional (added with ports:): create and restore take params.ports and answer result.ports.
  out.ports = flag("ports");
  // Optional (added with `sandboxer pause`): the methods pause and resume; pause_emulated says
  // processes never survive one (the driver keeps the files and makes the sandbox again).
  out.pause = flag("pause");
  out.pause_emulated = out.pause && flag("pause_emulated");
  return out;
}

namespace {

using json = nlohmann::json;

json time_or_null(const std::optional<TimePoint>& t) {
  return t ? json(format_time(*t)) : json(nullptr);
}

std::optional<TimePoint> time_in(const json& params, const char* key) {
  auto it = params.find(key);
  return it != params.end() && it->is_string() ? parse_time(it->get<std::string>()) : std::nullopt;
}

std::string string_in(const json& object, const char* key, const char* otherwise = "") {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : otherwise;
}

[[noreturn]] void bad_result(const char* method, const std::string& why) {
  throw DriverError(DriverError::Kind::error,
                    fmt::format("the driver's {} result: {}", method, why));
}

// `info`, where it may be left out: an object, or absent ({}).
json info_in(const json& result, const char* method) {
  auto it = result.find("info");
  if (it == result.end() || it->is_null()) {
    return json::object();
  }
  if (!it->is_object()) {
    bad_result(method, "\"info\" must be an object");
  }
  return *it;
}

// Port bindings as a create's result.ports holds them, each whole; `where` names the list.
std::vector<PortBinding> bindings_in(const json& list,
                                     const std::function<void(std::string)>& bad) {
  if (!list.is_array()) {
    bad("must be an array");
  }
  std::vector<PortBinding> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& item = list[i];
    if (!item.is_object() || !item.value("port", json()).is_number_integer() ||
        !item.value("host", json()).is_string() || !item.value("url", json()).is_string() ||
        item["host"].get<std::string>().empty() || item["url"].get<std::string>().empty()) {
      bad(fmt::format("[{}] needs port, host and url", i));
    }
    PortBinding binding;
    binding.port = item["port"].get<int>();
    binding.protocol = string_in(item, "protocol", "tcp");
    binding.host = item["host"].get<std::string>();
    if (auto port = item.find("host_port"); port != item.end() && port->is_number_integer()) {
      binding.host_port = port->get<int>();
    }
    binding.url = item["url"].get<std::string>();
    out.push_back(std::move(binding));
  }
  return out;
}

} // namespace

json pause_params(const SandboxHandle& sandbox, const PauseRequest& request) {
  json params = {{"backend_id", sandbox.backend_id},
                 {"pause_id", request.pause_id},
                 {"memory", request.memory ? json(*request.memory) : json(nullptr)},
                 {"keep_until", time_or_null(request.keep_until)},
                 {"info", sandbox.info.is_object() ? sandbox.info : json::object()}};
  if (request.stop_grace) {
    params["grace_seconds"] = request.stop_grace->count(); // only when chosen, as destroy's
  }
  return params;
}

PauseRequest pause_request_of(const json& params) {
  PauseRequest request;
  if (!params.is_object()) {
    return request;
  }
  request.pause_id = string_in(params, "pause_id");
  if (auto memory = params.find("memory"); memory != params.end() && memory->is_boolean()) {
    request.memory = memory->get<bool>();
  }
  if (auto grace = params.find("grace_seconds");
      grace != params.end() && grace->is_number_integer() && grace->get<long long>() >= 0) {
    request.stop_grace = std::chrono::seconds(grace->get<long long>());
  }
  request.keep_until = time_in(params, "keep_until");
  return request;
}

json pause_result_json(const PauseResult& result) {
  return {{"memory_kept", result.memory_kept},
          {"how", result.how},
          {"held_bytes", result.held_bytes ? json(*result.held_bytes) : json(nullptr)},
          {"info", result.info.is_object() ? result.info : json::object()}};
}

PauseResult pause_result_of(const json& result) {
  constexpr const char* method = "pause";
  if (!result.is_object()) {
    bad_result(method, "not an object");
  }
  PauseResult out;
  auto kept = result.find("memory_kept");
  if (kept == result.end() || !kept->is_boolean()) {
    bad_result(method, "\"memory_kept\" must be true or false");
  }
  out.memory_kept = kept->get<bool>();
  auto how = result.find("how");
  if (how == result.end() || !how->is_string() || how->get<std::string>().empty()) {
    bad_result(method, "\"how\" must be a non-empty string (freeze, stop, checkpoint, ...)");
  }
  out.how = how->get<std::string>();
  if (auto held = result.find("held_bytes"); held != result.end() && !held->is_null()) {
    if (!held->is_number_unsigned()) {
      bad_result(method,
                 fmt::format("\"held_bytes\" must be a byte count or null, not {}", held->dump()));
    }
    out.held_bytes = held->get<std::uint64_t>();
  }
  out.info = info_in(result, method);
  return out;
}

json resume_params(const SandboxHandle& sandbox, const ResumeRequest& request,
                   const std::string& name) {
  json params = {{"backend_id", sandbox.backend_id},
                 {"pause_id", request.pause_id},
                 {"id", sandbox.sandbox_id},
                 {"name", name},
                 {"labels", request.labels},
                 {"expires_at", time_or_null(request.expires_at)},
                 {"info", sandbox.info.is_object() ? sandbox.info : json::object()}};
  // Only when there are some, as create's ports.
  if (!request.ports.empty()) {
    params["ports"] = port_specs_json(request.ports);
  }
  if (!request.bindings.empty()) {
    params["bindings"] = port_bindings_json(request.bindings);
  }
  return params;
}

ResumeRequest resume_request_of(const json& params) {
  ResumeRequest request;
  if (!params.is_object()) {
    return request;
  }
  request.pause_id = string_in(params, "pause_id");
  request.expires_at = time_in(params, "expires_at");
  if (auto labels = params.find("labels"); labels != params.end() && labels->is_object()) {
    for (const auto& [key, value] : labels->items()) {
      if (value.is_string()) {
        request.labels[key] = value.get<std::string>();
      }
    }
  }
  if (auto ports = params.find("ports"); ports != params.end() && ports->is_array()) {
    request.ports = port_specs_from_json(*ports);
  }
  if (auto bindings = params.find("bindings"); bindings != params.end()) {
    try {
      request.bindings =
          bindings_in(*bindings, [](const std::string& why) { throw std::invalid_argument(why); });
    } catch (const std::invalid_argument& e) {
      throw DriverError(DriverError::Kind::invalid_spec,
                        fmt::format("resume: \"bindings\" {}", e.what()));
    }
  }
  return request;
}

json resume_result_json(const ResumeResult& result) {
  json out = {{"info", result.info.is_object() ? result.info : json::object()}};
  if (result.backend_id) {
    out["backend_id"] = *result.backend_id;
  }
  if (result.ports) {
    out["ports"] = port_bindings_json(*result.ports);
  }
  return out;
}

ResumeResult resume_result_of(const json& result) {
  constexpr const char* method = "resume";
  if (!result.is_object()) {
    bad_result(method, "not an object");
  }
  ResumeResult out;
  if (auto id = result.find("backend_id"); id != result.end() && !id->is_null()) {
    if (!id->is_string() || id->get<std::string>().empty()) {
      bad_result(method, "\"backend_id\", when there, must be a non-empty string");
    }
    out.backend_id = id->get<std::string>();
  }
  out.info = info_in(result, method);
  if (auto ports = result.find("ports"); ports != result.end() && !ports->is_null()) {
    out.ports = bindings_in(
        *ports, [&](const std::string& why) { bad_result(method, "\"ports\" " + why); });
  }
  return out;
}

void LineBuffer::feed(std::string_view bytes) {
  if (m_start > 0 && m_start == m_data.size()) {
    m_data.clear();
    m_start = 0;
    m_scanned = 0;
  }
  m_data.append(bytes);
  // Only the bytes not searched before are searched: a long line fed in small pieces costs its
  // length once, not once per piece.
  if (m_data.size() - m_start > k_max_line && !has_newline()) {
    throw std::length_error("a line longer than 64 MiB");
  }
}

bool LineBuffer::has_newline() {
  const size_t from = std::max(m_start, m_scanned);
  if (m_data.find('\n', from) != std::string::npos) {
    return true;
  }
  m_scanned = m_data.size();
  return false;
}

bool LineBuffer::next(std::string& line) {
  size_t end = m_data.find('\n', std::max(m_start, m_scanned));
  if (end == std::string::npos) {
    m_scanned = m_data.size();
    if (m_start > 0) {
      m_data.erase(0, m_start);
      m_scanned -= m_start;
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
  m_scanned = 0;
  return out;
}

Message read_message(std::string_view line, long id) {
  using json = nlohmann::json;
  Message out;
  if (line.empty()) {
    return out;
  }
  // A message nested past what the ledger keeps is refused while it is parsed: the value is never
  // built, so nothing later walks a hundred thousand levels.
  struct TooDeep {};
  constexpr int k_max_message_depth = json_limits::k_max_value_depth + 8;
  json message;
  try {
    message = json::parse(
        line,
        [](int depth, json::parse_event_t, json&) {
          if (depth > k_max_message_depth) {
            throw TooDeep{};
          }
          return true;
        },
        false);
  } catch (const TooDeep&) {
    out.type = Message::Type::malformed;
    out.message = fmt::format("a line nested deeper than {} levels", k_max_message_depth);
    return out;
  }
  if (message.is_discarded() || !message.is_object()) {
    out.type = Message::Type::malformed;
    out.message = "a line that is not a JSON object";
    return out;
  }
  if (!message.contains("id") || message["id"].is_null()) {
    const json& params = message.contains("params") ? message["params"] : json();
    const json* method = message.contains("method") ? &message["method"] : nullptr;
    if (method && *method == "output" && params.is_object() && params.contains("id") &&
        params["id"].is_number_integer() && params["id"].get<long>() == id) {
      out.type = Message::Type::output;
      out.value = params;
    }
    return out;
  }
  if (!message["id"].is_number_integer() || message["id"].get<long>() != id) {
    return out;
  }
  if (message.contains("error")) {
    const json& error = message["error"];
    out.type = Message::Type::error;
    out.message = error.is_object() && error.contains("message") && error["message"].is_string()
                      ? error["message"].get<std::string>()
                      : error.dump(-1, ' ', false, json::error_handler_t::replace);
    const json data = error.is_object() && error.contains("data") ? error["data"] : json();
    if (data.is_object() && data.contains("kind") && data["kind"].is_string()) {
      out.kind = kind_of(data["kind"].get<std::string>());
    }
    if (data.is_object() && data.contains("pointer") && data["pointer"].is_string()) {
      out.pointer = data["pointer"].get<std::string>();
    }
    if (error.is_object() && error.contains("code") && error["code"] == k_method_not_found) {
      out.kind = DriverError::Kind::unsupported;
      out.method_not_found = true;
    }
    return out;
  }
  if (!message.contains("result")) {
    out.type = Message::Type::malformed;
    out.message = "a response with neither result nor error";
    return out;
  }
  out.type = Message::Type::result;
  out.value = std::move(message["result"]);
  return out;
}

std::string copy_chunk_of(const nlohmann::json& params) {
  if (!params.is_object() || !params.contains("data") || !params["data"].is_string()) {
    throw std::invalid_argument("a chunk without \"data\"");
  }
  const auto& text = params["data"].get_ref<const std::string&>();
  // Checked before decoding: a chunk over the bound is refused without being made.
  if (text.size() > (k_copy_chunk + 2) / 3 * 4) {
    throw std::invalid_argument(
        fmt::format("a chunk over {} bytes ({} characters of base64)", k_copy_chunk, text.size()));
  }
  std::string bytes;
  try {
    bytes = base64_decode(text);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("a chunk whose data is not base64");
  }
  // Base64's length bounds the bytes to within two of the limit; the rest is told after.
  if (bytes.size() > k_copy_chunk) {
    throw std::invalid_argument(
        fmt::format("a chunk over {} bytes ({} bytes)", k_copy_chunk, bytes.size()));
  }
  return bytes;
}

nlohmann::json input_chunk(long id, std::string_view bytes) {
  return {{"jsonrpc", "2.0"},
          {"method", "input"},
          {"params", {{"id", id}, {"data", base64_encode(bytes)}}}};
}

nlohmann::json input_end(long id) {
  return {{"jsonrpc", "2.0"}, {"method", "input"}, {"params", {{"id", id}, {"eof", true}}}};
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
