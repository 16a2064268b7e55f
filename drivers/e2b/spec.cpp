#include "drivers/e2b/spec.hpp"

#include <algorithm>
#include <cstdlib>
#include <fmt/format.h>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/endpoint.hpp>
#include <sandboxer/error.hpp>
#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::e2b {

using nlohmann::json;

const spec::Table<Spec>& spec_table() {
  static const spec::Table<Spec> table = [] {
    spec::Table<Spec> t;
    t.driver = "e2b";
    auto metadata = spec::string_map().checked([](const auto& map, const auto& at) {
      for (const auto& [key, value] : map) {
        if (key.starts_with("sandboxer.")) {
          throw SpecError(at.pointer + "/" + key,
                          "the \"sandboxer.\" prefix is reserved for the labels sandboxer sets");
        }
      }
    });
    using spec::field;
    using spec::Write;
    t.fields = {
        field("template", &Spec::template_id, spec::text()),
        field("env", &Spec::env, spec::string_map(), "", Write::if_not_empty),
        field("metadata", &Spec::metadata, metadata, "", Write::if_not_empty),
        field("on_expiry", &Spec::on_expiry,
              spec::one_of<Spec::OnExpiry>(
                  {{"kill", Spec::OnExpiry::kill}, {"pause", Spec::OnExpiry::pause}})),
        field("internet_access", &Spec::internet_access, spec::boolean()),
        field("api_url", &Spec::api_url, spec::endpoint("api_url", "API key")),
        field("domain", &Spec::domain, spec::text()),
        field("envd_url", &Spec::envd_url, spec::endpoint("envd_url", "API key")),
        field("user", &Spec::user, spec::text()),
        field("ttl_grace", &Spec::ttl_grace, spec::seconds()),
        field("request_timeout", &Spec::request_timeout, spec::duration_in_ms()),
        field("exec_timeout", &Spec::exec_timeout, spec::duration_in_ms()),
        field("retries", &Spec::retries, spec::integer(0, 10)),
    };
    t.before = [](const json& section) {
      for (const char* key : {"cpu", "cpus", "memory", "cpu_count", "memory_mb"}) {
        if (section.contains(key)) {
          throw SpecError(std::string("/") + key,
                          "E2B takes CPU and memory from the template, not from the create "
                          "request: build a template with the size you need and name it in "
                          "\"template\"");
        }
      }
    };
    return t;
  }();
  return table;
}

Spec parse_spec(const json& section) {
  return spec::read(spec_table(), section);
}

json to_json(const Spec& spec) {
  return spec::write(spec_table(), spec);
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
