#include <array>
#include <cctype>
#include <limits>

#include <sandboxer/duration.hpp>

namespace sandboxer {
namespace {

struct Unit {
  char suffix;
  std::int64_t seconds;
};

// Largest first: parse_duration insists on this order and format_duration produces it.
constexpr std::array<Unit, 5> k_units = {
    {{'w', 7 * 86400}, {'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}}};

// The index of `suffix` in k_units, or k_units.size() when it is not a unit.
size_t unit_index(char suffix) {
  for (size_t i = 0; i < k_units.size(); ++i) {
    if (k_units[i].suffix == suffix) {
      return i;
    }
  }
  return k_units.size();
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Reads the digits at `pos` into `value`; false when there are none or they overflow `limit`.
bool read_number(std::string_view text, size_t& pos, std::uint64_t limit, std::uint64_t& value) {
  size_t start = pos;
  value = 0;
  while (pos < text.size() && is_digit(text[pos])) {
    auto digit = static_cast<std::uint64_t>(text[pos] - '0');
    if (value > (limit - digit) / 10) {
      return false;
    }
    value = value * 10 + digit;
    ++pos;
  }
  return pos > start;
}

// parse_duration without the 100-year bound (still refusing what does not fit in 64 bits).
std::optional<Seconds> parse_unbounded(std::string_view text) {
  constexpr auto k_max = static_cast<std::uint64_t>(std::numeric_limits<Seconds::rep>::max());
  if (text.empty()) {
    return std::nullopt;
  }
  std::uint64_t total = 0;
  size_t pos = 0;
  size_t next_allowed_unit = 0; // units must strictly decrease, so each appears at most once
  while (pos < text.size()) {
    std::uint64_t count = 0;
    if (!read_number(text, pos, k_max, count) || pos == text.size()) {
      return std::nullopt; // no digits, overflow, or a bare number without a unit
    }
    size_t unit = unit_index(text[pos]);
    if (unit == k_units.size() || unit < next_allowed_unit) {
      return std::nullopt;
    }
    auto unit_seconds = static_cast<std::uint64_t>(k_units[unit].seconds);
    if (count > (k_max - total) / unit_seconds) {
      return std::nullopt;
    }
    total += count * unit_seconds;
    next_allowed_unit = unit + 1;
    ++pos;
  }
  return Seconds(static_cast<Seconds::rep>(total));
}

} // namespace

std::optional<Seconds> parse_duration(std::string_view text) {
  auto parsed = parse_unbounded(text);
  if (!parsed || *parsed > k_max_duration) {
    return std::nullopt;
  }
  return parsed;
}

std::string duration_problem(std::string_view text) {
  // Digits and units only, but too many of them for 64 bits: also "too long", not "malformed".
  bool huge = text.size() > 18 && !text.empty() && text[0] >= '0' && text[0] <= '9' &&
              text.find_first_not_of("0123456789wdhms") == std::string_view::npos;
  if ((parse_unbounded(text) && !parse_duration(text)) || (huge && !parse_unbounded(text))) {
    return "(longer than 100 years: at most 36500d)";
  }
  return "(use 90s, 15m, 2h, 1d, 1h30m)";
}

std::string format_duration(Seconds d) {
  if (d.count() == 0) {
    return "0s";
  }
  if (d.count() < 0) {
    // Not readable by parse_duration, but a remaining time that has run out should still print
    // as something a human understands.
    return "-" + format_duration(Seconds(-d.count()));
  }
  std::string text;
  std::int64_t left = d.count();
  // Weeks are accepted on input but days read better in messages ("14d", not "2w").
  for (size_t i = 1; i < k_units.size(); ++i) {
    std::int64_t count = left / k_units[i].seconds;
    if (count > 0) {
      text += std::to_string(count);
      text += k_units[i].suffix;
      left -= count * k_units[i].seconds;
    }
  }
  return text;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  constexpr std::uint64_t k_max = std::numeric_limits<std::uint64_t>::max();
  size_t pos = 0;
  std::uint64_t whole = 0;
  if (!read_number(text, pos, k_max, whole)) {
    return std::nullopt;
  }
  // Up to 9 fraction digits ("1.5g"); the fraction is kept as an integer over a power of ten so
  // that the result is exact and needs no floating point.
  std::uint64_t fraction = 0;
  std::uint64_t fraction_scale = 1;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    size_t start = pos;
    if (!read_number(text, pos, k_max, fraction) || pos - start > 9) {
      return std::nullopt;
    }
    for (size_t i = start; i < pos; ++i) {
      fraction_scale *= 10;
    }
  }
  std::uint64_t multiplier = 1;
  std::string suffix;
  for (size_t i = pos; i < text.size(); ++i) {
    suffix += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  if (!suffix.empty() && suffix != "b") {
    size_t power = std::string_view("kmgt").find(suffix[0]);
    std::string_view rest = std::string_view(suffix).substr(1);
    if (power == std::string_view::npos || !(rest.empty() || rest == "b" || rest == "ib")) {
      return std::nullopt;
    }
    for (size_t i = 0; i <= power; ++i) {
      multiplier *= 1024;
    }
  }
  if (fraction_scale > 1 && multiplier == 1) {
    return std::nullopt; // "1.5" bytes is not a size
  }
  if (whole > k_max / multiplier) {
    return std::nullopt;
  }
  // Fractions of a byte are dropped: "1.1k" is 1126 bytes. Split so that nothing overflows:
  // fraction < scale <= 10^9 and the remainder is < 10^9.
  std::uint64_t part = multiplier / fraction_scale * fraction +
                       multiplier % fraction_scale * fraction / fraction_scale;
  std::uint64_t bytes = whole * multiplier;
  if (part > k_max - bytes) {
    return std::nullopt;
  }
  return bytes + part;
}

// Added alongside the drivers (stub latency, docker timeouts): only whole milliseconds, and no
// mixing with other units ("1s500ms" is rejected).
std::optional<std::chrono::milliseconds> parse_duration_ms(std::string_view text) {
  if (text.size() > 2 && text.ends_with("ms")) {
    std::string_view digits = text.substr(0, text.size() - 2);
    size_t pos = 0;
    std::uint64_t ms = 0;
    constexpr auto k_max_ms = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(k_max_duration).count());
    if (!read_number(digits, pos, k_max_ms, ms) || pos != digits.size()) {
      return std::nullopt;
    }
    return std::chrono::milliseconds(static_cast<std::chrono::milliseconds::rep>(ms));
  }
  if (auto seconds = parse_duration(text)) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(*seconds);
  }
  return std::nullopt;
}

} // namespace sandboxer
