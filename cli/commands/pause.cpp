// `sandboxer pause ID...` and `sandboxer resume ID...` (docs/pause.md): each sandbox in turn, one
// outcome per sandbox; as destroy, one that fails does not stop the others (exit 6 when some did).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands/commands.hpp"
#include "core/errors.hpp"

namespace sandboxer::commands {
namespace {

struct PauseArgs {
  std::vector<std::string> ids;
};

nlohmann::json outcome_json(const SandboxRecord& record, bool already) {
  nlohmann::json item = {{"id", record.id},
                         {"name", record.name},
                         {"state", to_string(record.state)},
                         {"already", already},
                         {"how", nullptr},
                         {"memory", nullptr},
                         {"expires_at", record.expires_at
                                            ? nlohmann::json(format_time(*record.expires_at))
                                            : nlohmann::json()},
                         {"error", nullptr}};
  if (record.pause) {
    item["how"] = record.pause->how;
    item["memory"] = record.pause->memory;
  }
  return item;
}

// What the table says of one outcome: "paused (freeze, memory kept) until T".
std::string outcome_text(const SandboxRecord& record, bool already) {
  std::string text = to_string(record.state);
  if (already) {
    text += " already";
  }
  if (record.pause && !record.pause->how.empty()) {
    text += fmt::format(" ({}, {})", record.pause->how,
                        record.pause->memory ? "memory kept" : "files only");
  }
  if (record.expires_at) {
    text += " until " + format_time(*record.expires_at);
  }
  return text;
}

ExitCode run_each(Context& context, const PauseArgs& args, bool pausing) {
  const char* verb = pausing ? "pause" : "resume";
  nlohmann::json results = nlohmann::json::array();
  Table table{{"ID", "STATE"}, {}};
  size_t failures = 0;
  ExitCode last_error = ExitCode::ok;
  for (const auto& id : args.ids) {
    try {
      SandboxRecord record;
      bool already = false;
      if (pausing) {
        PauseOutcome outcome = context.engine().pause(id);
        record = std::move(outcome.record);
        already = outcome.already;
      } else {
        const State before = context.engine().get(id).state;
        record = context.engine().resume(id);
        already = before == State::running;
      }
      results.push_back(outcome_json(record, already));
      table.rows.push_back({record.id, outcome_text(record, already)});
    } catch (const Error& e) {
      ++failures;
      last_error = e.code();
      spdlog::error("{} {}: {}", verb, id, e.what());
      results.push_back({{"id", id}, {"state", nullptr}, {"error", e.what()}});
    }
  }
  if (context.out().format() != Format::table || (!context.out().quiet() && !table.rows.empty())) {
    context.out().print(results, [&] { return table; });
  }
  return exit_of_each(args.ids.size(), failures, last_error);
}

} // namespace

void setup_pause(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<PauseArgs>();
  app.add_option("ids", args->ids, "Sandbox ids or names")->required();
  runner = [args](Context& context) { return run_each(context, *args, true); };
}

void setup_resume(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<PauseArgs>();
  app.add_option("ids", args->ids, "Sandbox ids or names")->required();
  runner = [args](Context& context) { return run_each(context, *args, false); };
}

} // namespace sandboxer::commands
