#pragma once

#include <filesystem>
#include <string>

namespace sandboxer::drivers::vm_packer {

// The SHA-256 of a disk image as 64 hex digits, from `sha256sum` (streaming, with a deadline).
// Remembered under $XDG_CACHE_HOME/sandboxer (or ~/.cache/sandboxer) by path, size, inode and
// modification time, so a multi-gigabyte image is read once, not at every create. Throws
// sandboxer::Error when it cannot be read.
std::string image_digest(const std::filesystem::path& image);

} // namespace sandboxer::drivers::vm_packer
