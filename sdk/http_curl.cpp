#include <algorithm>
#include <curl/curl.h>
#include <exception>
#include <fmt/format.h>
#include <mutex>
#include <regex>
#include <spdlog/spdlog.h>
#include <thread>

#include <sandboxer/http.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "sdk/curl_on_demand.hpp"

namespace sandboxer::http {
namespace {

struct Transfer {
  const Request* request;
  Response* response;
  bool stopped_by_caller = false;
  std::optional<std::chrono::steady_clock::time_point> answer_by;
  bool unanswered = false;  // set when answer_by passed without a header
  bool interrupted = false; // a signal arrived (interrupt.hpp)
  // What a body callback threw: it cannot cross libcurl's C frames, so it waits here for send().
  std::exception_ptr failure;
};

// libcurl's progress callback (called about once a second, and at each chunk): aborts the
// transfer when a signal asks the operation to stop, or when no header has arrived by
// Request::answer_timeout.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* transfer = static_cast<Transfer*>(user);
  if (interrupt::requested()) {
    transfer->interrupted = true;
    return 1;
  }
  if (transfer->answer_by && transfer->response->headers.empty() &&
      std::chrono::steady_clock::now() > *transfer->answer_by) {
    transfer->unanswered = true;
    return 1;
  }
  return 0;
}

size_t on_write(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  std::string_view chunk(data, size * count);
  if (transfer->request->on_body) {
    bool go_on = false;
    try {
      go_on = transfer->request->on_body(chunk);
    } catch (...) {
      transfer->failure = std::current_exception();
    }
    if (!go_on) {
      transfer->stopped_by_caller = true;
      return 0; // makes curl stop with CURLE_WRITE_ERROR
    }
  } else {
    transfer->response->body.append(chunk);
  }
  return chunk.size();
}

size_t on_read(char* buffer, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  try {
    return transfer->request->body_source(buffer, size * count);
  } catch (...) {
    transfer->failure = std::current_exception();
    return CURL_READFUNC_ABORT;
  }
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* response = static_cast<Response*>(user);
  std::string_view line(data, size * count);
  auto colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
      value.remove_prefix(1);
    }
    while (!value.empty() &&
           (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) {
      value.remove_suffix(1);
    }
    response->headers[name] = std::string(value);
  } else if (line.starts_with("HTTP/")) {
    response->headers.clear(); // a new response (after a 100 Continue or a redirect)
  }
  return line.size();
}

// The path of a URL, for log lines that stay short.
std::string path_of(const std::string& url) {
  auto scheme = url.find("://");
  auto slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return slash == std::string::npos ? "/" : url.substr(slash);
}

// One easy handle per thread, kept between requests: it keeps its connection open, so the
// requests of one command after the first skip the connect (the Docker Engine keeps a unix-socket
// connection alive), and libcurl's per-handle setup is paid once.
class ThreadHandle {
public:
  ~ThreadHandle() {
    if (m_curl) {
      curl_easy_cleanup(m_curl);
    }
  }
  // The kept handle, or a fresh one when the kept one is busy (a request sent from inside another
  // request's body callback); null when libcurl could not be loaded.
  CURL* acquire() {
    if (m_busy) {
      return curl_easy_init();
    }
    if (!m_curl) {
      m_curl = curl_easy_init();
    }
    m_busy = m_curl != nullptr;
    return m_curl;
  }
  void release(CURL* curl) {
    if (curl == m_curl) {
      // Forgets the options (they point into the caller's locals), keeps the open connection.
      curl_easy_reset(curl);
      m_busy = false;
    } else {
      curl_easy_cleanup(curl);
    }
  }

private:
  CURL* m_curl = nullptr;
  bool m_busy = false;
};

class CurlTransport : public Transport {
public:
  // curl_global_init() (OpenSSL's init, ~1 ms) and, when libcurl is opened on demand, loading it
  // and its ~30 libraries (5-15 ms, curl_on_demand.cpp): started on a thread of its own when a
  // driver opens the transport, that overlaps with what the core does before the first request (a
  // ledger commit, with its fsyncs).
  CurlTransport() : m_loader([] { curl_global_init(CURL_GLOBAL_DEFAULT); }) {}
  ~CurlTransport() override { wait_loaded(); }

