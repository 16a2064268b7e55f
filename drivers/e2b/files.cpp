#include "drivers/e2b/files.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>
#include <spdlog/spdlog.h>

#include <sandboxer/base64.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>

#include "drivers/e2b/api.hpp"

namespace sandboxer::drivers::e2b {
namespace {

using Kind = DriverError::Kind;
using namespace std::chrono_literals;

constexpr std::uint64_t k_slow_link_bytes_per_s = 256 * 1024;
constexpr std::size_t k_error_head = 4096;

http::Request envd_request(const Envd& envd, const std::string& method, const std::string& path) {
  http::Request request;
  request.method = method;
  request.url = envd.base + path;
  request.timeout = envd.request_timeout;
  request.connect_timeout = std::min<std::chrono::milliseconds>(envd.request_timeout, 10s);
  // The same headers as exec's: the proxy routes on E2b-Sandbox-*, envd authenticates the token,
  // and envd versions before `username` take the user from Basic auth.
  request.headers = {{"Authorization", "Basic " + base64_encode(envd.user + ":")},
                     {"E2b-Sandbox-Id", envd.sandbox_id},
                     {"E2b-Sandbox-Port", "49983"},
                     {"User-Agent", "sandboxer"}};
  if (!envd.token.empty()) {
    request.headers.emplace_back("X-Access-Token", envd.token);
  }
  return request;
}

std::string file_query(const Envd& envd, const std::string& path) {
  return "/files?path=" + url_escape(path) + "&username=" + url_escape(envd.user);
}

// "E2B upload /x/y in sandbox i...: not enough disk space available (code 507) (HTTP 507)".
[[noreturn]] void fail_files(const Envd& envd, const http::Response& response,
                             const std::string& what) {
  Kind kind = http::kind_of_status(response.status);
  if (response.status == 507) {
    kind = Kind::error; // the sandbox's disk, not a transient of the service
  }
  throw DriverError(kind, fmt::format("E2B {} in sandbox {}: {} (HTTP {})", what, envd.sandbox_id,
                                      error_text(response), response.status));
}

std::string boundary_for(std::string_view content) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  for (;;) {
    std::string boundary = fmt::format("sandboxer-{:016x}{:016x}", random(), random());
    if (content.find(boundary) == std::string_view::npos) {
      return boundary;
    }
  }
}

bool is_transient_status(long status) {
  return status == 429 || status == 502 || status == 503 || status == 504;
}

// Sends an idempotent envd request, again after a lost connection or a transient status, as Api
// does for the control plane.
http::Response send_retried(const Envd& envd, const http::Request& request,
                            const std::string& what) {
  for (int attempt = 0;; ++attempt) {
    bool last = attempt >= envd.retries;
    try {
      auto response = envd.transport->send(request);
      if (!is_transient_status(response.status) || last) {
        return response;
      }
      spdlog::debug("E2B {}: HTTP {}; retrying", what, response.status);
    } catch (const DriverError& e) {
      if (last || e.kind() == Kind::auth) {
        throw DriverError(e.kind(),
                          fmt::format("E2B {} in sandbox {}: {}", what, envd.sandbox_id, e.what()));
      }
      spdlog::debug("E2B {}: {}; retrying", what, e.what());
    }
    auto wait = std::min<std::chrono::milliseconds>(250ms * (1 << std::min(attempt, 5)), 8s);
    if (envd.sleep) {
      envd.sleep(wait);
    } else {
      interrupt::sleep_for(wait);
    }
  }
}

} // namespace

std::chrono::milliseconds transfer_deadline(const Envd& envd, std::uint64_t bytes) {
  return envd.request_timeout + std::chrono::milliseconds(bytes * 1000 / k_slow_link_bytes_per_s);
}

void upload_file(const Envd& envd, const std::string& path, std::string_view content) {
  // multipart/form-data, which every envd version takes (application/octet-stream is newer). The
  // `path` query names the file; the part's filename is then not used.
  std::string boundary = boundary_for(content);
  auto request = envd_request(envd, "POST", file_query(envd, path));
  request.timeout = transfer_deadline(envd, content.size());
  request.headers.emplace_back("Content-Type", "multipart/form-data; boundary=" + boundary);
  request.body.reserve(content.size() + 256);
  request.body += "--" + boundary + "\r\n";
  request.body += "Content-Disposition: form-data; name=\"file\"; filename=\"file\"\r\n";
  request.body += "Content-Type: application/octet-stream\r\n\r\n";
  request.body += content;
  request.body += "\r\n--" + boundary + "--\r\n";
  std::string what = "upload " + path;
  auto response = send_retried(envd, request, what);
  if (response.status != 200 && response.status != 204) {
    fail_files(envd, response, what);
  }
}

void compose_files(const Envd& envd, const std::vector<std::string>& parts,
                   const std::string& destination) {
  auto request = envd_request(envd, "POST", "/files/compose");
  request.headers.emplace_back("Content-Type", "application/json");
  request.body =
      nlohmann::json{{"source_paths", parts}, {"destination", destination}, {"username", envd.user}}
          .dump();
  std::string what = "compose " + destination;
  auto response = send_retried(envd, request, what);
  if (response.status != 200) {
    fail_files(envd, response, what);
  }
}

void download_file(const Envd& envd, const std::string& path, std::uint64_t expected_size,
                   const std::function<void(std::string_view)>& on_chunk) {
  auto request = envd_request(envd, "GET", file_query(envd, path));
  request.timeout = transfer_deadline(envd, expected_size);
  request.answer_timeout = envd.request_timeout;
  // The status is known only once the transfer ends: the bytes are handed on as they come, and the
  // start of the body is kept for the error message. A failed download throws, so whatever was
  // handed on is never taken for a whole file.
  std::string head;
  std::exception_ptr failure;
  request.on_body = [&](std::string_view bytes) {
    if (head.size() < k_error_head) {
      head.append(bytes.substr(0, k_error_head - head.size()));
    }
    try {
      on_chunk(bytes);
      return true;
    } catch (...) {
      failure = std::current_exception();
      return false;
    }
  };
  std::string what = "download " + path;
  http::Response response;
  try {
    response = envd.transport->send(request);
  } catch (const DriverError& e) {
    throw DriverError(e.kind(),
                      fmt::format("E2B {} in sandbox {}: {}", what, envd.sandbox_id, e.what()));
  }
  if (response.status != 200) {
    response.body = head;
    if (response.status == 404) {
      throw DriverError(Kind::not_found, fmt::format("E2B {} in sandbox {}: {} (HTTP 404)", what,
                                                     envd.sandbox_id, error_text(response)));
    }
    fail_files(envd, response, what);
  }
  if (failure) {
    std::rethrow_exception(failure);
  }
}

} // namespace sandboxer::drivers::e2b
