#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::compose_ssh {

// The arguments after the compose command and its project options (`-p P --project-directory D
// -f ...`, as for up: v1 needs the files) that print the services' output: `logs --no-color
// --timestamps` with --follow and --tail as asked, and --since for the v2 plugin only (v1 has no
// such option: ComposeLogLines drops the older lines instead). An argv vector: nothing goes
// through a shell but ssh's own quoting.
std::vector<std::string> logs_arguments(const LogsRequest& request, bool plugin);

// Cuts compose's output into lines: "web-1  | 2026-12-06T20:00:01.123Z text" keeps its service
// prefix ("web-1  | text"), its time parsed out; compose writes a container's stdout on its own
// stdout and its stderr on its stderr (v2), which names the line's stream.
class ComposeLogLines {
public:
  ComposeLogLines(LogSink& sink, const char* stream, std::optional<TimePoint> since)
      : m_sink(sink), m_stream(stream), m_since(since) {}
  void feed(std::string_view bytes);
  void finish();

private:
  void emit(std::string_view text);
  LogSink& m_sink;
  const char* m_stream;
  std::optional<TimePoint> m_since;
  std::string m_pending;
};

} // namespace sandboxer::drivers::compose_ssh
