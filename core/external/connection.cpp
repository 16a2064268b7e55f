#include "core/external/connection.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <optional>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <sandboxer/base64.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

namespace sandboxer::external {
namespace {

using clock = std::chrono::steady_clock;

// After sandboxer closes its stdin, how long a driver gets to exit before SIGTERM.
constexpr auto k_exit_grace = std::chrono::seconds(2);
// How many of the driver's last stderr lines an error quotes.
constexpr size_t k_stderr_kept = 3;
// How much of a driver's stderr one pass reads before the call looks at its deadline again: a
// driver flooding stderr cannot keep a call past its deadline.
constexpr size_t k_stderr_per_pass = 1u << 20;
// After the driver process exited, how long its stdout may still bring the answer (a last line
// in a pipe's buffer) before the call fails: something it left behind may hold stdout open.
constexpr auto k_answer_grace_after_exit = std::chrono::milliseconds(500);
// The longest a call's poll sleeps: how soon a driver's exit is noticed.
constexpr long long k_poll_slice_ms = 250;

proc::Command command_of(const std::filesystem::path& path) {
  proc::Command command;
  command.argv = {path.string()};
  return command;
}

int ms_until(clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, k_poll_slice_ms));
}

} // namespace

Connection::Connection(std::string name, std::filesystem::path path) try
    : m_name(std::move(name)), m_path(std::move(path)), m_child(command_of(m_path)) {
} catch (const DriverError&) {
  throw;
} catch (const Error& e) {
  throw DriverError(DriverError::Kind::error,
                    fmt::format("external driver {} ({}): {}", m_name, m_path.string(), e.what()));
}

Connection::~Connection() {
  int status = m_child.stop(k_exit_grace);
  read_stderr();
  if (status != 0) {
    spdlog::debug("driver {}: exited with status {}", m_name, status);
  }
}

void Connection::broken(DriverError::Kind kind, const std::string& what) {
  m_usable = false;
  // The conversation is over: the driver and whatever it started (a background ssh, a daemon
  // holding its stdout) go, rather than outlive the call that failed.
  m_child.kill_group();
  std::string message = fmt::format("external driver {} ({}): {}", m_name, m_path.string(), what);
  if (!m_last_stderr.empty()) {
    message += "; its stderr: ";
    for (size_t i = 0; i < m_last_stderr.size(); ++i) {
      message += (i ? " | " : "") + m_last_stderr[i];
    }
  }
  throw DriverError(kind, log::redact(message));
}

void Connection::read_stderr() {
  char buffer[8192];
  for (size_t total = 0; m_child.stderr_fd() >= 0 && total < k_stderr_per_pass;) {
    ssize_t n = ::read(m_child.stderr_fd(), buffer, sizeof buffer);
    if (n <= 0) {
      break;
    }
    total += static_cast<size_t>(n);
    try {
      m_err.feed(std::string_view(buffer, static_cast<size_t>(n)));
    } catch (const std::length_error&) {
      m_err.rest();
    }
    std::string line;
    while (m_err.next(line)) {
      line = log::redact(line);
      spdlog::info("driver {}: {}", m_name, line);
      m_last_stderr.push_back(line);
      if (m_last_stderr.size() > k_stderr_kept) {
        m_last_stderr.pop_front();
      }
    }
  }
}

void Connection::send_input(long id, int& input_fd) {
  char buffer[32768];
  ssize_t n = ::read(input_fd, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
    return;
  }
  nlohmann::json params = {{"id", id}};
  if (n > 0) {
    params["data"] = base64_encode(std::string_view(buffer, static_cast<size_t>(n)));
  } else {
    params["eof"] = true;
    input_fd = -1;
  }
  if (!protocol::write_line(m_child.stdin_fd(),
                            {{"jsonrpc", "2.0"}, {"method", "input"}, {"params", params}})) {
    input_fd = -1; // the driver stopped reading; its answer (or its end) says why
  }
}

