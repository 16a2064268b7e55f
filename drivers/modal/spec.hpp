#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <sandboxer/spec_table.hpp>

namespace sandboxer::drivers::modal {

// The profile's `modal:` section, validated. See docs/drivers/modal.md.
struct Spec {
  std::string app = "sandboxer";          // the Modal app the sandboxes belong to (made if missing)
  std::optional<std::string> environment; // none: $MODAL_ENVIRONMENT, else the workspace default
  std::string image;                      // a registry reference, or an image id ("im-...")
  std::optional<int> milli_cpu;           // cpu: 0.5 -> 500
  std::optional<int> memory_mb;
  // Modal's own maximum lifetime, fixed at create (it cannot grow later). None: the TTL the
  // sandbox is created with. `extend` may move the ledger's deadline up to this, not past it.
  std::optional<std::chrono::seconds> timeout;
  std::optional<std::chrono::seconds> idle_timeout;
  std::optional<std::string> workdir;
  std::vector<std::string> command = {"sleep", "infinity"};
  // blocked (the default), open, or the CIDRs it may reach.
  std::string network = "blocked";
  std::vector<std::string> allowed_cidrs;
  std::map<std::string, std::string> tags;
  std::optional<std::string> server_url; // none: $MODAL_SERVER_URL, else https://api.modal.com
  std::string image_builder_version = "2024.10";
  int client_type = 9; // CLIENT_TYPE_LIBMODAL_GO, what libmodal sends
  std::string client_version = "1.0.0";
  std::chrono::milliseconds call_timeout{60000};   // each unary call
  std::chrono::milliseconds start_timeout{300000}; // image build and scheduling, on create
  std::chrono::milliseconds snapshot_timeout{600000};
  std::optional<std::chrono::seconds> snapshot_ttl =
      std::chrono::seconds(30 * 86400); // none: never
  bool legacy_exec = false; // ContainerExec on the control plane instead of the command router
  int attempts = 3;         // per call, on the codes Modal's SDKs retry
};

// The fields of a `modal:` section: reading, the stored form and the schema.
const spec::Table<Spec>& spec_table();
// Binds and checks a `modal:` section; throws SpecError with the JSON pointer of the bad value.
Spec parse_spec(const nlohmann::json& section);
// The normalized form stored in the ledger; parse_spec(to_json(s)) == s.
nlohmann::json to_json(const Spec& spec);

// The server the driver talks to: the profile's, else $MODAL_SERVER_URL, else Modal's; checked
// to be https://, or http:// to a loopback address (a local test server).
std::string resolve_server_url(const Spec& spec);
std::string resolve_environment(const Spec& spec);
// Where a sandbox of `spec` made now would live (DriverFactory::location): the server and the
// environment.
nlohmann::json location_of(const Spec& spec);
// `spec` bound to a recorded location: the record, not today's MODAL_SERVER_URL or
// MODAL_ENVIRONMENT, says where the sandbox is.
Spec located(Spec spec, const nlohmann::json& location);

// Whether `reference` names an image by its Modal id rather than by a registry reference.
bool is_image_id(const std::string& reference);

// The longest lifetime Modal allows a sandbox (its documented maximum).
inline constexpr std::chrono::seconds k_max_timeout{24 * 3600};

} // namespace sandboxer::drivers::modal
