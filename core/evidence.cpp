#include "core/evidence.hpp"

#include "core/ledger/chain.hpp"

namespace sandboxer {
namespace {

using json = nlohmann::json;

json state_or_null(const std::optional<State>& state) {
  return state ? json(to_string(*state)) : json();
}

// What `copies` says of each `files.copied` entry: which bytes went in or came out (docs/cp.md).
constexpr const char* k_copy_keys[] = {"direction", "via",     "sources", "destination",
                                       "files",     "bytes",   "sha256",  "file_digests",
                                       "outcome",   "verified"};

// What `ports` says of each exposure and forward (docs/ports.md): which ports, where, until when.
constexpr const char* k_port_keys[] = {"ports", "host", "until", "how"};

} // namespace

nlohmann::json evidence_document(const SandboxRecord& record, const std::string& ledger_id,
                                 const std::string& ledger_location, TimePoint generated_at) {
  json transitions = json::array();
  json execs = json::array();
  json copies = json::array();
  json ports = json::array();
  json event_ids = json::array();
  json chain_entries = json::array();
  for (size_t i = 0; i < record.history.size(); ++i) {
    const HistoryEntry& entry = record.history[i];
    if (!entry.from || *entry.from != entry.to) {
      transitions.push_back({{"index", i},
                             {"time", format_time(entry.time)},
                             {"event", to_string(entry.event)},
                             {"from", state_or_null(entry.from)},
                             {"to", to_string(entry.to)},
                             {"actor", entry.actor},
                             {"reason", entry.reason}});
    }
    if (entry.event == EventKind::exec_finished && entry.details.is_object() &&
        entry.details.contains("exec")) {
      const json& exec = entry.details["exec"];
      execs.push_back({{"index", i},
                       {"time", format_time(entry.time)},
                       {"actor", entry.actor},
                       {"argv", exec.value("argv", json::array())},
                       {"exit_code", exec.value("exit_code", json())},
                       {"error", exec.value("error", json())}});
    }
    if (entry.event == EventKind::files_copied && entry.details.is_object() &&
        entry.details.contains("copy")) {
      const json& copy = entry.details["copy"];
      json item = {{"index", i}, {"time", format_time(entry.time)}, {"actor", entry.actor}};
      for (const char* key : k_copy_keys) {
        item[key] = copy.value(key, json());
      }
      copies.push_back(std::move(item));
    }
    if (entry.event == EventKind::ports_exposed || entry.event == EventKind::ports_forwarded ||
        entry.event == EventKind::ports_forward_ended) {
      json item = {{"index", i},
                   {"time", format_time(entry.time)},
                   {"actor", entry.actor},
                   {"event", to_string(entry.event)}};
      for (const char* key : k_port_keys) {
        item[key] = entry.details.is_object() ? entry.details.value(key, json()) : json();
      }
      ports.push_back(std::move(item));
    }
    if (!entry.event_id.empty()) {
      event_ids.push_back(entry.event_id);
    }
    chain_entries.push_back({{"index", i}, {"prev", entry.prev}, {"hash", chain::hash_of(entry)}});
  }
  json snapshots = json::array();
  for (const auto& snapshot : record.snapshots) {
    snapshots.push_back({{"id", snapshot.id},
                         {"name", snapshot.name},
                         {"backend_ref", snapshot.backend_ref},
                         {"size_bytes", snapshot.size_bytes ? json(*snapshot.size_bytes) : json()},
                         {"created_at", format_time(snapshot.created_at)}});
  }
  const auto broken = chain::verify(record);
  return {
      {"evidence_version", 1},
      {"generated_at", format_time(generated_at)},
      {"ledger", {{"id", ledger_id}, {"location", ledger_location}}},
      {"sandbox", record},
      {"profile",
       {{"name", record.profile.name},
        {"path", record.profile.path},
        {"hash", record.profile.hash}}},
      {"owner",
       {{"user", record.owner.user},
        {"host", record.owner.host},
        {"pid", record.owner.pid},
        {"ci", record.owner.ci}}},
      {"transitions", std::move(transitions)},
      {"execs", std::move(execs)},
      {"copies", std::move(copies)},
      {"ports", std::move(ports)},
      {"snapshots", std::move(snapshots)},
      {"event_ids", std::move(event_ids)},
      {"chain",
       {{"algorithm", "sha256"},
        {"genesis", chain::genesis(record.id)},
        {"head", record.chain_head},
        {"entries", std::move(chain_entries)},
        {"verified", !broken.has_value() && !chain::unsealed_change(record)}}},
  };
}

} // namespace sandboxer
