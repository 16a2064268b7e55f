#pragma once

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::modal {

// The registry's entry: spec, schema and capabilities here; the live driver in the gRPC module.
const DriverFactory& modal_factory();

} // namespace sandboxer::drivers::modal
