#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "commands/commands.hpp"

namespace sandboxer::commands {
namespace {

struct DestroyArgs {
  std::vector<std::string> ids;
  std::string reason = "destroy requested";
  std::optional<std::string> timeout;
  bool force = false;
};

ExitCode run_destroy(Context& context, const DestroyArgs& args) {
  DestroyOptions options;
  options.force = args.force;
  if (args.timeout) {
    options.grace = duration_option("--timeout", *args.timeout);
  }
  nlohmann::json results = nlohmann::json::array();
  Table table{{"ID", "STATE"}, {}};
  int failures = 0;
  ExitCode last_error = ExitCode::ok;
  for (const auto& id : args.ids) {
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
  if (failures == 0) {
    return ExitCode::ok;
  }
  // One id: its own error's code. Several with some failed: partial failure.
  return args.ids.size() == 1 || failures == static_cast<int>(args.ids.size()) ? last_error
                                                                               : ExitCode::partial;
}

} // namespace

void setup_destroy(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<DestroyArgs>();
  app.add_option("ids", args->ids, "Sandbox ids or names")->required();
  app.add_option("--reason", args->reason, "Why, recorded in the history");
  app.add_option("--timeout", args->timeout,
                 "Grace between the polite stop and the kill, e.g. 30s (default: the profile's)");
  app.add_flag("--force", args->force,
               "Kill at once; if the backend fails, record it destroyed anyway ('reap --orphans' "
               "finds what it still has)");
  runner = [args](Context& context) { return run_destroy(context, *args); };
}

} // namespace sandboxer::commands
