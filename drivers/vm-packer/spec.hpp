#pragma once

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>
#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::vm_packer {

// The profile's `vm-packer:` section, validated (docs/drivers/vm-packer.md). Paths are absolute
// once parsed; a relative one resolves against the profile's directory.
struct Spec {
  std::optional<std::filesystem::path> manifest; // Packer's manifest; the image is its artifact
  std::filesystem::path image;                   // the qcow2 every sandbox's overlay is backed by
  std::string image_sha256;                      // of the image, when the section was bound
  int cpus = 1;
  int memory_mb = 512;
  enum class Accel { automatic, kvm, tcg };
  Accel accel = Accel::automatic;
  // Direct kernel boot (the tiny test image); none: the image boots with its own bootloader.
  std::optional<std::filesystem::path> kernel, initrd;
  std::optional<std::string> append;
  // exec: through the guest agent on virtio-serial ports, or ssh through a forwarded port.
  enum class ExecVia { agent, ssh };
  struct Exec {
    ExecVia via = ExecVia::agent;
    int agent_ports = 4;       // concurrent execs per VM
    std::string user = "root"; // ssh's, as are the two below
    std::optional<std::filesystem::path> identity_file;
    int port = 22; // in the guest
  };
  Exec exec;
  // network: none, or QEMU user networking with restrict=on (no way out) and forwards on
  // 127.0.0.1 for `ports` (and ssh).
  bool restricted_network = false;
  std::vector<int> ports;
  std::chrono::milliseconds ready_timeout{std::chrono::minutes(3)}; // boot until exec works
  std::chrono::milliseconds stop_timeout{std::chrono::seconds(10)}; // QMP quit until SIGKILL
  std::chrono::milliseconds snapshot_timeout{std::chrono::minutes(5)};
  std::string qemu = "qemu-system-x86_64";
};

// The fields of a `vm-packer:` section: reading, the stored form and the schema.
const spec::Table<Spec>& spec_table();
// Binds a stored (normalized) section.
Spec parse_spec(const nlohmann::json& section);
// Binds a section read from a profile: relative paths resolve with `origin`, the files must
// exist, the manifest is read and the image hashed.
Spec parse_profile_section(const nlohmann::json& section, const SpecOrigin& origin);
// The normalized form stored in the ledger; parse_spec(to_json(s)) == s.
nlohmann::json to_json(const Spec& spec);

} // namespace sandboxer::drivers::vm_packer
