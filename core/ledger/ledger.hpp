#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <sandboxer/clock.hpp>
#include <sandboxer/duration.hpp>

#include "core/errors.hpp"
#include "core/ledger/ledger_store.hpp"
#include "core/ledger/record.hpp"

namespace sandboxer {

// The ledger as callers use it: a handle on a LedgerStore. `Ledger(state_dir, lock_timeout)` is
// the local files under a state directory; a fleet's shared store plugs in through the other
// constructor, and no caller changes.
//
// Reads take no lock. Every read-modify-write goes through a Transaction, which holds the store's
// exclusive lock with a bounded wait; commit() is atomic: a crash at any instant leaves the old
// or the new ledger, never a torn one.
class Ledger {
public:
  Ledger(std::filesystem::path state_dir, Seconds lock_timeout);
  explicit Ledger(std::shared_ptr<LedgerStore> store);

  const std::filesystem::path& state_dir() const { return m_store->state_dir(); }
  // Where the ledger is, for messages.
  std::string location() const { return m_store->location(); }
  LedgerStore& store() const { return *m_store; }

  // The live part: resident records. Throws LedgerError if it is corrupt, unreadable or of a
  // newer schema (never overwriting it). A missing ledger reads as empty.
  LedgerData read(ReadScope scope = ReadScope::whole) const { return m_store->read(scope); }
  // The resident records one at a time, keeping none.
  void scan(ReadScope scope, const std::function<void(SandboxRecord&)>& visit) const;
  void scan(Records which, ReadScope scope,
            const std::function<bool(SandboxRecord&)>& visit) const {
    m_store->scan(which, scope, visit);
  }
  // Any record, live or closed: see LedgerStore::find.
  std::optional<SandboxRecord> find(const std::string& id_or_name) const {
    return m_store->find(id_or_name);
  }

  class Transaction {
  public:
    LedgerData& data() { return m_impl->data(); }
    SandboxRecord* find(const std::string& id_or_name) { return m_impl->find(id_or_name); }
    LedgerStore::Transaction& store() { return *m_impl; }
    LedgerStore::Transaction* operator->() { return m_impl.get(); }
    void commit() { m_impl->commit(); }

  private:
    friend class Ledger;
    explicit Transaction(std::unique_ptr<LedgerStore::Transaction> impl)
        : m_impl(std::move(impl)) {}
    std::unique_ptr<LedgerStore::Transaction> m_impl;
  };

  // Locks (throws LockTimeoutError naming the holder) and reads the live part.
  Transaction begin() const { return Transaction(m_store->begin()); }

  // The ledger id, creating and committing the ledger when it does not exist yet.
  std::string ensure_id() const;

private:
  std::shared_ptr<LedgerStore> m_store;
};

} // namespace sandboxer
