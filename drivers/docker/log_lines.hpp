#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::docker {

// Turns the engine's log stream, once demultiplexed (StreamDemuxer hands each frame to out() or
// err()), into whole lines with their times. The engine was asked for timestamps=1, so each line
// starts with an RFC 3339 time and a space; a frame may end mid-line and a line may span frames,
// so each stream keeps its own unfinished line until its newline (or finish()).
class TimestampedLines : public ExecIo {
public:
  explicit TimestampedLines(LogSink& sink) : m_sink(sink) {}
  void out(std::string_view bytes) override { feed(m_stdout, "stdout", bytes); }
  void err(std::string_view bytes) override { feed(m_stderr, "stderr", bytes); }
  // The stream ended: a last line without its newline is still a line.
  void finish();

private:
  void feed(std::string& pending, const char* stream, std::string_view bytes);
  void emit(const char* stream, std::string_view text);

  LogSink& m_sink;
  std::string m_stdout;
  std::string m_stderr;
};

} // namespace sandboxer::drivers::docker
