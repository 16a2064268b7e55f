#include "drivers/vm-packer/vm_driver.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/log.hpp>
#include <sandboxer/ports.hpp>
#include <sandboxer/proc.hpp>
#include <sandboxer/spec_fields.hpp>

#include "drivers/vm-packer/accel.hpp"
#include "drivers/vm-packer/agent_client.hpp"
#include "drivers/vm-packer/console_log.hpp"
#include "drivers/vm-packer/pause_state.hpp"
#include "drivers/vm-packer/qemu_process.hpp"
#include "drivers/vm-packer/qmp.hpp"
#include "drivers/vm-packer/spec.hpp"

namespace sandboxer::drivers::vm_packer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Kind = DriverError::Kind;
using Clock = std::chrono::steady_clock;

constexpr auto k_exec_port_wait = std::chrono::seconds(60); // every agent port busy
// A pool checkpoint's life: members restored from it share its boot's state (clock, entropy).
constexpr auto k_pool_checkpoint_life = std::chrono::hours(24);
constexpr auto k_ready_probe = std::chrono::milliseconds(250);
// A user's command over ssh: long, but not forever (the agent path is bounded by the VM's TTL).
constexpr auto k_exec_deadline = std::chrono::hours(24);
// logs -f: how often the serial log is read again, and how long a line without its newline (a
// prompt) waits for the rest before it is shown as it is.
constexpr auto k_follow_poll = std::chrono::milliseconds(200);
constexpr auto k_partial_wait = std::chrono::seconds(1);

json read_json(const fs::path& path) {
  std::ifstream in(path);
  json value = json::parse(in, nullptr, false);
  return value.is_discarded() ? json() : value;
}

void write_json(const fs::path& path, const json& value) {
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary);
    out << value.dump(2) << '\n';
    if (!out) {
      throw DriverError(Kind::error, fmt::format("cannot write {}", path.string()));
    }
  }
  fs::rename(temporary, path);
}

// The sandbox's info as an object (a handle made without one has null).
json info_of(const SandboxHandle& sandbox) {
  return sandbox.info.is_object() ? sandbox.info : json::object();
}

// A copy that shares blocks when the filesystem can (FICLONE), else a plain copy.
void copy_disk(const fs::path& from, const fs::path& to) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  int out = in < 0 ? -1 : ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  bool cloned = in >= 0 && out >= 0 && ::ioctl(out, FICLONE, in) == 0;
  if (in >= 0) {
    ::close(in);
  }
  if (out >= 0) {
    ::close(out);
  }
  if (!cloned) {
    std::error_code ec;
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      throw DriverError(Kind::error, fmt::format("cannot copy {} to {}: {}", from.string(),
                                                 to.string(), ec.message()));
    }
  }
}

class VmDriver : public Driver {
public:
  VmDriver(Spec spec, const DriverContext& context)
      : m_spec(std::move(spec)), m_root(context.root_or(context.data_dir)),
        m_progress(*context.progress) {}

  // The profile's `ports:` as QEMU forwards: a host port picked now where none was asked for.
  // They need QEMU's user network, and its forwards take IPv4 addresses.
  std::vector<Exposed> exposed_of(const std::vector<PortSpec>& ports) const {
    std::vector<Exposed> exposed;
    for (const auto& port : ports) {
      if (!m_spec.restricted_network) {
        throw DriverError(
            Kind::invalid_spec,
            fmt::format("vm-packer: ports: {}/{} needs vm.network: restricted (QEMU's "
                        "user network forwards it; with none the VM has no network)",
                        port.port, port.protocol));
      }
      if (port.bind.find(':') != std::string::npos) {
        throw DriverError(Kind::invalid_spec,
                          fmt::format("vm-packer: ports: {}/{} binds {}: QEMU forwards from IPv4 "
                                      "addresses only",
                                      port.port, port.protocol, port.bind));
      }
      if (port.protocol == "tcp" &&
          std::find(m_spec.ports.begin(), m_spec.ports.end(), port.port) != m_spec.ports.end()) {
        throw DriverError(Kind::invalid_spec,
                          fmt::format("vm-packer: port {}/tcp is in both ports: and vm.ports; "
                                      "keep one",
                                      port.port));
      }
      const int host_port = port.host_port ? *port.host_port : free_port(port.protocol, port.bind);
      exposed.push_back({port.protocol, port.bind, host_port, port.port});
    }
    return exposed;
  }

  // Where each exposed port is reached: vm.ports' forwards and the profile's ports:.
  std::vector<PortBinding> bindings_of(const Launch& launch) const {
    std::vector<PortBinding> bindings;
    for (int port : m_spec.ports) {
      auto forward = launch.forwards.find(port);
      if (forward != launch.forwards.end()) {
        bindings.push_back(host_binding(port, "tcp", "127.0.0.1", forward->second));
      }
    }
    for (const auto& exposed : launch.exposed) {
      bindings.push_back(
          host_binding(exposed.guest_port, exposed.protocol, exposed.bind, exposed.host_port));
    }
    return bindings;
  }

