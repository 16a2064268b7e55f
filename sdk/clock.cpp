#include <atomic>
#include <cstdlib>
#include <fmt/format.h>
#include <mutex>
#include <spdlog/spdlog.h>

#include <sandboxer/clock.hpp>
#include <sandboxer/error.hpp>

#include "sdk/testing.hpp"

namespace sandboxer {
namespace {

using namespace std::chrono;

constexpr const char* k_fake_now_env = "SANDBOXER_FAKE_NOW";

std::atomic<bool> g_fake_now_allowed{false};

class SystemClock final : public Clock {
public:
  // The environment is read on every call so that a test can move time with setenv().
  TimePoint now() const override {
    const char* fake = std::getenv(k_fake_now_env);
    if (fake && *fake && !g_fake_now_allowed) {
      static std::once_flag warned;
      std::call_once(warned, [] {
        spdlog::warn("{} is ignored: only test builds (sandboxer-testclock) honour it",
                     k_fake_now_env);
      });
    } else if (fake && *fake) {
      if (auto t = parse_time(fake)) {
        return *t;
      }
      // A silently ignored typo would make an expiry test pass or fail for the wrong reason.
      throw Error(ExitCode::usage,
                  fmt::format("{}='{}' is not an RFC 3339 time such as 2026-12-02T11:51:32Z; fix "
                              "or unset it",
                              k_fake_now_env, fake));
    }
    return floor<seconds>(std::chrono::system_clock::now());
  }
};

// Writes `value` as exactly `width` decimal digits at `out`.
void put_digits(char* out, int value, int width) {
  for (int i = width - 1; i >= 0; --i) {
    out[i] = static_cast<char>('0' + value % 10);
    value /= 10;
  }
}

// Reads exactly `width` decimal digits at `pos`, advancing it; nullopt when they are not digits.
std::optional<int> take_digits(std::string_view text, size_t& pos, int width) {
  if (pos + width > text.size()) {
    return std::nullopt;
  }
  int value = 0;
  for (int i = 0; i < width; ++i) {
    const char c = text[pos + i];
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    value = value * 10 + (c - '0');
  }
  pos += width;
  return value;
}

bool take_char(std::string_view text, size_t& pos, char expected) {
  if (pos < text.size() && text[pos] == expected) {
    ++pos;
    return true;
  }
  return false;
}

// "Z", "+hh:mm" or "-hh:mm" at `pos`, as the offset to subtract from the local time.
std::optional<seconds> take_offset(std::string_view text, size_t& pos) {
  if (take_char(text, pos, 'Z') || take_char(text, pos, 'z')) {
    return seconds(0);
  }
  int sign = 0;
  if (take_char(text, pos, '+')) {
    sign = 1;
  } else if (take_char(text, pos, '-')) {
    sign = -1;
  } else {
    return std::nullopt;
  }
  const auto h = take_digits(text, pos, 2);
  if (!h || !take_char(text, pos, ':')) {
    return std::nullopt;
  }
  const auto m = take_digits(text, pos, 2);
  if (!m || *h > 23 || *m > 59) {
    return std::nullopt;
  }
  return sign * (hours(*h) + minutes(*m));
}

} // namespace

void allow_fake_now() {
  g_fake_now_allowed = true;
}

const Clock& system_clock() {
  static const SystemClock clock;
  return clock;
}

bool representable(TimePoint t) {
  static constexpr auto k_first = sys_days(year(0) / January / 1);
  static constexpr auto k_last = sys_days(year(9999) / December / 31) + days(1);
  return t >= k_first && t < k_last;
}

std::optional<TimePoint> add_checked(TimePoint t, std::chrono::seconds d) {
  seconds::rep sum = 0;
  if (__builtin_add_overflow(t.time_since_epoch().count(), d.count(), &sum)) {
    return std::nullopt;
  }
  TimePoint result{seconds(sum)};
  return representable(result) ? std::optional(result) : std::nullopt;
}

std::string format_time(TimePoint t) {
  if (!representable(t)) {
    throw Error(ExitCode::runtime,
                fmt::format("time {}s after 1970 is outside the years 0000-9999 and cannot be "
                            "written; nothing was changed",
                            t.time_since_epoch().count()));
  }
  // Hand-rolled rather than fmt/strftime: the ledger formats several times per record, and
  // this runs on every write of a ledger with many thousands of them.
  const auto day = floor<days>(t);
  const year_month_day ymd{day};
  const hh_mm_ss hms{t - day};
  std::string text = "0000-00-00T00:00:00Z";
  put_digits(text.data(), static_cast<int>(ymd.year()), 4);
  put_digits(text.data() + 5, static_cast<int>(static_cast<unsigned>(ymd.month())), 2);
  put_digits(text.data() + 8, static_cast<int>(static_cast<unsigned>(ymd.day())), 2);
  put_digits(text.data() + 11, static_cast<int>(hms.hours().count()), 2);
  put_digits(text.data() + 14, static_cast<int>(hms.minutes().count()), 2);
  put_digits(text.data() + 17, static_cast<int>(hms.seconds().count()), 2);
  return text;
}

std::optional<TimePoint> parse_time(std::string_view text) {
  size_t pos = 0;
  const auto y = take_digits(text, pos, 4);
  if (!y || !take_char(text, pos, '-')) {
    return std::nullopt;
  }
  const auto mo = take_digits(text, pos, 2);
  if (!mo || !take_char(text, pos, '-')) {
    return std::nullopt;
  }
  const auto d = take_digits(text, pos, 2);
  // RFC 3339 allows a lowercase "t", and (section 5.6, note) a space for readability.
  if (!d ||
      !(take_char(text, pos, 'T') || take_char(text, pos, 't') || take_char(text, pos, ' '))) {
    return std::nullopt;
  }
  const auto h = take_digits(text, pos, 2);
  if (!h || !take_char(text, pos, ':')) {
    return std::nullopt;
  }
  const auto mi = take_digits(text, pos, 2);
  if (!mi || !take_char(text, pos, ':')) {
    return std::nullopt;
  }
  const auto s = take_digits(text, pos, 2);
  if (!s) {
    return std::nullopt;
  }
  if (take_char(text, pos, '.')) {
    const size_t first = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      ++pos;
    }
    if (pos == first) {
      return std::nullopt;
    }
  }
  const auto offset = take_offset(text, pos);
  if (!offset || pos != text.size()) {
    return std::nullopt;
  }
  const year_month_day ymd{year(*y), month(static_cast<unsigned>(*mo)),
                           day(static_cast<unsigned>(*d))};
  // Second 60 is a leap second, which RFC 3339 allows; it reads as the next minute's first.
  if (!ymd.ok() || *h > 23 || *mi > 59 || *s > 60) {
    return std::nullopt;
  }
  const TimePoint t = sys_days(ymd) + hours(*h) + minutes(*mi) + seconds(*s) - *offset;
  // An offset or a leap second can carry a time past year 9999 (or before 0000): refused here, so
  // every time read can be written back.
  return representable(t) ? std::optional(t) : std::nullopt;
}

} // namespace sandboxer
