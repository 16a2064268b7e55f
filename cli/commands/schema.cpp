#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/commands/commands.hpp"
#include "core/schemas/schemas.hpp"

namespace sandboxer::commands {
namespace {

// A schema is JSON whatever -o says: adopters feed it to their validators as it is.
ExitCode run_schema(Context& context, const std::optional<std::string>& name) {
  if (name) {
    std::cout << schemas::get(*name, context.drivers()).dump(2) << "\n";
    return ExitCode::ok;
  }
  nlohmann::json items = nlohmann::json::array();
  Table table{{"NAME"}, {}};
  for (const auto& known : schemas::names()) {
    items.push_back(known);
    table.rows.push_back({known});
  }
  context.out().print(items, [&] { return table; });
  return ExitCode::ok;
}

} // namespace

void setup_schema(CLI::App& app, Runner& runner) {
  auto name = std::make_shared<std::optional<std::string>>();
  app.add_option("name", *name,
                 "profile, ledger, event, driver-protocol, or an output (list, ...)");
  runner = [name](Context& context) { return run_schema(context, *name); };
}

} // namespace sandboxer::commands
