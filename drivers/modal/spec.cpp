#include "drivers/modal/spec.hpp"

#include <cmath>
#include <cstdlib>
#include <fmt/format.h>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/endpoint.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/spec_fields.hpp>

namespace sandboxer::drivers::modal {
namespace {

using nlohmann::json;
using spec_fields::duration_at;
using spec_fields::duration_text;
using spec_fields::integer_at;
using spec_fields::map_at;
using spec_fields::strings_at;
using spec_fields::text_at;

const std::vector<std::string> k_keys = {"app",
                                         "environment",
                                         "image",
                                         "cpu",
                                         "memory",
                                         "timeout",
                                         "idle_timeout",
                                         "workdir",
                                         "command",
                                         "network",
                                         "tags",
                                         "server_url",
                                         "image_builder_version",
                                         "client_type",
                                         "client_version",
                                         "call_timeout",
                                         "start_timeout",
                                         "snapshot_timeout",
                                         "snapshot_ttl",
                                         "legacy_exec",
                                         "attempts"};

const char* const k_default_server = "https://api.modal.com:443";

// Whole seconds within [1s, 24h]: Modal takes uint32 seconds and refuses more than a day.
std::chrono::seconds lifetime_at(const json& value, const std::string& pointer) {
  auto ms = duration_at(value, pointer);
  if (ms.count() % 1000 != 0) {
    throw SpecError(pointer, "Modal counts this in whole seconds (write 90s, 15m, 2h)");
  }
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(ms);
  if (seconds > k_max_timeout) {
    throw SpecError(pointer,
                    fmt::format("Modal allows at most 24h, not {}", format_duration(seconds)));
  }
  return seconds;
}

int memory_mb_at(const json& value) {
  if (value.is_number_integer()) {
    return static_cast<int>(integer_at(value, "/memory", 1, 1 << 22));
  }
  auto bytes = value.is_string() ? parse_size(value.get<std::string>()) : std::nullopt;
  if (!bytes || *bytes < (1u << 20)) {
    throw SpecError("/memory", "expected a size such as 512m or 4g (or a number of MiB)");
  }
  return static_cast<int>(*bytes >> 20);
}

int milli_cpu_at(const json& value) {
  double cores = 0;
  if (value.is_number()) {
    cores = value.get<double>();
  } else if (value.is_string()) {
    char* end = nullptr;
    const std::string text = value.get<std::string>();
    cores = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0') {
      cores = 0;
    }
  }
  if (!(cores >= 0.125 && cores <= 64)) {
    throw SpecError("/cpu", "expected a number of cores from 0.125 to 64 (0.5, 2)");
  }
  return static_cast<int>(std::lround(cores * 1000));
}

} // namespace

bool is_image_id(const std::string& reference) {
  return reference.starts_with("im-") && reference.find_first_of(":/") == std::string::npos;
}