  CreateResult create(const CreateRequest& request) override {
    VmDir dir{m_root / "vms" / request.sandbox_id};
    std::error_code ec;
    if (fs::exists(dir.path, ec)) {
      throw DriverError(Kind::conflict, fmt::format("a VM directory for {} exists already: {}",
                                                    request.sandbox_id, dir.path.string()));
    }
    fs::create_directories(dir.path);
    Launch launch;
    launch.name = request.sandbox_id;
    std::optional<fs::path> checkpoint;
    if (request.pool_member && !request.from_snapshot) {
      checkpoint = fresh_pool_checkpoint();
    }
    try {
      prepare_disk(request, dir, launch, checkpoint);
      write_json(dir.labels(), {{"sandbox", request.sandbox_id}, {"labels", request.labels}});
      AccelChoice accel = choose_accel(m_spec.accel, probe_host_virt());
      launch.kvm = accel.kvm;
      launch.accel_reason = accel.reason;
      m_progress.update(accel.reason);
      if (m_spec.restricted_network) {
        for (int port : m_spec.ports) {
          launch.forwards[port] = free_port("tcp", "127.0.0.1");
        }
        if (m_spec.exec.via == Spec::ExecVia::ssh) {
          launch.forwards[m_spec.exec.port] = free_port("tcp", "127.0.0.1");
        }
      }
      launch.exposed = exposed_of(request.ports);
      int pid = start_qemu(m_spec, launch, dir);
      wait_until_ready(dir, launch);
      if (request.pool_member && !request.from_snapshot && !checkpoint) {
        keep_pool_checkpoint(request.sandbox_id, dir);
      } else if (checkpoint) {
        // Under TCG a restored guest's first command runs ~200 ms slower (QEMU translates its
        // code afresh): paid here, by the filler, not by the create that claims the member.
        SandboxHandle made;
        made.sandbox_id = made.backend_id = request.sandbox_id;
        run_quietly(made, "true", "the first command after the restore failed");
      }
      json forwards = json::object();
      for (const auto& [guest, host] : launch.forwards) {
        forwards[std::to_string(guest)] = fmt::format("127.0.0.1:{}", host);
      }
      return {
          request.sandbox_id,
          {{"pid", pid},
           {"accel", launch.kvm ? "kvm" : "tcg"},
           {"accel_reason", launch.accel_reason},
           {"serial_log", dir.serial_log().string()},
           {"ports", forwards},
           {"image_sha256", m_spec.image_sha256},
           {"restored_memory", launch.loadvm.has_value()},
           {"pool_checkpoint", checkpoint ? json(checkpoint->filename().string()) : json(nullptr)}},
          bindings_of(launch)};
    } catch (...) {
      interrupt::Shield cleaning;
      stop_qemu(dir, launch.name, std::chrono::seconds(2));
      fs::remove_all(dir.path, ec);
      if (checkpoint) {
        // It may be what failed (a QEMU that cannot load it): the next member boots and makes
        // another.
        fs::remove_all(*checkpoint, ec);
      }
      throw;
    }
  }

  void destroy(const SandboxHandle& sandbox) override {
    VmDir dir{m_root / "vms" / sandbox.backend_id};
    std::error_code ec;
    if (!fs::exists(dir.path, ec)) {
      return; // destroyed already
    }
    auto grace =
        sandbox.stop_grace ? std::chrono::milliseconds(*sandbox.stop_grace) : m_spec.stop_timeout;
    stop_qemu(dir, sandbox.sandbox_id, grace);
    fs::remove_all(dir.path, ec);
    if (ec) {
      throw DriverError(Kind::error,
                        fmt::format("cannot remove {}: {}", dir.path.string(), ec.message()));
    }
  }

  BackendStatus status(const SandboxHandle& sandbox) override {
    VmDir dir{m_root / "vms" / sandbox.backend_id};
    std::error_code ec;
    if (!fs::exists(dir.path, ec)) {
      return {BackendStatus::State::missing, "no VM directory"};
    }
    if (!running_qemu(dir, sandbox.sandbox_id)) {
      try {
        if (auto paused = read_pause(dir)) {
          return {BackendStatus::State::paused, paused_detail(*paused)};
        }
      } catch (const Error& e) {
        return {BackendStatus::State::unknown, e.what()};
      }
      return {BackendStatus::State::stopped,
              fmt::format("QEMU is not running (serial log: {})", last_serial_line(dir))};
    }
    try {
      json state = Qmp::connect(dir.qmp(), std::chrono::seconds(5)).execute("query-status");
      std::string word = state.value("status", "unknown");
      return {word == "running"  ? BackendStatus::State::running
              : word == "paused" ? BackendStatus::State::paused
                                 : BackendStatus::State::unknown,
              "QEMU: " + word};
    } catch (const Error& e) {
      return {BackendStatus::State::unknown, e.what()};
    }
  }

  int exec(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io) override {
    return run_in_guest(sandbox, request, io, k_exec_port_wait);
  }

  // The VM's serial console, read from its log file. Its lines carry no time, so `since` keeps them
  // all (select_log_lines' rule); `tail` counts back from the file's end. A VM whose QEMU stopped
  // still has its log until it is destroyed. `follow` reads the file again every 200 ms until
  // QEMU exits (each wait ends at a signal: Interrupted).
  void logs(const SandboxHandle& sandbox, const LogsRequest& request, LogSink& sink) override {
    VmDir dir{m_root / "vms" / sandbox.backend_id};
    std::error_code ec;
    if (!fs::exists(dir.path, ec)) {
      throw DriverError(Kind::not_found, fmt::format("the VM of {} is gone (no {})",
                                                     sandbox.sandbox_id, dir.path.string()));
    }
    ConsoleReader console(dir.serial_log(),
                          request.tail ? start_of_last_lines(dir.serial_log(), *request.tail) : 0);
    console.read(sink);
    if (!request.follow) {
      console.flush(sink);
      return;
    }
    auto grew = Clock::now();
    for (;;) {
      // Asked before the read, so that what QEMU wrote before it ended is read.
      const bool running = running_qemu(dir, sandbox.sandbox_id).has_value();
      if (console.read(sink) > 0) {
        grew = Clock::now();
      }
      if (!running) {
        console.flush(sink);
        return;
      }
      if (console.holds_partial() && Clock::now() - grew >= k_partial_wait) {
        console.flush(sink);
      }
      interrupt::sleep_for(k_follow_poll);
    }
  }

