#pragma once

#include <filesystem>
#include <string>

#include <sandboxer/driver.hpp>

// `sandboxer cp` for a sandbox that is a directory on this machine (the stub served over the
// protocol, tests/drivers/stub_external.cpp): the native copy methods against `root`, the
// sandbox's "/". Paths are the sandbox's own, absolute; a symbolic link is followed as the sandbox
// would see it (an absolute target starts from `root`, ".." never climbs above it), and an
// unpacked stream never writes outside `root`.
namespace sandboxer::directory_copy {

PathInfo stat_path(const std::filesystem::path& root, const std::string& path);
void copy_in(const std::filesystem::path& root, const std::string& directory, CopySource& source);
void copy_out(const std::filesystem::path& root, const std::string& path, bool follow,
              CopySink& sink);

} // namespace sandboxer::directory_copy
