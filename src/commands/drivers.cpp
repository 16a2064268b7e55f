#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "commands/commands.hpp"
#include "src/external/external_driver.hpp"

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
    item["capabilities"] = {{"snapshot", caps->snapshot},
                            {"exec", caps->exec},
                            {"native_ttl", caps->native_ttl},
                            {"list_by_label", caps->list_by_label}};
  }
  return item;
}

// Every driver this sandboxer can use: the built-in ones, then each external one after its
// handshake. One that fails its handshake is listed with the reason.
ExitCode run_list(Context& context) {
  nlohmann::json items = nlohmann::json::array();
  Table table{
      {"DRIVER", "SNAPSHOT", "EXEC", "NATIVE TTL", "LIST BY LABEL", "SOURCE", "DESCRIPTION"}, {}};
  auto add = [&](const std::string& name, const std::string& source, const std::string& description,
                 const Capabilities* caps, const std::string& error) {
    items.push_back(row_json(name, source, description, caps, error));
    auto flag = [&](bool b) { return std::string(caps ? yes_no(b) : "-"); };
    table.rows.push_back({name, flag(caps && caps->snapshot), flag(caps && caps->exec),
                          flag(caps && caps->native_ttl), flag(caps && caps->list_by_label), source,
                          error.empty() ? description : "handshake failed: " + error});
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
      spdlog::warn("driver {} ({}): {}", file.name, file.path.string(), e.what());
      add(file.name, file.path.string(), "", nullptr, e.what());
    }
  }
  context.out().print(items, [&] { return table; });
  return ExitCode::ok;
}

} // namespace

void setup_drivers(CLI::App& app, Runner& runner) {
  runner = [](Context& context) { return run_list(context); };
  (void)app;
}

} // namespace sandboxer::commands
