#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands/commands.hpp"

namespace sandboxer::commands {
namespace {

struct StatusArgs {
  std::string id;
  bool no_backend = false;
};

// Without a sandbox: which ledger this machine uses, and what it holds.
ExitCode run_ledger_status(Context& context) {
  const auto& global = context.global();
  nlohmann::json data = {
      {"ledger", ledger_in_use(global.ledger, global.state_dir, context.config())},
      {"location", context.ledger().location()},
      {"state_dir", context.ledger().state_dir().string()}};
  data["store"] = context.ledger().store().describe();
  context.out().print(data, [&] {
    Table table;
    table.rows.push_back({"ledger:", data["ledger"].get<std::string>()});
    table.rows.push_back({"store:", data["store"].get<std::string>()});
    table.rows.push_back({"state dir:", data["state_dir"].get<std::string>()});
    return table;
  });
  return ExitCode::ok;
}

ExitCode run_status(Context& context, const StatusArgs& args) {
  if (args.id.empty()) {
    return run_ledger_status(context);
  }
  SandboxRecord record = context.engine().get(args.id);
  TimePoint now = context.clock().now();
  nlohmann::json data = public_json(record, now, true);
  std::optional<BackendStatus> backend;
  if (!args.no_backend && is_live(record.state)) {
    try {
      backend = context.engine().status(record.id);
      data["backend"] = {{"state", to_string(backend->state)}, {"detail", backend->detail}};
    } catch (const Error& e) {
      // The record is still worth showing when the backend cannot be asked.
      spdlog::warn("{}: cannot ask the backend: {}", record.id, e.what());
      data["backend"] = {{"state", "unknown"}, {"detail", e.what()}};
    }
  } else {
    data["backend"] = nullptr;
  }
  context.out().print(data, [&] {
    Table table = record_table(record, now);
    if (auto word = backend ? backend_disagrees(record.state, backend->state) : std::nullopt) {
      for (auto& row : table.rows) {
        if (row.front() == "state:") {
          row.back() = *word + " (recorded " + row.back() + ")";
        }
      }
    }
    if (!data["backend"].is_null()) {
      table.rows.push_back({"backend:", data["backend"]["state"].get<std::string>() + " (" +
                                            data["backend"]["detail"].get<std::string>() + ")"});
    }
    table.rows.push_back({"history:", ""});
    for (const auto& entry : record.history) {
      table.rows.push_back({"  " + format_time(entry.time),
                            std::string(entry.from ? to_string(*entry.from) : "-") + " -> " +
                                to_string(entry.to) + "  " + entry.reason + "  by " + entry.actor});
    }
    return table;
  });
  return ExitCode::ok;
}

} // namespace

void setup_status(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<StatusArgs>();
  app.add_option("id", args->id,
                 "Sandbox id or name; without one, the ledger in use and what it holds");
  app.add_flag("--no-backend", args->no_backend, "Do not ask the backend, show the record only");
  runner = [args](Context& context) { return run_status(context, *args); };
}

} // namespace sandboxer::commands
