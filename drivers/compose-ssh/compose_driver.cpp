#include "drivers/compose-ssh/compose_driver.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include <sandboxer/copy_feed.hpp>
#include <sandboxer/copy_over_exec.hpp>
#include <sandboxer/copy_root_owned.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/spec_fields.hpp>

#include "drivers/compose-ssh/compose_file.hpp"
#include "drivers/compose-ssh/host.hpp"
#include "drivers/compose-ssh/logs.hpp"
#include "drivers/compose-ssh/ports.hpp"
#include "drivers/compose-ssh/spec.hpp"
#include "drivers/compose-ssh/ssh.hpp"

namespace sandboxer::drivers::compose_ssh {
namespace {

using nlohmann::json;
using Kind = DriverError::Kind;
namespace fs = std::filesystem;

constexpr auto k_poll_interval = std::chrono::milliseconds(250);
// How long every service must stay up before the project counts as ready: a one-shot
// service that fails at once is often still "running" at the first look. Counted from each
// container's start by the host's clock (docker inspect's StartedAt against the host's date), so
// the time compose up and the first read took already counts. It is most of what a create costs
// beyond compose up itself (bench/compose-ssh.sh, docs/drivers/compose-ssh.md).
// exec runs a user's command: bounded, but by a day, as the driver protocol bounds it.
constexpr auto k_exec_deadline = std::chrono::hours(24);
constexpr const char* k_snapshot_repository = "sandboxer-snapshot/";

std::string read_local(const fs::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw DriverError(Kind::invalid_spec,
                      fmt::format("compose-ssh: cannot read the {} {}", what, path.string()));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Project names and snapshot ids reach remote argv and paths: they must be what sandboxer made.
void check_name(const std::string& value, const char* what) {
  static const std::regex form(R"(^[a-z0-9][a-z0-9_-]{0,62}$)");
  if (!std::regex_match(value, form)) {
    throw DriverError(Kind::not_found, fmt::format("compose-ssh: \"{}\" is not a {} made by "
                                                   "sandboxer",
                                                   value, what));
  }
}

std::string project_dir_of(const std::string& project) {
  return fmt::format("{}/projects/{}", k_state_dir, project);
}

std::string snapshot_dir_of(const std::string& snapshot) {
  return fmt::format("{}/snapshots/{}", k_state_dir, snapshot);
}

std::string snapshot_of(const std::string& backend_ref) {
  if (!backend_ref.starts_with(k_snapshot_repository)) {
    throw DriverError(
        Kind::not_found,
        fmt::format("compose-ssh: \"{}\" is not a compose-ssh snapshot", backend_ref));
  }
  std::string snapshot = backend_ref.substr(std::strlen(k_snapshot_repository));
  check_name(snapshot, "snapshot");
  return snapshot;
}

// The service compose named in its failure output: the one it was pulling, or an "ERROR: for S".
std::optional<std::string> failing_service(const std::string& output,
                                           const std::vector<std::string>& services) {
  std::optional<std::string> found;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    for (const auto& service : services) {
      for (const auto& form :
           {"Pulling " + service + " (", "ERROR: for " + service + " ", " " + service + " Error",
            "service \"" + service + "\"", "Service " + service + " "}) {
        if (line.find(form) != std::string::npos) {
          found = service;
        }
      }
    }
  }
  return found;
}

std::string last_meaningful_line(const std::string& output) {
  std::istringstream lines(output);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
      line.pop_back();
    }
    // compose v1 ends a failed up with this summary; the line before it says what failed.
    if (!line.empty() && !line.ends_with("... done") && !line.ends_with("...") &&
        line.find("Encountered errors while bringing up the project") == std::string::npos) {
      last = line;
    }
  }
  return log::redact(last);
}

// Holds back the start of a stream while it may be docker's own word that the command could not
// start ("OCI runtime exec failed: ... executable file not found", which docker writes on stdout),
// so that it can be told in the one wording every driver uses (unstartable_command). Anything else
// passes straight through.
class DockerWords {
public:
  explicit DockerWords(std::function<void(std::string_view)> sink) : m_sink(std::move(sink)) {}
  void write(std::string_view bytes) {
    if (m_passing) {
      m_sink(bytes);
      return;
    }
    m_held.append(bytes);
    static constexpr std::string_view k_docker_says[] = {
        "OCI runtime exec failed", "Error: No such container", "Error response from daemon"};
    bool may_be_docker = false;
    for (auto prefix : k_docker_says) {
      const size_t n = std::min(prefix.size(), m_held.size());
      may_be_docker = may_be_docker || m_held.compare(0, n, prefix.substr(0, n)) == 0;
    }
    if (!may_be_docker || m_held.size() > 4096) {
      release();
    }
  }
  void release() {
    if (!m_held.empty()) {
      m_sink(m_held);
      m_held.clear();
    }
    m_passing = true;
  }
  bool says(std::string_view words) const { return m_held.find(words) != std::string::npos; }

private:
  std::function<void(std::string_view)> m_sink;
  std::string m_held;
  bool m_passing = false;
};

