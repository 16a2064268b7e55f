#include "drivers/compose-ssh/spec.hpp"

#include <fmt/format.h>
#include <regex>

#include <sandboxer/spec_fields.hpp>

namespace sandboxer::drivers::compose_ssh {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace spec_fields;

const std::vector<std::string> k_keys = {"host",
                                         "port",
                                         "user",
                                         "identity_file",
                                         "known_hosts",
                                         "compose_file",
                                         "service",
                                         "env_file",
                                         "project_dir",
                                         "connect_timeout",
                                         "command_timeout",
                                         "up_timeout",
                                         "ready_timeout",
                                         "settle",
                                         "stop_timeout"};

// Where a relative path of the section resolves: the profile's directory, or the working
// directory for a section that did not come from a file.
using Resolve = std::function<fs::path(const std::string& pointer)>;

std::string matching(const json& section, const std::string& key, const std::regex& form,
                     const char* expected) {
  std::string text = text_at(section.at(key), "/" + key);
  if (!std::regex_match(text, form)) {
    throw SpecError("/" + key, expected);
  }
  return text;
}

fs::path local_path(const json& section, const std::string& key, const Resolve& directory_of,
                    bool must_exist) {
  const std::string pointer = "/" + key;
  return local_path_at(section.at(key), pointer, directory_of(pointer), must_exist);
}

std::chrono::seconds seconds_at(const json& value, const std::string& pointer) {
  auto parsed = duration_at(value, pointer);
  if (parsed.count() % 1000 != 0) {
    throw SpecError(pointer, "expected whole seconds (10s, 1m)");
  }
  return std::chrono::duration_cast<std::chrono::seconds>(parsed);
}

Spec bind_section(const json& section, const Resolve& directory_of, bool files_must_exist) {
  if (!section.is_object()) {
    throw SpecError("", "expected a mapping with at least host and compose_file");
  }
  check_keys(section, k_keys);
  for (const char* required : {"host", "compose_file"}) {
    if (!section.contains(required)) {
      throw SpecError("", fmt::format("missing required key \"{}\"", required));
    }
  }
  Spec spec;
  // Whatever reaches ssh's argv as the destination must not read as an option.
  static const std::regex host_form(R"(^[A-Za-z0-9_.:%][A-Za-z0-9_.:%-]*$)");
  spec.host = matching(section, "host", host_form, "expected a host name or address");
  if (section.contains("port")) {
    spec.port = static_cast<int>(integer_at(section["port"], "/port", 1, 65535));
  }
  if (section.contains("user")) {
    static const std::regex user_form(R"(^[A-Za-z0-9_][A-Za-z0-9_.-]*$)");
    spec.user = matching(section, "user", user_form, "expected a user name");
  }
  auto optional_path = [&](const char* key, std::optional<fs::path>& into) {
    if (section.contains(key)) {
      into = local_path(section, key, directory_of, files_must_exist);
    }
  };
  spec.compose_file = local_path(section, "compose_file", directory_of, files_must_exist);
  optional_path("identity_file", spec.identity_file);
  optional_path("known_hosts", spec.known_hosts);
  optional_path("env_file", spec.env_file);
  if (section.contains("service")) {
    static const std::regex service_form(R"(^[A-Za-z0-9][A-Za-z0-9._-]*$)");
    spec.service = matching(section, "service", service_form, "expected a compose service name");
  }
  if (section.contains("project_dir")) {
    spec.project_dir = text_at(section["project_dir"], "/project_dir");
    if (spec.project_dir->find('\0') != std::string::npos) {
      throw SpecError("/project_dir", "expected a path");
    }
  }
  auto timeout = [&](const char* key, std::chrono::milliseconds& into) {
    if (section.contains(key)) {
      into = duration_at(section[key], std::string("/") + key);
    }
  };
  timeout("connect_timeout", spec.connect_timeout);
  timeout("command_timeout", spec.command_timeout);
  timeout("up_timeout", spec.up_timeout);
  timeout("ready_timeout", spec.ready_timeout);
  if (section.contains("settle")) {
    // Unlike a timeout, none at all is a setting (the default).
    spec.settle = duration_at(section["settle"], "/settle", true);
  }
  if (spec.connect_timeout < std::chrono::seconds(1)) {
    throw SpecError("/connect_timeout",
                    "ssh counts its connect timeout in whole seconds: use 1s or more");
  }
  if (section.contains("stop_timeout")) {
    spec.stop_timeout = seconds_at(section["stop_timeout"], "/stop_timeout");
  }
  return spec;
}

} // namespace

Spec parse_spec(const json& section) {
  return bind_section(
      section, [](const std::string&) { return fs::current_path(); }, false);
}

Spec parse_profile_section(const json& section, const SpecOrigin& origin) {
  return bind_section(section, origin.directory_of, true);
}

json to_json(const Spec& spec) {
  json out = {{"host", spec.host},
              {"port", spec.port},
              {"compose_file", spec.compose_file.string()},
              {"connect_timeout", duration_text(spec.connect_timeout)},
              {"command_timeout", duration_text(spec.command_timeout)},
              {"up_timeout", duration_text(spec.up_timeout)},
              {"ready_timeout", duration_text(spec.ready_timeout)},
              {"settle", duration_text(spec.settle)},
              {"stop_timeout", duration_text(spec.stop_timeout)}};
  auto put = [&](const char* key, const auto& value) {
    if (value) {
      out[key] = fs::path(*value).string();
    }
  };
  put("user", spec.user);
  put("identity_file", spec.identity_file);
  put("known_hosts", spec.known_hosts);
  put("env_file", spec.env_file);
  put("service", spec.service);
  put("project_dir", spec.project_dir);
  return out;
}

} // namespace sandboxer::drivers::compose_ssh
