#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>

namespace sandboxer::drivers::vm_packer {

// A connected unix stream socket with deadlines on every read and write. Paths may be longer
// than sun_path allows: the socket is reached through /proc/self/fd/N of its directory.
class UnixSocket {
public:
  using Deadline = std::chrono::steady_clock::time_point;

  // Throws sandboxer::Error when nothing listens at `path` (or refuses).
  static UnixSocket connect(const std::filesystem::path& path);
  UnixSocket(UnixSocket&& other) noexcept;
  UnixSocket& operator=(UnixSocket&& other) noexcept;
  ~UnixSocket();

  int fd() const { return m_fd; }
  // Writes all of `bytes`; throws sandboxer::Error past the deadline.
  void write_all(std::string_view bytes, Deadline deadline);
  // Some bytes, appended to `into`; false at end of stream. Throws on a deadline or an error.
  bool read_some(std::string& into, Deadline deadline);

private:
  explicit UnixSocket(int fd) : m_fd(fd) {}
  int m_fd = -1;
};

} // namespace sandboxer::drivers::vm_packer
