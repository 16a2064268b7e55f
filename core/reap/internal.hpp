#pragma once

// The parts of a reap run, shared by core/reap/*.cpp only.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/reap/reap.hpp"

namespace sandboxer::reap {

// What one run works with.
struct Run {
  Engine& engine;
  const Ledger& ledger;
  const Clock& clock;
  const ReapOptions& options;
  std::string actor;
  std::string ledger_id;
  ReapReport& report;
  // The ledger as this run read it once at its start, kept up to date with the run's own
  // changes (settle_seen): every step plans from it instead of reading the whole file again.
  LedgerData seen;
};

// One item to run in the worker pool: an expired or idle sandbox's destroy, pause or
// snapshot+destroy, or an orphan's destroy.
struct Work {
  ReapItem item;
  std::optional<OrphanTarget> orphan;
  bool snapshotted = false; // snapshot+destroy: its snapshot was taken this run
};

// Whether an item's action is run by the pool (the others are reported only).
inline bool executes(const std::string& action) {
  return action == "destroy" || action == "pause" || action == "snapshot+destroy";
}
// Whether it ends the sandbox (counted against --max-destroy).
inline bool destroys(const std::string& action) {
  return action == "destroy" || action == "snapshot+destroy";
}

// The item of a record, as planned: its identity, state, deadline, history length and attempts.
ReapItem item_of(const SandboxRecord& record, std::string action);

// Engine::settle of `record` (a record of run.seen) as it was seen; on success `record` becomes
// the settled record, so that later steps of the run plan from it.
bool settle_seen(Run& run, SandboxRecord& record,
                 const std::function<void(SandboxRecord&)>& change);

// Runs one step of the run on one record. Whatever it throws (an odd record, a driver's surprise)
// becomes that record's failed item, logged and counted (exit 6), and the sweep goes on: nothing
// about one record may stop the others being reaped.
void guard_record(Run& run, const SandboxRecord& record, const char* action,
                  const std::function<void()>& step);

// Settles records stuck in creating, destroying or snapshotting (core/reap/repair.cpp).
void repair_stuck(Run& run);
// Reports orphans (or queues their destroy in `destroys`) and marks vanished records destroyed
// (core/reap/orphans.cpp).
void reconcile_orphans(Run& run, std::vector<Work>& destroys);
// Adds the `expiring` entry to sandboxes whose deadline entered the warning window
// (core/reap/expiring.cpp).
void warn_expiring(Run& run);

} // namespace sandboxer::reap
