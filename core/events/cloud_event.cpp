// What each history entry is as a lifecycle event, and its CloudEvents 1.0 form (docs/events.md).
#include <fmt/format.h>

#include "core/events/events.hpp"
#include "core/owner.hpp"
#include "core/public_json.hpp"
#include "core/sha256.hpp"

namespace sandboxer::events {

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
      {"type", std::string(k_event_type_prefix) + to_string(entry.event)},
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
