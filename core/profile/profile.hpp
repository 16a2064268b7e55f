#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>

#include "core/errors.hpp"

namespace sandboxer {

// Where a secret's value comes from. Profiles hold references only, never values.
struct SecretRef {
  enum class Kind { env, file };
  Kind kind = Kind::env;
  std::string source; // the variable name, or the file path (with ~ expanded)
};

// The TTL policy of a profile. `none` is set only by an explicit `ttl: none`.
struct TtlPolicy {
  bool none = false;
  std::optional<Seconds> default_ttl;
  std::optional<Seconds> max_ttl;
};

// `ready: {port, timeout}` (docs/ports.md, "Readiness"): create returns once this exposed tcp port
// answers, and fails (destroying what it made) when it has not within `timeout`.
struct ReadyPort {
  int port = 0;
  Seconds timeout{60};
};

// Pause and idle (docs/pause.md). Empty words: the default (destroy).
struct PausePolicy {
  std::optional<Seconds> paused_max; // ttl.paused_max
  std::string on_paused_max;         // ttl.on_paused_max: destroy or snapshot
  std::optional<Seconds> idle;       // ttl.idle
  std::string on_idle;               // ttl.on_idle: destroy, pause or snapshot
  std::optional<bool> memory;        // pause.memory
  bool resume_on_exec = false;       // resume.on_exec
  nlohmann::json cost = nullptr;     // {per_hour, paused_per_hour?, currency}
};

// A warm pool (docs/pools.md): `size` ready members, each replaced after `max_age`.
struct PoolPolicy {
  int size = 0;
  Seconds max_age{3600};
  // The check of a member at its claim: the driver's status and, for a driver with exec, a no-op
  // exec (`exec`); or the status alone (`status`: a Docker exec costs ~65 ms of a ~100 ms claim).
  enum class Probe { exec, status };
  Probe probe = Probe::exec;
};

// A fully resolved profile: `extends` merged, variables expanded, common fields checked. The
// driver's own section is left as JSON for the driver to bind (drivers never see YAML).
struct Profile {
  std::string name;
  std::filesystem::path path; // the file named or found; its `extends` parents are in `chain`
  std::vector<std::filesystem::path> chain;
  std::string driver;
  TtlPolicy ttl;
  // `snapshots: { keep: N }`: a sandbox keeps its N newest snapshots; none keeps them all.
  std::optional<int> snapshots_keep;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> env;
  std::map<std::string, SecretRef> secrets;
  nlohmann::json events = nlohmann::json::array(); // sinks, checked (docs/events.md)
  std::vector<PortSpec> ports;                     // `ports:` (docs/ports.md)
  std::optional<ReadyPort> ready;                  // `ready:` (docs/ports.md, "Readiness")
  PausePolicy pause;                               // ttl.paused_max, pause:, resume:, cost:
  std::optional<PoolPolicy> pool;                  // `pool:` (docs/pools.md)
  // What is allowed but worth saying ("file:line:col: ..."): `profiles validate` and `create`
  // print them.
  std::vector<std::string> warnings;
  nlohmann::json driver_spec = nlohmann::json::object(); // the `<driver>:` section
  // Other top-level mappings: another driver's section, or a mistake (DriverCatalog says which).
  std::vector<std::string> other_sections;
  nlohmann::json resolved; // the whole merged document, secrets as references
  std::string hash;        // "sha256:<hex>" of `resolved`, canonical form

  // The place in the YAML a JSON pointer into `resolved` came from ("profiles/ci.yaml:12:5"), or
  // the file's path when unknown. Used to prefix driver schema errors.
  std::string location_of(const std::string& json_pointer) const;
  // The directory of the profile file that wrote the value at `json_pointer` (an `extends` parent
  // for an inherited value): relative paths in it resolve against this.
  std::filesystem::path directory_of(const std::string& json_pointer) const;
  std::map<std::string, std::string> locations; // json pointer -> "file:line:col"
};

// The directories searched for a profile by name, in order: --profiles-dir, $SANDBOXER_PROFILES,
// ./profiles, $XDG_CONFIG_HOME/sandboxer/profiles (or ~/.config/...), /etc/sandboxer/profiles.
std::vector<std::filesystem::path> profile_search_path(const std::optional<std::string>& cli_dir);

// Finds `name_or_path`: a value containing '/' or ending in .yaml/.yml is a file; otherwise
// <dir>/<name>.yaml (or .yml) in each directory of `search`. Throws NotFoundError listing where it
// looked.
std::filesystem::path find_profile(const std::string& name_or_path,
                                   const std::vector<std::filesystem::path>& search);

// Loads, merges (`extends`, multi-level, cycles are errors), expands ${VAR} / ${VAR:-default} and
// checks the common fields. Unknown keys, bad durations and missing variables throw ProfileError
// with "file:line:col: " in front. The driver's section is checked later by the driver itself
// (DriverCatalog::check_profile).
Profile load_profile(const std::filesystem::path& file,
                     const std::vector<std::filesystem::path>& search);

// Every profile file in the search path (first one wins on duplicate names), as (name, path).
std::vector<std::pair<std::string, std::filesystem::path>>
list_profiles(const std::vector<std::filesystem::path>& search);

// The global configuration (docs/events.md): sinks for every sandbox and delivery settings.
struct Config {
  std::filesystem::path path; // empty when there is no file
  nlohmann::json events = nlohmann::json::array();
  std::chrono::milliseconds delivery_wait{2000};
  std::optional<Seconds> expiring_window;
  // `ledger:` a postgresql:// URI, or {url, password: {env: VAR} | {file: PATH}}.
  std::optional<std::string> ledger_url;
  nlohmann::json ledger_password = nullptr; // a secret reference, never a value
  std::string ledger_where;                 // "config.yaml:3" for messages
  // How long the machine's connection keeper outlives its last command (docs/fleet.md).
  std::optional<Seconds> ledger_keep;
};

// $SANDBOXER_CONFIG, else $XDG_CONFIG_HOME/sandboxer/config.yaml, else
// ~/.config/sandboxer/config.yaml.
std::filesystem::path config_path();
// Throws ProfileError with "file:line:col: " like a profile.
Config load_config(const std::filesystem::path& file);

} // namespace sandboxer
