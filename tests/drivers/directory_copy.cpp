#include "tests/drivers/directory_copy.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fmt/format.h>
#include <set>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include <sandboxer/error.hpp>
#include <sandboxer/tar.hpp>

namespace sandboxer::directory_copy {
namespace fs = std::filesystem;
namespace {

constexpr size_t k_piece = 64u << 10;
constexpr int k_max_links = 40; // as the kernel's ELOOP

[[noreturn]] void fail(const std::string& what) {
  throw DriverError(DriverError::Kind::error, "stub-external: " + what);
}
[[noreturn]] void fail_errno(const std::string& what, const fs::path& path) {
  fail(fmt::format("{} {}: {}", what, path.string(), std::strerror(errno)));
}

std::deque<std::string> components(std::string_view path) {
  std::deque<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      slash = path.size();
    }
    if (slash > start) {
      out.emplace_back(path.substr(start, slash - start));
    }
    start = slash + 1;
  }
  return out;
}

// `path` on this machine, under `root`: each symbolic link on the way (and the last one with
// `follow_last`) replaced by its target as the sandbox sees it.
fs::path resolve(const fs::path& root, const std::string& path, bool follow_last) {
  std::deque<std::string> todo = components(path);
  std::vector<std::string> done;
  int links = 0;
  auto here = [&] {
    fs::path out = root;
    for (const auto& part : done) {
      out /= part;
    }
    return out;
  };
  while (!todo.empty()) {
    std::string part = std::move(todo.front());
    todo.pop_front();
    if (part == ".") {
      continue;
    }
    if (part == "..") {
      if (!done.empty()) {
        done.pop_back();
      }
      continue;
    }
    fs::path next = here() / part;
    struct stat st {};
    if (::lstat(next.c_str(), &st) == 0 && S_ISLNK(st.st_mode) && (!todo.empty() || follow_last)) {
      if (++links > k_max_links) {
        fail(fmt::format("{}: too many levels of symbolic links", path));
      }
      std::error_code ec;
      std::string target = fs::read_symlink(next, ec).string();
      if (ec) {
        fail(fmt::format("cannot read the link {}: {}", next.string(), ec.message()));
      }
      if (!target.empty() && target[0] == '/') {
        done.clear();
      }
      auto more = components(target);
      todo.insert(todo.begin(), more.begin(), more.end());
      continue;
    }
    done.push_back(std::move(part));
  }
  return here();
}

// A name of the stream, checked: relative, without "..", its "." parts dropped.
std::vector<std::string> safe_parts(const std::string& name) {
  if (name.empty() || name[0] == '/') {
    fail(fmt::format("the stream names {}: an absolute name is refused",
                     nlohmann::json(name).dump()));
  }
  std::vector<std::string> out;
  for (auto& part : components(name)) {
    if (part == "..") {
      fail(fmt::format("the stream names {}: a name with \"..\" is refused",
                       nlohmann::json(name).dump()));
    }
    if (part != ".") {
      out.push_back(std::move(part));
    }
  }
  return out;
}

void set_time(const fs::path& path, int64_t mtime, bool link) {
  timespec times[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(mtime), 0}};
  if (::utimensat(AT_FDCWD, path.c_str(), times, link ? AT_SYMLINK_NOFOLLOW : 0) != 0) {
    fail_errno("cannot set the time of", path);
  }
}

// Unpacks into `m_dir` as the entries come, each one's content written as it arrives.
class Unpacker : public tar::Sink {
public:
  explicit Unpacker(fs::path dir) : m_dir(std::move(dir)) {}
  ~Unpacker() override {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
  }

