#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

// One private directory per fuzzer process, for targets whose parser reads a file.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "sandboxer-fuzz-XXXXXX").string();
    if (!mkdtemp(pattern.data())) {
      std::abort();
    }
    return std::filesystem::path(pattern);
  }();
  return dir;
}