class ComposeSshDriver : public Driver {
public:
  ComposeSshDriver(Spec spec, const DriverContext& context)
      : m_spec(std::move(spec)), m_ssh(target_of(m_spec)),
        m_host(m_ssh, m_spec.command_timeout, context.data_dir), m_progress(*context.progress) {}

  CreateResult create(const CreateRequest& request) override {
    const std::string project = request.sandbox_id;
    check_name(project, "project");
    std::string compose_text;
    std::optional<std::string> env_text;
    std::map<std::string, std::string> images;
    std::string compose_path = m_spec.compose_file.string();
    if (request.from_snapshot) {
      const std::string snapshot = snapshot_of(*request.from_snapshot);
      auto manifest = json::parse(
          m_host.read(snapshot_dir_of(snapshot) + "/manifest.json", "snapshot " + snapshot),
          nullptr, false);
      if (!manifest.is_object() || !manifest.contains("compose") ||
          !manifest["compose"].is_string() || !manifest.contains("services")) {
        throw DriverError(
            Kind::not_found,
            fmt::format("compose-ssh: the manifest of snapshot {} on {} is unreadable", snapshot,
                        m_host.where()));
      }
      compose_text = manifest["compose"].get<std::string>();
      compose_path = fmt::format("{} (snapshot {})", compose_path, snapshot);
      if (manifest.contains("env") && manifest["env"].is_string()) {
        env_text = manifest["env"].get<std::string>();
      }
      for (const auto& [service, entry] : manifest["services"].items()) {
        images[service] = entry.value("image", "");
      }
      require_images(images, snapshot);
    } else {
      compose_text = read_local(m_spec.compose_file, "compose_file");
      if (m_spec.env_file) {
        env_text = read_local(*m_spec.env_file, "env_file");
      }
    }
    ComposeFile file = read_compose_file(compose_text, compose_path);
    const std::string exec_service = m_spec.service.value_or(file.services.front());
    if (std::find(file.services.begin(), file.services.end(), exec_service) ==
        file.services.end()) {
      throw DriverError(Kind::invalid_spec,
                        fmt::format("compose-ssh: service \"{}\" is not in {} (it has: {})",
                                    exec_service, compose_path, fmt::join(file.services, ", ")));
    }

    std::vector<std::string> compose;
    const std::string dir = project_dir_of(project);
    Overrides overrides{request.labels, request.env, images, exec_service, {}};
    for (const auto& port : request.ports) {
      overrides.ports.push_back(compose_port(port));
    }
    std::vector<TarEntry> files = {
        {dir + "/", "", 0700},
        {dir + "/compose.yml", compose_text, 0600},
        {dir + "/sandboxer.override.yml", override_file(file, overrides), 0600}};
    if (env_text) {
      files.push_back({dir + "/env", *env_text, 0600});
    }
    // Whether the project's files may have reached the host: before the connection, the host
    // holds nothing of it.
    bool reached = false;
    try {
      m_ssh.connect();
      reached = true;
      // The upload, compose up and the first look at the containers are one remote command.
      UpResult started = up(project, file, files, env_text.has_value(), !images.empty());
      compose = compose_argv(started.kind);
      auto containers = wait_until_ready(project, file, std::move(started.reading));
      json info = {{"host", m_host.where()},
                   {"project", project},
                   {"project_dir", m_spec.project_dir.value_or(dir)},
                   {"compose", fmt::format("{}", fmt::join(compose, " "))},
                   {"service", exec_service},
                   {"services", file.services}};
      json ids = json::object();
      for (const auto& container : containers) {
        if (!ids.contains(container.service)) {
          ids[container.service] = container.id;
        }
      }
      info["containers"] = ids;
      if (request.from_snapshot) {
        info["snapshot"] = *request.from_snapshot;
      }
      return {project, info, published(containers, request.ports, exec_service)};
    } catch (const Error& e) {
      // A half-made project is torn down here; when even that fails, the containers carry
      // sandboxer's labels and `reap --orphans` finds them.
      std::string what = e.what();
      try {
        interrupt::Shield shield;
        if (reached) {
          m_host.tear_down(project, std::chrono::seconds(0));
        }
      } catch (const Error& undo) {
        what += fmt::format("; removing what it made failed too ({}): 'sandboxer reap --orphans' "
                            "finishes it",
                            undo.what());
      }
      if (const auto* driver_error = dynamic_cast<const DriverError*>(&e)) {
        throw DriverError(driver_error->kind(), what);
      }
      throw Error(e.code(), what);
    }
  }

