#pragma once

#include <string>

#include <sandboxer/driver.hpp>

#include "drivers/modal/api_client.hpp"

namespace sandboxer::drivers::modal {

// A sandbox's own output (its entrypoint's stdout and stderr) from SandboxGetLogs, one stream per
// descriptor as Modal's SDKs read them, each resumed at its last entry id. Without `follow`, what
// Modal has now: each stream is read for one short window (Modal holds a stream open for its
// `timeout` waiting for more), or to its end when the sandbox has finished. With `follow`, then
// window after window until both streams end (the sandbox finished) or a signal (Interrupted).
void read_logs(const Calls& api, ::modal::client::ModalClient::Stub& stub,
               const std::string& sandbox_id, const LogsRequest& request, LogSink& sink);

} // namespace sandboxer::drivers::modal
