// The sandboxer executable's work: builds the CLI from the command table, runs one subcommand, and
// turns every error into a message on stderr and a documented exit code (docs/exit-codes.md).
// Kept in the command library rather than in main.cpp, so that the two executables (sandboxer and
// the test clock's) compile it once, with the library's precompiled CLI11.
#include "cli/commands/run_main.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include <sandboxer/clock.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>

#include "cli/commands/cli_app.hpp"
#include "cli/commands/cli_values.hpp"
#include "cli/commands/commands.hpp"
#include "cli/commands/complete.hpp"
#include "core/profile/profile.hpp"
#include "sdk/testing.hpp"

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
  std::cerr << log::prefix() << "error: " << log::redact(message) << "\n";
  if (!hint.empty()) {
    std::cerr << hint << "\n";
  }
  return 0;
}

// A global option that takes a value (cli_values.cpp): its value is not a command name.
bool takes_value(const CLI::App& app, std::string_view arg) {
  const CLI::Option* option = app.get_option_no_throw(std::string(arg));
  return option && !option->get_positional() &&
         commands::value_kind(app, *option) != commands::ValueKind::none;
}

// The index in argv of the command word (the first argument that is not a global option or its
// value), or 0 when there is none.
int command_index(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") {
      return 0;
    }
    if (arg.starts_with("-")) {
      i += takes_value(app, arg) ? 1 : 0;
      continue;
    }
    return i;
  }
  return 0;
}

// Names people type for our commands (docker, kubectl and gh words), for "did you mean".
std::optional<std::string> synonym_of(const std::string& word) {
  static const std::map<std::string, std::string> k_synonyms = {
      {"delete", "destroy"},  {"kill", "destroy"}, {"run", "create"},   {"new", "create"},
      {"up", "create"},       {"down", "destroy"}, {"logs", "history"}, {"inspect", "status"},
      {"describe", "status"}, {"get", "status"},   {"show", "status"},  {"gc", "reap"},
      {"prune", "reap"}};
  auto it = k_synonyms.find(word);
  return it == k_synonyms.end() ? std::nullopt : std::optional(it->second);
}

// The first word before `--` that is no option of `command` or of a command above it (their options
// work after it: fallthrough), said with the closest one: "unknown option --profle for create; did
// you mean --profile?".
std::optional<std::string> unknown_option(const std::vector<std::string>& words,
                                          const CLI::App& command) {
  std::vector<const CLI::App*> chain;
  for (const CLI::App* at = &command; at; at = at->get_parent()) {
    chain.push_back(at);
  }
  auto known = [&](const std::string& name) {
    return name == "--help" || name == "-h" ||
           std::any_of(chain.begin(), chain.end(),
                       [&](const CLI::App* at) { return at->get_option_no_throw(name); });
  };
  for (size_t i = 1; i < words.size() && words[i] != "--"; ++i) {
    const std::string& word = words[i];
    if (!word.starts_with("-") || word == "-") {
      continue;
    }
    std::string name = word.substr(0, word.find('='));
    if (!name.starts_with("--") && name.size() > 2) {
      name = name.substr(0, 2); // -it: CLI11 reads each letter; the first one says enough
    }
    if (known(name)) {
      continue;
    }
    std::vector<std::string> candidates;
    for (const CLI::App* at : chain) {
      for (const CLI::Option* option : at->get_options()) {
        for (const std::string& lname : option->get_lnames()) {
          candidates.push_back("--" + lname);
        }
      }
    }
    auto guess = closest_match(name, candidates);
    std::string path; // "ledger verify"; empty at the root
    for (const CLI::App* at : chain) {
      if (at->get_parent()) {
        path = at->get_name() + (path.empty() ? "" : " " + path);
      }
    }
    return fmt::format("unknown option {}{}{}", name, path.empty() ? "" : " for " + path,
                       guess ? fmt::format("; did you mean {}?", *guess) : "");
  }
  return std::nullopt;
}

// A parse error in the words of the command line, said once and plainly.
std::string explain_parse_error(const CLI::ParseError& e, const std::vector<std::string>& words,
                                CLI::App& app, CLI::App* sub, CLI::App* deepest) {
  std::string message = e.what();
  const std::string command = sub ? sub->get_name() : "";
  // A typo in an option is said first: CLI11 would call it a missing required option or an
  // extra argument, whichever it checks first.
  if (auto unknown = unknown_option(words, deepest ? *deepest : app)) {
    message = *unknown;
    if (command != "exec") {
      return message;
    }
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) && sub) {
    for (const CLI::Option* option : sub->get_options()) {
      if (option->get_required() && option->count() == 0) {
        return fmt::format("{}: missing {} ({})", command,
                           option->get_positional() ? "<" + option->get_name() + ">"
                                                    : option->get_name(),
                           option->get_description());
      }
    }
  }
  if (dynamic_cast<const CLI::ExtrasError*>(&e) && command == "exec") {
    return message + "; put -- before the command and its options: sandboxer exec ID -- sh -c "
                     "'...'";
  }
  return message;
}

} // namespace

