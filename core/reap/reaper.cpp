// One reap run: repair, orphans, the destroys in a pool of --parallel workers, retention. The
// Engine runs each destroy (lock, intent, driver, outcome, event); this file decides which.
#include <algorithm>
#include <atomic>
#include <fmt/format.h>
#include <mutex>
#include <numeric>
#include <random>
#include <spdlog/spdlog.h>
#include <thread>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "core/errors.hpp"
#include "core/owner.hpp"
#include "core/reap/internal.hpp"

namespace sandboxer {
namespace {

using reap::Run;
using reap::Work;

// A planned item judged on the live record now (under the ledger lock): its decision, or why it
// must not run: it changed since, it is neither due nor idle any more, it lives elsewhere, or its
// backoff holds.
struct Judgement {
  std::optional<Decision> decision;
  std::optional<std::string> blocked;
};

Judgement judge_item(const Run& run, const ReapItem& item, const SandboxRecord& record,
                     TimePoint now) {
  const ReapOptions& options = run.options;
  if (options.plan) {
    if (auto blocked = plan_item_blocker(item, &record, now, options)) {
      return {std::nullopt, blocked};
    }
  }
  auto decision = decide(record, now, options, host_name());
  if (!decision) {
    return {std::nullopt,
            fmt::format("neither due nor idle any more (now {})", to_string(record.state))};
  }
  if (decision->action != item.action) {
    return {std::nullopt, fmt::format("now due for {}, not {}", decision->action, item.action)};
  }
  if (!record.home_host.empty() && record.home_host != host_name()) {
    return {std::nullopt, fmt::format("lives on host {}, whose reaper ends it", record.home_host)};
  }
  if (auto next = next_attempt_at(record); next && now < *next) {
    return {std::nullopt, "next attempt not before " + format_time(*next)};
  }
  return {std::move(decision), std::nullopt};
}

EndVerdict verdict_of(const Decision& decision) {
  return {std::nullopt, decision.reason, decision.ended_by, decision.details};
}

// The destroy of `work`, judged under the lock by `judge`, into its item.
void destroy_item(Run& run, Work& work,
                  const std::function<EndVerdict(const SandboxRecord&)>& judge) {
  ReapItem& item = work.item;
  const ReapOptions& options = run.options;
  ExpiredDestroy result = run.engine.destroy_expired(
      item.id, judge, {options.backoff_base, options.backoff_max, options.claim_lease}, run.actor);
  item.attempt = result.attempt;
  item.next_attempt_at = result.next_attempt_at;
  switch (result.outcome) {
  case ExpiredDestroy::Outcome::destroyed:
    item.outcome = "destroyed";
    break;
  case ExpiredDestroy::Outcome::skipped:
    item.outcome = "skipped";
    item.reason = result.message;
    break;
  case ExpiredDestroy::Outcome::failed:
    item.outcome = "failed";
    item.reason = fmt::format("{} (attempt {}; next attempt at {})", result.message, result.attempt,
                              format_time(*result.next_attempt_at));
    break;
  }
}

// The judge of a plain destroy: the item may still run, and the reasons are the record's now.
EndVerdict judge_now(const Run& run, const ReapItem& item, const SandboxRecord& record) {
  Judgement judged = judge_item(run, item, record, run.clock.now());
  return judged.blocked ? EndVerdict{judged.blocked} : verdict_of(*judged.decision);
}

// The decision for a live item, read afresh (outside the lock: the engine's own transaction checks
// again), or the item's skip.
std::optional<std::pair<SandboxRecord, Decision>> fresh_decision(Run& run, Work& work) {
  auto record = run.ledger.find(work.item.id);
  if (!record) {
    work.item.outcome = "skipped";
    work.item.reason = "no longer in the ledger";
    return std::nullopt;
  }
  Judgement judged = judge_item(run, work.item, *record, run.clock.now());
  if (judged.blocked) {
    work.item.outcome = "skipped";
    work.item.reason = *judged.blocked;
    return std::nullopt;
  }
  return std::pair{std::move(*record), std::move(*judged.decision)};
}

// ttl.on_idle: pause. The engine's pause, blocked under its lock if the sandbox was used since.
void pause_item(Run& run, Work& work) {
  auto fresh = fresh_decision(run, work);
  if (!fresh) {
    return;
  }
  PauseOptions pause;
  pause.reason = fresh->second.reason;
  pause.cause = "idle";
  pause.actor = run.actor;
  pause.details = fresh->second.details;
  pause.blocker = [&](const SandboxRecord& record) {
    return judge_item(run, work.item, record, run.clock.now()).blocked;
  };
  try {
    run.engine.pause(work.item.id, pause);
    work.item.outcome = "paused";
  } catch (const ConflictError& e) {
    work.item.outcome = "skipped";
    work.item.reason = e.what();
  }
}

// on_idle / on_paused_max: snapshot. The snapshot first (one per cause: a retry after a failed
// destroy finds it taken), then the destroy, refused if anything but our own steps happened in
// between. A driver that cannot snapshot a paused sandbox gets it resumed for the snapshot.
void snapshot_then_destroy(Run& run, Work& work) {
  auto fresh = fresh_decision(run, work);
  if (!fresh) {
    return;
  }
  SandboxRecord& record = fresh->first;
  const Decision& decision = fresh->second;
  const std::string& name = decision.snapshot_name;
  SandboxRecord after = record;
  bool taken = std::any_of(record.snapshots.begin(), record.snapshots.end(),
                           [&](const SnapshotRecord& s) { return s.name == name; });
  if (!taken && !name.empty()) {
    try {
      after = run.engine.snapshot(record.id, name);
    } catch (const DriverError& e) {
      if (e.kind() != DriverError::Kind::unsupported || record.state != State::paused) {
        throw;
      }
      spdlog::info("reap {}: its driver cannot snapshot it paused: resuming it for the snapshot",
                   record.id);
      run.engine.resume(record.id,
                        "resume for the snapshot before its destroy (" + decision.reason + ")");
      after = run.engine.snapshot(record.id, name);
    }
    work.snapshotted = true;
  }
  const size_t expected = after.history.size();
  destroy_item(run, work, [&](const SandboxRecord& now_record) -> EndVerdict {
    if (now_record.history.size() != expected) {
      return {fmt::format("changed after its snapshot {} ({} history entries, {} expected)", name,
                          now_record.history.size(), expected)};
    }
    return verdict_of(decision);
  });
}

void run_one_unguarded(Run& run, Work& work);

// A step that throws anything fails its own item, never the worker thread (an exception escaping
// a std::thread would terminate the whole run).
void run_one(Run& run, Work& work) {
  try {
    run_one_unguarded(run, work);
  } catch (const std::exception& e) {
    work.item.outcome = "failed";
    work.item.reason = log::redact(e.what());
  }
}

void run_one_unguarded(Run& run, Work& work) {
  ReapItem& item = work.item;
  if (work.orphan) {
    try {
      if (run.engine.destroy_orphan(*work.orphan, run.actor)) {
        item.outcome = "destroyed";
      } else {
        item.outcome = "skipped";
        item.reason = "a live record appeared meanwhile";
      }
    } catch (const Error& e) {
      item.outcome = "failed";
      item.reason = log::redact(e.what());
    }
    return;
  }
  if (item.action == "pause") {
    pause_item(run, work);
  } else if (item.action == "snapshot+destroy") {
    snapshot_then_destroy(run, work);
  } else {
    destroy_item(run, work,
                 [&](const SandboxRecord& record) { return judge_now(run, item, record); });
  }
}

void execute(Run& run, std::vector<Work>& work) {
  // The order the workers take the work in; the report keeps the planned order.
  std::vector<size_t> order(work.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (run.ledger.store().shared()) {
    // Reapers of a fleet start together from cron and would walk the same due list in step,
    // colliding on every sandbox: each walks it in an order of its own, so that it mostly meets
    // sandboxes no other has yet, or ones another has already claimed (passed over without a
    // transaction).
    std::shuffle(order.begin(), order.end(), std::mt19937{std::random_device{}()});
  }
  std::atomic<size_t> next{0};
  std::mutex report_mutex;
  auto worker = [&] {
    for (size_t n = next++; n < work.size(); n = next++) {
      const size_t i = order[n];
      if (interrupt::requested()) {
        // A SIGTERM (systemd stopping the timer's unit, a CI cancel): no new destroy starts; the
        // ones under way finish and are recorded.
        work[i].item.outcome = "skipped";
        work[i].item.reason = "interrupted by " + interrupt::signal_name(interrupt::last_signal());
      } else {
        interrupt::Shield finishing;
        run_one(run, work[i]);
      }
      const ReapItem& item = work[i].item;
      std::lock_guard lock(report_mutex);
      run.report.snapshotted += work[i].snapshotted ? 1 : 0;
      if (item.outcome == "destroyed") {
        ++run.report.destroyed;
        spdlog::info("reap {}: destroyed ({}: {})", item.id, item.action, item.reason);
      } else if (item.outcome == "paused") {
        ++run.report.paused;
        spdlog::info("reap {}: paused ({})", item.id, item.reason);
      } else if (item.outcome == "failed") {
        ++run.report.failures;
        spdlog::error("reap {}: {} failed: {}", item.id, item.action, item.reason);
      } else {
        spdlog::info("reap {}: skipped: {}", item.id, item.reason);
      }
    }
  };
  int count = std::max(1, std::min<int>(run.options.parallel, static_cast<int>(work.size())));
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) {
    threads.emplace_back(worker);
  }
  for (auto& thread : threads) {
    thread.join();
  }
  for (auto& w : work) {
    run.report.items.push_back(std::move(w.item));
  }
}

// --keep-history: closed records (destroyed, failed) whose last entry is older than that leave the
// ledger, by whole journal segments: never by rewriting the history that stays.
void prune(Run& run) {
  const TimePoint cutoff = run.clock.now() - run.options.keep_history;
  PruneReport pruned = run.ledger.store().prune(cutoff, run.options.dry_run);
  for (const auto& record : pruned.records) {
    ReapItem item = reap::item_of(record, "prune");
    item.outcome = run.options.dry_run ? "planned" : "pruned";
    item.reason = fmt::format(
        "{} at {}, kept {}", to_string(record.state),
        format_time(record.history.empty() ? record.created_at : record.history.back().time),
        format_duration(run.options.keep_history));
    run.report.items.push_back(std::move(item));
  }
  if (!run.options.dry_run && !pruned.records.empty()) {
    run.report.pruned = static_cast<int>(pruned.records.size());
    spdlog::info("reap: pruned {} closed record(s) older than {} ({} journal segment(s))",
                 pruned.records.size(), format_duration(run.options.keep_history), pruned.units);
  }
}

// After the destroys (which freed what expired members held): each pool back to its size. A dry
// run lists what it would make and recycle.
void refill_pools(Run& run) {
  const bool dry_run = run.options.dry_run;
  for (const auto& profile : run.options.pools) {
    if (interrupt::requested()) {
      return;
    }
    ReapItem item;
    item.action = "fill";
    item.driver = profile.driver;
    item.name = profile.name;
    item.id = profile.name;
    bool worth_a_line = true; // a pool that was full already is not news
    try {
      PoolFill fill = dry_run ? run.engine.plan_fill(profile)
                              : run.engine.fill_pool(profile, run.options.parallel);
      item.id = fill.pool;
      if (dry_run) {
        worth_a_line = fill.missing + fill.recycled > 0;
        item.outcome = "planned";
        item.reason = fmt::format("would make {}, recycle {} (ready {} of {}, {} being made)",
                                  fill.missing, fill.recycled, fill.ready, fill.size, fill.filling);
      } else {
        worth_a_line = fill.made + fill.recycled > 0 || !fill.errors.empty();
        run.report.filled += fill.made;
        item.outcome = fill.errors.empty() ? "filled" : "failed";
        item.reason = fmt::format("made {}, recycled {} (ready {} of {} before, {} being made)",
                                  fill.made, fill.recycled, fill.ready, fill.size, fill.filling);
      }
      for (const auto& error : fill.errors) {
        item.reason += "; " + error;
      }
      if (!fill.errors.empty()) {
        ++run.report.failures;
        spdlog::error("reap: pool {}: {}", fill.pool, item.reason);
      } else if (worth_a_line) {
        spdlog::info("reap: pool {}: {}", fill.pool, item.reason);
      }
    } catch (const Error& e) {
      item.outcome = "failed";
      item.reason = log::redact(e.what());
      ++run.report.failures;
      spdlog::error("reap: pool of profile {}: {}", profile.name, item.reason);
    }
    if (worth_a_line) {
      run.report.items.push_back(std::move(item));
    }
  }
}

} // namespace

void reap::guard_record(Run& run, const SandboxRecord& record, const char* action,
                        const std::function<void()>& step) {
  try {
    step();
  } catch (const std::exception& e) {
    ReapItem item = item_of(record, action);
    item.outcome = "failed";
    item.reason = log::redact(e.what());
    ++run.report.failures;
    spdlog::error("reap {}: {} failed: {}", record.id, action, item.reason);
    run.report.items.push_back(std::move(item));
  }
}

bool reap::settle_seen(Run& run, SandboxRecord& record,
                       const std::function<void(SandboxRecord&)>& change) {
  auto settled = run.engine.settle(record.id, record.history.size(), change);
  if (settled) {
    record = std::move(*settled);
  }
  return settled.has_value();
}

Reaper::Reaper(Engine& engine, const Ledger& ledger, const Clock& clock, std::string actor)
    : m_engine(engine), m_ledger(ledger), m_clock(clock), m_actor(std::move(actor)) {}

ReapReport Reaper::run(const ReapOptions& options) {
  auto started = std::chrono::steady_clock::now();
  ReapReport report;
  report.now = m_clock.now();
  report.dry_run = options.dry_run;
  // A plan is executed with the margins it was made with: a skew of 30s at planning time and the
  // default at execution would otherwise call every item "not expired any more".
  std::optional<ReapReport> plan;
  ReapOptions effective = options;
  if (options.plan) {
    plan = plan_from_json(*options.plan);
    effective.skew = plan->skew.value_or(options.skew);
    effective.grace = plan->grace.value_or(options.grace);
  }
  report.skew = effective.skew;
  report.grace = effective.grace;
  // A plan brings its own items: it needs only the ledger's id. A planning run reads the whole
  // ledger once, here.
  LedgerData seen = m_ledger.read(options.plan ? ReadScope::summary : ReadScope::whole);
  report.ledger_id = seen.ledger_id;
  Run run{m_engine, m_ledger,         m_clock, effective,
          m_actor,  report.ledger_id, report,  std::move(seen)};

  std::vector<Work> work;
  if (plan) {
    if (plan->ledger_id != report.ledger_id) {
      throw UsageError(fmt::format("--plan was made for ledger {}, but this ledger is {}; make "
                                   "the plan against this --state-dir",
                                   plan->ledger_id.empty() ? "(none)" : plan->ledger_id,
                                   report.ledger_id.empty() ? "(none)" : report.ledger_id));
    }
    for (auto& item : plan->items) {
      if (reap::executes(item.action)) {
        work.push_back({std::move(item), std::nullopt});
      } else {
        item.outcome = "skipped";
        item.reason = *plan_item_blocker(item, nullptr, report.now, effective);
        report.items.push_back(std::move(item));
      }
    }
  } else {
    reap::repair_stuck(run);
    std::vector<Work> orphans;
    if (options.orphans != OrphanMode::off) {
      reap::reconcile_orphans(run, orphans);
    }
    reap::warn_expiring(run);
    for (auto& item : plan_destroys(run.seen, m_clock.now(), options)) {
      if (item.outcome == "failed") {
        ++report.failures;
        spdlog::error("reap {}: cannot plan its destroy: {}", item.id, item.reason);
      }
      if (reap::executes(item.action)) {
        work.push_back({std::move(item), std::nullopt});
      } else {
        report.items.push_back(std::move(item));
      }
    }
    for (auto& orphan : orphans) {
      work.push_back(std::move(orphan));
    }
  }

  const auto destroying = std::count_if(work.begin(), work.end(), [](const Work& w) {
    return w.orphan || reap::destroys(w.item.action);
  });
  if (options.max_destroy && destroying > *options.max_destroy) {
    report.refused = fmt::format("{} sandboxes would be destroyed, more than --max-destroy {}; "
                                 "nothing was destroyed (see the plan with 'sandboxer reap "
                                 "--dry-run')",
                                 destroying, *options.max_destroy);
    for (auto& w : work) {
      w.item.outcome = "refused";
    }
  }
  if (options.dry_run || report.refused) {
    for (auto& w : work) {
      report.items.push_back(std::move(w.item));
    }
    if (!options.plan && !report.refused) {
      refill_pools(run);
      prune(run);
    }
  } else {
    execute(run, work);
    if (!options.plan) {
      refill_pools(run);
      prune(run);
    }
  }
  // A run that changed nothing counts what it saw; otherwise the ledger as it is now.
  if (!options.dry_run && !report.refused) {
    run.seen = m_ledger.read(ReadScope::summary);
  }
  for (const auto& record : run.seen.sandboxes) {
    ++report.states[to_string(record.state)];
  }
  for (const auto& [state, count] : run.seen.closed_counts) {
    report.states[state] += static_cast<int>(count);
  }
  report.duration_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return report;
}

} // namespace sandboxer
