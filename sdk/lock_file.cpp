#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <optional>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <thread>
#include <unistd.h>
#include <utility>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/lock_file.hpp>

#include "sdk/file_descriptor.hpp"
#include "sdk/files.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono_literals;

constexpr auto k_first_pause = 1ms;
constexpr auto k_longest_pause = 50ms;

// This process's command name, as ps shows it; read once.
const std::string& self_command() {
  static const std::string command = [] {
    std::string line;
    std::ifstream in("/proc/self/comm");
    std::getline(in, line);
    return line.empty() ? std::string("unknown") : line;
  }();
  return command;
}

// The kernel's name for this machine, as the holder line records it: what decides whether the
// holder's pid can be checked here (not owner.cpp's SANDBOXER_HOST, a name for the ledger's
// readers).
const std::string& kernel_host() {
  static const std::string host = [] {
    char buffer[256] = {};
    return ::gethostname(buffer, sizeof(buffer) - 1) == 0 ? std::string(buffer) : std::string();
  }();
  return host;
}

struct Holder {
  long pid = 0;
  std::string command;
  std::string host; // "" when the line is older than issue 35 (it was this machine's then)
};

// What the current holder wrote into the lock file ("pid 1234 sandboxer\n"); nullopt when the
// file is empty (the holder is between flock() and write()) or was not written by a LockFile.
std::optional<Holder> read_holder(int fd) {
  char buffer[256];
  const ssize_t size = ::pread(fd, buffer, sizeof(buffer), 0);
  if (size <= 0) {
    return std::nullopt;
  }
  std::string_view whole(buffer, static_cast<size_t>(size));
  std::string_view text = whole.substr(0, whole.find('\n'));
  if (!text.starts_with("pid ")) {
    return std::nullopt;
  }
  text.remove_prefix(4);
  Holder holder;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), holder.pid);
  if (ec != std::errc() || holder.pid <= 0) {
    return std::nullopt;
  }
  text.remove_prefix(static_cast<size_t>(end - text.data()));
  if (text.starts_with(' ')) {
    holder.command = std::string(text.substr(1));
  }
  if (const size_t at = whole.find("\nhost "); at != std::string_view::npos) {
    std::string_view host = whole.substr(at + 6);
    holder.host = std::string(host.substr(0, host.find('\n')));
  }
  return holder;
}

// Tells waiters who holds the lock. Failing to write it (a full disk) does not make the lock any
// less held, so errors are ignored: the waiter's message then just cannot name the holder.
void record_holder(int fd) {
  const std::string line =
      fmt::format("pid {} {}\nhost {}\n", ::getpid(), self_command(), kernel_host());
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t ignored = ::pwrite(fd, line.data(), line.size(), 0);
  }
}

// Who holds the lock and whether it still runs, then what to do: wait for a live holder; for one
// that is gone, whatever it started still has the file open (a flock lives as long as its open
// file description).
std::string describe_holder(int fd, const std::filesystem::path& path, const std::string& waited) {
  const auto holder = read_holder(fd);
  if (!holder) {
    return fmt::format("locked by another process (its pid is not recorded in {} yet); {}; "
                       "retry, or raise",
                       path.string(), waited);
  }
  std::string who = fmt::format("pid {}", holder->pid);
  if (!holder->command.empty()) {
    who += fmt::format(" ({})", holder->command);
  }
  if (!holder->host.empty()) {
    who += " on " + holder->host;
  }
  if (!holder->host.empty() && holder->host != kernel_host()) {
    return fmt::format("locked by {}, another machine (whether it still runs cannot be seen from "
                       "here); {}; retry, or raise",
                       who, waited);
  }
  if (::kill(static_cast<pid_t>(holder->pid), 0) != 0 && errno == ESRCH) {
    return fmt::format("locked, but its holder {} is gone: a process it started still has {} open "
                       "('fuser -v {}' names it); {}; end that process, or raise",
                       who, path.string(), path.string(), waited);
  }
  return fmt::format("locked by {}, which is still running; {}; wait for it to finish, or raise",
                     who, waited);
}

} // namespace

LockFile::LockFile(std::filesystem::path path, Seconds timeout, std::string what,
                   std::string wait_option)
    : m_path(std::move(path)), m_timeout(timeout), m_what(std::move(what)),
      m_wait_option(std::move(wait_option)) {}

LockFile::Guard::Guard(Guard&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}

LockFile::Guard& LockFile::Guard::operator=(Guard&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
    m_fd = std::exchange(other.m_fd, -1);
  }
  return *this;
}

// Closing the last descriptor of the open file description releases the flock.
LockFile::Guard::~Guard() {
  if (m_fd >= 0) {
    ::close(m_fd);
  }
}

namespace {

// A fresh open file description per attempt: flock() conflicts between descriptions, so the lock
// excludes other threads of this process as well as other processes.
int open_lock_file(const std::filesystem::path& path) {
  // An existing lock file must be our own (a FIFO or another user's file planted in its place is
  // refused); a missing one is created, and a creator racing us leaves one to open.
  int fd = open_own_file(path, O_RDWR, "lock file");
  if (fd < 0) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EEXIST) {
      fd = open_own_file(path, O_RDWR, "lock file");
    }
  }
  if (fd < 0) {
    throw Error(ExitCode::runtime,
                fmt::format("cannot open lock file {}: {}", path.string(), std::strerror(errno)));
  }
  return fd;
}

// True when the lock was taken, false when someone else holds it.
bool try_flock(int fd, const std::filesystem::path& path) {
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return false;
    }
    if (errno != EINTR) {
      throw Error(ExitCode::runtime,
                  fmt::format("cannot lock {}: {}", path.string(), std::strerror(errno)));
    }
  }
  return true;
}

} // namespace

LockFile::Guard LockFile::acquire() const {
  FileDescriptor fd(open_lock_file(m_path));
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + m_timeout;
  std::chrono::steady_clock::duration pause = k_first_pause;
  // Polling with LOCK_NB rather than a blocking flock() keeps the wait bounded without signals
  // or threads; the back-off keeps a long wait cheap and a short one responsive.
  while (!try_flock(fd.get(), m_path)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      throw LockTimeoutError(fmt::format(
          "{} is {} {}", m_what,
          describe_holder(fd.get(), m_path, fmt::format("waited {}s", m_timeout.count())),
          m_wait_option));
    }
    interrupt::sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(
        std::min<std::chrono::steady_clock::duration>(pause, deadline - now)));
    pause = std::min<std::chrono::steady_clock::duration>(pause * 2, k_longest_pause);
  }
  record_holder(fd.get());
  spdlog::debug(
      "timing: {} lock acquired after {:.1f} ms", m_what,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
          .count());
  return Guard(fd.release());
}

LockFile::Guard LockFile::try_acquire() const {
  FileDescriptor fd(open_lock_file(m_path));
  if (!try_flock(fd.get(), m_path)) {
    return Guard();
  }
  record_holder(fd.get());
  return Guard(fd.release());
}

} // namespace sandboxer
