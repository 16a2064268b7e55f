#include "drivers/compose-ssh/logs.hpp"

#include <fmt/format.h>

namespace sandboxer::drivers::compose_ssh {

std::vector<std::string> logs_arguments(const LogsRequest& request, bool plugin) {
  std::vector<std::string> argv = {"logs", "--no-color", "--timestamps"};
  if (request.follow) {
    argv.push_back("--follow");
  }
  if (request.since && plugin) {
    argv.insert(argv.end(), {"--since", format_time(*request.since)});
  }
  if (request.tail) {
    argv.insert(argv.end(), {"--tail", std::to_string(*request.tail)});
  }
  return argv;
}

void ComposeLogLines::feed(std::string_view bytes) {
  m_pending.append(bytes);
  size_t start = 0;
  for (size_t nl; (nl = m_pending.find('\n', start)) != std::string::npos; start = nl + 1) {
    emit(std::string_view(m_pending).substr(start, nl - start));
  }
  m_pending.erase(0, start);
}

void ComposeLogLines::finish() {
  if (!m_pending.empty()) {
    emit(m_pending);
    m_pending.clear();
  }
}

void ComposeLogLines::emit(std::string_view text) {
  if (!text.empty() && text.back() == '\r') {
    text.remove_suffix(1);
  }
  LogLine line;
  line.stream = m_stream;
  std::string prefix;
  if (size_t bar = text.find(" | "); bar != std::string_view::npos) {
    prefix = std::string(text.substr(0, bar + 3));
    text.remove_prefix(bar + 3);
  } else if (size_t bar1 = text.find(" |");
             bar1 != std::string_view::npos && bar1 + 2 == text.size()) {
    prefix = std::string(text.substr(0, bar1 + 2)); // an empty line of a service
    text = {};
  }
  if (prefix.empty() && text.starts_with("Attaching to ")) {
    return; // compose v1's own words, not a service's
  }
  if (size_t space = text.find(' '); space != std::string_view::npos) {
    if (auto time = parse_time(text.substr(0, space))) {
      line.time = *time;
      text.remove_prefix(space + 1);
    }
  }
  if (m_since && line.time && *line.time < *m_since) {
    return;
  }
  line.text = prefix + std::string(text);
  m_sink.line(line);
}

} // namespace sandboxer::drivers::compose_ssh
