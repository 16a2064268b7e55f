#pragma once

#include <optional>
#include <string>

#include "core/ledger/record.hpp"

// The hash chain of a record's history (docs/evidence.md). Entry i carries in `prev` the SHA-256
// of entry i-1's canonical form; entry 0 that of {"sandbox":ID}; the record's `chain_head` is the
// hash of its last entry. Changing, removing or reordering any entry breaks the chain at that
// point, and the check needs nothing but the record. The first entry's details also seal the
// fields fixed at creation (`sealed`).
namespace sandboxer::chain {

// The entry as JSON with its keys sorted, no whitespace, UTF-8 unescaped (Python's
// json.dumps(e, sort_keys=True, separators=(",", ":"), ensure_ascii=False)).
std::string canonical(const HistoryEntry& entry);
// "sha256:" + 64 hex digits.
std::string hash_of(const HistoryEntry& entry);
std::string genesis(const std::string& sandbox_id);

// Gives every entry without `prev` its link, and sets chain_head. A new entry links to the
// recorded head, not to a recomputed hash, so that an entry altered in the file stays detectable
// after later commits. Untouched records cost one comparison.
void seal(SandboxRecord& record);

struct Break {
  size_t index = 0; // the entry whose `prev` does not match; history.size(): the head
  std::string expected;
  std::string found;
};
// The first break in the record's chain, or nothing when it holds.
std::optional<Break> verify(const SandboxRecord& record);

// What in the record disagrees with its chain, or nothing: its `state` must be where its history
// ends, and the fields fixed at creation (owner, profile, policy, driver, spec, created_at,
// labels) must equal those seal() put into the first entry's details (`sealed`). Records sealed
// before that have no `sealed` member; only their state is checked.
std::optional<std::string> unsealed_change(const SandboxRecord& record);

} // namespace sandboxer::chain
