#include <sandboxer/error.hpp>

namespace sandboxer {

const char* to_string(DriverError::Kind kind) {
  switch (kind) {
  case DriverError::Kind::error:
    return "error";
  case DriverError::Kind::timeout:
    return "timeout";
  case DriverError::Kind::auth:
    return "auth";
  case DriverError::Kind::not_found:
    return "not_found";
  case DriverError::Kind::unsupported:
    return "unsupported";
  case DriverError::Kind::conflict:
    return "conflict";
  case DriverError::Kind::invalid_spec:
    return "invalid_spec";
  case DriverError::Kind::refused:
    return "refused";
  case DriverError::Kind::unavailable:
    return "unavailable";
  }
  return "error";
}

} // namespace sandboxer
