#include <spdlog/spdlog.h>

#include <sandboxer/error.hpp>
#include <sandboxer/readiness.hpp>

namespace sandboxer {

bool proxied_status_answers(long status) {
  return status != 0 && status != 502 && status != 503 && status != 504;
}

bool url_answers(http::Transport& transport, const std::string& url,
                 std::chrono::milliseconds timeout) {
  http::Request request;
  request.url = url;
  request.timeout = timeout;
  request.connect_timeout = timeout;
  request.headers = {{"User-Agent", "sandboxer"}};
  // Only the status matters: a large page is not downloaded to learn it.
  request.on_body = [](std::string_view) { return false; };
  try {
    return proxied_status_answers(transport.send(request).status);
  } catch (const DriverError& e) {
    spdlog::debug("{} does not answer yet: {}", http::redacted_url(url), e.what());
    return false;
  }
}

} // namespace sandboxer
