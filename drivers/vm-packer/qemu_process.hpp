#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "drivers/vm-packer/spec.hpp"

namespace sandboxer::drivers::vm_packer {

// One VM's directory under the driver's data dir: its overlay, QMP and agent sockets, serial log,
// pid file and labels. QEMU runs with this as its working directory, so every path it is given
// is short and relative (unix socket paths are limited to 107 bytes).
struct VmDir {
  std::filesystem::path path;
  std::filesystem::path overlay() const { return path / "overlay.qcow2"; }
  std::filesystem::path qmp() const { return path / "qmp.sock"; }
  std::filesystem::path serial_log() const { return path / "serial.log"; }
  std::filesystem::path pid_file() const { return path / "qemu.pid"; }
  std::filesystem::path labels() const { return path / "labels.json"; }
  // Present while the VM is paused (pause_state.hpp).
  std::filesystem::path pause_file() const { return path / "pause.json"; }
};

// What QEMU is started with beyond the spec.
// One of the profile's `ports:` as a QEMU forward.
struct Exposed {
  std::string protocol; // tcp or udp
  std::string bind;     // an IPv4 address of the host
  int host_port = 0;
  int guest_port = 0;
  bool operator==(const Exposed&) const = default;
};

struct Launch {
  std::string name;                  // -name: the sandbox id, visible in ps
  bool kvm = false;                  // the accelerator chosen (accel.hpp)
  std::string accel_reason;          // why: said while booting and by a boot that times out
  std::map<int, int> forwards;       // guest TCP port -> host port on 127.0.0.1
  std::vector<Exposed> exposed;      // the profile's `ports:` (docs/ports.md)
  std::optional<std::string> loadvm; // resume this internal snapshot of the overlay
};

// The argv of QEMU for `spec`, run in `dir` (argv only: no shell ever sees it).
std::vector<std::string> qemu_argv(const Spec& spec, const Launch& launch);

// Starts QEMU as a daemon (it returns once the VM is set up) and returns its pid. Throws
// DriverError with QEMU's own message when it refuses.
int start_qemu(const Spec& spec, const Launch& launch, const VmDir& dir);

// The pid of the VM's QEMU when it still runs (its pid file, checked against /proc so that a
// reused pid is not taken for it), else nullopt.
std::optional<int> running_qemu(const VmDir& dir, const std::string& name);

// Ends the VM: QMP quit, up to `grace` for QEMU to go, then SIGKILL. Fine when it is gone.
void stop_qemu(const VmDir& dir, const std::string& name, std::chrono::milliseconds grace);

// The internal snapshots of a qcow2 that no QEMU has open (`qemu-img info`): tag -> the size of its
// VM state (0 for a disk-only one).
std::map<std::string, std::uint64_t> image_snapshots(const std::filesystem::path& image);
// Removes one from such a qcow2 (`qemu-img snapshot -d`); a tag that is not there is fine.
void delete_image_snapshot(const std::filesystem::path& image, const std::string& tag);

// The serial log's last non-empty line (boot progress, and what a failed boot said).
std::string last_serial_line(const VmDir& dir);

} // namespace sandboxer::drivers::vm_packer
