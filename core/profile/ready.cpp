// The `ready` of a profile (docs/ports.md, "Readiness"): which exposed port must answer before
// `create` returns, and for how long to wait.
#include <algorithm>
#include <fmt/format.h>

#include <sandboxer/ports.hpp>

#include "core/profile/document_reader.hpp"

namespace sandboxer::profile_internal {
namespace {

const std::vector<std::string> k_ready_keys = {"port", "timeout"};

class ReadyChecker : public DocumentReader {
public:
  using DocumentReader::DocumentReader;

  std::optional<ReadyPort> ready(const std::vector<PortSpec>& ports) const {
    const json* ready = find("ready");
    if (ready == nullptr) {
      return std::nullopt;
    }
    if (!ready->is_object()) {
      fail_at("/ready", "ready: expected a map such as {port: 8080, timeout: 60s}");
    }
    check_keys(*ready, k_ready_keys, "/ready", "ready");
    if (!ready->contains("port") || (*ready)["port"].is_null()) {
      fail_at("/ready", "ready: missing \"port\" (the exposed port that must answer)");
    }
    ReadyPort result;
    const json& port = (*ready)["port"];
    auto text = text_of(port, "/ready/port");
    auto number = text && !port.is_boolean() ? port_number(*text) : std::nullopt;
    if (!number) {
      fail_at("/ready/port", fmt::format("ready.port: \"{}\" is not a port number from 1 to 65535",
                                         text.value_or(port.dump())));
    }
    result.port = *number;
    // Readiness connects where a client would: to an exposed port, never past what is exposed.
    const bool exposed = std::any_of(ports.begin(), ports.end(), [&](const PortSpec& spec) {
      return spec.port == result.port && spec.protocol == "tcp";
    });
    if (!exposed) {
      fail_at("/ready/port",
              fmt::format("ready.port: port {}/tcp is not exposed; add it to `ports:` (readiness "
                          "connects to an exposed port, where a client would)",
                          result.port));
    }
    if (ready->contains("timeout") && !(*ready)["timeout"].is_null()) {
      result.timeout = duration_at("/ready/timeout", "ready.timeout");
      if (result.timeout < Seconds(1)) {
        fail_at("/ready/timeout", "ready.timeout: wait at least 1s");
      }
    }
    return result;
  }
};

} // namespace

std::optional<ReadyPort> ready_of(const fs::path& file, Document& doc,
                                  const std::vector<PortSpec>& ports) {
  return ReadyChecker(file, doc).ready(ports);
}

} // namespace sandboxer::profile_internal
