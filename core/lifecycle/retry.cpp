// The arithmetic of a failed reap destroy's retries, from the record's own history.
#include "core/lifecycle/retry.hpp"

#include <algorithm>

namespace sandboxer {

// The failures of the current run of attempts: the trailing `expired` entries written by a failed
// destroy (they carry next_attempt_at). An extend in between starts the count again.
int failed_attempts(const SandboxRecord& record) {
  int count = 0;
  for (auto it = record.history.rbegin(); it != record.history.rend(); ++it) {
    if (it->to != State::expired) {
      break;
    }
    if (it->details.contains("next_attempt_at")) {
      ++count;
    }
  }
  return count;
}

std::optional<TimePoint> next_attempt_at(const SandboxRecord& record) {
  if (record.state != State::expired || record.history.empty()) {
    return std::nullopt;
  }
  const auto& last = record.history.back();
  auto it = last.details.find("next_attempt_at");
  if (it == last.details.end() || !it->is_string()) {
    return std::nullopt;
  }
  return parse_time(it->get<std::string>());
}

Seconds backoff_after(int attempt, Seconds base, Seconds max) {
  Seconds wait = base;
  for (int i = 1; i < attempt && wait < max; ++i) {
    wait *= 2;
  }
  return std::min(wait, max);
}

} // namespace sandboxer
