// The sandboxer executable: builds the CLI from the command table, runs one subcommand, and turns
// every error into a message on stderr and a documented exit code (docs/exit-codes.md).
#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <iostream>

#include <sandboxer/clock.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "commands/commands.hpp"

using namespace sandboxer;

namespace {

std::string log_level_of(const commands::GlobalOptions& global) {
  if (global.log_level) {
    return *global.log_level;
  }
  if (global.verbose >= 2) {
    return "trace";
  }
  if (global.verbose == 1) {
    return "debug";
  }
  return global.quiet ? "error" : "info";
}

int fail(const std::string& message, const std::string& hint = "") {
  std::cerr << "sandboxer: error: " << log::redact(message) << "\n";
  if (!hint.empty()) {
    std::cerr << hint << "\n";
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const auto process_started = std::chrono::steady_clock::now();
  // A reader that goes away (sandboxer list | head) must not kill a ledger write.
  std::signal(SIGPIPE, SIG_IGN);
  // Ctrl-C, a CI cancel, a closed terminal: the operation stops in order (interrupt.hpp).
  interrupt::install();
#ifdef SANDBOXER_TEST_CLOCK
  allow_fake_now(); // tests/CMakeLists.txt: the sandboxer-testclock build only
#endif

  CLI::App app{"sandboxer: provision sandboxes from profiles, track their TTL, reap the expired"};
  app.name("sandboxer");
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sandboxer ") + SANDBOXER_VERSION);
  commands::GlobalOptions global;
  app.add_option("--state-dir", global.state_dir,
                 "Directory of the ledger (default $SANDBOXER_STATE_DIR, "
                 "$XDG_STATE_HOME/sandboxer)");
  app.add_option("--profiles-dir", global.profiles_dir, "Directory searched first for profiles");
  app.add_option("-o,--output", global.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  app.add_flag("-q,--quiet", global.quiet, "Print only what was done (and errors)");
  app.add_flag("-v,--verbose", global.verbose, "More logging on stderr (-vv for trace)");
  app.add_option("--log-level", global.log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  app.add_option("--lock-timeout", global.lock_timeout_s,
                 "Seconds to wait for the ledger lock (default 30)")
      ->check(CLI::NonNegativeNumber);

  std::vector<std::pair<CLI::App*, commands::Runner>> runners;
  runners.reserve(commands::all_commands().size());
  for (const auto& entry : commands::all_commands()) {
    auto* sub = app.add_subcommand(entry.name, entry.description);
    // Global options work after the subcommand too: `sandboxer list -o json`.
    sub->fallthrough();
    runners.emplace_back(sub, nullptr);
    entry.setup(*sub, runners.back().second);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      return app.exit(e);
    }
    std::string command;
    for (auto* sub : app.get_subcommands()) {
      command = " " + sub->get_name();
    }
    fail(e.what(), "Try 'sandboxer" + command + " --help'.");
    return static_cast<int>(ExitCode::usage);
  }

  log::init(log_level_of(global));
  try {
    commands::Context context(global);
    for (auto& [sub, runner] : runners) {
      if (sub->parsed()) {
        ExitCode code = ExitCode::ok;
        try {
          code = runner(context);
        } catch (...) {
          // What the failed command committed is in the outbox: deliver it as any command would
          // (within the delivery's own time budget, even after a signal).
          interrupt::Shield delivering;
          context.events().deliver();
          throw;
        }
        interrupt::Shield delivering;
        context.events().deliver();
        spdlog::debug("timing: {} total {:.1f} ms", sub->get_name(),
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                process_started)
                          .count());
        return static_cast<int>(code);
      }
    }
    return static_cast<int>(ExitCode::usage);
  } catch (const UsageError& e) {
    std::string command;
    for (auto* sub : app.get_subcommands()) {
      command = " " + sub->get_name();
    }
    fail(e.what(), "Try 'sandboxer" + command + " --help'.");
    return static_cast<int>(e.code());
  } catch (const Error& e) {
    fail(e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    fail(std::string("internal error: ") + e.what());
    return static_cast<int>(ExitCode::runtime);
  }
}
