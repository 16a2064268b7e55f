#include "drivers/docker/spec.hpp"

#include <charconv>
#include <fmt/format.h>
#include <regex>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/spec_fields.hpp>

namespace sandboxer::drivers::docker {
namespace {

using nlohmann::json;

const std::vector<std::string> k_keys = {
    "image",    "command",      "entrypoint", "env",       "workdir",      "user",      "cpus",
    "memory",   "pids_limit",   "network",    "ports",     "mounts",       "read_only", "cap_add",
    "cap_drop", "security_opt", "pull",       "readiness", "stop_timeout", "host",      "init"};

std::string string_at(const json& section, const std::string& key, const std::string& pointer) {
  const json& value = section.at(key);
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
    throw SpecError(pointer, "expected a non-empty string");
  }
  return value.get<std::string>();
}

// A command may be written as a list (argv, recommended) or as one string of words split on
// spaces; it is never handed to a shell.
std::vector<std::string> argv_at(const json& value, const std::string& pointer) {
  std::vector<std::string> argv;
  if (value.is_string()) {
    std::string text = value.get<std::string>();
    for (size_t start = 0; start < text.size();) {
      size_t end = text.find(' ', start);
      if (end != start) {
        argv.push_back(text.substr(start, end - start));
      }
      start = end == std::string::npos ? end : end + 1;
    }
  } else if (value.is_array()) {
    for (size_t i = 0; i < value.size(); ++i) {
      if (!value[i].is_string() && !value[i].is_number()) {
        throw SpecError(fmt::format("{}/{}", pointer, i), "expected a string");
      }
      argv.push_back(value[i].is_string() ? value[i].get<std::string>() : value[i].dump());
    }
  } else {
    throw SpecError(pointer, "expected a list of strings, e.g. [sleep, infinity]");
  }
  return argv;
}

using spec_fields::strings_at;

std::chrono::milliseconds millis_at(const json& value, const std::string& pointer) {
  std::optional<std::chrono::milliseconds> parsed;
  if (value.is_string()) {
    parsed = parse_duration_ms(value.get<std::string>());
  }
  if (!parsed) {
    throw SpecError(pointer, "invalid duration (use 500ms, 30s, 2m)");
  }
  return *parsed;
}

std::uint64_t size_at(const json& value, const std::string& pointer) {
  std::optional<std::uint64_t> parsed;
  if (value.is_string()) {
    parsed = parse_size(value.get<std::string>());
  } else if (value.is_number_unsigned()) {
    parsed = value.get<std::uint64_t>();
  }
  if (!parsed || *parsed == 0) {
    throw SpecError(pointer, "invalid size (use 512m, 2g)");
  }
  return *parsed;
}

Port port_at(const json& value, const std::string& pointer) {
  // "8080", "8080/udp", "127.0.0.1:9000:8080", "9000:8080/tcp"
  static const std::regex form(R"(^(?:(?:([0-9.]+):)?([0-9]+):)?([0-9]+)(?:/(tcp|udp))?$)");
  std::string text = value.is_number_unsigned() ? value.dump()
                     : value.is_string()        ? value.get<std::string>()
                                                : "";
  std::smatch m;
  if (!std::regex_match(text, m, form)) {
    throw SpecError(pointer, "expected a port: 8080, 9000:8080, 127.0.0.1:9000:8080 or 53/udp");
  }
  // The regex admits any digits: a number outside 1-65535 is the user's mistake, located, not
  // an overflow.
  auto number = [&](const std::ssub_match& digits, const char* which) {
    int parsed = 0;
    const std::string text_of_digits = digits.str();
    auto [end, ec] = std::from_chars(text_of_digits.data(),
                                     text_of_digits.data() + text_of_digits.size(), parsed);
    if (ec != std::errc() || parsed < 1 || parsed > 65535) {
      throw SpecError(pointer,
                      fmt::format("{} port {} is not between 1 and 65535", which, text_of_digits));
    }
    return parsed;
  };
  Port port;
  port.container_port = number(m[3], "container");
  if (m[2].matched) {
    port.host_port = number(m[2], "host");
  }
  if (m[1].matched) {
    port.host_ip = m[1];
  }
  if (m[4].matched) {
    port.protocol = m[4];
  }
  if (port.container_port < 1 || port.container_port > 65535 ||
      (port.host_port && (*port.host_port < 1 || *port.host_port > 65535))) {
    throw SpecError(pointer, "port numbers go from 1 to 65535");
  }
  return port;
}

Mount mount_at(const json& value, const std::string& pointer) {
  check_keys(value, {"type", "source", "target", "read_only", "size"}, pointer);
  Mount mount;
  std::string type = value.contains("type") ? string_at(value, "type", pointer + "/type") : "bind";
  if (type == "bind") {
    mount.type = Mount::Type::bind;
  } else if (type == "tmpfs") {
    mount.type = Mount::Type::tmpfs;
  } else if (type == "volume") {
    mount.type = Mount::Type::volume;
  } else {
    throw SpecError(pointer + "/type", "expected bind, tmpfs or volume");
  }
  if (!value.contains("target")) {
    throw SpecError(pointer, "a mount needs a target (an absolute path in the container)");
  }
  mount.target = string_at(value, "target", pointer + "/target");
  if (mount.target.front() != '/') {
    throw SpecError(pointer + "/target", "expected an absolute path");
  }
  if (mount.type == Mount::Type::tmpfs) {
    if (value.contains("source")) {
      throw SpecError(pointer + "/source", "a tmpfs mount has no source");
    }
  } else {
    if (!value.contains("source")) {
      throw SpecError(pointer, "a bind or volume mount needs a source");
    }
    mount.source = string_at(value, "source", pointer + "/source");
    if (mount.type == Mount::Type::bind && mount.source.front() != '/') {
      throw SpecError(pointer + "/source", "a bind source must be an absolute host path");
    }
  }
  if (value.contains("read_only")) {
    if (!value["read_only"].is_boolean()) {
      throw SpecError(pointer + "/read_only", "expected true or false");
    }
    mount.read_only = value["read_only"].get<bool>();
  }
  if (value.contains("size")) {
    if (mount.type != Mount::Type::tmpfs) {
      throw SpecError(pointer + "/size", "only a tmpfs mount has a size");
    }
    mount.size_bytes = size_at(value["size"], pointer + "/size");
  }
  return mount;
}

bool bool_at(const json& section, const std::string& key) {
  if (!section[key].is_boolean()) {
    throw SpecError("/" + key, "expected true or false");
  }
  return section[key].get<bool>();
}

} // namespace