int commands::run_main(int argc, char** argv, const MainOptions& options) {
  const auto process_started = std::chrono::steady_clock::now();
  // A reader that goes away (sandboxer list | head) must not kill a ledger write.
  std::signal(SIGPIPE, SIG_IGN);
  // Ctrl-C, a CI cancel, a closed terminal: the operation stops in order (interrupt.hpp).
  interrupt::install();
  if (options.allow_fake_now) {
    allow_fake_now(); // tests/CMakeLists.txt: the sandboxer-testclock build only
  }

  CLI::App app;
  commands::GlobalOptions global;
  commands::Runners runners;
  // The version flag is answered while parsing: what -v asks for is read from argv itself.
  commands::build_app(app, global, runners, [argc, argv] {
    std::string text = commands::version_text();
    bool verbose = false;
    std::optional<std::string> ledger, state_dir;
    for (int i = 1; i < argc; ++i) {
      std::string_view arg = argv[i];
      verbose = verbose || arg == "--verbose" ||
                (arg.size() > 1 && arg[0] == '-' && arg.find_first_not_of('v', 1) == arg.npos);
      if (i + 1 < argc && (arg == "--ledger" || arg == "--state-dir")) {
        (arg == "--ledger" ? ledger : state_dir) = argv[i + 1];
      }
    }
    return verbose ? text + "\nledger: " + commands::ledger_in_use(ledger, state_dir) : text;
  });
  std::vector<std::string> names;
  for (const auto& entry : commands::all_commands()) {
    names.emplace_back(entry.name);
    names.insert(names.end(), entry.aliases.begin(), entry.aliases.end());
  }
  commands::set_cli_root(&app);
  // A TAB in a shell (completion_scripts.cpp): before anything that could log, lock or write.
  if (argc > 1 && std::string_view(argv[1]) == "__complete") {
    return commands::run_complete(app, std::vector<std::string>(argv + 2, argv + argc));
  }

  // `help [COMMAND]` is `[COMMAND] --help`; a word that is no command is said so, with the closest
  // one, before CLI11 would call it a missing subcommand.
  std::vector<std::string> words(argv, argv + argc);
  const int at = command_index(app, argc, argv);
  const bool asks_version = std::any_of(words.begin() + 1, words.end(), [](const auto& word) {
    return word == "-V" || word == "--version";
  });
  if (at == 0 && !asks_version) {
    words.emplace_back("--help"); // a bare `sandboxer` (perhaps with options) shows what it does
  }
  if (at > 0 && words[at] == "help") {
    words.erase(words.begin() + at);
    words.emplace_back("--help");
  }
  if (at > 0 && at < static_cast<int>(words.size()) && !words[at].starts_with("-")) {
    if (std::find(names.begin(), names.end(), words[at]) == names.end()) {
      // `--stat-dir x list`: the word taken for the command is the value of a mistyped option.
      if (auto unknown = unknown_option({words.begin(), words.begin() + at}, app)) {
        fail(*unknown, "Run 'sandboxer help' for the list of commands and options.");
        return static_cast<int>(ExitCode::usage);
      }
      auto guess = synonym_of(words[at]);
      if (!guess) {
        guess = closest_match(words[at], names);
      }
      fail(fmt::format("unknown command \"{}\"{}", words[at],
                       guess ? fmt::format("; did you mean {}?", *guess) : ""),
           "Run 'sandboxer help' for the list of commands.");
      return static_cast<int>(ExitCode::usage);
    }
  }

  try {
    std::vector<std::string> reversed(words.rbegin(), words.rend() - 1);
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      return app.exit(e);
    }
    CLI::App* sub = nullptr;
    for (auto* parsed : app.get_subcommands()) {
      sub = parsed;
    }
    // The deepest command given (`ledger verify`), whose options the words may name.
    CLI::App* deepest = sub;
    while (deepest && !deepest->get_subcommands().empty()) {
      deepest = deepest->get_subcommands().back();
    }
    std::string path; // the command whose --help is meant: "ledger verify"
    for (const CLI::App* cmd = deepest; cmd && cmd->get_parent(); cmd = cmd->get_parent()) {
      path = " " + cmd->get_name() + path;
    }
    fail(explain_parse_error(e, words, app, sub, deepest), "Try 'sandboxer" + path + " --help'.");
    return static_cast<int>(ExitCode::usage);
  }

  log::init(log_level_of(global));
  try {
    for (size_t i = 0; i < runners.size(); ++i) {
      if (runners[i].first->parsed()) {
        // Before the ledger is opened: a format the command cannot print must not cost a create.
        commands::check_output_format(commands::all_commands()[i], global.output);
      }
    }
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
          if (context.delivers_at_end()) {
            context.events().deliver();
          }
          throw;
        }
        interrupt::Shield delivering;
        if (context.delivers_at_end()) {
          context.events().deliver();
        }
        spdlog::debug("timing: {} total {:.1f} ms", sub->get_name(),
                      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                process_started)
                          .count());
        return static_cast<int>(code);
      }
    }
    return static_cast<int>(ExitCode::usage);
  } catch (const Error& e) {
    fail(e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    fail(std::string("internal error: ") + e.what());
    return static_cast<int>(ExitCode::runtime);
  }
}
