#include <CLI/CLI.hpp>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <spdlog/spdlog.h>

#include "cli/commands/commands.hpp"
#include "cli/commands/label_filter.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct ListArgs {
  bool all = false;
  bool no_headers = false;
  std::vector<std::string> labels; // KEY=VALUE, or KEY (any value)
  std::vector<std::string> profiles;
  std::vector<std::string> names;
  std::vector<std::string> drivers;
  std::vector<std::string> states;
  bool expired = false;
  std::optional<std::string> expiring_within;
  bool no_backend = false;
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
  if (std::error_code ec; !context.ledger().store().shared() &&
                          !std::filesystem::exists(context.ledger().state_dir(), ec)) {
    // An empty table would look like "nothing runs": say that this ledger does not exist at all.
    spdlog::warn("state dir {} does not exist: no sandbox was ever created with it (check "
                 "--state-dir and $SANDBOXER_STATE_DIR)",
                 context.ledger().state_dir().string());
  }
  std::vector<State> wanted;
  for (const auto& text : args.states) {
    auto state = state_from_string(text);
    if (!state) {
      throw UsageError(fmt::format("--state \"{}\": not a state (creating, running, snapshotting, "
                                   "destroying, destroyed, failed, expired, orphaned, paused, "
                                   "pausing, resuming, pooled)",
                                   text));
    }
    wanted.push_back(*state);
  }
  std::optional<Seconds> within;
  if (args.expiring_within) {
    within = duration_option("--expiring-within", *args.expiring_within);
  }
  const LabelFilter labels = parse_label_filter(args.labels);
  auto one_of = [](const std::vector<std::string>& wanted_values, const std::string& value) {
    return wanted_values.empty() ||
           std::find(wanted_values.begin(), wanted_values.end(), value) != wanted_values.end();
  };
  const TimePoint now = context.clock().now();
  auto keep = [&](const SandboxRecord& record) {
    // Destroyed and failed sandboxes are history, pool members nobody's yet: shown with -a or
    // when asked for by --state.
    const bool settled = record.state == State::destroyed || record.state == State::failed ||
                         record.state == State::pooled;
    const bool state_ok =
        wanted.empty() ? (args.all || !settled)
                       : std::find(wanted.begin(), wanted.end(), record.state) != wanted.end();
    const bool labels_ok = matches(labels, record.labels);
    return state_ok && labels_ok && one_of(args.profiles, record.profile.name) &&
           one_of(args.names, record.name) && one_of(args.drivers, record.driver) &&
           matches_deadline(record, now, args.expired, within);
  };
  // Closed records are read from the history (the journal) only when they can be shown.
  const bool closed_wanted =
      wanted.empty() ? args.all : std::any_of(wanted.begin(), wanted.end(), [](State s) {
        return s == State::destroyed || s == State::failed;
      });
  const Ledger& ledger = context.ledger();
  auto each = [&](const std::function<void(const SandboxRecord&)>& visit) {
    ledger.scan(closed_wanted ? Records::all : Records::resident, ReadScope::summary,
                [&](SandboxRecord& record) {
                  if (keep(record)) {
                    visit(record);
                  }
                  return true;
                });
  };
  // What each live sandbox's backend says, one listing per backend: a container stopped or
  // removed behind sandboxer's back must not be shown as running.
  std::map<std::string, BackendStatus> backend;
  const bool ids_only = context.out().format() == Format::table && context.out().quiet();
  if (!args.no_backend && !ids_only) {
    LedgerData resident = ledger.read();
    std::erase_if(resident.sandboxes,
                  [&](const SandboxRecord& r) { return !is_live(r.state) || !keep(r); });
    if (!resident.sandboxes.empty()) {
      backend = context.engine().backend_states(resident.sandboxes, resident.ledger_id);
    }
  }
  auto disagreement = [&](const SandboxRecord& record) -> std::optional<std::string> {
    auto found = backend.find(record.id);
    return found == backend.end() ? std::nullopt
                                  : backend_disagrees(record.state, found->second.state);
  };
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
    each([&](const SandboxRecord& record) {
      if (!first) {
        text += ',';
      }
      first = false;
      write_public_json(text, record, now, false);
      if (auto found = backend.find(record.id); found != backend.end()) {
        text.pop_back(); // the object's closing brace: one member more
        text += ",\"backend_state\":\"";
        text += to_string(found->second.state);
        text += "\"}";
      }
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
    each([&](const SandboxRecord& record) {
      items.push_back(public_json(record, now, false));
      if (auto found = backend.find(record.id); found != backend.end()) {
        items.back()["backend_state"] = to_string(found->second.state);
      }
    });
    context.out().print(items, nullptr);
    return ExitCode::ok;
  }
  case Format::table:
  case Format::csv: // refused before any command runs (CommandEntry::csv)
    break;
  }
  if (context.out().quiet()) {
    // Ids only, one per line, as `docker ps -q`: for xargs.
    std::string ids;
    each([&](const SandboxRecord& r) { ids += r.id + "\n"; });
    std::cout << ids << std::flush;
    return ExitCode::ok;
  }
  const bool wide = context.out().wide();
  Table table{{"ID", "NAME", "STATE", "DRIVER", "PROFILE", "AGE", "TIME LEFT"}, {}};
  // A shared ledger holds the records of the whole fleet: where each one lives (a host-local
  // driver's machine, or "any" for a remote backend).
  const bool fleet = context.ledger().store().shared();
  if (fleet) {
    table.headers.push_back("HOST");
  }
  if (wide) {
    table.headers.insert(table.headers.end(), {"EXPIRES", "BACKEND ID", "OWNER", "LABELS"});
  }
  each([&](const SandboxRecord& r) {
    std::string state = to_string(r.state);
    if (auto word = disagreement(r)) {
      spdlog::warn("{}: recorded {}, but its backend says {} ({}): destroy it, or 'sandboxer "
                   "reap --orphans' closes it once it is gone",
                   r.id, state, *word, backend.at(r.id).detail);
      state = *word;
    }
    std::vector<std::string> row = {r.id,
                                    r.name == r.id ? "-" : r.name,
                                    state,
                                    r.driver,
                                    r.profile.name,
                                    age(r.created_at, now),
                                    time_left(r, now)};
    if (fleet) {
      row.push_back(r.home_host.empty() ? "any" : r.home_host);
    }
    if (wide) {
      std::string labels_text;
      for (const auto& [key, value] : r.labels) {
        labels_text += (labels_text.empty() ? "" : ",") + key + "=" + value;
      }
      row.insert(row.end(),
                 {r.expires_at ? format_time(*r.expires_at) : "-",
                  r.backend_id.empty() ? "-" : r.backend_id, r.owner.user + "@" + r.owner.host,
                  labels_text.empty() ? "-" : labels_text});
    }
    table.rows.push_back(std::move(row));
  });
  context.out().set_headers(!args.no_headers);
  context.out().print(nullptr, [&] { return table; });
  return ExitCode::ok;
}

} // namespace

void setup_list(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ListArgs>();
  app.add_flag("-a,--all", args->all,
               "Include destroyed and failed sandboxes (kept as history) and pool members");
  app.add_option("-l,--label", args->labels,
                 "Only sandboxes with this label KEY=VALUE, or KEY "
                 "(repeatable: all must match)")
      ->allow_extra_args(false);
  app.add_option("--profile", args->profiles, "Only sandboxes of this profile (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--name", args->names, "Only the sandboxes of this name (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--no-backend", args->no_backend,
               "Do not ask the backends: show what the ledger records, without checking that "
               "running sandboxes still run");
  app.add_option("--driver", args->drivers, "Only sandboxes of this driver (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--no-headers", args->no_headers, "Tables without their header line");
  app.add_option("--state", args->states, "Only sandboxes in this state (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--expired", args->expired,
               "Only live sandboxes whose deadline has passed (reap destroys them)");
  app.add_option("--expiring-within", args->expiring_within,
                 "Only live sandboxes whose deadline is within this duration, e.g. 15m");
  runner = [args](Context& context) { return run_list(context, *args); };
}

} // namespace sandboxer::commands
