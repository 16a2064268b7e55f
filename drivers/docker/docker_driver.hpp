#pragma once

#include <sandboxer/driver.hpp>
#include <sandboxer/http.hpp>

namespace sandboxer::drivers::docker {

// Containers on a Docker Engine, through its HTTP API over the unix socket (or DOCKER_HOST tcp).
// See docs/drivers/docker.md.
const DriverFactory& docker_factory();

// What docker_factory().open() does, over `transport` instead of libcurl: the seam for tests.
// `transport` must outlive the driver.
std::unique_ptr<Driver> open_docker_driver(const nlohmann::json& spec, const DriverContext& context,
                                           http::Transport& transport);

} // namespace sandboxer::drivers::docker
