#pragma once

#include <memory>

#include "modal_proto/api.grpc.pb.h"
#include "modal_proto/task_command_router.grpc.pb.h"
#include "world.hpp"

namespace fake_modal {

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
