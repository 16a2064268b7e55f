#include "core/ledger/chain.hpp"

#include <array>
#include <fmt/format.h>

#include "core/sha256.hpp"

namespace sandboxer::chain {
namespace {

using json = nlohmann::json;

// The fields a record keeps from its creation on, as the ledger writes them.
constexpr std::array<const char*, 7> k_sealed_fields = {"owner", "profile",    "policy", "driver",
                                                        "spec",  "created_at", "labels"};

json sealed_fields(const SandboxRecord& record) {
  // Only the sealed fields are copied: verify calls this for every record, history and all.
  SandboxRecord bare;
  bare.owner = record.owner;
  bare.profile = record.profile;
  bare.policy = record.policy;
  bare.driver = record.driver;
  bare.spec = record.spec;
  bare.created_at = record.created_at;
  bare.labels = record.labels;
  const json all = bare;
  json out = json::object();
  for (const char* field : k_sealed_fields) {
    out[field] = all.contains(field) ? all[field] : json();
  }
  return out;
}

} // namespace

std::string canonical(const HistoryEntry& entry) {
  // nlohmann's objects are std::maps: dump() writes the keys sorted, as Python's sort_keys does
  // (UTF-8 byte order is code point order).
  const json form = {
      {"time", format_time(entry.time)},
      {"from", entry.from ? json(to_string(*entry.from)) : json()},
      {"to", to_string(entry.to)},
      {"actor", entry.actor},
      {"reason", entry.reason},
      {"details", entry.details},
      {"event", to_string(entry.event)},
      {"event_id", entry.event_id},
      {"prev", entry.prev},
  };
  return form.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string hash_of(const HistoryEntry& entry) {
  return sha256_digest(canonical(entry));
}

std::string genesis(const std::string& sandbox_id) {
  return sha256_digest(json{{"sandbox", sandbox_id}}.dump());
}

void seal(SandboxRecord& record) {
  auto& history = record.history;
  if (history.empty() || (!history.back().prev.empty() && !record.chain_head.empty())) {
    return;
  }
  size_t first = history.size();
  while (first > 0 && history[first - 1].prev.empty()) {
    --first;
  }
  for (size_t i = first; i < history.size(); ++i) {
    if (i > 0 && history[i].event == EventKind::claimed && history[i].details.is_object()) {
      // A pool member's claim fixes its owner, labels and policy anew (docs/pools.md): sealed
      // again here, on the chain after the first seal, so both stay provable.
      history[i].details["sealed"] = sealed_fields(record);
    }
    if (i == 0) {
      // The first entry carries the fields fixed at creation: an edit of the record's owner,
      // labels, profile, policy, spec or created_at then disagrees with its own chain.
      if (history[0].details.is_null()) {
        history[0].details = json::object();
      }
      if (history[0].details.is_object()) {
        history[0].details["sealed"] = sealed_fields(record);
      }
      history[i].prev = genesis(record.id);
    } else if (i == first && !record.chain_head.empty()) {
      history[i].prev = record.chain_head;
    } else {
      history[i].prev = hash_of(history[i - 1]);
    }
  }
  record.chain_head = hash_of(history.back());
}

std::optional<std::string> unsealed_change(const SandboxRecord& record) {
  const auto& history = record.history;
  if (history.empty()) {
    return std::nullopt;
  }
  if (record.state != history.back().to) {
    return fmt::format("its state is {}, but its history ends in {}: the state was edited",
                       to_string(record.state), to_string(history.back().to));
  }
  // The last seal: the first entry's, or a pool member's claim's.
  const json* sealed_at = nullptr;
  for (auto it = history.rbegin(); it != history.rend() && !sealed_at; ++it) {
    if (it->details.is_object() && it->details.contains("sealed")) {
      sealed_at = &it->details["sealed"];
    }
  }
  if (!sealed_at) {
    return std::nullopt; // sealed before the fields were (docs/evidence.md)
  }
  const json& sealed = *sealed_at;
  const json now = sealed_fields(record);
  for (const char* field : k_sealed_fields) {
    if (!sealed.contains(field) || sealed[field] != now[field]) {
      return fmt::format("its {} differs from the value sealed in its history: it was edited",
                         field);
    }
  }
  return std::nullopt;
}

std::optional<Break> verify(const SandboxRecord& record) {
  const auto& history = record.history;
  std::string expected = genesis(record.id);
  for (size_t i = 0; i < history.size(); ++i) {
    if (history[i].prev != expected) {
      return Break{i, expected, history[i].prev};
    }
    expected = hash_of(history[i]);
  }
  const std::string head = history.empty() ? std::string() : expected;
  if (record.chain_head != head) {
    return Break{history.size(), head, record.chain_head};
  }
  return std::nullopt;
}

} // namespace sandboxer::chain
