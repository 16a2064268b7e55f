#include <cerrno>
#include <cstring>
#include <exception>
#include <fmt/format.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/copy_feed.hpp>

#include "sdk/file_descriptor.hpp"

namespace sandboxer {
namespace {

constexpr size_t k_piece_bytes = 256 * 1024;

} // namespace

int with_source_as_fd(CopySource& source, const std::function<int(int fd)>& use) {
  int pair[2];
  // A socket, not a pipe: a write after the reader stopped fails with EPIPE (MSG_NOSIGNAL)
  // instead of raising SIGPIPE.
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw Error(ExitCode::runtime, fmt::format("socketpair: {}", std::strerror(errno)));
  }
  FileDescriptor reader(pair[0]);
  FileDescriptor feeder(pair[1]);
  std::exception_ptr source_failure;
  std::thread writer([&] {
    std::string piece(k_piece_bytes, '\0');
    try {
      for (;;) {
        const size_t got = source.read(piece.data(), piece.size());
        if (got == 0) {
          break;
        }
        for (size_t sent = 0; sent < got;) {
          const ssize_t n = send(feeder.get(), piece.data() + sent, got - sent, MSG_NOSIGNAL);
          if (n < 0 && errno == EINTR) {
            continue;
          }
          if (n <= 0) {
            shutdown(feeder.get(), SHUT_WR);
            return; // the reader stopped: what it says tells why
          }
          sent += static_cast<size_t>(n);
        }
      }
    } catch (...) {
      source_failure = std::current_exception();
    }
    shutdown(feeder.get(), SHUT_WR);
  });
  int result = -1;
  std::exception_ptr use_failure;
  try {
    result = use(reader.get());
  } catch (...) {
    use_failure = std::current_exception();
  }
  // Whatever the writer still sends fails at once now.
  shutdown(reader.get(), SHUT_RDWR);
  writer.join();
  if (source_failure) {
    std::rethrow_exception(source_failure);
  }
  if (use_failure) {
    std::rethrow_exception(use_failure);
  }
  return result;
}

} // namespace sandboxer
