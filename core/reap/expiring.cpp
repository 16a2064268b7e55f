// The `expiring` warning: one history entry (and so one event) per sandbox and deadline, when the
// deadline comes within the warning window.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/reap/internal.hpp"

namespace sandboxer::reap {
namespace {

void warn_one(Run& run, SandboxRecord& record, TimePoint now) {
  if (!needs_expiring_warning(record, now, run.options.expiring_window)) {
    return;
  }
  ReapItem item = item_of(record, "expiring");
  std::string left = format_duration(*record.expires_at - now);
  item.reason = "expires in " + left;
  if (run.options.dry_run) {
    item.outcome = "planned";
  } else if (settle_seen(run, record, [&](SandboxRecord& r) {
               r.transition(EventKind::expiring, r.state, now, run.actor,
                            fmt::format("expires in {}, at {}", left, format_time(*r.expires_at)),
                            {{"expiring",
                              {{"expires_at", format_time(*r.expires_at)},
                               {"window", format_duration(run.options.expiring_window)}}}});
             })) {
    item.outcome = "warned";
    ++run.report.expiring;
    spdlog::info("reap {}: expires in {} (at {})", record.id, left,
                 format_time(*record.expires_at));
  } else {
    return; // changed meanwhile: the next run looks again
  }
  run.report.items.push_back(std::move(item));
}

} // namespace

void warn_expiring(Run& run) {
  TimePoint now = run.clock.now();
  for (auto& record : run.seen.sandboxes) {
    guard_record(run, record, "expiring", [&] { warn_one(run, record, now); });
  }
}

} // namespace sandboxer::reap
