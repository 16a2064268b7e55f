// The rules of reap as pure functions of a record and the time, so that each one is unit-tested
// with an injected clock (tests/unit/test_core_reap_rules.cpp).
#include <cerrno>
#include <charconv>
#include <csignal>
#include <fmt/format.h>
#include <fstream>
#include <regex>

#include "core/reap/reap.hpp"

namespace sandboxer {

bool is_due(const SandboxRecord& record, TimePoint now, Seconds grace, Seconds skew) {
  if (record.state == State::expired) {
    return true; // claimed by an earlier run (its TTL, or idle): the backoff alone paces it
  }
  bool reapable = record.state == State::running || record.state == State::paused ||
                  record.state == State::pooled;
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
  return !record.history.empty() &&
         actor_may_be_alive(record.history.back().actor, this_host).value_or(false);
}

std::optional<bool> actor_may_be_alive(const std::string& actor, const std::string& this_host) {
  // Actors read "alice@build-7 pid 4242" or "reaper (alice@build-7 pid 4242)".
  static const std::regex actor_pattern(R"(@([^ ()]+) pid ([0-9]+))");
  std::smatch match;
  if (!std::regex_search(actor, match, actor_pattern) || match[1] != this_host) {
    return std::nullopt; // another host, or no pid: only the age tells
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

namespace {

// A claimed sandbox whose destroy failed keeps the reason it was claimed for: the last `expired`
// entry's, without its attempt number.
Decision retry_decision(const SandboxRecord& record) {
  Decision decision{"destroy", deadline_reason(record), "ttl expired", {}, {}};
  for (auto it = record.history.rbegin(); it != record.history.rend(); ++it) {
    if (it->event == EventKind::expired) {
      static const std::regex attempt(R"( \(attempt [0-9]+\)$)");
      decision.reason = std::regex_replace(it->reason, attempt, "");
      if (it->details.is_object()) {
        decision.ended_by = it->details.value("ended_by", decision.ended_by);
      }
      break;
    }
  }
  return decision;
}

Decision due_decision(const SandboxRecord& record) {
  if (record.state == State::expired) {
    return retry_decision(record);
  }
  Decision decision{
      "destroy", deadline_reason(record), record.lease ? "lease lapsed" : "ttl expired", {}, {}};
  if (record.state == State::pooled) {
    // Never claimed within its max_age: replaced by a fresh one at the refill.
    decision.ended_by = "pool.max_age ran out";
    decision.reason = fmt::format(
        "pool member unclaimed since {}; pool.max_age ran out at {}",
        record.pool && record.pool->pooled_at ? format_time(*record.pool->pooled_at) : "-",
        record.expires_at ? format_time(*record.expires_at) : "-");
    return decision;
  }
  if (record.state != State::paused) {
    return decision;
  }
  const auto& paused_max = record.policy.paused_max;
  const auto& pause = record.pause;
  // ttl.max caps a paused deadline too: only a deadline that paused_max set is its to end.
  if (paused_max && pause && pause->at && record.expires_at &&
      *record.expires_at >= *pause->at + *paused_max) {
    decision.ended_by = fmt::format("ttl.paused_max {} ran out", format_duration(*paused_max));
    decision.reason =
        fmt::format("paused since {}; ttl.paused_max {} ran out at {}", format_time(*pause->at),
                    format_duration(*paused_max), format_time(*record.expires_at));
    if (record.policy.on_paused_max == "snapshot") {
      decision.action = "snapshot+destroy";
      decision.snapshot_name = "reap-paused-max";
    }
  } else {
    decision.reason += " while paused";
  }
  return decision;
}

} // namespace

std::optional<Decision> decide(const SandboxRecord& record, TimePoint now,
                               const ReapOptions& options, const std::string& this_host) {
  if (is_due(record, now, options.grace, options.skew)) {
    return due_decision(record);
  }
  auto idle = idle_of(record, now, options.skew, this_host);
  if (!idle) {
    return std::nullopt;
  }
  const Activity& activity = idle->activity;
  Decision decision{"destroy", idle->reason, "idle", {}, {}};
  decision.details = {{"idle",
                       {{"since", format_time(activity.last)},
                        {"last", activity.what},
                        {"ttl_idle", format_duration(*record.policy.idle)},
                        {"on_idle", record.policy.on_idle.empty() ? std::string("destroy")
                                                                  : record.policy.on_idle}}}};
  if (record.policy.on_idle == "pause") {
    decision.action = "pause";
  } else if (record.policy.on_idle == "snapshot") {
    decision.action = "snapshot+destroy";
    decision.snapshot_name = "reap-idle";
  }
  return decision;
}

} // namespace sandboxer
