#pragma once

#include <chrono>
#include <filesystem>
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
  std::string ports_json; // the engine's NetworkSettings.Ports (a readiness read only)
  // "healthy", "unhealthy", "starting", or empty without a healthcheck.
  std::string health() const;
  std::optional<int> exit_code() const;
};

// One read of a project's containers, with `docker inspect`'s facts in docker ps's words (so that
// health() and exit_code() read them alike).
struct Reading {
  std::vector<Container> containers;
  // How long the youngest container has been running by the host's own clock, when every
  // container runs and the host told its time: readiness needs no second look to know it.
  std::optional<std::chrono::milliseconds> all_up_for;
  // A resume's read: compose start ran (new processes), rather than a thaw alone.
  bool started = false;
};

// Which compose the host has: the v2 plugin (`docker compose`) or v1 (`docker-compose`).
enum class ComposeKind { plugin, v1 };
std::vector<std::string> compose_argv(ComposeKind kind);

// What the one remote command of a create did: upload, compose up, first read.
struct UpResult {
  enum class Stage { upload, up, read, done } stage = Stage::upload;
  int exit_code = 0;
  ComposeKind kind = ComposeKind::v1;
  bool kind_was_cached = false;
  std::string output; // compose's and the failing step's words (the command's stderr)
  Reading reading;    // when stage is done
};

// `sandboxer pause` and `resume` of a project (docs/drivers/compose-ssh.md, "Pause"), each one
// remote command and idempotent. freeze: `docker pause` of its running containers (processes and
// memory kept). stop: `compose stop -t grace`, marked on the host so that status says paused.
// resume: `docker unpause` of its paused containers, `compose start` when something is stopped,
// then the readiness read.
enum class PauseStep { freeze, stop, resume };
struct PauseCall {
  PauseStep step = PauseStep::freeze;
  std::string project;
  std::string project_dir;            // compose's --project-directory; empty: the project's files
  std::optional<ComposeKind> compose; // none: asked of the host
  std::chrono::seconds grace{10};     // stop: SIGTERM to SIGKILL
  std::string pause_id;               // stop: kept in the mark
};
// The remote command's argv; exposed for tests.
std::vector<std::string> pause_argv(const PauseCall& call);

// status's remote command: the project's containers, then "stopped-by-pause" when a stop paused
// it; exposed for tests.
std::vector<std::string> status_argv(const std::string& project);

// What status reads: the project's containers, and whether a pause stopped them.
struct ProjectStatus {
  std::vector<Container> containers;
  bool stopped_by_pause = false;
};

// Parses containers in the list-by-label format (labels as JSON last); exposed for tests.
std::vector<Container> parse_labelled(const std::string& listing);

// Parses the lines of the readiness read ("now=<epoch seconds>", then one line per container in
// k_inspect_format); exposed for tests.
Reading parse_reading(const std::string& out);

// The docker CLI and compose on the host, over one Ssh: each method is one or a few remote
// commands with the spec's deadlines, and says which host in every error.
class Host {
public:
  // `data_dir` (may be empty: no cache on disk) keeps which compose each host has.
  Host(const Ssh& ssh, std::chrono::milliseconds command_timeout,
       std::filesystem::path data_dir = {});

  // Runs argv; its stdout when it exits 0, else DriverError "WHAT on HOST failed: <stderr>".
  std::string check(const std::vector<std::string>& argv, const std::string& what) const;
  proc::Result run(const std::vector<std::string>& argv) const;
  // Which compose the host has, if known: asked of the host once, then kept in this process and
  // in data_dir, keyed by user, host and port.
  std::optional<ComposeKind> known_compose() const;
  void remember_compose(ComposeKind kind) const;
  void forget_compose() const;
  // In one remote command: writes `entries` (one `tar -x` from stdin), finds the compose (unless
  // known), runs `COMPOSE compose_args...` and reads the project's containers.
  UpResult upload_and_up(const std::vector<TarEntry>& entries, const std::string& project,
                         const std::vector<std::string>& compose_args,
                         std::chrono::milliseconds timeout) const;
  // The project's containers with their state, health and age, in one remote command; with the
  // containers of an earlier read, by their ids (one docker command instead of two).
  Reading read_project(const std::string& project, const std::vector<Container>& known = {}) const;
  // Writes the entries (paths relative to the home directory) with one `tar -x`.
  void upload(const std::vector<TarEntry>& entries) const;
  std::string read(const std::string& path, const std::string& what) const;

  // The containers of `project` (all states), labels included when asked.
  std::vector<Container> containers(const std::string& project, bool with_labels = false) const;
  // The containers carrying every label of `selector`, with their labels.
  std::vector<Container> containers_labelled(const Labels& selector) const;
  // Runs `call` (see PauseStep): nullopt when the project has no container; after a resume, the
  // readiness read of its containers.
  std::optional<Reading> pause_step(const PauseCall& call, std::chrono::milliseconds timeout) const;
  // The project's containers and the pause's mark, in one remote command.
  ProjectStatus project_status(const std::string& project) const;
  // Removes everything the project made: containers (paused ones thawed, then after `grace` for
  // SIGTERM) with their anonymous volumes, its networks and named volumes, images compose built
  // for it, and the driver's directory, in one remote command. Nothing there is success. With
  // `then_list_id`, the same command then lists the containers (with labels) that still carry
  // sandboxer.id=that id: nullopt when it could not tell.
  std::optional<std::vector<Container>> tear_down(const std::string& project,
                                                  std::chrono::seconds grace,
                                                  const std::string& then_list_id = "") const;

  const Ssh& ssh() const { return m_ssh; }
  std::string where() const { return m_ssh.where(); }

private:
  std::vector<std::string> lines(const std::vector<std::string>& argv,
                                 const std::string& what) const;
  std::vector<Container> parse_containers(const std::string& listing, bool with_labels) const;
  std::filesystem::path compose_cache_file() const;
  const Ssh& m_ssh;
  std::chrono::milliseconds m_timeout;
  std::filesystem::path m_data_dir;
};

} // namespace sandboxer::drivers::compose_ssh
