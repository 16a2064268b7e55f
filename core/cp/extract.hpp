#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <sandboxer/tar.hpp>

#include "sdk/file_descriptor.hpp"

// Writes a tar stream that came out of a sandbox into a directory on this machine
// (`sandboxer cp ID:SRC DEST`, docs/cp.md). The stream is untrusted: nothing it names is written
// outside the destination. A name that is absolute or climbs with ".." is refused; no path is
// ever resolved through a symbolic link, neither one the stream made nor one that was there
// before (each directory is opened with O_NOFOLLOW, one component at a time); a symbolic link is
// written as a link and never followed. Each file is written under a temporary name beside its
// final one and renamed when its last byte is in, so an interrupted copy never leaves a
// truncated file under the real name; directories get their times once their contents are in.
namespace sandboxer::cp {

// A refused or failed extraction: the entry's path and why.
class ExtractError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct ExtractOptions {
  bool keep_owner = false; // chown to the stream's uid/gid (--owner, as root)
};

class Extractor : public tar::Sink {
public:
  // `destination` is an existing directory.
  Extractor(const std::filesystem::path& destination, ExtractOptions options = {});
  ~Extractor() override; // removes the file being written, if any

  void begin(const tar::Entry& entry) override;
  void data(std::string_view chunk) override;
  void end() override;
  // After the whole stream: the directories' modes and times.
  void finish();

  uint64_t files() const { return m_files; }
  uint64_t bytes() const { return m_bytes; }
  uint64_t skipped() const { return m_skipped; } // devices and fifos, never made here

private:
  struct Place {
    FileDescriptor parent; // the directory that holds it, opened without following links
    std::string name;
  };
  Place place_of(const std::string& path, bool create_parents);
  void discard_partial();
  uint32_t permission_bits(uint32_t mode) const;

  std::filesystem::path m_destination;
  ExtractOptions m_options;
  FileDescriptor m_root;
  // The file being written.
  tar::Entry m_entry;
  std::string m_temp_name;
  std::string m_final_name; // in m_parent
  FileDescriptor m_parent;
  FileDescriptor m_file;
  struct DirectoryTimes {
    std::string path;
    uint32_t mode;
    int64_t mtime;
  };
  std::vector<DirectoryTimes> m_directories;
  uint64_t m_files = 0;
  uint64_t m_bytes = 0;
  uint64_t m_skipped = 0;
};

// The components of a stream's path, "." and empty ones dropped; throws ExtractError for an
// absolute path or one with "..".
std::vector<std::string> safe_components(const std::string& path);

} // namespace sandboxer::cp
