#include "drivers/docker/docker_driver.hpp"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <spdlog/spdlog.h>
#include <thread>

#include <sandboxer/copy_root_owned.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/lock_file.hpp>
#include <sandboxer/ports.hpp>

#include "drivers/docker/copy.hpp"
#include "drivers/docker/engine_api.hpp"
#include "drivers/docker/spec.hpp"

namespace sandboxer::drivers::docker {
namespace {

using nlohmann::json;
using Kind = DriverError::Kind;

constexpr const char* k_snapshot_repo = "sandboxer/snap";

json env_list(const std::map<std::string, std::string>& first,
              const std::map<std::string, std::string>& second) {
  std::map<std::string, std::string> merged = first;
  for (const auto& [key, value] : second) {
    merged[key] = value;
  }
  json list = json::array();
  for (const auto& [key, value] : merged) {
    list.push_back(key + "=" + value);
  }
  return list;
}

// The ports to publish: the driver section's own (`docker.ports`) and the profile's (`ports:`,
// docs/ports.md). A port in both is the user's mistake, named.
std::vector<Port> published_ports(const Spec& spec, const CreateRequest& request) {
  std::vector<Port> ports = spec.ports;
  for (const auto& asked : request.ports) {
    for (const auto& own : spec.ports) {
      if (own.container_port == asked.port && own.protocol == asked.protocol) {
        throw DriverError(Kind::invalid_spec,
                          fmt::format("docker: port {}/{} is in both ports: and docker.ports; "
                                      "keep one",
                                      asked.port, asked.protocol));
      }
    }
    Port port;
    port.container_port = asked.port;
    port.protocol = asked.protocol;
    port.host_port = asked.host_port;
    port.host_ip = asked.bind;
    ports.push_back(port);
  }
  return ports;
}

// Where the engine published each of `ports` (NetworkSettings.Ports of an inspect): the host port
// it picked when none was asked for.
std::vector<PortBinding> bindings_of(const std::vector<Port>& ports, const json& inspect) {
  std::vector<PortBinding> bindings;
  const json* published = nullptr;
  if (auto settings = inspect.find("NetworkSettings"); settings != inspect.end()) {
    if (auto found = settings->find("Ports"); found != settings->end() && found->is_object()) {
      published = &*found;
    }
  }
  for (const auto& port : ports) {
    std::optional<int> host_port = port.host_port;
    const std::string key = fmt::format("{}/{}", port.container_port, port.protocol);
    if (published && published->contains(key) && (*published)[key].is_array()) {
      const json* chosen = nullptr;
      for (const auto& entry : (*published)[key]) {
        if (!chosen || entry.value("HostIp", "") == port.host_ip) {
          chosen = &entry;
        }
      }
      if (chosen) {
        if (auto number = port_number(chosen->value("HostPort", ""))) {
          host_port = number;
        }
      }
    }
    if (!host_port) {
      throw DriverError(Kind::error, fmt::format("docker: the engine did not say where it "
                                                 "published port {}",
                                                 key));
    }
    bindings.push_back(host_binding(port.container_port, port.protocol, port.host_ip, *host_port));
  }
  return bindings;
}

// The body of POST /containers/create for `spec`.
json container_body(const Spec& spec, const std::string& image, const CreateRequest& request) {
  json host = {{"NetworkMode", spec.network}, {"ReadonlyRootfs", spec.read_only}};
  if (spec.cpus) {
    host["NanoCpus"] = static_cast<std::int64_t>(*spec.cpus * 1e9);
  }
  if (spec.memory_bytes) {
    host["Memory"] = *spec.memory_bytes;
  }
  if (spec.pids_limit) {
    host["PidsLimit"] = *spec.pids_limit;
  }
  host["Init"] = spec.init;
  if (!spec.cap_add.empty()) {
    host["CapAdd"] = spec.cap_add;
  }
  if (!spec.cap_drop.empty()) {
    host["CapDrop"] = spec.cap_drop;
  }
  if (!spec.security_opt.empty()) {
    host["SecurityOpt"] = spec.security_opt;
  }
  json exposed = json::object();
  for (const auto& port : published_ports(spec, request)) {
    std::string key = fmt::format("{}/{}", port.container_port, port.protocol);
    exposed[key] = json::object();
    host["PortBindings"][key] = json::array(
        {{{"HostIp", port.host_ip},
          {"HostPort", port.host_port ? std::to_string(*port.host_port) : std::string()}}});
  }
  for (const auto& mount : spec.mounts) {
    if (mount.type == Mount::Type::tmpfs) {
      json m = {{"Type", "tmpfs"}, {"Target", mount.target}, {"ReadOnly", mount.read_only}};
      if (mount.size_bytes) {
        m["TmpfsOptions"] = {{"SizeBytes", *mount.size_bytes}};
      }
      host["Mounts"].push_back(m);
    } else {
      host["Mounts"].push_back({{"Type", mount.type == Mount::Type::bind ? "bind" : "volume"},
                                {"Source", mount.source},
                                {"Target", mount.target},
                                {"ReadOnly", mount.read_only}});
    }
  }
  json body = {{"Image", image},
               {"Env", env_list(spec.env, request.env)},
               {"Labels", request.labels},
               {"Hostname", request.sandbox_id.substr(0, 63)},
               {"HostConfig", host}};
  if (!spec.command.empty()) {
    body["Cmd"] = spec.command;
  }
  if (spec.entrypoint) {
    body["Entrypoint"] = *spec.entrypoint;
  }
  if (spec.workdir) {
    body["WorkingDir"] = *spec.workdir;
  }
  if (spec.user) {
    body["User"] = *spec.user;
  }
  if (!exposed.empty()) {
    body["ExposedPorts"] = exposed;
  }
  return body;
}

// Collects an exec's output, for readiness probes whose output only matters on failure.
class BufferIo : public ExecIo {
public:
  void out(std::string_view bytes) override { text.append(bytes); }
  void err(std::string_view bytes) override { text.append(bytes); }
  std::string text;
};

// The runtime reports a command it could not start (not found, not executable) as text in the
// exec's stream and exit code 126. That text is held back while the output could still be it, so
// that exec_start_failure() can turn it into the shell's contract (127 / 126 and one clear line)
// instead of passing the runtime's words on as the command's output.
class StartFailureFilter : public ExecIo {
public:
  explicit StartFailureFilter(ExecIo& inner) : m_inner(inner) {}
  void out(std::string_view bytes) override { take(bytes, false); }
  void err(std::string_view bytes) override { take(bytes, true); }
  int stdin_fd() const override { return m_inner.stdin_fd(); }
  std::optional<TerminalSize> terminal_size() const override { return m_inner.terminal_size(); }
  int resize_fd() const override { return m_inner.resize_fd(); }
  // The held-back text when the stream was nothing but a start failure; else flushes it.
  std::optional<std::string> finish() {
    if (m_passing || m_held.empty()) {
      return std::nullopt;
    }
    if (m_held.starts_with(k_marker)) {
      return m_held;
    }
    flush();
    return std::nullopt;
  }

private:
  static constexpr std::string_view k_marker = "OCI runtime exec failed";
  void take(std::string_view bytes, bool is_err) {
    if (m_passing) {
      is_err ? m_inner.err(bytes) : m_inner.out(bytes);
      return;
    }
    m_held.append(bytes);
    m_held_is_err = is_err;
    const size_t n = std::min(m_held.size(), k_marker.size());
    if (m_held.compare(0, n, k_marker.substr(0, n)) != 0) {
      flush();
    }
  }
  void flush() {
    m_passing = true;
    m_held_is_err ? m_inner.err(m_held) : m_inner.out(m_held);
    m_held.clear();
  }
  ExecIo& m_inner;
  std::string m_held;
  bool m_held_is_err = false;
  bool m_passing = false;
};

// The exit status and message of a command the runtime could not start, from its text.
int exec_start_failure(const std::string& text, const ExecRequest& request, ExecIo& io) {
  const bool missing = text.find("executable file not found") != std::string::npos ||
                       text.find("no such file or directory") != std::string::npos;
  return unstartable_command(request.argv.empty() ? "" : request.argv.front(), missing, io);
}

// The engine the record names, else where a new sandbox goes (engine_address).
std::string engine_of(const Spec& spec, const DriverContext& context) {
  auto recorded = context.location.find("engine");
  if (recorded != context.location.end() && recorded->is_string()) {
    return engine_address(recorded->get<std::string>());
  }
  return engine_address(spec.host);
}

class DockerDriver : public Driver {
public:
  DockerDriver(Spec spec, const DriverContext& context, http::Transport& transport)
      : m_spec(std::move(spec)),
        // The engine the record names: a sandbox is destroyed where it was made, whatever
        // DOCKER_HOST says today (DriverContext::location).
        m_api(resolve_endpoint(engine_of(m_spec, context)), transport),
        m_progress(*context.progress), m_data_dir(context.data_dir) {}

