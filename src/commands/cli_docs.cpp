// What describes the CLI to shells and to man: generated from the parsed CLI11 definitions, so
// that completion, the man page and --help never disagree.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <iostream>

#include "commands/commands.hpp"

namespace sandboxer::commands {
namespace {

const CLI::App* g_root = nullptr;

struct OptionInfo {
  std::vector<std::string> names; // "--state-dir", "-o"
  std::string description;
  bool takes_value = false;
};

std::vector<OptionInfo> options_of(const CLI::App& app) {
  std::vector<OptionInfo> options;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_positional()) {
      continue;
    }
    OptionInfo info;
    for (const auto& name : option->get_snames()) {
      info.names.push_back("-" + name);
    }
    for (const auto& name : option->get_lnames()) {
      info.names.push_back("--" + name);
    }
    info.description = option->get_description();
    info.takes_value = option->get_type_size() != 0;
    options.push_back(std::move(info));
  }
  return options;
}

std::vector<const CLI::App*> subcommands_of(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App*) { return true; });
}

std::string words_of(const std::vector<OptionInfo>& options) {
  std::string words;
  for (const auto& option : options) {
    for (const auto& name : option.names) {
      words += (words.empty() ? "" : " ") + name;
    }
  }
  return words;
}

// What may follow a command's name: its options and its own subcommands (`snapshots rm`).
std::string command_words(const CLI::App& sub) {
  std::string words = words_of(options_of(sub));
  for (const auto* nested : subcommands_of(sub)) {
    words += " " + nested->get_name();
  }
  return words;
}

std::string bash(const CLI::App& root) {
  std::string cases;
  std::string commands = "help";
  for (const auto* sub : subcommands_of(root)) {
    commands += " " + sub->get_name();
    cases += fmt::format("    {}) words=\"{}\" ;;\n", sub->get_name(), command_words(*sub));
  }
  return fmt::format(R"(# bash completion for sandboxer (sandboxer completion bash)
_sandboxer() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} command="" i
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${{COMP_WORDS[i]}} in -*) ;; *) command=${{COMP_WORDS[i]}}; break ;; esac
  done
  local words="{} {}"
  case $command in
{}    help) words="{}" ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _sandboxer sandboxer
)",
                     commands, words_of(options_of(root)), cases, commands);
}

std::string zsh(const CLI::App& root) {
  std::string text = "#compdef sandboxer\n# zsh completion for sandboxer (sandboxer completion "
                     "zsh)\n_sandboxer() {\n  local -a commands\n  commands=(\n";
  for (const auto* sub : subcommands_of(root)) {
    std::string description = sub->get_description();
    std::replace(description.begin(), description.end(), '\'', ' ');
    text += fmt::format("    '{}:{}'\n", sub->get_name(), description);
  }
  text += "  )\n  if (( CURRENT == 2 )); then\n    _describe command commands\n    return\n  fi\n"
          "  case ${words[2]} in\n";
  for (const auto* sub : subcommands_of(root)) {
    text += fmt::format("    {}) compadd -- {} ;;\n", sub->get_name(), command_words(*sub));
  }
  text += "  esac\n}\ncompdef _sandboxer sandboxer\n";
  return text;
}

std::string fish_quoted(std::string text) {
  std::string out = "'";
  for (char c : text) {
    out += c == '\'' ? std::string("\\'") : std::string(1, c);
  }
  return out + "'";
}

// " -s o -l output -r -d 'Output format...'": one option's part of a fish `complete` line.
std::string fish_option(const OptionInfo& option) {
  std::string flags;
  for (const auto& name : option.names) {
    flags += name.starts_with("--") ? " -l " + name.substr(2) : " -s " + name.substr(1);
  }
  return fmt::format("{}{} -d {}", flags, option.takes_value ? " -r" : "",
                     fish_quoted(option.description));
}

std::string fish(const CLI::App& root) {
  std::string text = "# fish completion for sandboxer (sandboxer completion fish)\n"
                     "complete -c sandboxer -f\n";
  for (const auto* sub : subcommands_of(root)) {
    text += fmt::format("complete -c sandboxer -n __fish_use_subcommand -a {} -d {}\n",
                        sub->get_name(), fish_quoted(sub->get_description()));
    for (const auto& option : options_of(*sub)) {
      text += fmt::format("complete -c sandboxer -n '__fish_seen_subcommand_from {}'{}\n",
                          sub->get_name(), fish_option(option));
    }
  }
  for (const auto& option : options_of(root)) {
    text += "complete -c sandboxer" + fish_option(option) + "\n";
  }
  return text;
}

