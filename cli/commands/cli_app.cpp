#include "cli/commands/cli_app.hpp"

#include <CLI/CLI.hpp>

#include "cli/commands/cli_values.hpp"

namespace sandboxer::commands {
namespace {

// --help names each value as the man page does (DURATION, PROFILE, ID) rather than CLI11's TEXT.
void name_values(CLI::App& command) {
  for (CLI::Option* option : command.get_options()) {
    if (const std::string name = value_name(command, *option); !name.empty()) {
      option->type_name(name);
    }
  }
  for (CLI::App* nested : command.get_subcommands([](CLI::App*) { return true; })) {
    name_values(*nested);
  }
}

} // namespace

void build_app(CLI::App& app, GlobalOptions& global, Runners& runners,
               std::function<std::string()> version) {
  app.description(
      "sandboxer: provision sandboxes from profiles, track their TTL, reap the expired");
  app.name("sandboxer");
  app.require_subcommand(1);
  app.set_version_flag("-V,--version", std::move(version));
  app.add_option("--state-dir", global.state_dir,
                 "Directory of the ledger (default $SANDBOXER_STATE_DIR, "
                 "$XDG_STATE_HOME/sandboxer)");
  app.add_option("--profiles-dir", global.profiles_dir, "Directory searched first for profiles");
  app.add_option("-o,--output", global.output,
                 "Output format: table, wide, json, yaml, or csv (usage only)")
      ->check(CLI::IsMember({"table", "wide", "json", "yaml", "csv"}));
  app.add_flag("-q,--quiet", global.quiet, "Print only what was done (and errors)");
  app.add_flag("-v,--verbose", global.verbose, "More logging on stderr (-vv for trace)");
  app.add_option("--log-level", global.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.add_option("--ledger", global.ledger,
                 "postgresql:// URI of a shared ledger, or \"local\" for the local files (default "
                 "$SANDBOXER_LEDGER, config.yaml ledger:, else local); never with a password");
  app.add_option("--lock-timeout", global.lock_timeout,
                 "How long to wait for the ledger lock: 30s, 2m, 0 (default 30s; a bare number "
                 "is seconds)");

  runners.reserve(all_commands().size());
  for (const auto& entry : all_commands()) {
    auto* sub = app.add_subcommand(entry.name, entry.description);
    for (const auto& alias : entry.aliases) {
      sub->alias(alias);
    }
    // Global options work after the subcommand too: `sandboxer list -o json`.
    sub->fallthrough();
    runners.emplace_back(sub, nullptr);
    entry.setup(*sub, runners.back().second);
    std::string footer = sub->get_footer();
    if (entry.examples && *entry.examples) {
      std::string examples = entry.examples;
      for (size_t at = 0; (at = examples.find('\n', at)) != std::string::npos; at += 3) {
        examples.replace(at, 1, "\n  ");
      }
      footer += (footer.empty() ? "" : "\n\n") + std::string("Examples:\n  ") + examples;
    }
    sub->footer(footer);
  }
  // Set after the subcommands, which would inherit it.
  app.footer("Run 'sandboxer help COMMAND' for a command's options and examples; 'sandboxer man' "
             "prints the manual.");
  name_values(app);
}

} // namespace sandboxer::commands