  CreateResult create(const CreateRequest& request) override {
    std::string image = request.from_snapshot.value_or(m_spec.image);
    bool is_snapshot = request.from_snapshot.has_value();
    if (!request.replaces) {
      // As the docker CLI does: create first, and look at the image only when the engine says it
      // is missing (one round trip less when it is there, which is the usual case).
      bool pulled = !is_snapshot && m_spec.pull == Spec::Pull::always;
      if (pulled) {
        m_api.pull_image(image, m_progress);
      }
      return create_container(request, image, pulled);
    }
    // Checked before the old container is disturbed.
    ensure_image(image, is_snapshot);
    // restore --in-place. The new container needs the old one's name, and perhaps its host
    // ports: the old one steps aside (renamed, stopped) first, and comes back if the new one fails.
    // Held until the swap is over, so that status() can tell a swap in progress from one whose
    // process was killed (settle_interrupted_swap).
    auto swapping = swap_lock(request.sandbox_id).try_acquire();
    if (!swapping.held()) {
      throw DriverError(Kind::conflict,
                        fmt::format("docker: another restore --in-place of {} is running; wait "
                                    "for it to end",
                                    request.sandbox_id));
    }
    const std::string& old_id = *request.replaces;
    std::string aside = aside_name(request.sandbox_id);
    bool had_old = m_api.rename_container(old_id, aside);
    if (had_old) {
      stop_quietly(old_id, m_spec.stop_timeout);
    }
    CreateResult result;
    try {
      result = create_container(request, image, true);
    } catch (const DriverError&) {
      if (had_old) {
        try {
          m_api.rename_container(old_id, request.sandbox_id);
          m_api.start_container(old_id);
        } catch (const DriverError& e) {
          spdlog::warn("docker: could not bring back container {} of {}: {}", old_id.substr(0, 12),
                       request.sandbox_id, e.what());
        }
      }
      throw;
    }
    if (had_old && !m_api.remove_container(old_id, true)) {
      spdlog::info("docker: replaced container {} was already gone", old_id.substr(0, 12));
    }
    return result;
  }

