// The four sinks: where one event goes and what counts as delivered (docs/events.md).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <sandboxer/duration.hpp>
#include <sandboxer/http.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/proc.hpp>

#include "core/events/events.hpp"
#include "core/secrets/secrets.hpp"
#include "sdk/file_descriptor.hpp"
#include "sdk/files.hpp"

namespace sandboxer::events {
using namespace std::chrono;

namespace {

std::string text_of(const nlohmann::json& sink, const char* key) {
  return sink.contains(key) && sink[key].is_string() ? sink[key].get<std::string>() : "";
}

// Appended and fsync'd: once this returns, the line survives a crash of the machine.
SendResult send_jsonl(const nlohmann::json& sink, const std::string& line) {
  std::string path = text_of(sink, "path");
  auto open_append = [&] {
    return ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  };
  int raw = open_append();
  if (raw < 0 && errno == ENOENT) {
    // Its directory is made as the state dir is (0700): a profile naming a new file works at once.
    try {
      make_private_dirs(std::filesystem::path(path).parent_path());
    } catch (const Error& e) {
      return {false, e.what()};
    }
    raw = open_append();
  }
  FileDescriptor fd(raw);
  if (fd.get() < 0) {
    return {false, fmt::format("cannot open {}: {}", path, std::strerror(errno))};
  }
  // One write() of the whole line: O_APPEND keeps concurrent writers' lines whole.
  if (::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()) ||
      ::fsync(fd.get()) != 0) {
    return {false, fmt::format("cannot append to {}: {}", path, std::strerror(errno))};
  }
  return {true};
}

// stderr, or a descriptor the user opened for the command (`3>events.log`): never stdout, which
// carries only the command's data.
SendResult send_fd(int fd, const std::string& line) {
  if (::fcntl(fd, F_GETFD) < 0) {
    return {
        false,
        fmt::format("fd {} is not open in this command (run it with {}>FILE or {}>&2)", fd, fd, fd),
        {},
        false};
  }
  std::string_view rest = line;
  while (!rest.empty()) {
    ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return {false, fmt::format("cannot write to fd {}: {}", fd, std::strerror(errno)), {}, false};
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  return {true};
}

SendResult send_exec(const nlohmann::json& sink, const std::string& line, milliseconds timeout) {
  proc::Command command;
  if (sink.contains("command")) {
    for (const auto& arg : sink["command"]) {
      command.argv.push_back(arg.get<std::string>());
    }
  }
  if (command.argv.empty()) {
    return {false, "an exec sink without a command", {}, false};
  }
  command.stdin_data = line;
  command.timeout = timeout;
  try {
    proc::Result result = proc::run(command);
    if (result.timed_out) {
      return {false,
              fmt::format("{} did not finish within {} ms", command.argv.at(0), timeout.count())};
    }
    if (result.status() != 0) {
      std::string err = result.err.substr(0, 200);
      while (!err.empty() && err.back() == '\n') {
        err.pop_back();
      }
      return {false, fmt::format("{} exited with {}{}", command.argv.at(0), result.status(),
                                 err.empty() ? "" : ": " + log::redact(err))};
    }
  } catch (const Error& e) {
    return {false, log::redact(e.what())};
  }
  return {true};
}

SendResult send_http(const nlohmann::json& sink, const std::string& body, milliseconds timeout) {
  http::Request request;
  request.method = "POST";
  request.url = text_of(sink, "url");
  request.body = body;
  request.timeout = timeout;
  request.connect_timeout = std::min(timeout, milliseconds(5000));
  request.headers.emplace_back("Content-Type", "application/cloudevents+json; charset=utf-8");
  if (sink.contains("headers")) {
    for (const auto& [name, value] : sink["headers"].items()) {
      request.headers.emplace_back(name, value.get<std::string>());
    }
  }
  std::string where = http::redacted_url(request.url);
  try {
    if (sink.contains("token")) {
      // Read at each delivery, from the reference: a rotated token is picked up, and the value
      // is registered for redaction before anything could print it.
      auto token = resolve_secrets({{"token", sink["token"]}}).at("token");
      request.headers.emplace_back("Authorization", "Bearer " + token);
    }
    http::Response response = http::curl_transport().send(request);
    if (response.status >= 200 && response.status < 300) {
      return {true};
    }
    SendResult result{false, fmt::format("POST {} answered {}", where, response.status)};
    result.retry_after = retry_after_of(response);
    result.retryable = response.status == 408 || response.status == 429 || response.status >= 500;
    return result;
  } catch (const Error& e) {
    return {false, fmt::format("POST {}: {}", where, log::redact(e.what()))};
  }
}

} // namespace

// "120" (seconds) or an HTTP date; only the first is worth waiting for here. A server's number is
// clamped to a day (any wait past the delivery's time left defers the event anyway): LONG_MAX
// seconds once overflowed into an immediate retry.
std::optional<milliseconds> retry_after_of(const http::Response& response) {
  constexpr long k_max_seconds = 24 * 3600;
  auto header = response.header("retry-after");
  if (!header) {
    header = response.header("ratelimit-reset");
  }
  if (!header || header->empty() || header->find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  long seconds = 0;
  for (char c : *header) {
    seconds = std::min(k_max_seconds, seconds * 10 + (c - '0'));
  }
  return milliseconds(seconds * 1000);
}

SendResult send(const nlohmann::json& sink, const std::string& event_text, milliseconds timeout) {
  std::string type = text_of(sink, "type");
  if (type == "jsonl") {
    return send_jsonl(sink, event_text + "\n");
  }
  // "stdout": a sink recorded in the outbox before stdout was kept for data only.
  if (type == "stderr" || type == "stdout") {
    std::fflush(stderr);
    return send_fd(STDERR_FILENO, event_text + "\n");
  }
  if (type == "fd") {
    const int fd =
        sink.contains("fd") && sink["fd"].is_number_integer() ? sink["fd"].get<int>() : -1;
    return send_fd(fd, event_text + "\n");
  }
  if (type == "exec") {
    return send_exec(sink, event_text + "\n", timeout);
  }
  if (type == "http") {
    return send_http(sink, event_text, timeout);
  }
  return {false, fmt::format("unknown sink type \"{}\"", type), {}, false};
}

bool reachable_from_any_machine(const nlohmann::json& sink) {
  return text_of(sink, "type") == "http";
}

std::string describe_sink(const nlohmann::json& sink) {
  if (std::string host = text_of(sink, "host"); !host.empty()) {
    nlohmann::json here = sink;
    here.erase("host");
    return describe_sink(here) + " on " + host;
  }
  std::string type = text_of(sink, "type");
  if (type == "jsonl") {
    return "jsonl " + text_of(sink, "path");
  }
  if (type == "http") {
    return "http " + http::redacted_url(text_of(sink, "url"));
  }
  if (type == "fd" && sink.contains("fd")) {
    return "fd " + sink["fd"].dump();
  }
  if (type == "exec" && sink.contains("command") && !sink["command"].empty()) {
    return "exec " + sink["command"][0].get<std::string>();
  }
  return type;
}

milliseconds timeout_of(const nlohmann::json& sink) {
  if (auto text = text_of(sink, "timeout"); !text.empty()) {
    if (auto parsed = parse_duration_ms(text)) {
      return *parsed;
    }
  }
  return text_of(sink, "type") == "exec" ? milliseconds(10000) : milliseconds(5000);
}

int retries_of(const nlohmann::json& sink) {
  return sink.contains("retries") && sink["retries"].is_number_integer()
             ? sink["retries"].get<int>()
             : 5;
}

} // namespace sandboxer::events
