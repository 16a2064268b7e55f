#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::vm_packer {

// Where the last `n` lines of the file at `path` start, in bytes: a last line without its newline
// counts as one, a file of `n` lines or fewer starts at 0, and `n` = 0 is the file's end. Reads
// backwards from the end, so a long console costs only the lines asked for. A missing file is 0.
std::uint64_t start_of_last_lines(const std::filesystem::path& path, std::size_t n);

// A VM's serial console (QEMU's `-serial file:serial.log`) read as it grows. Each line becomes a
// LogLine of stream "console" with no time (QEMU stamps nothing), without its line ending: the
// '\r's before the '\n' (a serial console ends lines with "\r\n") go, a '\r' inside a line (a
// redrawn progress line) stays. A line that grows past 64 KiB without its newline is handed over
// in pieces of that size.
class ConsoleReader {
public:
  // Reads `path` from byte `offset` on. Throws DriverError, not_found when there is no such file.
  ConsoleReader(const std::filesystem::path& path, std::uint64_t offset);
  ~ConsoleReader();
  ConsoleReader(const ConsoleReader&) = delete;
  ConsoleReader& operator=(const ConsoleReader&) = delete;

  // Hands `sink` each line completed since the last call, and keeps a last line that has no
  // newline yet for later. Returns how many bytes it read. Throws Interrupted at a signal between
  // two reads of a long file, DriverError when the file cannot be read.
  std::size_t read(LogSink& sink);
  // Hands over the line kept back as it is so far (a prompt that waits for input, the last words
  // of a VM that stopped). What later completes it comes as a line of its own, unless it is only
  // the line ending.
  void flush(LogSink& sink);
  // Whether a line without its newline is kept back.
  bool holds_partial() const { return !m_partial.empty(); }

private:
  // `text` to `sink` as a line; `complete` when its newline was read.
  void hand_over(std::string_view text, bool complete, LogSink& sink);

  std::string m_path;
  int m_fd = -1;
  std::string m_partial;
  // The line being read was handed over in part already (flush, or a piece of a long line).
  bool m_mid_line = false;
};

} // namespace sandboxer::drivers::vm_packer
