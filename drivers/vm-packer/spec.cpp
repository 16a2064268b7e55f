#include "drivers/vm-packer/spec.hpp"

#include <fmt/format.h>

#include <sandboxer/duration.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/spec_fields.hpp>

#include "drivers/vm-packer/image_digest.hpp"
#include "drivers/vm-packer/manifest.hpp"

namespace sandboxer::drivers::vm_packer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using spec::ReadContext;

const char* const k_one_image_source =
    "give either manifest (a Packer manifest) or image (a qcow2 file)";

// integer_at reads a number or its digits, and the schema says so (without the bounds, which
// each field's description gives).
spec::Codec<int> whole_number(int low, int high) {
  spec::Codec<int> codec = spec::integer(low, high);
  codec.schema = {{"type", {"integer", "string"}}};
  return codec;
}

// spec::one_of, with the "expected one of a, b, not c" this driver has always said.
template <class T> spec::Codec<T> choice_of(const std::vector<std::pair<std::string, T>>& names) {
  spec::Codec<T> codec = spec::one_of(names);
  codec.read = [names](const json& value, const ReadContext& at) {
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    std::string listed;
    for (const auto& [name, item] : names) {
      if (text == name) {
        return item;
      }
      listed += (listed.empty() ? "" : ", ") + name;
    }
    throw SpecError(at.pointer, fmt::format("expected one of {}, not {}", listed, text));
  };
  return codec;
}

// A size ("512m", "2g") or a number of MiB.
spec::Codec<int> memory_size() {
  return {[](const json& value, const ReadContext& at) {
            if (value.is_number_integer()) {
              return static_cast<int>(spec_fields::integer_at(value, at.pointer, 64, 1 << 20));
            }
            auto bytes = value.is_string() ? parse_size(value.get<std::string>()) : std::nullopt;
            if (!bytes || *bytes < (64u << 20) || *bytes > (1ull << 40)) {
              throw SpecError(at.pointer,
                              "expected a size from 64m to 1t, such as 512m or 2g (or MiB)");
            }
            return static_cast<int>(*bytes >> 20);
          },
          [](const int& value) { return json(value); },
          {{"type", {"integer", "string"}}}};
}

spec::Codec<std::vector<int>> guest_ports() {
  return spec::list_of(whole_number(1, 65535), "expected a list of guest TCP ports to forward");
}

// A stored spec carries the image's hash; a profile cannot, the hash is taken from the image.
spec::Codec<std::string> image_hash() {
  spec::Codec<std::string> codec = spec::text();
  codec.read = [read = codec.read](const json& value, const ReadContext& at) {
    if (at.from_profile) {
      throw SpecError(at.pointer, "sandboxer computes the image's hash itself");
    }
    return read(value, at);
  };
  return codec;
}

const spec::Table<Spec::Exec>& exec_table() {
  static const spec::Table<Spec::Exec> table = [] {
    using Exec = Spec::Exec;
    using spec::field;
    spec::Table<Exec> t;
    t.not_a_mapping = "expected a mapping (via, agent_ports, user, identity_file, port)";
    t.fields = {
        field("via", &Exec::via,
              choice_of<Spec::ExecVia>(
                  {{"agent", Spec::ExecVia::agent}, {"ssh", Spec::ExecVia::ssh}}),
              "default agent (the guest agent on virtio-serial)"),
        field("agent_ports", &Exec::agent_ports, whole_number(1, 16),
              "1-16, default 4: execs at once"),
        field("user", &Exec::user,
              spec::text_matching(R"(^[A-Za-z0-9_][A-Za-z0-9_.-]*$)", "expected a user name")
                  .described({{"minLength", 1}}),
              "ssh: default root"),
        field("identity_file", &Exec::identity_file, spec::local_path(true),
              "ssh: the private key"),
        field("port", &Exec::port, whole_number(1, 65535), "ssh: the guest's port, default 22"),
    };
    return t;
  }();
  return table;
}

} // namespace

