#include <fmt/format.h>

#include "core/ledger/chain.hpp"
#include "core/ledger/ledger_store.hpp"

namespace sandboxer {

std::optional<ChainHead> parse_chain_head(std::string_view text) {
  const size_t colon = text.find(':');
  if (colon == 0 || colon == std::string_view::npos || colon > 19) {
    return std::nullopt;
  }
  ChainHead head;
  for (char c : text.substr(0, colon)) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    head.lines = head.lines * 10 + static_cast<std::uint64_t>(c - '0');
  }
  const std::string_view hash = text.substr(colon + 1);
  if (hash.size() != 7 + 64 || !hash.starts_with("sha256:") ||
      hash.substr(7).find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    return std::nullopt;
  }
  head.hash = std::string(hash);
  return head;
}

void check_chain(VerifyReport& report, const SandboxRecord& record, const std::string& where) {
  // Every copy's chain is checked, in the order they were written; the counts are of records,
  // each by its newest copy.
  const std::size_t size = record.history.size();
  auto [seen, first] = report.copies.try_emplace(record.id, VerifyReport::Copy{size, {}});
  if (first) {
    ++report.records;
  } else {
    // A record closed again (failed, then destroyed) is written again with more history: a later
    // copy that does not continue the earlier one's chain is an older copy put after a newer.
    const auto& before = seen->second;
    if (size <= before.entries || record.history[before.entries].prev != before.head) {
      report.problems.push_back(
          {record.id, -1, where,
           fmt::format("this copy does not continue the copy before it ({} entries, head {}): "
                       "an older copy was put after a newer one, or one of them was changed",
                       before.entries, before.head)});
    }
    report.entries -= before.entries;
    seen->second.entries = size;
  }
  seen->second.head = record.chain_head;
  report.entries += size;
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
