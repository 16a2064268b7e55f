// What the compose-ssh driver reads that it did not write: the user's compose file (a YAML
// document sent to a host) and the words docker prints about a container's state on the host.
// Neither may crash or hang; a bad file is an invalid_spec DriverError, nothing else.
#include <cstddef>
#include <cstdint>
#include <string>

#include <sandboxer/error.hpp>

#include "drivers/compose-ssh/compose_file.hpp"
#include "drivers/compose-ssh/host.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sandboxer::drivers::compose_ssh;
  std::string input(reinterpret_cast<const char*>(data), size);
  try {
    ComposeFile file = read_compose_file(input, "fuzz.yml");
    override_file(file, {.labels = {{"sandboxer.id", "sbx-fuzz"}},
                         .environment = {{"A", "b"}},
                         .images = {{file.services[0], "i"}},
                         .ports_service = file.services[0],
                         .ports = {"127.0.0.1::80/tcp"}});
  } catch (const sandboxer::DriverError& e) {
    if (e.kind() != sandboxer::DriverError::Kind::invalid_spec) {
      __builtin_trap();
    }
  }
  Container container{"id", "svc", "exited", input, "", {}};
  container.health();
  container.exit_code();
  return 0;
}