  void destroy(const SandboxHandle& sandbox) override {
    check_name(sandbox.backend_id, "project");
    // The core asks right after a destroy what else carries the sandbox's id (a duplicate a
    // lost create answer made): the tear-down command lists that too, saving a round trip.
    auto left = m_host.tear_down(
        sandbox.backend_id, sandbox.stop_grace.value_or(m_spec.stop_timeout), sandbox.sandbox_id);
    std::lock_guard lock(m_left_mutex);
    if (left && !sandbox.sandbox_id.empty()) {
      m_left_after_destroy = {sandbox.sandbox_id, std::move(*left)};
    } else {
      m_left_after_destroy.reset();
    }
  }

  BackendStatus status(const SandboxHandle& sandbox) override {
    check_name(sandbox.backend_id, "project");
    auto [containers, stopped_by_pause] = m_host.project_status(sandbox.backend_id);
    BackendStatus status;
    if (containers.empty()) {
      status.state = BackendStatus::State::missing;
      status.detail =
          fmt::format("no container of project {} on {}", sandbox.backend_id, m_host.where());
      return status;
    }
    bool all_running = true, any_paused = false;
    std::vector<std::string> parts;
    for (const auto& container : containers) {
      all_running = all_running && container.state == "running";
      any_paused = any_paused || container.state == "paused";
      parts.push_back(fmt::format("{}: {}", container.service, container.status));
    }
    // A pause that kept no memory stopped the containers: paused all the same (resume starts
    // them), unless something runs again.
    const bool stopped_paused =
        stopped_by_pause && std::none_of(containers.begin(), containers.end(), [](const auto& c) {
          return c.state == "running" || c.state == "paused";
        });
    status.state = all_running                    ? BackendStatus::State::running
                   : any_paused || stopped_paused ? BackendStatus::State::paused
                                                  : BackendStatus::State::stopped;
    const std::string& version = containers.front().compose_version;
    const bool v2 = !version.empty() && version.front() >= '2';
    status.detail =
        fmt::format("{}{} on {} ({}); compose: {} {}",
                    stopped_paused ? "stopped by sandboxer pause (processes not kept): " : "",
                    sandbox.backend_id, m_host.where(), fmt::join(parts, ", "),
                    v2 ? "docker compose" : "docker-compose", version);
    return status;
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    const std::string project = sandbox.backend_id;
    check_name(project, "project");
    check_name(request.snapshot_id, "snapshot");
    auto containers = m_host.containers(project);
    if (containers.empty()) {
      throw DriverError(Kind::not_found, fmt::format("compose-ssh: project {} has no container "
                                                     "on {}",
                                                     project, m_host.where()));
    }
    const std::string repository = k_snapshot_repository + request.snapshot_id;
    json services = json::object();
    std::vector<std::string> made;
    try {
      for (const auto& container : containers) {
        if (services.contains(container.service)) {
          continue; // a scaled service: its first container stands for it
        }
        const std::string image = repository + ":" + container.service;
        m_progress.update(fmt::format("committing {} on {}", container.service, m_host.where()));
        RemoteCall commit;
        commit.argv = {"docker", "commit", "--pause=true", container.id, image};
        commit.timeout = std::max(m_spec.command_timeout, std::chrono::milliseconds(600'000));
        auto result = m_ssh.run(commit);
        if (result.exit_code != 0) {
          throw DriverError(Kind::error,
                            fmt::format("compose-ssh: committing service {} of project {} on {} "
                                        "failed: {}",
                                        container.service, project, m_host.where(),
                                        last_meaningful_line(result.err)));
        }
        made.push_back(image);
        services[container.service] = {
            {"image", image}, {"image_id", trim(result.out)}, {"container", container.id}};
      }
      const std::string dir = project_dir_of(project);
      json manifest = {
          {"format", 1},
          {"snapshot", request.snapshot_id},
          {"name", request.name},
          {"project", project},
          {"services", services},
          {"compose", m_host.read(dir + "/compose.yml", "the compose file of " + project)}};
      auto env = m_host.run({"cat", "--", dir + "/env"});
      if (env.exit_code == 0) {
        manifest["env"] = env.out;
      }
      const std::string snapshot_dir = snapshot_dir_of(request.snapshot_id);
      m_host.upload({{snapshot_dir + "/", "", 0700},
                     {snapshot_dir + "/manifest.json", manifest.dump(2) + "\n", 0600}});
    } catch (const Error&) {
      interrupt::Shield shield;
      try {
        delete_snapshot(repository);
      } catch (const Error&) {
        // the first error is the one to report
      }
      throw;
    }
    return {repository, images_size(made)};
  }

  void delete_snapshot(const std::string& backend_ref) override {
    const std::string snapshot = snapshot_of(backend_ref);
    auto images = m_host.check({"docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}",
                                k_snapshot_repository + snapshot},
                               "listing the images of snapshot " + snapshot);
    std::vector<std::string> remove = {"docker", "image", "rm"};
    std::istringstream lines(images);
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) {
        remove.push_back(line);
      }
    }
    if (remove.size() > 3) {
      m_host.check(remove, "removing the images of snapshot " + snapshot);
    }
    m_host.check({"rm", "-rf", "--", snapshot_dir_of(snapshot)},
                 "removing the manifest of snapshot " + snapshot);
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    check_name(sandbox.backend_id, "project");
    const std::string service =
        m_spec.service.value_or(sandbox.info.value("service", std::string()));
    std::string container = container_of(sandbox, service);
    std::vector<std::string> argv = {"docker", "exec"};
    if (request.attach_stdin) {
      argv.push_back("-i");
    }
    if (request.tty) {
      // ssh -tt gives the host a terminal of the local one's size, and carries its resizes.
      argv.push_back("-t");
    }
    for (const auto& [key, value] : request.env) {
      argv.insert(argv.end(), {"-e", key + "=" + value});
    }
    if (request.workdir) {
      argv.insert(argv.end(), {"-w", *request.workdir});
    }
    if (request.user) {
      argv.insert(argv.end(), {"-u", *request.user});
    }
    argv.push_back(container);
    argv.insert(argv.end(), request.argv.begin(), request.argv.end());

    DockerWords out([&](std::string_view bytes) { io.out(bytes); });
    DockerWords err([&](std::string_view bytes) { io.err(bytes); });
    RemoteCall call;
    call.argv = argv;
    call.timeout = k_exec_deadline;
    call.tty = request.tty;
    call.stdin_fd = request.attach_stdin ? io.stdin_fd() : -1;
    call.on_interrupt = proc::Command::OnInterrupt::forward;
    call.on_stdout = [&](std::string_view bytes) { out.write(bytes); };
    call.on_stderr = [&](std::string_view bytes) { err.write(bytes); };
    auto result = m_ssh.run(call);
    auto docker_says = [&](std::string_view words) { return out.says(words) || err.says(words); };
    if (docker_says("Error: No such container")) {
      throw DriverError(Kind::not_found,
                        fmt::format("compose-ssh: the container of service {} in project {} is "
                                    "gone from {}",
                                    service, sandbox.backend_id, m_host.where()));
    }
    if (docker_says("OCI runtime exec failed") &&
        (result.exit_code == 126 || result.exit_code == 127)) {
      const bool missing =
          docker_says("executable file not found") || docker_says("no such file or directory");
      return unstartable_command(request.argv.empty() ? "" : request.argv.front(), missing, io);
    }
    out.release();
    err.release();
    return result.status();
  }

