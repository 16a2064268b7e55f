#pragma once

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::stub {

// A driver for testing the core, not a substitute for a real one: its "backend" is a directory
// per sandbox under a root, exec runs a local process in that directory, and its profile section
// injects latency and failures. See docs/drivers/stub.md.
const DriverFactory& stub_factory();

} // namespace sandboxer::drivers::stub
