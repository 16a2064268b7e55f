// `sandboxer ledger verify|migrate|info|export|import`: the ledger as a whole.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands/commands.hpp"
#include "commands/ledger_move.hpp"

namespace sandboxer::commands {
namespace {

ExitCode run_verify(Context& context) {
  VerifyReport report = context.ledger().store().verify();
  nlohmann::json problems = nlohmann::json::array();
  for (const auto& p : report.problems) {
    problems.push_back(
        {{"sandbox", p.sandbox.empty() ? nlohmann::json() : nlohmann::json(p.sandbox)},
         {"index", p.index < 0 ? nlohmann::json() : nlohmann::json(p.index)},
         {"where", p.where},
         {"problem", p.what}});
  }
  nlohmann::json data = {{"ledger", context.ledger().location()},
                         {"records", report.records},
                         {"entries", report.entries},
                         {"ok", report.problems.empty()},
                         {"problems", problems}};
  context.out().print(data, [&] {
    Table table{{}, {}};
    for (const auto& p : report.problems) {
      std::string what = p.sandbox.empty() ? "" : "sandbox " + p.sandbox;
      if (p.index >= 0) {
        what += fmt::format(" history[{}]", p.index);
      }
      table.rows.push_back(
          {"BROKEN:", fmt::format("{}{}{} ({})", what, what.empty() ? "" : ": ", p.what, p.where)});
    }
    table.rows.push_back(
        {report.problems.empty() ? "ok:" : "checked:",
         fmt::format("{} record(s), {} history entries", report.records, report.entries)});
    return table;
  });
  if (!report.problems.empty()) {
    const auto& first = report.problems.front();
    throw Error(ExitCode::unverified,
                fmt::format("ledger {} does not verify: {} problem(s); the first: {}{}{} in {}",
                            context.ledger().location(), report.problems.size(),
                            first.sandbox.empty() ? "" : "sandbox " + first.sandbox + " ",
                            first.index >= 0 ? fmt::format("history[{}]: ", first.index) : "",
                            first.what, first.where));
  }
  return ExitCode::ok;
}

} // namespace

void setup_ledger(CLI::App& app, Runner& runner) {
  auto verify = app.add_subcommand(
      "verify", "Check every record's hash chain, live and closed, and the files that hold them");
  auto migrate =
      app.add_subcommand("migrate", "Bring the ledger to the current schema now (else the first "
                                    "change does it)");
  auto info = app.add_subcommand("info", "Say which ledger is in use, its schema and its size");
  auto output = std::make_shared<std::optional<std::string>>();
  auto input = std::make_shared<std::string>();
  auto export_ = app.add_subcommand(
      "export", "Write every record, live and closed, as JSON Lines (to move a ledger)");
  export_->add_option("--output,-f", *output, "File to write (default stdout), atomically");
  auto import = app.add_subcommand(
      "import", "Add the records of an export that this ledger lacks (idempotent)");
  import->add_option("file", *input, "A file written by 'sandboxer ledger export'")->required();
  app.require_subcommand(1);
  runner = [verify, migrate, info, export_, import, output, input](Context& context) {
    if (verify->parsed()) {
      return run_verify(context);
    }
    if (export_->parsed()) {
      return run_export(context, *output);
    }
    if (import->parsed()) {
      return run_import(context, *input);
    }
    (void)info;
    const std::string text = migrate->parsed() ? context.ledger().store().migrate()
                                               : context.ledger().store().describe();
    context.out().print({{migrate->parsed() ? "message" : "ledger", text}}, [&] {
      return Table{{}, {{text}}};
    });
    return ExitCode::ok;
  };
}

} // namespace sandboxer::commands