Spec parse_spec(const json& section) {
  check_keys(section, k_keys);
  Spec spec;
  if (!section.contains("image")) {
    throw SpecError("", "the docker section needs an image (e.g. image: debian:12)");
  }
  spec.image = string_at(section, "image", "/image");
  if (section.contains("command")) {
    spec.command = argv_at(section["command"], "/command");
  }
  if (section.contains("entrypoint")) {
    spec.entrypoint = argv_at(section["entrypoint"], "/entrypoint");
  }
  if (section.contains("env")) {
    if (!section["env"].is_object()) {
      throw SpecError("/env", "expected a map of NAME: value");
    }
    for (const auto& [key, value] : section["env"].items()) {
      if (!value.is_string() && !value.is_number() && !value.is_boolean()) {
        throw SpecError("/env/" + key, "expected a string");
      }
      spec.env[key] = value.is_string() ? value.get<std::string>() : value.dump();
    }
  }
  if (section.contains("workdir")) {
    spec.workdir = string_at(section, "workdir", "/workdir");
  }
  if (section.contains("user")) {
    spec.user = section["user"].is_number_unsigned() ? section["user"].dump()
                                                     : string_at(section, "user", "/user");
  }
  if (section.contains("cpus")) {
    if (!section["cpus"].is_number() || section["cpus"].get<double>() <= 0) {
      throw SpecError("/cpus", "expected a positive number of CPUs, e.g. 1 or 0.5");
    }
    spec.cpus = section["cpus"].get<double>();
  }
  if (section.contains("memory")) {
    spec.memory_bytes = size_at(section["memory"], "/memory");
    if (*spec.memory_bytes < 6 * 1024 * 1024) {
      throw SpecError("/memory", "the Docker Engine needs at least 6m of memory");
    }
  }
  if (section.contains("pids_limit")) {
    if (!section["pids_limit"].is_number_integer() || section["pids_limit"].get<long>() < 1) {
      throw SpecError("/pids_limit", "expected a positive integer");
    }
    spec.pids_limit = section["pids_limit"].get<long>();
  }
  if (section.contains("network")) {
    spec.network = string_at(section, "network", "/network");
  }
  if (section.contains("ports")) {
    if (!section["ports"].is_array()) {
      throw SpecError("/ports", "expected a list of ports");
    }
    for (size_t i = 0; i < section["ports"].size(); ++i) {
      spec.ports.push_back(port_at(section["ports"][i], fmt::format("/ports/{}", i)));
    }
    if (spec.network == "none" && !spec.ports.empty()) {
      throw SpecError("/ports", "ports cannot be published with network: none");
    }
  }
  if (section.contains("mounts")) {
    if (!section["mounts"].is_array()) {
      throw SpecError("/mounts", "expected a list of mounts");
    }
    for (size_t i = 0; i < section["mounts"].size(); ++i) {
      spec.mounts.push_back(mount_at(section["mounts"][i], fmt::format("/mounts/{}", i)));
    }
  }
  if (section.contains("read_only")) {
    spec.read_only = bool_at(section, "read_only");
  }
  for (const auto& [key, target] :
       {std::pair{"cap_add", &spec.cap_add}, std::pair{"cap_drop", &spec.cap_drop},
        std::pair{"security_opt", &spec.security_opt}}) {
    if (section.contains(key)) {
      *target = strings_at(section[key], std::string("/") + key);
    }
  }
  if (section.contains("pull")) {
    std::string pull = string_at(section, "pull", "/pull");
    if (pull == "never") {
      spec.pull = Spec::Pull::never;
    } else if (pull == "if-missing") {
      spec.pull = Spec::Pull::if_missing;
    } else if (pull == "always") {
      spec.pull = Spec::Pull::always;
    } else {
      throw SpecError("/pull", "expected never, if-missing or always");
    }
  }
  if (section.contains("readiness")) {
    const json& r = section["readiness"];
    check_keys(r, {"command", "timeout", "interval"}, "/readiness");
    if (!r.contains("command")) {
      throw SpecError("/readiness", "readiness needs a command, e.g. [test, -e, /tmp/ready]");
    }
    Readiness readiness;
    readiness.command = argv_at(r["command"], "/readiness/command");
    if (r.contains("timeout")) {
      readiness.timeout = millis_at(r["timeout"], "/readiness/timeout");
    }
    if (r.contains("interval")) {
      readiness.interval = millis_at(r["interval"], "/readiness/interval");
    }
    spec.readiness = readiness;
  }
  if (section.contains("stop_timeout")) {
    spec.stop_timeout = std::chrono::duration_cast<std::chrono::seconds>(
        millis_at(section["stop_timeout"], "/stop_timeout"));
  }
  if (section.contains("init")) {
    if (!section["init"].is_boolean()) {
      throw SpecError("/init", "expected true or false");
    }
    spec.init = section["init"].get<bool>();
  }
  if (section.contains("host")) {
    spec.host = string_at(section, "host", "/host");
    if (!spec.host->starts_with("unix://") && !spec.host->starts_with("tcp://")) {
      throw SpecError("/host", "expected unix:///path/to/docker.sock or tcp://host:port");
    }
  }
  return spec;
}

