#include <spdlog/spdlog.h>

#include "core/events/events.hpp"

namespace sandboxer::events {

Publisher::Publisher(const Ledger& ledger, nlohmann::json global_sinks, DeliveryPolicy policy)
    : m_ledger(ledger), m_global_sinks(std::move(global_sinks)),
      m_outbox(ledger.state_dir(), &ledger), m_delivery(m_outbox, policy) {}

void Publisher::stage(LedgerStore::Transaction& tx, SandboxRecord& record, size_t first_new) {
  m_outbox.stage(tx, record, first_new, m_global_sinks);
  for (size_t i = first_new; i < record.history.size(); ++i) {
    const auto& entry = record.history[i];
    spdlog::debug("event {} {} {} -> {} ({})", entry.event_id, to_string(entry.event), record.id,
                  to_string(entry.to), entry.reason);
  }
}

void Publisher::committed() {
  m_outbox.committed();
}

void Publisher::deliver() {
  m_delivery.deliver();
}

DeliveryCounts Publisher::flush() {
  if (m_outbox.has_prepared()) {
    // A writer holds the lock while its file is .prepared: once we have the lock, what is still
    // .prepared belongs to a process that died.
    auto tx = m_ledger.begin();
    m_outbox.settle_leftovers(tx.store());
  }
  return m_delivery.deliver();
}

} // namespace sandboxer::events
