#include "core/lifecycle/port_readiness.hpp"

#include <algorithm>

#include <sandboxer/interrupt.hpp>

namespace sandboxer {

using namespace std::chrono_literals;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

PortWait wait_for_port(Driver& driver, const SandboxHandle& sandbox, const PortBinding& binding,
                       Seconds timeout) {
  using Monotonic = std::chrono::steady_clock;
  const auto started = Monotonic::now();
  const auto deadline = started + timeout;
  // Short at first, for a service that is nearly up; then at most a second apart, so that the
  // answer is seen soon after it comes without hammering a backend's proxy.
  milliseconds pause = 100ms;
  PortWait wait;
  while (true) {
    interrupt::check();
    const auto left = duration_cast<milliseconds>(deadline - Monotonic::now());
    if (driver.port_answers(sandbox, binding, std::clamp<milliseconds>(left, 1ms, 2s))) {
      wait.answered = true;
      break;
    }
    const auto now_left = duration_cast<milliseconds>(deadline - Monotonic::now());
    if (now_left <= 0ms) {
      break;
    }
    interrupt::sleep_for(std::min(pause, now_left));
    pause = std::min<milliseconds>(pause * 2, 1s);
  }
  wait.waited = duration_cast<milliseconds>(Monotonic::now() - started);
  return wait;
}

nlohmann::json port_wait_details(const PortBinding& binding, const PortWait& wait,
                                 Seconds timeout) {
  nlohmann::json details = {{"port", binding.port},
                            {"url", binding.url},
                            {"answered", wait.answered},
                            {"after_ms", wait.waited.count()}};
  if (!wait.answered) {
    details["timeout"] = format_duration(timeout);
  }
  return details;
}

} // namespace sandboxer
