// The commands that describe the CLI itself: `completion SHELL` (completion_scripts.cpp) and
// `man` (man_page.cpp), both made from the CLI11 tree that main built.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/commands/commands.hpp"

namespace sandboxer::commands {
namespace {

const CLI::App* g_root = nullptr;

const CLI::App& root_or_throw() {
  if (!g_root) {
    throw Error(ExitCode::runtime, "internal error: the CLI definitions are not available");
  }
  return *g_root;
}

} // namespace

void set_cli_root(const CLI::App* root) {
  g_root = root;
}

void setup_completion(CLI::App& app, Runner& runner) {
  auto shell = std::make_shared<std::string>();
  app.add_option("shell", *shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  runner = [shell](Context&) {
    std::cout << completion_script(*shell);
    return ExitCode::ok;
  };
}

void setup_man(CLI::App&, Runner& runner) {
  runner = [](Context&) {
    std::cout << man_page(root_or_throw());
    return ExitCode::ok;
  };
}

} // namespace sandboxer::commands
