#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands/commands.hpp"

namespace sandboxer::commands {

// Each command's CLI11 node with the runner its setup chose.
using Runners = std::vector<std::pair<CLI::App*, Runner>>;

// The whole command tree: the global options (into `global`), every command of all_commands()
// with its options, examples and runner (into `runners`), and the value names --help shows
// (cli_values.cpp). `version` is what -V prints. Kept apart from run_main so that tests
// complete and document the real tree.
void build_app(CLI::App& app, GlobalOptions& global, Runners& runners,
               std::function<std::string()> version);

} // namespace sandboxer::commands
