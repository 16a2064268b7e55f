#include "cli/commands/exec_io.hpp"

#include <fmt/format.h>

#include "core/errors.hpp"

namespace sandboxer::commands {

std::map<std::string, std::string> env_of(const std::vector<std::string>& items) {
  std::map<std::string, std::string> env;
  for (const auto& item : items) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError(fmt::format("--env \"{}\": expected KEY=VALUE", item));
    }
    env[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return env;
}

} // namespace sandboxer::commands