  Response send(const Request& request) override {
    wait_loaded();
    thread_local ThreadHandle handle;
    CURL* curl = handle.acquire();
    if (!curl) {
      const std::string why = curl_load_error();
      throw DriverError(DriverError::Kind::error, why.empty() ? "cannot initialise libcurl" : why);
    }
    Response response;
    Transfer transfer{&request, &response};
    curl_slist* headers = nullptr;
    for (const auto& [name, value] : request.headers) {
      headers = curl_slist_append(headers, (name + ": " + value).c_str());
    }
    // curl would otherwise send "Expect: 100-continue" for large bodies and wait for it.
    headers = curl_slist_append(headers, "Expect:");
    curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    if (request.method == "HEAD") {
      curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    }
    if (request.body_source) {
      // No size: curl sends it chunked, as it is read.
      curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(curl, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(curl, CURLOPT_READDATA, &transfer);
    } else if (!request.body.empty() || request.method == "POST" || request.method == "PUT") {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(request.connect_timeout.count()));
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (request.stall_timeout) {
      curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
      curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                       static_cast<long>(request.stall_timeout->count()));
    }
    if (request.answer_timeout) {
      transfer.answer_by = std::chrono::steady_clock::now() + *request.answer_timeout;
    }
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    if (request.unix_socket) {
      curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, request.unix_socket->c_str());
    }
    char error_buffer[CURL_ERROR_SIZE] = {};
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);

    auto started = std::chrono::steady_clock::now();
    CURLcode code = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
    handle.release(curl);
    curl_slist_free_all(headers);
    // To a tenth of a ms: bench/docker.sh subtracts these from the wall time, and whole ms would
    // count up to 1 ms per request as sandboxer's own.
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();

    std::string where = request.unix_socket ? fmt::format(" (via {})", *request.unix_socket) : "";
    if (transfer.interrupted) {
      throw Interrupted(interrupt::last_signal());
    }
    if (transfer.failure) {
      std::rethrow_exception(transfer.failure);
    }
    if (code != CURLE_OK && !(code == CURLE_WRITE_ERROR && transfer.stopped_by_caller)) {
      std::string detail = error_buffer[0] ? error_buffer : curl_easy_strerror(code);
      spdlog::debug("{} {}{} -> {} ({:.1f} ms)", request.method, redacted_url(request.url), where,
                    detail, ms);
      if (transfer.unanswered) {
        detail = fmt::format("no response within {} ms", request.answer_timeout->count());
      }
      auto kind = code == CURLE_OPERATION_TIMEDOUT || transfer.unanswered
                      ? DriverError::Kind::timeout
                  : code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST ||
                          code == CURLE_COULDNT_RESOLVE_PROXY
                      ? DriverError::Kind::unavailable
                      : DriverError::Kind::error;
      throw DriverError(kind, log::redact(fmt::format("{} {}{}: {}", request.method,
                                                      redacted_url(request.url), where, detail)));
    }
    // Guarded: redacted_url() compiles its regexes on first use, ~0.5 ms that a command without -v
    // need not pay.
    if (spdlog::should_log(spdlog::level::debug)) {
      spdlog::debug("{} {} -> {} ({:.1f} ms)", request.method, path_of(redacted_url(request.url)),
                    response.status, ms);
    }
    return response;
  }

private:
  void wait_loaded() {
    std::call_once(m_loaded, [this] {
      if (m_loader.joinable()) {
        m_loader.join();
      }
    });
  }

  std::thread m_loader;
  std::once_flag m_loaded;
};

} // namespace

std::optional<std::string> Response::header(const std::string& lowercase_name) const {
  auto it = headers.find(lowercase_name);
  return it == headers.end() ? std::nullopt : std::optional(it->second);
}

Transport& curl_transport() {
  static CurlTransport transport;
  return transport;
}

DriverError::Kind kind_of_status(long status) {
  switch (status) {
  case 401:
  case 403:
    return DriverError::Kind::auth;
  case 404:
    return DriverError::Kind::not_found;
  case 409:
    return DriverError::Kind::conflict;
  case 408:
  case 504:
    return DriverError::Kind::timeout;
  default:
    return DriverError::Kind::error;
  }
}

std::string redacted_url(std::string_view url) {
  static const std::regex userinfo(R"(://[^/@]+@)");
  static const std::regex secret_param(
      R"(([?&](?:access_token|token|key|api_key|apikey|password|secret|signature)=)[^&#]*)",
      std::regex::icase);
  std::string result = std::regex_replace(std::string(url), userinfo, "://***@");
  return log::redact(std::regex_replace(result, secret_param, "$1***"));
}

} // namespace sandboxer::http
