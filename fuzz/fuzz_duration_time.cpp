// Durations and times: parse never crashes or overflows, and what parses formats back to the
// same value (so no deadline is ever stored that the reader would refuse).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include <sandboxer/clock.hpp>
#include <sandboxer/duration.hpp>
#include <sandboxer/error.hpp>

using namespace sandboxer;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto d = parse_duration(text)) {
    if (*d > k_max_duration || parse_duration(format_duration(*d)) != d) {
      __builtin_trap();
    }
  }
  (void)duration_problem(text);
  if (auto ms = parse_duration_ms(text); ms && *ms > k_max_duration) {
    __builtin_trap();
  }
  (void)parse_size(text);
  if (auto t = parse_time(text)) {
    if (!representable(*t) || parse_time(format_time(*t)) != t) {
      __builtin_trap();
    }
    // Any bounded duration added to a time that was read: either a writable time or nothing.
    if (auto d = parse_duration(text.substr(text.size() / 2))) {
      if (auto later = add_checked(*t, *d); later && !representable(*later)) {
        __builtin_trap();
      }
    }
  }
  if (size >= sizeof(std::int64_t)) {
    std::int64_t seconds = 0;
    std::memcpy(&seconds, data, sizeof seconds);
    const TimePoint t{std::chrono::seconds(seconds / 2)};
    try {
      const std::string written = format_time(t);
      if (parse_time(written) != t) {
        __builtin_trap();
      }
    } catch (const Error&) {
      if (representable(t)) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