  // POST /containers/create. When the engine does not answer in time it may still make the
  // container: it is removed by its name (the sandbox id) before the failure is reported, so a
  // create recorded as failed leaves nothing running. If that removal fails too, the container
  // carries the ownership labels, and `reap --orphans` finds it.
  std::optional<std::string> create_or_clean_up(const std::string& name, const json& body) {
    try {
      return m_api.create_container(name, body);
    } catch (const DriverError& e) {
      if (e.kind() != Kind::timeout) {
        throw;
      }
      try {
        if (m_api.remove_container(name, true)) {
          spdlog::info("docker: {}: removed the container the engine made after the create "
                       "timed out",
                       name);
        }
      } catch (const DriverError& cleanup) {
        spdlog::warn("docker: {}: the create timed out and the container the engine may have "
                     "made could not be removed ({}); 'sandboxer reap --orphans' will find it",
                     name, cleanup.what());
      }
      throw;
    }
  }

  // `image_checked`: the image is known to be on the engine, so a missing one is not pulled.
  CreateResult create_container(const CreateRequest& request, const std::string& image,
                                bool image_checked) {
    json body = container_body(m_spec, image, request);
    auto created = create_or_clean_up(request.sandbox_id, body);
    if (!created && !image_checked) {
      ensure_image(image, request.from_snapshot.has_value());
      created = create_or_clean_up(request.sandbox_id, body);
    }
    if (!created) {
      throw DriverError(Kind::error, fmt::format("docker: image {} disappeared from the engine "
                                                 "while creating {}; try again",
                                                 image, request.sandbox_id));
    }
    const std::string& id = *created;
    try {
      m_api.start_container(id);
      wait_running(id);
      if (m_spec.readiness) {
        wait_ready(id, request.sandbox_id, *m_spec.readiness);
      }
    } catch (const DriverError& e) {
      // Remove what this create made, so that a failed create leaves nothing behind.
      try {
        m_api.remove_container(id, true);
      } catch (const DriverError& cleanup) {
        spdlog::warn("docker: could not remove {} after a failed create: {}", id.substr(0, 12),
                     cleanup.what());
      }
      throw;
    }
    json info = {{"image", image},
                 {"container", request.sandbox_id},
                 {"engine", m_api.endpoint().describe()}};
    // Kept so that destroy can tell this ledger's leftovers from another's (remove_leftovers).
    if (auto ledger = request.labels.find("sandboxer.ledger"); ledger != request.labels.end()) {
      info["ledger"] = ledger->second;
    }
    CreateResult result{id, info, {}};
    if (auto ports = published_ports(m_spec, request); !ports.empty()) {
      // The engine's choices are read back once it runs: a host port it picked is known only now.
      auto inspect = m_api.inspect_container(id);
      if (!inspect) {
        throw DriverError(Kind::error, fmt::format("docker: container {} vanished right after "
                                                   "start",
                                                   id.substr(0, 12)));
      }
      result.ports = bindings_of(ports, *inspect);
    }
    return result;
  }

  void destroy(const SandboxHandle& sandbox) override {
    bool removed = true;
    try {
      // With no grace period a stop is a SIGKILL, which the forced remove sends anyway: one call
      // instead of two, as docker rm -f does.
      const auto grace = sandbox.stop_grace.value_or(m_spec.stop_timeout);
      if (grace.count() > 0) {
        m_progress.update(
            fmt::format("stopping {} (up to {}s, then killed)", sandbox.sandbox_id, grace.count()));
        stop_quietly(sandbox.backend_id, grace);
      }
      removed = m_api.remove_container(sandbox.backend_id, true);
    } catch (const DriverError& e) {
      if (e.kind() != Kind::not_found) {
        throw;
      }
      removed = false;
    }
    // What an interrupted restore --in-place can leave besides: the new container under the
    // sandbox's name while the ledger still has the old one, or the old one renamed aside. One
    // list by the sandbox's label, empty as a rule.
    bool leftovers = remove_leftovers(sandbox);
    std::error_code ignored;
    std::filesystem::remove(swap_lock(sandbox.sandbox_id).path(), ignored);
    if (!removed && !leftovers) {
      throw DriverError(Kind::not_found,
                        fmt::format("docker: container {} is gone", sandbox.backend_id));
    }
  }

  BackendStatus status(const SandboxHandle& sandbox) override {
    auto inspect = m_api.inspect_container(sandbox.backend_id);
    std::string note;
    if (inspect && inspect->value("Name", "") == "/" + aside_name(sandbox.sandbox_id)) {
      auto settled = settle_interrupted_swap(sandbox, *inspect);
      if (!settled) {
        note = "being replaced by a restore --in-place in progress; ";
      } else {
        note = *settled;
        inspect = m_api.inspect_container(sandbox.backend_id);
      }
    }
    if (!inspect) {
      return {BackendStatus::State::missing, missing_detail(sandbox)};
    }
    const json& state = (*inspect)["State"];
    std::string status = state.value("Status", "unknown");
    std::string detail = note + status;
    if (status == "exited" || status == "dead") {
      detail += fmt::format(" (exit code {}{})", state.value("ExitCode", -1),
                            state.value("OOMKilled", false)
                                ? ", killed for using more memory than its limit; raise "
                                  "docker.memory"
                                : "");
    }
    if (status == "running") {
      return {BackendStatus::State::running, detail};
    }
    if (status == "paused") {
      return {BackendStatus::State::paused, detail};
    }
    if (status == "exited" || status == "dead" || status == "created") {
      return {BackendStatus::State::stopped, detail};
    }
    return {BackendStatus::State::unknown, detail};
  }

