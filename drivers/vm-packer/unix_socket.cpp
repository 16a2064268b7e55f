#include "drivers/vm-packer/unix_socket.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>

namespace sandboxer::drivers::vm_packer {
namespace {

// Waits for `events` on `fd` until `deadline`, a slice at a time so that an interrupt is seen.
void wait_for(int fd, short events, UnixSocket::Deadline deadline, const char* what) {
  while (true) {
    interrupt::check();
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      throw DriverError(DriverError::Kind::timeout, fmt::format("timed out {}", what));
    }
    pollfd ready{fd, events, 0};
    int n = ::poll(&ready, 1, static_cast<int>(std::min<long long>(left.count(), 200)));
    if (n > 0) {
      return;
    }
    if (n < 0 && errno != EINTR) {
      throw DriverError(DriverError::Kind::error, fmt::format("poll: {}", std::strerror(errno)));
    }
  }
}

} // namespace

UnixSocket UnixSocket::connect(const std::filesystem::path& path) {
  int dir = ::open(path.parent_path().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    throw DriverError(DriverError::Kind::error,
                      fmt::format("{}: {}", path.parent_path().string(), std::strerror(errno)));
  }
  const std::string short_path = fmt::format("/proc/self/fd/{}/{}", dir, path.filename().string());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int error = 0;
  if (fd < 0 || short_path.size() >= sizeof address.sun_path) {
    error = fd < 0 ? errno : ENAMETOOLONG;
  } else {
    std::memcpy(address.sun_path, short_path.c_str(), short_path.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      error = errno;
    }
  }
  ::close(dir);
  if (error) {
    if (fd >= 0) {
      ::close(fd);
    }
    throw DriverError(DriverError::Kind::error,
                      fmt::format("{}: {}", path.string(), std::strerror(error)));
  }
  return UnixSocket(fd);
}

UnixSocket::UnixSocket(UnixSocket&& other) noexcept : m_fd(other.m_fd) {
  other.m_fd = -1;
}

UnixSocket& UnixSocket::operator=(UnixSocket&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
    m_fd = other.m_fd;
    other.m_fd = -1;
  }
  return *this;
}

UnixSocket::~UnixSocket() {
  if (m_fd >= 0) {
    ::close(m_fd);
  }
}

void UnixSocket::write_all(std::string_view bytes, Deadline deadline) {
  while (!bytes.empty()) {
    ssize_t n = ::send(m_fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      wait_for(m_fd, POLLOUT, deadline, "writing to the VM");
      continue;
    }
    throw DriverError(DriverError::Kind::error,
                      fmt::format("writing to the VM: {}", std::strerror(errno)));
  }
}

bool UnixSocket::read_some(std::string& into, Deadline deadline) {
  char buffer[65536];
  while (true) {
    ssize_t n = ::recv(m_fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      into.append(buffer, static_cast<std::size_t>(n));
      return true;
    }
    if (n == 0) {
      return false;
    }
    if (errno == EAGAIN || errno == EINTR) {
      wait_for(m_fd, POLLIN, deadline, "waiting for the VM");
      continue;
    }
    throw DriverError(DriverError::Kind::error,
                      fmt::format("reading from the VM: {}", std::strerror(errno)));
  }
}

} // namespace sandboxer::drivers::vm_packer
