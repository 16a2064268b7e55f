#pragma once
// The one thing the engine knows of events: a hook it calls around each ledger commit. The
// publisher (events.hpp) implements it; the engine never includes the rest of this room.

#include <cstddef>

#include "core/ledger/ledger_store.hpp"

namespace sandboxer {

// Where transitions become lifecycle events (events::Publisher; tests plug in their own).
class EventHook {
public:
  virtual ~EventHook() = default;
  // Under the ledger lock, before `tx` is committed: the history entries of `record` from
  // `first_new` on are new. Sets each one's event kind and id, and writes what must survive.
  virtual void stage(LedgerStore::Transaction& tx, SandboxRecord& record, size_t first_new) = 0;
  // After the commit, still under the lock.
  virtual void committed() = 0;
  // Outside the lock: a moment to deliver what is pending, within the hook's own time budget.
  virtual void deliver() = 0;
};

} // namespace sandboxer
