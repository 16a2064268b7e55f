#pragma once

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::compose_ssh {

// A compose project on a remote host, over the system ssh client. docs/drivers/compose-ssh.md.
const DriverFactory& compose_ssh_factory();

} // namespace sandboxer::drivers::compose_ssh
