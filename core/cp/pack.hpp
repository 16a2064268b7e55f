#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <sandboxer/tar.hpp>

// Reads files of this machine into a tar stream for a copy into a sandbox (`sandboxer cp SRC
// ID:DEST`, docs/cp.md), as it goes: a file is read in pieces, never whole, so memory stays
// bounded whatever its size. A symbolic link is copied as a link and never followed (with
// `follow`, what it points to is copied instead, a directory loop refused); sockets, fifos and
// devices are skipped and counted.
namespace sandboxer::cp {

class PackError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct PackOptions {
  bool follow = false; // --follow: copy what links point to
  // --owner: the uid and gid every entry carries, instead of the local file's.
  std::optional<std::pair<int64_t, int64_t>> owner;
};

class Packer {
public:
  Packer(tar::Writer& writer, PackOptions options = {});
  // Adds `source` (a file, a link, or a directory with everything under it) as `name` in the
  // stream ("." for a directory's contents alone).
  void add(const std::filesystem::path& source, const std::string& name);

  uint64_t files() const { return m_files; }
  uint64_t bytes() const { return m_bytes; }
  uint64_t skipped() const { return m_skipped; }

private:
  void add_path(const std::filesystem::path& path, const std::string& name, int depth);
  void add_file(const std::filesystem::path& path, tar::Entry entry);

  tar::Writer& m_writer;
  PackOptions m_options;
  std::set<std::pair<uint64_t, uint64_t>> m_open_directories; // device, inode: loops (--follow)
  uint64_t m_files = 0;
  uint64_t m_bytes = 0;
  uint64_t m_skipped = 0;
};

} // namespace sandboxer::cp
