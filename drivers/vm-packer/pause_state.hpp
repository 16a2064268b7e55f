#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sandboxer/driver.hpp>

#include "drivers/vm-packer/qemu_process.hpp"

namespace sandboxer::drivers::vm_packer {

// A paused VM's vms/<id>/pause.json (docs/drivers/vm-packer.md, "Pause and resume"): written by
// rename once its QEMU has quit, removed once a resumed VM answers. The checkpoint itself is an
// internal snapshot of the overlay, `tag`; a checkpoint loads only into a QEMU with the same
// accelerator, CPUs and RAM, so those are what QEMU ran with, never what the host offers now.
struct PausedVm {
  std::string pause_id;
  bool memory = false; // RAM and devices were saved under `tag`; false: resume boots the disk
  std::string tag;     // empty when !memory
  bool kvm = false;
  int cpus = 1;
  int memory_mb = 0;
  std::optional<std::uint64_t> bytes; // the checkpoint's size (its vm-state-size), when known
  std::map<int, int> forwards;        // guest TCP port -> host port on 127.0.0.1 (Launch)
  std::vector<Exposed> exposed;       // the profile's ports: as the last launch had them
  bool operator==(const PausedVm&) const = default;
};

nlohmann::json to_json(const PausedVm& paused);
// nullopt for anything that is not a pause.json this driver wrote.
std::optional<PausedVm> paused_vm_of(const nlohmann::json& file);

// "sandboxer-pause-<pause_id>": the internal snapshot a pause saves; any tag with the prefix is one
// (a left-over of an earlier pause, or of the paused VM a snapshot was restored from).
std::string pause_tag(const std::string& pause_id);
bool is_pause_tag(std::string_view tag);

// "checkpoint 95 MiB on disk (TCG)": status()'s detail for a paused VM.
std::string paused_detail(const PausedVm& paused);

// The VM's QEMU as status() sees it: none, running, stopped by QMP `stop` (a pause or snapshot
// under way or interrupted), or another run state (migration states, an internal error).
enum class QemuSeen { none, running, stopped, other };
QemuSeen qemu_seen_of(const std::string& qmp_status);

// What a pause does from what it finds, so that a repeat finishes an interrupted one:
// already_paused: pause.json and no QEMU, answer what it records;
// save: QEMU there (running, or stopped by an interrupted pause), checkpoint it and quit;
// record_checkpoint / record_stop: no QEMU and no pause.json (it quit, the record was not
// written): the overlay holds the pause's tag, or nothing but the disk.
enum class PauseStep { already_paused, save, record_checkpoint, record_stop };
PauseStep pause_step(bool pause_file, QemuSeen qemu, bool tag_in_overlay);

// What a resume does from what it finds:
// running: QEMU runs and nothing is paused, nothing to do;
// cont: QEMU stopped by a pause interrupted before its quit, carry on where it is;
// finish: QEMU runs with pause.json (a resume interrupted after QEMU started), wait and tidy;
// launch: no QEMU, start it from the checkpoint (or the disk).
// `other`: QEMU in a state resume cannot take over is an error for the caller to report.
enum class ResumeStep { running, cont, finish, launch, refuse };
ResumeStep resume_step(bool pause_file, QemuSeen qemu);

// The Launch that loads `paused`: its accelerator, forwards and ports, `-loadvm tag` when memory.
Launch launch_of(const PausedVm& paused, const std::string& name);

// The profile's `ports:` among a sandbox's bindings (the rest are vm.ports' forwards, tcp ports
// of `vm_ports` on 127.0.0.1).
std::vector<Exposed> exposed_of_bindings(const std::vector<PortBinding>& bindings,
                                         const std::vector<int>& vm_ports);

// info.ports ({"22": "127.0.0.1:40022"}) as forwards; entries that do not parse are left out.
std::map<int, int> forwards_of_info(const nlohmann::json& ports);
nlohmann::json forwards_info(const std::map<int, int>& forwards);

// Host ports of `launch` that are taken now, picked anew: the same ports again where free.
// Returns whether any moved.
using PortTaken =
    std::function<bool(const std::string& protocol, const std::string& address, int port)>;
using PortPicker = std::function<int(const std::string& protocol, const std::string& address)>;
bool repick_taken_ports(Launch& launch, const PortTaken& taken, const PortPicker& pick);

} // namespace sandboxer::drivers::vm_packer
