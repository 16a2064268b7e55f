#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <sandboxer/log.hpp>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct ExtendArgs {
  std::string id;
  std::optional<std::string> by;
  std::optional<std::string> to;
};

ExitCode run_extend(Context& context, const ExtendArgs& args) {
  if (!args.by && !args.to) {
    throw UsageError("extend needs --by DURATION or --to TIME");
  }
  ExtendOptions options;
  if (args.by) {
    options.by = duration_option("--by", *args.by);
  }
  if (args.to) {
    options.to = time_option("--to", *args.to);
  }
  ExtendOutcome outcome = context.engine().extend(args.id, options);
  TimePoint now = context.clock().now();
  nlohmann::json data = public_json(outcome.record, now, false);
  data["notices"] = outcome.notices;
  if (context.out().quiet() && context.out().format() == Format::table) {
    fmt::print("{}\n", format_time(*outcome.record.expires_at));
    // --quiet silences the log, but a cap is never silent.
    for (const auto& notice : outcome.notices) {
      fmt::print(stderr, "{}notice: {}: {}\n", log::prefix(), outcome.record.id, notice);
    }
    return ExitCode::ok;
  }
  context.out().print(data, [&] {
    Table table = record_table(outcome.record, now);
    for (const auto& notice : outcome.notices) {
      table.rows.push_back({"notice:", notice});
    }
    return table;
  });
  return ExitCode::ok;
}

} // namespace

void setup_extend(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<ExtendArgs>();
  app.add_option("id", args->id, "Sandbox id or name")->required();
  auto* by = app.add_option("--by", args->by, "Add this much to the deadline, e.g. 30m");
  auto* to = app.add_option("--to", args->to, "Set the deadline to this RFC 3339 time");
  by->excludes(to);
  runner = [args](Context& context) { return run_extend(context, *args); };
}

} // namespace sandboxer::commands
