#include "core/cp/pack.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "sdk/file_descriptor.hpp"

namespace sandboxer::cp {
namespace {

namespace fs = std::filesystem;

// Read in pieces of this size: large enough for disk and pipe throughput, small enough that a
// copy of any size holds little.
constexpr size_t k_piece = 256 * 1024;
// Deeper than this is a loop or a hostile tree.
constexpr int k_max_depth = 256;

[[noreturn]] void failed(const fs::path& path, const std::string& what) {
  throw PackError(fmt::format("{}: cannot {}: {}", path.string(), what, strerror(errno)));
}

std::string joined(const std::string& name, const std::string& child) {
  return name == "." ? child : name + "/" + child;
}

} // namespace

Packer::Packer(tar::Writer& writer, PackOptions options)
    : m_writer(writer), m_options(std::move(options)) {}

void Packer::add(const fs::path& source, const std::string& name) {
  add_path(source, name, 0);
}

void Packer::add_path(const fs::path& path, const std::string& name, int depth) {
  struct stat st {};
  if ((m_options.follow ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) {
    failed(path, "read it");
  }
  tar::Entry entry;
  entry.path = name;
  entry.mode = st.st_mode & 07777;
  entry.mtime = st.st_mtim.tv_sec;
  entry.uid = st.st_uid;
  entry.gid = st.st_gid;
  if (m_options.owner) {
    entry.uid = m_options.owner->first;
    entry.gid = m_options.owner->second;
  }
  if (S_ISREG(st.st_mode)) {
    add_file(path, entry);
  } else if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    fs::path target = fs::read_symlink(path, ec);
    if (ec) {
      errno = ec.value();
      failed(path, "read the link");
    }
    entry.type = tar::Type::symlink;
    entry.link = target.string();
    m_writer.begin(entry);
    m_writer.end();
    ++m_files;
  } else if (S_ISDIR(st.st_mode)) {
    if (depth > k_max_depth || !m_open_directories.emplace(st.st_dev, st.st_ino).second) {
      throw PackError(fmt::format("{}: a directory loop (through --follow'ed links) or a tree "
                                  "deeper than {}",
                                  path.string(), k_max_depth));
    }
    if (name != ".") {
      entry.type = tar::Type::directory;
      m_writer.begin(entry);
      m_writer.end();
    }
    std::vector<std::string> children;
    std::error_code ec;
    for (const auto& child : fs::directory_iterator(path, ec)) {
      children.push_back(child.path().filename().string());
    }
    if (ec) {
      errno = ec.value();
      failed(path, "list the directory");
    }
    // In name order: the same tree makes the same stream, and so the same digest.
    std::sort(children.begin(), children.end());
    for (const auto& child : children) {
      add_path(path / child, joined(name, child), depth + 1);
    }
    m_open_directories.erase({st.st_dev, st.st_ino});
  } else {
    ++m_skipped; // a socket, a fifo, a device: nothing a copy can carry
  }
}

void Packer::add_file(const fs::path& path, tar::Entry entry) {
  FileDescriptor fd(
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (m_options.follow ? 0 : O_NOFOLLOW)));
  if (fd.get() < 0) {
    failed(path, "open it");
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) {
    failed(path, "read it");
  }
  entry.size = static_cast<uint64_t>(st.st_size);
  m_writer.begin(entry);
  std::vector<char> buffer(k_piece);
  uint64_t left = entry.size;
  while (left > 0) {
    ssize_t n = ::read(fd.get(), buffer.data(), std::min<uint64_t>(buffer.size(), left));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      failed(path, "read it");
    }
    if (n == 0) {
      throw PackError(
          fmt::format("{}: it shrank while it was copied ({} bytes short)", path.string(), left));
    }
    std::string_view piece(buffer.data(), static_cast<size_t>(n));
    m_writer.data(piece);
    left -= static_cast<uint64_t>(n);
  }
  m_writer.end();
  ++m_files;
  m_bytes += entry.size;
}

} // namespace sandboxer::cp
