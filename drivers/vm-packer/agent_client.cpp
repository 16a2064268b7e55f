#include "drivers/vm-packer/agent_client.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <random>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>

#include "drivers/vm-packer/agent/wire.hpp"

namespace sandboxer::drivers::vm_packer {
namespace {

namespace fs = std::filesystem;
using namespace vm_agent;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t k_channel = 1; // one command per session
// A session's writes (a frame of stdin) that the guest does not take within this are a dead VM.
constexpr auto k_write_timeout = std::chrono::seconds(30);

std::string nonce() {
  std::random_device random;
  std::string bytes(k_nonce_size, '\0');
  for (char& byte : bytes) {
    byte = static_cast<char>(random() & 0xff);
  }
  return bytes;
}

fs::path socket_of(const fs::path& dir, int port) {
  return dir / fmt::format("agent{}.sock", port);
}

} // namespace

UnixSocket AgentSession::greet(const fs::path& socket, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  UnixSocket connection = UnixSocket::connect(socket);
  const std::string hello = nonce();
  connection.write_all(encode(Frame{FrameType::hello, 0, hello}), deadline);
  // Whatever a previous session left in the stream comes first: skip to our answer.
  const std::string answer = encode(Frame{FrameType::hello_ack, 0, hello});
  FrameReader reader;
  std::string bytes;
  while (true) {
    bytes.clear();
    if (!connection.read_some(bytes, deadline)) {
      throw DriverError(DriverError::Kind::error, "the guest agent closed the connection");
    }
    reader.feed(bytes);
    if (reader.skip_to(answer) && reader.buffered() >= answer.size()) {
      return connection;
    }
  }
}

bool AgentSession::answers(const fs::path& dir, std::chrono::milliseconds timeout) {
  LockFile::Guard lock = LockFile(dir / "agent0.lock", Seconds(0), "agent port 0").try_acquire();
  if (!lock.held()) {
    return true; // a session holds it: the agent answered that one
  }
  try {
    greet(socket_of(dir, 0), timeout);
    return true;
  } catch (const Interrupted&) {
    throw;
  } catch (const Error&) {
    return false;
  }
}

AgentSession AgentSession::open(const fs::path& dir, int ports, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string last_error = "every port is in use";
  while (true) {
    for (int port = 0; port < ports; ++port) {
      LockFile::Guard lock =
          LockFile(dir / fmt::format("agent{}.lock", port), Seconds(0), "agent port").try_acquire();
      if (!lock.held()) {
        continue;
      }
      try {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        return AgentSession(
            greet(socket_of(dir, port), std::max(left, std::chrono::milliseconds(1))),
            std::move(lock));
      } catch (const Interrupted&) {
        throw;
      } catch (const Error& e) {
        last_error = e.what();
      }
    }
    if (Clock::now() > deadline) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("the guest agent did not answer ({})", last_error));
    }
    interrupt::sleep_for(std::chrono::milliseconds(50));
  }
}

int AgentSession::exec(const ExecRequest& request, ExecIo& io) {
  StartRequest start;
  start.argv = request.argv;
  start.env.assign(request.env.begin(), request.env.end());
  start.workdir = request.workdir.value_or("");
  start.tty = request.tty;
  start.attach_stdin = request.attach_stdin && io.stdin_fd() >= 0;
  if (auto size = request.tty ? io.terminal_size() : std::nullopt) {
    start.rows = static_cast<std::uint16_t>(size->rows);
    start.cols = static_cast<std::uint16_t>(size->cols);
  }
  auto write = [&](FrameType type, std::string payload) {
    m_socket.write_all(encode(Frame{type, k_channel, std::move(payload)}),
                       Clock::now() + k_write_timeout);
  };
  write(FrameType::start, encode_start(start));

  FrameReader reader;
  std::string bytes;
  int stdin_fd = start.attach_stdin ? io.stdin_fd() : -1;
  const int resize_fd = request.tty ? io.resize_fd() : -1;
  const int wake_fd = interrupt::wake_fd();
  int signals_seen = interrupt::count();
  std::optional<interrupt::Shield> forwarding; // signals go to the command, which decides
  if (wake_fd >= 0) {
    forwarding.emplace();
  }
  while (true) {
    std::vector<pollfd> fds = {{m_socket.fd(), POLLIN, 0}};
    if (stdin_fd >= 0) {
      fds.push_back({stdin_fd, POLLIN, 0});
    }
    if (resize_fd >= 0) {
      fds.push_back({resize_fd, POLLIN, 0});
    }
    if (wake_fd >= 0) {
      fds.push_back({wake_fd, POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) {
      throw DriverError(DriverError::Kind::error, "poll failed while running the command");
    }
    if (interrupt::count() != signals_seen) {
      signals_seen = interrupt::count();
      interrupt::drain_wake_fd();
      write(FrameType::signal, std::string(1, static_cast<char>(interrupt::last_signal())));
    }
    for (const pollfd& ready : fds) {
      if (!ready.revents) {
        continue;
      }
      if (ready.fd == stdin_fd) {
        char buffer[32768];
        ssize_t n = ::read(stdin_fd, buffer, sizeof buffer);
        if (n > 0) {
          write(FrameType::stdin_data, std::string(buffer, static_cast<std::size_t>(n)));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          write(FrameType::stdin_data, "");
          stdin_fd = -1;
        }
      } else if (ready.fd == resize_fd) {
        char drain[64];
        while (::read(resize_fd, drain, sizeof drain) > 0) {
        }
        if (auto size = io.terminal_size()) {
          write(FrameType::resize, encode_size(static_cast<std::uint16_t>(size->rows),
                                               static_cast<std::uint16_t>(size->cols)));
        }
      }
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      continue;
    }
    bytes.clear();
    if (!m_socket.read_some(bytes, Clock::now() + std::chrono::seconds(1))) {
      throw DriverError(DriverError::Kind::error,
                        "the VM closed the guest agent's connection before the command ended");
    }
    try {
      reader.feed(bytes);
      while (auto frame = reader.next()) {
        if (frame->channel != k_channel) {
          continue;
        }
        if (frame->type == FrameType::stdout_data) {
          io.out(frame->payload);
        } else if (frame->type == FrameType::stderr_data) {
          io.err(frame->payload);
        } else if (frame->type == FrameType::exit) {
          ExitReport report = decode_exit(frame->payload);
          switch (report.kind) {
          case ExitReport::Kind::exited:
            return report.value;
          case ExitReport::Kind::signaled:
            return 128 + report.value;
          case ExitReport::Kind::not_found:
            return unstartable_command(request.argv.front(), true, io);
          case ExitReport::Kind::not_startable:
            return unstartable_command(request.argv.front(), false, io);
          }
        }
      }
    } catch (const WireError& e) {
      throw DriverError(DriverError::Kind::error,
                        fmt::format("the guest agent sent something unreadable: {}", e.what()));
    }
  }
}

} // namespace sandboxer::drivers::vm_packer
