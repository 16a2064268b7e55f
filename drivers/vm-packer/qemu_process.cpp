#include "drivers/vm-packer/qemu_process.hpp"

#include <algorithm>
#include <csignal>
#include <fcntl.h>
#include <fmt/format.h>
#include <fstream>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <sandboxer/error.hpp>
#include <sandboxer/interrupt.hpp>
#include <sandboxer/proc.hpp>

#include "drivers/vm-packer/qmp.hpp"

namespace sandboxer::drivers::vm_packer {
namespace {

namespace fs = std::filesystem;
using Kind = DriverError::Kind;

constexpr auto k_start_timeout = std::chrono::seconds(60); // QEMU's own set-up, not the boot
// qemu-img on an overlay: metadata only, but a deleted snapshot's clusters are freed one by one.
constexpr auto k_image_tool_timeout = std::chrono::seconds(120);

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool alive(int pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

} // namespace

std::vector<std::string> qemu_argv(const Spec& spec, const Launch& launch) {
  std::vector<std::string> argv = {spec.qemu,
                                   "-name",
                                   launch.name,
                                   "-machine",
                                   "q35",
                                   "-accel",
                                   launch.kvm ? "kvm" : "tcg",
                                   "-cpu",
                                   launch.kvm ? "host" : "max",
                                   "-smp",
                                   std::to_string(spec.cpus),
                                   "-m",
                                   std::to_string(spec.memory_mb),
                                   "-nodefaults",
                                   "-no-user-config",
                                   "-display",
                                   "none",
                                   "-no-reboot",
                                   "-daemonize",
                                   "-pidfile",
                                   "qemu.pid",
                                   "-qmp",
                                   "unix:qmp.sock,server=on,wait=off",
                                   "-serial",
                                   "file:serial.log",
                                   "-blockdev",
                                   "driver=file,filename=overlay.qcow2,node-name=file0",
                                   "-blockdev",
                                   "driver=qcow2,file=file0,node-name=disk0",
                                   "-device",
                                   "virtio-blk-pci,drive=disk0",
                                   "-device",
                                   "virtio-serial-pci,id=serial0"};
  if (spec.kernel) {
    argv.insert(argv.end(), {"-kernel", spec.kernel->string()});
    if (spec.initrd) {
      argv.insert(argv.end(), {"-initrd", spec.initrd->string()});
    }
    if (spec.append) {
      argv.insert(argv.end(), {"-append", *spec.append});
    }
  }
  for (int port = 0; port < spec.exec.agent_ports; ++port) {
    argv.insert(
        argv.end(),
        {"-chardev", fmt::format("socket,id=agent{0},path=agent{0}.sock,server=on,wait=off", port),
         "-device",
         fmt::format("virtserialport,bus=serial0.0,chardev=agent{0},name=org.sandboxer.agent.{0}",
                     port)});
  }
  if (spec.restricted_network) {
    std::string netdev = "user,id=net0,restrict=on";
    for (const auto& [guest, host] : launch.forwards) {
      netdev += fmt::format(",hostfwd=tcp:127.0.0.1:{}-:{}", host, guest);
    }
    for (const auto& exposed : launch.exposed) {
      netdev += fmt::format(",hostfwd={}:{}:{}-:{}", exposed.protocol, exposed.bind,
                            exposed.host_port, exposed.guest_port);
    }
    argv.insert(argv.end(), {"-netdev", netdev, "-device", "virtio-net-pci,netdev=net0"});
  }
  if (launch.loadvm) {
    argv.insert(argv.end(), {"-loadvm", *launch.loadvm});
  }
  return argv;
}

int start_qemu(const Spec& spec, const Launch& launch, const VmDir& dir) {
  proc::Command command;
  command.argv = qemu_argv(spec, launch);
  command.cwd = dir.path;
  command.timeout = k_start_timeout;
  proc::Result result = proc::run(command);
  if (result.status() != 0) {
    std::string said = result.err.empty() ? result.out : result.err;
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) {
      said.pop_back();
    }
    throw DriverError(Kind::error, result.timed_out
                                       ? fmt::format("QEMU did not set the VM up within {} s",
                                                     k_start_timeout.count())
                                       : fmt::format("QEMU refused to start the VM: {}", said));
  }
  auto pid = running_qemu(dir, launch.name);
  if (!pid) {
    throw DriverError(Kind::error,
                      fmt::format("QEMU started, then exited at once: {}", last_serial_line(dir)));
  }
  return *pid;
}

std::optional<int> running_qemu(const VmDir& dir, const std::string& name) {
  std::string text = read_file(dir.pid_file());
  int pid = std::atoi(text.c_str());
  if (pid <= 0 || !alive(pid)) {
    return std::nullopt;
  }
  // QEMU's argv names the sandbox (-name); another process with a reused pid does not.
  std::string cmdline = read_file(fmt::format("/proc/{}/cmdline", pid));
  if (cmdline.find(std::string("\0-name\0", 7) + name + std::string("\0", 1)) ==
      std::string::npos) {
    return std::nullopt;
  }
  return pid;
}

void stop_qemu(const VmDir& dir, const std::string& name, std::chrono::milliseconds grace) {
  interrupt::Shield finishing; // a half-stopped VM is worse than a slow destroy
  auto pid = running_qemu(dir, name);
  if (!pid) {
    return;
  }
  try {
    Qmp::connect(dir.qmp(), std::chrono::seconds(5)).execute("quit", {}, std::chrono::seconds(5));
  } catch (const Error&) {
    // QEMU that does not answer QMP is killed below.
  }
  // Gone once its /proc entry no longer shows QEMU: a daemon's exit leaves a zombie until its
  // parent (init, which in a container may never reap) collects it.
  auto running = [&] { return running_qemu(dir, name).has_value(); };
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (running()) {
    ::kill(*pid, SIGKILL);
    for (int i = 0; i < 500 && running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

std::map<std::string, std::uint64_t> image_snapshots(const fs::path& image) {
  proc::Command command;
  command.argv = {"qemu-img", "info", "--output=json", image.string()};
  command.timeout = k_image_tool_timeout;
  proc::Result result = proc::run(command);
  nlohmann::json info =
      result.status() == 0 ? nlohmann::json::parse(result.out, nullptr, false) : nlohmann::json();
  if (!info.is_object()) {
    throw DriverError(Kind::error, fmt::format("qemu-img could not read {}: {}", image.string(),
                                               result.timed_out ? "timed out" : result.err));
  }
  std::map<std::string, std::uint64_t> tags;
  for (const auto& snapshot : info.value("snapshots", nlohmann::json::array())) {
    if (snapshot.is_object() && snapshot.contains("name") && snapshot["name"].is_string()) {
      const auto& size = snapshot.value("vm-state-size", nlohmann::json());
      tags[snapshot["name"].get<std::string>()] =
          size.is_number_unsigned() ? size.get<std::uint64_t>() : 0;
    }
  }
  return tags;
}

void delete_image_snapshot(const fs::path& image, const std::string& tag) {
  if (!image_snapshots(image).contains(tag)) {
    return;
  }
  proc::Command command;
  command.argv = {"qemu-img", "snapshot", "-d", tag, image.string()};
  command.timeout = k_image_tool_timeout;
  proc::Result result = proc::run(command);
  if (result.status() != 0) {
    throw DriverError(Kind::error,
                      fmt::format("qemu-img could not delete snapshot {} of {}: {}", tag,
                                  image.string(), result.timed_out ? "timed out" : result.err));
  }
}

std::string last_serial_line(const VmDir& dir) {
  // Only the end of the log: the boot wait asks every 20 ms, and a real image's log grows long.
  constexpr std::streamoff k_tail = 4096;
  std::ifstream in(dir.serial_log(), std::ios::binary | std::ios::ate);
  const std::streamoff size = in ? static_cast<std::streamoff>(in.tellg()) : 0;
  in.seekg(std::max<std::streamoff>(0, size - k_tail));
  std::stringstream tail;
  tail << in.rdbuf();
  const std::string text = tail.str();
  std::string line;
  std::istringstream lines(text);
  for (std::string next; std::getline(lines, next);) {
    while (!next.empty() && (next.back() == '\r' || next.back() == ' ')) {
      next.pop_back();
    }
    if (!next.empty()) {
      line = next;
    }
  }
  return line.size() > 200 ? line.substr(0, 200) : line;
}

} // namespace sandboxer::drivers::vm_packer
