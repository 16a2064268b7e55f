// Repair: a process killed between "intent" and "outcome" leaves its record in creating,
// destroying or snapshotting. Once such a record is older than --stuck-after and its process is
// gone, the backend tells what really happened and the record is settled with that reason.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sandboxer/error.hpp>
#include <sandboxer/log.hpp>

#include "core/owner.hpp"
#include "core/reap/internal.hpp"

namespace sandboxer::reap {
namespace {

struct Settlement {
  std::optional<State> to; // none: leave it as it is
  std::string reason;
  std::string backend_id; // set when found by label
  bool destroy = false;   // the resource is there but was never confirmed ready: remove it
};

// An interrupted create recorded no backend id: look for its resource by label.
Settlement settle_create(Run& run, const SandboxRecord& record) {
  const auto& factory = run.engine.drivers().find(record.driver);
  if (!factory.capabilities().list_by_label) {
    return {State::failed,
            fmt::format("interrupted create: no backend id was recorded and driver {} cannot "
                        "list by label; check the backend for label sandboxer.id={}",
                        record.driver, record.id),
            ""};
  }
  auto found = run.engine.list_remote(
      record, {{"sandboxer.id", record.id}, {"sandboxer.ledger", run.ledger_id}});
  if (found.empty()) {
    return {State::failed, "interrupted create: the backend has no resource with its label", ""};
  }
  // Its create never finished (readiness was never confirmed), so it is not a sandbox anyone may
  // use: recorded as failed with what the backend has, then destroyed.
  return {State::failed,
          fmt::format("interrupted create: the backend has {} ({}), never confirmed ready",
                      found.front().backend_id, found.front().state),
          found.front().backend_id, true};
}

Settlement settle_by_status(Run& run, const SandboxRecord& record) {
  std::string what = record.state == State::destroying ? "destroy" : "snapshot";
  BackendStatus status = record.backend_id.empty()
                             ? BackendStatus{BackendStatus::State::missing, "no backend id"}
                             : run.engine.backend_status(record);
  switch (status.state) {
  case BackendStatus::State::missing:
    return {State::destroyed,
            fmt::format("interrupted {}: the backend no longer has it ({})", what, status.detail),
            ""};
  case BackendStatus::State::unknown:
    return {std::nullopt,
            fmt::format("interrupted {}: backend state unknown ({})", what, status.detail), ""};
  default:
    if (record.state == State::destroying && record.lease) {
      // Its holder (`run`) was destroying it and died: the destroy is finished, not undone.
      return {State::running,
              fmt::format("interrupted destroy: the backend still has it ({}); its holder {} is "
                          "gone",
                          to_string(status.state), record.lease->holder),
              "", true};
    }
    // A paused sandbox's snapshot (its record keeps the pause) goes back to paused.
    return {record.pause && record.state == State::snapshotting ? State::paused : State::running,
            fmt::format("interrupted {}: the backend still has it ({}){}", what,
                        to_string(status.state),
                        record.state == State::destroying ? "; destroy it again" : ""),
            ""};
  }
}

// A pause or resume whose process died: gone from the backend, it is closed; else the same
// driver call is made again with the recorded pause id (drivers take a repeat as done).
void repair_pause(Run& run, SandboxRecord& record, ReapItem& item) {
  const State was = record.state;
  BackendStatus status = record.backend_id.empty()
                             ? BackendStatus{BackendStatus::State::missing, "no backend id"}
                             : run.engine.backend_status(record);
  const bool emulated = record.pause && record.pause->emulated;
  if (status.state == BackendStatus::State::missing && !emulated) {
    item.reason = fmt::format("interrupted {}: the backend no longer has it ({})",
                              was == State::pausing ? "pause" : "resume", status.detail);
    bool settled = settle_seen(run, record, [&](SandboxRecord& r) {
      r.transition(EventKind::repaired, State::destroyed, run.clock.now(), run.actor, item.reason,
                   {{"repair", true}});
    });
    item.outcome = settled ? "destroyed" : "skipped";
    run.report.repaired += settled ? 1 : 0;
    return;
  }
  if (status.state == BackendStatus::State::unknown) {
    item.outcome = "skipped";
    item.reason = fmt::format("interrupted {}: backend state unknown ({})",
                              was == State::pausing ? "pause" : "resume", status.detail);
    return;
  }
  SandboxRecord settled = run.engine.finish_pause(record, run.actor);
  item.outcome = to_string(settled.state);
  item.reason = fmt::format("interrupted {}: finished by reap (the backend was {})",
                            was == State::pausing ? "pause" : "resume", to_string(status.state));
  ++run.report.repaired;
  spdlog::info("reap {}: repaired {} -> {}: {}", record.id, to_string(was), item.outcome,
               item.reason);
}

// Settles one stuck record, if it is stuck.
void repair_one(Run& run, SandboxRecord& record, TimePoint now, const std::string& host) {
  if (!is_stuck(record, now, run.options.stuck_after, host)) {
    return;
  }
  ReapItem item = item_of(record, "repair");
  item.reason =
      fmt::format("{} since {}", to_string(record.state), format_time(record.history.back().time));
  if (run.options.dry_run) {
    item.outcome = "planned";
    run.report.items.push_back(std::move(item));
    return;
  }
  try {
    if (record.state == State::pausing || record.state == State::resuming) {
      repair_pause(run, record, item);
      run.report.items.push_back(std::move(item));
      return;
    }
    Settlement settlement = record.state == State::creating && record.backend_id.empty()
                                ? settle_create(run, record)
                                : settle_by_status(run, record);
    item.reason = settlement.reason;
    if (!settlement.to) {
      item.outcome = "skipped";
      spdlog::warn("reap {}: repair skipped: {}", record.id, settlement.reason);
    } else {
      State was = record.state;
      bool settled = settle_seen(run, record, [&](SandboxRecord& r) {
        if (!settlement.backend_id.empty()) {
          r.backend_id = settlement.backend_id;
        }
        if (*settlement.to == State::failed) {
          r.error = settlement.reason;
        }
        r.transition(EventKind::repaired, *settlement.to, run.clock.now(), run.actor,
                     settlement.reason, {{"repair", true}});
      });
      if (settled && settlement.destroy) {
        SandboxRecord destroyed = run.engine.destroy(
            record.id, was == State::creating ? "interrupted create: destroyed by reap"
                                              : "interrupted destroy: destroyed by reap");
        settlement.to = destroyed.state;
      }
      if (settled) {
        item.outcome = to_string(*settlement.to);
        ++run.report.repaired;
        spdlog::info("reap {}: repaired {} -> {}: {}", record.id, to_string(was), item.outcome,
                     settlement.reason);
      } else {
        item.outcome = "skipped";
        item.reason = "changed while being repaired";
      }
    }
  } catch (const std::exception& e) {
    item.outcome = "failed";
    item.reason = log::redact(e.what());
    ++run.report.failures;
    spdlog::error("reap {}: repair failed: {}", record.id, item.reason);
  }
  run.report.items.push_back(std::move(item));
}

} // namespace

void repair_stuck(Run& run) {
  TimePoint now = run.clock.now();
  std::string host = current_owner().host;
  for (auto& record : run.seen.sandboxes) {
    guard_record(run, record, "repair", [&] { repair_one(run, record, now, host); });
  }
}

} // namespace sandboxer::reap
