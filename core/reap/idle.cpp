// The idle rule: activity is read from the history the ledger already keeps (exec, cp, forward,
// run's lease, resume), never from the backend, so that `reap --dry-run` and a later audit reach
// the same judgement from the same ledger (docs/pause.md, "Idle").
#include <fmt/format.h>
#include <map>
#include <vector>

#include "core/reap/reap.hpp"

namespace sandboxer {
namespace {

// What an entry says about use, if anything: its word in "last exec at T".
const char* activity_of(EventKind kind) {
  switch (kind) {
  case EventKind::exec_started:
  case EventKind::exec_finished:
    return "exec";
  case EventKind::files_copied:
    return "cp";
  case EventKind::ports_forwarded:
  case EventKind::ports_forward_ended:
    return "forward";
  case EventKind::lease_ended:
    return "lease";
  case EventKind::resumed:
    return "resume";
  case EventKind::created:
  case EventKind::ready:
  case EventKind::restored:
    return "start";
  default:
    return nullptr;
  }
}

// Execs and forwards opened and not yet closed, by the actor (process) that opened them.
using OpenByActor = std::map<std::string, std::vector<TimePoint>>;

void open_or_close(OpenByActor& open, const HistoryEntry& entry, bool opens) {
  auto& started = open[entry.actor];
  if (opens) {
    started.push_back(entry.time);
  } else if (!started.empty()) {
    started.pop_back();
  }
}

// An open exec or forward keeps the sandbox busy while its process may still be at it: one of this
// host's while that pid is a sandboxer, another host's for at most the exec deadline.
bool any_busy(const OpenByActor& open, TimePoint now, const std::string& this_host) {
  for (const auto& [actor, started] : open) {
    for (TimePoint t : started) {
      auto alive = actor_may_be_alive(actor, this_host);
      if (alive ? *alive : now - t < k_open_elsewhere_max) {
        return true;
      }
    }
  }
  return false;
}

} // namespace

Activity last_activity(const SandboxRecord& record, TimePoint now, const std::string& this_host) {
  Activity activity{record.created_at, "start", false};
  OpenByActor execs, forwards;
  for (const auto& entry : record.history) {
    const char* what = activity_of(entry.event);
    if (!what) {
      continue;
    }
    activity.last = entry.time;
    activity.what = what;
    if (entry.event == EventKind::exec_started || entry.event == EventKind::exec_finished) {
      open_or_close(execs, entry, entry.event == EventKind::exec_started);
    } else if (entry.event == EventKind::ports_forwarded ||
               entry.event == EventKind::ports_forward_ended) {
      open_or_close(forwards, entry, entry.event == EventKind::ports_forwarded);
    }
  }
  activity.busy = record.lease.has_value() || any_busy(execs, now, this_host) ||
                  any_busy(forwards, now, this_host);
  return activity;
}

std::optional<Idle> idle_of(const SandboxRecord& record, TimePoint now, Seconds skew,
                            const std::string& this_host) {
  if (record.state != State::running || !record.policy.idle || record.lease) {
    return std::nullopt;
  }
  Activity activity = last_activity(record, now, this_host);
  if (activity.busy || now < activity.last + *record.policy.idle + skew) {
    return std::nullopt;
  }
  const std::string since = format_time(activity.last);
  const std::string limit = format_duration(*record.policy.idle);
  std::string reason;
  if (activity.what == "start") {
    reason = fmt::format("idle since {} (no activity since it started); ttl.idle {}", since, limit);
  } else if (activity.what == "lease") {
    reason =
        fmt::format("idle since {} (run's lease ended at {}); ttl.idle {}", since, since, limit);
  } else {
    reason = fmt::format("idle since {} (last {} at {}); ttl.idle {}", since, activity.what, since,
                         limit);
  }
  return Idle{std::move(activity), std::move(reason)};
}

} // namespace sandboxer
