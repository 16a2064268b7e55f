#pragma once

#include <string>
#include <string_view>

namespace sandboxer {

// Standard base64 with padding (RFC 4648 section 4): the driver protocol's bytes, protobuf's JSON
// form of `bytes`, HTTP Basic auth. The decoder also accepts the URL-safe alphabet.
std::string base64_encode(std::string_view bytes);
std::string base64_decode(std::string_view text); // throws std::invalid_argument
} // namespace sandboxer
