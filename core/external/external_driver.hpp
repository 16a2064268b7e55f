#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <sandboxer/driver.hpp>

namespace sandboxer::external {

// The factory of the external driver `name` at `path`: it runs the program and speaks the driver
// protocol with it (docs/driver-protocol.md). The handshake happens on first use; a failed one is
// a DriverError naming the program and quoting its stderr.
std::unique_ptr<DriverFactory> make_factory(const std::string& name,
                                            const std::filesystem::path& path);

// What the handshake told about an external driver: for `sandboxer drivers`.
struct Description {
  std::string description;
  Capabilities capabilities;
  nlohmann::json schema; // its profile section's JSON Schema, or null
  int protocol = 0;
};
// The factory's handshake (run now if it was not yet); throws DriverError when it fails. Only for
// factories made by make_factory.
const Description& describe(const DriverFactory& factory);

} // namespace sandboxer::external
