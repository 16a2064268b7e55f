#include <CLI/CLI.hpp>

#include "commands/commands.hpp"

namespace sandboxer::commands {
namespace {

struct ReapArgs {
  bool dry_run = false;
  int parallel = 4;
  std::optional<int> max_destroy;
  std::string grace = "0s";
};

ExitCode run_reap(Context& context, const ReapArgs& args) {
  ReapOptions options;
  options.dry_run = args.dry_run;
  options.parallel = args.parallel;
  options.max_destroy = args.max_destroy;
  options.grace = duration_option("--grace", args.grace);
  ReapReport report = context.engine().reap(options);

  nlohmann::json items = nlohmann::json::array();
  Table table{{"ID", "NAME", "DRIVER", "EXPIRED AT", "ACTION", "OUTCOME"}, {}};
  for (const auto& item : report.items) {
    std::string expired = item.expires_at ? format_time(*item.expires_at) : "-";
    items.push_back({{"id", item.id},
                     {"name", item.name},
                     {"driver", item.driver},
                     {"expires_at", expired},
                     {"action", item.action},
                     {"outcome", item.outcome}});
    table.rows.push_back({item.id, item.name == item.id ? "-" : item.name, item.driver, expired,
                          item.action, item.outcome});
  }
  nlohmann::json data = {
      {"dry_run", args.dry_run}, {"items", std::move(items)}, {"failures", report.failures}};
  // --quiet prints only what was done: nothing when nothing was due.
  if (!(context.out().quiet() && report.items.empty())) {
    context.out().print(data, [&] { return table; });
  }
  if (report.failures == 0) {
    return ExitCode::ok;
  }
  return report.failures == static_cast<int>(report.items.size()) && report.items.size() == 1
             ? ExitCode::backend
             : ExitCode::partial;
}

} // namespace

void setup_reap(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ReapArgs>();
  app.add_flag("--dry-run", args->dry_run, "Print the plan and change nothing");
  app.add_option("--parallel", args->parallel, "Destroys at once (default 4)")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-destroy", args->max_destroy,
                 "Refuse (exit 7) when more than this many would be destroyed")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", args->grace, "Only reap sandboxes expired for longer than this");
  runner = [args](Context& context) { return run_reap(context, *args); };
}

} // namespace sandboxer::commands
