#include "core/cp/extract.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cp/stream.hpp"

namespace sandboxer::cp {
namespace {

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw ExtractError(fmt::format("{}: {}", path, why));
}

[[noreturn]] void failed(const std::string& path, const std::string& what) {
  throw ExtractError(fmt::format("{}: cannot {}: {}", path, what, strerror(errno)));
}

std::string temporary_name(const std::string& name) {
  static std::mt19937_64 random{std::random_device{}()};
  return fmt::format(".{}.sandboxer-cp-{:08x}", name.substr(0, 200),
                     static_cast<uint32_t>(random()));
}

// The access time left as it is, the modification time the stream's.
struct ModificationTime {
  explicit ModificationTime(int64_t mtime)
      : times{{0, UTIME_OMIT}, {static_cast<time_t>(mtime), 0}} {}
  timespec times[2];
};

// The mode, then the time, of an open file or directory. The mode after any chown: chown clears
// the set-id bits.
void keep_mode_and_time(int fd, uint32_t mode, int64_t mtime) {
  fchmod(fd, mode);
  futimens(fd, ModificationTime(mtime).times);
}

// Renames the temporary `temp` to `name` in `dirfd`, or removes it and fails naming `path`.
void put_in_place(int dirfd, const std::string& temp, const std::string& name,
                  const std::string& path) {
  if (renameat(dirfd, temp.c_str(), dirfd, name.c_str()) != 0) {
    int saved = errno;
    unlinkat(dirfd, temp.c_str(), 0);
    errno = saved;
    failed(path, "put it in place");
  }
}

} // namespace

std::vector<std::string> safe_components(const std::string& path) {
  if (path.starts_with('/')) {
    refuse(path, "an absolute path in the stream (a copy out of a sandbox writes only inside "
                 "its destination)");
  }
  std::vector<std::string> parts = name_components(path);
  if (std::find(parts.begin(), parts.end(), "..") != parts.end()) {
    refuse(path, "a path with \"..\" in the stream (it would write outside the destination)");
  }
  return parts;
}

Extractor::Extractor(const std::filesystem::path& destination, ExtractOptions options)
    : m_destination(destination), m_options(options),
      m_root(::open(destination.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC)) {
  if (m_root.get() < 0) {
    failed(destination.string(), "open the destination directory");
  }
}

Extractor::~Extractor() {
  discard_partial();
}

uint32_t Extractor::permission_bits(uint32_t mode) const {
  // The set-id and sticky bits only for --owner, as root: a copy out must not hand this machine's
  // users a set-uid file of the sandbox's.
  return mode & (m_options.keep_owner ? 07777 : 0777);
}

void Extractor::discard_partial() {
  if (m_file.get() >= 0) {
    m_file.reset(-1);
    unlinkat(m_parent.get(), m_temp_name.c_str(), 0);
  }
}

Extractor::Place Extractor::place_of(const std::string& path, bool create_parents) {
  std::vector<std::string> parts = safe_components(path);
  if (parts.empty()) {
    return {FileDescriptor(), ""}; // the destination itself
  }
  FileDescriptor dir(dup(m_root.get()));
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& part = parts[i];
    int next = openat(dir.get(), part.c_str(), O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create_parents) {
      if (mkdirat(dir.get(), part.c_str(), 0755) != 0 && errno != EEXIST) {
        failed(path, "make directory " + part);
      }
      next = openat(dir.get(), part.c_str(), O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC);
    }
    if (next < 0) {
      if (errno == ELOOP || errno == ENOTDIR) {
        refuse(path, fmt::format("\"{}\" is a symbolic link or not a directory; a copy never "
                                 "writes through a link",
                                 part));
      }
      failed(path, "open directory " + part);
    }
    dir.reset(next);
  }
  return {std::move(dir), parts.back()};
}

