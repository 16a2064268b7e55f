#pragma once

#include "drivers/modal/module_abi.hpp"

namespace sandboxer::drivers::modal {

// The module's entry point, loaded on the first call (thread-safe, once per process). Throws
// DriverError when it cannot be loaded (a gRPC library missing), saying what to install.
OpenDriverFunction load_module();

} // namespace sandboxer::drivers::modal
