#include "drivers/e2b/api.hpp"

#include <algorithm>
#include <ctime>
#include <fmt/format.h>
#include <random>
#include <spdlog/spdlog.h>
#include <thread>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>

namespace sandboxer::drivers::e2b {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto k_first_backoff = 250ms;
constexpr auto k_max_backoff = 8s;
constexpr auto k_max_server_wait = 60s;

bool is_transient(long status) {
  return status == 502 || status == 503 || status == 504;
}

std::chrono::milliseconds backoff(int attempt) {
  static thread_local std::mt19937 random{std::random_device{}()};
  auto base = std::min<std::chrono::milliseconds>(k_first_backoff * (1 << std::min(attempt, 6)),
                                                  k_max_backoff);
  // Full jitter keeps many reapers from retrying in lockstep.
  std::uniform_int_distribution<long> jitter(base.count() / 2, base.count());
  return std::chrono::milliseconds(jitter(random));
}

// Seconds, or an IMF-fixdate ("Wed, 21 Oct 2015 07:28:00 GMT") as Retry-After allows.
std::optional<std::chrono::milliseconds> parse_wait(const std::string& text) {
  if (!text.empty() && std::all_of(text.begin(), text.end(), ::isdigit)) {
    return std::chrono::seconds(std::stoll(text.substr(0, 9)));
  }
  std::tm tm{};
  if (strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm) != nullptr) {
    auto at = std::chrono::system_clock::from_time_t(timegm(&tm));
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
        at - std::chrono::system_clock::now());
    return std::max(wait, std::chrono::milliseconds(0));
  }
  return std::nullopt;
}

} // namespace

std::optional<std::chrono::milliseconds> retry_after(const http::Response& response,
                                                     std::chrono::milliseconds cap) {
  for (const char* name : {"retry-after", "ratelimit-reset", "x-ratelimit-reset"}) {
    if (auto value = response.header(name)) {
      if (auto wait = parse_wait(*value)) {
        return std::min(*wait, cap);
      }
    }
  }
  return std::nullopt;
}

namespace {

// Error messages are one line: a server's multi-line message is folded.
std::string one_line(std::string text) {
  std::replace_if(
      text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return text;
}

} // namespace

std::string error_text(const http::Response& response) {
  auto parsed = json::parse(response.body, nullptr, false);
  if (parsed.is_object() && parsed.contains("message")) {
    std::string message =
        parsed["message"].is_string() ? parsed["message"].get<std::string>() : parsed.dump();
    std::string code = parsed.contains("code") ? parsed["code"].dump() : "";
    if (parsed.contains("error_code") && parsed["error_code"].is_string()) {
      code += (code.empty() ? "" : ", ") + parsed["error_code"].get<std::string>();
    }
    message = one_line(message);
    return code.empty() ? message : fmt::format("{} (code {})", message, code);
  }
  std::string first = response.body.substr(0, response.body.find('\n'));
  if (first.size() > 200) {
    first = first.substr(0, 200) + "...";
  }
  return first.empty() ? "no error message in the response" : first;
}

std::string url_escape(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

Api::Api(http::Transport& transport, Endpoints endpoints, std::string api_key, const Spec& spec,
         Sleep sleep)
    : m_transport(transport), m_endpoints(std::move(endpoints)), m_api_key(std::move(api_key)),
      m_timeout(spec.request_timeout), m_retries(spec.retries), m_sleep(std::move(sleep)) {
  if (!m_sleep) {
    m_sleep = [](std::chrono::milliseconds d) { interrupt::sleep_for(d); };
  }
}

http::Response Api::send(const std::string& method, const std::string& path,
                         const std::optional<json>& body, Retry retry,
                         std::optional<std::chrono::milliseconds> timeout) const {
  http::Request request;
  request.method = method;
  request.url = m_endpoints.api_url + path;
  request.timeout = timeout.value_or(m_timeout);
  request.connect_timeout = std::min<std::chrono::milliseconds>(m_timeout, 10s);
  request.headers = {
      {"X-API-KEY", m_api_key}, {"Accept", "application/json"}, {"User-Agent", "sandboxer"}};
  if (body) {
    request.headers.emplace_back("Content-Type", "application/json");
    request.body = body->dump();
  }
  for (int attempt = 0;; ++attempt) {
    bool last = attempt >= m_retries;
    http::Response response;
    try {
      response = m_transport.send(request);
    } catch (const DriverError& e) {
      if (last || retry != Retry::idempotent) {
        throw DriverError(e.kind(), fmt::format("E2B API: {}", e.what()));
      }
      auto wait = backoff(attempt);
      spdlog::debug("{} {}: {}; retrying in {} ms", method, path, e.what(), wait.count());
      m_sleep(wait);
      continue;
    }
    bool again =
        response.status == 429 || (is_transient(response.status) && retry == Retry::idempotent);
    if (!again || last) {
      return response;
    }
    auto wait = retry_after(response, k_max_server_wait).value_or(backoff(attempt));
    spdlog::debug("{} {} -> {}; retrying in {} ms (attempt {} of {})", method, path,
                  response.status, wait.count(), attempt + 2, m_retries + 1);
    m_sleep(wait);
  }
}

void Api::fail(const http::Response& response, const std::string& what) const {
  std::string text = error_text(response);
  std::string message = fmt::format("E2B {}: {} (HTTP {})", what, text, response.status);
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  // E2B answers 400 "Timeout cannot be greater than N hours" when a plan's cap is passed: that is
  // the TTL policy of the account, so it is reported like sandboxer's own ttl.max.
  if (response.status == 400 && lower.find("timeout") != std::string::npos &&
      (lower.find("greater") != std::string::npos || lower.find("exceed") != std::string::npos ||
       lower.find("max") != std::string::npos || lower.find("longer") != std::string::npos)) {
    throw DriverError(DriverError::Kind::refused,
                      message + "; the E2B plan caps a sandbox's lifetime: ask for a shorter "
                                "--ttl or lower ttl.max in the profile");
  }
  if (response.status == 401 || response.status == 403) {
    message += "; check the key that secrets.api_key points at";
  } else if (response.status == 429) {
    message += "; rate limited, try again later";
  }
  throw DriverError(http::kind_of_status(response.status), message);
}

} // namespace sandboxer::drivers::e2b
