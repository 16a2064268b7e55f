#pragma once

#include <memory>

#include "modal_proto/api.grpc.pb.h"
#include "modal_proto/task_command_router.grpc.pb.h"
#include "world.hpp"

namespace fake_modal {

// "<what> not found", as both services answer for an id they do not know.
inline grpc::Status not_found(const std::string& what) {
  return grpc::Status(grpc::StatusCode::NOT_FOUND, what + " not found");
}

// The sandbox of `task_id` when a command may start in it (under world.mutex()); else nullptr,
// with `refusal` set to the answer (unknown task, or the sandbox has finished).
inline Sandbox* running_sandbox_of_task(World& world, const std::string& task_id,
                                        grpc::Status& refusal) {
  Sandbox* sandbox = world.sandbox_of_task(task_id);
  if (!sandbox) {
    refusal = not_found("Task " + task_id);
  } else if (sandbox->result) {
    refusal = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the sandbox has finished");
    return nullptr;
  }
  return sandbox;
}

std::unique_ptr<modal::client::ModalClient::Service> control_plane(World& world);
std::unique_ptr<modal::task_command_router::TaskCommandRouter::Service>
command_router(World& world);

// The terminal an exec asks for: its size when pty_info is enabled (24x80 if it gives none).
inline std::optional<std::pair<unsigned short, unsigned short>>
terminal_of(const modal::client::PTYInfo& pty) {
  if (!pty.enabled()) {
    return std::nullopt;
  }
  return std::pair<unsigned short, unsigned short>(pty.winsz_rows() ? pty.winsz_rows() : 24,
                                                   pty.winsz_cols() ? pty.winsz_cols() : 80);
}

} // namespace fake_modal
