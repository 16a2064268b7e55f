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

// The system's UTC clock, truncated to whole seconds.
const Clock& system_clock();

// "2026-12-02T11:51:32Z". Throws Error (runtime) for a time outside the years 0000-9999, which
// RFC 3339 cannot write and parse_time would refuse: no commit can store what no read accepts.
std::string format_time(TimePoint t);

// Whether format_time can write `t`.
bool representable(TimePoint t);

// t + d, or nullopt when that overflows or leaves the years 0000-9999.
std::optional<TimePoint> add_checked(TimePoint t, std::chrono::seconds d);

// Reads RFC 3339 in UTC ("...Z") or with an offset ("+02:00"); fractional seconds are dropped.
std::optional<TimePoint> parse_time(std::string_view text);

} // namespace sandboxer