  SnapshotResult snapshot(const SandboxHandle& sandbox, const SnapshotRequest& request) override {
    {
      VmDir dir{m_root / "vms" / sandbox.backend_id};
      if (!running_qemu(dir, sandbox.sandbox_id)) {
        if (auto paused = read_pause(dir)) {
          return snapshot_paused(sandbox, dir, *paused, request);
        }
      }
    }
    VmDir dir = running_dir(sandbox);
    fs::path target = m_root / "snapshots" / request.snapshot_id;
    const bool memory = !request.disk_only;
    if (!memory) {
      flush_guest(sandbox); // what the guest wrote reaches the disk before it is copied
    }
    save_running(sandbox.sandbox_id, dir, target, request.snapshot_id, memory);
    std::error_code ec;
    auto size = fs::file_size(target / "disk.qcow2", ec);
    return {request.snapshot_id, ec ? std::nullopt : std::optional<std::uint64_t>(size)};
  }

  void delete_snapshot(const std::string& backend_ref) override {
    auto dir = snapshot_dir(backend_ref);
    if (!dir) {
      throw DriverError(Kind::not_found, fmt::format("no snapshot {}", backend_ref));
    }
    std::error_code ec;
    fs::remove_all(*dir, ec);
  }

  std::vector<RemoteResource> list_remote(const Labels& selector) override {
    std::vector<RemoteResource> found;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(m_root / "vms", ec)) {
      json file = read_json(entry.path() / "labels.json");
      json labels = file.is_object() ? file.value("labels", json::object()) : json::object();
      bool matches = labels.is_object();
      for (const auto& [key, value] : selector) {
        matches = matches && labels.contains(key) && labels[key] == value;
      }
      if (!matches) {
        continue;
      }
      RemoteResource resource;
      resource.backend_id = entry.path().filename().string();
      for (const auto& [key, value] : labels.items()) {
        if (value.is_string()) {
          resource.labels[key] = value.get<std::string>();
        }
      }
      VmDir dir{entry.path()};
      resource.state = running_qemu(dir, resource.backend_id) ? "running"
                       : fs::exists(dir.pause_file(), ec)     ? "paused"
                                                              : "exited";
      found.push_back(std::move(resource));
    }
    return found;
  }

  // A memory pause saves RAM and devices into the overlay (an internal snapshot, as a memory
  // checkpoint does) and quits QEMU: a paused VM holds no RAM and no process. pause.json is
  // written last, by rename, so that it says "paused, no QEMU"; a repeat finds where an
  // interrupted pause stopped (pause_step).
  PauseResult pause(const SandboxHandle& sandbox, const PauseRequest& request) override {
    VmDir dir = existing_dir(sandbox, "pause");
    const std::string& name = sandbox.sandbox_id;
    const auto recorded = read_pause(dir);
    const QemuSeen qemu = qemu_seen(dir, name);
    std::map<std::string, std::uint64_t> tags;
    if (qemu == QemuSeen::none && !recorded) {
      tags = image_snapshots(dir.overlay());
    }
    const std::string tag = pause_tag(request.pause_id);
    PausedVm paused;
    paused.pause_id = request.pause_id;
    paused.kvm = info_of(sandbox).value("accel", "") == "kvm";
    paused.cpus = m_spec.cpus;
    paused.memory_mb = m_spec.memory_mb;
    paused.forwards = forwards_of_info(info_of(sandbox).value("ports", json::object()));
    switch (pause_step(recorded.has_value(), qemu, tags.contains(tag))) {
    case PauseStep::already_paused:
      return pause_result(dir, *recorded);
    case PauseStep::record_checkpoint:
      // It quit after saving, before its pause.json was written.
      paused.memory = true;
      paused.tag = tag;
      paused.bytes = tags.at(tag);
      break;
    case PauseStep::record_stop:
      // QEMU is gone without the pause's checkpoint (it quit on a pause of the disk alone, or it
      // had ended before): what is left is the disk, and a resume boots it.
      m_progress.update(
          fmt::format("{} has no QEMU running: its disk is kept, without memory", name));
      for (const auto& [old, size] : tags) {
        if (is_pause_tag(old)) {
          delete_image_snapshot(dir.overlay(), old);
        }
      }
      break;
    case PauseStep::save:
      save_and_quit(sandbox, dir, request, qemu, paused);
      break;
    }
    write_json(dir.pause_file(), to_json(paused));
    return pause_result(dir, paused);
  }

  // QEMU started again from the pause's record (accelerator, CPUs, RAM, forwards) with -loadvm of
  // its checkpoint, or booting the disk after a pause without memory; once it answers, the pause's
  // snapshots leave the overlay (they hold the guest's RAM) and pause.json goes.
  ResumeResult resume(const SandboxHandle& sandbox, const ResumeRequest& request) override {
    VmDir dir = existing_dir(sandbox, "resume");
    const std::string& name = sandbox.sandbox_id;
    const auto recorded = read_pause(dir);
    const QemuSeen qemu = qemu_seen(dir, name);
    const ResumeStep step = resume_step(recorded.has_value(), qemu);
    // The ports: a QEMU that runs has those of pause.json (written as it was started); one to
    // start takes those the sandbox had before its pause (info.ports, the bindings) again.
    const auto had_forwards = forwards_of_info(info_of(sandbox).value("ports", json::object()));
    const auto had_exposed = exposed_of_bindings(request.bindings, m_spec.ports);
    Launch launch;
    launch.name = name;
    launch.kvm = info_of(sandbox).value("accel", "") == "kvm";
    launch.accel_reason = info_of(sandbox).value("accel_reason", "");
    launch.forwards = had_forwards;
    launch.exposed = had_exposed;
    if (recorded) {
      launch = launch_of(*recorded, name);
      if (step == ResumeStep::launch) {
        if (!had_forwards.empty()) {
          launch.forwards = had_forwards;
        }
        if (!request.bindings.empty()) {
          launch.exposed = had_exposed;
        }
      }
    }
    bool restored_memory = recorded && recorded->memory;
    switch (step) {
    case ResumeStep::running:
      return resumed(dir, launch, request, std::nullopt);
    case ResumeStep::refuse:
      throw DriverError(Kind::error,
                        fmt::format("the QEMU of {} is neither running nor stopped ({}): resume "
                                    "cannot take it over; destroy it",
                                    name, status(sandbox).detail));
    case ResumeStep::cont:
      Qmp::connect(dir.qmp(), std::chrono::seconds(10)).execute("cont");
      restored_memory = true;
      break;
    case ResumeStep::finish:
      break;
    case ResumeStep::launch:
      restored_memory = launch_paused(sandbox, dir, request, recorded, launch);
      break;
    }
    try {
      wait_until_ready(dir, launch);
      drop_pause_tags(dir);
    } catch (...) {
      if (step == ResumeStep::launch) {
        // What it started goes again: the checkpoint is intact, and a repeat loads it afresh.
        interrupt::Shield cleaning;
        stop_qemu(dir, name, std::chrono::seconds(2));
      }
      throw;
    }
    std::error_code ec;
    fs::remove(dir.pause_file(), ec);
    return resumed(dir, launch, request, restored_memory);
  }

