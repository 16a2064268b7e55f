#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <sandboxer/registry.hpp>

#include "commands/commands.hpp"

namespace sandboxer::commands {

void setup_version(CLI::App&, Runner& runner) {
  runner = [](Context& context) {
    nlohmann::json data = {{"version", SANDBOXER_VERSION}, {"drivers", driver_names()}};
    context.out().print(data, [&] {
      return Table{{},
                   {{fmt::format("sandboxer {}", SANDBOXER_VERSION)},
                    {fmt::format("drivers: {}", fmt::join(driver_names(), " "))}}};
    });
    return ExitCode::ok;
  };
}

} // namespace sandboxer::commands