  void begin(const tar::Entry& entry) override {
    auto parts = safe_parts(entry.path);
    if (parts.empty()) {
      return; // "." itself: the destination, which exists
    }
    m_entry = entry;
    m_target = parent_of(parts) / parts.back();
    struct stat st {};
    const bool exists = ::lstat(m_target.c_str(), &st) == 0;
    if (entry.type == tar::Type::directory) {
      if (exists && !S_ISDIR(st.st_mode)) {
        remove_file(m_target);
      }
      if ((!exists || !S_ISDIR(st.st_mode)) && ::mkdir(m_target.c_str(), 0700) != 0) {
        fail_errno("cannot make the directory", m_target);
      }
      m_directories.emplace_back(m_target, entry); // its mode and time once its content is in
      return;
    }
    if (exists && S_ISDIR(st.st_mode)) {
      fail(fmt::format("cannot replace the directory {} with a non-directory", entry.path));
    }
    if (exists) {
      remove_file(m_target);
    }
    switch (entry.type) {
    case tar::Type::file:
      m_fd = ::open(m_target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (m_fd < 0) {
        fail_errno("cannot create", m_target);
      }
      break;
    case tar::Type::symlink:
      if (::symlink(entry.link.c_str(), m_target.c_str()) != 0) {
        fail_errno("cannot make the link", m_target);
      }
      set_time(m_target, entry.mtime, true);
      break;
    case tar::Type::hardlink: {
      auto link_parts = safe_parts(entry.link);
      fs::path earlier = link_parts.empty() ? m_dir : parent_of(link_parts) / link_parts.back();
      if (::link(earlier.c_str(), m_target.c_str()) != 0) {
        fail_errno("cannot make the hard link", m_target);
      }
      break;
    }
    default:
      // Devices and fifos are not made: the stub runs as an ordinary user.
      spdlog::warn("stub-external: copy_in: {} is a special file; skipped", entry.path);
      break;
    }
  }

  void data(std::string_view chunk) override {
    while (m_fd >= 0 && !chunk.empty()) {
      ssize_t n = ::write(m_fd, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        fail_errno("cannot write", m_target); // ENOSPC: the backend's own words
      }
      chunk.remove_prefix(static_cast<size_t>(n));
    }
  }

  void end() override {
    if (m_fd < 0) {
      return;
    }
    timespec times[2] = {{0, UTIME_OMIT}, {static_cast<time_t>(m_entry.mtime), 0}};
    const bool ok = ::fchmod(m_fd, m_entry.mode & 07777) == 0 && ::futimens(m_fd, times) == 0;
    const int closed = ::close(m_fd);
    m_fd = -1;
    if (!ok || closed != 0) {
      fail_errno("cannot finish", m_target);
    }
  }

  // Directories last, deepest first: a read-only one is made so only after its content.
  void finish_directories() {
    for (auto it = m_directories.rbegin(); it != m_directories.rend(); ++it) {
      if (::chmod(it->first.c_str(), it->second.mode & 07777) != 0) {
        fail_errno("cannot set the mode of", it->first);
      }
      set_time(it->first, it->second.mtime, false);
    }
  }

private:
  // The directory that holds `parts`' last, made where missing; never a way through a link.
  fs::path parent_of(const std::vector<std::string>& parts) {
    fs::path here = m_dir;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      here /= parts[i];
      struct stat st {};
      if (::lstat(here.c_str(), &st) != 0) {
        if (::mkdir(here.c_str(), 0755) != 0) {
          fail_errno("cannot make the directory", here);
        }
      } else if (!S_ISDIR(st.st_mode)) {
        fail(fmt::format("the stream writes through {}, which is not a directory (a link is "
                         "never followed)",
                         here.string()));
      }
    }
    return here;
  }

  static void remove_file(const fs::path& path) {
    if (::unlink(path.c_str()) != 0) {
      fail_errno("cannot replace", path);
    }
  }

  fs::path m_dir;
  fs::path m_target;
  tar::Entry m_entry;
  int m_fd = -1;
  std::vector<std::pair<fs::path, tar::Entry>> m_directories;
};

// Writes `host` under `name`, and a directory's content after it, in name order.
class Packer {
public:
  Packer(fs::path root, CopySink& sink, bool follow)
      : m_root(std::move(root)), m_writer([&sink](std::string_view bytes) { sink.write(bytes); }),
        m_follow(follow) {}

