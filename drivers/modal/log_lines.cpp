#include "drivers/modal/log_lines.hpp"

#include <algorithm>
#include <cmath>

namespace sandboxer::drivers::modal {

std::optional<std::string> stream_of(int file_descriptor, int requested) {
  if (file_descriptor == k_fd_unspecified) {
    file_descriptor = requested;
  }
  if (file_descriptor == k_fd_stdout) {
    return "stdout";
  }
  if (file_descriptor == k_fd_stderr) {
    return "stderr";
  }
  return std::nullopt;
}

std::optional<std::int64_t> nanos_of(const LogChunk& chunk) {
  if (chunk.timestamp_ns > 0) {
    return static_cast<std::int64_t>(chunk.timestamp_ns);
  }
  if (chunk.timestamp > 0 && std::isfinite(chunk.timestamp) && chunk.timestamp < 9e9) {
    // Whole seconds and the fraction apart: a double has no nanoseconds to spare for both.
    const double whole = std::floor(chunk.timestamp);
    return static_cast<std::int64_t>(whole) * 1'000'000'000 +
           std::llround((chunk.timestamp - whole) * 1e9);
  }
  return std::nullopt;
}

namespace {

TimedLine make_line(const std::string& stream, std::string text, std::int64_t nanos) {
  if (!text.empty() && text.back() == '\r') {
    text.pop_back();
  }
  TimedLine out;
  out.nanos = nanos;
  out.line.stream = stream;
  out.line.text = std::move(text);
  if (nanos > 0) {
    // Floored to the second (TimePoint's unit), also before 1970.
    out.line.time =
        TimePoint(std::chrono::floor<std::chrono::seconds>(std::chrono::nanoseconds(nanos)));
  }
  return out;
}

} // namespace

std::vector<TimedLine> LineCutter::feed(const std::string& stream, const LogChunk& chunk) {
  Partial& partial = m_partial[stream];
  if (auto nanos = nanos_of(chunk)) {
    partial.last_nanos = *nanos;
  }
  std::vector<TimedLine> out;
  const std::string& data = chunk.data;
  size_t start = 0;
  while (start < data.size()) {
    if (!partial.open) {
      partial.open = true;
      partial.nanos = partial.last_nanos;
    }
    size_t newline = data.find('\n', start);
    if (newline == std::string::npos) {
      partial.text.append(data, start, std::string::npos);
      break;
    }
    partial.text.append(data, start, newline - start);
    out.push_back(make_line(stream, std::move(partial.text), partial.nanos));
    partial.text.clear();
    partial.open = false;
    start = newline + 1;
  }
  return out;
}

std::vector<TimedLine> LineCutter::flush() {
  std::vector<TimedLine> out;
  for (auto& [stream, partial] : m_partial) {
    if (partial.open) {
      out.push_back(make_line(stream, std::move(partial.text), partial.nanos));
      partial.text.clear();
      partial.open = false;
    }
  }
  return out;
}

std::vector<LogLine> merge_lines(std::vector<TimedLine> lines, const LogsRequest& request) {
  std::stable_sort(lines.begin(), lines.end(),
                   [](const TimedLine& a, const TimedLine& b) { return a.nanos < b.nanos; });
  std::vector<LogLine> out;
  out.reserve(lines.size());
  for (auto& timed : lines) {
    out.push_back(std::move(timed.line));
  }
  return select_log_lines(std::move(out), request);
}

} // namespace sandboxer::drivers::modal
