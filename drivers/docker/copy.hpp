#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include <sandboxer/driver.hpp>

#include "drivers/docker/engine_api.hpp"

// The parts of the docker driver's native `sandboxer cp` that are not calls: what the engine's stat
// means (docs/drivers/docker.md, "Copy").
namespace sandboxer::drivers::docker {

// The PathInfo of the engine's stat (X-Docker-Container-Path-Stat: a Go FileMode, where the type
// is in the high bits), before any link is followed.
PathInfo path_info_of_stat(const nlohmann::json& stat);

// What is at `path` in the container as stat(2) sees it: the engine's stat does not follow a final
// symbolic link, so a link is followed to its target (the engine gives it resolved in the
// container's root), a bounded number of times. A link to nothing is Kind::symlink.
PathInfo stat_following_links(EngineApi& api, const std::string& container,
                              const std::string& path);

} // namespace sandboxer::drivers::docker