json to_json(const Spec& spec) {
  json j = {{"image", spec.image}, {"network", spec.network}, {"read_only", spec.read_only}};
  if (!spec.command.empty()) {
    j["command"] = spec.command;
  }
  if (spec.entrypoint) {
    j["entrypoint"] = *spec.entrypoint;
  }
  if (!spec.env.empty()) {
    j["env"] = spec.env;
  }
  if (spec.workdir) {
    j["workdir"] = *spec.workdir;
  }
  if (spec.user) {
    j["user"] = *spec.user;
  }
  if (spec.cpus) {
    j["cpus"] = *spec.cpus;
  }
  if (spec.memory_bytes) {
    j["memory"] = *spec.memory_bytes;
  }
  if (spec.pids_limit) {
    j["pids_limit"] = *spec.pids_limit;
  }
  for (const auto& port : spec.ports) {
    std::string text = port.host_port ? fmt::format("{}:{}:{}/{}", port.host_ip, *port.host_port,
                                                    port.container_port, port.protocol)
                                      : fmt::format("{}/{}", port.container_port, port.protocol);
    j["ports"].push_back(text);
  }
  for (const auto& mount : spec.mounts) {
    static const char* k_types[] = {"bind", "tmpfs", "volume"};
    json m = {{"type", k_types[static_cast<int>(mount.type)]},
              {"target", mount.target},
              {"read_only", mount.read_only}};
    if (!mount.source.empty()) {
      m["source"] = mount.source;
    }
    if (mount.size_bytes) {
      m["size"] = *mount.size_bytes;
    }
    j["mounts"].push_back(m);
  }
  for (const auto& [key, list] :
       {std::pair{"cap_add", &spec.cap_add}, std::pair{"cap_drop", &spec.cap_drop},
        std::pair{"security_opt", &spec.security_opt}}) {
    if (!list->empty()) {
      j[key] = *list;
    }
  }
  static const char* k_pulls[] = {"never", "if-missing", "always"};
  j["pull"] = k_pulls[static_cast<int>(spec.pull)];
  if (spec.readiness) {
    j["readiness"] = {{"command", spec.readiness->command},
                      {"timeout", fmt::format("{}ms", spec.readiness->timeout.count())},
                      {"interval", fmt::format("{}ms", spec.readiness->interval.count())}};
  }
  j["stop_timeout"] = fmt::format("{}s", spec.stop_timeout.count());
  j["init"] = spec.init;
  if (spec.host) {
    j["host"] = *spec.host;
  }
  return j;
}

} // namespace sandboxer::drivers::docker
