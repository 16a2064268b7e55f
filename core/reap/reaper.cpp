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

// Whether the live record may be claimed now, checked under the ledger lock.
std::optional<std::string> due_blocker(const SandboxRecord& record, TimePoint now,
                                       const ReapOptions& options) {
  if (!is_due(record, now, options.grace, options.skew)) {
    return fmt::format("no longer due (now {})", to_string(record.state));
  }
  if (!record.home_host.empty() && record.home_host != host_name()) {
    return fmt::format("lives on host {}, whose reaper destroys it", record.home_host);
  }
  if (auto next = next_attempt_at(record); next && now < *next) {
    return "next attempt not before " + format_time(*next);
  }
  return std::nullopt;
}

void run_one_unguarded(Run& run, Work& work);

// A destroy that throws anything fails its own item, never the worker thread (an exception
// escaping a std::thread would terminate the whole run).
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
  const ReapOptions& options = run.options;
  auto blocker = [&](const SandboxRecord& record) {
    TimePoint now = run.clock.now();
    return options.plan ? plan_item_blocker(item, &record, now, options)
                        : due_blocker(record, now, options);
  };
  ExpiredDestroy result = run.engine.destroy_expired(
      item.id, blocker, {options.backoff_base, options.backoff_max, options.claim_lease},
      run.actor);
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
      if (item.outcome == "destroyed") {
        ++run.report.destroyed;
        spdlog::info("reap {}: destroyed ({}: {})", item.id, item.action, item.reason);
      } else if (item.outcome == "failed") {
        ++run.report.failures;
        spdlog::error("reap {}: destroy failed: {}", item.id, item.reason);
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
      if (item.action == "destroy") {
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
      if (item.action == "destroy") {
        work.push_back({std::move(item), std::nullopt});
      } else {
        report.items.push_back(std::move(item));
      }
    }
    for (auto& orphan : orphans) {
      work.push_back(std::move(orphan));
    }
  }

  if (options.max_destroy && static_cast<int>(work.size()) > *options.max_destroy) {
    report.refused = fmt::format("{} sandboxes would be destroyed, more than --max-destroy {}; "
                                 "nothing was destroyed (see the plan with 'sandboxer reap "
                                 "--dry-run')",
                                 work.size(), *options.max_destroy);
    for (auto& w : work) {
      w.item.outcome = "refused";
    }
  }
  if (options.dry_run || report.refused) {
    for (auto& w : work) {
      report.items.push_back(std::move(w.item));
    }
    if (!options.plan && !report.refused) {
      prune(run);
    }
  } else {
    execute(run, work);
    if (!options.plan) {
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
