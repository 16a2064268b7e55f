#include "core/ledger/ledger.hpp"

#include <algorithm>

#include "core/ledger/local_store.hpp"

namespace sandboxer {

Ledger::Ledger(std::filesystem::path state_dir, Seconds lock_timeout)
    : m_store(std::make_shared<LocalStore>(std::move(state_dir), lock_timeout)) {}

Ledger::Ledger(std::shared_ptr<LedgerStore> store) : m_store(std::move(store)) {}

void Ledger::scan(ReadScope scope, const std::function<void(SandboxRecord&)>& visit) const {
  m_store->scan(Records::resident, scope, [&](SandboxRecord& record) {
    visit(record);
    return true;
  });
}

std::vector<SandboxRecord*> LedgerStore::Transaction::pool_members(const std::string& key) {
  return pool_members_among(data().sandboxes, key);
}

std::vector<SandboxRecord*> pool_members_among(std::vector<SandboxRecord>& records,
                                               const std::string& key) {
  std::vector<SandboxRecord*> members;
  for (auto& record : records) {
    if (record.pool && record.pool->key == key && !record.pool->claimed_at &&
        (record.state == State::pooled || record.state == State::creating)) {
      members.push_back(&record);
    }
  }
  std::stable_sort(members.begin(), members.end(),
                   [](const auto* a, const auto* b) { return a->created_at < b->created_at; });
  return members;
}

std::string Ledger::ensure_id() const {
  if (auto data = read(ReadScope::whole); !data.ledger_id.empty()) {
    return data.ledger_id;
  }
  auto transaction = begin();
  if (transaction.data().ledger_id.empty()) {
    transaction.commit();
  }
  return transaction.data().ledger_id;
}

} // namespace sandboxer
