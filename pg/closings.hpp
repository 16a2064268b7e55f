#pragma once
// The chain of closed records of a PostgreSQL ledger (docs/fleet.md, "The chain of closed
// records"): the `closings` table, one row per closing or pruning of a record in commit order,
// each hashed with the row before, and the head in ledger_meta. The same chain as the local
// journal's (a closing hashes as a line of it would), so `ledger head` and `ledger verify --head`
// mean the same on both stores.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/ledger/ledger_store.hpp"
#include "pg/connection.hpp"

namespace sandboxer::ledger::pg {

// Where the chain is, read under the writers' turn; an empty head is the chain's start.
struct ChainPosition {
  std::string head;
  std::uint64_t lines = 0;
};

// A record being closed or pruned: its id and its `record` column's text.
struct ClosedRow {
  std::string id;
  std::string text;
};

// The statements that put `rows` on the chain after `position` (which they move), the meta
// row's head last: that one is guarded by the position it started from, so a writer that
// replays a commit after another one moved the chain writes nothing.
std::vector<Connection::Statement> chain_closings(ChainPosition& position,
                                                  const std::string& ledger_id,
                                                  const std::string& kind,
                                                  const std::vector<ClosedRow>& rows);
// The index, in what chain_closings returned, of the guarded statement.
inline std::size_t guard_of(const std::vector<Connection::Statement>& statements) {
  return statements.size() - 1;
}

// Walks the whole chain and compares it with the rows (verify).
void check_closings(Connection& connection, const std::string& where, VerifyReport& report,
                    const std::optional<ChainHead>& kept);

// The head now.
LedgerHead chain_head(Connection& connection);

} // namespace sandboxer::ledger::pg
