#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sandboxer/error.hpp>

namespace sandboxer::http {

struct Request {
  std::string method = "GET";
  std::string url; // "http://localhost/v1.41/containers/json" for a unix socket
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::chrono::milliseconds timeout{30000};
  std::chrono::milliseconds connect_timeout{10000};
  // When set, the response's headers must arrive within this, though the body may then stream
  // for up to `timeout`: a long-running command's output (docker exec) is bounded by its own
  // deadline, while a server that accepts the request and never answers is not waited for.
  std::optional<std::chrono::milliseconds> answer_timeout;
  std::optional<std::string> unix_socket; // the Docker Engine's socket, for instance
  // When set, the response body is handed over as it arrives instead of being collected; return
  // false to stop the transfer.
  std::function<bool(std::string_view)> on_body;
  // When set, the request body is read from this as it is sent (chunked), never held whole, and
  // `body` is ignored: up to `size` bytes into `buffer`, 0 at its end. An exception it throws ends
  // the transfer and send() rethrows it (as it does one from on_body).
  std::function<size_t(char* buffer, size_t size)> body_source;
  // When set, a transfer that moves no byte either way for this long fails as a timeout: a stalled
  // stream ends then, while one that keeps moving may last up to `timeout`.
  std::optional<std::chrono::seconds> stall_timeout;
};

struct Response {
  long status = 0;
  std::map<std::string, std::string> headers; // names in lowercase
  std::string body;
  std::optional<std::string> header(const std::string& lowercase_name) const;
};

// The one seam between drivers and the network. Tests use a fake that records what it was asked.
class Transport {
public:
  virtual ~Transport() = default;
  // Throws DriverError: timeout on a timeout, error when the connection fails. HTTP error statuses
  // are returned, not thrown: the caller knows what they mean.
  virtual Response send(const Request& request) = 0;
};

// libcurl, with TLS verification on. Thread-safe: each call uses its own easy handle.
Transport& curl_transport();

// The DriverError kind an HTTP status stands for: 401/403 auth, 404 not_found, 409 conflict,
// 408/504 timeout, other 4xx/5xx error.
DriverError::Kind kind_of_status(long status);

// `url` with the values of query parameters and user info that look like credentials replaced by
// "***", for logs.
std::string redacted_url(std::string_view url);

} // namespace sandboxer::http
