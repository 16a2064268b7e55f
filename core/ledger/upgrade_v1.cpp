// Schema 1 -> 2 for one record, in memory (docs/ledger-format.md, "Migration"). History entries
// are evidence: their text is kept as it was; only the new typed fields are filled in.
#include "core/ledger/document.hpp"

namespace sandboxer::ledger_format {
namespace {

using json = nlohmann::json;

// Schema 1 entries written before lifecycle events existed have no event kind: it is told from
// the transition and the details, as the events code of that time did. Used for nothing else.
EventKind guess_event_kind(const SandboxRecord& record, size_t index) {
  const HistoryEntry& entry = record.history.at(index);
  const auto& details = entry.details;
  auto has = [&](const char* key) { return details.is_object() && details.contains(key); };
  if (!entry.from) {
    return entry.to == State::orphaned ? EventKind::orphan_found : EventKind::created;
  }
  const State from = *entry.from;
  if (has("repair")) {
    return EventKind::repaired;
  }
  if (has("exec")) {
    return details["exec"].contains("exit_code") ? EventKind::exec_finished
                                                 : EventKind::exec_started;
  }
  if (has("expiring")) {
    return EventKind::expiring;
  }
  if (has("retention") || has("snapshot_removed")) {
    return EventKind::snapshot_removed;
  }
  switch (entry.to) {
  case State::creating:
    return EventKind::restoring;
  case State::snapshotting:
    return EventKind::snapshotting;
  case State::destroying:
    return EventKind::destroying;
  case State::destroyed:
    return EventKind::destroyed;
  case State::failed:
    return EventKind::failed;
  case State::orphaned:
    return EventKind::orphan_found;
  case State::expired:
    return from == State::expired ? EventKind::destroy_failed : EventKind::expired;
  case State::running:
    break;
  case State::paused:
  case State::pausing:
  case State::resuming:
  case State::pooled:
    return EventKind::updated; // schema 1 had no pause nor pools: never reached
  }
  if (from == State::creating) {
    return has("snapshot") ? EventKind::restored : EventKind::ready;
  }
  if (from == State::snapshotting) {
    return has("snapshot") ? EventKind::snapshotted : EventKind::snapshot_failed;
  }
  if (from == State::destroying) {
    return EventKind::destroy_failed;
  }
  return has("to") ? EventKind::extended : EventKind::updated;
}

std::optional<std::string> string_at(const json& details, const char* key) {
  const auto it = details.find(key);
  return it != details.end() && it->is_string() ? std::optional(it->get<std::string>())
                                                : std::nullopt;
}

// A v1 creation entry's duration ("1h"); text that is no duration is left out, as v1 never
// checked it.
std::optional<Seconds> duration_at(const json& details, const char* key) {
  const auto text = string_at(details, key);
  return text ? parse_duration(*text) : std::nullopt;
}

} // namespace

void upgrade_record_from_v1(SandboxRecord& record) {
  for (size_t i = 0; i < record.history.size(); ++i) {
    // Entries committed since events have their kind (and an id); older ones do not.
    if (record.history[i].event_id.empty()) {
      record.history[i].event = guess_event_kind(record, i);
    }
  }
  if (record.history.empty() || !record.history.front().details.is_object()) {
    return;
  }
  const json& details = record.history.front().details;
  CreationPolicy& policy = record.policy;
  policy.ttl = duration_at(details, "ttl");
  policy.ttl_max = duration_at(details, "ttl_max");
  policy.ttl_requested = duration_at(details, "ttl_requested");
  policy.capped = string_at(details, "capped");
  if (auto it = details.find("snapshots_keep"); it != details.end() && it->is_number_unsigned()) {
    policy.snapshots_keep = it->get<std::uint64_t>();
  }
  if (auto it = details.find("events"); it != details.end() && it->is_array()) {
    policy.events = *it;
  }
}

} // namespace sandboxer::ledger_format
