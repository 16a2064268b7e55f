#include "cli/registry.hpp"

#ifdef SANDBOXER_WITH_DOCKER
#include "drivers/docker/docker_driver.hpp"
#endif
#ifdef SANDBOXER_WITH_COMPOSE_SSH
#include "drivers/compose-ssh/compose_driver.hpp"
#endif
#ifdef SANDBOXER_WITH_VM_PACKER
#include "drivers/vm-packer/vm_driver.hpp"
#endif
#ifdef SANDBOXER_WITH_E2B
#include "drivers/e2b/e2b_driver.hpp"
#endif
#ifdef SANDBOXER_WITH_MODAL
#include "drivers/modal/modal_factory.hpp"
#endif
#ifdef SANDBOXER_WITH_STUB
#include "drivers/stub/stub_driver.hpp"
#endif

namespace sandboxer {

// One line per driver, no static self-registration. A driver of the design that this build
// leaves out (SANDBOXER_DRIVER_* options) or that is not written yet keeps its name here, so that
// a profile naming it is told so instead of being offered a different driver.
const std::vector<BuiltinDriver>& builtin_drivers() {
  static const std::vector<BuiltinDriver> table = {
#ifdef SANDBOXER_WITH_DOCKER
      {"docker", &drivers::docker::docker_factory()},
#else
      {"docker", nullptr},
#endif
#ifdef SANDBOXER_WITH_COMPOSE_SSH
      {"compose-ssh", &drivers::compose_ssh::compose_ssh_factory()},
#else
      {"compose-ssh", nullptr},
#endif
#ifdef SANDBOXER_WITH_VM_PACKER
      {"vm-packer", &drivers::vm_packer::vm_packer_factory()},
#else
      {"vm-packer", nullptr},
#endif
#ifdef SANDBOXER_WITH_E2B
      {"e2b", &drivers::e2b::e2b_factory()},
#else
      {"e2b", nullptr},
#endif
#ifdef SANDBOXER_WITH_MODAL
      {"modal", &drivers::modal::modal_factory()},
#else
      {"modal", nullptr},
#endif
#ifdef SANDBOXER_WITH_STUB
      {"stub", &drivers::stub::stub_factory()},
#else
      {"stub", nullptr},
#endif
  };
  return table;
}

} // namespace sandboxer
