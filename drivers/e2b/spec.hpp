#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::e2b {

// The profile's `e2b:` section, validated. See docs/drivers/e2b.md.
struct Spec {
  std::string template_id = "base";
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> metadata;
  enum class OnExpiry { kill, pause };
  OnExpiry on_expiry = OnExpiry::kill; // what E2B does when its own deadline passes
  std::optional<bool> internet_access; // none: the API's default (allowed)
  std::optional<std::string> api_url;  // none: $E2B_API_URL, else https://api.<domain>
  std::optional<std::string> domain;   // none: $E2B_DOMAIN, else e2b.app
  std::optional<std::string> envd_url; // none: https://49983-<sandbox id>.<domain>
  std::string user = "user";           // the user envd runs commands as
  std::chrono::seconds ttl_grace{60};  // E2B's deadline = the ledger's + this
  std::chrono::milliseconds request_timeout{30000};
  std::chrono::milliseconds exec_timeout{3600000};
  int retries = 4; // extra attempts of an idempotent call, and of any call refused with 429
};

// The fields of an `e2b:` section: reading, the stored form and the schema.
const spec::Table<Spec>& spec_table();
// Binds and checks an `e2b:` section; throws SpecError with the JSON pointer of the bad value.
Spec parse_spec(const nlohmann::json& section);
// The normalized form stored in the ledger; parse_spec(to_json(s)) == s.
nlohmann::json to_json(const Spec& spec);

// Where the driver talks to, once the environment is taken into account as E2B's SDKs do: the
// profile's value first, then E2B_API_URL / E2B_DOMAIN, then the public service.
struct Endpoints {
  std::string api_url;                 // no trailing slash
  std::string domain;                  // the sandbox domain, unless the API returns one per sandbox
  std::optional<std::string> envd_url; // a fixed envd URL (self-hosted, tests)
};
Endpoints resolve_endpoints(const Spec& spec);

// The envd base URL of one sandbox: envd_url when set, else https://49983-<id>.<domain>.
std::string envd_base(const Endpoints& endpoints, const std::string& sandbox_id,
                      const std::optional<std::string>& sandbox_domain);

// Throws DriverError(invalid_spec) when `key` does not look like an E2B API key; the message never
// contains the key itself.
void check_api_key(const std::string& key);

} // namespace sandboxer::drivers::e2b
