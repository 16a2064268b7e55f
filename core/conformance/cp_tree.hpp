#pragma once

#include <filesystem>
#include <string>

// The tree the conformance kit copies into a sandbox and back (`sandboxer drivers test`, the cp
// checks): each kind of entry a copy must keep as it is.
namespace sandboxer::conformance {

struct TreeOptions {
  bool large = true; // with the 50 MiB file
};

// Makes the tree under `root` (which must not exist): a file of all 256 byte values, an empty
// file, an empty directory, a 50 MiB file, a symbolic link, an executable, a name with spaces
// and UTF-8, and a file whose modification time is in 2001.
void make_copy_tree(const std::filesystem::path& root, const TreeOptions& options);

// How `copy` differs from `original` (names, kinds, bytes, permission bits, link targets, the
// old file's time), or "" when it is the same.
std::string tree_difference(const std::filesystem::path& original,
                            const std::filesystem::path& copy);

} // namespace sandboxer::conformance
