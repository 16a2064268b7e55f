// `sandboxer destroy ID...`, `destroy --label KEY=VALUE...` and `destroy --all` (issue 35): the
// selection is printed by --dry-run, confirmed on a terminal, and needs --yes off one.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <iostream>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "cli/commands/commands.hpp"
#include "cli/commands/label_filter.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct DestroyArgs {
  std::vector<std::string> ids;
  std::vector<std::string> labels;
  bool all = false;
  bool dry_run = false;
  bool yes = false;
  std::string reason = "destroy requested";
  std::optional<std::string> timeout;
  bool force = false;
  bool forget = false;
};

// The live sandboxes --all or --label select, oldest first (the ledger's order).
std::vector<SandboxRecord> selected(const Context& context, const LabelFilter& filter) {
  std::vector<SandboxRecord> records;
  context.ledger().scan(Records::resident, ReadScope::summary, [&](SandboxRecord& record) {
    if (is_live(record.state) && matches(filter, record.labels)) {
      records.push_back(record);
    }
    return true;
  });
  return records;
}

// Many sandboxes at once is asked about once, on a terminal; a script says --yes. Plain
// `destroy ID` is never asked about: the operator named what goes.
void confirm(const std::vector<SandboxRecord>& records, const std::string& what) {
  if (!isatty(STDIN_FILENO)) {
    throw UsageError(fmt::format("destroy {} would destroy {} sandbox(es) and there is no terminal "
                                 "to confirm on: add --yes (or look first with --dry-run)",
                                 what, records.size()));
  }
  for (const auto& record : records) {
    std::cerr << "  " << record.id << "  " << record.name << "  " << to_string(record.state)
              << "\n";
  }
  std::cerr << fmt::format("Destroy these {} sandbox(es)? [y/N] ", records.size()) << std::flush;
  std::string answer;
  std::getline(std::cin, answer);
  if (answer != "y" && answer != "Y" && answer != "yes") {
    throw Error(ExitCode::policy, "not confirmed: nothing was destroyed");
  }
}

// The ids to destroy: those given, or those --all / --label select (after --dry-run or the
// confirmation).
std::optional<std::vector<std::string>> targets(Context& context, const DestroyArgs& args) {
  const bool selecting = args.all || !args.labels.empty();
  if (selecting && !args.ids.empty()) {
    throw UsageError("destroy: give sandbox ids, or --all, or --label KEY=VALUE; not both");
  }
  if (!selecting) {
    if (args.ids.empty()) {
      throw UsageError("destroy: missing <ids> (Sandbox ids or names), or --all, or --label "
                       "KEY=VALUE");
    }
    if (args.dry_run) {
      throw UsageError("destroy --dry-run goes with --all or --label");
    }
    return args.ids;
  }
  const auto records = selected(context, parse_label_filter(args.labels));
  if (args.dry_run) {
    nlohmann::json items = nlohmann::json::array();
    Table table{{"ID", "NAME", "STATE", "WOULD"}, {}};
    for (const auto& record : records) {
      items.push_back({{"id", record.id},
                       {"name", record.name},
                       {"state", to_string(record.state)},
                       {"error", nullptr}});
      table.rows.push_back({record.id, record.name, to_string(record.state), "destroy"});
    }
    context.out().print(items, [&] { return table; });
    return std::nullopt;
  }
  if (records.empty()) {
    spdlog::info("destroy: no live sandbox matches; nothing to do");
    return std::vector<std::string>{};
  }
  if (!args.yes) {
    confirm(records, args.all ? "--all" : "--label");
  }
  std::vector<std::string> ids;
  for (const auto& record : records) {
    ids.push_back(record.id);
  }
  return ids;
}

ExitCode run_destroy(Context& context, const DestroyArgs& args) {
  DestroyOptions options;
  options.force = args.force;
  options.forget = args.forget;
  if (args.timeout) {
    options.grace = duration_option("--timeout", *args.timeout);
  }
  const auto ids = targets(context, args);
  if (!ids) {
    return ExitCode::ok; // a dry run
  }
  nlohmann::json results = nlohmann::json::array();
  Table table{{"ID", "STATE"}, {}};
  size_t failures = 0;
  ExitCode last_error = ExitCode::ok;
  for (const auto& id : *ids) {
    try {
      SandboxRecord record = context.engine().destroy(id, args.reason, options);
      results.push_back(
          {{"id", record.id}, {"state", to_string(record.state)}, {"error", nullptr}});
      table.rows.push_back({record.id, to_string(record.state)});
    } catch (const Error& e) {
      ++failures;
      last_error = e.code();
      // Said once, on stderr; the table (stdout) lists what was destroyed.
      spdlog::error("destroy {}: {}", id, e.what());
      results.push_back({{"id", id}, {"state", nullptr}, {"error", e.what()}});
    }
  }
  if (context.out().format() != Format::table || (!context.out().quiet() && !table.rows.empty())) {
    context.out().print(results, [&] { return table; });
  }
  return exit_of_each(ids->size(), failures, last_error);
}

} // namespace

void setup_destroy(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<DestroyArgs>();
  app.add_option("ids", args->ids, "Sandbox ids or names");
  app.add_option("-l,--label", args->labels,
                 "Every live sandbox with this label KEY=VALUE, or KEY (repeatable: all must "
                 "match)")
      ->allow_extra_args(false);
  app.add_flag("--all", args->all, "Every live sandbox in the ledger");
  app.add_flag("--dry-run", args->dry_run,
               "With --all or --label: print what would be destroyed, destroy nothing");
  app.add_flag("-y,--yes", args->yes,
               "With --all or --label: do not ask (needed when stdin is not a terminal)");
  app.add_option("--reason", args->reason, "Why, recorded in the history");
  app.add_option("--timeout", args->timeout,
                 "Grace between the polite stop and the kill, e.g. 30s (default: the profile's)");
  app.add_flag("--force", args->force, "Kill at once: no grace, whatever --timeout says");
  app.add_flag("--forget", args->forget,
               "If the backend fails, record it destroyed anyway ('reap --orphans' finds what it "
               "still has)");
  runner = [args](Context& context) { return run_destroy(context, *args); };
}

} // namespace sandboxer::commands
