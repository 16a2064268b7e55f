#include "core/reap/reap.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fstream>
#include <spdlog/spdlog.h>
#include <sstream>
#include <sys/stat.h>

#include <sandboxer/interrupt.hpp>
#include <sandboxer/lock_file.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"
#include "core/owner.hpp"
#include "core/profile/profile.hpp"
#include "core/secrets/secrets.hpp"
#include "sdk/files.hpp"

namespace sandboxer::commands {
namespace {

struct ReapArgs {
  bool dry_run = false;
  int parallel = 4;
  std::optional<int> max_destroy;
  std::string grace = "0s";
  std::string skew = "30s";
  std::string stuck_after = "10m";
  std::string claim_lease = "10m";
  std::string keep_history = "7d";
  std::optional<std::string> orphans;
  std::vector<std::string> profiles;
  std::optional<std::string> plan;
  std::string wait = "1m";
  bool no_wait = false;
  std::optional<std::string> metrics_file;
  std::optional<std::string> expiring_window;
};

// The previous metrics file, whose counters this run carries on. Textfile-collector directories
// are often writable by node_exporter's user: what is planted there (a FIFO, a link to a secret or
// to /dev/zero, another user's file) is not read, and the counters start again.
std::string previous_metrics(const std::filesystem::path& path) {
  try {
    return read_file_if_exists(path, "the previous --metrics-file", 1u << 20).value_or("");
  } catch (const Error& e) {
    spdlog::warn("{}; its counters start again from this run", e.what());
    return "";
  }
}

nlohmann::json read_plan(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UsageError(
        fmt::format("--plan {}: cannot read the file: {}", path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto plan = nlohmann::json::parse(text.str(), nullptr, false);
  if (plan.is_discarded()) {
    throw UsageError(fmt::format("--plan {}: not JSON; save the plan with 'sandboxer reap "
                                 "--dry-run -o json > {}'",
                                 path, path));
  }
  return plan;
}

// The profiles `--orphans --profile` names, each checked in full before any backend is asked: a
// typo or a missing secret is a usage error, not a backend the run then fails to list.
std::vector<Profile> named_profiles(Context& context, const std::vector<std::string>& names) {
  std::vector<Profile> profiles;
  auto search = context.profile_search_path();
  for (const auto& name : names) {
    Profile profile = load_profile(find_profile(name, search), search);
    context.drivers().check_profile(profile);
    resolve_secrets(secret_refs_of(profile));
    profiles.push_back(std::move(profile));
  }
  return profiles;
}

// Takes the reaper lock: a file beside the ledger, not the ledger lock, so that creates and
// destroys go on while a reap runs.
} // namespace

LockFile::Guard lock_reaper(Context& context, bool no_wait, const std::string& wait_text) {
  auto dir = context.ledger().state_dir();
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    ::chmod(dir.c_str(), 0700);
  }
  Seconds wait = no_wait ? Seconds(0) : duration_option("--wait", wait_text);
  LockFile lock(dir / "reap.lock", wait, "the reaper lock " + (dir / "reap.lock").string(),
                "reap --wait");
  if (no_wait) {
    // Empty when another reaper runs: the caller says so, as news rather than an error.
    return lock.try_acquire();
  }
  return lock.acquire();
}

namespace {

// --quiet: only what was done, not what was skipped, planned or waited for.
bool was_done(const ReapItem& item) {
  return item.outcome != "planned" && item.outcome != "skipped" && item.outcome != "waiting" &&
         item.outcome != "refused";
}

ExitCode run_reap(Context& context, const ReapArgs& args) {
  ReapOptions options;
  options.dry_run = args.dry_run;
  options.parallel = args.parallel;
  options.max_destroy = args.max_destroy;
  options.grace = duration_option("--grace", args.grace);
  options.skew = duration_option("--skew", args.skew);
  options.stuck_after = duration_option("--stuck-after", args.stuck_after);
  options.claim_lease = duration_option("--claim-lease", args.claim_lease);
  options.keep_history = duration_option("--keep-history", args.keep_history);
  if (args.expiring_window) {
    options.expiring_window = duration_option("--expiring-window", *args.expiring_window);
  } else if (context.config().expiring_window) {
    options.expiring_window = *context.config().expiring_window;
  }
  if (args.orphans) {
    if (args.orphans->empty() || *args.orphans == "report") {
      options.orphans = OrphanMode::report;
    } else if (*args.orphans == "destroy") {
      options.orphans = OrphanMode::destroy;
    } else {
      throw UsageError(fmt::format("--orphans={}: expected report or destroy", *args.orphans));
    }
    options.profiles = named_profiles(context, args.profiles);
  } else if (!args.profiles.empty()) {
    throw UsageError("--profile names a backend for --orphans to ask; without --orphans it has "
                     "nothing to do");
  }
  if (args.plan) {
    if (args.dry_run || args.orphans) {
      throw UsageError("--plan executes a saved plan and nothing else: it cannot be combined "
                       "with --dry-run or --orphans");
    }
    options.plan = read_plan(*args.plan);
  }

  // A cron line with a wrong --state-dir (or run as another user) would otherwise reap an empty
  // ledger every minute and exit 0 forever. --orphans still looks: it is how a lost ledger's
  // resources are found.
  if (!args.orphans && !context.ledger().store().exists()) {
    throw NotFoundError(fmt::format("no ledger at {}: nothing to reap, and nothing was created. "
                                    "Check --state-dir, $SANDBOXER_STATE_DIR or --ledger (and the "
                                    "user cron runs this as)",
                                    context.ledger().location()));
  }
  LockFile::Guard guard;
  if (!args.dry_run) {
    guard = lock_reaper(context, args.no_wait, args.wait);
    if (!guard.held()) {
      // Expected under cron with overlapping runs: not an error, but exit 5 so a script can tell.
      spdlog::info("another reaper holds {} (--no-wait): it does this run's work; exiting with "
                   "code 5",
                   (context.ledger().state_dir() / "reap.lock").string());
      return ExitCode::lock_timeout;
    }
  }
  if (!args.plan) {
    options.pools = pool_profiles(context, {}); // refilled, or with --dry-run listed
  }
  Reaper reaper(context.engine(), context.ledger(), context.clock(),
                "reaper (" + describe(current_owner()) + ")");
  ReapReport report = reaper.run(options);
  // Delivered before the metrics are written, so that they count this run's events too.
  events::DeliveryCounts delivered = context.events().delivery_pass();
  report.events_delivered = context.events().delivery().totals().delivered;
  report.events_failed = context.events().delivery().totals().failed;
  // Events that wait for other machines' sinks count too: those pile up when a machine is gone.
  report.events_pending = delivered.pending + delivered.elsewhere;

  if (args.metrics_file && !args.dry_run) {
    std::filesystem::path path(*args.metrics_file);
    write_file_atomically(path, format_metrics(report, previous_metrics(path)));
  }

  bool quiet = context.out().quiet();
  std::vector<const ReapItem*> shown;
  for (const auto& item : report.items) {
    if (!quiet || was_done(item)) {
      shown.push_back(&item);
    }
  }
  if (context.out().format() == Format::table) {
    if (!shown.empty()) {
      Table table{{"ID", "NAME", "DRIVER", "EXPIRED AT", "ACTION", "OUTCOME", "REASON"}, {}};
      for (const auto* item : shown) {
        table.rows.push_back({item->id, item->name == item->id ? "-" : item->name, item->driver,
                              item->expires_at ? format_time(*item->expires_at) : "-", item->action,
                              item->outcome, item->reason});
      }
      context.out().print(nullptr, [&] { return table; });
    } else if (!quiet) {
      // Silence would read as "did it run at all?"
      context.out().print(nullptr, [&] {
        return Table{{},
                     {{args.dry_run ? "nothing due: a reap now would do nothing"
                                    : "nothing due: nothing was done"}}};
      });
    }
  } else {
    nlohmann::json data = to_json(report);
    if (quiet) {
      data["items"] = nlohmann::json::array();
      for (const auto* item : shown) {
        data["items"].push_back(to_json(*item));
      }
    }
    context.out().print(data, nullptr);
  }
  if (report.refused) {
    throw PolicyError(*report.refused);
  }
  if (interrupt::count() > 0) {
    // What was done is printed above; the code says the run was cut short.
    throw Interrupted(interrupt::last_signal());
  }
  return report.failures == 0 ? ExitCode::ok : ExitCode::partial;
}

} // namespace

void setup_reap(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ReapArgs>();
  app.add_flag("--dry-run", args->dry_run,
               "Print the plan (-o json: a file for --plan) and change nothing");
  app.add_option("--parallel", args->parallel, "Destroys at once (default 4)")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-destroy", args->max_destroy,
                 "Refuse (exit 7, nothing destroyed) when more than this many would go")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", args->grace, "Only reap sandboxes expired for longer than this");
  app.add_option("--skew", args->skew,
                 "Clock skew allowance: reap only once now >= deadline + grace + skew "
                 "(default 30s)");
  app.add_option("--claim-lease", args->claim_lease,
                 "Shared ledger: how long this reaper's claim on a sandbox stands; a reaper that "
                 "died is taken over after it (default 10m)");
  app.add_option("--stuck-after", args->stuck_after,
                 "Repair records left in creating/destroying/snapshotting for longer than this "
                 "by a process that is gone (default 10m)");
  app.add_option("--keep-history", args->keep_history,
                 "Prune destroyed records older than this (default 7d)");
  app.add_option("--orphans", args->orphans,
                 "Reconcile with the backends: report (default) or destroy resources of this "
                 "ledger without a live record")
      ->expected(0, 1);
  app.add_option("-p,--profile", args->profiles,
                 "With --orphans: also ask this profile's backend (repeatable); by default only "
                 "the backends the ledger's records used are asked")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--plan", args->plan,
                 "Execute exactly the destroys, pauses and snapshot+destroys of a saved "
                 "'reap --dry-run -o json'");
  auto* wait = app.add_option("--wait", args->wait,
                              "Wait this long for another reaper to finish (default 1m)");
  app.add_flag("--no-wait", args->no_wait, "Exit at once (code 5) if another reaper runs")
      ->excludes(wait);
  app.add_option("--expiring-window", args->expiring_window,
                 "Emit an expiring event this long before a deadline (default 10m, or "
                 "expiring.window of config.yaml; 0s: never)");
  app.add_option("--metrics-file", args->metrics_file,
                 "Write Prometheus text metrics here (atomically), e.g. for node_exporter");
  runner = [args](Context& context) { return run_reap(context, *args); };
}

} // namespace sandboxer::commands
