#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/clock.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/lock_file.hpp>

#include "cli/commands/output.hpp"
#include "cli/ledger_select.hpp"
#include "core/errors.hpp"
#include "core/events/events.hpp"
#include "core/ledger/ledger.hpp"
#include "core/lifecycle/lifecycle.hpp"
#include "core/profile/profile.hpp"

namespace CLI {
class App;
}

namespace sandboxer::commands {

// Options shared by every subcommand (nix's MixJSON and friends).
struct GlobalOptions {
  std::optional<std::string> state_dir;
  std::optional<std::string> profiles_dir;
  std::string output = "table";
  bool quiet = false;
  int verbose = 0;
  std::optional<std::string> log_level;
  std::string lock_timeout = "30s";  // a duration; a bare number is seconds
  std::optional<std::string> ledger; // --ledger URL
};

// Which ledger --ledger, $SANDBOXER_LEDGER or config.yaml's `ledger:` names (docs/fleet.md).
ledger::LedgerChoice ledger_choice(const std::optional<std::string>& flag, const Config& config);
Config load_config_if_any();

// What a running subcommand works with: built once in main after parsing.
class Context {
public:
  explicit Context(const GlobalOptions& global);
  const GlobalOptions& global() const { return m_global; }
  const Ledger& ledger() const { return m_ledger; }
  const DriverCatalog& drivers() const { return m_drivers; }
  Engine& engine() { return m_engine; }
  const Clock& clock() const { return m_clock; }
  Output& out() { return m_out; }
  const Config& config() const { return m_config; }
  events::Publisher& events() { return m_events; }
  // Whether the outbox is delivered when the command ends: not by a process that is no lifecycle
  // command and may end at any time, long after it started (`ledger keep`).
  bool delivers_at_end() const { return m_delivers_at_end; }
  void deliver_nothing_at_end() { m_delivers_at_end = false; }
  std::vector<std::filesystem::path> profile_search_path() const;

private:
  GlobalOptions m_global;
  Config m_config; // before the ledger, which it may choose
  Ledger m_ledger;
  DriverCatalog m_drivers;
  const Clock& m_clock;
  events::Publisher m_events;
  Engine m_engine;
  Output m_out;
  std::unique_ptr<Progress> m_progress;
  bool m_delivers_at_end = true;
};

using Runner = std::function<ExitCode(Context&)>;

// One subcommand: `setup` adds its options to `app` and sets `runner` to the function that runs it
// with the parsed options.
struct CommandEntry {
  const char* name;
  const char* description;
  void (*setup)(CLI::App& app, Runner& runner);
  const char* examples; // shown under "Examples:" in its --help and its man page section
  // Other names that run it (CLI11 alias()): docker's and kubectl's words for it. Shown in --help
  // ("list, ls, ps"), the man page and completion (docs/completion.md).
  std::vector<std::string> aliases = {};
  // Whether it prints -o csv (its table as CSV); every other command refuses it, before it runs.
  bool csv = false;
};

// Throws UsageError when `format` (-o) is one `command` does not print.
void check_output_format(const CommandEntry& command, const std::string& format);

// Commands that describe the CLI itself (completion scripts, the man page): they read the parsed
// definitions of `root` (they are still handed a Context, which they do not use).
void setup_completion(CLI::App& app, Runner& runner);
void setup_man(CLI::App& app, Runner& runner);
void setup_schema(CLI::App& app, Runner& runner);
// The completion script of `shell` (bash, zsh or fish): it asks `sandboxer __complete`.
std::string completion_script(const std::string& shell);
// The manual page (roff, section 1) of `root`: every command, option and example.
std::string man_page(const CLI::App& root);
// What --version and `version` print: version, commit, compiler, drivers and the libcurl in use.
nlohmann::json build_info();
std::string version_text();
// Which ledger a command would use, without connecting: for `--version -v` and `status`.
std::string ledger_in_use(const std::optional<std::string>& flag,
                          const std::optional<std::string>& state_dir);
std::string ledger_in_use(const std::optional<std::string>& flag,
                          const std::optional<std::string>& state_dir, const Config& config);
// Set by main once the CLI is built: what completion and man describe.
void set_cli_root(const CLI::App* root);

const std::vector<CommandEntry>& all_commands();

// Where the ledger lives: --state-dir, $SANDBOXER_STATE_DIR, $XDG_STATE_HOME/sandboxer,
// ~/.local/state/sandboxer.
std::filesystem::path resolve_state_dir(const std::optional<std::string>& cli_dir);
// --lock-timeout: a duration ("30s", "2m", "0"); a bare number is seconds. UsageError otherwise.
Seconds lock_timeout_of(const std::string& text);

// Runs a create or restore; when it throws after writing a failed record, prints that record
// (json/yaml) before the error goes on.
CreateOutcome run_printing_failure(Context& context, const std::function<CreateOutcome()>& run);

// Prints a created (or reused, or restored) sandbox: its id alone under --quiet, else the record.
void print_created(Context& context, const CreateOutcome& outcome);

// Parses a duration option, or throws UsageError naming `option`.
Seconds duration_option(const std::string& option, const std::string& text);
// Parses an RFC 3339 time option, or throws UsageError naming `option`.
TimePoint time_option(const std::string& option, const std::string& text);
// A `--since` value: a duration back from `now` ("10m") or a time ("2026-12-06T18:00:00Z");
// throws UsageError naming `option` otherwise.
TimePoint since_option(const std::string& option, const std::string& text, TimePoint now);
// Parses repeated KEY=VALUE options (--label, --env), or throws UsageError naming `option`.
std::map<std::string, std::string> key_value_options(const std::string& option,
                                                     const std::vector<std::string>& items);

// What `create` and `run` both take to make a sandbox: the profile, and the options of the make.
struct CreateFlags {
  std::string profile = "default";
  std::optional<std::string> name;
  std::optional<std::string> ttl;
  std::optional<std::string> idempotency_key;
  std::vector<std::string> labels;
  bool no_pool = false;
};
void add_create_flags(CLI::App& app, CreateFlags& flags, const char* ttl_help);
Profile profile_of(Context& context, const CreateFlags& flags);
CreateOptions create_options_of(const CreateFlags& flags);

// What `exec` and `run` both take to run a command: its environment, directory, user, stdin and
// terminal (the command itself is their positional argument).
struct ExecFlags {
  std::vector<std::string> env;
  std::optional<std::string> workdir;
  std::optional<std::string> user;
  bool interactive = false;
  bool tty = false;
};
void add_exec_flags(CLI::App& app, ExecFlags& flags);
ExecRequest exec_request_of(const ExecFlags& flags, const std::vector<std::string>& command);

void setup_create(CLI::App& app, Runner& runner);
void setup_destroy(CLI::App& app, Runner& runner);
void setup_list(CLI::App& app, Runner& runner);
void setup_status(CLI::App& app, Runner& runner);
void setup_port(CLI::App& app, Runner& runner);
void setup_forward(CLI::App& app, Runner& runner);
void setup_snapshot(CLI::App& app, Runner& runner);
void setup_snapshots(CLI::App& app, Runner& runner);
void setup_restore(CLI::App& app, Runner& runner);
void setup_extend(CLI::App& app, Runner& runner);
void setup_pause(CLI::App& app, Runner& runner);
void setup_resume(CLI::App& app, Runner& runner);
void setup_exec(CLI::App& app, Runner& runner);
void setup_wait(CLI::App& app, Runner& runner);
void setup_logs(CLI::App& app, Runner& runner);
void setup_cp(CLI::App& app, Runner& runner);
void setup_run(CLI::App& app, Runner& runner);
void setup_reap(CLI::App& app, Runner& runner);
void setup_profiles(CLI::App& app, Runner& runner);
void setup_drivers(CLI::App& app, Runner& runner);
void setup_version(CLI::App& app, Runner& runner);
void setup_events(CLI::App& app, Runner& runner);
void setup_history(CLI::App& app, Runner& runner);
void setup_usage(CLI::App& app, Runner& runner);
void setup_evidence(CLI::App& app, Runner& runner);
void setup_ledger(CLI::App& app, Runner& runner);
void setup_pool(CLI::App& app, Runner& runner);

// The reaper lock (<state>/reap.lock), held by reap and pool fill: an empty guard with `no_wait`
// when another holds it, else a wait of `wait` (a duration option's text).
LockFile::Guard lock_reaper(Context& context, bool no_wait, const std::string& wait);
// The profiles named (each must have a pool), or every profile on the search path with a pool
// (one that does not load is a warning: reap's refill must go on for the others).
std::vector<Profile> pool_profiles(Context& context, const std::vector<std::string>& names);

} // namespace sandboxer::commands