void Extractor::begin(const tar::Entry& entry) {
  Place place = place_of(entry.path, true);
  if (place.name.empty()) {
    if (entry.type != tar::Type::directory) {
      refuse(entry.path, "the stream names the destination itself as a file");
    }
    return; // "." : the destination, which exists
  }
  const int parent = place.parent.get();
  const char* name = place.name.c_str();
  struct stat existing {};
  const bool exists = fstatat(parent, name, &existing, AT_SYMLINK_NOFOLLOW) == 0;
  auto owner = [&](int dirfd, const char* at_name) {
    if (m_options.keep_owner && fchownat(dirfd, at_name, static_cast<uid_t>(entry.uid),
                                         static_cast<gid_t>(entry.gid), AT_SYMLINK_NOFOLLOW) != 0) {
      failed(entry.path, "set its owner");
    }
  };
  switch (entry.type) {
  case tar::Type::directory:
    if (exists && !S_ISDIR(existing.st_mode)) {
      refuse(entry.path, "a directory in the stream where the destination has a file");
    }
    if (!exists && mkdirat(parent, name, 0700) != 0) {
      failed(entry.path, "make the directory");
    }
    owner(parent, name);
    m_directories.push_back({entry.path, entry.mode, entry.mtime});
    return;
  case tar::Type::file: {
    if (exists && S_ISDIR(existing.st_mode)) {
      refuse(entry.path, "a file in the stream where the destination has a directory");
    }
    m_temp_name = temporary_name(place.name);
    int fd = openat(parent, m_temp_name.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      failed(entry.path, "create it");
    }
    m_file.reset(fd);
    m_parent = std::move(place.parent);
    m_entry = entry;
    m_final_name = place.name;
    return;
  }
  case tar::Type::symlink:
  case tar::Type::hardlink: {
    if (exists && S_ISDIR(existing.st_mode)) {
      refuse(entry.path, "a link in the stream where the destination has a directory");
    }
    std::string temp = temporary_name(place.name);
    if (entry.type == tar::Type::symlink) {
      if (symlinkat(entry.link.c_str(), parent, temp.c_str()) != 0) {
        failed(entry.path, "make the symbolic link");
      }
    } else {
      // The earlier entry it names, found as safely as any other path; linkat does not follow
      // a symbolic link it names.
      Place target = place_of(entry.link, false);
      if (target.name.empty() ||
          linkat(target.parent.get(), target.name.c_str(), parent, temp.c_str(), 0) != 0) {
        failed(entry.path, "link it to " + entry.link);
      }
    }
    put_in_place(parent, temp, place.name, entry.path);
    if (entry.type == tar::Type::symlink) {
      owner(parent, name);
      utimensat(parent, name, ModificationTime(entry.mtime).times, AT_SYMLINK_NOFOLLOW);
    }
    ++m_files;
    return;
  }
  case tar::Type::other:
    ++m_skipped;
    return;
  }
}

void Extractor::data(std::string_view chunk) {
  if (m_file.get() < 0) {
    return; // the content of an entry that is not written (a device's)
  }
  while (!chunk.empty()) {
    ssize_t n = ::write(m_file.get(), chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      int saved = errno;
      discard_partial();
      errno = saved;
      failed(m_entry.path, "write it");
    }
    chunk.remove_prefix(static_cast<size_t>(n));
    m_bytes += static_cast<uint64_t>(n);
  }
}

void Extractor::end() {
  if (m_file.get() < 0) {
    return;
  }
  if (m_options.keep_owner &&
      fchown(m_file.get(), static_cast<uid_t>(m_entry.uid), static_cast<gid_t>(m_entry.gid)) != 0) {
    discard_partial();
    failed(m_entry.path, "set its owner");
  }
  keep_mode_and_time(m_file.get(), permission_bits(m_entry.mode), m_entry.mtime);
  m_file.reset(-1);
  put_in_place(m_parent.get(), m_temp_name, m_final_name, m_entry.path);
  ++m_files;
}

void Extractor::finish() {
  // Deepest first: setting a directory's time after its children were made keeps it.
  for (auto it = m_directories.rbegin(); it != m_directories.rend(); ++it) {
    Place place = place_of(it->path, false);
    if (place.name.empty()) {
      continue;
    }
    int dir = openat(place.parent.get(), place.name.c_str(),
                     O_DIRECTORY | O_NOFOLLOW | O_RDONLY | O_CLOEXEC);
    if (dir < 0) {
      failed(it->path, "open the directory");
    }
    FileDescriptor held(dir);
    keep_mode_and_time(dir, permission_bits(it->mode), it->mtime);
  }
  m_directories.clear();
}

} // namespace sandboxer::cp
