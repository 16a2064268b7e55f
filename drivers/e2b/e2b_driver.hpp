#pragma once

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::e2b {

// Cloud sandboxes on E2B, through its REST API (shared/specs/e2b-openapi.yml) and, for exec, the
// in-sandbox daemon envd's process API over Connect. See docs/drivers/e2b.md.
const DriverFactory& e2b_factory();

} // namespace sandboxer::drivers::e2b
