#pragma once
// `ready: {port}` (docs/ports.md, "Readiness"): waiting, after the backend made a sandbox, until
// its exposed port answers where a client connects.

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include <sandboxer/driver.hpp>
#include <sandboxer/duration.hpp>

namespace sandboxer {

struct PortWait {
  bool answered = false;
  std::chrono::milliseconds waited{0};
};

// Asks driver.port_answers about `binding` until it answers or `timeout` has passed, measured on
// the monotonic clock (a test clock or an NTP step can neither end it early nor stretch it). Each
// try is bounded by what is left; a signal throws Interrupted.
PortWait wait_for_port(Driver& driver, const SandboxHandle& sandbox, const PortBinding& binding,
                       Seconds timeout);

// The history details of a wait: {port, url, answered, after_ms}, and the timeout when it ran out.
nlohmann::json port_wait_details(const PortBinding& binding, const PortWait& wait, Seconds timeout);

} // namespace sandboxer
