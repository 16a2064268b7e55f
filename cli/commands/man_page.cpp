// The manual page, made from the same CLI11 definitions and value table (cli_values.cpp) as
// --help and completion, so that the three never disagree.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "build_info.hpp"
#include "cli/commands/cli_values.hpp"
#include "cli/commands/commands.hpp"

namespace sandboxer::commands {
namespace {

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

std::string italic(const std::string& text) {
  return "\\fI" + roff(text) + "\\fR";
}
std::string bold(const std::string& text) {
  return "\\fB" + roff(text) + "\\fR";
}

// "-o, --output FORMAT", "--orphans[=MODE]", "--force".
std::string option_heading(const CLI::App& command, const CLI::Option& option) {
  std::string names;
  for (const auto& name : option.get_snames()) {
    names += (names.empty() ? "" : ", ") + bold("-" + name);
  }
  for (const auto& name : option.get_lnames()) {
    names += (names.empty() ? "" : ", ") + bold("--" + name);
  }
  const std::string value = value_name(command, option);
  if (value.empty()) {
    return names;
  }
  return names + (value_optional(option) ? "[=" + italic(value) + "]" : " " + italic(value));
}

// The options of `command`; --help only where it is said once, under OPTIONS.
std::string roff_options(const CLI::App& command, bool with_help) {
  std::string text;
  for (const CLI::Option* option : command.get_options()) {
    if (option->get_positional() || (!with_help && option == command.get_help_ptr())) {
      continue;
    }
    text +=
        ".TP\n" + option_heading(command, *option) + "\n" + roff(option->get_description()) + "\n";
  }
  return text;
}

std::string positional_name(const CLI::App& command, const CLI::Option& option) {
  const std::string name = italic(value_name(command, option));
  const std::string many = option.get_expected_max() > 1 ? "..." : "";
  return option.get_required() ? name + many : "[" + name + many + "]";
}

// "sandboxer snapshots rm SNAPSHOT", with [OPTIONS] where the command has any of its own.
std::string synopsis(const CLI::App& command) {
  std::string text = bold("sandboxer " + command_path(command));
  if (command
          .get_options([&](const CLI::Option* option) {
            return !option->get_positional() && option != command.get_help_ptr();
          })
          .size() > 0) {
    text += " [" + italic("OPTIONS") + "]";
  }
  for (const CLI::Option* option : positionals_of(command)) {
    text += " " + positional_name(command, *option);
  }
  return text;
}

std::string positionals(const CLI::App& command) {
  std::string text;
  for (const CLI::Option* option : positionals_of(command)) {
    text +=
        ".TP\n" + positional_name(command, *option) + "\n" + roff(option->get_description()) + "\n";
  }
  return text;
}

std::string command_section(const CLI::App& command, const char* examples) {
  std::string text = fmt::format(".SS {}\n{}\n.br\n{}\n", command.get_name(), synopsis(command),
                                 roff(command.get_description()));
  if (!command.get_aliases().empty()) {
    std::string aliases;
    for (const std::string& alias : command.get_aliases()) {
      aliases += (aliases.empty() ? "" : ", ") + ("\\fB" + alias + "\\fR");
    }
    text += ".br\nAliases: " + aliases + "\n";
  }
  text += positionals(command) + roff_options(command, false);
  for (const CLI::App* nested : nested_commands(command)) {
    text += ".TP\n" + synopsis(*nested) + "\n" + roff(nested->get_description()) + "\n";
    const std::string inner = positionals(*nested) + roff_options(*nested, false);
    if (!inner.empty()) {
      text += ".RS\n" + inner + ".RE\n";
    }
  }
  if (examples && *examples) {
    text += ".PP\nExamples:\n.RS\n.nf\n" + roff(examples) + "\n.fi\n.RE\n";
  }
  return text;
}

struct Variable {
  const char* name;
  const char* meaning;
};

const std::vector<Variable>& environment() {
  static const std::vector<Variable> variables = {
      {"SANDBOXER_STATE_DIR", "The directory of the ledger (--state-dir wins)."},
      {"SANDBOXER_PROFILES",
       "Directories searched for profiles after --profiles-dir, separated by ':'."},
      {"SANDBOXER_LEDGER",
       "A postgresql:// URI of a shared ledger, or \"local\" (--ledger wins; never a password)."},
      {"SANDBOXER_CONFIG", "The config.yaml to read instead of "
                           "$XDG_CONFIG_HOME/sandboxer/config.yaml; it must exist."},
      {"SANDBOXER_DRIVER_PATH",
       "Directories searched first for external drivers (sandboxer-driver-NAME), ':'-separated."},
      {"SANDBOXER_DRIVER_TIMEOUT",
       "Seconds an external driver's call may take (every call but exec)."},
      {"SANDBOXER_HOST", "This machine's name in the ledger (default: the host name)."},
      {"XDG_STATE_HOME", "The ledger is under $XDG_STATE_HOME/sandboxer (default "
                         "~/.local/state/sandboxer)."},
      {"XDG_CONFIG_HOME", "config.yaml, profiles and drivers under $XDG_CONFIG_HOME/sandboxer "
                          "(default ~/.config/sandboxer)."},
      {"DOCKER_HOST", "The Docker Engine of new sandboxes of a profile that names no "
                      "docker.host (default unix:///var/run/docker.sock)."},
      {"DOCKER_TLS_VERIFY", "Set for a tcp:// engine: refused, sandboxer speaks no TLS to the "
                            "engine (use a unix socket or an ssh tunnel)."},
      {"E2B_API_URL, E2B_DOMAIN", "The E2B service, when the profile names none."},
      {"MODAL_SERVER_URL, MODAL_ENVIRONMENT",
       "The Modal server and environment, when the profile names none."},
      {"CI_JOB_ID, GITHUB_RUN_ID (and other CI variables)",
       "Recorded as the owner's CI job in each sandbox's record and history."},
  };
  return variables;
}

std::string environment_section() {
  std::string text = ".SH ENVIRONMENT\n";
  for (const auto& variable : environment()) {
    text += ".TP\n" + bold(variable.name) + "\n" + roff(variable.meaning) + "\n";
  }
  return text + ".PP\nSecrets come only from a profile's references ({env: VAR} or {file: "
                "PATH}); the ledger records the reference, never the value.\n";
}

} // namespace

std::string man_page(const CLI::App& root) {
  const std::string& about = root.get_description();
  std::string text = fmt::format(
      ".TH SANDBOXER 1 \"{}\" \"sandboxer {}\" \"User Commands\"\n"
      ".SH NAME\nsandboxer \\- {}\n"
      ".SH SYNOPSIS\n\\fBsandboxer\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n"
      ".SH OPTIONS\n{}.SH COMMANDS\n",
      SANDBOXER_DATE, SANDBOXER_VERSION,
      roff(about.substr(about.starts_with("sandboxer: ") ? 11 : 0)), roff_options(root, true));
  for (const auto& entry : all_commands()) {
    text += command_section(*root.get_subcommand(entry.name), entry.examples);
  }
  text += ".SH EXIT STATUS\n0 done; 1 runtime failure; 2 usage (bad command line or profile); "
          "3 not found; 4 backend failure; 5 lock not acquired; 6 some of several operations "
          "failed; 7 refused by policy; 8 evidence does not verify; 9 the shared ledger's server "
          "unreachable; 129/130/143 interrupted by SIGHUP/SIGINT/SIGTERM; "
          "\\fBexec\\fR returns the command's own status (127: not found, 126: not "
          "executable).\n" +
          environment_section() +
          ".SH FILES\n.TP\n$XDG_STATE_HOME/sandboxer/ledger.json\nthe ledger "
          "(\\-\\-state\\-dir, $SANDBOXER_STATE_DIR)\n"
          ".TP\n$XDG_CONFIG_HOME/sandboxer/config.yaml\nevent sinks, delivery and the ledger "
          "($SANDBOXER_CONFIG)\n"
          ".TP\nPROFILE.yaml (or .yml)\nprofiles, searched in order: \\-\\-profiles\\-dir, each "
          "directory of $SANDBOXER_PROFILES, ./profiles, $XDG_CONFIG_HOME/sandboxer/profiles, "
          "/etc/sandboxer/profiles, PREFIX/share/sandboxer/profiles (beside the binary); the "
          "first of a name wins\n"
          ".TP\nsandboxer\\-driver\\-NAME\nexternal drivers, searched in "
          "$SANDBOXER_DRIVER_PATH, $XDG_CONFIG_HOME/sandboxer/drivers, "
          "/usr/local/lib/sandboxer/drivers, /usr/lib/sandboxer/drivers, then $PATH\n"
          ".SH SEE ALSO\nThe documents under PREFIX/share/doc/sandboxer.\n";
  return text;
}

} // namespace sandboxer::commands
