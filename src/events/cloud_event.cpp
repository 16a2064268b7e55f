// What each history entry is as a lifecycle event, and its CloudEvents 1.0 form (docs/events.md).
#include <fmt/format.h>

#include <sandboxer/events.hpp>
#include <sandboxer/owner.hpp>
#include <sandboxer/public_json.hpp>
#include <sandboxer/sha256.hpp>

namespace sandboxer::events {

std::string kind_of(const SandboxRecord& record, size_t index) {
  const HistoryEntry& entry = record.history.at(index);
  const auto& details = entry.details;
  auto has = [&](const char* key) { return details.is_object() && details.contains(key); };
  if (!entry.from) {
    return entry.to == State::orphaned ? "orphan.found" : "created";
  }
  State from = *entry.from;
  if (has("repair")) {
    return "repaired";
  }
  if (has("exec")) {
    return details["exec"].contains("exit_code") ? "exec.finished" : "exec.started";
  }
  if (has("expiring")) {
    return "expiring";
  }
  if (has("retention")) {
    return "snapshot.removed";
  }
  switch (entry.to) {
  case State::creating:
    return "restoring"; // restore --in-place; a new sandbox's first entry has no `from`
  case State::snapshotting:
    return "snapshotting";
  case State::destroying:
    return "destroying";
  case State::destroyed:
    return "destroyed";
  case State::failed:
    return "failed";
  case State::orphaned:
    return "orphan.found";
  case State::expired:
    return from == State::expired ? "destroy.failed" : "expired";
  case State::running:
    break;
  }
  if (from == State::creating) {
    return has("snapshot") ? "restored" : "ready";
  }
  if (from == State::snapshotting) {
    return has("snapshot") ? "snapshotted" : "snapshot.failed";
  }
  if (from == State::destroying) {
    return "destroy.failed";
  }
  if (has("to")) {
    return "extended";
  }
  return "updated";
}

nlohmann::json cloud_event(const SandboxRecord& record, size_t index, const std::string& ledger_id,
                           std::uint64_t sequence) {
  const HistoryEntry& entry = record.history.at(index);
  nlohmann::json data = {
      {"sandbox", public_json(record, entry.time, false)},
      {"from", entry.from ? nlohmann::json(to_string(*entry.from)) : nlohmann::json()},
      {"to", to_string(entry.to)},
      {"actor", entry.actor},
      {"reason", entry.reason},
      {"details", entry.details},
  };
  // The timings are part of the evidence in the history entry; events lift them out.
  for (const char* timing : {"duration_ms", "driver_ms"}) {
    data[timing] = entry.details.is_object() && entry.details.contains(timing)
                       ? entry.details[timing]
                       : nlohmann::json();
  }
  return {
      {"specversion", "1.0"},
      {"id", entry.event_id},
      {"source", fmt::format("sandboxer://{}/{}", host_name(), ledger_id)},
      {"type", "dev.sandboxer.sandbox." + entry.event},
      {"subject", record.id},
      {"time", format_time(entry.time)},
      {"datacontenttype", "application/json"},
      {"sequence", fmt::format("{:020}", sequence)},
      {"data", std::move(data)},
  };
}

std::string sink_key(const nlohmann::json& sink) {
  return fmt::format("{}-{}", sink.value("type", "sink"), sha256_hex(sink.dump()).substr(0, 16));
}

} // namespace sandboxer::events
