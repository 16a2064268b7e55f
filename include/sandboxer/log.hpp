#pragma once

#include <spdlog/spdlog.h>
#include <string>
#include <string_view>

namespace sandboxer::log {

// Sets up the stderr logger: `level` is one of trace, debug, info, warn, error, off.
void init(const std::string& level);

// Registers a secret value: from now on every log line and every error message printed by main
// has it replaced by "***". Values shorter than 4 bytes are ignored (they would mask innocent
// text).
void add_secret(std::string value);
std::string redact(std::string_view text);

} // namespace sandboxer::log
