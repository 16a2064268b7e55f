#pragma once

#include <filesystem>
#include <string>

#include <sandboxer/duration.hpp>

namespace sandboxer {

// An exclusive flock on a file, acquired with a bounded wait. The holder writes its pid and command
// into the file so that a waiter's timeout message can name it.
class LockFile {
public:
  // `wait_option`: the option that sets `timeout`, named in the timeout's hint.
  LockFile(std::filesystem::path path, Seconds timeout, std::string what,
           std::string wait_option = "--lock-timeout");

  class Guard {
  public:
    Guard() = default;
    Guard(Guard&& other) noexcept;
    Guard& operator=(Guard&& other) noexcept;
    Guard(const Guard&) = delete;
    Guard& operator=(const Guard&) = delete;
    ~Guard();
    bool held() const { return m_fd >= 0; }

  private:
    friend class LockFile;
    explicit Guard(int fd) : m_fd(fd) {}
    int m_fd = -1;
  };

  // Waits up to the timeout. Throws LockTimeoutError: "<what> is locked by pid N (<cmd>); waited
  // 10s; ...". A timeout of 0 tries once. The lock file is created (0600) if needed, but not its
  // directory; failing to open or lock it throws Error (ExitCode::runtime) naming the path.
  Guard acquire() const;
  // Returns an empty guard instead of waiting when the lock is held.
  Guard try_acquire() const;

  const std::filesystem::path& path() const { return m_path; }

private:
  std::filesystem::path m_path;
  Seconds m_timeout;
  std::string m_what;
  std::string m_wait_option;
};

} // namespace sandboxer