  // `sandboxer cp` (docs/drivers/compose-ssh.md, "Copy"): the stream goes through the shared ssh
  // connection to `docker cp` on the host, which unpacks or packs it in the container, so the
  // transfer needs no tar in the container and is one remote command. What is at a path is one
  // `ls` in the container (docker cp has no stat of its own).
  PathInfo stat_path(const SandboxHandle& sandbox, const std::string& path) override {
    return stat_over_exec(*this, sandbox, path);
  }

  void copy_in(const SandboxHandle& sandbox, const CopyInRequest& request,
               CopySource& source) override {
    // With --owner the stream's entries carry it and docker cp keeps them. Without, -a gives
    // each file the container's configured user, as exec would; a container without one keeps
    // the stream's ids, made root's here, as exec's files would be.
    if (request.owner) {
      docker_cp(sandbox, {"-", ":" + request.directory}, "copying into " + request.directory,
                &source);
      return;
    }
    RootOwnedSource root_owned(source);
    docker_cp(sandbox, {"-a", "-", ":" + request.directory}, "copying into " + request.directory,
              &root_owned);
  }

  void copy_out(const SandboxHandle& sandbox, const CopyOutRequest& request,
                CopySink& sink) override {
    if (request.follow) {
      // docker cp -L follows only the path's own link, never the links inside a directory:
      // --follow is the container's `tar -c -h`.
      copy_out_over_exec(*this, sandbox, request, sink);
      return;
    }
    docker_cp(sandbox, {":" + request.path, "-"}, "copying " + request.path, nullptr, &sink);
  }

