#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "build_info.hpp"
#include "cli/commands/commands.hpp"
#include "cli/registry.hpp"
#include "sdk/curl_on_demand.hpp"

namespace sandboxer::commands {

namespace {

std::vector<std::string> built_in_driver_names() {
  std::vector<std::string> names;
  for (const auto& entry : builtin_drivers()) {
    if (entry.factory != nullptr) {
      names.push_back(entry.name);
    }
  }
  return names;
}

} // namespace

nlohmann::json build_info() {
  return {{"version", SANDBOXER_VERSION},
          {"commit", SANDBOXER_COMMIT},
          {"compiler", SANDBOXER_COMPILER},
          {"drivers", built_in_driver_names()},
          // Loading libcurl costs ~15 ms: only --version and `version` pay it, to say which TLS
          // library this machine's HTTP goes through.
          {"libcurl", curl_version_text()}};
}

std::string version_text() {
  nlohmann::json info = build_info();
  return fmt::format("sandboxer {}\ncommit: {} ({})\ndrivers: {}\nlibcurl: {}",
                     info["version"].get<std::string>(), info["commit"].get<std::string>(),
                     info["compiler"].get<std::string>(),
                     fmt::join(info["drivers"].get<std::vector<std::string>>(), " "),
                     info["libcurl"].get<std::string>());
}

std::string ledger_in_use(const std::optional<std::string>& flag,
                          const std::optional<std::string>& state_dir, const Config& config) {
  try {
    return ledger::describe_choice(ledger_choice(flag, config), resolve_state_dir(state_dir));
  } catch (const Error& e) {
    return fmt::format("(none usable: {})", e.what());
  }
}

std::string ledger_in_use(const std::optional<std::string>& flag,
                          const std::optional<std::string>& state_dir) {
  try {
    return ledger_in_use(flag, state_dir, load_config_if_any());
  } catch (const Error& e) {
    return fmt::format("(none usable: {})", e.what());
  }
}

void setup_version(CLI::App&, Runner& runner) {
  runner = [](Context& context) {
    nlohmann::json data = build_info();
    context.out().print(data, [&] {
      Table table;
      std::string text = version_text();
      for (size_t start = 0; start <= text.size();) {
        size_t end = text.find('\n', start);
        table.rows.push_back({text.substr(start, end - start)});
        start = end == std::string::npos ? text.size() + 1 : end + 1;
      }
      return table;
    });
    return ExitCode::ok;
  };
}

} // namespace sandboxer::commands
