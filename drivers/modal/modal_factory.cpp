#include "drivers/modal/modal_factory.hpp"

#include <fmt/format.h>

#include <sandboxer/error.hpp>

#include "drivers/modal/module_loader.hpp"
#include "drivers/modal/spec.hpp"

namespace sandboxer::drivers::modal {
namespace {

using nlohmann::json;
using Kind = DriverError::Kind;

// Modal's tokens are "ak-..." (id) and "as-..." (secret); the message never shows the value.
void check_token_part(const std::string& value, const char* name, const char* prefix) {
  if (!value.starts_with(prefix) || value.size() < 8 ||
      value.find_first_of(" \t\r\n") != std::string::npos) {
    throw DriverError(Kind::invalid_spec,
                      fmt::format("secrets.{} does not look like a Modal token {} (expected "
                                  "\"{}\" and letters, got {} characters); make a token with "
                                  "`modal token new` or in Modal's dashboard",
                                  name, std::string(name).substr(6), prefix, value.size()));
  }
}

class ModalFactory : public spec::TableFactory<Spec> {
public:
  std::string_view name() const override { return "modal"; }
  std::string_view doc() const override {
    return "Modal sandboxes over Modal's gRPC API (needs secrets.token_id and "
           "secrets.token_secret)";
  }
  Capabilities capabilities() const override {
    // native_ttl: Modal keeps its own deadline; extend() refuses to go past it. logs: the
    // entrypoint's output (SandboxGetLogs). ports: its tunnels (SandboxGetTunnels). pause:
    // emulated, a filesystem snapshot and the end of the sandbox (Modal has no pause).
    return {.snapshot = true,
            .exec = true,
            .native_ttl = true,
            .list_by_label = true,
            .logs = true,
            .ports = true,
            .port_reach = Capabilities::PortReach::public_url,
            .pause = true,
            .pause_emulated = true};
  }
  json location(const json& spec, const DriverContext&) const override {
    return location_of(bind(spec));
  }
  std::unique_ptr<Driver> open(const json& spec_json, const DriverContext& context) const override {
    Spec spec = located(bind(spec_json), context.location);
    auto id = context.secrets.find("token_id");
    auto secret = context.secrets.find("token_secret");
    if (id == context.secrets.end() || secret == context.secrets.end()) {
      throw DriverError(Kind::invalid_spec,
                        "driver modal needs a token: add \"secrets: {token_id: {env: "
                        "MODAL_TOKEN_ID}, token_secret: {env: MODAL_TOKEN_SECRET}}\" (or {file: "
                        "PATH}) to the profile");
    }
    check_token_part(id->second, "token_id", "ak-");
    check_token_part(secret->second, "token_secret", "as-");
    resolve_server_url(spec); // a bad MODAL_SERVER_URL is a usage error, before any load
    ModuleRequest request{&spec_json, &context, id->second, secret->second};
    return std::unique_ptr<Driver>(load_module()(&request));
  }

protected:
  const spec::Table<Spec>& spec_table() const override { return modal::spec_table(); }
};

} // namespace

const DriverFactory& modal_factory() {
  static const ModalFactory factory;
  return factory;
}

} // namespace sandboxer::drivers::modal
