#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandboxer {

using Seconds = std::chrono::seconds;

// The longest duration sandboxer accepts anywhere (TTLs, extensions, timeouts): 100 years of 365
// days. Any time point plus such a duration stays inside the years 0000-9999 that RFC 3339 and
// the ledger can hold, so no arithmetic on a parsed duration can overflow or wrap.
inline constexpr Seconds k_max_duration{100LL * 365 * 86400};

// Parses "90s", "15m", "2h", "1d", "1h30m" (units may combine, largest first; "0s" is allowed).
// Returns nullopt for anything else, including empty text, bare numbers, negative values and
// anything longer than k_max_duration.
std::optional<Seconds> parse_duration(std::string_view text);

// Why parse_duration refused `text`, to follow 'invalid duration "TEXT"' in an error message:
// "(longer than 100 years: at most 36500d)" or "(use 90s, 15m, 2h, 1d, 1h30m)".
std::string duration_problem(std::string_view text);

// As parse_duration, and also "250ms": for latencies and timeouts below a second.
std::optional<std::chrono::milliseconds> parse_duration_ms(std::string_view text);

// The shortest text parse_duration reads back as `d`: 5400s -> "1h30m", 0 -> "0s".
std::string format_duration(Seconds d);

// Parses sizes "512m", "2g", "1024k", "100" (bytes), "1.5g"; suffixes k/m/g/t in powers of 1024,
// optionally followed by "b" or "i"+"b" ("512mb", "2GiB"). Returns nullopt when malformed.
std::optional<std::uint64_t> parse_size(std::string_view text);

} // namespace sandboxer