nlohmann::json Connection::call(const Call& call) {
  if (!m_usable) {
    broken(DriverError::Kind::error, "its conversation broke earlier");
  }
  const long id = ++m_next_id;
  nlohmann::json request = {
      {"jsonrpc", "2.0"}, {"id", id}, {"method", call.method}, {"params", call.params}};
  if (!protocol::write_line(m_child.stdin_fd(), request)) {
    read_stderr();
    broken(DriverError::Kind::error,
           fmt::format("exited before {} (it closed its stdin)", call.method));
  }
  const auto deadline = clock::now() + call.timeout;
  std::optional<clock::time_point> exited_at;
  int input_fd = call.input_fd;
  char buffer[65536];
  while (true) {
    if (interrupt::requested()) {
      // The driver may stop the call's work; the connection is not reused either way.
      protocol::write_line(m_child.stdin_fd(),
                           {{"jsonrpc", "2.0"}, {"method", "cancel"}, {"params", {{"id", id}}}});
      m_usable = false;
      interrupt::check();
    }
    if (clock::now() >= deadline) {
      read_stderr();
      broken(DriverError::Kind::timeout,
             fmt::format("did not answer {} within {} s", call.method,
                         std::chrono::duration_cast<std::chrono::seconds>(call.timeout).count()));
    }
    if (!exited_at && m_child.exited()) {
      exited_at = clock::now();
    }
    if (exited_at && clock::now() >= *exited_at + k_answer_grace_after_exit) {
      read_stderr();
      broken(DriverError::Kind::error,
             fmt::format("exited before answering {} (status {}; something it started still "
                         "holds its stdout)",
                         call.method, m_child.status()));
    }
    pollfd fds[4] = {{m_child.stdout_fd(), POLLIN, 0},
                     {m_child.stderr_fd(), POLLIN, 0},
                     {interrupt::wake_fd(), POLLIN, 0},
                     {input_fd, POLLIN, 0}};
    int ready = ::poll(fds, input_fd >= 0 ? 4 : 3, ms_until(deadline));
    if (ready < 0 && errno != EINTR) {
      broken(DriverError::Kind::error, fmt::format("poll: {}", strerror(errno)));
    }
    if (ready <= 0) {
      continue;
    }
    if (fds[1].revents & (POLLIN | POLLHUP)) {
      read_stderr();
    }
    if (input_fd >= 0 && (fds[3].revents & (POLLIN | POLLHUP | POLLERR))) {
      send_input(id, input_fd);
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      continue;
    }
    ssize_t n = ::read(m_child.stdout_fd(), buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      continue;
    }
    if (n <= 0) {
      m_child.stop(k_exit_grace);
      read_stderr();
      broken(DriverError::Kind::error,
             fmt::format("exited before answering {} (stdout closed)", call.method));
    }
    try {
      m_out.feed(std::string_view(buffer, static_cast<size_t>(n)));
    } catch (const std::length_error& e) {
      broken(DriverError::Kind::error, fmt::format("wrote {} on stdout", e.what()));
    }
    std::string line;
    while (m_out.next(line)) {
      auto message = protocol::read_message(line, id);
      switch (message.type) {
      case protocol::Message::Type::ignored:
        spdlog::debug("driver {}: ignored: {:.200}", m_name, line);
        break;
      case protocol::Message::Type::output:
        if (call.on_output) {
          call.on_output(message.value);
        }
        break;
      case protocol::Message::Type::malformed:
        broken(DriverError::Kind::error,
               fmt::format("wrote {} on stdout during {} (stdout is for protocol messages only; "
                           "write logs to stderr): {:.120}",
                           message.message, call.method, line));
      case protocol::Message::Type::error:
        // Attributed to the driver, unless it names itself already ("saas-stub: ...").
        if (message.message.rfind(m_name + ": ", 0) != 0) {
          message.message = fmt::format("{}: {}", m_name, message.message);
        }
        throw RemoteError(message.kind, log::redact(message.message), message.pointer);
      case protocol::Message::Type::result:
        return std::move(message.value);
      }
    }
  }
}

} // namespace sandboxer::external
