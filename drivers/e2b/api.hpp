#pragma once

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include <sandboxer/http.hpp>

#include "drivers/e2b/spec.hpp"

namespace sandboxer::drivers::e2b {

// How a call may be repeated. A 429 is always retried (the server refused it before doing
// anything); connection failures and 502/503/504 only when repeating cannot do something twice.
enum class Retry { idempotent, once };

// E2B's control-plane API: the key in the X-API-KEY header and nowhere else, per-request
// timeouts, retries with backoff, and error bodies ({code, message}) turned into one line.
class Api {
public:
  using Sleep = std::function<void(std::chrono::milliseconds)>;

  Api(http::Transport& transport, Endpoints endpoints, std::string api_key, const Spec& spec,
      Sleep sleep = {});

  // Sends `method path` (path starts with "/"), retrying as `retry` allows. Returns the last
  // response, whatever its status.
  // `timeout` overrides the spec's request_timeout for calls that take long (snapshots).
  http::Response send(const std::string& method, const std::string& path,
                      const std::optional<nlohmann::json>& body, Retry retry,
                      std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;

  // A response whose status is not one the caller expected, as a DriverError naming `what`:
  // "E2B create sandbox: <message> (HTTP 401, code 401)". A timeout over the plan's cap is
  // Kind::refused.
  [[noreturn]] void fail(const http::Response& response, const std::string& what) const;

  const Endpoints& endpoints() const { return m_endpoints; }
  http::Transport& transport() const { return m_transport; }
  const Sleep& sleeper() const { return m_sleep; }

private:
  http::Transport& m_transport;
  Endpoints m_endpoints;
  std::string m_api_key;
  std::chrono::milliseconds m_timeout;
  int m_retries;
  Sleep m_sleep;
};

// The wait a 429 or 503 asks for: Retry-After (seconds or an HTTP date) or RateLimit-Reset
// (seconds), capped at `cap`; nullopt when the response says nothing.
std::optional<std::chrono::milliseconds> retry_after(const http::Response& response,
                                                     std::chrono::milliseconds cap);

// "message (code N)" from an API error body, or the body's first line when it is not one.
std::string error_text(const http::Response& response);

// Query-string escaping of one key or value (RFC 3986 unreserved characters kept).
std::string url_escape(const std::string& text);

} // namespace sandboxer::drivers::e2b
