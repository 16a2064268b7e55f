// `sandboxer ledger verify|head|migrate|info|export|import|keep`: the ledger as a whole.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands/commands.hpp"
#include "cli/commands/ledger_move.hpp"
#if SANDBOXER_LEDGER_PG
#include "core/errors.hpp"
#include "pg/kept_connection.hpp"
#include "pg/pg_store.hpp"
#endif

namespace sandboxer::commands {
namespace {

std::optional<ChainHead> kept_head(const std::optional<std::string>& text) {
  if (!text) {
    return std::nullopt;
  }
  auto head = parse_chain_head(*text);
  if (!head) {
    throw UsageError(fmt::format("--head: \"{}\" is not a head printed by 'sandboxer ledger "
                                 "head' (LINES:sha256:<64 hex digits>)",
                                 *text));
  }
  return head;
}

nlohmann::json head_json(const LedgerHead& head) {
  return {{"ledger_id", head.ledger_id},
          {"head", head.head.text()},
          {"lines", head.head.lines},
          {"hash", head.head.hash},
          {"retained_from", head.retained_from}};
}

ExitCode run_head(Context& context) {
  const LedgerHead head = context.ledger().store().head();
  nlohmann::json data = head_json(head);
  data["ledger"] = context.ledger().location();
  // The head alone on its line at a terminal too: `sandboxer ledger head >> kept-heads`.
  context.out().print(data, [&] { return Table{{}, {{head.head.text()}}}; });
  return ExitCode::ok;
}

ExitCode run_verify(Context& context, const std::optional<std::string>& kept_text) {
  const auto kept = kept_head(kept_text);
  VerifyReport report = context.ledger().store().verify(kept);
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
                         {"problems", problems},
                         {"kept_head", kept ? nlohmann::json(kept->text()) : nlohmann::json()}};
  std::optional<LedgerHead> head;
  if (context.ledger().store().exists()) {
    head = context.ledger().store().head();
  }
  data["head"] = head ? nlohmann::json(head->head.text()) : nlohmann::json(); // no ledger yet
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
    if (kept && report.problems.empty()) {
      table.rows.push_back({"kept head:", kept->text() + " is on the chain"});
    }
    if (head) {
      table.rows.push_back({"head:", head->head.text()});
    }
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

ExitCode run_keep(Context& context, const std::string& idle_text) {
  context.deliver_nothing_at_end(); // it makes no event; the commands it serves deliver theirs
  const auto idle = idle_text == "0" ? std::optional<Seconds>(0) : parse_duration(idle_text);
  if (!idle) {
    throw UsageError(fmt::format("--idle: invalid duration \"{}\" (use 0, 60s, 10m)", idle_text));
  }
#if SANDBOXER_LEDGER_PG
  if (const auto* store = dynamic_cast<const ledger::pg::PgStore*>(&context.ledger().store())) {
    store->keep_connections(*idle);
    return ExitCode::ok;
  }
#endif
  throw UsageError(fmt::format("ledger keep: the ledger in use is {}; only a PostgreSQL ledger "
                               "has connections to keep (give --ledger or $SANDBOXER_LEDGER)",
                               context.ledger().location()));
}

} // namespace

void setup_ledger(CLI::App& app, Runner& runner) {
  auto verify = app.add_subcommand(
      "verify", "Check every record's hash chain, live and closed, the chain of closed records, "
                "and the files that hold them");
  auto kept = std::make_shared<std::optional<std::string>>();
  verify->add_option("--head", *kept,
                     "A head printed earlier by 'sandboxer ledger head' and kept elsewhere: the "
                     "closed history must still pass through it");
  auto head = app.add_subcommand(
      "head", "Print the head of the chain of closed records (LINES:sha256:HEX), to keep "
              "elsewhere and check later with 'ledger verify --head'");
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
  auto keep = app.add_subcommand(
      "keep", "Hold this machine's connections to a PostgreSQL ledger open for its commands "
              "(started by them when needed; run it under a service manager to keep it always)");
  auto idle = std::make_shared<std::string>("0");
  keep->add_option("--idle", *idle,
                   "Stop once no command has used it for this long (0: only at SIGTERM/SIGINT)")
      ->capture_default_str();
  // Its own connections are libpq's: it must not look for (or start) a keeper itself.
#if SANDBOXER_LEDGER_PG
  keep->callback([] { ledger::pg::serve_as_keeper(); });
#endif
  app.require_subcommand(1);
  runner = [verify, kept, head, migrate, info, export_, import, keep, idle, output,
            input](Context& context) {
    if (keep->parsed()) {
      return run_keep(context, *idle);
    }
    if (verify->parsed()) {
      return run_verify(context, *kept);
    }
    if (head->parsed()) {
      return run_head(context);
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
