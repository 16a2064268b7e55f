#include "drivers/docker/log_lines.hpp"

namespace sandboxer::drivers::docker {

void TimestampedLines::feed(std::string& pending, const char* stream, std::string_view bytes) {
  pending.append(bytes);
  size_t start = 0;
  for (size_t newline; (newline = pending.find('\n', start)) != std::string::npos;
       start = newline + 1) {
    emit(stream, std::string_view(pending).substr(start, newline - start));
  }
  pending.erase(0, start);
}

void TimestampedLines::finish() {
  if (!m_stdout.empty()) {
    emit("stdout", m_stdout);
    m_stdout.clear();
  }
  if (!m_stderr.empty()) {
    emit("stderr", m_stderr);
    m_stderr.clear();
  }
}

void TimestampedLines::emit(const char* stream, std::string_view text) {
  LogLine line;
  line.stream = stream;
  // "2026-12-06T20:04:36.123456789Z text": a line the engine did not stamp is kept whole.
  size_t space = text.find(' ');
  if (space != std::string_view::npos) {
    if (auto time = parse_time(text.substr(0, space))) {
      line.time = *time;
      text.remove_prefix(space + 1);
    }
  }
  if (!text.empty() && text.back() == '\r') {
    text.remove_suffix(1); // a tty's line ending
  }
  line.text = std::string(text);
  m_sink.line(line);
}

} // namespace sandboxer::drivers::docker
