#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/files.hpp>

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
  // textfile collector reads *.prom, the outbox *.json) never see it.
  fs::path temp =
      path.parent_path() / fmt::format(".{}.{}.tmp", path.filename().string(), ::getpid());
  FileDescriptor fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode));
  if (fd.get() < 0) {
    fail("write", path, errno);
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