private:
  VmDir existing_dir(const SandboxHandle& sandbox, std::string_view verb) const {
    VmDir dir{m_root / "vms" / sandbox.backend_id};
    std::error_code ec;
    if (!fs::exists(dir.path, ec)) {
      throw DriverError(Kind::not_found, fmt::format("cannot {} {}: its VM is gone (no {})", verb,
                                                     sandbox.sandbox_id, dir.path.string()));
    }
    return dir;
  }

  // pause.json, or nullopt when the VM is not paused; one that does not parse is an error (a
  // checkpoint whose settings are lost cannot be resumed safely).
  static std::optional<PausedVm> read_pause(const VmDir& dir) {
    std::error_code ec;
    if (!fs::exists(dir.pause_file(), ec)) {
      return std::nullopt;
    }
    auto paused = paused_vm_of(read_json(dir.pause_file()));
    if (!paused) {
      throw DriverError(Kind::error, fmt::format("{} is not a pause record this driver can read",
                                                 dir.pause_file().string()));
    }
    return paused;
  }

  static QemuSeen qemu_seen(const VmDir& dir, const std::string& name) {
    if (!running_qemu(dir, name)) {
      return QemuSeen::none;
    }
    json state = Qmp::connect(dir.qmp(), std::chrono::seconds(10)).execute("query-status");
    return qemu_seen_of(state.value("status", ""));
  }

  PauseResult pause_result(const VmDir& dir, const PausedVm& paused) const {
    PauseResult result;
    result.memory_kept = paused.memory;
    result.how = paused.memory ? "checkpoint" : "stop";
    result.held_bytes = paused.bytes;
    json about = {{"how", result.how},
                  {"accel", paused.kvm ? "kvm" : "tcg"},
                  {"file", dir.pause_file().string()}};
    if (paused.memory) {
      about["tag"] = paused.tag;
      about["bytes"] = paused.bytes ? json(*paused.bytes) : json();
    }
    // No QEMU while paused: its pid is gone (resume sets the new one).
    result.info = {{"pid", nullptr}, {"pause", about}};
    return result;
  }

  // Jobs of an earlier call (one whose process was killed mid-save) concluded and dismissed
  // before new ones start: snapshots of one image are made one at a time.
  void settle_jobs(Qmp& qmp) {
    auto deadline = Clock::now() + m_spec.snapshot_timeout;
    while (true) {
      bool busy = false;
      for (const json& job : qmp.execute("query-jobs")) {
        if (job.value("status", "") == "concluded") {
          qmp.execute("job-dismiss", {{"id", job.value("id", "")}});
        } else {
          busy = true;
        }
      }
      if (!busy) {
        return;
      }
      if (Clock::now() > deadline) {
        throw DriverError(Kind::error, "a job of an earlier snapshot is still running in QEMU");
      }
      interrupt::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The overlay's internal snapshots while QEMU has it open.
  static std::vector<std::string> live_tags(Qmp& qmp) {
    std::vector<std::string> tags;
    for (const json& node : qmp.execute("query-named-block-nodes", {{"flat", true}})) {
      if (node.value("node-name", "") != "disk0" || !node.contains("image")) {
        continue;
      }
      for (const json& snapshot : node["image"].value("snapshots", json::array())) {
        tags.push_back(snapshot.value("name", ""));
      }
    }
    return tags;
  }

  // Every sandboxer-pause-* snapshot out of the running VM's overlay: each holds a copy of the
  // guest's RAM.
  void drop_pause_tags(const VmDir& dir) {
    Qmp qmp = Qmp::connect(dir.qmp(), std::chrono::seconds(10));
    settle_jobs(qmp);
    int n = 0;
    for (const auto& tag : live_tags(qmp)) {
      if (is_pause_tag(tag)) {
        qmp.run_job("snapshot-delete", fmt::format("drop-pause-{}", ++n),
                    {{"tag", tag}, {"devices", {"disk0"}}}, m_spec.snapshot_timeout);
      }
    }
  }

  void save_and_quit(const SandboxHandle& sandbox, const VmDir& dir, const PauseRequest& request,
                     QemuSeen qemu, PausedVm& paused) {
    const std::string& name = sandbox.sandbox_id;
    paused.memory = request.memory.value_or(true);
    if (!paused.memory && qemu == QemuSeen::running) {
      flush_guest(sandbox); // its page cache reaches the disk: QEMU quits without a shutdown
    }
    m_progress.update(fmt::format("pausing {} ({})", name,
                                  paused.memory ? "saving its memory to disk" : "disk only"));
    // From here on the VM is stopped: finishing is better than leaving it half-saved.
    interrupt::Shield finishing;
    {
      Qmp qmp = Qmp::connect(dir.qmp(), std::chrono::seconds(10));
      paused.kvm = qmp.execute("query-kvm").value("enabled", false);
      if (paused.memory) {
        paused.tag = pause_tag(paused.pause_id);
        qmp.execute("stop");
        settle_jobs(qmp);
        // Earlier pauses' snapshots (and this pause's own, from an interrupted try: it is saved
        // again from the same stopped VM) go first: QEMU refuses a tag that exists.
        int n = 0;
        for (const auto& old : live_tags(qmp)) {
          if (is_pause_tag(old)) {
            qmp.run_job("snapshot-delete", fmt::format("drop-pause-{}", ++n),
                        {{"tag", old}, {"devices", {"disk0"}}}, m_spec.snapshot_timeout);
          }
        }
        qmp.run_job("snapshot-save", "pause",
                    {{"tag", paused.tag}, {"vmstate", "disk0"}, {"devices", {"disk0"}}},
                    m_spec.snapshot_timeout);
      }
    } // QMP takes one client at a time: this one is gone before stop_qemu connects
    auto grace = request.stop_grace && !paused.memory
                     ? std::chrono::duration_cast<std::chrono::milliseconds>(*request.stop_grace)
                     : m_spec.stop_timeout;
    stop_qemu(dir, name, grace);
    if (running_qemu(dir, name)) {
      throw DriverError(Kind::error, fmt::format("the QEMU of {} did not end", name));
    }
    auto tags = image_snapshots(dir.overlay());
    if (paused.memory) {
      if (!tags.contains(paused.tag)) {
        throw DriverError(Kind::error, fmt::format("QEMU quit, but the checkpoint {} is not in {}",
                                                   paused.tag, dir.overlay().string()));
      }
      paused.bytes = tags.at(paused.tag);
    } else {
      for (const auto& [old, size] : tags) {
        if (is_pause_tag(old)) {
          delete_image_snapshot(dir.overlay(), old);
        }
      }
    }
  }

  // Starts QEMU for a paused VM; returns whether it loads a checkpoint. pause.json is written
  // again with the ports it starts with, so that a repeat after an interruption finds them.
  bool launch_paused(const SandboxHandle& sandbox, const VmDir& dir, const ResumeRequest& request,
                     const std::optional<PausedVm>& recorded, Launch& launch) {
    const std::string& name = sandbox.sandbox_id;
    PausedVm paused;
    if (recorded) {
      paused = *recorded;
    } else {
      // QEMU quit on a pause whose record was never written: its checkpoint, if it was saved.
      paused.pause_id = request.pause_id;
      paused.kvm = launch.kvm;
      paused.cpus = m_spec.cpus;
      paused.memory_mb = m_spec.memory_mb;
      paused.forwards = launch.forwards;
      auto tags = image_snapshots(dir.overlay());
      paused.memory = tags.contains(pause_tag(request.pause_id));
      if (paused.memory) {
        paused.tag = pause_tag(request.pause_id);
        paused.bytes = tags.at(paused.tag);
      }
      auto exposed = launch.exposed;
      launch = launch_of(paused, name);
      launch.exposed = exposed;
    }
    if (paused.memory && (paused.cpus != m_spec.cpus || paused.memory_mb != m_spec.memory_mb)) {
      throw DriverError(Kind::invalid_spec,
                        fmt::format("{} was paused with {} CPUs and {} MiB, its spec now says {} "
                                    "and {}: its checkpoint loads only on the same machine",
                                    name, paused.cpus, paused.memory_mb, m_spec.cpus,
                                    m_spec.memory_mb));
    }
    if (paused.memory && !image_snapshots(dir.overlay()).contains(paused.tag)) {
      throw DriverError(Kind::error, fmt::format("the checkpoint {} of {} is missing from {}",
                                                 paused.tag, name, dir.overlay().string()));
    }
    if (m_spec.restricted_network) {
      for (int port : m_spec.ports) {
        if (!launch.forwards.contains(port)) {
          launch.forwards[port] = free_port("tcp", "127.0.0.1");
        }
      }
      if (m_spec.exec.via == Spec::ExecVia::ssh && !launch.forwards.contains(m_spec.exec.port)) {
        launch.forwards[m_spec.exec.port] = free_port("tcp", "127.0.0.1");
      }
    }
    repick_taken_ports(
        launch,
        [](const std::string& protocol, const std::string& address, int port) {
          return port_unavailable(protocol, address, port).has_value();
        },
        [](const std::string& protocol, const std::string& address) {
          return free_port(protocol, address);
        });
    paused.forwards = launch.forwards;
    paused.exposed = launch.exposed;
    write_json(dir.pause_file(), to_json(paused));
    m_progress.update(fmt::format("resuming {} ({}, {})", name,
                                  paused.memory ? "loading its checkpoint" : "booting its disk",
                                  launch.kvm ? "KVM" : "TCG"));
    start_qemu(m_spec, launch, dir);
    return paused.memory;
  }

  // `restored_memory`: nullopt when this resume found the VM running and changed nothing.
  ResumeResult resumed(const VmDir& dir, const Launch& launch, const ResumeRequest& request,
                       std::optional<bool> restored_memory) const {
    ResumeResult result;
    auto pid = running_qemu(dir, launch.name);
    result.info = {{"pid", pid ? json(*pid) : json()}, {"pause", nullptr}};
    if (restored_memory) {
      result.info["restored_memory"] = *restored_memory;
      result.info["accel"] = launch.kvm ? "kvm" : "tcg";
      result.info["ports"] = forwards_info(launch.forwards);
      if (!launch.accel_reason.empty()) {
        result.info["accel_reason"] = launch.accel_reason;
      }
    }
    auto bindings = bindings_of(launch);
    if (bindings != request.bindings) {
      result.ports = std::move(bindings);
    }
    return result;
  }

  // A paused VM's disk, copied as it is: with its checkpoint a memory snapshot (a restore loads
  // it), with --disk-only (or after a pause without memory) the disk alone.
  SnapshotResult snapshot_paused(const SandboxHandle& sandbox, const VmDir& dir,
                                 const PausedVm& paused, const SnapshotRequest& request) {
    fs::path target = m_root / "snapshots" / request.snapshot_id;
    fs::create_directories(target);
    const bool memory = paused.memory && !request.disk_only;
    m_progress.update(fmt::format("copying the disk of paused {} ({})", sandbox.sandbox_id,
                                  memory ? "with its checkpoint" : "disk only"));
    try {
      copy_disk(dir.overlay(), target / "disk.qcow2");
      if (!memory) {
        for (const auto& [tag, size] : image_snapshots(target / "disk.qcow2")) {
          if (is_pause_tag(tag)) {
            delete_image_snapshot(target / "disk.qcow2", tag);
          }
        }
      }
      write_json(target / "snapshot.json", {{"sandbox", sandbox.sandbox_id},
                                            {"tag", memory ? paused.tag : request.snapshot_id},
                                            {"memory", memory},
                                            {"image", m_spec.image.string()},
                                            {"image_sha256", m_spec.image_sha256},
                                            {"memory_mb", m_spec.memory_mb},
                                            {"cpus", m_spec.cpus},
                                            {"accel", paused.kvm ? "kvm" : "tcg"}});
    } catch (...) {
      std::error_code ec;
      fs::remove_all(target, ec);
      throw;
    }
    std::error_code ec;
    auto size = fs::file_size(target / "disk.qcow2", ec);
    return {request.snapshot_id, ec ? std::nullopt : std::optional<std::uint64_t>(size)};
  }

  // A running VM's disk copied into `target` (created here, removed on failure), with its memory
  // and device state as checkpoint `tag` when `memory`, and snapshot.json saying what it needs.
  // The VM is stopped for the copy and runs again after, whatever happens.
  void save_running(const std::string& name, const VmDir& dir, const fs::path& target,
                    const std::string& tag, bool memory) {
    fs::create_directories(target);
    m_progress.update(
        fmt::format("checkpointing {} ({})", name, memory ? "memory and disk" : "disk only"));
    try {
      Qmp qmp = Qmp::connect(dir.qmp(), std::chrono::seconds(10));
      qmp.execute("stop");
      try {
        interrupt::Shield consistent; // the VM must run again whatever happens
        if (memory) {
          qmp.run_job("snapshot-save", "save-" + tag,
                      {{"tag", tag}, {"vmstate", "disk0"}, {"devices", {"disk0"}}},
                      m_spec.snapshot_timeout);
        }
        copy_disk(dir.overlay(), target / "disk.qcow2");
        if (memory) {
          qmp.run_job("snapshot-delete", "delete-" + tag, {{"tag", tag}, {"devices", {"disk0"}}},
                      m_spec.snapshot_timeout);
        }
      } catch (...) {
        qmp.execute("cont");
        throw;
      }
      qmp.execute("cont");
      write_json(target / "snapshot.json", {{"sandbox", name},
                                            {"tag", tag},
                                            {"memory", memory},
                                            {"image", m_spec.image.string()},
                                            {"image_sha256", m_spec.image_sha256},
                                            {"memory_mb", m_spec.memory_mb},
                                            {"cpus", m_spec.cpus},
                                            {"made_at", format_time(system_clock().now())}});
    } catch (...) {
      std::error_code ec;
      fs::remove_all(target, ec);
      throw;
    }
  }

  // Warm pool members (CreateRequest::pool_member) start from a memory checkpoint of the first
  // member booted with the same spec: a restore (~0.3-1 s under TCG) instead of a boot (3-6 s).
  // One per spec (every field: QEMU loads a checkpoint only on an identical machine), remade after
  // k_pool_checkpoint_life so that members do not all carry one old boot's state.
  fs::path pool_checkpoint_dir() const {
    const std::string text = to_json(m_spec).dump();
    std::uint64_t hash = 14695981039346656037ull; // FNV-1a: a stable name, not a security check
    for (unsigned char c : text) {
      hash = (hash ^ c) * 1099511628211ull;
    }
    return m_root / "pool-checkpoints" /
           fmt::format("{}-{:016x}", m_spec.image_sha256.substr(0, 12), hash);
  }

  std::optional<fs::path> fresh_pool_checkpoint() const {
    const fs::path checkpoint = pool_checkpoint_dir();
    json meta = read_json(checkpoint / "snapshot.json");
    if (!meta.is_object()) {
      return std::nullopt;
    }
    auto made = parse_time(meta.value("made_at", ""));
    if (!made || system_clock().now() - *made > k_pool_checkpoint_life) {
      return std::nullopt;
    }
    return checkpoint;
  }

  // Best effort: a member without a checkpoint is still a good member.
  void keep_pool_checkpoint(const std::string& name, const VmDir& dir) {
    const fs::path final_dir = pool_checkpoint_dir();
    const fs::path staging = final_dir.string() + ".new-" + name;
    try {
      save_running(name, dir, staging, "pool-checkpoint", true);
      std::error_code ec;
      fs::remove_all(final_dir, ec); // an older one of the same spec
      fs::rename(staging, final_dir, ec);
      if (ec) {
        fs::remove_all(staging, ec); // another filler's came first
      }
      forget_old_pool_checkpoints(final_dir);
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      m_progress.update(fmt::format("no pool checkpoint kept from {}: {}", name, e.what()));
    }
  }

  // Checkpoints of specs no longer used (an image rebuilt, a profile edited) go once they are old.
  void forget_old_pool_checkpoints(const fs::path& keep) const {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(keep.parent_path(), ec)) {
      if (entry.path() == keep) {
        continue;
      }
      auto made = fs::last_write_time(entry.path(), ec);
      if (!ec && fs::file_time_type::clock::now() - made > k_pool_checkpoint_life) {
        fs::remove_all(entry.path(), ec);
      }
    }
  }

  // A snapshot's directory; nullopt for a ref that would reach outside the snapshots directory.
  std::optional<fs::path> snapshot_dir(const std::string& ref) const {
    if (ref.empty() || ref.find('/') != std::string::npos || ref.starts_with(".")) {
      return std::nullopt;
    }
    return m_root / "snapshots" / ref;
  }

  // The VM's disk: a copy of a snapshot (`from_snapshot`) or of `checkpoint` (a pool checkpoint),
  // loading its memory when it has some; otherwise an overlay on the image.
  void prepare_disk(const CreateRequest& request, const VmDir& dir, Launch& launch,
                    const std::optional<fs::path>& checkpoint) {
    if (request.from_snapshot || checkpoint) {
      const std::string ref =
          request.from_snapshot ? *request.from_snapshot : checkpoint->filename().string();
      auto source = request.from_snapshot ? snapshot_dir(ref) : checkpoint;
      json meta = source ? read_json(*source / "snapshot.json") : json();
      if (!meta.is_object()) {
        throw DriverError(Kind::not_found, fmt::format("no snapshot {} in {}", ref,
                                                       (m_root / "snapshots").string()));
      }
      if (meta.value("memory_mb", m_spec.memory_mb) != m_spec.memory_mb ||
          meta.value("cpus", m_spec.cpus) != m_spec.cpus) {
        throw DriverError(Kind::invalid_spec,
                          fmt::format("snapshot {} was taken with {} CPUs and {} MiB; the profile "
                                      "now asks for {} and {}: a memory checkpoint resumes only "
                                      "on the same machine",
                                      ref, meta.value("cpus", 0), meta.value("memory_mb", 0),
                                      m_spec.cpus, m_spec.memory_mb));
      }
      m_progress.update(
          fmt::format("copying {} {}", checkpoint ? "pool checkpoint" : "snapshot", ref));
      copy_disk(*source / "disk.qcow2", dir.overlay());
      if (meta.value("memory", false)) {
        launch.loadvm = meta.value("tag", ref);
      }
      return;
    }
    proc::Command command;
    command.argv = {"qemu-img",
                    "create",
                    "-q",
                    "-f",
                    "qcow2",
                    "-F",
                    "qcow2",
                    "-b",
                    m_spec.image.string(),
                    dir.overlay().string()};
    command.timeout = std::chrono::seconds(60);
    proc::Result result = proc::run(command);
    if (result.status() != 0) {
      throw DriverError(Kind::error, fmt::format("qemu-img could not make the overlay on {}: {}",
                                                 m_spec.image.string(), result.err));
    }
  }

  // A command in the guest, the way the profile says (the agent, or ssh); `port_wait` bounds the
  // wait for a free agent port.
  int run_in_guest(const SandboxHandle& sandbox, const ExecRequest& request, ExecIo& io,
                   std::chrono::milliseconds port_wait) {
    VmDir dir = running_dir(sandbox);
    if (m_spec.exec.via == Spec::ExecVia::ssh) {
      return exec_over_ssh(sandbox, dir, request, io);
    }
    return AgentSession::open(dir.path, m_spec.exec.agent_ports, port_wait).exec(request, io);
  }

  // `sync` in the guest (through the agent or ssh, as exec goes), best effort: a disk-only snapshot
  // copies the disk as the guest left it, and data still in its page cache would be missing.
  void flush_guest(const SandboxHandle& sandbox) {
    run_quietly(sandbox, "sync", "could not sync the guest's disks");
  }

  // A command in the guest whose output nobody reads, best effort: its failure is progress text.
  void run_quietly(const SandboxHandle& sandbox, const std::string& command, const char* failed) {
    class Discard : public ExecIo {
    public:
      void out(std::string_view) override {}
      void err(std::string_view) override {}
    } discard;
    try {
      ExecRequest request;
      request.argv = {command};
      run_in_guest(sandbox, request, discard, std::chrono::seconds(10));
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      m_progress.update(fmt::format("{} ({})", failed, e.what()));
    }
  }

  // An empty console at the deadline means the guest never ran a line of its kernel, which is
  // what an accelerator that cannot run it looks like; a console with lines means it booted
  // too slowly or stopped on its way.
  std::string boot_timeout_message(const VmDir& dir, const Launch& launch) const {
    std::string limit = spec_fields::duration_text(m_spec.ready_timeout);
    std::string line = last_serial_line(dir);
    if (!line.empty()) {
      return fmt::format("the VM did not become ready within {} (vm-packer.ready_timeout) under "
                         "{}; its serial log ends with: {}",
                         limit, launch.kvm ? "KVM" : "TCG", line);
    }
    return fmt::format("the VM did not become ready within {} (vm-packer.ready_timeout) and its "
                       "serial log is empty: the guest never started under {} ({}){}",
                       limit, launch.kvm ? "KVM" : "TCG", launch.accel_reason,
                       launch.kvm ? "; accel: tcg runs it under emulation" : "");
  }

  void wait_until_ready(const VmDir& dir, const Launch& launch) {
    auto deadline = Clock::now() + m_spec.ready_timeout;
    while (true) {
      if (m_spec.exec.via == Spec::ExecVia::agent &&
          AgentSession::answers(dir.path, k_ready_probe)) {
        return;
      }
      if (m_spec.exec.via == Spec::ExecVia::ssh && ssh_answers(launch, dir)) {
        return;
      }
      if (!running_qemu(dir, launch.name)) {
        throw DriverError(Kind::error,
                          fmt::format("the VM stopped while booting; its serial log ends with: {}",
                                      last_serial_line(dir)));
      }
      if (Clock::now() > deadline) {
        throw DriverError(Kind::timeout, boot_timeout_message(dir, launch));
      }
      std::string line = last_serial_line(dir);
      m_progress.update(fmt::format("booting {} ({}){}", launch.name, launch.kvm ? "KVM" : "TCG",
                                    line.empty() ? "" : ": " + line));
      interrupt::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // The VM's host key is learnt on its first answer (while it boots, from this machine's own
  // loopback forward) into the VM's directory, and checked on every later connection.
  std::vector<std::string> ssh_argv(const Launch& launch, const VmDir& dir) const {
    int port = launch.forwards.at(m_spec.exec.port);
    std::vector<std::string> argv = {"ssh",
                                     "-p",
                                     std::to_string(port),
                                     "-o",
                                     "BatchMode=yes",
                                     "-o",
                                     "StrictHostKeyChecking=accept-new",
                                     "-o",
                                     "UserKnownHostsFile=" + (dir.path / "known_hosts").string(),
                                     "-o",
                                     "GlobalKnownHostsFile=/dev/null",
                                     "-o",
                                     "LogLevel=ERROR",
                                     "-o",
                                     "ConnectTimeout=5"};
    if (m_spec.exec.identity_file) {
      argv.insert(argv.end(),
                  {"-i", m_spec.exec.identity_file->string(), "-o", "IdentitiesOnly=yes"});
    }
    argv.push_back(m_spec.exec.user + "@127.0.0.1");
    return argv;
  }

  bool ssh_answers(const Launch& launch, const VmDir& dir) {
    proc::Command command;
    command.argv = ssh_argv(launch, dir);
    command.argv.push_back("true");
    command.timeout = std::chrono::seconds(10);
    return proc::run(command).status() == 0;
  }

  int exec_over_ssh(const SandboxHandle& sandbox, const VmDir& dir, const ExecRequest& request,
                    ExecIo& io) {
    Launch launch;
    launch.name = sandbox.sandbox_id;
    const json ports = sandbox.info.value("ports", json::object());
    for (const auto& [guest, host] : ports.items()) {
      std::string text = host.get<std::string>();
      launch.forwards[std::stoi(guest)] = std::stoi(text.substr(text.rfind(':') + 1));
    }
    if (!launch.forwards.count(m_spec.exec.port)) {
      throw DriverError(Kind::error, "this VM has no forwarded ssh port");
    }
    proc::Command command;
    command.argv = ssh_argv(launch, dir);
    // -tt: the guest gets a terminal of the local one's size, and its resizes.
    command.argv.insert(command.argv.begin() + 1, request.tty ? "-tt" : "-T");
    // ssh hands the guest one string for its shell: every word quoted so that it parses back.
    std::string remote;
    auto size = io.terminal_size();
    if (request.tty && !request.attach_stdin && size) {
      // Without -i, ssh's stdin is not the terminal and ssh sends no size: set it once.
      remote += fmt::format("stty rows {} cols {} 2>/dev/null; ", size->rows, size->cols);
    }
    if (request.workdir) {
      remote += "cd " + proc::shell_words({*request.workdir}) + " && ";
    }
    for (const auto& [key, value] : request.env) {
      remote += "export " + proc::shell_words({key + "=" + value}) + "; ";
    }
    remote += "exec " + proc::shell_words(request.argv);
    command.argv.insert(command.argv.end(), {"--", remote});
    command.stdin_fd = request.attach_stdin ? io.stdin_fd() : -1;
    command.on_interrupt = proc::Command::OnInterrupt::forward;
    command.timeout = k_exec_deadline;
    command.on_stdout = [&](std::string_view bytes) { io.out(bytes); };
    // ssh's own complaint (exit 255) is kept to tell it from the command's.
    std::string ssh_err;
    command.on_stderr = [&](std::string_view bytes) {
      if (ssh_err.size() < 4096) {
        ssh_err.append(bytes.substr(0, 4096 - ssh_err.size()));
      }
      io.err(bytes);
    };
    proc::Result result = proc::run(command);
    if (result.exit_code == 255 && ssh_err.rfind("ssh: ", 0) == 0) {
      throw DriverError(Kind::error,
                        fmt::format("cannot reach the ssh server of {} on 127.0.0.1:{}: {}",
                                    sandbox.sandbox_id, launch.forwards.at(m_spec.exec.port),
                                    log::redact(ssh_err.substr(0, ssh_err.find('\n')))));
    }
    return result.status();
  }

  VmDir running_dir(const SandboxHandle& sandbox) {
    VmDir dir{m_root / "vms" / sandbox.backend_id};
    if (!running_qemu(dir, sandbox.sandbox_id)) {
      std::error_code ec;
      throw DriverError(fs::exists(dir.path, ec) ? Kind::error : Kind::not_found,
                        fmt::format("the VM of {} is not running", sandbox.sandbox_id));
    }
    return dir;
  }

  Spec m_spec;
  fs::path m_root;
  Progress& m_progress;
};

class VmPackerFactory : public spec::TableFactory<Spec> {
public:
  std::string_view name() const override { return "vm-packer"; }
  std::string_view doc() const override {
    return "VMs from Packer-built qcow2 images, booted with QEMU; exec through a guest agent";
  }
  bool host_local(const json&) const override { return true; }
  Capabilities capabilities() const override {
    return {.snapshot = true,
            .exec = true,
            .native_ttl = false,
            .list_by_label = true,
            .restore_in_place = false,
            .logs = true,
            .ports = true,
            .pause = true};
  }
  // A profile's section does more than the table reads: its manifest names the image, which is
  // hashed.
  json parse_profile_section(const json& section, const SpecOrigin& origin) const override {
    return to_json(vm_packer::parse_profile_section(section, origin));
  }
  json location(const json&, const DriverContext& context) const override {
    return {{"root", context.data_dir.string()}};
  }
  std::unique_ptr<Driver> open(const json& spec, const DriverContext& context) const override {
    return std::make_unique<VmDriver>(bind(spec), context);
  }

protected:
  const spec::Table<Spec>& spec_table() const override { return vm_packer::spec_table(); }
};

} // namespace

const DriverFactory& vm_packer_factory() {
  static const VmPackerFactory factory;
  return factory;
}

} // namespace sandboxer::drivers::vm_packer