  // `docker cp` on the host with `words`, where a word starting with ':' is a path in the
  // sandbox's container; the stream on stdin (`from`) or stdout (`to`).
  void docker_cp(const SandboxHandle& sandbox, std::vector<std::string> words,
                 const std::string& what, CopySource* from, CopySink* to = nullptr) {
    check_name(sandbox.backend_id, "project");
    const std::string service =
        m_spec.service.value_or(sandbox.info.value("service", std::string()));
    const std::string container = container_of(sandbox, service);
    RemoteCall call;
    call.argv = {"docker", "cp"};
    for (auto& word : words) {
      call.argv.push_back(word.starts_with(':') ? container + word : std::move(word));
    }
    call.timeout = k_exec_deadline;
    call.on_interrupt = proc::Command::OnInterrupt::forward;
    std::string said;
    call.on_stderr = [&](std::string_view bytes) {
      said.append(bytes.substr(0, 4096 - std::min<size_t>(said.size(), 4096)));
    };
    if (to != nullptr) {
      call.on_stdout = [&](std::string_view bytes) { to->write(bytes); };
    }
    const int signals_before = interrupt::count();
    proc::Result result;
    if (from != nullptr) {
      with_source_as_fd(*from, [&](int fd) {
        call.stdin_fd = fd;
        result = m_ssh.run(call);
        return result.status();
      });
    } else {
      result = m_ssh.run(call);
    }
    if (interrupt::count() != signals_before) {
      throw Interrupted(interrupt::last_signal());
    }
    if (result.status() == 0) {
      return;
    }
    const std::string words_said = last_lines(said, 2);
    const bool missing = said.find("No such container") != std::string::npos ||
                         said.find("Could not find the file") != std::string::npos ||
                         said.find("no such directory") != std::string::npos;
    throw DriverError(missing ? Kind::not_found : Kind::error,
                      fmt::format("compose-ssh: {} in sandbox {} (service {} of project {} on {}) "
                                  "failed: docker cp exited {}{}{}",
                                  what, sandbox.sandbox_id, service, sandbox.backend_id,
                                  m_host.where(), result.status(), words_said.empty() ? "" : ": ",
                                  words_said));
  }

  // `docker compose logs` of the project's services, run on the host; with -f it lasts until the
  // services stop (compose ends it) or a signal stops the ssh call.
  void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink) override {
    check_name(sandbox.backend_id, "project");
    const ComposeKind kind = m_host.known_compose().value_or(ComposeKind::plugin);
    const std::string dir = project_dir_of(sandbox.backend_id);
    std::vector<std::string> argv = compose_argv(kind);
    argv.insert(argv.end(),
                {"-p", sandbox.backend_id, "--project-directory", m_spec.project_dir.value_or(dir),
                 "-f", dir + "/compose.yml", "-f", dir + "/sandboxer.override.yml"});
    for (auto& word : logs_arguments(request, kind == ComposeKind::plugin)) {
      argv.push_back(std::move(word));
    }
    ComposeLogLines out(sink, "stdout", request.since);
    ComposeLogLines err(sink, "stderr", request.since);
    RemoteCall call;
    call.argv = argv;
    call.timeout =
        request.follow ? std::chrono::milliseconds(k_exec_deadline) : m_spec.command_timeout;
    call.on_stdout = [&](std::string_view bytes) { out.feed(bytes); };
    call.on_stderr = [&](std::string_view bytes) { err.feed(bytes); };
    auto result = m_ssh.run(call);
    out.finish();
    err.finish();
    if (result.status() != 0) {
      throw DriverError(
          Kind::error,
          fmt::format(
              "compose-ssh: '{} logs' of project {} on {} exited {}",
              fmt::join(compose_argv(m_host.known_compose().value_or(ComposeKind::plugin)), " "),
              sandbox.backend_id, m_host.where(), result.status()));
    }
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    std::vector<Container> containers;
    auto id = selector.find("sandboxer.id");
    std::unique_lock lock(m_left_mutex);
    if (m_left_after_destroy && selector.size() == 1 && id != selector.end() &&
        id->second == m_left_after_destroy->first) {
      // What the destroy just before listed in its own remote command, milliseconds ago; used
      // once only.
      containers = std::move(m_left_after_destroy->second);
      m_left_after_destroy.reset();
    } else {
      m_left_after_destroy.reset(); // anything else asked in between: the answer is not kept
      lock.unlock();
      containers = m_host.containers_labelled(selector);
    }
    std::map<std::string, RemoteResource> projects;
    for (const auto& container : containers) {
      auto project = container.labels.find("com.docker.compose.project");
      if (project == container.labels.end()) {
        continue;
      }
      auto& resource = projects[project->second];
      if (resource.backend_id.empty()) {
        resource.backend_id = project->second;
        for (const auto& [key, value] : container.labels) {
          if (!key.starts_with("com.docker.compose.")) {
            resource.labels[key] = value;
          }
        }
        resource.state = container.state;
      } else if (container.state != resource.state) {
        resource.state = "mixed";
      }
    }
    std::vector<RemoteResource> found;
    for (auto& [name, resource] : projects) {
      found.push_back(std::move(resource));
    }
    return found;
  }