Spec parse_spec(const json& section) {
  if (!section.is_object()) {
    throw SpecError("", "expected a map of settings (image, cpu, memory, timeout, ...)");
  }
  check_keys(section, k_keys);
  Spec spec;
  if (!section.contains("image")) {
    throw SpecError("/image", "missing: name a registry image (debian:12) or an image id (im-...)");
  }
  spec.image = text_at(section["image"], "/image");
  if (section.contains("app")) {
    spec.app = text_at(section["app"], "/app");
  }
  if (section.contains("environment")) {
    spec.environment = text_at(section["environment"], "/environment");
  }
  if (section.contains("cpu")) {
    spec.milli_cpu = milli_cpu_at(section["cpu"]);
  }
  if (section.contains("memory")) {
    spec.memory_mb = memory_mb_at(section["memory"]);
  }
  if (section.contains("timeout")) {
    spec.timeout = lifetime_at(section["timeout"], "/timeout");
  }
  if (section.contains("idle_timeout")) {
    spec.idle_timeout = lifetime_at(section["idle_timeout"], "/idle_timeout");
  }
  if (section.contains("workdir")) {
    spec.workdir = text_at(section["workdir"], "/workdir");
    if (!spec.workdir->starts_with("/")) {
      throw SpecError("/workdir", "expected an absolute path inside the sandbox (/app)");
    }
  }
  if (section.contains("command")) {
    spec.command = strings_at(section["command"], "/command");
    if (spec.command.empty()) {
      throw SpecError("/command", "expected at least the program to run");
    }
  }
  if (section.contains("network")) {
    const json& value = section["network"];
    if (value.is_array()) {
      spec.network = "allowlist";
      spec.allowed_cidrs = strings_at(value, "/network");
      if (spec.allowed_cidrs.empty()) {
        throw SpecError("/network", "an empty list: write \"blocked\" to block every address");
      }
    } else {
      std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      if (text != "blocked" && text != "open") {
        throw SpecError("/network",
                        fmt::format("expected blocked, open or a list of CIDRs, not {}", text));
      }
      spec.network = text;
    }
  }
  if (section.contains("tags")) {
    spec.tags = map_at(section["tags"], "/tags");
    for (const auto& [key, value] : spec.tags) {
      if (key.starts_with("sandboxer.")) {
        throw SpecError("/tags/" + key,
                        "the \"sandboxer.\" prefix is reserved for the tags sandboxer sets");
      }
    }
  }
  if (section.contains("server_url")) {
    try {
      spec.server_url =
          checked_endpoint(text_at(section["server_url"], "/server_url"), "server_url", "token");
    } catch (const DriverError& e) {
      throw SpecError("/server_url", e.what());
    }
  }
  if (section.contains("image_builder_version")) {
    spec.image_builder_version =
        text_at(section["image_builder_version"], "/image_builder_version");
  }
  if (section.contains("client_type")) {
    spec.client_type = static_cast<int>(integer_at(section["client_type"], "/client_type", 0, 99));
  }
  if (section.contains("client_version")) {
    spec.client_version = text_at(section["client_version"], "/client_version");
  }
  for (auto [key, field] : {std::pair{"call_timeout", &spec.call_timeout},
                            std::pair{"start_timeout", &spec.start_timeout},
                            std::pair{"snapshot_timeout", &spec.snapshot_timeout}}) {
    if (section.contains(key)) {
      *field = duration_at(section[key], std::string("/") + key);
    }
  }
  if (section.contains("snapshot_ttl")) {
    const json& value = section["snapshot_ttl"];
    if (value.is_string() && value.get<std::string>() == "never") {
      spec.snapshot_ttl.reset();
    } else {
      auto ms = duration_at(value, "/snapshot_ttl");
      if (ms < std::chrono::seconds(1)) {
        throw SpecError("/snapshot_ttl", "expected at least 1s, or never");
      }
      spec.snapshot_ttl = std::chrono::duration_cast<std::chrono::seconds>(ms);
    }
  }
  if (section.contains("legacy_exec")) {
    if (!section["legacy_exec"].is_boolean()) {
      throw SpecError("/legacy_exec", "expected true or false");
    }
    spec.legacy_exec = section["legacy_exec"].get<bool>();
  }
  if (section.contains("attempts")) {
    spec.attempts = static_cast<int>(integer_at(section["attempts"], "/attempts", 1, 10));
  }
  return spec;
}

json to_json(const Spec& spec) {
  json out = {{"app", spec.app},
              {"image", spec.image},
              {"command", spec.command},
              {"image_builder_version", spec.image_builder_version},
              {"client_type", spec.client_type},
              {"client_version", spec.client_version},
              {"call_timeout", duration_text(spec.call_timeout)},
              {"start_timeout", duration_text(spec.start_timeout)},
              {"snapshot_timeout", duration_text(spec.snapshot_timeout)},
              {"snapshot_ttl", spec.snapshot_ttl ? format_duration(*spec.snapshot_ttl) : "never"},
              {"legacy_exec", spec.legacy_exec},
              {"attempts", spec.attempts}};
  if (spec.network == "allowlist") {
    out["network"] = spec.allowed_cidrs;
  } else {
    out["network"] = spec.network;
  }
  if (spec.environment) {
    out["environment"] = *spec.environment;
  }
  if (spec.milli_cpu) {
    out["cpu"] = *spec.milli_cpu / 1000.0;
  }
  if (spec.memory_mb) {
    out["memory"] = *spec.memory_mb;
  }
  if (spec.timeout) {
    out["timeout"] = format_duration(*spec.timeout);
  }
  if (spec.idle_timeout) {
    out["idle_timeout"] = format_duration(*spec.idle_timeout);
  }
  if (spec.workdir) {
    out["workdir"] = *spec.workdir;
  }
  if (!spec.tags.empty()) {
    out["tags"] = spec.tags;
  }
  if (spec.server_url) {
    out["server_url"] = *spec.server_url;
  }
  return out;
}

std::string resolve_server_url(const Spec& spec) {
  if (spec.server_url) {
    return *spec.server_url;
  }
  std::string url = env_or_empty("MODAL_SERVER_URL");
  if (url.empty()) {
    return k_default_server;
  }
  return checked_endpoint(url, "MODAL_SERVER_URL", "token");
}

json location_of(const Spec& spec) {
  return {{"server_url", resolve_server_url(spec)}, {"environment", resolve_environment(spec)}};
}

Spec located(Spec spec, const json& location) {
  if (auto url = location.find("server_url"); url != location.end() && url->is_string()) {
    spec.server_url = url->get<std::string>();
  }
  // Recorded even when empty: "" is the workspace's default environment, whatever
  // MODAL_ENVIRONMENT says today.
  if (auto env = location.find("environment"); env != location.end() && env->is_string()) {
    spec.environment = env->get<std::string>();
  }
  return spec;
}

std::string resolve_environment(const Spec& spec) {
  return spec.environment.value_or(env_or_empty("MODAL_ENVIRONMENT"));
}

} // namespace sandboxer::drivers::modal
