// The Docker Engine's archive endpoint, which `sandboxer cp` uses natively
// (docs/drivers/docker.md): HEAD for a stat, PUT to unpack a tar stream into a directory, GET for
// the tar stream of a path.
#include <fmt/format.h>

#include <sandboxer/error.hpp>

#include "drivers/docker/engine_api.hpp"

namespace sandboxer::drivers::docker {
namespace {

using nlohmann::json;
using Kind = DriverError::Kind;

// A copy may take as long as its size needs; one that moves no byte for this long is stalled (a
// hung engine, a full disk it never reports) and ends as a timeout.
constexpr std::chrono::seconds k_archive_stall{60};
// The whole of a copy, for the deadline every call has: a day.
constexpr std::chrono::hours k_archive_total{24};
// What is kept of an error answer that arrives where a stream was expected.
constexpr size_t k_archive_error_bytes = 4096;

// Decodes standard base64 (the stat header); nullopt for anything else.
std::optional<std::string> archive_base64_decode(std::string_view text) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    int value;
    if (c >= 'A' && c <= 'Z') {
      value = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      value = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      value = c - '0' + 52;
    } else if (c == '+' || c == '-') {
      value = 62;
    } else if (c == '/' || c == '_') {
      value = 63;
    } else if (c == '=') {
      break;
    } else {
      return std::nullopt;
    }
    bits = (bits << 6) | static_cast<uint32_t>(value);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xff);
    }
  }
  return out;
}

std::string archive_engine_words(const std::string& body) {
  auto answer = json::parse(body, nullptr, false);
  if (answer.is_object() && answer.contains("message") && answer["message"].is_string()) {
    return answer["message"].get<std::string>();
  }
  std::string text = body.substr(0, 200);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  return text;
}

} // namespace

void EngineApi::archive_not_found(const std::string& id, const std::string& path) {
  // The engine answers 404 both for a container that is gone and for a path that is: the
  // container's own inspect tells which.
  if (!inspect_container(id)) {
    throw DriverError(Kind::not_found, fmt::format("docker: container {} is gone", id));
  }
  throw DriverError(Kind::not_found, fmt::format("docker: no such file or directory in container "
                                                 "{}: {}",
                                                 id.substr(0, 12), path));
}

std::optional<json> EngineApi::stat_archive_path(const std::string& id, const std::string& path) {
  http::Request request;
  request.method = "HEAD";
  std::string target =
      fmt::format("/containers/{}/archive?path={}", url_encode(id), url_encode(path));
  request.url = fmt::format("{}/v{}{}", m_endpoint.base_url, k_api_version, target);
  request.unix_socket = m_endpoint.socket_path;
  request.timeout = std::chrono::seconds(60);
  // Not call(): a HEAD's 404 has no body, which call() would take for a server that is not an
  // engine.
  auto response = send(request, "HEAD", target);
  if (response.status == 404) {
    if (!inspect_container(id)) {
      throw DriverError(Kind::not_found, fmt::format("docker: container {} is gone", id));
    }
    return std::nullopt;
  }
  if (response.status != 200) {
    throw DriverError(http::kind_of_status(response.status),
                      fmt::format("docker: cannot stat {} in container {}: HTTP {}", path,
                                  id.substr(0, 12), response.status));
  }
  auto header = response.header("x-docker-container-path-stat");
  auto decoded = header ? archive_base64_decode(*header) : std::nullopt;
  auto stat = decoded ? json::parse(*decoded, nullptr, false) : json();
  if (!stat.is_object() || !stat.contains("mode") || !stat["mode"].is_number_unsigned()) {
    throw DriverError(Kind::error, fmt::format("docker: the engine's stat of {} has no usable "
                                               "X-Docker-Container-Path-Stat header: {}",
                                               path, header.value_or("(none)").substr(0, 100)));
  }
  return stat;
}

void EngineApi::put_archive(const std::string& id, const std::string& directory, bool copy_uid_gid,
                            const std::function<size_t(char*, size_t)>& read) {
  http::Request request;
  request.method = "PUT";
  // noOverwriteDirNonDir: a file never replaces a directory nor a directory a file, as docker cp.
  std::string target =
      fmt::format("/containers/{}/archive?path={}&noOverwriteDirNonDir=true{}", url_encode(id),
                  url_encode(directory), copy_uid_gid ? "&copyUIDGID=1" : "");
  request.url = fmt::format("{}/v{}{}", m_endpoint.base_url, k_api_version, target);
  request.unix_socket = m_endpoint.socket_path;
  request.headers.emplace_back("Content-Type", "application/x-tar");
  request.timeout = k_archive_total;
  request.stall_timeout = k_archive_stall;
  request.body_source = read;
  auto response = send(request, "PUT", target);
  if (response.status == 404) {
    archive_not_found(id, directory);
  }
  if (response.status != 200) {
    // The engine's own words: "Error processing tar file(exit status 1): no space left on
    // device", "extraction point is not a directory".
    throw DriverError(http::kind_of_status(response.status),
                      fmt::format("docker: cannot copy into {} in container {}: {}", directory,
                                  id.substr(0, 12), archive_engine_words(response.body)));
  }
}

void EngineApi::get_archive(const std::string& id, const std::string& path,
                            const std::function<void(std::string_view)>& write) {
  http::Request request;
  std::string target =
      fmt::format("/containers/{}/archive?path={}", url_encode(id), url_encode(path));
  request.url = fmt::format("{}/v{}{}", m_endpoint.base_url, k_api_version, target);
  request.unix_socket = m_endpoint.socket_path;
  request.timeout = k_archive_total;
  request.stall_timeout = k_archive_stall;
  // on_body does not see the status: the first block tells a tar stream (its header has the
  // "ustar" magic at 257) from the engine's JSON error, which is all that is kept of the latter.
  std::string head;
  std::optional<bool> streaming;
  request.on_body = [&](std::string_view chunk) {
    if (streaming) {
      if (*streaming) {
        write(chunk);
      }
      return true;
    }
    head.append(chunk); // under a block and one chunk
    if (head.size() >= 512) {
      streaming = head.compare(257, 5, "ustar") == 0;
      if (*streaming) {
        write(head);
        head.clear();
      } else {
        head.resize(std::min(head.size(), k_archive_error_bytes));
      }
    }
    return true;
  };
  auto response = send(request, "GET", target);
  if (response.status == 404) {
    archive_not_found(id, path);
  }
  if (response.status != 200) {
    throw DriverError(http::kind_of_status(response.status),
                      fmt::format("docker: cannot copy {} out of container {}: {}", path,
                                  id.substr(0, 12), archive_engine_words(head)));
  }
  if (!streaming) {
    // A 200 shorter than one block: the core's tar reader says what is wrong with it.
    write(head);
  } else if (!*streaming) {
    throw DriverError(Kind::error,
                      fmt::format("docker: copying {} out of container {}: the engine's answer is "
                                  "not a tar stream: {}",
                                  path, id.substr(0, 12), head.substr(0, 200)));
  }
}

} // namespace sandboxer::drivers::docker
