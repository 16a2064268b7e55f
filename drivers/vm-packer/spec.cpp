#include "drivers/vm-packer/spec.hpp"

#include <fmt/format.h>
#include <regex>

#include <sandboxer/duration.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/spec_fields.hpp>

#include "drivers/vm-packer/image_digest.hpp"
#include "drivers/vm-packer/manifest.hpp"

namespace sandboxer::drivers::vm_packer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace spec_fields;

const std::vector<std::string> k_keys = {
    "manifest", "image",         "image_sha256", "cpus",
    "memory",   "accel",         "kernel",       "initrd",
    "append",   "exec",          "network",      "ports",
    "qemu",     "ready_timeout", "stop_timeout", "snapshot_timeout"};
const std::vector<std::string> k_exec_keys = {"via", "agent_ports", "user", "identity_file",
                                              "port"};

using Resolve = std::function<fs::path(const std::string& pointer)>;

// One of `choices`, by name.
template <class T>
T choice_at(const json& value, const std::string& pointer,
            const std::vector<std::pair<std::string, T>>& choices) {
  std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  std::string names;
  for (const auto& [name, result] : choices) {
    if (text == name) {
      return result;
    }
    names += (names.empty() ? "" : ", ") + name;
  }
  throw SpecError(pointer, fmt::format("expected one of {}, not {}", names, text));
}

int memory_mb_at(const json& value) {
  if (value.is_number_integer()) {
    return static_cast<int>(integer_at(value, "/memory", 64, 1 << 20));
  }
  auto bytes = value.is_string() ? parse_size(value.get<std::string>()) : std::nullopt;
  if (!bytes || *bytes < (64u << 20) || *bytes > (1ull << 40)) {
    throw SpecError("/memory", "expected a size from 64m to 1t, such as 512m or 2g (or MiB)");
  }
  return static_cast<int>(*bytes >> 20);
}

void read_exec(const json& exec, const Resolve& directory_of, bool files_must_exist, Spec& spec) {
  if (!exec.is_object()) {
    throw SpecError("/exec", "expected a mapping (via, agent_ports, user, identity_file, port)");
  }
  check_keys(exec, k_exec_keys, "/exec");
  if (exec.contains("via")) {
    spec.exec_via = choice_at<Spec::ExecVia>(
        exec["via"], "/exec/via", {{"agent", Spec::ExecVia::agent}, {"ssh", Spec::ExecVia::ssh}});
  }
  if (exec.contains("agent_ports")) {
    spec.agent_ports =
        static_cast<int>(integer_at(exec["agent_ports"], "/exec/agent_ports", 1, 16));
  }
  if (exec.contains("user")) {
    static const std::regex user_form(R"(^[A-Za-z0-9_][A-Za-z0-9_.-]*$)");
    spec.ssh_user = text_at(exec["user"], "/exec/user");
    if (!std::regex_match(spec.ssh_user, user_form)) {
      throw SpecError("/exec/user", "expected a user name");
    }
  }
  if (exec.contains("identity_file")) {
    spec.ssh_identity_file = local_path_at(exec["identity_file"], "/exec/identity_file",
                                           directory_of("/exec/identity_file"), files_must_exist);
  }
  if (exec.contains("port")) {
    spec.ssh_port = static_cast<int>(integer_at(exec["port"], "/exec/port", 1, 65535));
  }
}

