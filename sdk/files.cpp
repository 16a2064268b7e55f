#include "sdk/files.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "sdk/file_descriptor.hpp"

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

// What makes `st` unfit to be trusted as the effective user's own, or "".
std::string ownership_problem(const struct stat& st, bool directory) {
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
    return S_ISLNK(st.st_mode)    ? "it is a symbolic link"
           : S_ISFIFO(st.st_mode) ? "it is a FIFO"
           : S_ISDIR(st.st_mode)  ? "it is a directory"
           : directory            ? "it is not a directory"
                                  : "it is not a regular file";
  }
  if (st.st_uid != ::geteuid()) {
    return fmt::format("it belongs to uid {}, not to uid {} who runs sandboxer", st.st_uid,
                       ::geteuid());
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("it is writable by {} (mode {:04o})",
                       (st.st_mode & S_IWOTH) != 0 ? "others" : "its group", st.st_mode & 07777);
  }
  return "";
}

[[noreturn]] void refuse(std::string_view what, const fs::path& path, const std::string& problem) {
  throw Error(ExitCode::runtime,
              fmt::format("refusing {} {}: {}; another user could have planted or changed it. "
                          "Check it, then remove it or give it to this user with mode 0600",
                          what, path.string(), problem));
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

int open_own_file(const fs::path& path, int flags, std::string_view what) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int saved = errno;
    if (saved == ENOENT) {
      return -1;
    }
    if (saved == ELOOP) {
      refuse(what, path, "it is a symbolic link");
    }
    if (saved == ENXIO) { // a FIFO opened for writing without a reader
      refuse(what, path, "it is a FIFO");
    }
    errno = saved; // the caller names the failure in its own terms
    return -1;
  }
  FileDescriptor owned(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    fail("inspect", path, errno);
  }
  if (auto problem = ownership_problem(st, false); !problem.empty()) {
    refuse(what, path, problem);
  }
  // Regular files ignore O_NONBLOCK; it only had to keep the open from waiting on a FIFO.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return owned.release();
}

void check_own_directory(const fs::path& dir, std::string_view what) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    fail("inspect", dir, errno);
  }
  if (auto problem = ownership_problem(st, true); !problem.empty()) {
    refuse(what, dir, problem);
  }
}

std::optional<std::string> read_file_if_exists(const fs::path& path, std::string_view what,
                                               size_t limit) {
  FileDescriptor fd(open_own_file(path, O_RDONLY, what));
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
    if (text.size() > limit) {
      refuse(what, path, fmt::format("it is larger than {} bytes", limit));
    }
  }
}

} // namespace sandboxer
