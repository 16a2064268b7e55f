#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sandboxer {

using Seconds = std::chrono::seconds;

// Parses "90s", "15m", "2h", "1d", "1h30m" (units may combine, largest first; "0s" is allowed).
// Returns nullopt for anything else, including empty text, bare numbers and negative values.
std::optional<Seconds> parse_duration(std::string_view text);

// As parse_duration, and also "250ms": for latencies and timeouts below a second.
std::optional<std::chrono::milliseconds> parse_duration_ms(std::string_view text);

// The shortest text parse_duration reads back as `d`: 5400s -> "1h30m", 0 -> "0s".
std::string format_duration(Seconds d);

// Parses sizes "512m", "2g", "1024k", "100" (bytes), "1.5g"; suffixes k/m/g/t in powers of 1024,
// optionally followed by "b" or "i"+"b" ("512mb", "2GiB"). Returns nullopt when malformed.
std::optional<std::uint64_t> parse_size(std::string_view text);

} // namespace sandboxer
