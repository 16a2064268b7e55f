#pragma once

#include <sandboxer/driver.hpp>

// The SDK of external drivers: a DriverFactory written against include/sandboxer/driver.hpp (the
// interface the built-in drivers implement) becomes the executable `sandboxer-driver-NAME` with
//
//   int main() { return sandboxer::sdk::serve(my_factory()); }
//
// serve() speaks the driver protocol (docs/driver-protocol.md) on stdin and stdout: the handshake,
// every method, `output`/`input` notifications of exec, and the mapping of DriverError kinds and
// SpecError pointers to protocol errors. Link the CMake target sandboxer_sdk.
namespace sandboxer::sdk {

struct ServeOptions {
  int in_fd = 0;  // requests and `input` notifications
  int out_fd = 1; // responses and `output` notifications; logs go to stderr
  // The driver's scratch directory (DriverContext::data_dir); empty: $XDG_STATE_HOME (or
  // ~/.local/state) /sandboxer/drivers/NAME, as for a built-in driver with the default state dir.
  std::filesystem::path data_dir;
};

// Serves requests until stdin closes or sandboxer sends `shutdown`; returns the process's exit
// status (0). A line that is not JSON-RPC gets JSON-RPC's parse error and the conversation goes on.
int serve(const DriverFactory& factory, const ServeOptions& options = {});

} // namespace sandboxer::sdk
