#include "commands/commands.hpp"

#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <unistd.h>

#include <sandboxer/log.hpp>
#include <sandboxer/owner.hpp>
#include <sandboxer/profile.hpp>

namespace sandboxer::commands {
namespace {

// Long operations (image pulls, commits) rewrite one status line on stderr, only when a human
// watches a terminal: logs and CI output stay clean.
class TerminalProgress : public Progress {
public:
  ~TerminalProgress() override {
    if (m_shown) {
      std::fputs("\r\033[K", stderr);
    }
  }
  void update(std::string_view what) override {
    std::string line(what.substr(0, 120));
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    m_shown = true;
  }

private:
  bool m_shown = false;
};

Config load_config_if_any() {
  std::filesystem::path path = config_path();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    return {};
  }
  return load_config(path);
}

} // namespace

std::filesystem::path resolve_state_dir(const std::optional<std::string>& cli_dir) {
  if (cli_dir && !cli_dir->empty()) {
    return *cli_dir;
  }
  if (const char* env = std::getenv("SANDBOXER_STATE_DIR"); env && *env) {
    return env;
  }
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "sandboxer";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : "/tmp") / ".local/state/sandboxer";
}

Seconds duration_option(const std::string& option, const std::string& text) {
  auto parsed = parse_duration(text);
  if (!parsed) {
    throw UsageError(
        fmt::format("{}: invalid duration \"{}\" {}", option, text, duration_problem(text)));
  }
  return *parsed;
}

Context::Context(const GlobalOptions& global)
    : m_global(global),
      m_ledger(resolve_state_dir(global.state_dir), Seconds(global.lock_timeout_s)),
      m_clock(system_clock()), m_config(load_config_if_any()),
      m_events(m_ledger, m_config.events, {m_config.delivery_wait, false}),
      m_engine(m_ledger, m_clock, m_events, describe(current_owner())),
      m_out(parse_format(global.output), global.quiet) {
  if (!global.quiet && isatty(STDERR_FILENO)) {
    m_progress = std::make_unique<TerminalProgress>();
    m_engine.set_progress(m_progress.get());
  }
}

std::vector<std::filesystem::path> Context::profile_search_path() const {
  return sandboxer::profile_search_path(m_global.profiles_dir);
}

const std::vector<CommandEntry>& all_commands() {
  static const std::vector<CommandEntry> table = {
      {"create", "Create a sandbox from a profile", &setup_create},
      {"destroy", "Destroy sandboxes (their records stay as history)", &setup_destroy},
      {"list", "List sandboxes in the ledger", &setup_list},
      {"status", "Show a sandbox: its record, backend state and history", &setup_status},
      {"exec", "Run a command inside a sandbox", &setup_exec},
      {"snapshot", "Snapshot a running sandbox", &setup_snapshot},
      {"snapshots", "List snapshots, or remove one (snapshots rm)", &setup_snapshots},
      {"restore", "Create a new sandbox from a snapshot", &setup_restore},
      {"extend", "Move a sandbox's deadline (capped by its profile's ttl.max)", &setup_extend},
      {"reap", "Destroy every expired sandbox (for cron)", &setup_reap},
      {"history", "Print a sandbox's whole history: every transition and its event",
       &setup_history},
      {"events", "List lifecycle events, or deliver the pending ones (events flush)",
       &setup_events},
      {"profiles", "List, show and validate profiles", &setup_profiles},
      {"drivers", "List the compiled-in drivers and their capabilities", &setup_drivers},
      {"version", "Print the version and the drivers", &setup_version},
  };
  return table;
}

} // namespace sandboxer::commands
