#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace sandboxer {

using TimePoint = std::chrono::sys_seconds;

// The one source of "now" for TTL and history, so tests can inject time.
class Clock {
public:
  virtual ~Clock() = default;
  virtual TimePoint now() const = 0;
};

// The system's UTC clock, truncated to whole seconds. If SANDBOXER_FAKE_NOW holds an RFC 3339 time
// it is used instead: end-to-end tests of expiry run the real binary at a chosen instant.
const Clock& system_clock();

// "2026-12-02T11:51:32Z".
std::string format_time(TimePoint t);

// Reads RFC 3339 in UTC ("...Z") or with an offset ("+02:00"); fractional seconds are dropped.
std::optional<TimePoint> parse_time(std::string_view text);

} // namespace sandboxer
