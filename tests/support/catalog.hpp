#pragma once

#include "cli/registry.hpp"

namespace sandboxer::testing {

// The built-in drivers only: unit tests never find an external driver on this machine's $PATH.
inline const DriverCatalog& builtin_catalog() {
  static const DriverCatalog catalog(builtin_drivers(), {});
  return catalog;
}

} // namespace sandboxer::testing
