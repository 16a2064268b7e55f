// `sandboxer events list [--pending]` and `sandboxer events flush`.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>

#include "cli/commands/commands.hpp"

namespace sandboxer::commands {
namespace {

// Which sinks still wait for each event in the outbox, by event id.
std::map<std::string, std::vector<std::string>> pending_by_id(const events::Outbox& outbox) {
  std::map<std::string, std::vector<std::string>> pending;
  for (const auto& entry : outbox.entries()) {
    std::vector<std::string> sinks;
    for (const auto& key : entry.pending_sinks) {
      sinks.push_back(events::describe_sink(entry.sinks[key]));
    }
    if (entry.prepared) {
      sinks.push_back("(not committed yet)");
    }
    pending[entry.event.value("id", "")] = std::move(sinks);
  }
  return pending;
}

ExitCode run_list(Context& context, bool only_pending) {
  const auto& outbox = context.events().outbox();
  nlohmann::json items = nlohmann::json::array();
  Table table{{"TIME", "EVENT", "SANDBOX", "ID", "PENDING"}, {}};
  if (only_pending) {
    for (const auto& entry : outbox.entries()) {
      nlohmann::json sinks = nlohmann::json::array();
      for (const auto& key : entry.pending_sinks) {
        sinks.push_back(events::describe_sink(entry.sinks[key]));
      }
      items.push_back(
          {{"event", entry.event}, {"pending_sinks", sinks}, {"committed", !entry.prepared}});
      std::string type = entry.event.value("type", "");
      table.rows.push_back({entry.event.value("time", ""), events::short_event_type(type),
                            entry.event.value("subject", ""), entry.event.value("id", ""),
                            fmt::format("{}", fmt::join(sinks, ", "))});
    }
  } else {
    auto pending = pending_by_id(outbox);
    context.ledger().scan(Records::all, ReadScope::whole, [&](SandboxRecord& record) {
      for (const auto& entry : record.history) {
        if (entry.event_id.empty()) {
          continue; // written before events existed
        }
        auto it = pending.find(entry.event_id);
        std::vector<std::string> sinks =
            it == pending.end() ? std::vector<std::string>{} : it->second;
        items.push_back(
            {{"id", entry.event_id},
             {"type", std::string(events::k_event_type_prefix) + to_string(entry.event)},
             {"subject", record.id},
             {"time", format_time(entry.time)},
             {"pending_sinks", sinks}});
        table.rows.push_back({format_time(entry.time), to_string(entry.event), record.id,
                              entry.event_id,
                              sinks.empty() ? "-" : fmt::format("{}", fmt::join(sinks, ", "))});
      }
      return true;
    });
  }
  context.out().print(items, [&] { return table; });
  return ExitCode::ok;
}

ExitCode run_flush(Context& context, const std::string& timeout) {
  events::DeliveryPolicy policy{duration_option("--timeout", timeout), true};
  events::Publisher flusher(context.ledger(), context.config().events, policy);
  events::DeliveryCounts counts = flusher.flush();
  nlohmann::json data = {{"delivered", counts.delivered},
                         {"failed_attempts", counts.failed},
                         {"pending", counts.pending},
                         {"elsewhere", counts.elsewhere}};
  context.out().print(data, [&] {
    Table table{{},
                {{"delivered:", std::to_string(counts.delivered)},
                 {"failed attempts:", std::to_string(counts.failed)},
                 {"still pending:", std::to_string(counts.pending)}}};
    if (counts.elsewhere > 0) {
      // Not this machine's to send, so not its failure: the exit code stays 0 for them.
      table.rows.push_back({"left to other machines:", std::to_string(counts.elsewhere)});
    }
    return table;
  });
  if (counts.pending > 0) {
    throw Error(ExitCode::backend,
                fmt::format("{} event(s) are still pending in {}: a sink did not take them (see "
                            "the warnings above); they stay there for the next try",
                            counts.pending, flusher.outbox().where()));
  }
  return ExitCode::ok;
}

} // namespace

void setup_events(CLI::App& app, Runner& runner) {
  struct Args {
    bool pending = false;
    std::string timeout = "30s";
    CLI::App* flush = nullptr;
  };
  auto args = std::make_shared<Args>();
  auto* list = app.add_subcommand("list", "List the lifecycle events of the ledger");
  list->add_flag("--pending", args->pending,
                 "Only the events still in the outbox, in full, with the sinks that lack them");
  args->flush = app.add_subcommand("flush", "Deliver the pending events, retrying with backoff");
  args->flush->add_option("--timeout", args->timeout, "How long to keep trying (default 30s)");
  app.require_subcommand(1);
  runner = [args](Context& context) {
    return args->flush->parsed() ? run_flush(context, args->timeout)
                                 : run_list(context, args->pending);
  };
}

} // namespace sandboxer::commands
