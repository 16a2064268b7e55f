// `reap --metrics-file`: Prometheus text format for node_exporter's textfile collector. The
// collector reads whatever file is there at scrape time, so the file is replaced atomically.
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fmt/format.h>
#include <sstream>
#include <unistd.h>

#include <sandboxer/error.hpp>

#include "core/reap/reap.hpp"

namespace sandboxer {
namespace {

constexpr State k_all_states[] = {State::creating,   State::running,   State::snapshotting,
                                  State::destroying, State::destroyed, State::failed,
                                  State::expired,    State::orphaned,  State::paused,
                                  State::pausing,    State::resuming,  State::pooled};

// The value of an unlabelled sample `name` in a previous metrics file, or 0.
double previous_value(const std::string& previous, const std::string& name) {
  std::istringstream lines(previous);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with(name + " ")) {
      try {
        return std::stod(line.substr(name.size() + 1));
      } catch (const std::exception&) {
        return 0;
      }
    }
  }
  return 0;
}

void metric(std::string& out, const std::string& name, const char* type, const char* help,
            double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

} // namespace

std::string format_metrics(const ReapReport& report, const std::string& previous) {
  std::string out;
  out += "# HELP sandboxer_sandboxes Sandboxes in the ledger by state, after the last reap.\n"
         "# TYPE sandboxer_sandboxes gauge\n";
  for (State state : k_all_states) {
    auto it = report.states.find(to_string(state));
    out += fmt::format("sandboxer_sandboxes{{state=\"{}\"}} {}\n", to_string(state),
                       it == report.states.end() ? 0 : it->second);
  }
  metric(out, "sandboxer_reap_destroyed", "gauge",
         "Sandboxes destroyed by the last reap (expired and orphans).", report.destroyed);
  metric(out, "sandboxer_reap_failures", "gauge", "Failed operations of the last reap.",
         report.failures);
  // Counters live across runs: the previous file is their only memory.
  metric(out, "sandboxer_reap_destroyed_total", "counter",
         "Sandboxes destroyed by reap since this metrics file was started.",
         previous_value(previous, "sandboxer_reap_destroyed_total") + report.destroyed);
  metric(out, "sandboxer_reap_failures_total", "counter",
         "Failed reap operations since this metrics file was started.",
         previous_value(previous, "sandboxer_reap_failures_total") + report.failures);
  metric(out, "sandboxer_reap_repaired", "gauge", "Stuck records settled by the last reap.",
         report.repaired);
  metric(out, "sandboxer_reap_orphans", "gauge",
         "Backend resources of this ledger without a live record, seen by the last reap.",
         report.orphans);
  metric(out, "sandboxer_reap_vanished", "gauge",
         "Records whose backend resource was gone, seen by the last reap.", report.vanished);
  metric(out, "sandboxer_reap_pruned", "gauge",
         "Destroyed records pruned by the last reap (--keep-history).", report.pruned);
  metric(out, "sandboxer_reap_refused", "gauge",
         "1 when the last reap destroyed nothing because of --max-destroy.",
         report.refused ? 1 : 0);
  metric(out, "sandboxer_reap_paused", "gauge",
         "Idle sandboxes paused by the last reap (ttl.on_idle: pause).", report.paused);
  metric(out, "sandboxer_reap_snapshotted", "gauge",
         "Snapshots the last reap took before a destroy (on_idle or on_paused_max: snapshot).",
         report.snapshotted);
  metric(out, "sandboxer_reap_pool_filled", "gauge",
         "Warm pool members the last reap made (docs/pools.md).", report.filled);
  metric(out, "sandboxer_reap_expiring", "gauge",
         "Sandboxes warned by the last reap that their deadline is near.", report.expiring);
  metric(out, "sandboxer_events_delivered_total", "counter",
         "Events handed to a sink by reap runs since this metrics file was started.",
         previous_value(previous, "sandboxer_events_delivered_total") +
             static_cast<double>(report.events_delivered));
  metric(out, "sandboxer_events_failed_total", "counter",
         "Failed event sends of reap runs since this metrics file was started.",
         previous_value(previous, "sandboxer_events_failed_total") +
             static_cast<double>(report.events_failed));
  metric(out, "sandboxer_events_outbox", "gauge",
         "Events still in the outbox after the last reap (not yet taken by every sink).",
         static_cast<double>(report.events_pending));
  metric(out, "sandboxer_reap_duration_seconds", "gauge", "How long the last reap took.",
         report.duration_seconds);
  metric(out, "sandboxer_reap_last_run_timestamp_seconds", "gauge",
         "When the last reap ran (Unix time, UTC).",
         static_cast<double>(report.now.time_since_epoch().count()));
  return out;
}

} // namespace sandboxer
