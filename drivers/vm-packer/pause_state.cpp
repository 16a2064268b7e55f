#include "drivers/vm-packer/pause_state.hpp"

#include <algorithm>
#include <fmt/format.h>

#include <sandboxer/ports.hpp>

namespace sandboxer::drivers::vm_packer {
namespace {

using nlohmann::json;

constexpr std::string_view k_tag_prefix = "sandboxer-pause-";

std::optional<int> port_in(const json& value) {
  if (value.is_number_integer()) {
    auto number = value.get<std::int64_t>();
    return number >= 1 && number <= 65535 ? std::optional<int>(static_cast<int>(number))
                                          : std::nullopt;
  }
  return value.is_string() ? port_number(value.get<std::string>()) : std::nullopt;
}

} // namespace

json to_json(const PausedVm& paused) {
  json exposed = json::array();
  for (const auto& port : paused.exposed) {
    exposed.push_back({{"protocol", port.protocol},
                       {"bind", port.bind},
                       {"host_port", port.host_port},
                       {"guest_port", port.guest_port}});
  }
  return {{"pause_id", paused.pause_id},
          {"memory", paused.memory},
          {"tag", paused.memory ? json(paused.tag) : json()},
          {"accel", paused.kvm ? "kvm" : "tcg"},
          {"cpus", paused.cpus},
          {"memory_mb", paused.memory_mb},
          {"bytes", paused.bytes ? json(*paused.bytes) : json()},
          {"ports", forwards_info(paused.forwards)},
          {"exposed", exposed}};
}

std::optional<PausedVm> paused_vm_of(const json& file) {
  if (!file.is_object() || !file.contains("pause_id") || !file["pause_id"].is_string() ||
      !file.contains("memory") || !file["memory"].is_boolean() || !file.contains("accel") ||
      !file["accel"].is_string()) {
    return std::nullopt;
  }
  PausedVm paused;
  paused.pause_id = file["pause_id"].get<std::string>();
  paused.memory = file["memory"].get<bool>();
  const std::string accel = file["accel"].get<std::string>();
  if (accel != "kvm" && accel != "tcg") {
    return std::nullopt;
  }
  paused.kvm = accel == "kvm";
  if (paused.memory) {
    const json& tag = file.value("tag", json());
    if (!tag.is_string() || !is_pause_tag(tag.get<std::string>())) {
      return std::nullopt; // a memory pause without its checkpoint's name cannot be resumed
    }
    paused.tag = tag.get<std::string>();
  }
  const json& cpus = file.value("cpus", json());
  const json& memory_mb = file.value("memory_mb", json());
  if (!cpus.is_number_integer() || !memory_mb.is_number_integer()) {
    return std::nullopt;
  }
  paused.cpus = cpus.get<int>();
  paused.memory_mb = memory_mb.get<int>();
  const json& bytes = file.value("bytes", json());
  if (bytes.is_number_unsigned()) {
    paused.bytes = bytes.get<std::uint64_t>();
  }
  paused.forwards = forwards_of_info(file.value("ports", json::object()));
  for (const json& port : file.value("exposed", json::array())) {
    if (!port.is_object()) {
      continue;
    }
    auto host = port_in(port.value("host_port", json()));
    auto guest = port_in(port.value("guest_port", json()));
    const json& protocol = port.value("protocol", json());
    const json& bind = port.value("bind", json());
    if (host && guest && protocol.is_string() && bind.is_string()) {
      paused.exposed.push_back(
          {protocol.get<std::string>(), bind.get<std::string>(), *host, *guest});
    }
  }
  return paused;
}

std::string pause_tag(const std::string& pause_id) {
  return std::string(k_tag_prefix) + pause_id;
}

bool is_pause_tag(std::string_view tag) {
  return tag.size() > k_tag_prefix.size() && tag.starts_with(k_tag_prefix);
}

std::string paused_detail(const PausedVm& paused) {
  const char* accel = paused.kvm ? "KVM" : "TCG";
  if (!paused.memory) {
    return "stopped for a pause: its disk is kept, resume boots it again";
  }
  if (!paused.bytes) {
    return fmt::format("checkpoint {} on disk ({}): resume loads it", paused.tag, accel);
  }
  return fmt::format("checkpoint {} MiB on disk ({}): resume loads it",
                     (*paused.bytes + (1u << 19)) >> 20, accel);
}

QemuSeen qemu_seen_of(const std::string& qmp_status) {
  if (qmp_status == "running") {
    return QemuSeen::running;
  }
  if (qmp_status == "paused") {
    return QemuSeen::stopped;
  }
  return QemuSeen::other;
}

PauseStep pause_step(bool pause_file, QemuSeen qemu, bool tag_in_overlay) {
  if (qemu != QemuSeen::none) {
    return PauseStep::save;
  }
  if (pause_file) {
    return PauseStep::already_paused;
  }
  return tag_in_overlay ? PauseStep::record_checkpoint : PauseStep::record_stop;
}

ResumeStep resume_step(bool pause_file, QemuSeen qemu) {
  switch (qemu) {
  case QemuSeen::none:
    return ResumeStep::launch;
  case QemuSeen::running:
    return pause_file ? ResumeStep::finish : ResumeStep::running;
  case QemuSeen::stopped:
    // Stopped with pause.json: a launch with -loadvm stopped by someone else; carrying on is the
    // same as for a pause interrupted before its quit.
    return ResumeStep::cont;
  case QemuSeen::other:
    break;
  }
  return ResumeStep::refuse;
}

Launch launch_of(const PausedVm& paused, const std::string& name) {
  Launch launch;
  launch.name = name;
  launch.kvm = paused.kvm;
  launch.accel_reason =
      fmt::format("resuming under {}, the accelerator it was paused under (a checkpoint loads "
                  "only there)",
                  paused.kvm ? "KVM" : "TCG");
  launch.forwards = paused.forwards;
  launch.exposed = paused.exposed;
  if (paused.memory) {
    launch.loadvm = paused.tag;
  }
  return launch;
}

std::vector<Exposed> exposed_of_bindings(const std::vector<PortBinding>& bindings,
                                         const std::vector<int>& vm_ports) {
  std::vector<Exposed> exposed;
  for (const auto& binding : bindings) {
    if (!binding.host_port) {
      continue;
    }
    if (binding.protocol == "tcp" &&
        std::find(vm_ports.begin(), vm_ports.end(), binding.port) != vm_ports.end()) {
      continue; // a forward of vm.ports, kept in info.ports
    }
    exposed.push_back({binding.protocol, binding.host, *binding.host_port, binding.port});
  }
  return exposed;
}

std::map<int, int> forwards_of_info(const json& ports) {
  std::map<int, int> forwards;
  if (!ports.is_object()) {
    return forwards;
  }
  for (const auto& [guest, host] : ports.items()) {
    auto guest_port = port_number(guest);
    if (!guest_port || !host.is_string()) {
      continue;
    }
    const std::string text = host.get<std::string>();
    const auto colon = text.rfind(':');
    auto host_port = colon == std::string::npos
                         ? std::nullopt
                         : port_number(std::string_view(text).substr(colon + 1));
    if (host_port) {
      forwards[*guest_port] = *host_port;
    }
  }
  return forwards;
}

json forwards_info(const std::map<int, int>& forwards) {
  json ports = json::object();
  for (const auto& [guest, host] : forwards) {
    ports[std::to_string(guest)] = fmt::format("127.0.0.1:{}", host);
  }
  return ports;
}

bool repick_taken_ports(Launch& launch, const PortTaken& taken, const PortPicker& pick) {
  bool moved = false;
  for (auto& [guest, host] : launch.forwards) {
    if (taken("tcp", "127.0.0.1", host)) {
      host = pick("tcp", "127.0.0.1");
      moved = true;
    }
  }
  for (auto& exposed : launch.exposed) {
    if (taken(exposed.protocol, exposed.bind, exposed.host_port)) {
      exposed.host_port = pick(exposed.protocol, exposed.bind);
      moved = true;
    }
  }
  return moved;
}

} // namespace sandboxer::drivers::vm_packer
