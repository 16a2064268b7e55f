#include "drivers/compose-ssh/spec.hpp"

#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::compose_ssh {

using nlohmann::json;

const spec::Table<Spec>& spec_table() {
  static const spec::Table<Spec> table = [] {
    using spec::field;
    using spec::required;
    using spec::with_schema;
    const json name = {{"type", "string"}, {"minLength", 1}};
    // Whatever reaches ssh's argv as the destination must not read as an option.
    auto host = spec::text_matching(R"(^[A-Za-z0-9_.:%][A-Za-z0-9_.:%-]*$)",
                                    "expected a host name or address")
                    .described(name);
    auto user = spec::text_matching(R"(^[A-Za-z0-9_][A-Za-z0-9_.-]*$)", "expected a user name")
                    .described(name);
    auto service =
        spec::text_matching(R"(^[A-Za-z0-9][A-Za-z0-9._-]*$)", "expected a compose service name")
            .described(name);
    auto remote_path = spec::text().described(name).checked([](const auto& path, const auto& at) {
      if (path.find('\0') != std::string::npos) {
        throw SpecError(at.pointer, "expected a path");
      }
    });
    spec::Table<Spec> t;
    t.driver = "compose-ssh";
    t.not_a_mapping = "expected a mapping with at least host and compose_file";
    t.fields = {
        required(field("host", &Spec::host, host, "host name, address or ssh config alias")),
        with_schema(field("port", &Spec::port, spec::integer(1, 65535)),
                    {{"type", {"integer", "string"}}, {"description", "default 22; 1-65535"}}),
        field("user", &Spec::user, user),
        field("identity_file", &Spec::identity_file, spec::local_path(true),
              "a private key on this machine; relative to the profile's directory"),
        field("known_hosts", &Spec::known_hosts, spec::local_path(true),
              "default: the user's known_hosts; host keys are always checked"),
        required(field("compose_file", &Spec::compose_file, spec::local_path(true),
                       "on this machine, sent to the host on create; relative to the profile's "
                       "directory")),
        field("service", &Spec::service, service,
              "where exec runs; default the file's first service"),
        field("env_file", &Spec::env_file, spec::local_path(true),
              "on this machine: compose's --env-file on the host"),
        field("project_dir", &Spec::project_dir, remote_path,
              "compose's --project-directory on the host"),
        field("connect_timeout", &Spec::connect_timeout, spec::duration_ms()),
        field("command_timeout", &Spec::command_timeout, spec::duration_ms()),
        field("up_timeout", &Spec::up_timeout, spec::duration_ms()),
        field("ready_timeout", &Spec::ready_timeout, spec::duration_ms()),
        // Unlike a timeout, none at all is a setting (the default).
        with_schema(field("settle", &Spec::settle, spec::duration_ms_or_zero()),
                    {{"description", "none at all (0, the default) is a setting"},
                     {"anyOf", {{{"const", "0"}}, {{"$ref", "#/$defs/duration_ms"}}}}}),
        field("stop_timeout", &Spec::stop_timeout, spec::whole_seconds()),
    };
    t.after = [](const Spec& spec) {
      if (spec.connect_timeout < std::chrono::seconds(1)) {
        throw SpecError("/connect_timeout",
                        "ssh counts its connect timeout in whole seconds: use 1s or more");
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
  return spec::read(spec_table(), section, origin);
}

json to_json(const Spec& spec) {
  return spec::write(spec_table(), spec);
}

} // namespace sandboxer::drivers::compose_ssh
