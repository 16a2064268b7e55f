#include "core/ledger/file_io.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "core/errors.hpp"
#include "sdk/file_descriptor.hpp"
#include "sdk/files.hpp"

namespace sandboxer::ledger_files {
namespace {

constexpr size_t k_map_threshold = 1 << 20;

} // namespace

std::string errno_text() {
  return std::strerror(errno);
}

FileText::~FileText() {
  if (m_map) {
    ::munmap(m_map, m_map_size);
  }
}

std::string_view FileText::view() const {
  return m_map ? std::string_view(static_cast<const char*>(m_map), m_map_size) : m_copy;
}

bool FileText::load(const std::filesystem::path& path, std::string_view what) {
  int raw = -1;
  try {
    raw = open_own_file(path, O_RDONLY, what);
  } catch (const Error& e) {
    throw LedgerError(e.what());
  }
  FileDescriptor fd(raw);
  if (fd.get() < 0) {
    if (errno == ENOENT) {
      return false;
    }
    throw LedgerError(fmt::format("cannot read {} {}: {}; check that it belongs to you and "
                                  "is readable (its mode should be 0600)",
                                  what, path.string(), errno_text()));
  }
  auto failure = [&] {
    return LedgerError(fmt::format("cannot read {} {}: {}", what, path.string(), errno_text()));
  };
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    throw failure();
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (S_ISREG(st.st_mode) && size >= k_map_threshold) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd.get(), 0);
    if (map != MAP_FAILED) {
      m_map = map;
      m_map_size = size;
      return true;
    }
  }
  // One read() for the whole file in the common case; the loop covers short reads and a file
  // that grew meanwhile.
  m_copy.resize(size + 1);
  size_t used = 0;
  while (true) {
    if (used == m_copy.size()) {
      m_copy.resize(m_copy.size() * 2);
    }
    const ssize_t got = ::read(fd.get(), m_copy.data() + used, m_copy.size() - used);
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      throw failure();
    }
    if (got == 0) {
      break;
    }
    used += static_cast<size_t>(got);
  }
  m_copy.resize(used);
  return true;
}

void write_failed(const char* step, const std::filesystem::path& path,
                  const std::filesystem::path& file) {
  throw LedgerError(fmt::format("cannot write ledger: {} {}: {}; {} was not changed", step,
                                path.string(), errno_text(), file.string()));
}

void write_all(int fd, std::string_view text, const std::filesystem::path& path,
               const std::filesystem::path& file) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      write_failed("write", path, file);
    }
    done += static_cast<size_t>(n);
  }
}

void fsync_directory(const std::filesystem::path& dir, const std::filesystem::path& file) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || ::fsync(fd.get()) != 0) {
    // The rename has happened: the new ledger is in place but maybe not yet durable.
    throw LedgerError(fmt::format("cannot sync directory {}: {}; {} was written but may not "
                                  "survive a power failure",
                                  dir.string(), errno_text(), file.string()));
  }
}

} // namespace sandboxer::ledger_files