private:
  static Target target_of(const Spec& spec) {
    return {spec.host,          spec.port,        spec.user,
            spec.identity_file, spec.known_hosts, spec.connect_timeout};
  }

  static std::string trim(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
      text.pop_back();
    }
    return text;
  }

  void require_images(const std::map<std::string, std::string>& images,
                      const std::string& snapshot) {
    std::vector<std::string> argv = {"docker", "image", "inspect", "--format", "{{.Id}}"};
    for (const auto& [service, image] : images) {
      argv.push_back(image);
    }
    auto result = m_host.run(argv);
    if (result.exit_code != 0) {
      throw DriverError(Kind::not_found,
                        fmt::format("compose-ssh: the images of snapshot {} are not all on {}: {}",
                                    snapshot, m_host.where(), last_meaningful_line(result.err)));
    }
  }

  // Whether compose itself was missing: `docker-compose` not found (127), or a docker without
  // the plugin ("'compose' is not a docker command", exit 1 or 125 by docker's version).
  static bool compose_missing(const UpResult& result) {
    if (result.stage != UpResult::Stage::up || result.exit_code == 0) {
      return false;
    }
    if (result.exit_code == 127) {
      return true;
    }
    return result.kind == ComposeKind::plugin &&
           (result.exit_code == 125 ||
            result.output.find("is not a docker command") != std::string::npos ||
            result.output.find("unknown command") != std::string::npos);
  }

  UpResult up(const std::string& project, const ComposeFile& file,
              const std::vector<TarEntry>& files, bool with_env, bool from_images) {
    const std::string dir = project_dir_of(project);
    std::vector<std::string> argv = {"-p",
                                     project,
                                     "--project-directory",
                                     m_spec.project_dir.value_or(dir),
                                     "-f",
                                     dir + "/compose.yml",
                                     "-f",
                                     dir + "/sandboxer.override.yml"};
    if (with_env) {
      argv.insert(argv.end(), {"--env-file", dir + "/env"});
    }
    argv.insert(argv.end(), {"up", "-d"});
    if (from_images) {
      argv.push_back("--no-build");
    }
    m_progress.update(
        fmt::format("sending project {} to {} and starting it", project, m_host.where()));
    const auto timeout = m_spec.up_timeout + m_spec.command_timeout; // + the upload and the read
    UpResult result = m_host.upload_and_up(files, project, argv, timeout);
    if (result.kind_was_cached && compose_missing(result)) {
      // The host changed since the answer was kept (compose removed or replaced): ask it again.
      // Nothing started, so sending the files again and retrying is safe.
      m_host.forget_compose();
      result = m_host.upload_and_up(files, project, argv, timeout);
    }
    const bool missing = compose_missing(result);
    if (result.stage >= UpResult::Stage::up && !missing) {
      m_host.remember_compose(result.kind);
    }
    if (result.stage == UpResult::Stage::done) {
      return result;
    }
    if (result.stage == UpResult::Stage::upload) {
      throw DriverError(Kind::error, fmt::format("compose-ssh: cannot write files on {}: {}",
                                                 m_host.where(), last_lines(result.output, 3)));
    }
    if (missing) {
      throw DriverError(Kind::error,
                        fmt::format("compose-ssh: neither 'docker compose' nor 'docker-compose' is "
                                    "installed on {}",
                                    m_host.where()));
    }
    if (result.stage == UpResult::Stage::read) {
      throw DriverError(Kind::error,
                        fmt::format("compose-ssh: reading the containers of project {} on {} "
                                    "failed: {}",
                                    project, m_host.where(), last_lines(result.output, 3)));
    }
    auto service = failing_service(result.output, file.services);
    throw DriverError(Kind::error,
                      fmt::format("compose-ssh: compose up of project {} on {} failed{}: {}",
                                  project, m_host.where(),
                                  service ? fmt::format(" for service {}", *service) : "",
                                  last_meaningful_line(result.output)));
  }

  // Polls until every container runs (and is healthy when it has a healthcheck) and has stayed
  // so for the profile's `settle` time (none by default: the first look that finds all up ends
  // it, with no remote command beyond compose up's own). A container that exits, restarts or turns
  // unhealthy fails the create at once, with its last log lines. `reading` is the first look (made
  // with compose up); each further look is one remote command for all containers. The host says how
  // long each has run, so when all are up the next look is the last one: at the end of the settle
  // time, not a poll interval at a time.
  // `thawed`: the same processes go on after a freeze (resume without compose start), so their
  // health is not looked at: docker kept running the healthcheck while they were frozen, and
  // the failures it recorded stand until the next check after the thaw (up to its interval).
  std::vector<Container> wait_until_ready(const std::string& project, const ComposeFile& file,
                                          Reading reading, bool thawed = false) {
    m_progress.update(fmt::format("waiting for the services of {} on {}", project, m_host.where()));
    const auto deadline = std::chrono::steady_clock::now() + m_spec.ready_timeout;
    std::optional<std::chrono::steady_clock::time_point> all_up_since;
    while (true) {
      auto& containers = reading.containers;
      std::vector<std::string> waiting;
      std::set<std::string> seen;
      for (const auto& container : containers) {
        seen.insert(container.service);
        const std::string health = thawed ? "" : container.health();
        if (container.state == "exited" || container.state == "dead" ||
            container.state == "restarting" || health == "unhealthy") {
          throw service_failed(project, container);
        }
        if (container.state != "running" || health == "starting") {
          waiting.push_back(fmt::format("{} ({})", container.service, container.status));
        }
      }
      for (const auto& service : file.services) {
        if (!seen.count(service) && containers.empty()) {
          waiting.push_back(service + " (no container yet)");
        }
      }
      const auto now = std::chrono::steady_clock::now();
      if (!waiting.empty()) {
        all_up_since.reset();
      } else if (reading.all_up_for) {
        // By the host's clock: the youngest container started this long ago.
        all_up_since = now - *reading.all_up_for;
      } else if (!all_up_since) {
        all_up_since = now; // a host that did not tell its time: count from this look
      }
      if (all_up_since && now - *all_up_since >= m_spec.settle) {
        return std::move(containers);
      }
      const auto wait =
          all_up_since ? std::chrono::duration_cast<std::chrono::milliseconds>(*all_up_since +
                                                                               m_spec.settle - now)
                       : std::chrono::duration_cast<std::chrono::milliseconds>(k_poll_interval);
      if (!all_up_since && now + wait > deadline) {
        throw DriverError(Kind::timeout,
                          fmt::format("compose-ssh: project {} on {} was not ready within {}: "
                                      "still waiting for {}",
                                      project, m_host.where(),
                                      spec_fields::duration_text(m_spec.ready_timeout),
                                      fmt::join(waiting, ", ")));
      }
      interrupt::sleep_for(wait);
      // Once every service has its container, the same containers are read again by id.
      std::vector<Container> known;
      if (seen.size() == file.services.size()) {
        known = std::move(containers);
      }
      reading = m_host.read_project(project, known);
    }
  }

  // Where the engine on the host published the project's ports (the profile's, then the compose
  // file's own), as the readiness read saw them: no remote command of its own.
  std::vector<PortBinding> published(const std::vector<Container>& containers,
                                     const std::vector<PortSpec>& asked,
                                     const std::string& service) {
    std::string lines;
    for (const auto& container : containers) {
      lines += container.service + " " + container.ports_json + "\n";
    }
    return read_bindings(lines, asked, service, m_spec.host);
  }

  // `sandboxer pause` (docs/drivers/compose-ssh.md, "Pause"): memory kept (the default) is
  // `docker pause` of the project's running containers, a cgroup freeze; memory false is `compose
  // stop`. Either is one remote command and a repeat does nothing more.
  PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request) override {
    check_name(sandbox.backend_id, "project");
    const bool freeze = request.memory.value_or(true);
    PauseCall call = pause_call(sandbox, freeze ? PauseStep::freeze : PauseStep::stop);
    call.grace = request.stop_grace.value_or(m_spec.stop_timeout);
    call.pause_id = request.pause_id;
    m_progress.update(fmt::format("{} project {} on {}", freeze ? "freezing" : "stopping",
                                  sandbox.backend_id, m_host.where()));
    if (!m_host.pause_step(call, m_spec.command_timeout + call.grace)) {
      throw gone(sandbox);
    }
    PauseResult result;
    result.memory_kept = freeze;
    result.how = freeze ? "freeze" : "stop";
    return result;
  }

  // Unfreezes or starts the project again, then waits for it as create does; a stop gives the
  // engine's ephemeral host ports anew, so the ports are read back.
  ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest& request) override {
    const std::string project = sandbox.backend_id;
    check_name(project, "project");
    m_progress.update(fmt::format("resuming project {} on {}", project, m_host.where()));
    auto reading = m_host.pause_step(pause_call(sandbox, PauseStep::resume),
                                     m_spec.up_timeout + m_spec.command_timeout);
    if (!reading) {
      throw gone(sandbox);
    }
    ComposeFile file;
    if (const auto services = sandbox.info.find("services");
        services != sandbox.info.end() && services->is_array()) {
      for (const auto& service : *services) {
        if (service.is_string()) {
          file.services.push_back(service.get<std::string>());
        }
      }
    }
    const bool thawed = !reading->started;
    auto containers = wait_until_ready(project, file, std::move(*reading), thawed);
    ResumeResult result;
    if (!request.ports.empty() || !request.bindings.empty()) {
      result.ports =
          published(containers, request.ports,
                    m_spec.service.value_or(sandbox.info.value("service", std::string())));
    }
    return result;
  }

  PauseCall pause_call(const SandboxHandle& sandbox, PauseStep step) const {
    PauseCall call;
    call.step = step;
    call.project = sandbox.backend_id;
    call.project_dir = m_spec.project_dir.value_or(project_dir_of(sandbox.backend_id));
    // The compose that made it (create's info), else the one the host is known to have.
    const std::string made_by = sandbox.info.value("compose", std::string());
    call.compose = made_by == "docker compose"   ? std::optional(ComposeKind::plugin)
                   : made_by == "docker-compose" ? std::optional(ComposeKind::v1)
                                                 : m_host.known_compose();
    return call;
  }

  DriverError gone(const SandboxHandle& sandbox) const {
    return DriverError(Kind::not_found,
                       fmt::format("compose-ssh: project {} has no container on {}",
                                   sandbox.backend_id, m_host.where()));
  }

  // `sandboxer forward`: each port through an ssh connection of its own (docs/ports.md).
  void forward(const SandboxHandle& sandbox, const std::vector<PortForward>& ports,
               ForwardIo& io) override {
    check_name(sandbox.backend_id, "project");
    forward_over_ssh(m_ssh, ports, io);
  }

  // `ready: {port}`: the port answers on the host, where `forward` connects.
  bool port_answers(const SandboxHandle& sandbox, const PortBinding& binding,
                    std::chrono::milliseconds timeout) override {
    check_name(sandbox.backend_id, "project");
    return answers_over_ssh(m_ssh, binding, timeout);
  }

  DriverError service_failed(const std::string& project, const Container& container) {
    auto logs = m_host.run({"docker", "logs", "--tail", "5", container.id});
    std::string last = last_meaningful_line(logs.err + "\n" + logs.out);
    std::string how = container.health() == "unhealthy" ? "is unhealthy"
                      : container.state == "restarting"
                          ? "keeps restarting"
                          : fmt::format("exited with code {}", container.exit_code().value_or(-1));
    return DriverError(Kind::error,
                       fmt::format("compose-ssh: service {} of project {} on {} {} right after "
                                   "it started{}",
                                   container.service, project, m_host.where(), how,
                                   last.empty() ? "" : fmt::format(" (last log line: {})", last)));
  }

  std::string container_of(const SandboxHandle& sandbox, const std::string& service) {
    // The ids create() saw, when they are of this very project; else the project's labels say.
    if (sandbox.info.value("project", std::string()) == sandbox.backend_id &&
        sandbox.info.contains("containers") && sandbox.info["containers"].contains(service) &&
        sandbox.info["containers"][service].is_string()) {
      return sandbox.info["containers"][service].get<std::string>();
    }
    for (const auto& container : m_host.containers(sandbox.backend_id)) {
      if (container.service == service || service.empty()) {
        return container.id;
      }
    }
    throw DriverError(Kind::not_found,
                      fmt::format("compose-ssh: project {} has no container of service {} on {}",
                                  sandbox.backend_id, service, m_host.where()));
  }

  std::optional<std::uint64_t> images_size(const std::vector<std::string>& images) {
    if (images.empty()) {
      return std::nullopt;
    }
    std::vector<std::string> argv = {"docker", "image", "inspect", "--format", "{{.Size}}"};
    argv.insert(argv.end(), images.begin(), images.end());
    auto result = m_host.run(argv);
    if (result.exit_code != 0) {
      return std::nullopt;
    }
    std::uint64_t total = 0;
    std::istringstream lines(result.out);
    for (std::string line; std::getline(lines, line);) {
      try {
        total += std::stoull(line);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    }
    return total;
  }

  Spec m_spec;
  Ssh m_ssh;
  Host m_host;
  Progress& m_progress;
  // The sandbox id the last destroy listed afterwards, and the containers still carrying it.
  std::optional<std::pair<std::string, std::vector<Container>>> m_left_after_destroy;
  std::mutex m_left_mutex;
};

class ComposeSshFactory : public spec::TableFactory<Spec> {
public:
  std::string_view name() const override { return "compose-ssh"; }
  std::string_view doc() const override {
    return "a compose project on a remote host, over the system ssh client";
  }
  Capabilities capabilities() const override {
    return {.snapshot = true,
            .exec = true,
            .native_ttl = false,
            .list_by_label = true,
            .restore_in_place = false,
            .exec_user = true,
            .logs = true,
            .copy = true,
            .copy_owner = true,
            .ports = true,
            .port_reach = Capabilities::PortReach::through_driver,
            .pause = true};
  }
  std::unique_ptr<Driver> open(const json& spec, const DriverContext& context) const override {
    return std::make_unique<ComposeSshDriver>(bind(spec), context);
  }

protected:
  const spec::Table<Spec>& spec_table() const override { return compose_ssh::spec_table(); }
};

} // namespace

const DriverFactory& compose_ssh_factory() {
  static const ComposeSshFactory factory;
  return factory;
}

} // namespace sandboxer::drivers::compose_ssh
