#pragma once

#include <string>
#include <string_view>

namespace sandboxer {

// The SHA-256 digest of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);
// The same as a tagged digest, the form every hash sandboxer stores or prints takes:
// "sha256:" and the 64 hex digits.
std::string sha256_digest(std::string_view data);

} // namespace sandboxer
