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

// What the override file adds to the user's services.
struct Overrides {
  Labels labels;                                  // on every service
  std::map<std::string, std::string> environment; // on every service
  std::map<std::string, std::string> images;      // restore: each service's snapshot image
  std::string ports_service;                      // the service that publishes `ports`
  std::vector<std::string> ports;                 // compose's short syntax (compose_port)
};

// The override file sent beside the user's file, as JSON (which YAML reads). compose appends
// its `ports` to the file's own.
std::string override_file(const ComposeFile& file, const Overrides& overrides);

} // namespace sandboxer::drivers::compose_ssh
