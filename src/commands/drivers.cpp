#include <CLI/CLI.hpp>

#include <sandboxer/registry.hpp>

#include "commands/commands.hpp"

namespace sandboxer::commands {
namespace {

ExitCode run_drivers(Context& context) {
  nlohmann::json items = nlohmann::json::array();
  Table table{{"DRIVER", "SNAPSHOT", "EXEC", "NATIVE TTL", "LIST BY LABEL", "DESCRIPTION"}, {}};
  auto yes_no = [](bool b) { return std::string(b ? "yes" : "no"); };
  for (const auto* factory : all_drivers()) {
    Capabilities caps = factory->capabilities();
    items.push_back({{"name", factory->name()},
                     {"description", factory->doc()},
                     {"capabilities",
                      {{"snapshot", caps.snapshot},
                       {"exec", caps.exec},
                       {"native_ttl", caps.native_ttl},
                       {"list_by_label", caps.list_by_label}}}});
    table.rows.push_back({std::string(factory->name()), yes_no(caps.snapshot), yes_no(caps.exec),
                          yes_no(caps.native_ttl), yes_no(caps.list_by_label),
                          std::string(factory->doc())});
  }
  context.out().print(items, [&] { return table; });
  return ExitCode::ok;
}

} // namespace

void setup_drivers(CLI::App&, Runner& runner) {
  runner = [](Context& context) { return run_drivers(context); };
}

} // namespace sandboxer::commands
