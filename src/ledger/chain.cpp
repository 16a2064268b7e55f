#include "src/ledger/chain.hpp"

#include "src/sha256.hpp"

namespace sandboxer::chain {
namespace {

using json = nlohmann::json;

std::string digest(const std::string& text) {
  return "sha256:" + sha256_hex(text);
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
  return digest(canonical(entry));
}

std::string genesis(const std::string& sandbox_id) {
  return digest(json{{"sandbox", sandbox_id}}.dump());
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
    if (i == 0) {
      history[i].prev = genesis(record.id);
    } else if (i == first && !record.chain_head.empty()) {
      history[i].prev = record.chain_head;
    } else {
      history[i].prev = hash_of(history[i - 1]);
    }
  }
  record.chain_head = hash_of(history.back());
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
