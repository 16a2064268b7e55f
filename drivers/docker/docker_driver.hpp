#pragma once

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::docker {

// Containers on a Docker Engine, through its HTTP API over the unix socket (or DOCKER_HOST tcp).
// See docs/drivers/docker.md.
const DriverFactory& docker_factory();

} // namespace sandboxer::drivers::docker
