#pragma once

#include <string>

#include <sandboxer/driver.hpp>

#include "drivers/modal/api_client.hpp"

namespace sandboxer::drivers::modal {

// Runs a command in a sandbox's task and returns its exit status (128+N for signal N). Output is
// handed to `io` as it comes; stdin is sent as it is read. Both wait for the command to end: a
// snapshot taken right after sees everything it wrote (libmodal #290).

// Through the task's command router (what Modal's SDKs use): `router` is a channel to the URL
// TaskGetCommandRouterAccess gave, with its JWT.
int exec_through_router(const Calls& router, const std::string& task_id, const ExecRequest& request,
                        const std::map<std::string, std::string>& env, ExecIo& io);

// Through the control plane's ContainerExec (the older path; no env, no stdin).
int exec_through_control_plane(const Calls& api, ::modal::client::ModalClient::Stub& stub,
                               const std::string& task_id, const ExecRequest& request, ExecIo& io);

} // namespace sandboxer::drivers::modal
