#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sandboxer {

// Who made a sandbox or holds a lock: kept in every record (docs/ledger-format.md).
struct Owner {
  std::string user;
  std::string host;
  int pid = 0;
  std::map<std::string, std::string> ci; // CI_JOB_ID, GITHUB_RUN_ID, ... when present
};

// Who is running this process: $USER (or the passwd entry), the host name, the pid, and the CI
// variables that are set (CI_JOB_ID, CI_PIPELINE_ID, GITHUB_RUN_ID, GITHUB_REPOSITORY, ...).
Owner current_owner();

// $HOME, else the passwd entry's home (cron, systemd units and `env -i` may leave HOME unset);
// none when neither names one. Never a shared fallback such as /tmp.
std::optional<std::filesystem::path> home_directory();

// $XDG_CONFIG_HOME, else ~/.config; none without a home.
std::optional<std::filesystem::path> config_home();

// The directories of a colon-separated list such as $PATH (empty entries left out); none when
// `variable` is unset.
std::vector<std::filesystem::path> directories_in(const char* variable);

// $SANDBOXER_HOST when set, else gethostname(), or "unknown-host".
std::string host_name();

// "alice@build-7 pid 4242", with " ci GITHUB_RUN_ID=42" when a CI job id is known.
std::string describe(const Owner& owner);

} // namespace sandboxer
