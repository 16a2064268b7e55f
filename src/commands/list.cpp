#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <iostream>

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
  const TimePoint now = context.clock().now();
  auto keep = [&](const SandboxRecord& record) {
    const bool state_ok =
        wanted.empty() ? (args.all || record.state != State::destroyed)
                       : std::find(wanted.begin(), wanted.end(), record.state) != wanted.end();
    return state_ok && matches_deadline(record, now, args.expired, within);
  };
  const Ledger& ledger = context.ledger();
  switch (context.out().format()) {
  case Format::json: {
    // Streamed: a large ledger is printed in pieces and never held whole, in memory or as text.
    // Small enough to stay in the cache and below malloc's mmap threshold, so that it is never
    // mapped and unmapped again.
    constexpr size_t k_flush_at = 64 << 10;
    std::string text;
    text.reserve(k_flush_at + (16 << 10));
    text = "[";
    bool first = true;
    ledger.scan(ReadScope::summary, [&](const SandboxRecord& record) {
      if (!keep(record)) {
        return;
      }
      if (!first) {
        text += ',';
      }
      first = false;
      write_public_json(text, record, now, false);
      if (text.size() >= k_flush_at) {
        std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
        text.clear();
      }
    });
    text += "]\n";
    std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::cout.flush();
    return ExitCode::ok;
  }
  case Format::yaml: {
    nlohmann::json items = nlohmann::json::array();
    ledger.scan(ReadScope::summary, [&](const SandboxRecord& record) {
      if (keep(record)) {
        items.push_back(public_json(record, now, false));
      }
    });
    context.out().print(items, nullptr);
    return ExitCode::ok;
  }
  case Format::table:
    break;
  }
  Table table{{"ID", "NAME", "STATE", "DRIVER", "PROFILE", "AGE", "TIME LEFT"}, {}};
  ledger.scan(ReadScope::summary, [&](const SandboxRecord& r) {
    if (keep(r)) {
      table.rows.push_back({r.id, r.name == r.id ? "-" : r.name, to_string(r.state), r.driver,
                            r.profile.name, age(r.created_at, now), time_left(r, now)});
    }
  });
  context.out().print(nullptr, [&] { return table; });
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
