#pragma once

#include <spdlog/spdlog.h>
#include <string>
#include <string_view>

namespace sandboxer::log {

// Sets up the stderr logger: `level` is one of trace, debug, info, warn, error, off.
void init(const std::string& level);

// What starts every line sandboxer writes to stderr itself: "sandboxer: ", after an RFC 3339 UTC
// time ("2026-12-04T05:10:00.123Z ") when stderr is not a terminal, so that a log file written by
// cron says when each line happened.
std::string prefix();

// Registers a secret value: from now on every log line and every error message printed by main
// has it replaced by "***". Values shorter than 4 bytes are ignored (they would mask innocent
// text).
void add_secret(std::string value);
std::string redact(std::string_view text);

} // namespace sandboxer::log
