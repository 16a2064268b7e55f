#include "core/conformance/cp_tree.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <sys/stat.h>

#include <sandboxer/error.hpp>

#include "core/sha256.hpp"

namespace sandboxer::conformance {
namespace {

namespace fs = std::filesystem;

constexpr const char* k_old_file = "old.txt";
constexpr int64_t k_old_time = 1000000000; // 2001-09-09
constexpr size_t k_large_bytes = 50 * 1024 * 1024;

void write_file(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    throw Error(ExitCode::runtime, fmt::format("cannot write {}", path.string()));
  }
}

struct Seen {
  std::string kind; // file, directory, symlink
  std::string digest_or_target;
  unsigned mode = 0;
  int64_t mtime = 0;
};

std::map<std::string, Seen> inventory(const fs::path& root) {
  std::map<std::string, Seen> found;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path& path = it->path();
    struct stat st {};
    ::lstat(path.c_str(), &st);
    Seen seen;
    seen.mode = st.st_mode & 0777;
    seen.mtime = st.st_mtim.tv_sec;
    if (S_ISLNK(st.st_mode)) {
      seen.kind = "symlink";
      seen.digest_or_target = fs::read_symlink(path).string();
      seen.mode = 0; // a link's own bits mean nothing on Linux
    } else if (S_ISDIR(st.st_mode)) {
      seen.kind = "directory";
    } else {
      seen.kind = "file";
      std::ifstream in(path, std::ios::binary);
      Sha256 digest;
      std::string piece(1 << 20, '\0');
      while (in.read(piece.data(), static_cast<std::streamsize>(piece.size())) || in.gcount()) {
        digest.update(std::string_view(piece.data(), static_cast<size_t>(in.gcount())));
      }
      seen.digest_or_target = digest.hex();
    }
    found[fs::relative(path, root).string()] = seen;
  }
  return found;
}

} // namespace

void make_copy_tree(const fs::path& root, const TreeOptions& options) {
  fs::create_directories(root / "empty dir");
  std::string all_bytes;
  for (int round = 0; round < 4; ++round) {
    for (int b = 0; b < 256; ++b) {
      all_bytes.push_back(static_cast<char>(b));
    }
  }
  write_file(root / "all-bytes.bin", all_bytes);
  write_file(root / "empty", "");
  write_file(root / "name with spaces, é and 雪.txt", "a name that needs quoting\n");
  write_file(root / "run.sh", "#!/bin/sh\necho ran\n");
  fs::permissions(root / "run.sh", fs::perms(0755));
  fs::create_directories(root / "nested/deeper");
  write_file(root / "nested/deeper" / k_old_file, "kept its time\n");
  const timespec times[2] = {{k_old_time, 0}, {k_old_time, 0}};
  ::utimensat(AT_FDCWD, (root / "nested/deeper" / k_old_file).c_str(), times, 0);
  fs::create_symlink("all-bytes.bin", root / "link-to-all-bytes");
  if (options.large) {
    // Bytes that do not compress, made the same every run.
    std::ofstream out(root / "large.bin", std::ios::binary);
    uint64_t state = 0x9e3779b97f4a7c15ULL;
    std::string piece(1 << 20, '\0');
    for (size_t written = 0; written < k_large_bytes; written += piece.size()) {
      for (size_t i = 0; i < piece.size(); i += 8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        std::memcpy(piece.data() + i, &state, 8);
      }
      out.write(piece.data(), static_cast<std::streamsize>(piece.size()));
    }
  }
}

std::string tree_difference(const fs::path& original, const fs::path& copy) {
  const auto want = inventory(original);
  const auto got = inventory(copy);
  for (const auto& [name, seen] : want) {
    auto it = got.find(name);
    if (it == got.end()) {
      return fmt::format("\"{}\" is missing from the copy", name);
    }
    const Seen& other = it->second;
    if (other.kind != seen.kind) {
      return fmt::format("\"{}\" is a {} in the copy, a {} in the original", name, other.kind,
                         seen.kind);
    }
    if (other.digest_or_target != seen.digest_or_target) {
      return fmt::format("\"{}\" differs: {} in the copy, {} in the original", name,
                         other.digest_or_target, seen.digest_or_target);
    }
    if (seen.kind == "file" && (other.mode & 0111) != (seen.mode & 0111)) {
      return fmt::format("\"{}\" has mode {:o} in the copy, {:o} in the original", name, other.mode,
                         seen.mode);
    }
    if (name.ends_with(k_old_file) && other.mtime != seen.mtime) {
      return fmt::format("\"{}\" has modification time {} in the copy, {} in the original", name,
                         other.mtime, seen.mtime);
    }
  }
  for (const auto& [name, seen] : got) {
    if (!want.count(name)) {
      return fmt::format("the copy has \"{}\", which the original has not", name);
    }
  }
  return "";
}

} // namespace sandboxer::conformance
