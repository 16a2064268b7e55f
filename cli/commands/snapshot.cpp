#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands/commands.hpp"

namespace sandboxer::commands {
namespace {

struct SnapshotArgs {
  std::string id;
  std::optional<std::string> name;
  bool disk_only = false;
};

ExitCode run_snapshot(Context& context, const SnapshotArgs& args) {
  SandboxRecord record = context.engine().snapshot(args.id, args.name, args.disk_only);
  const SnapshotRecord& snapshot = record.snapshots.back();
  if (context.out().quiet() && context.out().format() == Format::table) {
    fmt::print("{}\n", snapshot.id);
    return ExitCode::ok;
  }
  nlohmann::json data = snapshot_json(record, snapshot);
  context.out().print(data, [&] {
    Table table;
    for (const auto& [key, value] : data.items()) {
      table.rows.push_back(
          {key + ":", value.is_string() ? value.get<std::string>() : value.dump()});
    }
    return table;
  });
  return ExitCode::ok;
}

struct SnapshotsArgs {
  std::optional<std::string> id;
  std::string remove;
};

ExitCode run_snapshots(Context& context, const SnapshotsArgs& args) {
  if (!args.remove.empty()) {
    context.engine().delete_snapshot(args.remove);
    context.out().note("removed " + args.remove);
    return ExitCode::ok;
  }
  LedgerData data = context.ledger().read();
  std::string only;
  if (args.id) {
    only = context.engine().get(*args.id).id;
  }
  nlohmann::json items = nlohmann::json::array();
  Table table{{"SNAPSHOT", "NAME", "SANDBOX", "SANDBOX STATE", "SIZE", "CREATED"}, {}};
  for (const auto& record : data.sandboxes) {
    if (!only.empty() && record.id != only) {
      continue;
    }
    for (const auto& snapshot : record.snapshots) {
      items.push_back(snapshot_json(record, snapshot));
      table.rows.push_back({snapshot.id, snapshot.name, record.id, to_string(record.state),
                            snapshot.size_bytes ? human_bytes(*snapshot.size_bytes) : "-",
                            format_time(snapshot.created_at)});
    }
  }
  context.out().print(items, [&] { return table; });
  return ExitCode::ok;
}

} // namespace

void setup_snapshot(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<SnapshotArgs>();
  app.add_option("id", args->id, "Sandbox id or name")->required();
  app.add_option("--name", args->name, "Snapshot name, unique within the sandbox (default snap-N)");
  app.add_flag("--disk-only", args->disk_only,
               "The filesystem alone, not the running state where the driver could save it too "
               "(vm-packer: no memory checkpoint; a restore boots)");
  runner = [args](Context& context) { return run_snapshot(context, *args); };
}

void setup_snapshots(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<SnapshotsArgs>();
  app.add_option("id", args->id, "Only the snapshots of this sandbox");
  auto* rm = app.add_subcommand("rm", "Remove a snapshot from the backend and the ledger");
  rm->add_option("snapshot", args->remove, "Snapshot id (snp-...) or SANDBOX:NAME")->required();
  runner = [args](Context& context) { return run_snapshots(context, *args); };
}

} // namespace sandboxer::commands
