#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands/commands.hpp"

namespace sandboxer::commands {
namespace {

struct ListArgs {
  bool all = false;
  std::vector<std::string> states;
  bool expired = false;
  std::optional<std::string> expiring_within;
};

// --expired: live sandboxes whose deadline has passed by this host's clock (reap also waits for
// its --skew and --grace). --expiring-within D: live sandboxes whose deadline is still ahead but
// within D. Given both, either matches.
bool matches_deadline(const SandboxRecord& record, TimePoint now, bool expired,
                      const std::optional<Seconds>& within) {
  if (!expired && !within) {
    return true;
  }
  if (!record.expires_at || !is_live(record.state)) {
    return false;
  }
  bool is_expired = *record.expires_at <= now;
  return (expired && is_expired) || (within && !is_expired && *record.expires_at <= now + *within);
}

std::string age(TimePoint created, TimePoint now) {
  return created <= now ? format_duration(now - created) : "0s";
}

ExitCode run_list(Context& context, const ListArgs& args) {
  std::vector<State> wanted;
  for (const auto& text : args.states) {
    auto state = state_from_string(text);
    if (!state) {
      throw UsageError(fmt::format("--state \"{}\": not a state (creating, running, snapshotting, "
                                   "destroying, destroyed, failed, expired, orphaned)",
                                   text));
    }
    wanted.push_back(*state);
  }
  std::optional<Seconds> within;
  if (args.expiring_within) {
    within = duration_option("--expiring-within", *args.expiring_within);
  }
  LedgerData data = context.ledger().read();
  TimePoint now = context.clock().now();
  std::vector<const SandboxRecord*> shown;
  for (const auto& record : data.sandboxes) {
    bool keep = wanted.empty()
                    ? (args.all || record.state != State::destroyed)
                    : std::find(wanted.begin(), wanted.end(), record.state) != wanted.end();
    if (keep && matches_deadline(record, now, args.expired, within)) {
      shown.push_back(&record);
    }
  }
  if (context.out().format() == Format::table) {
    Table table{{"ID", "NAME", "STATE", "DRIVER", "PROFILE", "AGE", "TIME LEFT"}, {}};
    table.rows.reserve(shown.size());
    for (const auto* r : shown) {
      table.rows.push_back({r->id, r->name == r->id ? "-" : r->name, to_string(r->state), r->driver,
                            r->profile.name, age(r->created_at, now), time_left(*r, now)});
    }
    context.out().print(nullptr, [&] { return table; });
    return ExitCode::ok;
  }
  nlohmann::json items = nlohmann::json::array();
  for (const auto* r : shown) {
    items.push_back(public_json(*r, now, false));
  }
  context.out().print(items, nullptr);
  return ExitCode::ok;
}

} // namespace

void setup_list(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ListArgs>();
  app.add_flag("-a,--all", args->all, "Include destroyed sandboxes (kept as history)");
  app.add_option("--state", args->states, "Only sandboxes in this state (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--expired", args->expired,
               "Only live sandboxes whose deadline has passed (reap destroys them)");
  app.add_option("--expiring-within", args->expiring_within,
                 "Only live sandboxes whose deadline is within this duration, e.g. 15m");
  runner = [args](Context& context) { return run_list(context, *args); };
}

} // namespace sandboxer::commands
