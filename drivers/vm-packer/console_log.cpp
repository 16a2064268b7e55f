#include "drivers/vm-packer/console_log.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>

namespace sandboxer::drivers::vm_packer {
namespace {

using Kind = DriverError::Kind;

constexpr std::size_t k_chunk = 64 * 1024;
constexpr std::size_t k_max_console_line = 64 * 1024;

// Closes the fd when it goes.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) {
      ::close(fd);
    }
  }
};

// pread, until `size` bytes or the end; returns how many it read, -1 on an error.
ssize_t read_at(int fd, char* data, std::size_t size, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return -1;
    }
    if (n == 0) {
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

} // namespace

std::uint64_t start_of_last_lines(const std::filesystem::path& path, std::size_t n) {
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat info {};
  if (file.fd < 0 || ::fstat(file.fd, &info) != 0) {
    return 0;
  }
  const auto end = static_cast<std::uint64_t>(info.st_size);
  if (n == 0) {
    return end;
  }
  std::string chunk(k_chunk, '\0');
  std::size_t found = 0;
  for (std::uint64_t stop = end; stop > 0;) {
    const std::uint64_t start = stop > k_chunk ? stop - k_chunk : 0;
    const auto size = static_cast<std::size_t>(stop - start);
    if (read_at(file.fd, chunk.data(), size, start) != static_cast<ssize_t>(size)) {
      return 0; // changed under us: the whole file is the safe answer
    }
    for (std::size_t i = size; i-- > 0;) {
      const std::uint64_t at = start + i;
      // The newline that ends the last line separates it from nothing.
      if (chunk[i] == '\n' && at + 1 != end && ++found == n) {
        return at + 1;
      }
    }
    stop = start;
  }
  return 0;
}

ConsoleReader::ConsoleReader(const std::filesystem::path& path, std::uint64_t offset)
    : m_path(path.string()), m_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
  if (m_fd < 0) {
    const int error = errno;
    throw DriverError(
        error == ENOENT ? Kind::not_found : Kind::error,
        fmt::format("cannot read the VM's serial log {}: {}", m_path, std::strerror(error)));
  }
  if (offset > 0) {
    // Started inside a line: what completes it is not a line of its own when it is empty.
    char before = '\n';
    m_mid_line = read_at(m_fd, &before, 1, offset - 1) == 1 && before != '\n';
    ::lseek(m_fd, static_cast<off_t>(offset), SEEK_SET);
  }
}

ConsoleReader::~ConsoleReader() {
  ::close(m_fd);
}

std::size_t ConsoleReader::read(LogSink& sink) {
  std::size_t total = 0;
  std::string chunk(k_chunk, '\0');
  for (;;) {
    ssize_t n = ::read(m_fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      throw DriverError(Kind::error, fmt::format("cannot read the VM's serial log {}: {}", m_path,
                                                 std::strerror(errno)));
    }
    if (n == 0) {
      return total;
    }
    total += static_cast<std::size_t>(n);
    std::string_view bytes(chunk.data(), static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = bytes.find('\n')) != std::string_view::npos;
         bytes.remove_prefix(nl + 1)) {
      if (m_partial.empty()) {
        hand_over(bytes.substr(0, nl), true, sink);
      } else {
        m_partial.append(bytes.substr(0, nl));
        hand_over(m_partial, true, sink);
        m_partial.clear();
      }
    }
    m_partial.append(bytes);
    while (m_partial.size() >= k_max_console_line) {
      hand_over(std::string_view(m_partial).substr(0, k_max_console_line), false, sink);
      m_partial.erase(0, k_max_console_line);
    }
    interrupt::check(); // a long log is read in chunks, each one a chance to stop
  }
}

void ConsoleReader::flush(LogSink& sink) {
  if (!m_partial.empty()) {
    hand_over(m_partial, false, sink);
    m_partial.clear();
  }
}

void ConsoleReader::hand_over(std::string_view text, bool complete, LogSink& sink) {
  while (!text.empty() && text.back() == '\r') {
    text.remove_suffix(1);
  }
  // The rest of a line handed over in part already, when there is no rest, is not a line.
  if (!(text.empty() && m_mid_line)) {
    LogLine line;
    line.stream = "console";
    line.text = std::string(text);
    sink.line(line);
  }
  m_mid_line = !complete;
}

} // namespace sandboxer::drivers::vm_packer
