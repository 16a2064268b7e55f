#pragma once

#include <sandboxer/driver.hpp>

namespace sandboxer::drivers::vm_packer {

// VMs from Packer-built qcow2 images, booted with QEMU (docs/drivers/vm-packer.md).
const DriverFactory& vm_packer_factory();

} // namespace sandboxer::drivers::vm_packer
