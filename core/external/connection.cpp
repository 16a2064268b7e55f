#include "core/external/connection.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <optional>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <vector>

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

bool Connection::write_pending(const std::string& pending, size_t& offset) {
  while (offset < pending.size()) {
    ssize_t n = ::write(m_child.stdin_fd(), pending.data() + offset, pending.size() - offset);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      return true; // the pipe is full: the rest goes when poll says it may
    }
    if (n <= 0) {
      return false;
    }
    offset += static_cast<size_t>(n);
  }
  return true;
}

namespace {

// While a call streams to the driver, its stdin does not block: a chunk goes out as the pipe
// takes it, between reads of the driver's stdout and stderr.
class NonBlocking {
public:
  explicit NonBlocking(int fd) : m_fd(fd), m_flags(fd >= 0 ? fcntl(fd, F_GETFL) : -1) {
    if (m_flags >= 0) {
      fcntl(m_fd, F_SETFL, m_flags | O_NONBLOCK);
    }
  }
  ~NonBlocking() {
    if (m_flags >= 0) {
      fcntl(m_fd, F_SETFL, m_flags);
    }
  }
  NonBlocking(const NonBlocking&) = delete;
  NonBlocking& operator=(const NonBlocking&) = delete;

private:
  int m_fd;
  int m_flags;
};

} // namespace

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
  auto deadline = clock::now() + call.timeout;
  std::optional<clock::time_point> exited_at;
  int input_fd = call.input_fd;
  char buffer[65536];
  // copy_in's stream: the line being written, how much of it went, and whether its end did.
  std::optional<NonBlocking> non_blocking;
  std::string pending;
  size_t pending_offset = 0;
  bool source_ended = !call.source;
  bool source_sent = !call.source;
  bool source_drained = false; // the source returned 0
  std::vector<char> chunk;
  if (call.source) {
    non_blocking.emplace(m_child.stdin_fd());
    chunk.resize(protocol::k_copy_chunk);
  }
  auto progressed = [&] {
    if (call.deadline_from_progress) {
      deadline = clock::now() + call.timeout;
    }
  };
  while (true) {
    if (interrupt::requested()) {
      // The driver may stop the call's work; the connection is not reused either way. A line
      // half written cannot be followed by another.
      if (pending_offset == 0 || pending_offset == pending.size()) {
        protocol::write_line(m_child.stdin_fd(),
                             {{"jsonrpc", "2.0"}, {"method", "cancel"}, {"params", {{"id", id}}}});
      }
      m_usable = false;
      interrupt::check();
    }
    if (clock::now() >= deadline) {
      read_stderr();
      const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(call.timeout).count();
      broken(DriverError::Kind::timeout,
             call.deadline_from_progress
                 ? fmt::format("made no progress in {} for {} s", call.method, seconds)
                 : fmt::format("did not answer {} within {} s", call.method, seconds));
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
    if (!source_ended && pending_offset == pending.size()) {
      // Chunks are filled (a source may hand over less at a time): fewer, fuller lines.
      size_t n = 0;
      try {
        while (!source_drained && n < chunk.size()) {
          size_t got = call.source(chunk.data() + n, chunk.size() - n);
          source_drained = got == 0;
          n += got;
        }
      } catch (...) {
        // The stream will not be whole: the driver is told to drop it (`cancel`, or its stdin
        // closing), never handed an end it could take for a complete one.
        protocol::write_line(m_child.stdin_fd(),
                             {{"jsonrpc", "2.0"}, {"method", "cancel"}, {"params", {{"id", id}}}});
        m_usable = false;
        throw;
      }
      pending = (n > 0 ? protocol::input_chunk(id, std::string_view(chunk.data(), n))
                       : protocol::input_end(id))
                    .dump() +
                "\n";
      pending_offset = 0;
      source_ended = n == 0; // the end marker goes after the last bytes, in a line of its own
      if (call.sent) {
        *call.sent += n;
      }
    }
    const bool writing = pending_offset < pending.size();
    pollfd fds[5] = {{m_child.stdout_fd(), POLLIN, 0},
                     {m_child.stderr_fd(), POLLIN, 0},
                     {interrupt::wake_fd(), POLLIN, 0},
                     {input_fd, POLLIN, 0},
                     {writing ? m_child.stdin_fd() : -1, POLLOUT, 0}};
    int ready = ::poll(fds, 5, ms_until(deadline));
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
    if (writing && (fds[4].revents & (POLLOUT | POLLERR | POLLHUP))) {
      if (!write_pending(pending, pending_offset)) {
        // The driver stopped reading: what it answers (an error) or its end says why.
        source_ended = true;
        pending.clear();
        pending_offset = 0;
        m_usable = false;
      } else if (pending_offset == pending.size()) {
        progressed();
        source_sent = source_ended;
      }
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
        progressed();
        if (call.on_output) {
          try {
            call.on_output(message.value);
          } catch (...) {
            // What sandboxer could not take (a malformed chunk, a local disk full): the driver
            // is still sending, so the process is told to stop and not reused.
            if (pending_offset == 0 || pending_offset == pending.size()) {
              protocol::write_line(
                  m_child.stdin_fd(),
                  {{"jsonrpc", "2.0"}, {"method", "cancel"}, {"params", {{"id", id}}}});
            }
            m_usable = false;
            throw;
          }
        }
        break;
      case protocol::Message::Type::malformed:
        broken(DriverError::Kind::error,
               fmt::format("wrote {} on stdout during {} (stdout is for protocol messages only; "
                           "write logs to stderr): {:.120}",
                           message.message, call.method, line));
      case protocol::Message::Type::error:
        if (!source_sent) {
          m_usable = false; // the rest of its stream was never sent: the conversation is off step
        }
        // Attributed to the driver, unless it names itself already ("saas-stub: ...").
        if (message.message.rfind(m_name + ": ", 0) != 0) {
          message.message = fmt::format("{}: {}", m_name, message.message);
        }
        throw RemoteError(message.kind, log::redact(message.message), message.pointer,
                          message.method_not_found);
      case protocol::Message::Type::result:
        if (!source_sent) {
          broken(DriverError::Kind::error,
                 fmt::format("answered {} before the end of the stream it was sent (it must read "
                             "the stream to its end)",
                             call.method));
        }
        return std::move(message.value);
      }
    }
  }
}

} // namespace sandboxer::external