  // `inside` is its path in the sandbox: with --follow, a link is followed as the sandbox sees it
  // (a dangling one goes as the link it is).
  void add(fs::path host, const std::string& inside, const std::string& name) {
    struct stat st {};
    if (::lstat(host.c_str(), &st) != 0) {
      fail_errno("cannot read", host);
    }
    if (S_ISLNK(st.st_mode) && m_follow) {
      fs::path target = resolve(m_root, inside, true);
      struct stat target_st {};
      if (::lstat(target.c_str(), &target_st) == 0) {
        host = target;
        st = target_st;
      }
    }
    tar::Entry entry;
    entry.path = name;
    entry.mode = st.st_mode & 07777;
    entry.mtime = st.st_mtim.tv_sec;
    entry.uid = st.st_uid;
    entry.gid = st.st_gid;
    if (S_ISDIR(st.st_mode)) {
      auto id = std::make_pair(st.st_dev, st.st_ino);
      if (!m_chain.insert(id).second) {
        fail(fmt::format("{}: a loop of symbolic links (--follow)", host.string()));
      }
      entry.type = tar::Type::directory;
      m_writer.begin(entry);
      m_writer.end();
      std::vector<std::string> names;
      std::error_code ec;
      for (const auto& child : fs::directory_iterator(host, ec)) {
        names.push_back(child.path().filename().string());
      }
      if (ec) {
        fail(fmt::format("cannot list {}: {}", host.string(), ec.message()));
      }
      std::sort(names.begin(), names.end());
      for (const auto& child : names) {
        add(host / child, inside + "/" + child, name + "/" + child);
      }
      m_chain.erase(id);
    } else if (S_ISLNK(st.st_mode)) {
      entry.type = tar::Type::symlink;
      std::error_code ec;
      entry.link = fs::read_symlink(host, ec).string();
      if (ec) {
        fail(fmt::format("cannot read the link {}: {}", host.string(), ec.message()));
      }
      m_writer.begin(entry);
      m_writer.end();
    } else if (S_ISREG(st.st_mode)) {
      entry.type = tar::Type::file;
      entry.size = static_cast<uint64_t>(st.st_size);
      file(host, entry);
    } else {
      spdlog::warn("stub-external: copy_out: {} is a special file; skipped", host.string());
    }
  }

  void finish() { m_writer.finish(); }

private:
  void file(const fs::path& host, const tar::Entry& entry) {
    int fd = ::open(host.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      fail_errno("cannot open", host);
    }
    m_writer.begin(entry);
    std::vector<char> buffer(k_piece);
    uint64_t left = entry.size;
    while (left > 0) {
      ssize_t n = ::read(fd, buffer.data(), std::min<uint64_t>(left, buffer.size()));
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n <= 0) {
        ::close(fd);
        // The entry's size is in its header already: a file that shrank cannot be sent whole.
        fail(fmt::format("{} shrank while it was read", host.string()));
      }
      m_writer.data(std::string_view(buffer.data(), static_cast<size_t>(n)));
      left -= static_cast<uint64_t>(n);
    }
    ::close(fd);
    m_writer.end();
  }

  fs::path m_root;
  tar::Writer m_writer;
  bool m_follow;
  std::set<std::pair<dev_t, ino_t>> m_chain; // directories being written (--follow's loops)
};

} // namespace

PathInfo stat_path(const fs::path& root, const std::string& path) {
  PathInfo info;
  fs::path host = resolve(root, path, false);
  struct stat st {};
  if (::lstat(host.c_str(), &st) != 0) {
    return info; // missing
  }
  if (S_ISLNK(st.st_mode)) {
    fs::path target = resolve(root, path, true);
    if (::lstat(target.c_str(), &st) != 0) {
      info.kind = PathInfo::Kind::symlink; // dangling
      std::error_code ec;
      info.link_target = fs::read_symlink(host, ec).string();
      return info;
    }
  }
  info.kind = S_ISDIR(st.st_mode)   ? PathInfo::Kind::directory
              : S_ISREG(st.st_mode) ? PathInfo::Kind::file
                                    : PathInfo::Kind::other;
  info.size = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
  info.mode = st.st_mode & 07777;
  return info;
}

void copy_in(const fs::path& root, const std::string& directory, CopySource& source) {
  fs::path dir = resolve(root, directory, true);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw DriverError(
        DriverError::Kind::not_found,
        fmt::format("stub-external: {}: no such directory in the sandbox", directory));
  }
  Unpacker unpacker(dir);
  tar::Reader reader(unpacker);
  std::vector<char> buffer(k_piece);
  try {
    while (size_t n = source.read(buffer.data(), buffer.size())) {
      reader.feed(std::string_view(buffer.data(), n));
    }
    reader.finish();
  } catch (const tar::Error& e) {
    fail(fmt::format("copy_in: {}", e.what()));
  }
  unpacker.finish_directories();
}

void copy_out(const fs::path& root, const std::string& path, bool follow, CopySink& sink) {
  fs::path host = resolve(root, path, follow);
  struct stat st {};
  if (::lstat(host.c_str(), &st) != 0) {
    throw DriverError(
        DriverError::Kind::not_found,
        fmt::format("stub-external: {}: no such file or directory in the sandbox", path));
  }
  auto parts = components(path);
  // "/" itself goes as ".", as `tar -C / .` would write it.
  std::string name = parts.empty() ? "." : parts.back();
  if (name == ".." || name == ".") {
    name = host == root ? "." : host.filename().string();
  }
  Packer packer(root, sink, follow);
  packer.add(host, "/" + host.lexically_relative(root).string(), name);
  packer.finish();
}

} // namespace sandboxer::directory_copy