  // memory (the default): the cgroup freezer, `docker pause`; the processes keep their memory.
  // memory false: `docker stop`; the files stay in the container's layer, the memory is freed.
  PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request) override {
    const bool memory = request.memory.value_or(true);
    if (!memory) {
      for (const auto& mount : m_spec.mounts) {
        if (mount.type == Mount::Type::tmpfs) {
          throw DriverError(Kind::refused,
                            fmt::format("docker: {} has a tmpfs at {}, whose files a stop would "
                                        "lose; pause it with its memory (pause: {{memory: true}})",
                                        sandbox.sandbox_id, mount.target));
        }
      }
      const auto grace = request.stop_grace.value_or(m_spec.stop_timeout);
      m_progress.update(
          fmt::format("stopping {} (up to {}s, then killed)", sandbox.sandbox_id, grace.count()));
      m_api.stop_container(sandbox.backend_id, static_cast<int>(grace.count()));
      return {.memory_kept = false, .how = "stop"};
    }
    m_api.pause_container(sandbox.backend_id);
    return {.memory_kept = true, .how = "freeze"};
  }

  // Undoes either pause: unfreezes a frozen container, starts a stopped one (then waits for it as
  // create does, and reads back the host ports the engine may have picked anew).
  ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest& request) override {
    // Most resumes undo a freeze: unpause first, and look only when it was not frozen.
    if (m_api.unpause_container(sandbox.backend_id)) {
      return {};
    }
    auto inspect = m_api.inspect_container(sandbox.backend_id);
    if (!inspect) {
      throw DriverError(Kind::not_found,
                        fmt::format("docker: container {} of {} is gone",
                                    sandbox.backend_id.substr(0, 12), sandbox.sandbox_id));
    }
    if ((*inspect)["State"].value("Running", false)) {
      return {};
    }
    m_api.start_container(sandbox.backend_id);
    wait_running(sandbox.backend_id);
    if (m_spec.readiness) {
      wait_ready(sandbox.backend_id, sandbox.sandbox_id, *m_spec.readiness);
    }
    ResumeResult result;
    CreateRequest asked;
    asked.ports = request.ports;
    if (auto ports = published_ports(m_spec, asked); !ports.empty()) {
      if (auto started = m_api.inspect_container(sandbox.backend_id)) {
        result.ports = bindings_of(ports, *started);
      }
    }
    return result;
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    const std::string& name = request.name;
    std::string tag = sandbox.sandbox_id + "-" + name;
    json labels = {{"sandboxer.id", sandbox.sandbox_id}, {"sandboxer.snapshot", name}};
    m_progress.update(fmt::format("commit {} to {}:{}", sandbox.sandbox_id, k_snapshot_repo, tag));
    m_api.commit(sandbox.backend_id, k_snapshot_repo, tag, labels);
    std::string ref = fmt::format("{}:{}", k_snapshot_repo, tag);
    auto image = m_api.inspect_image(ref);
    std::optional<std::uint64_t> size;
    if (image && (*image)["Size"].is_number_unsigned()) {
      size = (*image)["Size"].get<std::uint64_t>();
    }
    return {ref, size};
  }

  void delete_snapshot(const std::string& backend_ref) override {
    if (!m_api.remove_image(backend_ref)) {
      spdlog::info("docker: image {} was already gone", backend_ref);
    }
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    auto started = std::chrono::system_clock::now();
    int status = run_exec(sandbox.backend_id, request, io, true);
    interrupt::Shield finishing; // see run_exec
    // 137 is SIGKILL, which is also what the kernel's OOM killer sends: only the engine's oom
    // event tells a memory kill from a kill -9, and only this exec's window counts.
    if (status == 137 &&
        m_api.had_oom_event(sandbox.backend_id, started - std::chrono::milliseconds(100),
                            std::chrono::system_clock::now() + std::chrono::seconds(1))) {
      throw DriverError(Kind::error,
                        fmt::format("docker: the command in {} was killed for using more memory "
                                    "than the sandbox's limit ({}); raise docker.memory in "
                                    "the profile, or make the command use less",
                                    sandbox.sandbox_id, memory_limit_text()));
    }
    return status;
  }

