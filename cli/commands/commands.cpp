#include "cli/commands/commands.hpp"

#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <unistd.h>

#include <sandboxer/log.hpp>

#include "cli/ledger_select.hpp"
#include "cli/registry.hpp"
#include "core/errors.hpp"
#include "core/owner.hpp"
#include "core/profile/profile.hpp"

namespace sandboxer::commands {
namespace {

// Long operations (image pulls, commits) rewrite one status line on stderr, only when a human
// watches a terminal: logs and CI output stay clean.
class TerminalProgress : public Progress {
public:
  ~TerminalProgress() override { clear(); }
  void clear() {
    if (m_shown) {
      std::fputs("\r\033[K", stderr);
      std::fflush(stderr);
      m_shown = false;
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

} // namespace

std::filesystem::path resolve_state_dir(const std::optional<std::string>& cli_dir) {
  if (cli_dir) {
    if (cli_dir->empty()) {
      // An unset variable in a script or a cron line expands to "": not the default's place.
      throw UsageError("--state-dir is empty (is the variable that should give it unset?); give "
                       "a directory, or leave the option out for the default");
    }
    return *cli_dir;
  }
  if (const char* env = std::getenv("SANDBOXER_STATE_DIR"); env && *env) {
    return env;
  }
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "sandboxer";
  }
  auto home = home_directory();
  if (!home) {
    // Never a shared, world-writable place such as /tmp: another user could plant the ledger.
    throw UsageError("no state directory: HOME is unset and the user has no home directory; give "
                     "--state-dir DIR or set SANDBOXER_STATE_DIR");
  }
  return *home / ".local/state/sandboxer";
}

Seconds lock_timeout_of(const std::string& text) {
  // A bare number is seconds, as the option always took.
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos &&
      text.size() < 10) {
    return Seconds(std::stol(text));
  }
  return duration_option("--lock-timeout", text);
}

ledger::LedgerChoice ledger_choice(const std::optional<std::string>& flag, const Config& config) {
  const char* env = std::getenv("SANDBOXER_LEDGER");
  return ledger::choose_ledger(flag, env ? std::optional<std::string>(env) : std::nullopt,
                               config.ledger_url, config.ledger_where);
}

namespace {

Ledger open_ledger(const std::optional<std::string>& flag, const Config& config,
                   const std::filesystem::path& state_dir, Seconds lock_timeout) {
  return Ledger(ledger::open_store(ledger_choice(flag, config), config.ledger_password, state_dir,
                                   lock_timeout,
                                   config.ledger_keep.value_or(ledger::k_keeper_idle)));
}

} // namespace

Config load_config_if_any() {
  std::filesystem::path path = config_path();
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    if (const char* named = std::getenv("SANDBOXER_CONFIG"); named && *named) {
      // Named on purpose: a typo must not silently drop the event sinks it configures.
      throw UsageError(
          fmt::format("SANDBOXER_CONFIG names {}, which does not exist", path.string()));
    }
    return {};
  }
  return load_config(path);
}

std::map<std::string, std::string> key_value_options(const std::string& option,
                                                     const std::vector<std::string>& items) {
  std::map<std::string, std::string> values;
  for (const auto& item : items) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw UsageError(fmt::format("{} \"{}\": expected KEY=VALUE", option, item));
    }
    values[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return values;
}

Seconds duration_option(const std::string& option, const std::string& text) {
  auto parsed = parse_duration(text);
  if (!parsed) {
    throw UsageError(
        fmt::format("{}: invalid duration \"{}\" {}", option, text, duration_problem(text)));
  }
  return *parsed;
}

TimePoint time_option(const std::string& option, const std::string& text) {
  auto time = parse_time(text);
  if (!time) {
    throw UsageError(fmt::format(
        "{} \"{}\": expected an RFC 3339 time such as 2026-12-02T18:00:00Z", option, text));
  }
  return *time;
}

TimePoint since_option(const std::string& option, const std::string& text, TimePoint now) {
  if (auto duration = parse_duration(text)) {
    return now - *duration;
  }
  if (auto time = parse_time(text)) {
    return *time;
  }
  throw UsageError(fmt::format("{} \"{}\": expected a duration back from now (10m, 2h) or an "
                               "RFC 3339 time (2026-12-06T18:00:00Z)",
                               option, text));
}

void check_output_format(const CommandEntry& command, const std::string& format) {
  if (format == "csv" && !command.csv) {
    throw UsageError(fmt::format("-o csv: {} does not print CSV (only usage does); use -o table, "
                                 "wide, json or yaml",
                                 command.name));
  }
}

Context::Context(const GlobalOptions& global)
    : m_global(global), m_config(load_config_if_any()),
      m_ledger(open_ledger(global.ledger, m_config, resolve_state_dir(global.state_dir),
                           lock_timeout_of(global.lock_timeout))),
      m_drivers(builtin_drivers(), external_driver_path()), m_clock(system_clock()),
      m_events(m_ledger, m_config.events, {m_config.delivery_wait, false}),
      m_engine(m_ledger, m_drivers, m_clock, m_events, describe(current_owner())),
      m_out(parse_format(global.output), global.quiet) {
  m_out.set_wide(global.output == "wide");
  const auto& dir = m_ledger.state_dir();
  if (std::error_code ec;
      std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    throw Error(ExitCode::usage, fmt::format("the state dir {} is not a directory; give "
                                             "--state-dir (or $SANDBOXER_STATE_DIR) a directory",
                                             dir.string()));
  }
  if (!global.quiet && isatty(STDERR_FILENO)) {
    auto progress = std::make_unique<TerminalProgress>();
    m_out.set_before_print([shown = progress.get()] { shown->clear(); });
    m_progress = std::move(progress);
    m_engine.set_progress(m_progress.get());
  }
}

std::vector<std::filesystem::path> Context::profile_search_path() const {
  return sandboxer::profile_search_path(m_global.profiles_dir);
}

const std::vector<CommandEntry>& all_commands() {
  static const std::vector<CommandEntry> table = {
      {"create", "Create a sandbox from a profile", &setup_create,
       "sandboxer create --profile default --name scratch --ttl 45m\n"
       "ID=$(sandboxer create --profile ci --idempotency-key \"$CI_JOB_ID\" -o json | jq -r .id)"},
      {"destroy",
       "Destroy sandboxes (their records stay as history)",
       &setup_destroy,
       "sandboxer destroy scratch\n"
       "sandboxer destroy --timeout 30s sbx-k3v7q2m4xw5a\n"
       "sandboxer destroy --label team=infra --dry-run\n"
       "sandboxer destroy --all --yes   # no terminal to confirm on (CI)\n"
       "sandboxer destroy --force --forget sbx-k3v7q2m4xw5a   # the backend is gone for good",
       {"rm"}},
      {"list",
       "List sandboxes in the ledger",
       &setup_list,
       "sandboxer list\n"
       "sandboxer list -a --label team=infra -o wide\n"
       "sandboxer list -q --profile ci | xargs -r sandboxer destroy",
       {"ls", "ps"}},
      {"status", "Show a sandbox: its record, backend state and history", &setup_status,
       "sandboxer status scratch\nsandboxer status sbx-k3v7q2m4xw5a -o json"},
      {"exec", "Run a command inside a sandbox", &setup_exec,
       "sandboxer exec scratch -- make test\n"
       "sandboxer exec -it scratch -- sh\n"
       "sandboxer exec -u root scratch -- apt-get install -y jq\n"
       "sandboxer exec -t scratch -- top -bn1   # a terminal in the sandbox, even from CI"},
      {"wait", "Wait until a sandbox is running, or gone", &setup_wait,
       "sandboxer wait scratch --for running --timeout 2m\n"
       "sandboxer wait sbx-k3v7q2m4xw5a --for gone -o json"},
      {"logs", "Print a sandbox's own output (its main process, services or console)", &setup_logs,
       "sandboxer logs scratch --tail 50\n"
       "sandboxer logs -f --since 10m scratch\n"
       "sandboxer logs scratch -o json | jq -r 'select(.stream == \"stderr\") | .line'"},
      {"run", "Run one command in a fresh sandbox that lives exactly as long as the job",
       &setup_run,
       "sandboxer run --profile ci --cp-in .:/work --cp-out /work/out:./out -w /work -- make test\n"
       "sandboxer run -o json -- sh -c 'uname -a' | jq '{exit_code, stdout: .stdout.text}'\n"
       "sandboxer run --keep-on-failure --evidence evidence.json -- ./check.sh\n"
       "sandboxer run --idempotency-key \"$CI_JOB_ID\" --lease 1m -- ./long-job"},
      {"cp", "Copy files into or out of a sandbox, with their digests in its history", &setup_cp,
       "sandboxer cp ./src scratch:/work\n"
       "sandboxer cp scratch:/work/out/report.xml ./artifacts/\n"
       "sandboxer cp --verify -o json build.tar.gz scratch:/tmp/ | jq .file_digests\n"
       "tar -c -C src . | sandboxer cp - scratch:/work\n"
       "sandboxer cp scratch:/var/log/. ./logs   # a directory's contents"},
      {"port", "Print where a sandbox's exposed ports are reached", &setup_port,
       "sandboxer port web\n"
       "sandboxer port web 8080   # 127.0.0.1:49153\n"
       "curl \"http://$(sandboxer port web 8080)/health\"\n"
       "sandboxer port web -o json | jq -r '.[0].url'"},
      {"forward", "Bring a sandbox's exposed ports to this machine's loopback while it runs",
       &setup_forward,
       "sandboxer forward web 8080   # 127.0.0.1:8080 -> the sandbox's 8080, until Ctrl-C\n"
       "sandboxer forward web 18080:8080 15432:5432\n"
       "sandboxer forward web 0:8080 -o json &   # any free local port; read it from the JSON\n"
       "sandboxer forward db   # every tcp port it exposes"},
      {"snapshot", "Snapshot a running sandbox", &setup_snapshot,
       "sandboxer snapshot scratch --name after-setup"},
      {"snapshots", "List snapshots, or remove one (snapshots rm)", &setup_snapshots,
       "sandboxer snapshots scratch\nsandboxer snapshots rm scratch:after-setup"},
      {"restore", "Create a new sandbox from a snapshot", &setup_restore,
       "sandboxer restore scratch:after-setup --name copy\n"
       "sandboxer restore snp-4m2k9x7q1w3e --in-place scratch"},
      {"pause", "Pause sandboxes: no CPU (and, where the driver can, no memory), files kept",
       &setup_pause,
       "sandboxer pause scratch\n"
       "sandboxer pause scratch web -o json | jq '.[] | {id, how, memory}'\n"
       "sandboxer list   # STATE paused, and the time left while paused"},
      {"resume", "Resume paused sandboxes", &setup_resume,
       "sandboxer resume scratch\n"
       "sandboxer resume scratch && sandboxer exec scratch -- cat /work/notes.txt"},
      {"pool", "Fill warm pools now, or show them (reap refills them too)", &setup_pool,
       "sandboxer pool fill --profile ci\n"
       "sandboxer pool fill --parallel 2   # every pool; the first member alone, then 2 at once\n"
       "sandboxer pool status -o json | jq '.[] | {pool, ready, size}'\n"
       "sandboxer create --profile ci   # claims a ready member; --no-pool creates it cold"},
      {"extend", "Move a sandbox's deadline (capped by its profile's ttl.max)", &setup_extend,
       "sandboxer extend scratch --by 30m\nsandboxer extend scratch --to 2026-12-24T18:00:00Z"},
      {"reap", "Destroy every expired sandbox, and pause, snapshot or destroy idle ones (for cron)",
       &setup_reap,
       "sandboxer reap --no-wait --metrics-file /var/lib/node_exporter/sandboxer.prom\n"
       "sandboxer reap --dry-run -o json > plan.json && sandboxer reap --plan plan.json\n"
       "sandboxer reap --orphans=destroy\n"
       "sandboxer reap --orphans --profile remote-host"},
      {"history", "Print a sandbox's whole history: every transition and its event", &setup_history,
       "sandboxer history scratch -o json"},
      {"evidence", "Print one self-contained, checkable document about a sandbox", &setup_evidence,
       "sandboxer evidence scratch -o json > evidence.json"},
      {"usage",
       "Where the hours went: running and paused hours, counts and cost over a window",
       &setup_usage,
       "sandboxer usage   # the last 7 days\n"
       "sandboxer usage --since 30d --by profile\n"
       "sandboxer usage --from 2026-11-01T00:00:00Z --to 2026-12-01T00:00:00Z --by label:team "
       "-o csv > november.csv\n"
       "sandboxer usage --since 1d --by owner -o json | jq '.groups[] | {key, total_seconds, "
       "cost}'",
       {},
       true},
      {"ledger",
       "Verify the ledger's hash chains, print its head, migrate it, or say which one is in use",
       &setup_ledger,
       "sandboxer ledger verify\nsandboxer ledger head >> /safe/place/heads   # pin the closed "
       "history\nsandboxer ledger verify --head \"$(tail -1 /safe/place/heads)\"\nsandboxer "
       "ledger migrate\nsandboxer ledger info"},
      {"events", "List lifecycle events, or deliver the pending ones (events flush)", &setup_events,
       "sandboxer events list --pending\nsandboxer events flush --timeout 1m"},
      {"profiles", "List, show and validate profiles", &setup_profiles,
       "sandboxer profiles list\nsandboxer profiles show ci\n"
       "sandboxer profiles validate profiles/*.yaml"},
      {"drivers", "List the drivers (built-in and external) and their capabilities; test one",
       &setup_drivers,
       "sandboxer drivers -o json\n"
       "sandboxer drivers test --profile ci"},
      {"schema", "Print a published JSON Schema: profile, ledger, event, driver-protocol, outputs",
       &setup_schema,
       "sandboxer schema profile > profile.schema.json\n"
       "sandboxer schema list"},
      {"version", "Print the version, the build and the drivers", &setup_version,
       "sandboxer version -o json"},
      {"completion", "Print a shell completion script (bash, zsh or fish)", &setup_completion,
       "source <(sandboxer completion bash)\n"
       "sandboxer completion fish > ~/.config/fish/completions/sandboxer.fish"},
      {"man", "Print the manual page (roff), made from these same command definitions", &setup_man,
       "sandboxer man | man -l -"},
  };
  return table;
}

} // namespace sandboxer::commands
