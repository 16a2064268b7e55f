// `sandboxer evidence ID`: one self-contained, checkable document about a sandbox.
#include "core/evidence.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands/commands.hpp"

namespace sandboxer::commands {
namespace {

ExitCode run_evidence(Context& context, const std::string& id) {
  SandboxRecord record = context.engine().get(id);
  const std::string ledger_id = context.ledger().read(ReadScope::summary).ledger_id;
  nlohmann::json doc =
      evidence_document(record, ledger_id, context.ledger().location(), context.clock().now());
  context.out().print(doc, [&] {
    Table table{{}, {}};
    table.rows.push_back({"sandbox:", record.id + " (" + record.name + ")"});
    table.rows.push_back({"state:", to_string(record.state)});
    table.rows.push_back({"profile:", record.profile.name + " " + record.profile.hash});
    table.rows.push_back({"owner:", record.owner.user + "@" + record.owner.host});
    table.rows.push_back({"transitions:", std::to_string(doc["transitions"].size())});
    table.rows.push_back({"execs:", std::to_string(doc["execs"].size())});
    table.rows.push_back({"chain head:", record.chain_head});
    table.rows.push_back({"chain:", doc["chain"]["verified"].get<bool>() ? "verified" : "BROKEN"});
    table.rows.push_back({"", "-o json prints the document; docs/evidence.md checks it"});
    return table;
  });
  if (!doc["chain"]["verified"].get<bool>()) {
    throw Error(ExitCode::unverified,
                fmt::format("sandbox {}: its history's hash chain does not verify ('sandboxer "
                            "ledger verify' says where)",
                            record.id));
  }
  return ExitCode::ok;
}

} // namespace

void setup_evidence(CLI::App& app, Runner& runner) {
  auto id = std::make_shared<std::string>();
  app.add_option("id", *id, "Sandbox id or name (closed ones too)")->required();
  runner = [id](Context& context) { return run_evidence(context, *id); };
}

} // namespace sandboxer::commands
