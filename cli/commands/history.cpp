// `sandboxer history ID`: the evidence trail of one sandbox, every transition with its event.
#include <CLI/CLI.hpp>

#include "cli/commands/commands.hpp"

namespace sandboxer::commands {
namespace {

ExitCode run_history(Context& context, const std::string& id) {
  SandboxRecord record = context.engine().get(id);
  nlohmann::json data = public_json(record, context.clock().now(), true);
  context.out().print(data["history"], [&] {
    Table table{{"TIME", "EVENT", "FROM", "TO", "ACTOR", "REASON"}, {}};
    for (const auto& entry : record.history) {
      table.rows.push_back({format_time(entry.time), to_string(entry.event),
                            entry.from ? to_string(*entry.from) : "-", to_string(entry.to),
                            entry.actor, entry.reason});
    }
    return table;
  });
  return ExitCode::ok;
}

} // namespace

void setup_history(CLI::App& app, Runner& runner) {
  auto id = std::make_shared<std::string>();
  app.add_option("id", *id, "Sandbox id or name (destroyed ones by id)")->required();
  runner = [id](Context& context) { return run_history(context, *id); };
}

} // namespace sandboxer::commands
