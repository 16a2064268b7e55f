#include "src/files.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "src/file_descriptor.hpp"

namespace sandboxer {
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const char* what, const fs::path& path, int saved_errno) {
  throw Error(ExitCode::runtime,
              fmt::format("cannot {} {}: {}", what, path.string(), std::strerror(saved_errno)));
}

void write_all(int fd, const std::string& text, const fs::path& path) {
  size_t written = 0;
  while (written < text.size()) {
    ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail("write", path, errno);
    }
    written += static_cast<size_t>(n);
  }
}

} // namespace

void make_private_dirs(const fs::path& path) {
  fs::path partial;
  for (const auto& part : path) {
    partial /= part;
    if (!partial.empty() && ::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      fail("create directory", partial, errno);
    }
  }
}

void write_file_atomically(const fs::path& path, const std::string& text, unsigned mode,
                           bool durable) {
  // A dot-file beside the target: same filesystem for rename(), and globbing readers (the
  // textfile collector reads *.prom, the outbox *.json) never see it. Its name is random and it
  // is created with O_EXCL|O_NOFOLLOW: in a directory another user can write (a metrics
  // directory, say), a name planted in advance as a symlink is never followed, so root's write
  // cannot be redirected to another file.
  fs::path temp;
  int raw = -1;
  for (int attempt = 0; attempt < 16 && raw < 0; ++attempt) {
    std::uint64_t nonce = 0;
    if (::getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) {
      fail("draw a random temp name for", path, errno);
    }
    temp = path.parent_path() / fmt::format(".{}.{:016x}.tmp", path.filename().string(), nonce);
    raw = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (raw < 0 && errno != EEXIST) {
      fail("write", path, errno);
    }
  }
  FileDescriptor fd(raw);
  if (fd.get() < 0) {
    fail("create a temp file for", path, EEXIST);
  }
  try {
    write_all(fd.get(), text, path);
    if (durable && ::fsync(fd.get()) != 0) {
      fail("fsync", path, errno);
    }
    if (::rename(temp.c_str(), path.c_str()) != 0) {
      fail("rename a temp file over", path, errno);
    }
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
}

void sync_directory(const fs::path& dir) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    fail("fsync directory", dir, errno);
  }
}

std::optional<std::string> read_file_if_exists(const fs::path& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) {
      return std::nullopt;
    }
    fail("read", path, errno);
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      fail("read", path, errno);
    }
    if (n == 0) {
      return text;
    }
    text.append(buffer, static_cast<size_t>(n));
  }
}

} // namespace sandboxer
