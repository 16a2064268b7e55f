#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include <sandboxer/driver.hpp>
#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::compose_ssh {

// The profile's `compose-ssh:` section, validated. Local paths are absolute once parsed (relative
// ones resolve against the profile's directory). See docs/drivers/compose-ssh.md.
struct Spec {
  std::string host;
  int port = 22;
  std::optional<std::string> user; // none: the ssh client's own choice (its config, then $USER)
  std::optional<std::filesystem::path> identity_file;
  std::optional<std::filesystem::path> known_hosts; // none: the user's known_hosts
  std::filesystem::path compose_file;               // on this machine, sent on create
  std::optional<std::string> service;               // where exec runs; none: the file's first
  std::optional<std::filesystem::path> env_file;    // on this machine: compose's --env-file
  std::optional<std::string> project_dir;           // on the host; none: a directory of its own
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  std::chrono::milliseconds command_timeout{std::chrono::seconds(60)}; // each short call
  std::chrono::milliseconds up_timeout{std::chrono::minutes(10)};      // compose up (pulls)
  std::chrono::milliseconds ready_timeout{std::chrono::minutes(2)};    // running / healthy
  // How long every container must have stayed up before create returns (0: running at the
  // first look after compose up, as `up -d` by hand; docs/drivers/compose-ssh.md).
  std::chrono::milliseconds settle{0};
  std::chrono::seconds stop_timeout{10}; // destroy: SIGTERM to SIGKILL
};

// The fields of a `compose-ssh:` section: reading, the stored form and the schema.
const spec::Table<Spec>& spec_table();
// Binds a stored (normalized) section; a relative path resolves against the working directory.
Spec parse_spec(const nlohmann::json& section);
// Binds a section read from a profile: relative paths resolve with `origin`, and the local files
// it names must exist.
Spec parse_profile_section(const nlohmann::json& section, const SpecOrigin& origin);
// The normalized form stored in the ledger; parse_spec(to_json(s)) == s.
nlohmann::json to_json(const Spec& spec);

} // namespace sandboxer::drivers::compose_ssh
