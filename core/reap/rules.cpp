// The rules of reap as pure functions of a record and the time, so that each one is unit-tested
// with an injected clock (tests/unit/test_core_reap_rules.cpp).
#include <cerrno>
#include <charconv>
#include <csignal>
#include <fstream>
#include <regex>

#include "core/reap/reap.hpp"

namespace sandboxer {

bool is_due(const SandboxRecord& record, TimePoint now, Seconds grace, Seconds skew) {
  bool reapable = record.state == State::running || record.state == State::expired ||
                  record.state == State::paused;
  return reapable && record.expires_at && now >= *record.expires_at + grace + skew;
}

bool needs_expiring_warning(const SandboxRecord& record, TimePoint now, Seconds window) {
  // A lease's deadline is always near and always moving: its holder, not a warning, keeps it.
  if (window <= Seconds(0) || record.state != State::running || !record.expires_at ||
      record.lease || *record.expires_at <= now || *record.expires_at - now > window) {
    return false;
  }
  // Once per deadline: an extend moves it, and the new one is warned about in its turn.
  std::string deadline = format_time(*record.expires_at);
  for (const auto& entry : record.history) {
    if (entry.details.is_object() && entry.details.contains("expiring") &&
        entry.details["expiring"].value("expires_at", "") == deadline) {
      return false;
    }
  }
  return true;
}

bool owner_may_be_alive(const SandboxRecord& record, const std::string& this_host) {
  if (record.history.empty()) {
    return false;
  }
  // Actors read "alice@build-7 pid 4242" or "reaper (alice@build-7 pid 4242)".
  static const std::regex actor_pattern(R"(@([^ ()]+) pid ([0-9]+))");
  std::smatch match;
  const std::string& actor = record.history.back().actor;
  if (!std::regex_search(actor, match, actor_pattern) || match[1] != this_host) {
    return false; // another host, or no pid: only the age tells
  }
  // A pid too large for pid_t (an edited or corrupted record) names no live process.
  const std::string digits = match[2];
  pid_t pid = 0;
  if (std::from_chars(digits.data(), digits.data() + digits.size(), pid).ec != std::errc()) {
    return false;
  }
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno != EPERM)) {
    return false;
  }
  // A pid that lives on but is no longer sandboxer was reused by another program.
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return name.empty() || name.starts_with("sandboxer");
}

bool is_stuck(const SandboxRecord& record, TimePoint now, Seconds stuck_after,
              const std::string& this_host) {
  bool stuck_state = record.state == State::creating || record.state == State::destroying ||
                     record.state == State::snapshotting || record.state == State::pausing ||
                     record.state == State::resuming;
  if (!stuck_state || record.history.empty()) {
    return false;
  }
  return record.history.back().time + stuck_after <= now && !owner_may_be_alive(record, this_host);
}

} // namespace sandboxer