  // The container's main process: what it wrote to its stdout and stderr, as the engine kept it.
  void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink) override {
    auto inspect = m_api.inspect_container(sandbox.backend_id);
    if (!inspect) {
      throw DriverError(Kind::not_found, fmt::format("docker: container {} of {} is gone",
                                                     sandbox.backend_id, sandbox.sandbox_id));
    }
    // A container with a terminal has one raw stream, not stdout and stderr frames.
    const bool tty = inspect->value("/Config/Tty"_json_pointer, false);
    m_api.container_logs(sandbox.backend_id, request, tty, sink);
  }

  // `sandboxer cp` over the engine's archive endpoint (drivers/docker/archive.cpp), which works
  // on a stopped container too (docs/drivers/docker.md, "Copy").
  PathInfo stat_path(const SandboxHandle& sandbox, const std::string& path) override {
    return stat_following_links(m_api, sandbox.backend_id, path);
  }

  void copy_in(const SandboxHandle& sandbox, const CopyInRequest& request,
               CopySource& source) override {
    auto read = [](CopySource& from) {
      return [&from](char* buffer, size_t size) { return from.read(buffer, size); };
    };
    if (request.owner) {
      // The stream's entries already carry the owner (CopyInRequest), and the engine gives each
      // file the uid/gid of its entry.
      m_api.put_archive(sandbox.backend_id, request.directory, false, read(source));
      return;
    }
    // No owner: what a file made by exec would have, the container's configured user. With
    // copyUIDGID the engine looks that user up in the container's own /etc/passwd; without a
    // configured user it would keep the stream's (the local user's) ids, so they become root's.
    auto inspect = m_api.inspect_container(sandbox.backend_id);
    if (!inspect) {
      throw DriverError(Kind::not_found, fmt::format("docker: container {} of {} is gone",
                                                     sandbox.backend_id, sandbox.sandbox_id));
    }
    if (!inspect->value("/Config/User"_json_pointer, std::string()).empty()) {
      m_api.put_archive(sandbox.backend_id, request.directory, true, read(source));
      return;
    }
    RootOwnedSource root_owned(source);
    m_api.put_archive(sandbox.backend_id, request.directory, false, read(root_owned));
  }

  void copy_out(const SandboxHandle& sandbox, const CopyOutRequest& request,
                CopySink& sink) override {
    auto write = [&sink](std::string_view bytes) { sink.write(bytes); };
    if (request.follow) {
      // The engine never dereferences links (docker cp -L follows only the path's own), so
      // --follow is `tar -c -h` in the container, unless there is no link to follow: a plain
      // file.
      auto own = m_api.stat_archive_path(sandbox.backend_id, request.path);
      if (!own) {
        m_api.get_archive(sandbox.backend_id, request.path, write); // the not_found
        return;
      }
      if (path_info_of_stat(*own).kind != PathInfo::Kind::file) {
        copy_out_following(sandbox, request.path, sink);
        return;
      }
    }
    m_api.get_archive(sandbox.backend_id, request.path, write);
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    json filters = json::object();
    for (const auto& [key, value] : selector) {
      filters[key] = value;
    }
    std::vector<RemoteResource> found;
    for (const auto& container : m_api.list_containers(filters)) {
      // The engine filters; a proxy or an engine that ignores the filter must still not make
      // reap act on containers that are not ours.
      Labels labels = string_labels(container);
      if (!carries(labels, selector)) {
        continue;
      }
      RemoteResource resource;
      resource.backend_id = container.value("Id", "");
      resource.labels = std::move(labels);
      resource.state = container.value("State", "");
      found.push_back(std::move(resource));
    }
    return found;
  }

