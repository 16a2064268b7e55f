#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>

#include "drivers/compose-ssh/ssh.hpp"
#include "drivers/compose-ssh/tar.hpp"

namespace sandboxer::drivers::compose_ssh {

// Where the driver keeps its files on the host, relative to the remote user's home.
inline constexpr const char* k_state_dir = ".sandboxer/compose-ssh";

// Runs each task on a thread of its own (each a remote command over the shared connection) and
// waits for all; the first failure is rethrown.
void all_at_once(const std::vector<std::function<void()>>& tasks);

// One container of a compose project, as `docker ps` shows it.
struct Container {
  std::string id;
  std::string service;
  std::string state;  // created, running, paused, restarting, exited, dead
  std::string status; // "Up 3 seconds (healthy)", "Exited (1) 2 seconds ago"
  std::string compose_version;
  std::map<std::string, std::string> labels; // with_labels only
  // "healthy", "unhealthy", "starting", or empty without a healthcheck.
  std::string health() const;
  std::optional<int> exit_code() const;
};

// The docker CLI and compose on the host, over one Ssh: each method is one or a few remote
// commands with the spec's deadlines, and says which host in every error.
class Host {
public:
  Host(const Ssh& ssh, std::chrono::milliseconds command_timeout);

  // Runs argv; its stdout when it exits 0, else DriverError "WHAT on HOST failed: <stderr>".
  std::string check(const std::vector<std::string>& argv, const std::string& what) const;
  proc::Result run(const std::vector<std::string>& argv) const;
  // `docker compose` when the host's docker has the plugin, else `docker-compose` (asked once per
  // host and process).
  std::vector<std::string> compose_command() const;
  // Writes the entries (paths relative to the home directory) with one `tar -x`.
  void upload(const std::vector<TarEntry>& entries) const;
  std::string read(const std::string& path, const std::string& what) const;

  // The containers of `project` (all states), labels included when asked.
  std::vector<Container> containers(const std::string& project, bool with_labels = false) const;
  // The containers carrying every label of `selector`, with their labels.
  std::vector<Container> containers_labelled(const Labels& selector) const;
  // Removes everything the project made: containers (after `grace` for SIGTERM) with their
  // anonymous volumes, its networks and named volumes, images compose built for it, and the
  // driver's directory. Nothing there is success.
  void tear_down(const std::string& project, std::chrono::seconds grace) const;

  const Ssh& ssh() const { return m_ssh; }
  std::string where() const { return m_ssh.where(); }

private:
  std::vector<std::string> lines(const std::vector<std::string>& argv,
                                 const std::string& what) const;
  std::vector<Container> parse_containers(const std::string& listing, bool with_labels) const;
  const Ssh& m_ssh;
  std::chrono::milliseconds m_timeout;
};

} // namespace sandboxer::drivers::compose_ssh