// Text for roff: a leading dot or quote would be read as a request; backslashes are escapes.
std::string roff(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c == '\\' ? std::string("\\e") : c == '-' ? std::string("\\-") : std::string(1, c);
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) {
    out = "\\&" + out;
  }
  return out;
}

std::string roff_options(const std::vector<OptionInfo>& options) {
  std::string text;
  for (const auto& option : options) {
    std::string names;
    for (const auto& name : option.names) {
      names += (names.empty() ? "" : ", ") + ("\\fB" + roff(name) + "\\fR");
    }
    text += ".TP\n" + names + (option.takes_value ? " \\fIVALUE\\fR" : "") + "\n" +
            roff(option.description) + "\n";
  }
  return text;
}

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

std::string completion_script(const CLI::App& root, const std::string& shell) {
  if (shell == "bash") {
    return bash(root);
  }
  if (shell == "zsh") {
    return zsh(root);
  }
  if (shell == "fish") {
    return fish(root);
  }
  throw UsageError(fmt::format("completion: unknown shell \"{}\" (bash, zsh or fish)", shell));
}

std::string man_page(const CLI::App& root) {
  std::string text = fmt::format(".TH SANDBOXER 1 \"\" \"sandboxer {}\" \"User Commands\"\n"
                                 ".SH NAME\nsandboxer \\- {}\n"
                                 ".SH SYNOPSIS\n\\fBsandboxer\\fR [\\fIOPTIONS\\fR] "
                                 "\\fICOMMAND\\fR [\\fIARGS\\fR]\n"
                                 ".SH OPTIONS\n{}.SH COMMANDS\n",
                                 SANDBOXER_VERSION,
                                 roff(root.get_description().substr(
                                     root.get_description().starts_with("sandboxer: ") ? 11 : 0)),
                                 roff_options(options_of(root)));
  for (const auto& entry : all_commands()) {
    const CLI::App* sub = root.get_subcommand(entry.name);
    text += fmt::format(".SS {}\n{}\n", entry.name, roff(entry.description));
    for (const CLI::Option* option : sub->get_options()) {
      if (option->get_positional()) {
        text += fmt::format(".TP\n\\fI{}\\fR\n{}\n", roff(option->get_name()),
                            roff(option->get_description()));
      }
    }
    text += roff_options(options_of(*sub));
    for (const auto* nested : subcommands_of(*sub)) {
      text += fmt::format(".TP\n\\fB{} {}\\fR\n{}\n", entry.name, nested->get_name(),
                          roff(nested->get_description()));
    }
    if (entry.examples && *entry.examples) {
      text += ".PP\nExamples:\n.nf\n.RS\n" + roff(entry.examples) + "\n.RE\n.fi\n";
    }
  }
  text += ".SH EXIT STATUS\n0 done; 1 runtime failure; 2 usage (bad command line or profile); "
          "3 not found; 4 backend failure; 5 lock not acquired; 6 some of several operations "
          "failed; 7 refused by policy; 8 evidence does not verify; 9 the shared ledger's server "
          "unreachable; 129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM; "
          "\\fBexec\\fR returns the command's own status (127: not found, 126: not "
          "executable).\n"
          ".SH FILES\n.TP\n$XDG_STATE_HOME/sandboxer/ledger.json\nthe ledger "
          "(\\-\\-state\\-dir, $SANDBOXER_STATE_DIR)\n"
          ".TP\n$XDG_CONFIG_HOME/sandboxer/config.yaml\nevent sinks and delivery "
          "($SANDBOXER_CONFIG)\n"
          ".TP\n/etc/sandboxer/profiles, PREFIX/share/sandboxer/profiles\nprofiles\n"
          ".SH SEE ALSO\nThe documents under PREFIX/share/doc/sandboxer.\n";
  return text;
}

void setup_completion(CLI::App& app, Runner& runner) {
  auto shell = std::make_shared<std::string>();
  app.add_option("shell", *shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  runner = [shell](Context&) {
    std::cout << completion_script(root_or_throw(), *shell);
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