private:
  static std::string aside_name(const std::string& sandbox_id) { return sandbox_id + "-replaced"; }

  LockFile swap_lock(const std::string& sandbox_id) const {
    return LockFile(m_data_dir / ("restore-in-place-" + sandbox_id + ".lock"), Seconds(0),
                    "restore --in-place of " + sandbox_id);
  }

  // The string labels of a container as the list endpoint returns it ("Labels" at the top).
  static Labels string_labels(const json& container) {
    Labels labels;
    const auto it = container.find("Labels");
    if (it != container.end() && it->is_object()) {
      for (const auto& [key, value] : it->items()) {
        if (value.is_string()) {
          labels[key] = value.get<std::string>();
        }
      }
    }
    return labels;
  }

  // Whether `labels` hold every label of `wanted`: checked here, not trusted to the engine's
  // filter.
  static bool carries(const Labels& labels, const Labels& wanted) {
    return std::all_of(wanted.begin(), wanted.end(), [&](const auto& entry) {
      auto found = labels.find(entry.first);
      return found != labels.end() && found->second == entry.second;
    });
  }

  static std::string label_of(const json& inspect, const std::string& key) {
    const json& labels = inspect["Config"]["Labels"];
    return labels.is_object() && labels.contains(key) && labels[key].is_string()
               ? labels[key].get<std::string>()
               : std::string();
  }

  // The sandbox's container is named <id>-replaced: a restore --in-place set it aside (and perhaps
  // stopped it, and perhaps made the new container under the sandbox's name) and was killed
  // before it ended, since the ledger still has this container. Undoes the swap as its failure
  // path would have: the half-made new container goes, the old one gets its name back and runs
  // again. Returns a note for the status detail, or nullopt when the swap is still in progress
  // (its process holds the lock).
  std::optional<std::string> settle_interrupted_swap(const SandboxHandle& sandbox,
                                                     const json& old_inspect) {
    auto swapping = swap_lock(sandbox.sandbox_id).try_acquire();
    if (!swapping.held()) {
      return std::nullopt;
    }
    const std::string& old_id = sandbox.backend_id;
    std::string note = "brought back under its name after an interrupted restore --in-place";
    if (auto named = m_api.inspect_container(sandbox.sandbox_id)) {
      std::string named_id = named->value("Id", "");
      if (named_id != old_id) {
        if (label_of(*named, "sandboxer.id") != sandbox.sandbox_id) {
          throw DriverError(Kind::conflict,
                            fmt::format("docker: container {} of {} was set aside as {} by an "
                                        "interrupted restore --in-place, and container {}, which "
                                        "is not sandboxer's, took the name {}; remove or rename "
                                        "that one (docker rm -f {}) and ask again",
                                        old_id.substr(0, 12), sandbox.sandbox_id,
                                        aside_name(sandbox.sandbox_id), named_id.substr(0, 12),
                                        sandbox.sandbox_id, named_id.substr(0, 12)));
        }
        m_api.remove_container(named_id, true);
        note += fmt::format(" (its unfinished new container {} removed)", named_id.substr(0, 12));
      }
    }
    m_api.rename_container(old_id, sandbox.sandbox_id);
    if (!old_inspect["State"].value("Running", false)) {
      m_api.start_container(old_id);
    }
    spdlog::info("docker: {}: container {} {}", sandbox.sandbox_id, old_id.substr(0, 12), note);
    return note + "; ";
  }

  // The sandbox's container is gone. When it went in an interrupted restore --in-place after the
  // new container was made, that one runs under the sandbox's name, unknown to the ledger.
  std::string missing_detail(const SandboxHandle& sandbox) {
    auto named = m_api.inspect_container(sandbox.sandbox_id);
    if (!named || named->value("Id", "") == sandbox.backend_id ||
        label_of(*named, "sandboxer.id") != sandbox.sandbox_id) {
      return "no such container";
    }
    return fmt::format("no such container; container {} under its name is the new one of an "
                       "interrupted restore --in-place, which the ledger does not know (destroy "
                       "removes it, and so does reap --orphans once the sandbox is settled)",
                       named->value("Id", "").substr(0, 12));
  }

  // Removes every other container labelled with the sandbox's id; returns whether there was any.
  // Best effort: the sandbox's own container is already dealt with, so a failure here only warns.
  bool remove_leftovers(const SandboxHandle& sandbox) {
    json containers;
    // Only containers of this sandbox, of this ledger when the record knows it (records made
    // before it was kept in info have only the id, which is random and unique).
    Labels ours = {{"sandboxer.id", sandbox.sandbox_id}};
    if (sandbox.info.is_object() && sandbox.info.contains("ledger") &&
        sandbox.info["ledger"].is_string()) {
      ours["sandboxer.ledger"] = sandbox.info["ledger"].get<std::string>();
    }
    try {
      containers = m_api.list_containers(ours);
    } catch (const DriverError& e) {
      spdlog::warn("docker: {}: could not look for containers left by an interrupted restore "
                   "--in-place: {}",
                   sandbox.sandbox_id, e.what());
      return false;
    }
    bool any = false;
    for (const auto& container : containers) {
      std::string id = container.value("Id", "");
      if (id.empty() || id == sandbox.backend_id) {
        continue;
      }
      if (!carries(string_labels(container), ours)) {
        spdlog::warn("docker: {}: the engine listed container {} for the label filter, but it "
                     "does not carry this sandbox's labels; left alone",
                     sandbox.sandbox_id, id.substr(0, 12));
        continue;
      }
      spdlog::info("docker: {}: removing container {}, left by an interrupted restore --in-place",
                   sandbox.sandbox_id, id.substr(0, 12));
      any = m_api.remove_container(id, true) || any;
    }
    return any;
  }

  // Stops with the grace period; not_found propagates, other failures only warn: a container that
  // will not stop is still removed by force afterwards.
  void stop_quietly(const std::string& id, std::chrono::seconds grace) {
    try {
      m_api.stop_container(id, static_cast<int>(grace.count()));
    } catch (const DriverError& e) {
      if (e.kind() == Kind::not_found) {
        throw;
      }
      spdlog::warn("{}", e.what());
    }
  }

  std::string memory_limit_text() const {
    if (!m_spec.memory_bytes) {
      return "the engine's own, docker.memory is not set";
    }
    return fmt::format("docker.memory: {} MiB", *m_spec.memory_bytes / (1024 * 1024));
  }

  void ensure_image(const std::string& image, bool is_snapshot) {
    bool present = m_api.inspect_image(image).has_value();
    if (is_snapshot) {
      if (!present) {
        throw DriverError(Kind::error,
                          fmt::format("docker: snapshot image {} is gone from the engine", image));
      }
      return;
    }
    if (m_spec.pull == Spec::Pull::always || (!present && m_spec.pull == Spec::Pull::if_missing)) {
      m_api.pull_image(image, m_progress);
      return;
    }
    if (!present) {
      // A backend error (exit 4), not "not found" (3): the sandbox exists in the ledger.
      throw DriverError(Kind::error,
                        fmt::format("docker: image {} is not on the engine and the profile says "
                                    "pull: never; load it first (docker load, docker import) or "
                                    "set pull: if-missing",
                                    image));
    }
  }

  // Throws the "exited right after start" error when the container has stopped; returns whether
  // it is running.
  bool check_alive(const std::string& id) {
    auto inspect = m_api.inspect_container(id);
    if (!inspect) {
      throw DriverError(Kind::error, fmt::format("docker: container {} vanished right after start",
                                                 id.substr(0, 12)));
    }
    const json& state = (*inspect)["State"];
    if (state.value("Running", false)) {
      return true;
    }
    std::string status = state.value("Status", "");
    if (status == "exited" || status == "dead") {
      std::string why = state.value("OOMKilled", false)
                            ? "it was killed for using more memory than its limit; raise "
                              "docker.memory"
                            : state.value("Error", std::string());
      throw DriverError(Kind::error,
                        fmt::format("docker: container {} exited with code {} right after "
                                    "start{}{}; its command must keep running (e.g. command: "
                                    "[sleep, infinity])",
                                    id.substr(0, 12), state.value("ExitCode", -1),
                                    why.empty() ? "" : ": ", why));
    }
    return false;
  }

  void wait_running(const std::string& id) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!check_alive(id)) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw DriverError(Kind::timeout, fmt::format("docker: container {} is not running after "
                                                     "30s",
                                                     id.substr(0, 12)));
      }
      interrupt::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // `sandbox_id` names it in the progress line: the operator knows the sandbox, not the container.
  void wait_ready(const std::string& id, const std::string& sandbox_id,
                  const Readiness& readiness) {
    auto deadline = std::chrono::steady_clock::now() + readiness.timeout;
    BufferIo io;
    int status = -1;
    while (true) {
      io.text.clear();
      try {
        status = run_exec(id, {.argv = readiness.command}, io);
      } catch (const DriverError& e) {
        // An exec into a container that has died fails: say why it died instead.
        check_alive(id);
        // A probe the engine did not answer in time (a loaded machine) is "not ready yet", not
        // a failed create: the readiness deadline decides.
        if (e.kind() != Kind::timeout) {
          throw;
        }
        status = -1;
        io.text = e.what();
      }
      if (status == 0) {
        return;
      }
      if (std::chrono::steady_clock::now() + readiness.interval > deadline) {
        break;
      }
      m_progress.update(
          fmt::format("waiting for {} to be ready ({}s of {}s)", sandbox_id,
                      std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now() - (deadline - readiness.timeout))
                          .count(),
                      std::chrono::duration_cast<std::chrono::seconds>(readiness.timeout).count()));
      interrupt::sleep_for(
          std::chrono::duration_cast<std::chrono::milliseconds>(readiness.interval));
    }
    std::string output = io.text.substr(0, 200);
    while (!output.empty() && output.back() == '\n') {
      output.pop_back();
    }
    throw DriverError(Kind::timeout,
                      fmt::format("docker: readiness command did not succeed within {} ms (last "
                                  "exit code {}{}{})",
                                  readiness.timeout.count(), status, output.empty() ? "" : ": ",
                                  output));
  }

  // `forward_signals`: a user's command, which gets each SIGINT/SIGTERM/SIGHUP that sandboxer
  // receives (as a local process would from the terminal); a readiness probe is stopped instead.
  // `cp --follow` out of the container: `tar -c -h` there, its stdout the stream.
  void copy_out_following(const SandboxHandle& sandbox, const std::string& path, CopySink& sink) {
    PathInfo target = stat_following_links(m_api, sandbox.backend_id, path);
    if (target.kind == PathInfo::Kind::symlink) {
      throw DriverError(Kind::not_found,
                        fmt::format("docker: {} in {} is a symbolic link to nothing ({}), and "
                                    "--follow copies what links point to",
                                    path, sandbox.sandbox_id, target.link_target));
    }
    auto inspect = m_api.inspect_container(sandbox.backend_id);
    if (!inspect) {
      throw DriverError(Kind::not_found, fmt::format("docker: container {} of {} is gone",
                                                     sandbox.backend_id, sandbox.sandbox_id));
    }
    if (!inspect->value("/State/Running"_json_pointer, false)) {
      throw DriverError(Kind::error,
                        fmt::format("docker: {} is not running: cp --follow runs tar in the "
                                    "container, which needs it running (start it, or copy "
                                    "without --follow: the links then come as links)",
                                    sandbox.sandbox_id));
    }
    std::filesystem::path as_path(path);
    std::string parent = as_path.parent_path().string();
    std::string name = as_path.filename().string();
    if (name.empty()) {
      name = "."; // the root
    }
    // As root, as the engine's own archive reads; "--" so that a name starting with "-" is one.
    ExecRequest tar_request;
    tar_request.argv = {"tar", "-c", "-h", "-f", "-", "-C", parent.empty() ? "/" : parent,
                        "--",  name};
    tar_request.user = "0:0";
    class TarIo : public ExecIo {
    public:
      explicit TarIo(CopySink& sink) : m_sink(sink) {}
      void out(std::string_view bytes) override { m_sink.write(bytes); }
      void err(std::string_view bytes) override {
        errors.append(bytes.substr(0, 2000 - std::min<size_t>(errors.size(), 2000)));
      }
      std::string errors;

    private:
      CopySink& m_sink;
    } io(sink);
    const int status = run_exec(sandbox.backend_id, tar_request, io);
    if (status != 0) {
      while (!io.errors.empty() && (io.errors.back() == '\n' || io.errors.back() == '\r')) {
        io.errors.pop_back();
      }
      throw DriverError(
          Kind::error,
          fmt::format("docker: cp --follow of {} from {}: tar in the container "
                      "exited with {}{}: {}",
                      path, sandbox.sandbox_id, status,
                      status == 127 ? " (the image has no tar, which --follow needs)" : "",
                      io.errors.empty() ? "(no message)" : io.errors));
    }
  }

  int run_exec(const std::string& container, const ExecRequest& request, ExecIo& caller_io,
               bool forward_signals = false) {
    json body = {{"AttachStdout", true},
                 {"AttachStderr", true},
                 {"AttachStdin", request.attach_stdin},
                 {"Tty", request.tty},
                 {"Cmd", request.argv}};
    if (!request.env.empty()) {
      body["Env"] = env_list({}, request.env);
    }
    if (request.workdir) {
      body["WorkingDir"] = *request.workdir;
    }
    if (request.user) {
      body["User"] = *request.user; // the engine's own form: name, uid, uid:gid
    }
    std::string exec_id = m_api.create_exec(container, body);
    StartFailureFilter filtered(caller_io);
    ExecIo& io = filtered;
    // A tty goes over the hijacked connection too, even without stdin: its I/O loop is where
    // resizes of the local terminal, and signals, are forwarded.
    // (Signals are forwarded only where sandboxer handles them: interrupt::install() in main.)
    forward_signals = forward_signals && interrupt::wake_fd() >= 0;
    if ((request.attach_stdin && io.stdin_fd() >= 0) || request.tty || forward_signals) {
      std::function<void(int)> forward;
      if (forward_signals) {
        forward = [&](int signal) { forward_signal(container, exec_id, signal); };
      }
      m_api.start_exec_attached(exec_id, request.tty, io, forward);
    } else {
      m_api.start_exec(exec_id, request.tty, io);
    }
    // A signal forwarded to the command ended it: what follows is bookkeeping, not to be cut short
    // by that same signal.
    std::optional<interrupt::Shield> finishing;
    if (forward_signals) {
      finishing.emplace();
    }
    // The stream ends just before the engine records the exit code: ask until it has.
    for (int attempt = 0; attempt < 200; ++attempt) {
      json inspect = m_api.inspect_exec(exec_id);
      if (!inspect.value("Running", false) && inspect["ExitCode"].is_number_integer()) {
        const int code = inspect["ExitCode"].get<int>();
        auto start_failure = filtered.finish();
        return code == 126 && start_failure ? exec_start_failure(*start_failure, request, caller_io)
                                            : code;
      }
      interrupt::sleep_for(std::chrono::milliseconds(5));
    }
    throw DriverError(Kind::timeout, "docker: the exec's exit code never appeared");
  }

  // Sends `signal` to an exec's process. The engine has no API for it (exec processes are not the
  // container's main process), so: its host pid from the exec's inspect, signalled directly when
  // the engine is local and we may; else `kill` run inside the container with the pid it has
  // there (NSpid in /proc).
  void forward_signal(const std::string& container, const std::string& exec_id, int signal) {
    interrupt::Shield forwarding;
    const std::string name = interrupt::signal_name(signal);
    json inspect = m_api.inspect_exec(exec_id);
    const int host_pid = inspect.value("Pid", 0);
    if (host_pid <= 0 || !inspect.value("Running", false)) {
      return;
    }
    if (m_api.endpoint().socket_path) {
      if (::kill(host_pid, signal) == 0) {
        spdlog::info("docker: forwarded {} to the command (pid {})", name, host_pid);
        return;
      }
      if (auto inner = pid_in_container(host_pid)) {
        BufferIo io;
        int status = run_exec(container,
                              {.argv = {"kill", "-s", name.substr(3), std::to_string(*inner)}}, io);
        if (status == 0) {
          spdlog::info("docker: forwarded {} to the command (pid {} in the container)", name,
                       *inner);
          return;
        }
      }
    }
    spdlog::warn("docker: could not forward {} to the command in {}; it runs on until it ends "
                 "(a third signal stops sandboxer at once)",
                 name, container.substr(0, 12));
  }

  // The innermost pid of a host process (the last field of NSpid in /proc/PID/status).
  static std::optional<int> pid_in_container(int host_pid) {
    std::ifstream status("/proc/" + std::to_string(host_pid) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.starts_with("NSpid:")) {
        auto last = line.find_last_of(" \t");
        return std::atoi(line.c_str() + last + 1);
      }
    }
    return std::nullopt;
  }

  Spec m_spec;
  EngineApi m_api;
  Progress& m_progress;
  std::filesystem::path m_data_dir;
};

