#include <fmt/format.h>

#include "src/ledger/chain.hpp"
#include "src/ledger/ledger_store.hpp"

namespace sandboxer {

void check_chain(VerifyReport& report, const SandboxRecord& record, const std::string& where) {
  // Every copy's chain is checked; the counts are of records, each by its newest copy.
  auto [seen, first] = report.entries_by_id.try_emplace(record.id, record.history.size());
  if (first) {
    ++report.records;
  } else {
    report.entries -= seen->second;
    seen->second = record.history.size();
  }
  report.entries += record.history.size();
  if (auto changed = chain::unsealed_change(record)) {
    report.problems.push_back({record.id, -1, where, *changed});
  }
  auto broken = chain::verify(record);
  if (!broken) {
    return;
  }
  const bool head = broken->index == record.history.size();
  const std::string found = broken->found.empty() ? "missing" : broken->found;
  report.problems.push_back(
      {record.id, head ? -1 : static_cast<long>(broken->index), where,
       head ? fmt::format("chain_head is {}, but the last entry hashes to {}: the last entry was "
                          "changed or removed",
                          found, broken->expected)
            : fmt::format("history[{}].prev is {}, expected {}: history[{}] was changed, removed "
                          "or reordered",
                          broken->index, found, broken->expected,
                          broken->index == 0 ? 0 : broken->index - 1)});
}

} // namespace sandboxer
