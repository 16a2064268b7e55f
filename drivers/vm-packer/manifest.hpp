#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace sandboxer::drivers::vm_packer {

class ManifestError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// The disk image a Packer manifest (post-processor "manifest") names: the qcow2 file of the last
// build of the qemu builder, of the last run when the manifest says which that was. A relative
// file name resolves against `directory` (the manifest's). Throws ManifestError saying what is
// missing; never reads the image.
std::filesystem::path packer_image(const nlohmann::json& manifest,
                                   const std::filesystem::path& directory);

// The same from the file at `path`; a file that is not JSON is a ManifestError too.
std::filesystem::path packer_image_file(const std::filesystem::path& path);

} // namespace sandboxer::drivers::vm_packer
