#pragma once

#include <memory>

#include "modal_proto/api.grpc.pb.h"
#include "modal_proto/task_command_router.grpc.pb.h"
#include "world.hpp"

namespace fake_modal {

std::unique_ptr<modal::client::ModalClient::Service> control_plane(World& world);
std::unique_ptr<modal::task_command_router::TaskCommandRouter::Service>
command_router(World& world);

} // namespace fake_modal
