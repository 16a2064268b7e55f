#pragma once

#include <optional>
#include <string>
#include <vector>

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::compose_ssh {

// What the driver needs from the user's compose file; the file itself is sent as it is.
struct ComposeFile {
  std::optional<std::string> version; // its `version:`, which the override file must repeat
  std::vector<std::string> services;  // in the file's order
};

// Reads `text` (the file at `path`, named in errors with line and column). Throws DriverError
// (invalid_spec) for YAML that does not parse or a file without services.
ComposeFile read_compose_file(const std::string& text, const std::string& path);

// The override file sent beside the user's file, as JSON (which YAML reads): every service gets
// `labels` and `environment`, and with `images` (restore) each its snapshot image.
std::string override_file(const ComposeFile& file, const Labels& labels,
                          const std::map<std::string, std::string>& environment,
                          const std::map<std::string, std::string>& images);

} // namespace sandboxer::drivers::compose_ssh
