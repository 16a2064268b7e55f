#pragma once
// The few file operations the local ledger is built from, each checked, each error naming the
// path and the system's reason.

#include <filesystem>
#include <string>
#include <string_view>

#include "core/errors.hpp"

namespace sandboxer::ledger_files {

std::string errno_text();

// The bytes of a file. A large one is mapped rather than copied: a fresh process then pays
// neither the copy nor the zeroing of megabytes of new pages. Mapping is safe because the live
// document is only replaced by rename, and journal segments are only appended to (readers stop
// at the committed offset).
class FileText {
public:
  FileText() = default;
  ~FileText();
  FileText(const FileText&) = delete;
  FileText& operator=(const FileText&) = delete;

  std::string_view view() const;
  // False when the file does not exist; throws LedgerError naming `what` and the path when it
  // cannot be read.
  bool load(const std::filesystem::path& path, std::string_view what = "ledger");

private:
  void* m_map = nullptr;
  size_t m_map_size = 0;
  std::string m_copy;
};

// Writes all of `text` to `fd`; on failure throws LedgerError "cannot write ledger: write PATH:
// REASON; FILE was not changed".
void write_all(int fd, std::string_view text, const std::filesystem::path& path,
               const std::filesystem::path& file);
[[noreturn]] void write_failed(const char* step, const std::filesystem::path& path,
                               const std::filesystem::path& file);
void fsync_directory(const std::filesystem::path& dir, const std::filesystem::path& file);

} // namespace sandboxer::ledger_files
