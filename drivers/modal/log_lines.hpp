#pragma once

// Modal's sandbox logs (SandboxGetLogs, a stream of TaskLogsBatch) as sandboxer's log lines: the
// part of the modal driver's `logs` that needs no server, so that it is tested without gRPC.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::modal {

// Modal's FileDescriptor values (modal-api.proto).
inline constexpr int k_fd_unspecified = 0;
inline constexpr int k_fd_stdout = 1;
inline constexpr int k_fd_stderr = 2;

// One TaskLogs item, with the fields the driver reads.
struct LogChunk {
  int file_descriptor = k_fd_unspecified;
  std::string data; // a piece of output: part of a line, or several
  std::uint64_t timestamp_ns = 0;
  double timestamp = 0; // seconds since the epoch, when timestamp_ns is not set
};

// "stdout" or "stderr" for a chunk read from the stream of `requested`; an item that names no
// descriptor is of the stream it came on. Modal's own messages (FILE_DESCRIPTOR_INFO, ...) are not
// the sandbox's output: nullopt.
std::optional<std::string> stream_of(int file_descriptor, int requested);

// When the chunk was stamped, in nanoseconds since the epoch: timestamp_ns, else timestamp; none
// when it carries neither.
std::optional<std::int64_t> nanos_of(const LogChunk& chunk);

// A line and the exact time that orders it among the lines of the other stream.
struct TimedLine {
  std::int64_t nanos = 0;
  LogLine line;
};

// Cuts the chunks of each stream into lines: a chunk may end inside a line or hold several. A
// line has the time of the chunk it began in (a chunk without one: the stream's last time). Its
// line ending ("\n" or "\r\n") is dropped.
class LineCutter {
public:
  std::vector<TimedLine> feed(const std::string& stream, const LogChunk& chunk);
  // The unfinished last line of each stream (output that did not end with a newline).
  std::vector<TimedLine> flush();

private:
  struct Partial {
    std::string text;
    std::int64_t nanos = 0;
    bool open = false; // a line has begun
    std::int64_t last_nanos = 0;
  };
  std::map<std::string, Partial> m_partial;
};

// The lines of both streams in time order (stable: a stream's own order is kept), with the
// request's `since` and `tail` applied.
std::vector<LogLine> merge_lines(std::vector<TimedLine> lines, const LogsRequest& request);

} // namespace sandboxer::drivers::modal
