#pragma once

#include <string>

// Where a driver sends its credentials: the checks every cloud driver owes its users.
namespace sandboxer {

// `url` without its trailing slashes, once it is https:// or plain http:// to a loopback address
// (a local test server; anything else would carry `credential` in clear text). Otherwise throws
// DriverError(invalid_spec) naming `what`, the profile key or environment variable that gave it.
std::string checked_endpoint(std::string url, const std::string& what,
                             const std::string& credential);

// The value of an environment variable, or "" when it is unset.
std::string env_or_empty(const char* name);

} // namespace sandboxer
