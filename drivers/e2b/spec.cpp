#include "drivers/e2b/spec.hpp"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/endpoint.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/spec_fields.hpp>

namespace sandboxer::drivers::e2b {
namespace {

using nlohmann::json;

const std::vector<std::string> k_keys = {
    "template", "env",  "metadata",  "on_expiry",       "internet_access", "api_url", "domain",
    "envd_url", "user", "ttl_grace", "request_timeout", "exec_timeout",    "retries"};

using spec_fields::duration_at;
using spec_fields::map_at;
using spec_fields::text_at;

} // namespace

Spec parse_spec(const json& section) {
  for (const char* key : {"cpu", "cpus", "memory", "cpu_count", "memory_mb"}) {
    if (section.contains(key)) {
      throw SpecError(std::string("/") + key,
                      "E2B takes CPU and memory from the template, not from the create request: "
                      "build a template with the size you need and name it in \"template\"");
    }
  }
  check_keys(section, k_keys);
  Spec spec;
  if (section.contains("template")) {
    spec.template_id = text_at(section["template"], "/template");
  }
  if (section.contains("env")) {
    spec.env = map_at(section["env"], "/env");
  }
  if (section.contains("metadata")) {
    spec.metadata = map_at(section["metadata"], "/metadata");
    for (const auto& [key, value] : spec.metadata) {
      if (key.starts_with("sandboxer.")) {
        throw SpecError("/metadata/" + key,
                        "the \"sandboxer.\" prefix is reserved for the labels sandboxer sets");
      }
    }
  }
  if (section.contains("on_expiry")) {
    const json& value = section["on_expiry"];
    std::string text = value.is_string() ? value.get<std::string>() : value.dump();
    if (text == "kill") {
      spec.on_expiry = Spec::OnExpiry::kill;
    } else if (text == "pause") {
      spec.on_expiry = Spec::OnExpiry::pause;
    } else {
      throw SpecError("/on_expiry", fmt::format("expected kill or pause, not {}", text));
    }
  }
  if (section.contains("internet_access")) {
    if (!section["internet_access"].is_boolean()) {
      throw SpecError("/internet_access", "expected true or false");
    }
    spec.internet_access = section["internet_access"].get<bool>();
  }
  for (auto [key, field] :
       {std::pair{"api_url", &spec.api_url}, std::pair{"envd_url", &spec.envd_url}}) {
    if (section.contains(key)) {
      try {
        *field = checked_endpoint(text_at(section[key], std::string("/") + key), key, "API key");
      } catch (const DriverError& e) {
        throw SpecError(std::string("/") + key, e.what());
      }
    }
  }
  if (section.contains("domain")) {
    spec.domain = text_at(section["domain"], "/domain");
  }
  if (section.contains("user")) {
    spec.user = text_at(section["user"], "/user");
  }
  if (section.contains("ttl_grace")) {
    const json& value = section["ttl_grace"];
    auto parsed = value.is_string() ? parse_duration(value.get<std::string>()) : std::nullopt;
    if (!parsed) {
      throw SpecError("/ttl_grace", "invalid duration (use 30s, 2m)");
    }
    spec.ttl_grace = *parsed;
  }
  if (section.contains("request_timeout")) {
    spec.request_timeout = duration_at(section["request_timeout"], "/request_timeout");
  }
  if (section.contains("exec_timeout")) {
    spec.exec_timeout = duration_at(section["exec_timeout"], "/exec_timeout");
  }
  if (section.contains("retries")) {
    const json& value = section["retries"];
    if (!value.is_number_integer() || value.get<int>() < 0 || value.get<int>() > 10) {
      throw SpecError("/retries", "expected a whole number from 0 to 10");
    }
    spec.retries = value.get<int>();
  }
  return spec;
}

json to_json(const Spec& spec) {
  json out = {{"template", spec.template_id},
              {"on_expiry", spec.on_expiry == Spec::OnExpiry::pause ? "pause" : "kill"},
              {"user", spec.user},
              {"ttl_grace", format_duration(spec.ttl_grace)},
              {"request_timeout", fmt::format("{}ms", spec.request_timeout.count())},
              {"exec_timeout", fmt::format("{}ms", spec.exec_timeout.count())},
              {"retries", spec.retries}};
  if (!spec.env.empty()) {
    out["env"] = spec.env;
  }
  if (!spec.metadata.empty()) {
    out["metadata"] = spec.metadata;
  }
  if (spec.internet_access) {
    out["internet_access"] = *spec.internet_access;
  }
  if (spec.api_url) {
    out["api_url"] = *spec.api_url;
  }
  if (spec.domain) {
    out["domain"] = *spec.domain;
  }
  if (spec.envd_url) {
    out["envd_url"] = *spec.envd_url;
  }
  return out;
}

Endpoints resolve_endpoints(const Spec& spec) {
  Endpoints endpoints;
  std::string domain = spec.domain.value_or(env_or_empty("E2B_DOMAIN"));
  endpoints.domain = domain.empty() ? "e2b.app" : domain;
  std::string api = spec.api_url.value_or(env_or_empty("E2B_API_URL"));
  endpoints.api_url =
      api.empty() ? "https://api." + endpoints.domain
                  : checked_endpoint(api, spec.api_url ? "api_url" : "E2B_API_URL", "API key");
  endpoints.envd_url = spec.envd_url;
  return endpoints;
}

std::string envd_base(const Endpoints& endpoints, const std::string& sandbox_id,
                      const std::optional<std::string>& sandbox_domain) {
  if (endpoints.envd_url) {
    return *endpoints.envd_url;
  }
  return fmt::format("https://49983-{}.{}", sandbox_id, sandbox_domain.value_or(endpoints.domain));
}

void check_api_key(const std::string& key) {
  bool charset_ok = std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
  if (!key.starts_with("e2b_") || key.size() < 20 || !charset_ok) {
    throw DriverError(DriverError::Kind::invalid_spec,
                      fmt::format("secrets.api_key does not look like an E2B API key (expected "
                                  "\"e2b_\" followed by letters and digits, got {} characters{}); "
                                  "copy the key from https://e2b.dev/dashboard",
                                  key.size(), charset_ok ? "" : " including spaces or symbols"));
  }
}

} // namespace sandboxer::drivers::e2b
