#include <CLI/CLI.hpp>
#include <iostream>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "cli/commands/commands.hpp"
#include "core/conformance/kit.hpp"
#include "core/external/external_driver.hpp"
#include "sdk/protocol/protocol.hpp"

namespace sandboxer::commands {
namespace {

const char* yes_no(bool b) {
  return b ? "yes" : "no";
}

nlohmann::json row_json(const std::string& name, const std::string& source,
                        const std::string& description, const Capabilities* caps,
                        const std::string& error) {
  nlohmann::json item = {
      {"name", name},
      {"builtin", source == "built-in"},
      {"path", source == "built-in" ? nlohmann::json(nullptr) : nlohmann::json(source)},
      {"description", description},
      {"capabilities", nullptr},
      {"error", error.empty() ? nlohmann::json(nullptr) : nlohmann::json(error)}};
  if (caps) {
    item["capabilities"] = protocol::capabilities_json(*caps);
  }
  return item;
}

// Every driver this sandboxer can use: the built-in ones, then each external one after its
// handshake. One that fails its handshake is listed with the reason.
ExitCode run_list(Context& context) {
  nlohmann::json items = nlohmann::json::array();
  Table table{{"DRIVER", "SNAPSHOT", "EXEC", "NATIVE TTL", "LIST BY LABEL", "LOGS", "CP", "SOURCE",
               "DESCRIPTION"},
              {}};
  auto add = [&](const std::string& name, const std::string& source, const std::string& description,
                 const Capabilities* caps, const std::string& error) {
    items.push_back(row_json(name, source, description, caps, error));
    auto flag = [&](bool b) { return std::string(caps ? yes_no(b) : "-"); };
    table.rows.push_back({name, flag(caps && caps->snapshot), flag(caps && caps->exec),
                          flag(caps && caps->native_ttl), flag(caps && caps->list_by_label),
                          flag(caps && caps->logs),
                          // cp: the driver's own copy, tar over its exec, or none (docs/cp.md)
                          !caps        ? "-"
                          : caps->copy ? "native"
                          : caps->exec ? "exec"
                                       : "no",
                          source, error.empty() ? description : "handshake failed: " + error});
  };
  for (const auto* factory : context.drivers().builtin()) {
    Capabilities caps = factory->capabilities();
    add(std::string(factory->name()), "built-in", std::string(factory->doc()), &caps, "");
  }
  for (const auto& file : context.drivers().external()) {
    try {
      const auto& description = external::describe(context.drivers().find(file.name));
      add(file.name, file.path.string(), description.description, &description.capabilities, "");
    } catch (const Error& e) {
      spdlog::warn("{}", e.what());
      add(file.name, file.path.string(), "", nullptr, e.what());
    }
  }
  context.out().print(items, [&] { return table; });
  return ExitCode::ok;
}

// The conformance kit against the profile's driver. Each check is printed as it ends when stderr
// is a terminal; the report goes to stdout. Exit 1 when a check fails (docs/exit-codes.md).
ExitCode run_test(Context& context, const std::string& profile_name) {
  auto search = context.profile_search_path();
  Profile profile = load_profile(find_profile(profile_name, search), search);
  bool live = !context.global().quiet && isatty(STDERR_FILENO) && context.global().output != "json";
  auto report = conformance::run(
      profile, context.drivers(), context.clock(), [&](const conformance::Check& check) {
        if (live) {
          std::cerr << "  " << conformance::to_string(check.outcome) << "  " << check.name << "\n";
        }
      });
  Table table{{"CHECK", "RESULT", "MS", "DETAIL"}, {}};
  for (const auto& check : report.checks) {
    table.rows.push_back({check.name, conformance::to_string(check.outcome),
                          std::to_string(static_cast<long>(check.ms)), check.detail});
  }
  context.out().print(report.to_json(), [&] { return table; });
  context.out().note(fmt::format("driver {} (profile {}): {} passed, {} failed, {} skipped",
                                 report.driver, report.profile,
                                 report.count(conformance::Check::Outcome::pass),
                                 report.count(conformance::Check::Outcome::fail),
                                 report.count(conformance::Check::Outcome::skip)));
  return report.count(conformance::Check::Outcome::fail) == 0 ? ExitCode::ok : ExitCode::runtime;
}

struct DriversArgs {
  CLI::App* test = nullptr;
  std::string profile;
};

} // namespace

void setup_drivers(CLI::App& app, Runner& runner) {
  auto args = std::make_shared<DriversArgs>();
  args->test = app.add_subcommand(
      "test", "Run the conformance kit against a profile's driver (built-in or external)");
  args->test->add_option("-p,--profile", args->profile, "Profile name or file")->required();
  app.require_subcommand(0, 1);
  runner = [args](Context& context) {
    if (args->test->parsed()) {
      return run_test(context, args->profile);
    }
    return run_list(context);
  };
}

} // namespace sandboxer::commands
