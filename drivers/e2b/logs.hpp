#pragma once

#include <string>

#include <sandboxer/driver.hpp>

#include "drivers/e2b/api.hpp"

namespace sandboxer::drivers::e2b {

// `sandboxer logs` of an E2B sandbox: GET /v2/sandboxes/{id}/logs (the API's log of the sandbox,
// SandboxLogEntry: timestamp, level, message), paged by its millisecond cursor. With `follow`,
// asked again every second until the sandbox is gone or no longer running; each wait is
// interruptible and each request has the spec's request timeout.
void read_logs(const Api& api, const std::string& sandbox_id, const LogsRequest& request,
               LogSink& sink);

} // namespace sandboxer::drivers::e2b
