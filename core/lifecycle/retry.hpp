#pragma once
// When a failed reap destroy is tried again. The engine writes the attempt and its next time into
// the record's history; reap reads them back to plan. Both rooms use this one, so neither
// includes the other for it.

#include <optional>

#include <sandboxer/clock.hpp>
#include <sandboxer/duration.hpp>

#include "core/ledger/record.hpp"

namespace sandboxer {

// Where a failed reap destroy is retried: base * 2^(attempt-1), at most max.
struct RetryPolicy {
  Seconds base{60};
  Seconds max{3600};
  // How long a reaper's claim on a sandbox stands (a shared ledger): past it, a reaper that died
  // mid-destroy is taken over. Longer than any one destroy may take.
  Seconds claim_lease{600};
};

// How many destroy attempts of reap failed so far (from the history).
int failed_attempts(const SandboxRecord& record);
// When the last failed attempt said the next one may run; none if no failure is pending.
std::optional<TimePoint> next_attempt_at(const SandboxRecord& record);
// The wait after the `attempt`-th failure: base * 2^(attempt-1), capped at `max`.
Seconds backoff_after(int attempt, Seconds base, Seconds max);

} // namespace sandboxer
