#pragma once

#include "core/ledger/ledger_store.hpp"

// The fleet's events outbox (docs/fleet.md): the `events` rows that transactions write with the
// changes they describe, and per sink (`event_sinks`) the last event delivered and the lease of
// the one process delivering to it. Any machine delivers; the cursor is the fleet's, which holds
// because events are numbered in commit order under the writers' lock.
namespace sandboxer::ledger::pg {

class PgStore;

class PgOutbox : public KeptEvents {
public:
  explicit PgOutbox(const PgStore& store) : m_store(store) {}
  std::vector<KeptEvent> pending() const override;
  void remove(const std::vector<std::uint64_t>& sequences) const override;
  std::uint64_t cursor(const std::string& key) const override;
  bool take_sink(const std::string& key, Seconds lease) const override;
  bool advance(const std::string& key, std::uint64_t sequence, Seconds lease) const override;
  void release_sink(const std::string& key) const override;

private:
  const PgStore& m_store;
};

} // namespace sandboxer::ledger::pg