const spec::Table<Spec>& spec_table() {
  static const spec::Table<Spec> table = [] {
    using spec::field;
    spec::Table<Spec> t;
    t.driver = "vm-packer";
    t.not_a_mapping = "expected a mapping with manifest (or image), cpus, memory, ...";
    t.fields = {
        field("manifest", &Spec::manifest, spec::local_path(true),
              "a Packer manifest; the last qemu build's .qcow2 is the image"),
        field("image", &Spec::image, spec::local_path(true), "a qcow2 image (instead of manifest)"),
        field("image_sha256", &Spec::image_sha256, image_hash(),
              "set by sandboxer in the stored spec; not written in profiles"),
        field("cpus", &Spec::cpus, whole_number(1, 64), "1-64, default 1"),
        field("memory", &Spec::memory_mb, memory_size(), "a size (512m, 2g) or MiB; default 512m"),
        field("accel", &Spec::accel,
              choice_of<Spec::Accel>({{"auto", Spec::Accel::automatic},
                                      {"kvm", Spec::Accel::kvm},
                                      {"tcg", Spec::Accel::tcg}}),
              "default auto: kvm when /dev/kvm is usable, else tcg"),
        field("kernel", &Spec::kernel, spec::local_path(true), "direct kernel boot"),
        field("initrd", &Spec::initrd, spec::local_path(true), "with kernel"),
        field("append", &Spec::append, spec::text(), "the kernel command line, with kernel"),
        field("exec", &Spec::exec, spec::object(exec_table())),
        field("network", &Spec::restricted_network,
              choice_of<bool>({{"none", false}, {"restricted", true}}),
              "default none; restricted: QEMU user networking with restrict=on"),
        field("ports", &Spec::ports, guest_ports(),
              "guest TCP ports forwarded to 127.0.0.1 (restricted only)"),
        field("qemu", &Spec::qemu, spec::text().described({{"minLength", 1}}),
              "default qemu-system-x86_64"),
        field("ready_timeout", &Spec::ready_timeout, spec::duration_ms(),
              "boot until exec works; default 3m"),
        field("stop_timeout", &Spec::stop_timeout, spec::duration_ms(),
              "QMP quit until SIGKILL; default 10s"),
        field("snapshot_timeout", &Spec::snapshot_timeout, spec::duration_ms(), "default 5m"),
    };
    t.schema_extra = {{"anyOf", json::array({json{{"required", json::array({"manifest"})}},
                                             json{{"required", json::array({"image"})}}})}};
    t.after = [](Spec& spec) {
      // Both is a stored spec's way (the manifest and the image it named); parse_profile_section
      // refuses both in a profile.
      if (!spec.manifest && spec.image.empty()) {
        throw SpecError("", k_one_image_source);
      }
      if (!spec.kernel && (spec.initrd || spec.append)) {
        throw SpecError(spec.initrd ? "/initrd" : "/append",
                        "initrd and append need kernel (direct kernel boot)");
      }
      if ((!spec.ports.empty() || spec.exec.via == Spec::ExecVia::ssh) &&
          !spec.restricted_network) {
        throw SpecError(spec.ports.empty() ? "/exec/via" : "/ports",
                        "forwarded ports need network: restricted (the VM has no network "
                        "otherwise)");
      }
    };
    return t;
  }();
  return table;
}

Spec parse_spec(const json& section) {
  return spec::read(spec_table(), section);
}

Spec parse_profile_section(const json& section, const SpecOrigin& origin) {
  // Told before the paths are checked: one of them is the mistake.
  if (section.is_object() && section.contains("manifest") && section.contains("image")) {
    throw SpecError("", k_one_image_source);
  }
  Spec spec = spec::read(spec_table(), section, origin);
  if (spec.manifest) {
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
  try {
    spec.image_sha256 = image_digest(spec.image);
  } catch (const Error& e) {
    throw SpecError(spec.manifest ? "/manifest" : "/image", e.what());
  }
  return spec;
}

json to_json(const Spec& spec) {
  return spec::write(spec_table(), spec);
}

} // namespace sandboxer::drivers::vm_packer