Spec bind_section(const json& section, const Resolve& directory_of, bool from_profile) {
  if (!section.is_object()) {
    throw SpecError("", "expected a mapping with manifest (or image), cpus, memory, ...");
  }
  check_keys(section, k_keys);
  if (section.contains("manifest") == section.contains("image") &&
      !(section.contains("manifest") && !from_profile)) {
    throw SpecError("", "give either manifest (a Packer manifest) or image (a qcow2 file)");
  }
  Spec spec;
  auto path = [&](const char* key) {
    const std::string pointer = std::string("/") + key;
    return local_path_at(section[key], pointer, directory_of(pointer), from_profile);
  };
  if (section.contains("manifest")) {
    spec.manifest = path("manifest");
  }
  if (section.contains("image")) {
    spec.image = path("image");
  } else if (from_profile) {
    try {
      spec.image = packer_image_file(*spec.manifest);
    } catch (const ManifestError& e) {
      throw SpecError("/manifest", fmt::format("{}: {}", spec.manifest->string(), e.what()));
    }
    std::error_code ec;
    if (!fs::is_regular_file(spec.image, ec)) {
      throw SpecError("/manifest", fmt::format("{} names the image {}, which does not exist",
                                               spec.manifest->string(), spec.image.string()));
    }
  }
  if (from_profile) {
    if (section.contains("image_sha256")) {
      throw SpecError("/image_sha256", "sandboxer computes the image's hash itself");
    }
    try {
      spec.image_sha256 = image_digest(spec.image);
    } catch (const Error& e) {
      throw SpecError(section.contains("image") ? "/image" : "/manifest", e.what());
    }
  } else if (section.contains("image_sha256")) {
    spec.image_sha256 = text_at(section["image_sha256"], "/image_sha256");
  }
  if (section.contains("cpus")) {
    spec.cpus = static_cast<int>(integer_at(section["cpus"], "/cpus", 1, 64));
  }
  if (section.contains("memory")) {
    spec.memory_mb = memory_mb_at(section["memory"]);
  }
  if (section.contains("accel")) {
    spec.accel = choice_at<Spec::Accel>(
        section["accel"], "/accel",
        {{"auto", Spec::Accel::automatic}, {"kvm", Spec::Accel::kvm}, {"tcg", Spec::Accel::tcg}});
  }
  if (section.contains("kernel")) {
    spec.kernel = path("kernel");
  }
  if (section.contains("initrd")) {
    spec.initrd = path("initrd");
  }
  if (section.contains("append")) {
    spec.append = text_at(section["append"], "/append");
  }
  if (!spec.kernel && (spec.initrd || spec.append)) {
    throw SpecError(spec.initrd ? "/initrd" : "/append",
                    "initrd and append need kernel (direct kernel boot)");
  }
  if (section.contains("exec")) {
    read_exec(section["exec"], directory_of, from_profile, spec);
  }
  if (section.contains("network")) {
    spec.restricted_network =
        choice_at<bool>(section["network"], "/network", {{"none", false}, {"restricted", true}});
  }
  if (section.contains("ports")) {
    const json& ports = section["ports"];
    if (!ports.is_array()) {
      throw SpecError("/ports", "expected a list of guest TCP ports to forward");
    }
    for (std::size_t i = 0; i < ports.size(); ++i) {
      spec.ports.push_back(
          static_cast<int>(integer_at(ports[i], fmt::format("/ports/{}", i), 1, 65535)));
    }
  }
  if ((!spec.ports.empty() || spec.exec_via == Spec::ExecVia::ssh) && !spec.restricted_network) {
    throw SpecError(spec.ports.empty() ? "/exec/via" : "/ports",
                    "forwarded ports need network: restricted (the VM has no network otherwise)");
  }
  if (section.contains("qemu")) {
    spec.qemu = text_at(section["qemu"], "/qemu");
  }
  auto timeout = [&](const char* key, std::chrono::milliseconds& into) {
    if (section.contains(key)) {
      into = duration_at(section[key], std::string("/") + key);
    }
  };
  timeout("ready_timeout", spec.ready_timeout);
  timeout("stop_timeout", spec.stop_timeout);
  timeout("snapshot_timeout", spec.snapshot_timeout);
  return spec;
}

} // namespace

const char* to_string(Spec::Accel accel) {
  switch (accel) {
  case Spec::Accel::kvm:
    return "kvm";
  case Spec::Accel::tcg:
    return "tcg";
  case Spec::Accel::automatic:
    break;
  }
  return "auto";
}

Spec parse_spec(const json& section) {
  return bind_section(
      section, [](const std::string&) { return fs::current_path(); }, false);
}

Spec parse_profile_section(const json& section, const SpecOrigin& origin) {
  return bind_section(section, origin.directory_of, true);
}

json to_json(const Spec& spec) {
  json exec = {{"via", spec.exec_via == Spec::ExecVia::ssh ? "ssh" : "agent"},
               {"agent_ports", spec.agent_ports},
               {"user", spec.ssh_user},
               {"port", spec.ssh_port}};
  if (spec.ssh_identity_file) {
    exec["identity_file"] = spec.ssh_identity_file->string();
  }
  json out = {{"image", spec.image.string()},
              {"image_sha256", spec.image_sha256},
              {"cpus", spec.cpus},
              {"memory", spec.memory_mb},
              {"accel", to_string(spec.accel)},
              {"exec", exec},
              {"network", spec.restricted_network ? "restricted" : "none"},
              {"ports", spec.ports},
              {"qemu", spec.qemu},
              {"ready_timeout", duration_text(spec.ready_timeout)},
              {"stop_timeout", duration_text(spec.stop_timeout)},
              {"snapshot_timeout", duration_text(spec.snapshot_timeout)}};
  if (spec.manifest) {
    out["manifest"] = spec.manifest->string();
  }
  for (auto [key, value] : {std::pair{"kernel", &spec.kernel}, std::pair{"initrd", &spec.initrd}}) {
    if (*value) {
      out[key] = (*value)->string();
    }
  }
  if (spec.append) {
    out["append"] = *spec.append;
  }
  return out;
}

} // namespace sandboxer::drivers::vm_packer