class DockerFactory : public spec::TableFactory<Spec> {
public:
  std::string_view name() const override { return "docker"; }
  std::string_view doc() const override {
    return "containers on a Docker Engine, over its HTTP API (unix socket or DOCKER_HOST)";
  }
  Capabilities capabilities() const override {
    return {.snapshot = true,
            .exec = true,
            .native_ttl = false,
            .list_by_label = true,
            .restore_in_place = true,
            .exec_user = true,
            .logs = true,
            .copy = true,
            .copy_owner = true,
            .ports = true,
            .pause = true};
  }
  bool host_local(const json& spec) const override {
    // A unix socket is this machine's engine; tcp:// may be shared by the fleet.
    return !engine_address(bind(spec).host).starts_with("tcp://");
  }
  json location(const json& spec, const DriverContext&) const override {
    return {{"engine", engine_address(bind(spec).host)}};
  }
  std::unique_ptr<Driver> open(const json& spec, const DriverContext& context) const override {
    return open_docker_driver(spec, context, http::curl_transport());
  }

protected:
  const spec::Table<Spec>& spec_table() const override { return docker::spec_table(); }
};

} // namespace

std::unique_ptr<Driver> open_docker_driver(const json& spec, const DriverContext& context,
                                           http::Transport& transport) {
  return std::make_unique<DockerDriver>(spec::read(spec_table(), spec), context, transport);
}

const DriverFactory& docker_factory() {
  static const DockerFactory factory;
  return factory;
}

} // namespace sandboxer::drivers::docker
