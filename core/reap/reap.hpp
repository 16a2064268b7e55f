#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/clock.hpp>
#include <sandboxer/duration.hpp>

#include "core/errors.hpp"
#include "core/ledger/ledger.hpp"
#include "core/lifecycle/lifecycle.hpp"
#include "core/profile/profile.hpp"

namespace sandboxer {

// How `reap` treats backend resources that carry this ledger's label but have no live record.
enum class OrphanMode { off, report, destroy };

struct ReapOptions {
  bool dry_run = false;
  int parallel = 4;
  std::optional<int> max_destroy;
  Seconds grace{0};
  // Our clock may run ahead of the one that set the deadline: a sandbox is due only once
  // now >= expires_at + grace + skew, so a skewed clock never reaps early (docs/cron.md).
  Seconds skew{30};
  // A record left in creating, destroying or snapshotting for longer than this, by a process that
  // is gone, is checked against its backend and settled.
  Seconds stuck_after{600};
  // Destroyed records older than this are pruned.
  Seconds keep_history{7 * 24 * 3600};
  // A failed destroy is retried after backoff_base * 2^(attempt-1), at most backoff_max.
  Seconds backoff_base{60};
  Seconds backoff_max{3600};
  // A shared ledger: how long this reaper's claim on a sandbox it destroys stands.
  Seconds claim_lease{600};
  OrphanMode orphans = OrphanMode::off;
  // A running sandbox whose deadline is this close gets one `expiring` entry (and event) per
  // deadline; 0 turns the warning off.
  Seconds expiring_window{600};
  // Profiles whose drivers are asked for orphans, besides the drivers of the ledger's records.
  std::vector<Profile> profiles;
  // The profiles whose warm pools this run refills after its destroys (docs/pools.md); a dry run
  // lists the fills it would make.
  std::vector<Profile> pools;
  // `reap --plan FILE`: execute exactly these destroy items of a saved dry run, nothing else.
  std::optional<nlohmann::json> plan;
};

// One line of the plan or the report.
struct ReapItem {
  std::string id; // the sandbox, or the backend id of an orphan without a record
  std::string name;
  std::string driver;
  std::string state; // the record's state when planned
  std::optional<TimePoint> expires_at;
  // destroy, pause (idle), snapshot+destroy (idle, ttl.paused_max), wait, repair, orphan,
  // vanished, prune, expiring, fill (a pool's refill: id is the pool)
  std::string action;
  std::string outcome; // planned, destroyed, failed, skipped, waiting, reported, running, ...
  std::string reason;  // why: "ttl expired at ...", the backend's error, "changed since the plan"
  size_t history_size = 0; // the record's history length when planned: "unchanged" in --plan
  std::string backend_id;
  int attempt = 0; // destroy attempts so far, this one included
  std::optional<TimePoint> next_attempt_at;
};

struct ReapReport {
  std::string ledger_id;
  TimePoint now;
  bool dry_run = false;
  // The margins the run judged "expired" with; a plan keeps them, so that executing it judges the
  // same way.
  std::optional<Seconds> skew;
  std::optional<Seconds> grace;
  std::vector<ReapItem> items;
  int destroyed = 0;
  int paused = 0;      // idle sandboxes paused (ttl.on_idle: pause)
  int snapshotted = 0; // snapshots taken before a destroy (on_idle / on_paused_max: snapshot)
  int filled = 0;      // pool members made by the refill
  int failures = 0;
  int repaired = 0;
  int orphans = 0; // found (reported or destroyed)
  int vanished = 0;
  int pruned = 0;
  int expiring = 0; // warned this run
  double duration_seconds = 0;
  // Filled by the caller (the reaper does not deliver): events delivered and still pending.
  std::uint64_t events_delivered = 0;
  std::uint64_t events_failed = 0;
  std::uint64_t events_pending = 0;
  std::map<std::string, int> states;  // records by state after the run
  std::optional<std::string> refused; // why nothing was destroyed (--max-destroy)
};

// --- rules (core/reap/rules.cpp): pure functions of a record and the time, unit-tested alone ---

// A sandbox is due when it is running or paused and now >= expires_at + grace + skew, or when an
// earlier run claimed it (expired) and its destroy failed: that one is retried whatever its
// deadline.
bool is_due(const SandboxRecord& record, TimePoint now, Seconds grace, Seconds skew);
// Whether `record` (running, with a deadline within `window` of `now`) has not been warned yet
// about its current deadline.
bool needs_expiring_warning(const SandboxRecord& record, TimePoint now, Seconds window);
// Whether the process that put `record` in its transitional state may still be working on it:
// its actor names this host and a live sandboxer pid.
bool owner_may_be_alive(const SandboxRecord& record, const std::string& this_host);
// The same for one actor ("alice@build-7 pid 4242"): none when it names no pid on this host
// (another host's process, or no pid), so that only the age of what it did can tell.
std::optional<bool> actor_may_be_alive(const std::string& actor, const std::string& this_host);
// A transitional record (creating, destroying, snapshotting) left longer than `stuck_after` by a
// process that is gone.
bool is_stuck(const SandboxRecord& record, TimePoint now, Seconds stuck_after,
              const std::string& this_host);

// --- idle (core/reap/idle.cpp): activity is what the history records, so the judgement can be
// made again from the ledger alone (docs/pause.md, "Idle") ---

struct Activity {
  TimePoint last;    // the newest activity, or when the sandbox last started running
  std::string what;  // exec, cp, forward, lease, resume, or start (no activity since)
  bool busy = false; // an exec or forward still open by a process that may be alive
};
// An exec or a forward that another host's process opened counts as busy for this long at most:
// the driver protocol's exec deadline.
inline constexpr Seconds k_open_elsewhere_max{24 * 3600};
Activity last_activity(const SandboxRecord& record, TimePoint now, const std::string& this_host);
// When `record` is running, unleased, has ttl.idle, nothing open, and its last activity is older
// than ttl.idle (+ skew): that activity, and the reason "idle since T (last exec at T); ttl.idle
// 2h" (reap's decision puts both in the history); else none.
struct Idle {
  Activity activity;
  std::string reason;
};
std::optional<Idle> idle_of(const SandboxRecord& record, TimePoint now, Seconds skew,
                            const std::string& this_host);

// What reap does with one record now, and why: the plan's item, the history's reasons.
struct Decision {
  std::string action;   // destroy, pause, snapshot+destroy
  std::string reason;   // the `expired` (or `pausing`) entry's: "ttl expired at T", "idle since .."
  std::string ended_by; // the `destroyed` entry's: "ttl expired", "lease lapsed", "idle", ...
  std::string snapshot_name; // snapshot+destroy: the snapshot's name (one per cause)
  nlohmann::json details = nlohmann::json::object(); // for the history entry: {"idle": {...}}
};
std::optional<Decision> decide(const SandboxRecord& record, TimePoint now,
                               const ReapOptions& options, const std::string& this_host);

// --- plans (core/reap/plan.cpp) ---

// The destroy, pause and snapshot+destroy items (and backoff waits) for `data` at `now`.
std::vector<ReapItem> plan_destroys(const LedgerData& data, TimePoint now,
                                    const ReapOptions& options);
nlohmann::json to_json(const ReapItem& item);
nlohmann::json to_json(const ReapReport& report);
// Reads the items of a saved `reap --dry-run -o json`; throws UsageError naming what is wrong.
ReapReport plan_from_json(const nlohmann::json& plan);
// Why an item of a saved plan must not run now, or none if it may.
std::optional<std::string> plan_item_blocker(const ReapItem& item, const SandboxRecord* record,
                                             TimePoint now, const ReapOptions& options);

// --- metrics (core/reap/metrics.cpp) ---

// Prometheus text format for node_exporter's textfile collector: sandboxes by state, this run's
// counts and duration, and totals carried over from the previous file at `path`.
std::string format_metrics(const ReapReport& report, const std::string& previous);

// Runs a whole reap: repair, orphans, destroys in parallel, prune. Every backend call and every
// transition goes through the Engine; the reaper only decides what to ask of it. The caller holds
// the reaper lock (cli/commands/reap.cpp) unless this is a dry run.
class Reaper {
public:
  Reaper(Engine& engine, const Ledger& ledger, const Clock& clock, std::string actor);
  // Never throws for a refusal: a run beyond --max-destroy destroys nothing and sets `refused`.
  ReapReport run(const ReapOptions& options);

private:
  Engine& m_engine;
  const Ledger& m_ledger;
  const Clock& m_clock;
  std::string m_actor;
};

} // namespace sandboxer
